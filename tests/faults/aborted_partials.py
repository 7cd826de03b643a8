#!/usr/bin/env python3
"""Leaves an aborted transaction of partials in the partials topic.

  aborted_partials.py --brokers HOST:PORT --topic PARTIALS [--posts 50] [--delta 1000]

What a stage 1 killed after producing its window's partials but before its commit leaves in the
log: a transactional producer of its own (confluent-kafka, transactional.id `zombie-<pid>-<ms>`)
writes one partial per post "1".."N" with `delta` likes, flushes them to the broker, and aborts.
Stage 2 reads read_committed and must never count them; a stage 2 that reads read_uncommitted
counts N × delta likes too many. Exit 0 when the records were written and the transaction aborted.
"""
import argparse
import json
import os
import sys
import time

from confluent_kafka import Producer


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--brokers", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--posts", type=int, default=50)
    ap.add_argument("--delta", type=int, default=1000)
    args = ap.parse_args()

    txn_id = f"zombie-{os.getpid()}-{int(time.time() * 1000)}"
    p = Producer({"bootstrap.servers": args.brokers, "transactional.id": txn_id,
                  "linger.ms": 5})
    p.init_transactions(60)
    p.begin_transaction()
    delivered = []
    for post in range(1, args.posts + 1):
        value = json.dumps({"post_id": str(post), "delta": args.delta, "events": args.delta,
                            "ts_min": None, "ts_max": None}, separators=(",", ":"))
        p.produce(args.topic, key=str(post), value=value,
                  on_delivery=lambda err, msg: delivered.append(err is None))
    # on the broker before the abort: abort_transaction would purge what is still queued
    left = p.flush(60)
    if left or len(delivered) != args.posts or not all(delivered):
        print(f"aborted_partials: only {sum(delivered)} of {args.posts} partials reached the broker")
        return 1
    p.abort_transaction(60)
    print(f"aborted_partials: {args.posts} partials of {args.delta:+d} likes written to "
          f"{args.topic} in transaction {txn_id}, then aborted")
    return 0


if __name__ == "__main__":
    sys.exit(main())
