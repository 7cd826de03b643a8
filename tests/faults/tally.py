#!/usr/bin/env python3
"""Lost and double-counted likes: recounts likes.raw with the oracle's rules and compares.

  tally.py --brokers HOST:PORT --raw TOPIC --store-dump FILE [--max-bytes N] [--counts-topic T]

Reads TOPIC from its first offset with tests/oracle/oracle.py's own reader and validate() (its
Kafka client and the contract's rules, not hotcount's parser), reads a `hotcount get --all` dump,
and prints, summed over every post, lost = max(0, recount - store) and duplicated =
max(0, store - recount). The last line is machine-readable: `tally: lost=L duplicated=D posts=P`.
Exit 0 when both are zero, 1 otherwise. With --counts-topic it also reports (without failing)
how many posts' latest changelog total differs from the store: a stage 2 killed between a store
commit and the delivery of that batch's changelog records leaves them stale until the post
changes again (docs/FORMATS.md, "Counts changelog").
"""
import argparse
import importlib.util
import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ beside the oracle, which is not ours
ORACLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "oracle", "oracle.py")
spec = importlib.util.spec_from_file_location("hc_oracle", ORACLE)
oracle = importlib.util.module_from_spec(spec)
spec.loader.exec_module(oracle)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--brokers", required=True)
    ap.add_argument("--raw", required=True)
    ap.add_argument("--store-dump", required=True)
    ap.add_argument("--max-bytes", type=int, default=4096)
    ap.add_argument("--counts-topic")
    args = ap.parse_args()

    recount = {}
    seen = [0, 0]  # valid, malformed

    def count(m):
        try:
            post, delta = oracle.validate(m.value(), args.max_bytes)
        except oracle.Invalid:
            seen[1] += 1
            return
        seen[0] += 1
        recount[post] = recount.get(post, 0) + delta

    oracle.read_topic(args.brokers, args.raw, count)

    stored = {}
    with open(args.store_dump, "rb") as f:
        for line in f:
            post, _, n = line.rstrip(b"\n").rpartition(b"\t")
            stored[post] = stored.get(post, 0) + int(n)

    lost = duplicated = differ = 0
    worst = []
    for post in set(recount) | set(stored):
        diff = stored.get(post, 0) - recount.get(post, 0)
        if diff:
            differ += 1
            worst.append((abs(diff), post, recount.get(post, 0), stored.get(post, 0)))
        if diff < 0:
            lost -= diff
        else:
            duplicated += diff
    print(f"tally: {args.raw}: {seen[0]} valid, {seen[1]} malformed, {len(recount)} posts; "
          f"store: {len(stored)} posts")
    for _, post, want, got in sorted(worst, reverse=True)[:10]:
        print(f"tally:   post {post.decode(errors='replace')}: recount {want}, store {got}")
    if args.counts_topic:
        latest = {}

        def changelog(m):
            latest[m.key()] = oracle.json.loads(m.value())["likes"]

        # read_committed: an aborted (fenced zombie's) total is no total (oracle.py says why)
        oracle.read_topic(args.brokers, args.counts_topic, changelog)
        stale = [p for p in set(stored) | set(latest) if latest.get(p, 0) != stored.get(p, 0)]
        never = sum(1 for p in stale if p not in latest)
        print(f"tally: {args.counts_topic}: {len(latest)} posts, {len(stale)} stale "
              f"({never} never published)")
    print(f"tally: lost={lost} duplicated={duplicated} posts={differ}")
    return 0 if lost == 0 and duplicated == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
