#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_pack into fuzz/corpus/pack/ (one file per seed, named for what
it shows), encoded by the Python reference tools/partials_pack.py. Re-run after editing; files it
does not write (regress-* inputs a fuzzing run found) are kept.

Seeds: accepted records of every shape (one and many posts, ids of 1 and 256 bytes, UTF-8,
negative deltas, timestamps at both ends of int64, absent timestamps), and one of each reason
stage 2 refuses a record for (a bad post id, a delta past its events, and undecodable: wrong
magic, truncated, overlong varint, ids out of order, trailing bytes). Every seed is at most
65536 bytes (fuzz/run.sh pack runs with -max_len=65536).
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import partials_pack as pp  # noqa: E402

SEEDS = {}


def seed(name, data):
    assert len(data) <= 65536, name
    assert name not in SEEDS, name
    SEEDS[name] = data


def rec(entries):
    return pp.encode(sorted(entries, key=lambda e: pp.sort_key(e[0])))


seed("one", rec([(b"p1", 3, 3, 1700000000000, 1700000000999)]))
seed("one-no-ts", rec([(b"p1", 1, 1, None, None)]))
seed("unlike", rec([(b"p1", -2, 4, 5, 5)]))
seed("many", rec([(b"post-%d" % i, i % 7 - 3, 7, 1000 + i, 2000 + i) for i in range(300)]))
seed("mixed-ts", rec([(b"a", 1, 1, None, None), (b"bb", 1, 2, -5, 9), (b"ccc", 0, 2, 0, 0)]))
seed("ts-ends", rec([(b"lo", 1, 1, pp.INT64_MIN + 1, pp.INT64_MIN + 1),
                     (b"hi", 1, 1, pp.INT64_MAX, pp.INT64_MAX),
                     (b"wide", 1, 2, pp.INT64_MIN + 1, pp.INT64_MAX)]))
seed("id-256", rec([(b"x" * 256, 1, 1, 1, 1), (b"y", 1, 1, 1, 1)]))
seed("utf8", rec([("é€😀".encode(), 5, 9, 1, 2)]))
seed("max-posts", rec([(b"%04d" % i, 1, 1, None, None) for i in range(pp.MAX_POSTS)]))
seed("bad-post-id", rec([(b"a\x01", 1, 1, 1, 1)]))
seed("delta-past-events", rec([(b"p", 5, 2, 1, 1)]))
good = rec([(b"p1", 1, 1, 1, 1), (b"p2", 1, 1, 1, 1)])
seed("wrong-magic", b"\xc2" + good[1:])
seed("truncated", good[:-2])
seed("trailing", good + b"\x00")
seed("overlong-varint", b"\xc1\x81\x00" + good[2:])
seed("out-of-order", pp.encode([(b"p2", 1, 1, 1, 1), (b"p1", 1, 1, 1, 1)]))
seed("count-zero", b"\xc1\x00\x00")


if __name__ == "__main__":
    from make_corpus import write_seeds  # the event corpus's writer

    write_seeds(SEEDS, "pack")
