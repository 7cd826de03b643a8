#!/usr/bin/env python3
"""Stage 1's committed offset ranges must tile every raw partition exactly once.

  tiling.py --brokers HOST:PORT --raw TOPIC --manifest TOPIC [--partials TOPIC] [--allow-holes]

With topic.manifest set, every stage-1 transaction carries one manifest record: per raw
partition, the range [first, next) of offsets the window consumed and how many messages it
processed there (include/core/hotcount/manifest.h). An aborted transaction's manifest is aborted with
its partials, so reading the manifest topic read_committed (with tests/oracle/oracle.py's
reader) gives exactly the windows whose counts reached stage 2. For every partition of the raw
topic this checks that those ranges, sorted, start at the low watermark, follow each other
without gap or overlap, and end at the high watermark:

  * a gap: raw offsets that no committed window consumed, so likes lost in stage 1;
  * an overlap: offsets that two committed windows consumed, so likes counted twice;
  * a hole: a window that skipped offsets inside its own range (messages < next - first); a raw
    topic written only by non-transactional producers has no offsets without a message, so this
    is a failure too unless --allow-holes (raw producers that use transactions leave markers).

With --partials, stage 1's output is checked against the same manifests: each manifest also
says how many partials its window committed, and the sum of their events and of their likes
(from the window's table, not from what was produced), so the committed partials, read
read_committed, must add up to exactly those three totals ("conservation"): a partial lost or
duplicated between the table and the topic shows here, before any store is involved.

Equal counts can hide a loss and a duplicate on the same post; this cannot. The first line is
the verdict, `tiling: exact: …` or `tiling: FAILED: …`, then one line per gap, overlap or hole
(at most 20 of each). Exit 0 when exact, 1 otherwise.
"""
import argparse
import importlib.util
import json
import os
import sys

from confluent_kafka import Consumer, TopicPartition

sys.dont_write_bytecode = True  # no __pycache__ beside the oracle, which is not ours
ORACLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "oracle", "oracle.py")
spec = importlib.util.spec_from_file_location("hc_oracle", ORACLE)
oracle = importlib.util.module_from_spec(spec)
spec.loader.exec_module(oracle)
# the partials' decoder, both formats (tools/partials_pack.py)
PACK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools",
                    "partials_pack.py")
spec = importlib.util.spec_from_file_location("hc_partials_pack", PACK)
partials_pack = importlib.util.module_from_spec(spec)
spec.loader.exec_module(partials_pack)

SHOWN = 20


def watermarks(brokers, topic):
    """{partition: (low, high)} for every partition of topic, empty ones included."""
    c = Consumer({"bootstrap.servers": brokers, "group.id": "tiling-watermarks",
                  "enable.auto.commit": False})
    md = c.list_topics(topic, timeout=30)
    if topic not in md.topics or md.topics[topic].error:
        raise SystemExit(f"tiling: topic {topic} not found")
    marks = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
             for p in sorted(md.topics[topic].partitions)}
    c.close()
    return marks


def tile(marks, ranges, allow_holes):
    """Returns (problems by kind, offsets covered). ranges: {partition: [(first, next, messages,
    writer)]}."""
    problems = {"gap": [], "overlap": [], "hole": [], "foreign": []}
    covered = 0
    for p in sorted(set(ranges) - set(marks)):
        problems["foreign"].append(f"partition {p}: {len(ranges[p])} ranges, but the raw topic "
                                   f"has no such partition")
    for p, (low, high) in sorted(marks.items()):
        cursor, prev = low, "the low watermark"
        for first, nxt, messages, who in sorted(ranges.get(p, [])):
            if nxt <= low:
                continue  # deleted by retention since
            start = max(first, low)
            if start > cursor:
                problems["gap"].append(f"partition {p}: [{cursor}, {start}) consumed by no "
                                       f"committed window ({start - cursor} offsets, after "
                                       f"{prev}, before {who})")
            elif start < cursor:
                end = min(cursor, nxt)
                problems["overlap"].append(f"partition {p}: [{start}, {end}) consumed by "
                                           f"{prev} and again by {who} ({end - start} offsets)")
            if messages != nxt - first and not allow_holes:
                problems["hole"].append(f"partition {p}: {who} consumed [{first}, {nxt}) but "
                                        f"processed {messages} messages, not {nxt - first}")
            covered += max(0, nxt - max(start, cursor))
            if nxt > cursor:
                cursor, prev = nxt, who
        if cursor < high:
            problems["gap"].append(f"partition {p}: [{cursor}, {high}) consumed by no committed "
                                   f"window ({high - cursor} offsets, after {prev}, up to the "
                                   f"high watermark)")
        elif cursor > high:
            problems["foreign"].append(f"partition {p}: committed ranges reach {cursor}, past "
                                       f"the high watermark {high}")
    return problems, covered


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--brokers", required=True)
    ap.add_argument("--raw", required=True)
    ap.add_argument("--manifest", required=True)
    ap.add_argument("--partials", help="stage 1's output topic: its committed partials must add "
                    "up to the committed manifests' partials, events and likes")
    ap.add_argument("--allow-holes", action="store_true")
    args = ap.parse_args()

    marks = watermarks(args.brokers, args.raw)
    ranges = {}
    stats = {"records": 0, "incarnations": set(), "instances": set(), "inconsistent": []}
    promised = [0, 0, 0]  # partials, events, likes, over every committed manifest

    def record(m):
        rec = json.loads(m.value())
        if rec["topic"] != args.raw:
            return  # another pipeline sharing the manifest topic
        stats["records"] += 1
        promised[0] += rec["partials"]
        promised[1] += rec["events"]
        promised[2] += rec["likes"]
        stats["instances"].add(rec["instance_id"])
        stats["incarnations"].add((rec["instance_id"], rec["incarnation_ms"]))
        who = f"{rec['instance_id']}@{rec['incarnation_ms']} window {rec['window']}"
        messages = 0
        for r in rec["ranges"]:
            ranges.setdefault(r["partition"], []).append((r["first"], r["next"], r["messages"],
                                                           who))
            messages += r["messages"]
        if messages != rec["events"] + rec["invalid"]:
            stats["inconsistent"].append(f"{who}: {messages} messages in its ranges, but "
                                         f"{rec['events']} events + {rec['invalid']} invalid")

    oracle.read_topic(args.brokers, args.manifest, record)
    problems, covered = tile(marks, ranges, args.allow_holes)
    problems["inconsistent"] = stats["inconsistent"]
    problems["conservation"] = []
    if args.partials:
        found = [0, 0, 0]

        def partial(m):
            # a packed record carries many posts: the manifests count posts
            for _, delta, events, _, _ in partials_pack.entries(m.value()):
                found[0] += 1
                found[1] += events
                found[2] += delta

        oracle.read_topic(args.brokers, args.partials, partial)
        for what, want, got in zip(("partials", "events in partials", "likes in partials"),
                                   promised, found):
            if want != got:
                problems["conservation"].append(f"committed manifests promise {want} {what}, "
                                                f"{args.partials} holds {got}")
    total = sum(high - low for low, high in marks.values())
    summary = (f"{len(marks)} partitions of {args.raw}, {covered} of {total} offsets, "
               f"{stats['records']} committed transactions from {len(stats['incarnations'])} "
               f"incarnations of {len(stats['instances'])} instances")
    if args.partials and not problems["conservation"]:
        summary += (f"; {args.partials} holds the {promised[0]} partials ({promised[1]} events, "
                    f"{promised[2]} likes) the manifests promise")
    found = {kind: items for kind, items in problems.items() if items}
    if not found:
        print(f"tiling: exact: {summary}")
        return 0
    print("tiling: FAILED: " + ", ".join(f"{len(items)} {kind}" + ("s" if len(items) != 1 else "")
                                          for kind, items in found.items()) + f"; {summary}")
    for kind, items in found.items():
        for line in items[:SHOWN]:
            print(f"tiling:   {kind}: {line}")
        if len(items) > SHOWN:
            print(f"tiling:   ... and {len(items) - SHOWN} more {kind}s")
    return 1


if __name__ == "__main__":
    sys.exit(main())
