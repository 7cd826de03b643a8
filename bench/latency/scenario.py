"""Benchmark scenario "latency" (issue 5, item 6): produce -> visible in the store.

Two phases, each with hotcount stage 1 + stage 2 (store Redis, flush.ms=1000) on a namespace of
its own:
  1. saturate: `hotcount produce --rate 0` sends BENCH_EVENTS events while the stages run;
     the sustained maximum rate is events / (time from the producer's start to the last event
     stored), with the producer and the broker on the same cores, as in phase 2.
  2. probe: `hotcount produce --rate` sends Zipfian events at 50 % of that rate while a prober
     sends like events for unique posts `probe-<run>-<n>` (about 10 per second, random gaps) and
     polls Redis (one MGET of every outstanding probe key every 5 ms) until each shows 1, from
     the moment stage 2 has stored its first events of the load (the steady state). The
     delay from just before the probe's produce() call to the poll that saw it is its latency.
     Stage 2's hotcount_end_to_end_seconds histogram is the cross-check.
With BENCH_LATENCY_STORES=redis,postgresql (the default; a smoke run: redis) both phases run once per store,
the probe phase polling PostgreSQL with one SELECT of every outstanding probe's row every 5 ms
(a psql session kept open) instead of Redis's MGET; the variants of PostgreSQL are named
saturate-postgresql and probe-50pct-postgresql.
Run by bench/scenarios/latency; see bench/latency/README.md.
"""
import math
import os
import random
import re
import subprocess
import sys
import time

from confluent_kafka import OFFSET_END, Consumer, Producer, TopicPartition

import hcbench
from hcbench import log


class PgPoll:
    """Reads probe counts from PostgreSQL through one psql session: SELECT over the outstanding
    probes' rows, then an end marker, so that each poll is one round trip on an open
    connection."""

    def __init__(self, uri):
        self.p = subprocess.Popen(["psql", "-X", "-A", "-t", "-q", "-v", "ON_ERROR_STOP=1", uri],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def counts(self, post_ids):
        ids = ",".join("'" + i.replace("'", "''") + "'" for i in post_ids)
        self.p.stdin.write(f"SELECT post_id || '|' || likes FROM hotcount_counts "
                           f"WHERE post_id IN ({ids});\n\\echo __end__\n")
        self.p.stdin.flush()
        out = {}
        for line in self.p.stdout:
            line = line.strip()
            if line == "__end__":
                return out
            if line:
                post, _, likes = line.rpartition("|")
                out[post] = likes
        sys.exit("latency: psql ended")

    def close(self):
        self.p.stdin.close()
        self.p.wait()


def wait_assigned(stage, deadline):
    while True:
        m = stage.samples()
        if m is not None and hcbench.metric(m, "hotcount_assigned_partitions") > 0:
            return
        if time.monotonic() > deadline:
            sys.exit(f"latency: {stage.kind} got no partitions in time")
        time.sleep(0.05)


def drained(s1, s2, events):
    m1, m2 = s1.samples(), s2.samples()
    if m1 is None or m2 is None:
        return False
    return (hcbench.metric(m1, "hotcount_events_total") >= events and
            hcbench.metric(m2, "hotcount_events_stored_total")
            >= hcbench.metric(m1, "hotcount_events_total", 'result="ok"'))


def verify(p, cfg):
    v = hcbench.hc(p, cfg, "verify", "--timeout", "120", check=False)
    if v.returncode != 0 or not re.search(r"^verify: exact", v.stdout, re.M):
        sys.exit(f"latency: verify failed: {v.stdout[-2000:]}{v.stderr[-2000:]}")
    log("latency: " + v.stdout.strip().splitlines()[-1])


def stop(*stages):
    for s in stages:
        if s.stop() != 0:
            sys.exit(f"latency: {s.kind} exited {s.proc.returncode} on SIGTERM")


def saturate(p, work, store="redis"):
    """Returns the sustained maximum rate (events/s) of this machine with hotcount stage 1 +
    stage 2 consuming while `hotcount produce --rate 0` loads BENCH_EVENTS events: the time
    from the producer's start to the last event stored. The producer and the broker share the
    cores with the stages, as they do in the probe phase."""
    os.makedirs(work)
    raw = f"b{p.run}.sat.raw"
    uri = store_uri(p, store)
    cfg = hcbench.hc_config(p, work, raw=raw, store=uri)
    hcbench.hc(p, cfg, "init")
    s1 = hcbench.Stage(p, cfg, "stage1", work)
    s2 = hcbench.Stage(p, cfg, "stage2", work)
    try:
        deadline = time.monotonic() + 60
        wait_assigned(s1, deadline)
        wait_assigned(s2, deadline)
        cpu0 = s1.cpu() + s2.cpu()
        t0 = time.monotonic()
        hcbench.hc(p, cfg, "produce", "--events", str(p.events), "--posts", str(p.posts),
                   "--zipf", str(p.zipf), "--unlike-ratio", "0.05", "--invalid-ratio", "0",
                   "--seed", "1")
        t_produced = time.monotonic()
        deadline = t0 + max(180, p.events / 2000)
        while not drained(s1, s2, p.events):
            if time.monotonic() > deadline:
                sys.exit("latency: the saturating run did not finish in time")
            time.sleep(0.05)
        t1, cpu1 = time.monotonic(), s1.cpu() + s2.cpu()
        verify(p, cfg)
    finally:
        stop(s1, s2)
    rate = p.events / (t1 - t0)
    hcbench.result(p, "saturate" + suffix(store), p.events, t1 - t0, cpu1 - cpu0,
                   produce_s=round(t_produced - t0, 3), catch_up_s=round(t1 - t_produced, 3),
                   store=store, flush_ms=1000, posts=p.posts, zipf=p.zipf)
    return rate


def store_uri(p, store):
    """The store's URI for this namespace: Redis's as given (the key prefix is the namespace),
    PostgreSQL's in a schema of its own (hotcount's tables have no prefix, and verify compares
    every stored count with the recount)."""
    if store != "postgresql":
        return os.environ["HC_TEST_REDIS_URI"]
    uri = os.environ["HC_TEST_PG_URI"]
    schema = "lat_" + re.sub(r"[^a-z0-9_]", "_", p.run.lower())
    subprocess.run(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", uri, "-c",
                    f"CREATE SCHEMA IF NOT EXISTS {schema}"], check=True)
    return f"{uri}{'&' if '?' in uri else '?'}options=-csearch_path%3D{schema}"


def suffix(store):
    return "" if store == "redis" else f"-{store}"


def quantile(sorted_xs, q):
    """Nearest-rank quantile."""
    if not sorted_xs:
        return None
    k = max(0, min(len(sorted_xs) - 1, math.ceil(q * len(sorted_xs)) - 1))
    return sorted_xs[k]


def hist_quantile(samples, name, q):
    """Upper bound of the bucket holding quantile q of a Prometheus histogram."""
    buckets = []
    for (n, labels), v in samples.items():
        if n == name + "_bucket":
            le = re.search(r'le="([^"]+)"', labels).group(1)
            buckets.append((float("inf") if le == "+Inf" else float(le), v))
    buckets.sort()
    if not buckets or buckets[-1][1] == 0:
        return None
    total = buckets[-1][1]
    for le, v in buckets:
        if v >= q * total:
            return le
    return None


def hist_mean(samples, name):
    count = hcbench.metric(samples, name + "_count")
    return round(hcbench.metric(samples, name + "_sum") / count, 4) if count else None


def probe_run(p, work, rate, seconds, store="redis"):
    os.makedirs(work)
    raw = f"b{p.run}.probe.raw"
    uri = store_uri(p, store)
    cfg = hcbench.hc_config(p, work, raw=raw, store=uri)
    hcbench.hc(p, cfg, "init")
    prefix = f"likes-{p.run}:"
    # an experiment: stage 2 alone on a shorter window (it waits ~flush.ms for each burst)
    s2_flush = os.environ.get("BENCH_LATENCY_STAGE2_FLUSH_MS")
    s1 = hcbench.Stage(p, cfg, "stage1", work)
    s2 = hcbench.Stage(p, cfg, "stage2", work,
                       extra=["-X", f"flush.ms={s2_flush}"] if s2_flush else [])
    producer = None
    try:
        deadline = time.monotonic() + 60
        wait_assigned(s1, deadline)
        wait_assigned(s2, deadline)
        cpu0 = s1.cpu() + s2.cpu()
        events = int(rate * seconds)
        plog = open(os.path.join(work, "produce.log"), "w")
        t0 = time.monotonic()
        producer = subprocess.Popen(
            [p.hotcount, "produce", "-c", cfg, "--events", str(events), "--rate", str(int(rate)),
             "--posts", str(p.posts), "--zipf", str(p.zipf), "--unlike-ratio", "0.05",
             "--invalid-ratio", "0", "--seed", "2"], stdout=plog, stderr=plog)
        # linger.ms=0: a probe leaves at once, so the clock measures hotcount, not batching
        prod = Producer({"bootstrap.servers": p.brokers, "linger.ms": 0, "acks": "all",
                         "enable.idempotence": True})
        redis = hcbench.Redis(p.redis_uri) if store == "redis" else None
        pg = PgPoll(uri) if store == "postgresql" else None
        failures = []

        def delivered(err, _msg):
            if err is not None:
                failures.append(err)

        split = None
        if os.environ.get("BENCH_LATENCY_SPLIT") == "1":
            # where the time goes: when each probe's partial becomes readable (read_committed)
            split = Consumer({"bootstrap.servers": p.brokers, "group.id": f"b{p.run}-split",
                              "isolation.level": "read_committed", "enable.auto.commit": False})
            parts = split.list_topics(f"b{p.run}.partials", timeout=30)
            split.assign([TopicPartition(f"b{p.run}.partials", pt, OFFSET_END)
                          for pt in parts.topics[f"b{p.run}.partials"].partitions])
        rng = random.Random(p.run)
        outstanding = {}  # key -> send time
        sent_at = {}  # probe post id (bytes) -> send time
        stage1_delays = []
        delays = []
        slowest = []  # (latency, when it was sent, seconds after the load began)
        n = 0
        # Probes start once stage 2 has stored events of the load: the latency asked for is the
        # steady state at that rate. Before that, probes waited for the stages' first
        # transactions (a fresh transactional producer's first commit, 1-2.6 s on this
        # machine under load) and made up the whole tail beyond 1.5 s (issue 27).
        warm = time.monotonic() + 30
        while time.monotonic() < warm:
            m2 = s2.samples()
            if m2 is not None and hcbench.metric(m2, "hotcount_events_stored_total") > 0:
                break
            time.sleep(0.05)
        warm_s = round(time.monotonic() - t0, 2)
        next_send = time.monotonic()
        # probes stop a flush before the load ends, so the last ones still see it
        send_until = t0 + seconds - 1.0
        give_up = t0 + seconds + 60
        while True:
            now = time.monotonic()
            if now >= next_send and now < send_until:
                post = f"probe-{p.run}-{n}"
                n += 1
                value = ('{"post_id":"%s","user_id":"prober","op":"like","ts":%d}'
                         % (post, int(time.time() * 1000)))
                sent = time.monotonic()
                prod.produce(raw, key=f"{post}#0", value=value, on_delivery=delivered)
                prod.poll(0)
                outstanding[prefix + post] = sent
                sent_at[post.encode()] = sent
                next_send = sent + rng.uniform(0.05, 0.15)
            prod.poll(0)
            if split is not None:
                for m in split.consume(num_messages=100000, timeout=0):
                    if not m.error() and m.key() in sent_at:
                        stage1_delays.append(time.monotonic() - sent_at.pop(m.key()))
            if outstanding:
                keys = list(outstanding)
                if pg is not None:
                    got = pg.counts([k[len(prefix):] for k in keys])
                    values = [got[k[len(prefix):]].encode() if k[len(prefix):] in got else None
                              for k in keys]
                else:
                    values = redis.call("MGET", *keys)
                seen = time.monotonic()
                for k, v in zip(keys, values):
                    if v is not None:
                        if v != b"1":
                            sys.exit(f"latency: probe {k} shows {v!r}, not 1")
                        sent_k = outstanding.pop(k)
                        delays.append(seen - sent_k)
                        slowest.append((round(seen - sent_k, 3), round(sent_k - t0, 2)))
            if now >= send_until and not outstanding:
                break
            if now > give_up:
                sys.exit(f"latency: {len(outstanding)} probes never became visible")
            time.sleep(0.005)
        prod.flush(30)
        if pg is not None:
            pg.close()
        if split is not None:
            split.close()
        if failures:
            sys.exit(f"latency: {len(failures)} probes failed: {failures[0]}")
        if producer.wait(timeout=120) != 0:
            sys.exit("latency: hotcount produce failed: "
                     + open(os.path.join(work, "produce.log")).read()[-2000:])
        t_produced = time.monotonic()
        total = events + n
        while not drained(s1, s2, total):
            if time.monotonic() > t_produced + 120:
                sys.exit("latency: the stages did not catch up after the load")
            time.sleep(0.05)
        t1 = time.monotonic()
        cpu1 = s1.cpu() + s2.cpu()
        m1, m2 = s1.samples(), s2.samples()
        verify(p, cfg)
    finally:
        if producer is not None and producer.poll() is None:
            producer.kill()
            producer.wait()
        stop(s1, s2)
    delays.sort()
    achieved = events / (t_produced - t0)
    extra = {
        "target_rate": round(rate, 1), "achieved_rate": round(achieved, 1),
        "probes": len(delays), "p50_s": round(quantile(delays, 0.5), 4),
        "p99_s": round(quantile(delays, 0.99), 4), "p999_s": round(quantile(delays, 0.999), 4),
        "max_s": round(delays[-1], 4),
        "over_1_5s": sum(1 for d in delays if d > 1.5),
        "probes_from_s": warm_s,  # after the load began: stage 2's first stored events
        # the probes slower than 1.5 s (at most 50, slowest first) as (latency s, sent at s
        # after the load began): a tail at the start (fresh topics, the first transactions)
        # reads differently from one spread over the run
        "slowest": sorted((x for x in slowest if x[0] > 1.5), reverse=True)[:50],
        "stage1_p50_s": round(quantile(sorted(stage1_delays), 0.5), 4) if stage1_delays else None,
        "stage1_p99_s": round(quantile(sorted(stage1_delays), 0.99), 4) if stage1_delays else None, "catch_up_s": round(t1 - t_produced, 3),
        "e2e_hist_p50_le_s": hist_quantile(m2, "hotcount_end_to_end_seconds", 0.5),
        "e2e_hist_p99_le_s": hist_quantile(m2, "hotcount_end_to_end_seconds", 0.99),
        # where the time goes: means of the stages' own histograms
        "stage1_txn_mean_s": hist_mean(m1, "hotcount_transaction_seconds"),
        "stage2_batch_posts_mean": hist_mean(m2, "hotcount_batch_posts"),
        "stage2_store_mean_s": hist_mean(m2, "hotcount_store_seconds"),
        "stage1_txn_p99_le_s": hist_quantile(m1, "hotcount_transaction_seconds", 0.99),
        "stage2_store_p99_le_s": hist_quantile(m2, "hotcount_store_seconds", 0.99),
        "store": store, "flush_ms": 1000, "posts": p.posts, "zipf": p.zipf,
    }
    log(f"latency: {len(delays)} probes at {achieved:.0f} events/s: p50 {extra['p50_s']} s, "
        f"p99 {extra['p99_s']} s, p99.9 {extra['p999_s']} s (max {extra['max_s']} s)")
    variant = "probe-50pct" + suffix(store) + (f"-stage2-flush{s2_flush}" if s2_flush else "")
    if s2_flush:
        extra["stage2_flush_ms"] = int(s2_flush)
    hcbench.result(p, variant, total, t1 - t0, cpu1 - cpu0, **extra)


def main():
    p = hcbench.Params("latency")
    if not p.redis_uri:
        sys.exit("latency: HC_TEST_REDIS_URI is not set (with-servers --all)")
    seconds = float(os.environ.get("BENCH_LATENCY_SECONDS") or (8 if p.smoke else 60))
    share = float(os.environ.get("BENCH_LATENCY_SHARE") or 0.5)
    stores = (os.environ.get("BENCH_LATENCY_STORES")
              or ("redis" if p.smoke else "redis,postgresql")).split(",")
    run = p.run
    with hcbench.work_dir("bench-latency-") as work:
        for store in stores:
            p.run = run + suffix(store)
            if os.environ.get("BENCH_LATENCY_RATE"):
                max_rate = float(os.environ["BENCH_LATENCY_RATE"])
                log(f"latency: maximum rate given: {max_rate:.0f} events/s")
            else:
                max_rate = saturate(p, os.path.join(work, "saturate" + suffix(store)), store)
                log(f"latency: {store}: sustained maximum {max_rate:.0f} events/s")
            p.run += "-p"  # a fresh namespace for the probe phase
            probe_run(p, os.path.join(work, "probe" + suffix(store)), max_rate * share, seconds,
                      store)


if __name__ == "__main__":
    main()
