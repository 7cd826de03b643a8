#!/usr/bin/env python3
"""`/v1/top` is no weapon (issue 25, item 5; docs/THREAT-MODEL.md, "/v1/top").

On a SQLite store:
  1. a store made before the index (the tables alone, 20 000 counts) gets it from `hotcount init
     --no-topics`, and SQLite's plan for top walks it (no sort of the table: no TEMP B-TREE);
  2. 6 clients ask `hotcount serve` for /v1/top?n=<random>&cb=<random> for 3 s: the store answers
     at most one top query per serve.top.ttl.ms (500 ms here; counted by serve's own
     hotcount_serve_store_reads_total{kind="top"}), every answer has the n rows asked for, and
     an n past serve.top.max is still a 400.

Before: no index (the plan sorted the whole table), and top shared serve.ttl.ms (20 ms), so the
same clients caused a top query every 20 ms. Usage: serve_top.py path/to/hotcount
"""
import http.client
import json
import os
import random
import re
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time

ROWS = 20000
TOP_TTL_MS = 500
SECONDS = 3.0
TOP_QUERY = "SELECT post_id, likes FROM hotcount_counts ORDER BY likes DESC, post_id ASC LIMIT 5"


def old_schema(path):
    db = sqlite3.connect(path)
    db.executescript("""
        CREATE TABLE hotcount_counts (post_id TEXT PRIMARY KEY, likes BIGINT NOT NULL,
                                      updated_at INTEGER) WITHOUT ROWID;
        CREATE TABLE hotcount_offsets (consumer_group TEXT, topic TEXT, partition INT,
                                       next_offset BIGINT NOT NULL,
                                       PRIMARY KEY (consumer_group, topic, partition))
                                       WITHOUT ROWID;""")
    rnd = random.Random(25)
    db.executemany("INSERT INTO hotcount_counts VALUES (?, ?, 0)",
                   ((f"p{i}", rnd.randrange(1, 10**9)) for i in range(ROWS)))
    db.commit()
    db.close()


def plan(path):
    db = sqlite3.connect(path)
    rows = db.execute("EXPLAIN QUERY PLAN " + TOP_QUERY).fetchall()
    db.close()
    return " | ".join(r[-1] for r in rows)


def reads_top(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    c.close()
    m = re.search(r'^hotcount_serve_store_reads_total\{kind="top"\} (\d+)', text, re.M)
    return int(m.group(1)) if m else None


def main():
    hc = sys.argv[1]
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        db = os.path.join(tmp, "x.db")
        old_schema(db)
        before = plan(db)
        r = subprocess.run([hc, "init", "--no-topics", "-X", f"store=sqlite:{db}"],
                           capture_output=True, text=True, timeout=60)
        after = plan(db)
        print(f"top's plan before init: {before}\ntop's plan after init:  {after}")
        if r.returncode != 0:
            failures.append(f"hotcount init --no-topics: exit {r.returncode}: {r.stderr.strip()}")
        if "TEMP B-TREE" in after or "hotcount_counts_likes" not in after:
            failures.append("after init, top does not walk the index hotcount_counts_likes")

        log = open(os.path.join(tmp, "log"), "w+")
        proc = subprocess.Popen([hc, "serve", "-X", f"store=sqlite:{db}",
                                 "-X", "serve.listen=127.0.0.1:0", "-X", "serve.hot.follow=0",
                                 "-X", "serve.ttl.ms=20", "-X", f"serve.top.ttl.ms={TOP_TTL_MS}"],
                                stdout=log, stderr=subprocess.STDOUT)
        try:
            port = None
            for _ in range(100):
                log.seek(0)
                m = re.search(r"serving the read API on .* \(port (\d+)\)", log.read())
                if m:
                    port = int(m.group(1))
                    break
                if proc.poll() is not None:
                    break
                time.sleep(0.1)
            if port is None:
                log.seek(0)
                failures.append("serve did not start: " + log.read().strip()[-300:])
                raise RuntimeError
            base = reads_top(port)
            answers = []
            bad = []
            stop = time.monotonic() + SECONDS

            def client(seed):
                rnd = random.Random(seed)
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                while time.monotonic() < stop:
                    n = rnd.randrange(1, 101)
                    c.request("GET", f"/v1/top?n={n}&cb={rnd.getrandbits(64):x}")
                    resp = c.getresponse()
                    body = resp.read()
                    if resp.status != 200 or len(json.loads(body)) != n:
                        bad.append((n, resp.status, body[:80]))
                    answers.append(n)
                c.close()

            t0 = time.monotonic()
            threads = [threading.Thread(target=client, args=(i,)) for i in range(6)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            elapsed_ms = (time.monotonic() - t0) * 1000
            queries = reads_top(port) - base
            allowed = int(elapsed_ms // TOP_TTL_MS) + 1
            print(f"{len(answers)} top requests with random n and cb in {elapsed_ms:.0f} ms: "
                  f"{queries} store top queries (at most {allowed} allowed)")
            if queries > allowed:
                failures.append(f"{queries} store top queries in {elapsed_ms:.0f} ms, more than "
                                f"one per serve.top.ttl.ms ({allowed})")
            if len(answers) < 50:
                failures.append(f"only {len(answers)} answers in {SECONDS} s")
            if bad:
                failures.append(f"{len(bad)} wrong answers, first {bad[0]}")
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            c.request("GET", "/v1/top?n=101&cb=1")
            status = c.getresponse().status
            c.close()
            if status != 400:
                failures.append(f"/v1/top?n=101 (past serve.top.max): {status}, want 400")
        except RuntimeError:
            pass
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    for f in failures:
        print("FAIL", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
