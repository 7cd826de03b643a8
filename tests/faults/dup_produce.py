#!/usr/bin/env python3
"""A producer that retries the way a non-idempotent one does: every event it sends is in the log
twice, byte for byte (same key, same value, same event_id).

  dup_produce.py --brokers HOST:PORT --topic TOPIC --posts N [--prefix P]

Sends one like each for the posts P1..PN (string post ids, user "u<i>", a fixed ts and event_id
"P<i>"); the first half of the posts has each message sent twice in a row (a retry after a lost
acknowledgement), the second half has all its messages sent once and then all again (a whole
batch re-sent). enable.idempotence is off, so the broker keeps both copies. Prints
`dup_produce: N events, 2N messages` once every message is acknowledged; exit 1 on any failure.
"""
import argparse
import json
import sys

from confluent_kafka import Producer


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--brokers", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--posts", type=int, required=True)
    ap.add_argument("--prefix", default="dup-")
    args = ap.parse_args()

    p = Producer({"bootstrap.servers": args.brokers, "enable.idempotence": False, "acks": "all",
                  "linger.ms": 5})
    failed = [0]
    acked = [0]

    def done(err, _msg):
        if err:
            failed[0] += 1
        else:
            acked[0] += 1

    def message(i):
        post = f"{args.prefix}{i}"
        value = json.dumps({"post_id": post, "user_id": f"u{i}", "op": "like",
                            "ts": 1700000000000 + i, "event_id": post}, separators=(",", ":"))
        return f"{post}#0".encode(), value.encode()

    half = args.posts // 2
    for i in range(1, half + 1):  # each sent twice in a row
        k, v = message(i)
        for _ in range(2):
            p.produce(args.topic, key=k, value=v, on_delivery=done)
            p.poll(0)
    for _ in range(2):  # the second half: all once, then all again
        for i in range(half + 1, args.posts + 1):
            k, v = message(i)
            p.produce(args.topic, key=k, value=v, on_delivery=done)
            p.poll(0)
    left = p.flush(60)
    if left or failed[0] or acked[0] != 2 * args.posts:
        print(f"dup_produce: {acked[0]} acknowledged, {failed[0]} failed, {left} unsent",
              file=sys.stderr)
        return 1
    print(f"dup_produce: {args.posts} events, {acked[0]} messages")
    return 0


if __name__ == "__main__":
    sys.exit(main())
