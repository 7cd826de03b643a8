#!/usr/bin/env python3
"""The Python reference of adaptive salting (tools/producer_key.py) against the shared vectors
that tests/unit/test_producer_key.c checks the C implementation with."""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools"))

import producer_key  # noqa: E402


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "producer_key_vectors.json")
    with open(path, encoding="utf-8") as f:
        cases = json.load(f)["cases"]
    assert len(cases) >= 20, "vectors missing"
    failed = 0
    for c in cases:
        hv = producer_key.HotView(c["default_salts"])
        for rec in c["records"]:
            hv.apply(json.dumps(rec, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
        got = hv.key(c["post"], c["user"], c["now"])
        if got != c["key"]:
            print("FAIL %s: got %s, want %s" % (c["name"], got, c["key"]))
            failed += 1
    # the salt itself, as docs/FORMATS.md's Events section gives it (FNV-1a 32 test values)
    assert producer_key.fnv1a32(b"") == 0x811C9DC5
    assert producer_key.fnv1a32(b"a") == 0xE40C292C
    print("%d vectors, %d failed" % (len(cases), failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
