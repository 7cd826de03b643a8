#!/usr/bin/env python3
"""bench/run's driver: makes and loads the workload once, runs the scenarios interleaved, and
writes RESULTS.md, results/*.json and the plots. Runs under tests/harness/with-servers (it needs
HC_TEST_BROKERS, HC_TEST_REDIS_URI, HC_TEST_PG_URI). See bench/README.md."""

import argparse
import concurrent.futures
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import report  # noqa: E402

# Run order inside one round; scenarios found in bench/scenarios/ but not listed run last.
ORDER = ["hotpath", "floor", "naive", "store_writes", "memory", "scaling", "streams", "flink",
         "latency", "adaptive"]
# Which loaded topics each scenario reads (the others make their own).
NEEDS = {
    "hotpath": [],
    "floor": ["zipf0.99"],
    "naive": ["zipf0.99"],
    "store_writes": ["zipf0.99", "zipf1.2", "posts100k"],
    "memory": ["uniform*"],
    "scaling": ["zipf0.99x3"],
    "streams": ["zipf0.99"],
    "flink": ["zipf0.99"],
    "latency": [],
    "adaptive": ["zipf0.99", "zipf1.2"],
}


def log(msg):
    print(f"[bench] {time.strftime('%H:%M:%S')} {msg}", file=sys.stderr, flush=True)


def workloads(smoke, events):
    """name -> generator options. The main workload is zipf0.99."""
    posts = 10000 if smoke else 1000000
    w = {
        "zipf0.99": {"events": events, "posts": posts, "zipf": 0.99},
        "zipf1.2": {"events": events, "posts": posts, "zipf": 1.2},
        "posts100k": {"events": events, "posts": posts // 10, "zipf": 0.99},
        # scaling: the first stage-1 process reads on its own until the second has joined (a
        # rebalance, about a second), so the topic must outlast that by far
        "zipf0.99x3": {"events": 3 * events, "posts": posts, "zipf": 0.99},
    }
    mem_keys = [1000, 10000] if smoke else [1000, 10000, 100000, 1000000]
    for k in mem_keys:
        # the same number of events for every K: the consumer's prefetch buffers, which grow
        # with the topic's size, then weigh the same in every peak RSS
        w[f"uniform{k}"] = {"events": max(k, events), "posts": k, "zipf": 0, "uniform": True}
    return w, mem_keys


def gen_and_load(build, work, name, spec, brokers, tag):
    exe = os.path.join(build, "bench", "bench_workload")
    path = os.path.join(work, f"{name}.tsv")
    args = [exe, "gen", "--out", path, "--events", str(spec["events"]), "--posts",
            str(spec["posts"]), "--seed", "1"]
    if spec.get("uniform"):
        args.append("--uniform")
    else:
        args += ["--zipf", str(spec["zipf"])]
    summary = json.loads(subprocess.run(args, check=True, stdout=subprocess.PIPE,
                                        text=True).stdout)
    topic = f"bench-{tag}-{name}"
    loaded = json.loads(subprocess.run(
        [exe, "load", "--file", path, "--brokers", brokers, "--topic", topic,
         "--partitions", "16"], check=True, stdout=subprocess.PIPE, text=True).stdout)
    log(f"loaded {topic}: {loaded['loaded']} events in {loaded['seconds']:.1f} s")
    return {**spec, "topic": topic, "file": path, "celeb_events": summary["celeb_events"],
            "avg_value_bytes": summary["avg_value_bytes"],
            "virtual_seconds": summary["virtual_seconds"], "load_seconds": loaded["seconds"]}


def machine():
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = ""
    try:
        with open("/proc/meminfo") as f:
            mem = f"{int(f.readline().split()[1]) // 1024} MiB"
    except OSError:
        pass
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                            stdout=subprocess.PIPE, text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                           stdout=subprocess.PIPE, text=True).stdout.strip()
    return {"nproc": os.cpu_count(), "model": model, "memory": mem,
            "kernel": platform.release(), "commit": commit + (" (+ uncommitted changes)"
                                                              if dirty else ""),
            "loadavg": open("/proc/loadavg").read().split()[:3]}


def main():
    ap = argparse.ArgumentParser(prog="bench/run")
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--only", default="")
    ap.add_argument("--skip", default="")
    ap.add_argument("--runs", type=int, default=0)
    ap.add_argument("--events", type=int, default=0)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench"))
    ap.add_argument("--build", required=True)
    a = ap.parse_args()
    runs = a.runs or (1 if a.smoke else 3)
    events = a.events or (20000 if a.smoke else 1000000)
    for var in ("HC_TEST_BROKERS", "HC_TEST_REDIS_URI", "HC_TEST_PG_URI"):
        if not os.environ.get(var):
            sys.exit(f"bench/run: {var} is not set: run it under tests/harness/with-servers "
                     "(bench/run without --no-setup does)")
    hotcount = os.path.join(a.build, "hotcount")
    if not os.access(hotcount, os.X_OK):
        sys.exit(f"bench/run: no {hotcount}")

    sdir = os.path.join(ROOT, "bench", "scenarios")
    found = sorted(n for n in os.listdir(sdir)
                   if os.path.isfile(os.path.join(sdir, n)) and not n.startswith(".")
                   and os.access(os.path.join(sdir, n), os.X_OK))
    names = [n for n in ORDER if n in found] + [n for n in found if n not in ORDER]
    if a.only:
        want = a.only.split(",")
        unknown = [n for n in want if n not in found]
        if unknown:
            sys.exit(f"bench/run: no scenario {', '.join(unknown)} (have: {', '.join(names)})")
        names = [n for n in names if n in want]
    if a.skip:
        names = [n for n in names if n not in a.skip.split(",")]

    started = datetime.datetime.now(datetime.timezone.utc)
    info = machine()
    work = tempfile.mkdtemp(prefix="hotcount-bench-")
    tag = f"{int(time.time()) % 1000000}-{os.getpid()}"
    specs, mem_keys = workloads(a.smoke, events)
    needed = set()
    for n in names:
        for t in NEEDS.get(n, ["zipf0.99"]):
            needed |= {k for k in specs if k == t or (t.endswith("*") and
                                                      k.startswith(t[:-1]))}
    needed.add("zipf0.99")  # the main workload file feeds the hot path
    topics = {}
    t0 = time.monotonic()
    # two at a time: one generates while the other waits for the broker
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        futures = {name: pool.submit(gen_and_load, a.build, work, name, specs[name],
                                     os.environ["HC_TEST_BROKERS"], tag)
                   for name in specs if name in needed}
        for name, fut in futures.items():
            topics[name] = fut.result()
    log(f"workload ready in {time.monotonic() - t0:.0f} s")
    with open(os.path.join(work, "topics.json"), "w") as f:
        json.dump(topics, f, indent=1)
    main_w = topics["zipf0.99"]
    env = dict(os.environ)
    env.update({
        "BENCH_EVENTS": str(main_w["events"]), "BENCH_POSTS": str(main_w["posts"]),
        "BENCH_ZIPF": "0.99", "BENCH_SMOKE": "1" if a.smoke else "0",
        "BENCH_HOTCOUNT": hotcount, "BENCH_BUILD": a.build, "BENCH_WORK": work,
        "BENCH_WORKLOAD": main_w["file"], "BENCH_TOPIC": main_w["topic"],
        "BENCH_RAW_TOPIC": main_w["topic"], "BENCH_TOPICS": os.path.join(work, "topics.json"),
        "BENCH_MEM_KEYS": " ".join(str(k) for k in mem_keys),
        "BENCH_CELEB_EVENTS": str(main_w["celeb_events"]),
        "PYTHONDONTWRITEBYTECODE": "1",
    })
    if a.smoke:
        env.setdefault("BENCH_LATENCY_SECONDS", "3")

    results, failures = [], []
    logdir = os.path.join(work, "logs")
    os.makedirs(logdir)
    timeout = 300 if a.smoke else 1800
    for r in range(1, runs + 1):
        for n in names:
            log(f"run {r}/{runs}: {n}")
            logpath = os.path.join(logdir, f"{n}-{r}.log")
            t = time.monotonic()
            with open(logpath, "w") as errf:
                try:
                    p = subprocess.run([os.path.join(sdir, n)], env=env, stdout=subprocess.PIPE,
                                       stderr=errf, text=True, timeout=timeout)
                    out, rc = p.stdout, p.returncode
                except subprocess.TimeoutExpired as e:
                    out, rc = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (
                        e.stdout or ""), "timeout"
            lines = 0
            for line in out.splitlines():
                line = line.strip()
                if not line.startswith("{"):
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as e:
                    failures.append({"scenario": n, "run": r, "error": f"bad JSON line: {e}"})
                    continue
                missing = [k for k in ("scenario", "variant", "events", "wall_s", "cpu_s",
                                       "events_per_s", "events_per_cpu_s") if k not in obj]
                if missing:
                    failures.append({"scenario": n, "run": r,
                                     "error": f"line lacks {', '.join(missing)}: {line[:200]}"})
                obj["run"] = r
                results.append(obj)
                lines += 1
            secs = time.monotonic() - t
            if rc != 0 or lines == 0:
                with open(logpath) as f:
                    tail = f.read()[-3000:]
                failures.append({"scenario": n, "run": r,
                                 "error": f"exit {rc}, {lines} JSON lines", "log": tail})
                log(f"{n} failed (exit {rc}); log tail:\n{tail}")
            else:
                log(f"{n}: {lines} variants in {secs:.0f} s")

    resdir = os.path.join(a.out, "results")
    os.makedirs(resdir, exist_ok=True)
    for stale in ("profile.md", "reading.md"):
        # a profile and its reading belong to the run that made them
        if os.path.exists(os.path.join(resdir, stale)):
            os.remove(os.path.join(resdir, stale))
    if not a.smoke and ("hotpath" in names or "floor" in names):
        log("profiling (callgrind on the hot path, perf on stage 1)")
        prof = os.path.join(HERE, "profile.py")
        p = subprocess.run([sys.executable, prof, resdir], env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if p.returncode != 0:
            failures.append({"scenario": "profile", "run": 0, "error": f"exit {p.returncode}",
                             "log": p.stderr[-3000:]})

    finished = datetime.datetime.now(datetime.timezone.utc)
    meta = {"started": started.isoformat(timespec="seconds"),
            "finished": finished.isoformat(timespec="seconds"), "runs": runs,
            "smoke": a.smoke, "events": events, "scenarios": names, "machine": info,
            "loadavg_end": open("/proc/loadavg").read().split()[:3],
            "workloads": {k: {kk: vv for kk, vv in v.items() if kk != "file"}
                          for k, v in topics.items()},
            "command": "bench/run " + " ".join(sys.argv[1:])}
    os.makedirs(a.out, exist_ok=True)
    report.write(a.out, meta, results, failures)
    log(f"wrote {os.path.join(a.out, 'RESULTS.md')}")
    if os.environ.get("BENCH_KEEP_WORK") != "1":
        shutil.rmtree(work, ignore_errors=True)
    else:
        log(f"kept {work}")
    if failures:
        log(f"{len(failures)} failure(s): see RESULTS.md")
        sys.exit(1)


if __name__ == "__main__":
    main()
