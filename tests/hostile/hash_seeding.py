#!/usr/bin/env python3
"""Every table keyed by untrusted input hashes with SipHash under the process key (issue 25,
item 3; docs/THREAT-MODEL.md, "Seeded hashing").

A source scan over all of src/ (the store backends too since issue 25, item 6: the Redis SCAN
dedup set hashed with unseeded FNV-1a 64 while src/store/ was left out) that fails when:

  1. an unkeyed hash appears (FNV-1a's offset bases and primes, hc_fnv1a32 and hc_fnv1a64,
     djb2's 5381, Fibonacci hashing's golden-ratio multipliers, MurmurHash's constants) outside
     the list of known uses below, each of which says why it is not a table's hash;
  2. a file indexes a table by hash (`x & mask`, `x & (cap - 1)`, `x % nbuckets`) without
     calling hc_siphash13 and is not in the list of tables keyed by trusted input below;
  3. a file that calls hc_siphash13 is not named in docs/THREAT-MODEL.md's list of seeded
     tables (the registry a reader checks), or the list names a file that no longer hashes.

So a table added with FNV fails rule 1, one added with any other home-made hash fails rule 2,
and one added with SipHash but not documented fails rule 3.

Usage: hash_seeding.py [SOURCE_DIR]   (default: the repository this file is in)
"""
import os
import re
import sys

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                       os.path.join(os.path.dirname(__file__), "..", ".."))

# (path, enclosing function or macro name): why this unkeyed hash is not a table's.
KNOWN_UNKEYED = {
    ("src/core/fnv.c", "hc_fnv1a32"):
        "FNV's one home (hotcount/fnv.h): the producer keying of the external contract "
        "(CONTRACT.md: salt = fnv1a32(user_id) % salts) picks a Kafka partition with it",
    ("src/core/fnv.c", "hc_fnv1a64"):
        "FNV's one home: the 64-bit variant that the writer tag, the ETags and DynamoDB's batch "
        "id below use, each for equality",
    ("src/core/salt.c", "hc_salt"): "the contract rule of hc_fnv1a32",
    ("src/core/zipf.c", "splitmix64"): "a PRNG step of the load generator, not a hash of input",
    ("src/stage/source_check.c", "fnv1a64"):
        "a writer tag of stage 1's own transactional id in the hotcount-window header, "
        "compared for equality, never a table index",
    ("src/serve/serve_http.c", "etag_add"):
        "an ETag over an answer serve computed itself; compared for equality, never a table "
        "index",
    ("src/store/dynamodb/ddb_http.c", "ddb_hash_bytes"):
        "DynamoDB's batch id (ddb_batch_init: two FNV-1a 64 over group, topic, offsets and "
        "deltas), a name compared for equality and sent to DynamoDB, never a table index; it "
        "must be the same in every process, which a per-process key would break",
    ("src/store/dynamodb/ddb_http.c", "ddb_rand64"):
        "a fallback seed when getrandom(2) fails (a golden-ratio multiplier of the clock), for "
        "transaction tokens; it hashes no input and indexes no table",
}

# Files that index a table by hash while keyed by something no client or producer chooses.
KNOWN_TRUSTED_TABLES = {
    "src/cli/cli.c": "sigemptyset(&sa.sa_mask): a signal mask, not a table",
}

# Tables keyed by untrusted input that are NOT keyed yet: each a known defect with its owner,
# printed as PENDING on every run (not a failure, so that main stays green while the owner's
# rewrite is in flight). The entry fails once the file calls hc_siphash13: drop it then.
KNOWN_PENDING_TABLES = {
}

UNKEYED = re.compile(
    r"2166136261|16777619\b|0x811c9dc5|0x01000193|14695981039346656037|1099511628211|"
    r"0xcbf29ce484222325|0x100000001b3|\bhc_fnv1a32\s*\(|2654435769|0x9e3779b9|"
    r"11400714819323198485|0x5bd1e995|0xcc9e2d51|\b5381\b|\bhc_fnv1a64\s*\(", re.I)
TABLE_INDEX = re.compile(
    r"&\s*\(\s*[\w>.-]*(cap|mask|size|slots|buckets|len)\w*\s*-\s*1\s*\)|"
    r"&\s*[\w>.-]*mask\b|%\s*[\w>.-]*(cap|buckets|nslots|slots)\b", re.I)
FUNC_DEF = re.compile(r"^(?:[A-Za-z_][\w\s\*]*?\b)?(\w+)\s*\(")
MACRO_DEF = re.compile(r"^#define\s+(\w+)")
# hc_store_id_hash (store_util.h) is SipHash-1-3 under the process key too
SIPHASH_CALL = re.compile(r"\b(?:hc_siphash13(?:_init)?|hc_store_id_hash)\s*\(")


def enclosing(lines, i):
    """The function (or macro) a line belongs to: the last definition at column 0 above it."""
    m = MACRO_DEF.match(lines[i])
    if m:
        return m.group(1)
    for j in range(i, -1, -1):
        line = lines[j]
        if not line or line[0] in " \t}#/*{":
            continue
        m = FUNC_DEF.match(line)
        if m and m.group(1) not in ("if", "for", "while", "switch", "return", "sizeof"):
            return m.group(1)
    return "?"


def strip_comments(text):
    """Blanks out comments, keeping line numbers (a comment may name FNV)."""
    def blank(m):
        return re.sub(r"[^\n]", " ", m.group(0))
    return re.sub(r"/\*.*?\*/|//[^\n]*", blank, text, flags=re.S)


def sources():
    for base, dirs, files in os.walk(os.path.join(ROOT, "src")):
        rel = os.path.relpath(base, ROOT)
        for f in sorted(files):
            if f.endswith((".c", ".h")):
                yield os.path.join(rel, f)


def main():
    failures = []
    seeded = set()
    used_known = set()
    for path in sources():
        with open(os.path.join(ROOT, path), encoding="utf-8", errors="replace") as fh:
            lines = strip_comments(fh.read()).split("\n")
        table_lines = []
        for i, line in enumerate(lines):
            if UNKEYED.search(line):
                key = (path, enclosing(lines, i))
                if key in KNOWN_UNKEYED:
                    used_known.add(key)
                else:
                    failures.append(f"{path}:{i + 1}: unkeyed hash in {key[1]}(): "
                                    f"{line.strip()}\n    (use hc_siphash13 with the process "
                                    "key, or add it to KNOWN_UNKEYED with the reason it is not "
                                    "a table keyed by untrusted input)")
            if TABLE_INDEX.search(line):
                table_lines.append(i)
            if SIPHASH_CALL.search(line) and path.endswith(".c"):  # not a declaration
                seeded.add(path)
        if path in KNOWN_PENDING_TABLES:
            if path in seeded or not table_lines:
                failures.append(f"{path}: listed in KNOWN_PENDING_TABLES but hashes with SipHash "
                                "now (or indexes no table): drop the entry")
            else:
                print(f"PENDING {path}: {KNOWN_PENDING_TABLES[path]}")
            continue
        if table_lines and path not in seeded and path not in KNOWN_TRUSTED_TABLES:
            for i in table_lines:
                failures.append(f"{path}:{i + 1}: a table indexed by hash in a file that never "
                                f"calls hc_siphash13: {lines[i].strip()}")
    seeded.discard("src/core/siphash.c")

    with open(os.path.join(ROOT, "docs/THREAT-MODEL.md"), encoding="utf-8") as fh:
        doc = fh.read()
    m = re.search(r"<!-- seeded-tables -->(.*?)<!-- /seeded-tables -->", doc, re.S)
    if not m:
        failures.append("docs/THREAT-MODEL.md: no <!-- seeded-tables --> list")
        listed = set()
    else:
        listed = set(re.findall(r"`(src/[\w/.-]+\.[ch])`", m.group(1)))
    for path in sorted(seeded - listed):
        failures.append(f"{path}: hashes with SipHash but docs/THREAT-MODEL.md's list of seeded "
                        "tables does not name it")
    for path in sorted(listed - seeded):
        failures.append(f"docs/THREAT-MODEL.md names {path} as a seeded table, but it does "
                        "not call hc_siphash13 (moved? renamed?)")
    for key in sorted(set(KNOWN_UNKEYED) - used_known):
        failures.append(f"KNOWN_UNKEYED lists {key[0]} {key[1]}(), which no longer has an "
                        "unkeyed hash: drop the entry")

    for f in failures:
        print("FAIL", f)
    print(f"{len(seeded)} files with seeded tables, {len(used_known)} known unkeyed uses, "
          f"{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
