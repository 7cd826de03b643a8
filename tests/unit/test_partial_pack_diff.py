#!/usr/bin/env python3
"""Differential test of the packed-partials codec: src/core/partial_pack.c (through
tests/support/pack_decode_tool.c) against the Python reference tools/partials_pack.py.

  test_partial_pack_diff.py TOOL [--cases N] [--seed S]
  test_partial_pack_diff.py TOOL --corpus DIR   (every file of DIR is one record: the corpus
                                                 the pack fuzzer grew, fuzz/pack.sh)

Generates records (valid ones from random entries, then mutated: truncated, bytes flipped,
inserted or dropped, varints made overlong or past 64 bits, counts forged, bytes appended, post
ids made bad UTF-8 or control characters, deltas past events) and has both decode each. The
outcomes must be equal: the reason, and for an accepted record the entries and the re-encoding
of them by each encoder. Also requires that every outcome was reached, so a generator that
stopped producing some kind of record fails the test rather than passing it vacuously.
Deterministic for a seed; a failure prints the record in hex to replay it.
"""
import argparse
import os
import random
import struct
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
import partials_pack as pp  # noqa: E402

INT64_MIN, INT64_MAX = pp.INT64_MIN, pp.INT64_MAX


def rand_post_id(rng):
    kind = rng.random()
    if kind < 0.6:
        n = rng.choice([1, 1, 2, 3, 5, 8, 12, 20])
        return "".join(rng.choice("0123456789abcxyz") for _ in range(n)).encode()
    if kind < 0.7:
        return "é€😀".encode()[: rng.randint(1, 9)]  # cut characters: bad UTF-8 sometimes
    if kind < 0.8:
        return bytes(rng.randint(0, 255) for _ in range(rng.randint(1, 6)))
    if kind < 0.85:
        return b"x" * rng.choice([255, 256])
    if kind < 0.9:
        return rng.choice([b"\x00", b"a\x7f", b"\xc2\x85", b"\xed\xa0\x80", b"\xf4\x90\x80\x80",
                           b"\xc0\xaf", b"ok\xc2\xa0"])
    return ("p%d" % rng.randint(0, 10**6)).encode()


def rand_i64(rng):
    return rng.choice([0, 1, -1, 2, 127, 128, -64, -65, 10**6, INT64_MAX, INT64_MIN,
                       INT64_MIN + 1, rng.randint(INT64_MIN, INT64_MAX),
                       rng.randint(-1000, 1000)])


def rand_entry(rng, post_id):
    events = rng.choice([1, 1, 2, 3, 100, INT64_MAX, rng.randint(1, 10**9)])
    if rng.random() < 0.9:
        delta = rng.randint(-min(events, 10**12), min(events, 10**12))
    else:
        delta = rand_i64(rng)  # may exceed events
    if rng.random() < 0.25:
        ts_min = ts_max = None
    else:
        near = 1764600000000
        ts_min = rng.choice([near + rng.randint(-5000, 5000), rand_i64(rng)])
        if ts_min == INT64_MIN:
            ts_min += 1
        ts_max = ts_min + rng.choice([0, 1, 999, rng.randint(0, INT64_MAX - ts_min)])
    return (post_id, delta, events, ts_min, ts_max)


def rand_record(rng):
    n = rng.choice([1, 1, 2, 3, 5, 17, 130, rng.randint(1, 40)])
    ids = {rand_post_id(rng) for _ in range(n)}
    ents = [rand_entry(rng, i) for i in sorted(ids, key=pp.sort_key)]
    return pp.encode(ents)


def big_varint(rng):
    return rng.choice([
        b"\xff" * 9 + b"\x01",           # 2^64 - 1
        b"\xff" * 9 + b"\x02",           # past 64 bits
        b"\x80" * 10 + b"\x00",          # 11 bytes
        b"\x80\x00",                     # overlong 0
        b"\xff\x00",                     # overlong 127
        b"\x80" * 9 + b"\x01",           # 2^63
        b"\xff" * 8 + b"\x7f",           # 2^63 - 1
        b"\x81\x80\x80\x80\x80\x80\x80\x80\x80",  # truncated
    ])


def mutate(rng, rec):
    b = bytearray(rec)
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        op = rng.randrange(9)
        if op == 0 and b:
            del b[rng.randrange(len(b)):]  # truncation
        elif op == 1 and b:
            i = rng.randrange(len(b))
            b[i] ^= 1 << rng.randrange(8)
        elif op == 2:
            b.insert(rng.randrange(len(b) + 1), rng.randrange(256))
        elif op == 3 and len(b) > 1:
            del b[rng.randrange(1, len(b))]
        elif op == 4 and b:
            i = rng.randrange(1, len(b) + 1)
            b[i:i] = big_varint(rng)
        elif op == 5:
            b += bytes(rng.randrange(256) for _ in range(rng.randint(1, 4)))  # trailing
        elif op == 6 and len(b) > 2:
            b[1:2] = rng.choice([b"\x00", b"\x7f", b"\x80\x08", b"\x81\x08", b"\xff\x7f"])
        elif op == 7 and len(b) > 1:
            i = rng.randrange(1, len(b))
            b[i] = rng.choice([0x00, 0x01, 0x02, 0x7f, 0x80, 0xc1, 0xff])
        elif op == 8:
            b[0:1] = bytes([rng.choice([0xC1, 0xC1, 0xC2, 0x7B, 0x00])])
    return bytes(b)


def expected(rec):
    reason, ents = pp.decode(rec)
    if ents is None:
        return f"{reason} 0", None
    parts = [f"ok {len(ents)}"]
    for post_id, delta, events, ts_min, ts_max in ents:
        parts.append(f"{post_id.hex()} {delta} {events} "
                     f"{'null' if ts_min is None else ts_min} "
                     f"{'null' if ts_max is None else ts_max}")
    enc = pp.encode(ents)
    if len(enc) > pp.MAX_BYTES:
        return " ".join(parts), "skip"  # the C encoder splits it; not compared
    parts.append(f"enc {len(ents)} {enc.hex()}")
    return " ".join(parts), None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tool")
    ap.add_argument("--cases", type=int, default=8000)
    ap.add_argument("--seed", type=int, default=15)
    ap.add_argument("--corpus")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    cases = []
    if args.corpus:
        for name in sorted(os.listdir(args.corpus)):
            with open(os.path.join(args.corpus, name), "rb") as f:
                cases.append(f.read())
    for i in range(0 if args.corpus else args.cases):
        r = rng.random()
        if r < 0.2:
            cases.append(rand_record(rng))
        elif r < 0.95:
            cases.append(mutate(rng, rand_record(rng)))
        else:
            cases.append(bytes([0xC1]) + bytes(rng.randrange(256)
                                               for _ in range(rng.randint(0, 24))))
    if not args.corpus:
        cases += [b"", b"\xc1", b"\xc1\x01", b"{}", b"\xc1\x01\x00\x01a\x00\x01\x00",
                  b"\xc1" + pp._varint(pp.MAX_POSTS + 1) + b"\x00" * 6000]
    stdin = b"".join(struct.pack("<I", len(c)) + c for c in cases)
    got = subprocess.run([args.tool], input=stdin, stdout=subprocess.PIPE, check=True).stdout
    lines = got.decode().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) != len(cases):
        print(f"FAIL: {len(cases)} records, the C tool answered {len(lines)}")
        return 1
    seen = {}
    bad = 0
    for rec, line in zip(cases, lines):
        want, note = expected(rec)
        if note == "skip":
            line = line.split(" enc ")[0]
        outcome = want.split(" ")[0]
        seen[outcome] = seen.get(outcome, 0) + 1
        if line != want:
            bad += 1
            if bad <= 5:
                print(f"DIVERGENCE on record {rec.hex()}\n  C:      {line[:400]}\n"
                      f"  Python: {want[:400]}")
    origin = f"corpus {args.corpus}" if args.corpus else f"seed {args.seed}"
    print(f"packed partials differential: {len(cases)} records ({origin}), "
          f"outcomes {dict(sorted(seen.items()))}, {bad} divergences")
    if args.corpus:
        return 1 if bad or not cases else 0
    needed = {"ok", "partial_undecodable", "partial_bad_post_id", "partial_delta_exceeds_events"}
    if not needed <= seen.keys():
        print(f"FAIL: outcomes never reached: {sorted(needed - seen.keys())}")
        return 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
