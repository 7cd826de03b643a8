"""Shared helpers for the benchmark scenarios (bench/scenarios/*): the environment they are
given, hotcount stage processes with their metrics, CPU and memory of a process from /proc, and
the one-JSON-line-per-variant output.

CPU seconds of a measured process come from /proc/<pid>/stat (utime + stime, every thread) or,
once it has exited, from wait4's rusage; peak RSS from VmHWM or rusage's ru_maxrss. Never from
wall time."""

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

CLK_TCK = os.sysconf("SC_CLK_TCK")


def env(name, default=None):
    value = os.environ.get(name, default)
    if value is None:
        sys.exit(f"{os.path.basename(sys.argv[0])}: {name} is not set (run it from bench/run)")
    return value


SMOKE = os.environ.get("BENCH_SMOKE") == "1"


def emit(obj):
    """One measured variant: one JSON line on stdout."""
    # null when a run is too short to measure (a smoke run's CPU time can round to 0)
    for key, den in (("events_per_s", "wall_s"), ("events_per_cpu_s", "cpu_s")):
        if key not in obj:
            ok = obj.get(den) and obj.get("events")
            obj[key] = obj["events"] / obj[den] if ok else None
    print(json.dumps(obj, sort_keys=False), flush=True)


def log(msg):
    print(f"[{os.path.basename(sys.argv[0])}] {msg}", file=sys.stderr, flush=True)


def run_id():
    return f"{int(time.time() * 1000) % 100000000}-{os.getpid()}"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def proc_cpu_s(pid):
    """utime + stime of every thread of pid, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def listener_pid(port):
    """The pid of the process that listens on 127.0.0.1:port (its socket found in /proc), or
    None."""
    inode = None
    # a JVM listens on an IPv6 socket: 127.0.0.1 is ::ffff:127.0.0.1 there
    for path, want in (("/proc/net/tcp", f"0100007F:{port:04X}"),
                       ("/proc/net/tcp6", f"0000000000000000FFFF00000100007F:{port:04X}")):
        with open(path) as f:
            for line in f.readlines()[1:]:
                cols = line.split()
                if cols[1] == want and cols[3] == "0A":
                    inode = cols[9]
                    break
        if inode is not None:
            break
    if inode is None:
        return None
    target = f"socket:[{inode}]"
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                if os.readlink(f"/proc/{pid}/fd/{fd}") == target:
                    return int(pid)
        except OSError:
            continue
    return None


def server_pids():
    """{name: pid} of the store and broker servers on loopback that the benchmarks talk to
    (with-servers' Redis and the first Kafka broker), for their CPU seconds."""
    out = {}
    redis = os.environ.get("HC_TEST_REDIS_URI", "")
    brokers = os.environ.get("HC_TEST_BROKERS", "")
    for name, hostport in (("redis", redis.split("://", 1)[-1].split("/", 1)[0]
                            .rsplit("@", 1)[-1]),
                           ("kafka", brokers.split(",", 1)[0])):
        try:
            pid = listener_pid(int(hostport.rsplit(":", 1)[1]))
        except (IndexError, ValueError):
            pid = None
        if pid:
            out[name] = pid
    return out


def pg_server_pid():
    """The PostgreSQL postmaster that HC_TEST_PG_URI names (the process listening on its port on
    loopback), or None."""
    uri = os.environ.get("HC_TEST_PG_URI", "")
    hostport = uri.split("://", 1)[-1].split("/", 1)[0].rsplit("@", 1)[-1]
    try:
        return listener_pid(int(hostport.rsplit(":", 1)[1]))
    except (IndexError, ValueError):
        return None


def pg_server_cpu_s(postmaster):
    """Every CPU-second PostgreSQL has used so far: the postmaster's own, its exited children's
    (a backend per connection: the kernel adds a child's CPU to cutime/cstime when the
    postmaster reaps it) and its live children's (backends, WAL writer, checkpointer...).
    A child reaped while the live ones are being read would be in neither sum (a baseline
    whose backend exits just as it ends measured no CPU at all, 2026-12-05), so the reading is
    retried until the postmaster's reaped total is the same before and after it."""
    def own():
        with open(f"/proc/{postmaster}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return [int(x) for x in fields[11:15]]

    for _ in range(100):
        before = own()
        live = 0
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open(f"/proc/{pid}/stat") as f:
                    child = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(child[1]) == postmaster:
                live += int(child[11]) + int(child[12])
        if own()[2:] == before[2:]:
            return (sum(before) + live) / CLK_TCK
    sys.exit("pg_server_cpu_s: the postmaster kept reaping children while it was read")


def servers_cpu_s(pids):
    """{name: utime + stime} now, for server_pids()'s processes."""
    return {name: proc_cpu_s(pid) for name, pid in pids.items()}


def proc_hwm_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def scrape(addr, timeout=2.0):
    """Prometheus text -> {name: sum over every label set} and {(name, labels): value}."""
    with urllib.request.urlopen(f"http://{addr}/metrics", timeout=timeout) as r:
        text = r.read().decode()
    sums, series = {}, {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        name, _, labels = head.partition("{")
        try:
            v = float(value)
        except ValueError:
            continue
        sums[name] = sums.get(name, 0.0) + v
        series[(name, labels.rstrip("}"))] = v
    return sums, series


class Namespace:
    """A fresh set of topics, groups and a Redis prefix over one shared raw topic, written as a
    hotcount properties file."""

    def __init__(self, workdir, raw_topic, store=None, extra=None):
        self.id = run_id()
        rid = self.id
        self.raw = raw_topic
        self.partials = f"bench-{rid}.partials"
        self.group1 = f"bench-{rid}-stage1"
        self.group2 = f"bench-{rid}-stage2"
        self.prefix = f"bench-{rid}:"
        self.store = store or env("HC_TEST_REDIS_URI")
        self.path = os.path.join(workdir, f"hotcount-{rid}.properties")
        props = {
            "brokers": env("HC_TEST_BROKERS"),
            "topic.raw": raw_topic,
            "topic.partials": self.partials,
            "topic.dlq": f"bench-{rid}.dlq",
            "group.stage1": self.group1,
            "group.stage2": self.group2,
            "store": self.store,
            "store.redis.prefix": self.prefix,
            "log.level": "warn",
            # consumer lag reaches the metrics within half a second
            "kafka.consumer.statistics.interval.ms": "500",
        }
        props.update(extra or {})
        with open(self.path, "w") as f:
            for k, v in props.items():
                f.write(f"{k}={v}\n")
        subprocess.run([env("BENCH_HOTCOUNT"), "init", "-c", self.path], check=True,
                       stdout=subprocess.DEVNULL)


class Stage:
    """One `hotcount stage1|stage2` process with its own metrics endpoint."""

    def __init__(self, kind, ns, instance, overrides=None, logdir=None):
        self.kind = kind
        self.metrics = f"127.0.0.1:{free_port()}"
        args = [env("BENCH_HOTCOUNT"), kind, "-c", ns.path, "-X", f"instance.id={instance}",
                "-X", f"metrics.listen={self.metrics}"]
        for k, v in (overrides or {}).items():
            args += ["-X", f"{k}={v}"]
        logdir = logdir or tempfile.gettempdir()
        self.logpath = os.path.join(logdir, f"{ns.id}-{instance}.log")
        self.log = open(self.logpath, "w")
        self.p = subprocess.Popen(args, stdout=self.log, stderr=self.log)
        self.rusage = None
        self.status = None

    def metric(self, name):
        try:
            sums, _ = scrape(self.metrics)
        except OSError:
            return None
        return sums.get(name, 0.0)

    def series(self):
        try:
            return scrape(self.metrics)[1]
        except OSError:
            return {}

    def cpu_s(self):
        return proc_cpu_s(self.p.pid)

    def hwm_bytes(self):
        return proc_hwm_bytes(self.p.pid)

    def alive(self):
        return self.p.poll() is None if self.rusage is None else False

    def stop(self, timeout=60):
        """SIGTERM, then wait4: exit status and the child's whole-life rusage."""
        if self.rusage is not None:
            return self.status
        self.p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while True:
            pid, status, ru = os.wait4(self.p.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                self.p.kill()
                pid, status, ru = os.wait4(self.p.pid, 0)
                break
            time.sleep(0.02)
        self.p.returncode = os.waitstatus_to_exitcode(status)
        self.status, self.rusage = self.p.returncode, ru
        self.log.close()
        return self.status

    def peak_rss_bytes(self):
        return self.rusage.ru_maxrss * 1024 if self.rusage else self.hwm_bytes()

    def tail(self, n=20):
        try:
            with open(self.logpath) as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""


def wait_for(cond, timeout, what, stages=(), poll=0.1):
    """Polls cond() until it returns a true value (returned); fails after timeout or when a
    stage died."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        for st in stages:
            if not st.alive():
                raise RuntimeError(f"{st.kind} exited {st.p.poll()} while waiting for {what}:\n"
                                   + st.tail())
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(poll)


def stage1_committed(stages):
    total = 0.0
    for st in stages:
        sums = st.metric("hotcount_events_total")
        if sums is None:
            return None
        total += sums
    return total


def run_pipeline(ns, events, n_stage1=1, with_stage2=True, overrides1=None, overrides2=None,
                 logdir=None, timeout=600, on_start=None):
    """Runs stage 1 (n processes) and optionally stage 2 over ns.raw until every one of `events`
    is committed by stage 1 (and stored by stage 2). Times and CPU are taken from the first
    consumed event (group joins and start-up are not per-event work) to completion. Returns a
    dict of measurements; the stages are stopped."""
    s1 = [Stage("stage1", ns, f"s1-{i}", overrides1, logdir) for i in range(n_stage1)]
    s2 = [Stage("stage2", ns, "s2-0", overrides2, logdir)] if with_stage2 else []
    every = s1 + s2
    try:
        def started():
            # Every stage-1 process holds partitions (with several, after the rebalance their
            # joins cause) and events flow. What was consumed before that is not measured.
            n = 0.0
            for st in s1:
                if not (st.metric("hotcount_assigned_partitions") or 0) > 0:
                    return None
                n += st.metric("hotcount_events_consumed_total") or 0.0
            return n if n > 0 else None

        before = wait_for(started, 120, "stage 1 to start consuming", every, poll=0.02)
        t0 = time.monotonic()
        cpu0 = {st.p.pid: st.cpu_s() for st in every}
        if on_start:
            on_start()

        t_consumed = None

        def done():
            nonlocal t_consumed
            if t_consumed is None:
                n = sum(st.metric("hotcount_events_consumed_total") or 0.0 for st in s1)
                if n >= events:
                    t_consumed = time.monotonic()
            c = stage1_committed(s1)
            if c is None or c < events:
                return False
            if s2:
                stored = s2[0].metric("hotcount_events_stored_total")
                return stored is not None and stored >= events
            return True

        wait_for(done, timeout, f"{events} events through the pipeline", every, poll=0.05)
        t_done = time.monotonic()
        wall = t_done - t0
        cpu = {st.p.pid: st.cpu_s() - cpu0[st.p.pid] for st in every}
        t_consumed = t_consumed or t_done
        res = {
            "events": int(events - before),
            "events_total": events,
            "wall_s": wall,
            "cpu_s": sum(cpu.values()),
            "stage1_cpu_s": sum(cpu[st.p.pid] for st in s1),
            # stage 1's rate while it had input: the pipeline's sustained throughput when
            # stage 2 keeps up (drain_s, the time from the last event consumed to the last one
            # committed or stored, stays near one flush per stage)
            "sustained_events_per_s": (events - before) / max(t_consumed - t0, 1e-9),
            "drain_s": t_done - t_consumed,
            "stage1_peak_rss_bytes": max(st.hwm_bytes() for st in s1),
        }
        if s2:
            res["stage2_cpu_s"] = cpu[s2[0].p.pid]
            res["stage2_peak_rss_bytes"] = s2[0].hwm_bytes()
            res["store_writes"] = s2[0].metric("hotcount_store_keys_written_total")
            series = s2[0].series()
            res["store_batches"] = series.get(
                ("hotcount_store_batches_total", 'outcome="commit"'), 0.0)
    finally:
        for st in every:
            status = st.stop()
            if status != 0:
                log(f"{st.kind} exited {status}:\n{st.tail()}")
    # every stage's whole life (start-up, joins and stop included), from wait4
    res["cpu_s_whole_life"] = sum(st.rusage.ru_utime + st.rusage.ru_stime for st in every)
    return res
