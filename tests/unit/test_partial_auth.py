#!/usr/bin/env python3
"""HMAC-SHA256 of src/core/partial_auth.c against Python's hmac (issue 25: authenticated
partials): 2 000 random keys and messages, every length around SHA-256's block (55, 56, 63, 64,
65 bytes and their doubles) and keys shorter, equal to and longer than the block.

Usage: test_partial_auth.py HMAC_TOOL"""
import hashlib
import hmac
import random
import subprocess
import sys

tool = sys.argv[1]
rnd = random.Random(25)
cases = []
for n in [0, 1, 55, 56, 57, 63, 64, 65, 111, 112, 119, 120, 127, 128, 129, 1000]:
    for kl in [0, 1, 20, 32, 63, 64, 65, 131]:
        cases.append((rnd.randbytes(kl), rnd.randbytes(n)))
for _ in range(2000 - len(cases)):
    cases.append((rnd.randbytes(rnd.randrange(0, 200)), rnd.randbytes(rnd.randrange(0, 3000))))
inp = "".join(f"{k.hex() or '-'} {m.hex() or '-'}\n" for k, m in cases)
out = subprocess.run([tool], input=inp, capture_output=True, text=True, check=True).stdout.split()
bad = 0
for (k, m), got in zip(cases, out):
    want = hmac.new(k, m, hashlib.sha256).hexdigest()
    if got != want:
        bad += 1
        if bad <= 5:
            print(f"FAIL key {len(k)} bytes, message {len(m)} bytes: {got} != {want}")
if len(out) != len(cases):
    print(f"FAIL {len(out)} answers for {len(cases)} cases")
    bad += 1
print(f"{len(cases)} cases, {bad} mismatches")
sys.exit(1 if bad else 0)
