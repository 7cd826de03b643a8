"""Benchmark scenario "flink" (issue 15, item 3): Flink 2.3 SQL with MiniBatch and local-global
aggregation and exactly-once checkpoints, in a MiniCluster inside one JVM, against hotcount
(stage 1 + stage 2, Redis store) on the same raw topic and broker, in one run.

Run by bench/scenarios/flink; parameters and output are described in bench/flink/README.md. The
helpers (parameters, topics, recount, CPU and RSS from /proc, the Maven build cache, the
output-topic reader, the comparison and the whole hotcount side) are the Kafka Streams
scenario's (bench/streams/hcbench.py and scenario.py), imported, so both baselines are built,
measured and checked alike.
"""
import json
import os
import re
import signal
import subprocess
import sys
import time

from confluent_kafka.admin import AdminClient, NewTopic

import hcbench
import scenario as streams
from hcbench import log

HERE = os.path.dirname(os.path.realpath(__file__))
JOB = "hotcount.bench.flink.FlinkLikeCounts"
VARIANT = "flink-minibatch-2phase-eos"


def settings():
    """The job's knobs (BENCH_FLINK_*), with the issue's defaults."""
    env = os.environ
    return {
        "parallelism": int(env.get("BENCH_FLINK_PARALLELISM") or 2),
        "checkpoint-ms": int(env.get("BENCH_FLINK_CHECKPOINT_MS") or 1000),
        "minibatch-latency-ms": int(env.get("BENCH_FLINK_MINIBATCH_LATENCY_MS") or 1000),
        "minibatch-size": int(env.get("BENCH_FLINK_MINIBATCH_SIZE") or 5000),
        "txn-timeout-ms": int(env.get("BENCH_FLINK_TXN_TIMEOUT_MS") or 60000),
    }


def expected(p, raw):
    """The independent recount of raw (tests/oracle), shared with the streams scenario: bench/run
    reads one loaded topic in every round, so it is recounted once per suite run."""
    cache = (os.path.join(os.environ["BENCH_WORK"], f"streams-recount-{raw}.json")
             if os.environ.get("BENCH_WORK") and p.raw_topic else None)
    if cache and os.path.exists(cache):
        with open(cache) as f:
            return {k.encode("latin-1"): v for k, v in json.load(f).items()}
    t0 = time.monotonic()
    want = hcbench.recount(p.brokers, raw)
    log(f"bench: recounted {raw} independently: {len(want)} posts "
        f"in {time.monotonic() - t0:.1f} s")
    if cache:
        with open(cache + f".tmp-{os.getpid()}", "w") as f:
            json.dump({k.decode("latin-1"): v for k, v in want.items()}, f)
        os.replace(cache + f".tmp-{os.getpid()}", cache)
    return want


def marker(text, what):
    """(cpu_s, uptime_s) of the job's `hc-flink: WHAT` line, or (None, None)."""
    m = re.search(rf"^hc-flink: {what} cpu_ms=(\d+) uptime_ms=(\d+)$", text, re.M)
    return (int(m.group(1)) / 1000, int(m.group(2)) / 1000) if m else (None, None)


def check_plan(text):
    """The optimized plan the job printed must hold MiniBatch and both aggregation phases:
    otherwise a setting did not take and the run measured something else."""
    m = re.search(r"^hc-flink: plan\n(.*?)^hc-flink: end of plan$", text, re.M | re.S)
    plan = m.group(1) if m else ""
    opt = plan.split("== Optimized Execution Plan ==")[-1]
    missing = [op for op in ("MiniBatchAssigner", "LocalGroupAggregate", "GlobalGroupAggregate")
               if op not in opt]
    if missing:
        sys.exit(f"flink: the optimized plan lacks {', '.join(missing)}:\n{plan[-3000:]}")


def run_flink(p, work, raw, events, want, classpath, s):
    out_topic = f"b{p.run}.flink-counts"
    admin = AdminClient({"bootstrap.servers": p.brokers})
    for f in admin.create_topics([NewTopic(out_topic, 8, 1)]).values():
        f.result(30)
    logpath = os.path.join(work, "flink.log")
    cmd = ["java", "-Xmx1g", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
           # one INFO line per completed checkpoint: counted below
           "-Dorg.slf4j.simpleLogger.log.org.apache.flink.runtime.checkpoint"
           ".CheckpointCoordinator=info",
           # a warning per client metric whose name two Kafka clients share: noise
           "-Dorg.slf4j.simpleLogger.log.org.apache.flink.metrics=error",
           "-cp", classpath, JOB, f"brokers={p.brokers}", f"raw={raw}", f"out={out_topic}",
           f"group=b{p.run}-flink", f"txn-prefix=b{p.run}-flink",
           f"checkpoint-dir={os.path.join(work, 'flink-checkpoints')}",
           *(f"{k}={v}" for k, v in s.items())]
    t0 = time.monotonic()
    with open(logpath, "w") as logf:
        proc = subprocess.Popen(cmd, stdout=logf, stderr=logf)
    deadline = t0 + max(300, events / 2000)
    status = rusage = None
    try:
        while True:
            pid, status, rusage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                sys.exit("flink: the job did not finish in time; log: "
                         + open(logpath).read()[-3000:])
            time.sleep(0.2)
        wall_exit = time.monotonic() - t0
    finally:
        if status is None:
            os.kill(proc.pid, signal.SIGKILL)
            os.waitpid(proc.pid, 0)
        proc.returncode = 0  # reaped here by wait4: keep Popen from waiting again
    text = open(logpath).read()
    if not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 0:
        sys.exit(f"flink: the JVM ended with status {status}: {text[-3000:]}")
    check_plan(text)
    cpu, wall = marker(text, "finished")
    start_cpu, start_wall = marker(text, "first event")
    if cpu is None:
        sys.exit("flink: no 'finished' line in the job's log: " + text[-3000:])
    cpu_exit = rusage.ru_utime + rusage.ru_stime
    checkpoints = len(re.findall(r"Completed checkpoint \d+ for job", text))
    got = streams.read_totals(p.brokers, out_topic)
    try:
        streams.compare("flink", got, want)
        exact = True
    except SystemExit as e:  # reported as inexact, then the scenario fails (main)
        log(str(e))
        exact = False
    return hcbench.result(
        p, VARIANT, events, wall, cpu, exact=exact, parallelism=s["parallelism"],
        checkpoint_ms=s["checkpoint-ms"], minibatch_latency_ms=s["minibatch-latency-ms"],
        minibatch_size=s["minibatch-size"], checkpoints=checkpoints,
        cpu_s_startup=start_cpu, wall_s_startup=start_wall,
        events_per_cpu_s_excl_startup=(round(events / (cpu - start_cpu), 1)
                                       if start_cpu is not None and cpu > start_cpu else None),
        cpu_s_to_exit=round(cpu_exit, 3), wall_s_to_exit=round(wall_exit, 3),
        peak_rss_mib=round(rusage.ru_maxrss / 1024, 1), posts=p.posts, zipf=p.zipf,
        raw_topic=raw)


def main():
    p = hcbench.Params("flink")
    s = settings()
    with hcbench.work_dir("bench-flink-") as work:
        classpath = streams.build_jar(HERE, "flink-bench", "hotcount-flink-bench.jar", "flink")
        raw, events = hcbench.load_raw(p, work)
        want = expected(p, raw)
        f = run_flink(p, work, raw, events, want, classpath, s)
        h = streams.run_hotcount(p, work, raw, events, want)
        log(f"flink: hotcount/flink events per CPU-second: "
            f"{h['events_per_cpu_s'] / f['events_per_cpu_s']:.2f}x "
            f"(excluding start-up: {(h['events_per_cpu_s_excl_startup'] or 0) / (f['events_per_cpu_s_excl_startup'] or 1):.2f}x)")
        if not f["exact"]:
            sys.exit("flink: inexact (see above)")


if __name__ == "__main__":
    main()
