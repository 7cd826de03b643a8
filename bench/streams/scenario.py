"""Benchmark scenario "streams" (issue 5, item 4): Kafka Streams with exactly_once_v2 against
hotcount (stage 1 + stage 2, Redis store) on the same raw topic and broker, in one run.

Run by bench/scenarios/streams; parameters and output are described in bench/streams/README.md.
"""
import hashlib
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import time

from confluent_kafka.admin import AdminClient, NewTopic

import hcbench
from hcbench import log

HERE = os.path.dirname(os.path.realpath(__file__))
CACHE = os.environ.get("HC_CACHE_DIR") or os.path.expanduser("~/.cache/hotcount")


def build_jar(src=HERE, cache="streams-bench", jar_name="hotcount-streams-bench.jar",
              what="streams"):
    """Builds the Maven project in src once per content of pom.xml and the sources into
    CACHE/cache/<hash>; returns the class path. bench/flink reuses it for its job."""
    h = hashlib.sha256()
    for root, _, files in sorted(os.walk(src)):
        for name in sorted(files):
            if name == "pom.xml" or name.endswith(".java"):
                path = os.path.join(root, name)
                h.update(os.path.relpath(path, src).encode() + b"\0")
                with open(path, "rb") as f:
                    h.update(f.read())
    out = os.path.join(CACHE, cache, h.hexdigest()[:16])
    jar = os.path.join(out, jar_name)
    if not os.path.exists(os.path.join(out, "ok")):
        # build beside it and rename: a concurrent run never sees a half-built directory
        tmp = f"{out}.tmp-{os.getpid()}"
        log(f"{what}: building the job into {out} (Maven, once)")
        t0 = time.monotonic()
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
        mvn_log = os.path.join(tmp, "mvn.log")
        with open(mvn_log, "w") as f:
            r = subprocess.run(["mvn", "-q", "-B", "-f", os.path.join(src, "pom.xml"),
                                f"-Dhc.build.dir={tmp}", "package",
                                "dependency:copy-dependencies"], stdout=f, stderr=f)
        if r.returncode != 0 or not os.path.exists(os.path.join(tmp, os.path.basename(jar))):
            sys.exit(f"{what}: Maven build failed (log: {mvn_log})\n"
                     + open(mvn_log).read()[-3000:])
        open(os.path.join(tmp, "ok"), "w").close()
        try:
            os.rename(tmp, out)
        except OSError:  # another run got there first (or a stale incomplete one is there)
            if not os.path.exists(os.path.join(out, "ok")):
                shutil.rmtree(out, ignore_errors=True)
                os.rename(tmp, out)
            else:
                shutil.rmtree(tmp, ignore_errors=True)
        log(f"{what}: built in {time.monotonic() - t0:.1f} s")
    return f"{jar}:{os.path.join(out, 'libs', '*')}"


def consumed(p, group, topics):
    """True when group's committed offsets equal the end of every partition of every topic."""
    for topic in topics:
        ends, committed = hcbench.topic_ends(p.brokers, topic, group)
        if not ends:
            return False
        for pt, (_, hi) in ends.items():
            if committed.get(pt, -1) < hi:
                return False
    return True


def read_totals(brokers, topic):
    """The last value per key of the Streams output topic (read_committed)."""
    sys.path.insert(0, os.path.join(hcbench.REPO, "tests", "oracle"))
    import oracle  # noqa: E402

    totals = {}

    def keep(m):
        totals[m.key()] = struct.unpack(">q", m.value())[0]

    oracle.read_topic(brokers, topic, keep)
    return {k: v for k, v in totals.items() if v != 0}


def compare(name, got, want):
    bad = [k for k in set(got) | set(want) if got.get(k, 0) != want.get(k, 0)]
    if bad:
        for k in sorted(bad)[:10]:
            log(f"{name}: post {k!r}: {got.get(k, 0)} != recount {want.get(k, 0)}")
        sys.exit(f"{name}: {len(bad)} of {len(want)} posts differ from the recount")
    log(f"{name}: exact ({len(want)} posts with a non-zero count match the recount)")


def run_streams(p, work, raw, events, want, classpath, threads):
    app = f"b{p.run}-streams"
    out_topic = f"b{p.run}.streams-counts"
    admin = AdminClient({"bootstrap.servers": p.brokers})
    for f in admin.create_topics([NewTopic(out_topic, 8, 1)]).values():
        f.result(30)
    state_dir = os.path.join(work, "streams-state")
    logpath = os.path.join(work, "streams.log")
    cmd = ["java", "-Xmx1g", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
           "-cp", classpath, "hotcount.bench.LikeCounts", p.brokers, raw, out_topic, app,
           f"num.stream.threads={threads}", f"state.dir={state_dir}"]
    logf = open(logpath, "w")
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=logf, stderr=logf)
    repartition = f"{app}-by-post-repartition"
    deadline = t0 + max(180, events / 2000)
    try:
        while not consumed(p, app, [raw, repartition]):
            if proc.poll() is not None:
                sys.exit(f"streams: the JVM exited {proc.returncode}: "
                         + open(logpath).read()[-3000:])
            if time.monotonic() > deadline:
                sys.exit("streams: did not consume its input in time; log: "
                         + open(logpath).read()[-3000:])
            time.sleep(0.2)
        wall = time.monotonic() - t0
        cpu = hcbench.cpu_seconds(proc.pid)
        rss = hcbench.peak_rss_mib(proc.pid)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        logf.close()
    startup = re.search(r"hc-streams: state RUNNING cpu_ms=(\d+) uptime_ms=(\d+)",
                        open(logpath).read())
    start_cpu = int(startup.group(1)) / 1000 if startup else None
    start_wall = int(startup.group(2)) / 1000 if startup else None
    compare("streams", read_totals(p.brokers, out_topic), want)
    return hcbench.result(
        p, "kafka-streams-eos-v2", events, wall, cpu, threads=threads, exact=True,
        cpu_s_startup=start_cpu, wall_s_startup=start_wall,
        events_per_cpu_s_excl_startup=(round(events / (cpu - start_cpu), 1)
                                       if start_cpu is not None and cpu > start_cpu else None),
        peak_rss_mib=round(rss, 1), posts=p.posts, zipf=p.zipf, raw_topic=raw)


def run_hotcount(p, work, raw, events, want):
    if not p.redis_uri:
        sys.exit("streams: HC_TEST_REDIS_URI is not set (with-servers --all)")
    cfg = hcbench.hc_config(p, work, raw=raw, store=p.redis_uri, flush_ms=1000)
    hcbench.hc(p, cfg, "init")
    t0 = time.monotonic()
    s1 = hcbench.Stage(p, cfg, "stage1", work)
    s2 = hcbench.Stage(p, cfg, "stage2", work)
    start_cpu = start_wall = None
    deadline = t0 + max(180, events / 2000)
    try:
        while True:
            m1, m2 = s1.samples(), s2.samples()
            if m1 is not None and m2 is not None:
                if start_cpu is None and hcbench.metric(m1, "hotcount_assigned_partitions") > 0:
                    start_cpu, start_wall = s1.cpu() + s2.cpu(), time.monotonic() - t0
                counted = hcbench.metric(m1, "hotcount_events_total")
                ok = hcbench.metric(m1, "hotcount_events_total", 'result="ok"')
                stored = hcbench.metric(m2, "hotcount_events_stored_total")
                if counted >= events and stored >= ok:
                    break
            if time.monotonic() > deadline:
                sys.exit("hotcount: stages did not finish in time; logs in " + work)
            time.sleep(0.1)
        wall = time.monotonic() - t0
        cpu1, cpu2 = s1.cpu(), s2.cpu()
        rss1, rss2 = hcbench.peak_rss_mib(s1.proc.pid), hcbench.peak_rss_mib(s2.proc.pid)
        v = hcbench.hc(p, cfg, "verify", "--timeout", "60", check=False)
        if v.returncode != 0 or not re.search(r"^verify: exact", v.stdout, re.M):
            sys.exit(f"hotcount: verify failed: {v.stdout[-2000:]}{v.stderr[-2000:]}")
        log(f"hotcount: {v.stdout.strip().splitlines()[-1]}")
    finally:
        for s in (s1, s2):
            if s.stop() != 0:
                sys.exit(f"hotcount: {s.kind} exited {s.proc.returncode} on SIGTERM")
    # The same independent recount as the Streams side, against the store.
    dump = hcbench.hc(p, cfg, "get", "--all").stdout
    got = {}
    for line in dump.splitlines():
        post, n = line.rsplit("\t", 1)
        if int(n) != 0:
            got[post.encode()] = int(n)
    compare("hotcount", got, want)
    cpu = cpu1 + cpu2
    return hcbench.result(
        p, "hotcount-eos", events, wall, cpu, exact=True, cpu_s_stage1=round(cpu1, 3),
        cpu_s_stage2=round(cpu2, 3),
        cpu_s_startup=round(start_cpu, 3) if start_cpu is not None else None,
        wall_s_startup=round(start_wall, 3) if start_wall is not None else None,
        events_per_cpu_s_excl_startup=(round(events / (cpu - start_cpu), 1)
                                       if start_cpu is not None and cpu > start_cpu else None),
        peak_rss_mib=round(rss1 + rss2, 1), posts=p.posts, zipf=p.zipf, raw_topic=raw,
        store="redis", flush_ms=1000)


def main():
    p = hcbench.Params("streams")
    threads = int(os.environ.get("BENCH_STREAMS_THREADS") or 1)
    with hcbench.work_dir("bench-streams-") as work:
        classpath = build_jar()
        raw, events = hcbench.load_raw(p, work)
        t0 = time.monotonic()
        # bench/run reads one loaded topic in every round: recount it once per suite run
        cache = (os.path.join(os.environ["BENCH_WORK"], f"streams-recount-{raw}.json")
                 if os.environ.get("BENCH_WORK") and p.raw_topic else None)
        if cache and os.path.exists(cache):
            with open(cache) as f:
                want = {k.encode("latin-1"): v for k, v in json.load(f).items()}
        else:
            want = hcbench.recount(p.brokers, raw)
            if cache:
                with open(cache, "w") as f:
                    json.dump({k.decode("latin-1"): v for k, v in want.items()}, f)
        log(f"bench: recounted {raw} independently: {len(want)} posts "
            f"in {time.monotonic() - t0:.1f} s")
        s = run_streams(p, work, raw, events, want, classpath, threads)
        h = run_hotcount(p, work, raw, events, want)
        log(f"streams: hotcount/streams events per CPU-second: "
            f"{h['events_per_cpu_s'] / s['events_per_cpu_s']:.2f}x "
            f"(excluding start-up: {(h['events_per_cpu_s_excl_startup'] or 0) / (s['events_per_cpu_s_excl_startup'] or 1):.2f}x)")


if __name__ == "__main__":
    main()
