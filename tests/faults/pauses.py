#!/usr/bin/env python3
"""Stage 1's processing pause around each scaling step or restart, from its manifests.

  pauses.py --brokers HOST:PORT --raw TOPIC --manifest TOPIC --steps FILE [--after-ms N]

Every committed stage-1 transaction carries a manifest record (docs/FORMATS.md, "Manifests")
whose Kafka timestamp is the time its window closed and whose ranges name the raw partitions it
read. So for each raw partition the committed windows that covered it form a time line, and a
gap in it is a time that partition's events waited: while the producer keeps every partition
fed (tests/faults/scale.sh), a gap much longer than flush.ms is a pause of the group.

FILE has one line per step, "LABEL EPOCH_MS" (the step's start, e.g. the SIGTERM of a scale-down
or the first `start_stage` of a scale-up), in time order. A step's pause is the longest gap, over
every raw partition, among the gaps that end after the step and no later than the next step (the
last step: --after-ms, default 30000, after it): the stall the step caused, however long the
group took to settle. The baseline is the median gap over every partition and the whole run
(about flush.ms).

Prints one line per step, "pause LABEL MS PARTITION", then "pause baseline MS" and
"pause max MS". Exit 0; 1 when a step has no window after it at all (nothing measured).
"""
import argparse
import importlib.util
import json
import os
import statistics
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
    ap.add_argument("--manifest", required=True)
    ap.add_argument("--steps", required=True)
    ap.add_argument("--after-ms", type=int, default=30000)
    args = ap.parse_args()

    times = {}  # raw partition -> close times (ms) of the committed windows that read it

    def record(m):
        rec = json.loads(m.value())
        if rec["topic"] != args.raw:
            return
        _, ts = m.timestamp()
        for r in rec["ranges"]:
            if r["messages"] > 0:
                times.setdefault(r["partition"], []).append(ts)

    oracle.read_topic(args.brokers, args.manifest, record)
    gaps = []  # (end, length, partition)
    for p, ts in times.items():
        ts.sort()
        gaps.extend((b, b - a, p) for a, b in zip(ts, ts[1:]))
    if not gaps:
        print("pause: no committed windows")
        return 1
    status = 0
    worst = 0
    with open(args.steps) as f:
        steps = [line.split() for line in f if line.strip()]
    for i, (label, at) in enumerate(steps):
        at = int(at)
        until = int(steps[i + 1][1]) if i + 1 < len(steps) else at + args.after_ms
        hit = [g for g in gaps if at < g[0] <= until]
        if not hit:
            print(f"pause {label} none (no window between it and the next step)")
            status = 1
            continue
        end, length, p = max(hit, key=lambda g: g[1])
        worst = max(worst, length)
        print(f"pause {label} {length} {p}")
    print(f"pause baseline {int(statistics.median(g[1] for g in gaps))}")
    print(f"pause max {worst}")
    return status


if __name__ == "__main__":
    sys.exit(main())
