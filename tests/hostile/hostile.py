#!/usr/bin/env python3
"""The hostile corpus against a running pipeline: its producer and its dead-letter check.

  hostile.py produce --brokers B --topic T --corpus corpus.jsonl --rounds 5 --spread S --sent F
      Sends every corpus message `rounds` times, each round in a fresh random order at random
      moments spread over about S seconds, with the message's own key (none, empty or bytes).
      Idempotent producer, acks=all: each message lands exactly once. Writes to F, as JSON, the
      partition and offset of every copy; exits 1 if any copy was not acknowledged.

  hostile.py check --brokers B --raw T --dlq D --corpus corpus.jsonl --sent F --store-dump TSV
                   [--max-bytes 4096]
      Reads the dead-letter topic (read_committed) and checks, for every corpus message, that
      each copy sent to an invalid one is there exactly once (hotcount-source names its raw
      offset) with exactly the expected hotcount-error reason, the original key, and the
      original bytes, or for a message over what stage 1 may send, its first max-bytes bytes
      with hotcount-truncated-from giving the original length (likewise a 1 MB key: its first
      1024 bytes, hotcount-key-truncated-from); that no copy of a valid message
      and nothing else is there; and that each valid message's post has the expected count in
      the store dump (`hotcount get --all`). Exit 0 when all holds, 1 with a report otherwise.
"""
import argparse
import importlib.util
import json
import os
import random
import sys
import time

from confluent_kafka import Producer

# The dead-letter topic is read with the oracle's reader (its own Kafka client, read_committed).
sys.dont_write_bytecode = True  # no __pycache__ beside the oracle, which is not ours
ORACLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "oracle", "oracle.py")
spec = importlib.util.spec_from_file_location("hc_oracle", ORACLE)
oracle = importlib.util.module_from_spec(spec)
spec.loader.exec_module(oracle)


KEY_CUT = 1024  # stage 1's DLQ_KEY_MAX: docs/FORMATS.md "Dead letters"


def load_corpus(path):
    entries = []
    with open(path) as f:
        for line in f:
            e = json.loads(line)
            if "value_gen" in e:
                g = e["value_gen"]
                e["value"] = (bytes.fromhex(g["prefix_hex"]) + bytes.fromhex(g["fill_hex"]) *
                              g["count"] + bytes.fromhex(g["suffix_hex"]))
            else:
                e["value"] = None if e["value_hex"] is None else bytes.fromhex(e["value_hex"])
            if "key_gen" in e:
                e["key"] = bytes.fromhex(e["key_gen"]["fill_hex"]) * e["key_gen"]["count"]
            else:
                e["key"] = None if e["key_hex"] is None else bytes.fromhex(e["key_hex"])
            entries.append(e)
    return entries


def produce(args):
    entries = load_corpus(args.corpus)
    p = Producer({"bootstrap.servers": args.brokers, "enable.idempotence": True, "acks": "all",
                  "linger.ms": 5,
                  # the 1 MB message: Kafka's default broker limit is 1 MiB + 12 bytes per batch
                  "message.max.bytes": 1048576, "batch.size": 1048576})
    sent = []
    failed = []

    def on_delivery(index):
        def cb(err, msg):
            if err is not None:
                failed.append((entries[index]["name"], str(err)))
            else:
                sent.append({"index": index, "partition": msg.partition(),
                             "offset": msg.offset()})
        return cb

    rng = random.Random(args.seed)
    order = []
    for _ in range(args.rounds):
        round_order = list(range(len(entries)))
        rng.shuffle(round_order)
        order += round_order
    pause = args.spread / max(1, len(order))
    for index in order:
        e = entries[index]
        kwargs = {"value": e["value"], "on_delivery": on_delivery(index)}
        if e["key"] is not None:
            kwargs["key"] = e["key"]
        while True:
            try:
                p.produce(args.topic, **kwargs)
                break
            except BufferError:
                p.poll(0.1)
        p.poll(0)
        time.sleep(rng.uniform(0, 2 * pause))
    left = p.flush(60)
    with open(args.sent, "w") as f:
        json.dump(sent, f)
    print(f"hostile: sent {len(sent)} of {len(order)} copies of {len(entries)} messages "
          f"({args.rounds} rounds)")
    if failed or left or len(sent) != len(order):
        for name, err in failed[:20]:
            print(f"hostile: {name}: not delivered: {err}")
        return 1
    return 0


def show(data, limit=80):
    if data is None:
        return "null"
    text = repr(data[:limit])
    return text + (f"... ({len(data)} bytes)" if len(data) > limit else "")


def check(args):
    entries = load_corpus(args.corpus)
    with open(args.sent) as f:
        sent = json.load(f)
    by_source = {f"{args.raw}/{s['partition']}/{s['offset']}": s["index"] for s in sent}
    copies = [0] * len(entries)
    for s in sent:
        copies[s["index"]] += 1
    problems = []
    seen = [0] * len(entries)
    sources = set()
    truncated = []
    total = [0]

    def dead(m):
        total[0] += 1
        headers = {}
        for k, v in m.headers() or []:
            if k in headers:
                problems.append(f"dead letter at {m.partition()}/{m.offset()} repeats header {k}")
            headers[k] = v
        src = (headers.get("hotcount-source") or b"").decode(errors="replace")
        reason = (headers.get("hotcount-error") or b"").decode(errors="replace")
        if src in sources:
            problems.append(f"{src}: two dead letters")
        sources.add(src)
        if src not in by_source:
            problems.append(f"dead letter for {src} ({reason}), which is no hostile message: "
                            f"value {show(m.value())}")
            return
        e = entries[by_source[src]]
        seen[by_source[src]] += 1
        if e["expect"] == "ok":
            problems.append(f"{e['name']}: valid, yet dead-lettered as {reason} ({src})")
            return
        if reason != e["expect"]:
            problems.append(f"{e['name']}: reason {reason}, want {e['expect']} ({src})")
        key_cut_from = headers.get("hotcount-key-truncated-from")
        if "key_gen" in e:
            # a key too big for a dead letter: its first KEY_CUT bytes, the cut marked
            truncated.append(e["name"] + " (key)")
            if key_cut_from != str(len(e["key"])).encode():
                problems.append(f"{e['name']}: hotcount-key-truncated-from {key_cut_from!r}, "
                                f"want {len(e['key'])} ({src})")
            if m.key() != e["key"][:KEY_CUT]:
                problems.append(f"{e['name']}: key {show(m.key())}, want the first {KEY_CUT} "
                                f"bytes of the original ({src})")
        elif key_cut_from is not None or m.key() != e["key"]:
            problems.append(f"{e['name']}: key {show(m.key())} (cut from {key_cut_from!r}), "
                            f"want {show(e['key'])} ({src})")
        value = m.value()
        orig = e["value"]
        cut_from = headers.get("hotcount-truncated-from")
        if cut_from is not None:
            truncated.append(e["name"])
            if cut_from != str(len(orig or b"")).encode():
                problems.append(f"{e['name']}: hotcount-truncated-from {cut_from!r}, "
                                f"want {len(orig or b'')}")
            if value != (orig or b"")[:args.max_bytes]:
                problems.append(f"{e['name']}: truncated value {show(value)} is not the first "
                                f"{args.max_bytes} bytes of the original")
        elif value != orig:
            problems.append(f"{e['name']}: value {show(value)}, want the original "
                            f"{show(orig)} ({src})")

    oracle.read_topic(args.brokers, args.dlq, dead)
    for i, e in enumerate(entries):
        want = 0 if e["expect"] == "ok" else copies[i]
        if seen[i] != want:
            problems.append(f"{e['name']} ({e['expect']}): {seen[i]} dead letters for "
                            f"{copies[i]} copies sent, want {want}")

    # valid messages: their posts' counts in the store
    stored = {}
    with open(args.store_dump, "rb") as f:
        for line in f:
            post, _, n = line.rstrip(b"\n").rpartition(b"\t")
            stored[post] = int(n)
    want_counts = {}
    for i, e in enumerate(entries):
        if e["expect"] == "ok":
            post = bytes.fromhex(e["post_hex"])
            want_counts[post] = want_counts.get(post, 0) + copies[i] * e["delta"]
    for post, want in sorted(want_counts.items()):
        got = stored.get(post, 0)
        if got != want:
            problems.append(f"post {show(post)}: store {got}, want {want}")

    n_invalid = sum(1 for e in entries if e["expect"] != "ok")
    print(f"hostile: {args.dlq}: {total[0]} dead letters; {n_invalid} invalid messages x their "
          f"copies checked (reason, key, bytes), truncated: {sorted(set(truncated)) or 'none'}; "
          f"{len(want_counts)} posts of valid messages checked in the store")
    if problems:
        print("hostile: FAILED")
        for p in problems[:60]:
            print("  " + p)
        if len(problems) > 60:
            print(f"  ... and {len(problems) - 60} more")
        return 1
    print("hostile: every hostile message handled as expected")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    pp = sub.add_parser("produce")
    pp.add_argument("--brokers", required=True)
    pp.add_argument("--topic", required=True)
    pp.add_argument("--corpus", required=True)
    pp.add_argument("--sent", required=True)
    pp.add_argument("--rounds", type=int, default=5)
    pp.add_argument("--spread", type=float, default=5.0, help="seconds to spread the sends over")
    pp.add_argument("--seed", type=int, default=None)
    cp = sub.add_parser("check")
    cp.add_argument("--brokers", required=True)
    cp.add_argument("--raw", required=True)
    cp.add_argument("--dlq", required=True)
    cp.add_argument("--corpus", required=True)
    cp.add_argument("--sent", required=True)
    cp.add_argument("--store-dump", required=True)
    cp.add_argument("--max-bytes", type=int, default=4096)
    args = ap.parse_args()
    return produce(args) if args.cmd == "produce" else check(args)


if __name__ == "__main__":
    sys.exit(main())
