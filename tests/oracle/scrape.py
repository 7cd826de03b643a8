#!/usr/bin/env python3
"""Scrapes a hotcount stage's metrics endpoint and checks it against the contract.

  scrape.py stage1|stage2 HOST:PORT...

Checks, for every instance of one stage, /healthz (200), /readyz (200), and that /metrics is
Prometheus text declaring every metric the contract names; and, summed over the instances (one
of them may have joined after the stream ended), that the stage's work shows in its counters
(events counted, transactions committed; or store batches committed, keys written, latency
observed) with no store errors. Exit 0 when all hold.
"""
import re
import sys
import time
import urllib.request

CONTRACT = [
    "hotcount_events_total", "hotcount_partials_total", "hotcount_transactions_total",
    "hotcount_store_batches_total", "hotcount_store_keys_written_total",
    "hotcount_consumer_lag", "hotcount_end_to_end_seconds_bucket",
    "hotcount_hot_key_events_per_second",
]
# three of the default statistics.interval.ms (5 s)
LAG_WAIT_S = 15
SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$')


def get(url):
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, ""


def scrape(addr, problems):
    """Returns {(name, labels): value} and the declared types of one endpoint."""
    for path in ("/healthz", "/readyz"):
        status, _ = get(f"http://{addr}{path}")
        if status != 200:
            problems.append(f"{addr}{path} answered {status}")
    status, text = get(f"http://{addr}/metrics")
    if status != 200:
        problems.append(f"{addr}/metrics answered {status}")
    samples = {}
    types = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            types[name] = kind
        elif line and not line.startswith("#"):
            m = SAMPLE.match(line)
            if not m:
                problems.append(f"not exposition format: {line!r}")
                continue
            samples[(m.group(1), m.group(2) or "")] = float(m.group(3))
    names = {n for n, _ in samples}
    for name in CONTRACT:
        if name not in names and name.replace("_bucket", "") not in types:
            problems.append(f"{addr}: {name} missing")
    return samples


def main():
    stage, addrs = sys.argv[1], sys.argv[2:]
    # Consumer lag comes from librdkafka's statistics, which arrive on a timer: a stream that
    # ends before a client's first report has none yet. Wait for it, bounded.
    deadline = time.monotonic() + LAG_WAIT_S
    while True:
        problems = []
        total = {}
        for addr in addrs:
            for key, v in scrape(addr, problems).items():
                total[key] = total.get(key, 0.0) + v
        has_lag = any(n == "hotcount_consumer_lag" for n, _ in total)
        if has_lag or problems or time.monotonic() > deadline:
            break
        time.sleep(0.25)

    def value(name, labels=""):
        return total.get((name, labels), 0.0)

    if not has_lag:
        problems.append(f"no consumer lag reported within {LAG_WAIT_S} s")
    if stage == "stage1":
        if value("hotcount_events_total", '{result="ok"}') <= 0:
            problems.append("stage 1 counted no events")
        if value("hotcount_transactions_total", '{outcome="commit"}') <= 0:
            problems.append("stage 1 committed no transaction")
    else:
        if value("hotcount_store_batches_total", '{outcome="commit"}') <= 0:
            problems.append("stage 2 committed no store batch")
        if value("hotcount_store_keys_written_total") <= 0:
            problems.append("stage 2 wrote no keys")
        if value("hotcount_store_batches_total", '{outcome="error"}') > 0:
            problems.append("stage 2 saw store errors")
        if value("hotcount_end_to_end_seconds_count") <= 0:
            problems.append("no end-to-end latency observed")
    if problems:
        print(f"scrape {stage} {' '.join(addrs)}: FAILED")
        for p in problems:
            print("  " + p)
        return 1
    print(f"scrape {stage} {' '.join(addrs)}: {len(total)} series, contract names present")
    return 0


if __name__ == "__main__":
    sys.exit(main())
