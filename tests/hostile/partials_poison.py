#!/usr/bin/env python3
"""Poison for stage 2 (records in likes.partials that no stage 1 writes) and raw messages with a
1 MB key, for tests/hostile/partials_poison.sh, which writes them with kcat; and the check of
what the pipeline made of them.

  partials_poison.py inputs DIR
      Writes DIR/preload.in (a legal partial that brings a post near the limit: sent first, on
      its own), DIR/partials.in (the other poison partials but two, kcat -K '\\t' input:
      KEY<TAB>VALUE per line), DIR/null.in (one partial with a NULL value, for kcat -Z),
      DIR/near_delta.in (the delta that overflows the preloaded count) and DIR/raw-*.in (the raw
      messages, one per file: a 1 MB key is too big to batch with another).

  partials_poison.py metric HOST:PORT REASON
      Prints hotcount_partials_invalid_total{reason=REASON} of a stage 2 (0 when absent).

  partials_poison.py check --brokers B --partials T --dlq2 D --dlq1 D1 --rounds R
                           --metrics HOST:PORT --store-dump TSV --verify-out FILE
      After R rounds of the same poison: every copy of every poison partial is in the
      partials topic; each one that must be refused is in stage 2's dead-letter topic exactly
      once, with a reason it may have (hotcount-error) and a hotcount-source naming its own
      topic/partition/offset, its key and bytes (store_refused: its fields, re-encoded); no
      other partial is there; stage 2's hotcount_partials_invalid_total{reason} equals the dead
      letters of each reason and its end-to-end histogram is not negative; every poison post
      holds exactly what its counted partials add up to, and `hotcount verify` found those posts
      and no other one different from its recount; the raw message with a 1 MB key and a bad
      value is in stage 1's dead-letter topic with its key cut to 1024 bytes and marked.
      Exit 0 when all holds, 1 with a report.
"""
import argparse
import importlib.util
import json
import os
import re
import sys
import urllib.request

sys.dont_write_bytecode = True  # no __pycache__ beside the oracle, which is not ours
ORACLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "oracle", "oracle.py")
spec = importlib.util.spec_from_file_location("hc_oracle", ORACLE)
oracle = importlib.util.module_from_spec(spec)
spec.loader.exec_module(oracle)

INT64_MAX = 2**63 - 1
KEY_CUT = 1024  # stage 1's DLQ_KEY_MAX (docs/FORMATS.md, "Dead letters")
BIG_KEY = b"k" * 1000000


def partial(post, delta, events, ts_min="null", ts_max="null"):
    """A partial as stage 1 encodes it (docs/FORMATS.md, "Partials"); post is JSON string text."""
    return (f'{{"post_id":"{post}","delta":{delta},"events":{events},'
            f'"ts_min":{ts_min},"ts_max":{ts_max}}}').encode()


# name: (key, value, [what round 1 may do, what round 2 may do], delta counted per round)
# "count" means the record is valid and counted; otherwise the reasons it may be dead-lettered
# with. Only the records whose outcome depends on stage 2's window boundaries (wall clock: two
# records a few ms apart share a window unless a boundary falls between them) have two reasons.
COUNT = "count"
P = 5 * 10**18  # two of them overflow int64 in one window
NEAR = 8 * 10**18  # a stored count near the limit (exact in a double, below Redis's 9e18)
POISON = {
    "garbage": (b"poison-garbage", b"\xff\xfe\x00{garbage", [{"partial_undecodable"}] * 2, 0),
    "empty": (b"poison-empty", b"", [{"partial_undecodable"}] * 2, 0),
    "not_object": (b"poison-array", b"[1,2,3]", [{"partial_undecodable"}] * 2, 0),
    "nul_post_id": (b"poison-nul", partial("poison-nul\\u0000x", 1, 1),
                    [{"partial_bad_post_id"}] * 2, 0),
    "control_post_id": (b"poison-ctrl", partial("poison-ctrl\\u0007\\u001b[31m", 1, 1),
                        [{"partial_bad_post_id"}] * 2, 0),
    "delta_over_events": (b"poison-delta", partial("poison-delta", 10**9, 1),
                          [{"partial_delta_exceeds_events"}] * 2, 0),
    # one window: the first counts (round 1), the second would take the sum past int64; a
    # window boundary between them makes it the store's overflow instead. In round 2 the first
    # overflows the stored P.
    "pair_first": (b"poison-pair", partial("poison-pair", P, P),
                   [COUNT, {"store_refused"}], P),
    "pair_second": (b"poison-pair", partial("poison-pair", P - 1, P - 1),
                    [{"partial_overflow", "store_refused"}] * 2, 0),
    # stored first, alone (the script waits for it: its events, 8e18, would overflow the
    # window's event total beside the pair's), then a delta that takes it past int64 (and
    # Redis's 9e18); round 2's preload overflows the stored NEAR itself.
    "near_preload": (b"poison-near", partial("poison-near", NEAR, NEAR),
                     [COUNT, {"store_refused"}], NEAR),
    "near_delta": (b"poison-near", partial("poison-near", 15 * 10**17, 15 * 10**17),
                   [{"store_refused"}] * 2, 0),
    # absurd but legal timestamps: counted, and stage 2's latency arithmetic must not overflow
    "ts_min_legal": (b"poison-tsmin", partial("poison-tsmin", 1, 1, -INT64_MAX, -INT64_MAX),
                     [COUNT] * 2, 1),
    "ts_max_legal": (b"poison-tsmax", partial("poison-tsmax", -1, 1, INT64_MAX, INT64_MAX),
                     [COUNT] * 2, -1),
    "ts_reserved": (b"poison-tsres", partial("poison-tsres", 1, 1, -INT64_MAX - 1, 0),
                    [{"partial_undecodable"}] * 2, 0),
    "ts_out_of_order": (b"poison-tsord", partial("poison-tsord", 1, 1, 5, 4),
                        [{"partial_bad_ts"}] * 2, 0),
    "ts_half_null": (b"poison-tshalf", partial("poison-tshalf", 1, 1, "null", 4),
                     [{"partial_bad_ts"}] * 2, 0),
    "null_value": (b"poison-null", None, [{"partial_undecodable"}] * 2, 0),
}
# raw messages for stage 1: (key, value); the oracle checks how each is counted or
# dead-lettered, this script the cut of the key
RAW = {
    "raw-bigkey-ok": (BIG_KEY, b'{"post_id":"hugekey-ok"}'),
    "raw-bigkey-bad": (BIG_KEY, b"not json"),
    "raw-ts-min": (b"tsmin", b'{"post_id":"tsmin-raw","ts":-9223372036854775807}'),
}


def inputs(args):
    os.makedirs(args.dir, exist_ok=True)
    with open(os.path.join(args.dir, "partials.in"), "wb") as f:
        for name, (key, value, _, _) in POISON.items():
            if name not in ("near_preload", "near_delta", "null_value"):
                assert b"\t" not in key and b"\n" not in key + value
                f.write(key + b"\t" + value + b"\n")
    with open(os.path.join(args.dir, "null.in"), "wb") as f:
        f.write(POISON["null_value"][0] + b"\t\n")
    for name in ("near_preload", "near_delta"):
        with open(os.path.join(args.dir, name.split("_")[1] + ".in"), "wb") as f:
            key, value = POISON[name][:2]
            f.write(key + b"\t" + value + b"\n")
    for name, (key, value) in RAW.items():
        with open(os.path.join(args.dir, name + ".in"), "wb") as f:
            f.write(key + b"\t" + value + b"\n")
    return 0


def show(data, limit=60):
    if data is None:
        return "null"
    text = repr(data[:limit])
    return text + (f"... ({len(data)} bytes)" if len(data) > limit else "")


def scrape(addr):
    with urllib.request.urlopen(f"http://{addr}/metrics", timeout=10) as r:
        text = r.read().decode()
    samples = {}
    for line in text.splitlines():
        m = re.match(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$', line)
        if m:
            samples[(m.group(1), m.group(2) or "")] = float(m.group(3))
    return samples


def check(args):
    problems = []
    # every record of the partials topic: stage 1's and the poison, by source
    records = {}

    def keep(m):
        records[f"{m.topic()}/{m.partition()}/{m.offset()}"] = (m.key(), m.value())

    oracle.read_topic(args.brokers, args.partials, keep)
    # each poison copy's source, in offset order (one key: one partition), so copy i is round i
    copies = {name: [] for name in POISON}
    for src, (key, value) in records.items():
        for name, (pkey, pvalue, _, _) in POISON.items():
            # a client may read an empty value as null: the keys tell those two apart
            if key == pkey and (value or b"") == (pvalue or b""):
                copies[name].append(src)
    for name in copies:
        copies[name].sort(key=lambda s: int(s.rsplit("/", 1)[1]))
        if len(copies[name]) != args.rounds:
            problems.append(f"{name}: {len(copies[name])} copies in {args.partials}, "
                            f"want {args.rounds} (kcat)")
    round_of = {src: (name, i) for name, srcs in copies.items() for i, src in enumerate(srcs)}

    dead = {}
    by_reason = {}

    def dead_letter(m):
        headers = dict(m.headers() or [])
        src = (headers.get("hotcount-source") or b"").decode(errors="replace")
        reason = (headers.get("hotcount-error") or b"").decode(errors="replace")
        by_reason[reason] = by_reason.get(reason, 0) + 1
        if src in dead:
            problems.append(f"{src}: two dead letters ({dead[src][0]}, {reason})")
        dead[src] = (reason, m.key(), m.value())

    oracle.read_topic(args.brokers, args.dlq2, dead_letter)
    for src, (reason, key, value) in sorted(dead.items()):
        if src not in round_of:
            orig = records.get(src)
            problems.append(f"dead letter {reason} for {src}, which is no poison record "
                            f"({'not in ' + args.partials if orig is None else show(orig[1])})")
            continue
        name, r = round_of[src]
        want = POISON[name][2][r]
        if want == COUNT:
            problems.append(f"{name} (round {r + 1}, {src}): valid, yet dead-lettered as {reason}")
            continue
        if reason not in want:
            problems.append(f"{name} (round {r + 1}, {src}): reason {reason}, want "
                            f"{' or '.join(sorted(want))}")
        okey, ovalue = records[src]
        if reason == "store_refused":
            # the partial as stage 2 decoded it, encoded again: the same fields
            if key != json.loads(ovalue)["post_id"].encode() or json.loads(value) != json.loads(
                    ovalue):
                problems.append(f"{name} ({src}): store_refused dead letter {show(key)} "
                                f"{show(value)}, want the fields of {show(ovalue)}")
        elif key != okey or (value or b"") != (ovalue or b""):
            problems.append(f"{name} ({src}): dead letter {show(key)} {show(value)}, want the "
                            f"original {show(okey)} {show(ovalue)}")
    for name, srcs in copies.items():
        for r, src in enumerate(srcs):
            if POISON[name][2][r] != COUNT and src not in dead:
                problems.append(f"{name} (round {r + 1}, {src}): not dead-lettered")

    # the metric counted each dead letter, by reason
    samples = scrape(args.metrics)
    metric = {}
    for (name, labels), v in samples.items():
        m = re.search(r'reason="([^"]*)"', labels)
        if name == "hotcount_partials_invalid_total" and m:
            metric[m.group(1)] = int(v)
    for reason in sorted(set(metric) | set(by_reason)):
        if metric.get(reason, 0) != by_reason.get(reason, 0):
            problems.append(f'hotcount_partials_invalid_total{{reason="{reason}"}} = '
                            f"{metric.get(reason)}, {by_reason.get(reason, 0)} dead letters")
    e2e = samples.get(("hotcount_end_to_end_seconds_sum", ""))
    if e2e is None or not e2e >= 0 or e2e == float("inf"):
        problems.append(f"hotcount_end_to_end_seconds_sum = {e2e}: the latency arithmetic "
                        "overflowed (an event ts near -2^63)")

    # the poison posts hold exactly their counted partials; verify saw those and nothing else
    want = {}
    for name, (key, value, outcomes, delta) in POISON.items():
        if delta:
            post = json.loads(value)["post_id"].encode()
            want[post] = want.get(post, 0) + delta * outcomes[:args.rounds].count(COUNT)
    stored = {}
    with open(args.store_dump, "rb") as f:
        for line in f:
            post, _, n = line.rstrip(b"\n").rpartition(b"\t")
            stored[post] = int(n)
    for post in sorted(set(want) | {p for p in stored if p.startswith(b"poison-")}):
        if stored.get(post, 0) != want.get(post, 0):
            problems.append(f"post {show(post)}: store {stored.get(post, 0)}, "
                            f"want {want.get(post, 0)}")
    mismatches = {}
    with open(args.verify_out) as f:
        text = f.read()
    for m in re.finditer(r"^mismatch: post (.*): recount (-?\d+), store (-?\d+)$", text, re.M):
        mismatches[m.group(1).encode()] = (int(m.group(2)), int(m.group(3)))
    if "recounted " not in text:
        problems.append("hotcount verify did not get to its recount")
    for post in sorted(set(want) | set(mismatches)):
        if mismatches.get(post) != (0, want.get(post)):
            problems.append(f"verify: post {show(post)}: {mismatches.get(post)}, want recount 0 "
                            f"and store {want.get(post)} (only the poison posts differ)")

    # stage 1's dead letter of the 1 MB key: its key cut and marked
    big = []

    def raw_dead(m):
        headers = dict(m.headers() or [])
        if m.value() == RAW["raw-bigkey-bad"][1]:
            big.append((headers.get("hotcount-key-truncated-from"), m.key(),
                        headers.get("hotcount-error")))

    oracle.read_topic(args.brokers, args.dlq1, raw_dead)
    if len(big) != args.rounds or any(b != (str(len(BIG_KEY)).encode(), BIG_KEY[:KEY_CUT],
                                            b"not_json") for b in big):
        problems.append(f"stage 1's dead letters of the 1 MB key: "
                        f"{[(b[0], show(b[1], 8), b[2]) for b in big]}, want {args.rounds} "
                        f"with the key cut to {KEY_CUT} from {len(BIG_KEY)}, not_json")

    outcome = {}
    for name, srcs in copies.items():
        outcome[name] = [dead.get(s, (COUNT,))[0] for s in srcs]
    print(f"partials_poison: {len(POISON)} poison partials x {args.rounds} rounds; "
          f"{len(dead)} dead letters by stage 2 {dict(sorted(by_reason.items()))}; "
          f"{len(records)} partials read")
    print("partials_poison: outcomes " + "; ".join(f"{n}={'/'.join(o)}"
                                                  for n, o in outcome.items()))
    if problems:
        print("partials_poison: FAILED")
        for p in problems[:60]:
            print("  " + p)
        return 1
    print("partials_poison: every poison record handled as expected")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    ip = sub.add_parser("inputs")
    ip.add_argument("dir")
    mp = sub.add_parser("metric")
    mp.add_argument("addr")
    mp.add_argument("reason")
    cp = sub.add_parser("check")
    for opt in ("--brokers", "--partials", "--dlq2", "--dlq1", "--metrics", "--store-dump",
                "--verify-out"):
        cp.add_argument(opt, required=True)
    cp.add_argument("--rounds", type=int, required=True)
    args = ap.parse_args()
    if args.cmd == "metric":
        samples = scrape(args.addr)
        print(int(samples.get(("hotcount_partials_invalid_total", f'{{reason="{args.reason}"}}'),
                              0)))
        return 0
    return inputs(args) if args.cmd == "inputs" else check(args)


if __name__ == "__main__":
    sys.exit(main())
