"""Helpers shared by the streams and latency benchmark scenarios (bench/scenarios/streams,
bench/scenarios/latency): the scenario parameters, a unique namespace per run, loading a raw
topic, running hotcount's stages as processes, their CPU seconds from /proc, their metrics, and a
minimal Redis client. Logs go to stderr; stdout is reserved for the scenario's JSON lines.
"""
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

from confluent_kafka import Consumer, TopicPartition

CLK_TCK = os.sysconf("SC_CLK_TCK")
REPO = os.path.realpath(os.path.join(os.path.dirname(__file__), "..", ".."))


def log(*args):
    print(*args, file=sys.stderr, flush=True)


class Params:
    """The scenario interface's environment (see bench/streams/README.md)."""

    def __init__(self, scenario):
        env = os.environ
        self.scenario = scenario
        self.smoke = env.get("BENCH_SMOKE", "") == "1"
        self.brokers = need("HC_TEST_BROKERS")
        self.redis_uri = env.get("HC_TEST_REDIS_URI", "")
        self.events = int(env.get("BENCH_EVENTS") or (20000 if self.smoke else 1000000))
        self.posts = int(env.get("BENCH_POSTS") or (10000 if self.smoke else 1000000))
        self.zipf = float(env.get("BENCH_ZIPF") or 0.99)
        build = env.get("BENCH_BUILD") or os.path.join(REPO, "build")
        self.build = os.path.realpath(build)
        self.hotcount = os.path.realpath(env.get("BENCH_HOTCOUNT") or os.path.join(build, "hotcount"))
        self.raw_topic = env.get("BENCH_RAW_TOPIC", "")
        self.run = f"{int(time.time() * 1000) % 100000000}-{os.getpid()}"
        if not os.access(self.hotcount, os.X_OK):
            sys.exit(f"{scenario}: no hotcount binary at {self.hotcount} (set BENCH_HOTCOUNT)")


@contextlib.contextmanager
def work_dir(prefix):
    """A scratch directory for one scenario run, removed afterwards unless BENCH_KEEP_WORK=1."""
    work = tempfile.mkdtemp(prefix=prefix)
    try:
        yield work
    finally:
        if os.environ.get("BENCH_KEEP_WORK") != "1":
            shutil.rmtree(work, ignore_errors=True)
        else:
            log(f"bench: work directory kept: {work}")


def need(name):
    v = os.environ.get(name)
    if not v:
        sys.exit(f"bench: {name} is not set; run under tests/harness/with-servers --all")
    return v


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def cpu_seconds(pid):
    """utime+stime of pid and of its waited-for children, from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat") as f:
        stat = f.read()
    fields = stat[stat.rindex(")") + 2:].split()
    # fields[0] is field 3 (state): utime..cstime are fields 14..17
    return sum(int(x) for x in fields[11:15]) / CLK_TCK


def peak_rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


def hc_config(p, work, *, raw, store, flush_ms=1000, extra=()):
    """A properties file with a namespace of its own for this run (topics, groups, prefix)."""
    path = os.path.join(work, "hotcount.properties")
    lines = [
        f"brokers={p.brokers}",
        f"topic.raw={raw}",
        f"topic.partials=b{p.run}.partials",
        f"topic.dlq=b{p.run}.dlq",
        f"group.stage1=b{p.run}-stage1",
        f"group.stage2=b{p.run}-stage2",
        f"store={store}",
        f"store.redis.prefix=likes-{p.run}:",
        f"flush.ms={flush_ms}",
        "log.level=warn",
        *extra,
    ]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path


def hc(p, cfg, *args, check=True, **kw):
    cmd = [p.hotcount, args[0], "-c", cfg, *args[1:]]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
    if check and r.returncode != 0:
        sys.exit(f"bench: {' '.join(cmd)} exited {r.returncode}: {r.stderr.strip()}{r.stdout}")
    return r


def topic_ends(brokers, topic, group=None):
    """{partition: (low, high)} of topic, and {partition: committed} of group when given."""
    c = Consumer({"bootstrap.servers": brokers, "group.id": group or "hcbench-reader",
                  "enable.auto.commit": False})
    try:
        md = c.list_topics(topic, timeout=30)
        if topic not in md.topics or md.topics[topic].error:
            return {}, {}
        parts = sorted(md.topics[topic].partitions)
        ends = {pt: c.get_watermark_offsets(TopicPartition(topic, pt), timeout=30, cached=False)
                for pt in parts}
        committed = {}
        if group:
            for tp in c.committed([TopicPartition(topic, pt) for pt in parts], timeout=30):
                committed[tp.partition] = tp.offset
        return ends, committed
    finally:
        c.close()


def load_raw(p, work):
    """The raw topic to read: BENCH_RAW_TOPIC, or a new one loaded with `hotcount produce`.
    Returns (topic, events in it)."""
    if p.raw_topic:
        ends, _ = topic_ends(p.brokers, p.raw_topic)
        if not ends:
            sys.exit(f"bench: BENCH_RAW_TOPIC {p.raw_topic} not found")
        return p.raw_topic, sum(hi - lo for lo, hi in ends.values())
    topic = f"b{p.run}.raw"
    cfg = hc_config(p, work, raw=topic, store="sqlite:" + os.path.join(work, "unused.db"))
    hc(p, cfg, "init")
    t0 = time.monotonic()
    hc(p, cfg, "produce", "--events", str(p.events), "--posts", str(p.posts), "--zipf",
       str(p.zipf), "--unlike-ratio", "0.05", "--invalid-ratio", "0", "--seed", "1")
    ends, _ = topic_ends(p.brokers, topic)
    n = sum(hi - lo for lo, hi in ends.values())
    log(f"bench: loaded {n} events into {topic} in {time.monotonic() - t0:.1f} s")
    if n != p.events:
        sys.exit(f"bench: {topic} holds {n} events, wanted {p.events}")
    return topic, n


def recount(brokers, topic):
    """The independent count per post (tests/oracle's rules and Kafka client, not hotcount's)."""
    sys.path.insert(0, os.path.join(REPO, "tests", "oracle"))
    import oracle  # noqa: E402  (the test oracle, reused for its validation rules)

    counts = {}

    def count(m):
        try:
            post, delta = oracle.validate(m.value(), 4096)
        except oracle.Invalid:
            return
        counts[post] = counts.get(post, 0) + delta

    oracle.read_topic(brokers, topic, count)
    return {k: v for k, v in counts.items() if v != 0}


def scrape(addr):
    """Sums of a /metrics endpoint's samples by metric name and labels."""
    with urllib.request.urlopen(f"http://{addr}/metrics", timeout=5) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$', line)
        if m:
            out[(m.group(1), m.group(2) or "")] = float(m.group(3))
    return out


def metric(samples, name, labels=None):
    return sum(v for (n, lab), v in samples.items()
               if n == name and (labels is None or labels in lab))


class Stage:
    """One `hotcount stage1|stage2` process with its own metrics port."""

    def __init__(self, p, cfg, kind, work, extra=()):
        self.kind = kind
        self.addr = f"127.0.0.1:{free_port()}"
        self.logpath = os.path.join(work, f"{kind}.log")
        self.logf = open(self.logpath, "w")
        self.proc = subprocess.Popen(
            [p.hotcount, kind, "-c", cfg, "-X", f"instance.id={kind}-{p.run}",
             "-X", f"metrics.listen={self.addr}", *extra], stdout=self.logf, stderr=self.logf)

    def samples(self):
        try:
            return scrape(self.addr)
        except OSError:
            if self.proc.poll() is not None:
                sys.exit(f"bench: {self.kind} exited {self.proc.returncode}: "
                         f"{open(self.logpath).read()[-2000:]}")
            return None

    def cpu(self):
        return cpu_seconds(self.proc.pid)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.logf.close()
        return self.proc.returncode


class Redis:
    """Just enough RESP for GET and DEL over one connection."""

    def __init__(self, uri):
        u = urllib.parse.urlparse(uri)
        self.sock = socket.create_connection((u.hostname or "127.0.0.1", u.port or 6379), 10)
        self.buf = b""
        if u.password:
            self.call("AUTH", *([u.username] if u.username else []), u.password)
        if u.path and u.path.strip("/"):
            self.call("SELECT", u.path.strip("/"))

    def call(self, *args):
        out = [f"*{len(args)}\r\n".encode()]
        for a in args:
            b = a if isinstance(a, bytes) else str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(b), b))
        self.sock.sendall(b"".join(out))
        return self._reply()

    def _line(self):
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise OSError("redis closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _reply(self):
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"-":
            raise OSError(rest.decode())
        if kind in (b"+", b":"):
            return rest
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            while len(self.buf) < n + 2:
                chunk = self.sock.recv(65536)
                if not chunk:
                    raise OSError("redis closed the connection")
                self.buf += chunk
            data, self.buf = self.buf[:n], self.buf[n + 2:]
            return data
        if kind == b"*":
            return [self._reply() for _ in range(int(rest))]
        raise OSError(f"unexpected redis reply {line!r}")


def result(p, variant, events, wall_s, cpu_s, **extra):
    line = {"scenario": p.scenario, "variant": variant, "events": events,
            "wall_s": round(wall_s, 3), "cpu_s": round(cpu_s, 3),
            "events_per_s": round(events / wall_s, 1) if wall_s > 0 else None,
            "events_per_cpu_s": round(events / cpu_s, 1) if cpu_s > 0 else None,
            "smoke": p.smoke, **extra,
            # other work on the machine distorts wall times: say how busy it was
            "loadavg_1m": float(open("/proc/loadavg").read().split()[0])}
    print(json.dumps(line), flush=True)
    return line
