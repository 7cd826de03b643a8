#!/usr/bin/env python3
r"""Attacks on hotcount's HTTP listeners, on loopback, each bounded in connections and time:

  http_attacks.py --hotcount BIN --config PROPS --metrics HOST:PORT [--seconds S]

PROPS names an initialised store; --metrics is a running stage's metrics endpoint. The script
starts `hotcount serve` itself (small limits: serve.max.connections=48, .per.ip=12,
serve.request.timeout.ms=2000) with three fake stages in serve.stages: one that answers with
absurd values (1e300, NaN, +Inf, a hot key with a control byte), one that trickles its answer a
byte at a time, and one that never accepts (a full listen backlog: connects hang). Then:

  stages      /v1/likes and /healthz answer within PROBE_BOUND_S throughout; /v1/stats answers
              as fast, shows the good stage up and the others down, no stage address or error text
              (serve.stats.expose=0), the absurd values clamped or null, valid JSON;
  smuggling   against serve and the stage's metrics endpoint: Content-Length with
              Transfer-Encoding, two Content-Lengths (different, equal), a list-valued one,
              Transfer-Encoding in HTTP/1.0, folded into another header or without a colon,
              bare LF line ends, HTTP/1.1 without Host (all answered by libmicrohttpd 1.0's
              strict parser), chunked alone, a GET with a body (by hotcount's framing check):
              each answered 400 with the connection closed and the smuggled second request never
              answered; a POST with a body 405 and closed; serve's
              hotcount_serve_requests_total counts each as a 400 (none as a 200; the bare-LF one,
              refused in its request line, not at all), its bad_framing_total only its own (the POST's
              included); and
              the clients' requests (HTTP/1.1 with Host, HTTP/1.0 with and without) answered 200;
  slowloris   SLOW_CONNS connections per listener from 6 source addresses (127.0.0.1..6) trickling one header
              byte every 0.5 s, reconnecting when cut, for --seconds (default 15), against serve
              and the stage's metrics endpoint at once; meanwhile probes from 127.0.0.77 of
              serve's /v1/likes and /healthz and the stage's /healthz and /metrics all answer 200
              within PROBE_BOUND_S, and no trickling connection lives past the request deadline
              (2 s for serve, 10 s for the stage, plus 1.5 s);
  sigterm     serve, mid-scrape of the bad stages, exits 0 within 2 s of SIGTERM;
  output      post ids with control bytes written straight into the SQLite store (no event can
              carry them): `hotcount get`, `get --all` and `top` print them escaped (backslash-x-NN),
              one line per row, and /v1/top is valid JSON holding the exact bytes.
Exit status 0 when every check holds; each failure is printed.
"""
import argparse
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

PROBE_BOUND_S = 1.0
SLOW_CONNS = 240
SOURCES = 6
SERVE_TIMEOUT_MS = 2000
STAGE_TIMEOUT_MS = 10000  # hc_metrics_http_default_limits
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, flush=True)
    return cond


# ---- fake stages ------------------------------------------------------------------------------

ABSURD_PAGE = (
    "# TYPE hotcount_events_total counter\n"
    "hotcount_events_total 1e300\n"
    "hotcount_events_total{x=\"y\"} 1e300\n"
    "hotcount_store_keys_written_total +Inf\n"
    "hotcount_events_stored_total 12\n"
    "hotcount_consumer_lag NaN\n"
    "hotcount_hot_key_events_per_second{post_id=\"ok-post\"} 5\n"
    "hotcount_hot_key_events_per_second{post_id=\"nan-post\"} NaN\n"
    "hotcount_hot_key_events_per_second{post_id=\"huge\"} 1e300\n"
    "hotcount_hot_key_events_per_second{post_id=\"esc\x1b[2J\"} 3\n"
)


def serve_forever(listener, handler):
    def loop():
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=handler, args=(conn,), daemon=True).start()
    threading.Thread(target=loop, daemon=True).start()


def absurd_stage(conn):
    with conn:
        conn.settimeout(5)
        try:
            conn.recv(4096)
            body = ABSURD_PAGE.encode()
            conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n"
                         % len(body) + body)
        except OSError:
            pass


def trickle_stage(conn):
    with conn:
        try:
            conn.recv(4096)
            for b in b"HTTP/1.0 200 OK\r\n" * 1000:
                conn.send(bytes([b]))
                time.sleep(0.2)
        except OSError:
            pass


def start_fake_stages():
    absurd = socket.create_server(("127.0.0.1", 0))
    serve_forever(absurd, absurd_stage)
    trickle = socket.create_server(("127.0.0.1", 0))
    serve_forever(trickle, trickle_stage)
    # never accepted, backlog full: a connect to it hangs (SYNs dropped)
    hole = socket.socket()
    hole.bind(("127.0.0.1", 0))
    hole.listen(0)
    fillers = []
    for _ in range(3):
        c = socket.socket()
        c.setblocking(False)
        try:
            c.connect(hole.getsockname())
        except BlockingIOError:
            pass
        fillers.append(c)
    keep = [absurd, trickle, hole] + fillers
    addrs = ["127.0.0.1:%d" % s.getsockname()[1] for s in (absurd, trickle, hole)]
    return addrs, keep


# ---- serve ------------------------------------------------------------------------------------

def start_serve(args, stages, extra=()):
    cmd = [args.hotcount, "serve", "-c", args.config, "-X", "serve.listen=127.0.0.1:0",
           "-X", "serve.stages=" + ",".join(stages), "-X", "serve.max.connections=48",
           "-X", "serve.max.connections.per.ip=12", "-X",
           "serve.request.timeout.ms=%d" % SERVE_TIMEOUT_MS, "-X", "serve.threads=2",
           "-X", "log.level=warn"] + list(extra)
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=open(os.path.join(args.work,
                         "serve-%d.log" % time.monotonic_ns()), "w"), text=True)
    url = p.stdout.readline().strip()
    if not url.startswith("http://"):
        p.kill()
        raise SystemExit("serve did not start")
    host, port = url[len("http://"):].rstrip("/").rsplit(":", 1)
    return p, (host, int(port))


def get(addr, path, timeout=PROBE_BOUND_S, source="127.0.0.77"):
    """(status, body, seconds) of one GET on a fresh connection from `source`."""
    t0 = time.monotonic()
    c = http.client.HTTPConnection(addr[0], addr[1], timeout=timeout,
                                   source_address=(source, 0))
    try:
        c.request("GET", path)
        r = c.getresponse()
        body = r.read()
        return r.status, body, time.monotonic() - t0
    except (OSError, http.client.HTTPException) as e:
        return None, str(e).encode(), time.monotonic() - t0
    finally:
        c.close()


def metric(text, name, labels=""):
    for line in text.splitlines():
        if line.startswith(name + labels + " "):
            return float(line.split()[-1])
    return 0.0


# ---- stages ------------------------------------------------------------------------------------

def check_stages(args, addr):
    deadline = time.monotonic() + 4
    s = None
    while time.monotonic() < deadline:
        st, body, dt = get(addr, "/v1/stats")
        check(st == 200 and dt < PROBE_BOUND_S, f"/v1/stats: {st} in {dt:.2f}s")
        if st == 200:
            s = json.loads(body)
            if s["stages_up"] == 1 and all(g["age_ms"] is not None or not g["up"]
                                           for g in s["stages"]):
                break
        for path in ("/v1/likes/p", "/healthz"):
            st, _, dt = get(addr, path)
            check(st == 200 and dt < PROBE_BOUND_S, f"{path} with bad stages: {st} in {dt:.2f}s")
        time.sleep(0.2)
    if not check(s is not None, "no /v1/stats"):
        return
    print("stats:", json.dumps(s)[:400])
    check([g["up"] for g in s["stages"]] == [True, False, False], f"stages up: {s['stages']}")
    check(all("addr" not in g and "error" not in g for g in s["stages"]),
          "stage addresses or errors shown without serve.stats.expose")
    check(s["events_in"] == 9200000000000000000, f"1e300 not clamped: {s['events_in']}")
    check(s["consumer_lag"] is None, f"NaN lag not null: {s['consumer_lag']}")
    check(s["store_writes"] is None, f"+Inf writes not null: {s['store_writes']}")
    check(s["events_stored"] == 12, f"events_stored {s['events_stored']}")
    hot = {k["post_id"]: k["likes_per_second"] for k in s["hot_keys"]}
    check(hot.get("ok-post") == 5 and "nan-post" not in hot and hot.get("huge") == 1e15,
          f"hot keys: {hot}")
    check(isinstance(s["sample_age_ms"], int) and 0 <= s["sample_age_ms"] < 5000,
          f"sample_age_ms {s['sample_age_ms']}")
    # /v1/likes keeps its budget for a few seconds of refreshes against the bad stages
    worst = 0.0
    end = time.monotonic() + 3
    while time.monotonic() < end:
        st, _, dt = get(addr, "/v1/likes/p")
        worst = max(worst, dt)
        check(st == 200, f"/v1/likes during scrapes: {st}")
    check(worst < PROBE_BOUND_S, f"/v1/likes took {worst:.2f}s while stages hang")
    print(f"stages: /v1/likes worst {worst * 1000:.0f} ms while two stages hang")


# ---- smuggling ---------------------------------------------------------------------------------

SMUGGLED = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
# (name, bytes, status, who answers). libmicrohttpd >= 1.0 parses strictly
# (hc_http_guard_mhd_options: MHD_OPTION_CLIENT_DISCIPLINE_LVL 1) and answers "mhd" ones itself,
# before hotcount's handler runs; "hotcount" ones pass its parser and meet the handler's framing
# check (our endpoints take no body). Either way: that status, Connection: close, the smuggled
# request never answered. serve counts both kinds in hotcount_serve_requests_total (it reads the
# status libmicrohttpd queued when the request ends), except "mhd-early": refused in the request
# line itself, before libmicrohttpd hands serve the request at all.
ATTEMPTS = [
    ("CL+TE", b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
              b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + SMUGGLED, 400, "mhd"),
    ("TE+CL", b"GET /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
              b"Content-Length: 40\r\n\r\n0\r\n\r\n" + SMUGGLED, 400, "mhd"),
    ("two CL", b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nContent-Length: 36\r\n"
               b"\r\n" + SMUGGLED, 400, "mhd"),
    ("equal CL", b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nContent-Length: 4\r\n"
                 b"\r\nabcd" + SMUGGLED, 400, "mhd"),
    ("CL list", b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 4, 36\r\n\r\nabcd"
                + SMUGGLED, 400, "mhd"),
    # RFC 9112 6.1: Transfer-Encoding in HTTP/1.0 is a faulty framing
    ("1.0 TE", b"GET /healthz HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + SMUGGLED,
     400, "mhd"),
    # a Transfer-Encoding folded into the previous header (obs-fold), which a proxy in front may
    # read as part of X-A and this server as a header of its own
    ("folded TE", b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: a\r\n Transfer-Encoding: chunked\r\n"
                  b"\r\n0\r\n\r\n" + SMUGGLED, 400, "mhd"),
    ("no colon", b"GET /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding chunked\r\n\r\n0\r\n\r\n"
                 + SMUGGLED, 400, "mhd"),
    ("bare LF", b"GET /healthz HTTP/1.1\nHost: x\nContent-Length: 4\n\nabcd" + SMUGGLED, 400,
     "mhd-early"),
    # RFC 9112 3.2: an HTTP/1.1 request without Host is a 400. Every HTTP/1.1 client of these
    # endpoints sends one (Prometheus, curl, the kubelet's httpGet probe: Go's net/http always
    # does); HTTP/1.0 without Host is served (check_host below).
    ("no Host", b"GET /healthz HTTP/1.1\r\n\r\n" + SMUGGLED, 400, "mhd"),
    ("chunked", b"GET /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                b"4\r\nabcd\r\n0\r\n\r\n" + SMUGGLED, 400, "hotcount"),
    ("GET body", b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nabcd" + SMUGGLED,
     400, "hotcount"),
    ("POST body", b"POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nabcd"
                  + SMUGGLED, 405, "hotcount"),
]
# What the endpoints' clients send, each answered 200: HTTP/1.1 with Host (a kubelet httpGet
# probe's request, as Go's net/http writes it), HTTP/1.0 without Host (hotcount's own hot-key
# scrape) and with it (deploy/docker/hotcount-healthcheck).
CLIENTS = [
    ("kubelet", b"GET /healthz HTTP/1.1\r\nHost: 10.0.0.7:9464\r\nUser-Agent: kube-probe/1.31\r\n"
                b"Accept: */*\r\nConnection: close\r\n\r\n"),
    ("1.0 no Host", b"GET /healthz HTTP/1.0\r\nAccept: text/plain\r\n\r\n"),
    ("1.0 Host", b"GET /healthz HTTP/1.0\r\nHost: 127.0.0.1:9464\r\nConnection: close\r\n\r\n"),
]
STATUS_LINE = re.compile(rb"(?:^|\r\n)HTTP/1\.[01] (\d{3}) ")


def exchange(addr, data, timeout=3.0):
    s = socket.create_connection(addr, timeout=timeout, source_address=("127.0.0.77", 0))
    s.sendall(data)
    got = b""
    end = time.monotonic() + timeout
    closed = False
    try:
        while time.monotonic() < end:
            chunk = s.recv(65536)
            if not chunk:
                closed = True
                break
            got += chunk
    except socket.timeout:
        pass
    except ConnectionResetError:
        closed = True
    s.close()
    return got, closed


def check_smuggling(name, addr, serve_metrics=None):
    before = get(addr, "/metrics")[1].decode() if serve_metrics else ""
    for what, data, want, who in ATTEMPTS:
        got, closed = exchange(addr, data)
        statuses = [int(x) for x in STATUS_LINE.findall(got)]
        status = statuses[0] if statuses and got.startswith(b"HTTP/1.") else None
        check(status == want, f"{name} {what}: status {status}, want {want}: {got[:80]!r}")
        check(statuses == [want],
              f"{name} {what}: answers {statuses} (the smuggled request answered?)")
        check(closed, f"{name} {what}: connection left open after the refusal")
        # who answered: hotcount's answers are plain text, libmicrohttpd's are its HTML pages
        body = got.split(b"\r\n\r\n", 1)[1] if b"\r\n\r\n" in got else b""
        by_mhd = body.lstrip().startswith(b"<html>")
        check(by_mhd == who.startswith("mhd"),
              f"{name} {what}: answered by {'libmicrohttpd' if by_mhd else 'hotcount'}, "
              f"expected {who}: {body[:80]!r}")
    for what, data in CLIENTS:
        got, closed = exchange(addr, data)
        statuses = [int(x) for x in STATUS_LINE.findall(got)]
        check(statuses == [200], f"{name} {what}: answers {statuses}, want [200]: {got[:80]!r}")
    if serve_metrics:
        after = get(addr, "/metrics")[1].decode()
        d400 = (metric(after, "hotcount_serve_requests_total", '{code="400"}')
                - metric(before, "hotcount_serve_requests_total", '{code="400"}'))
        d200 = (metric(after, "hotcount_serve_requests_total", '{code="200"}')
                - metric(before, "hotcount_serve_requests_total", '{code="200"}'))
        dframing = (metric(after, "hotcount_serve_bad_framing_total")
                    - metric(before, "hotcount_serve_bad_framing_total"))
        n400 = sum(1 for a in ATTEMPTS if a[2] == 400 and a[3] != "mhd-early")
        # the POST with a body counts too: its 405 closes the connection for the same reason
        nframing = sum(1 for a in ATTEMPTS if a[3] == "hotcount")
        check(d400 == n400, f"serve counted {d400} 400s for {n400} refusals")
        check(d200 == 1 + len(CLIENTS),
              f"serve counted {d200} 200s (the first /metrics scrape and the clients' are)")
        check(dframing == nframing,
              f"serve's bad_framing_total grew by {dframing}, want {nframing} (its own refusals)")
    print(f"smuggling: {name}: {len(ATTEMPTS)} attempts and {len(CLIENTS)} clients' requests sent")


# ---- slowloris ---------------------------------------------------------------------------------

class Slowloris:
    """SLOW_CONNS trickling connections per target from SOURCES source addresses, kept up for
    `seconds`: each sends a request line, then one header byte every 0.5 s, and is reopened
    (at the next tick) when the server cuts it. Records how long each cut connection lived."""

    def __init__(self, targets, seconds):
        self.targets, self.seconds = targets, seconds
        self.lifetimes = {t: [] for t in targets}
        self.opened = 0

    def open_one(self, target, i):
        s = socket.socket()
        s.setblocking(False)
        s.bind(("127.0.0.%d" % (1 + i % SOURCES), 0))
        try:
            s.connect(target)
        except BlockingIOError:
            pass
        except OSError:
            s.close()
            return None
        self.opened += 1
        return {"sock": s, "target": target, "i": i, "t0": time.monotonic(), "sent": 0}

    def run(self):
        conns = [self.open_one(t, i) for t in self.targets for i in range(SLOW_CONNS)]
        head = b"GET /v1/likes/slow HTTP/1.1\r\nHost: x\r\nX-Slow: "
        end = time.monotonic() + self.seconds
        while time.monotonic() < end:
            now = time.monotonic()
            for k, c in enumerate(conns):
                if c is None:
                    conns[k] = self.open_one(self.targets[k // SLOW_CONNS], k % SLOW_CONNS)
                    continue
                try:
                    c["sock"].send(head if c["sent"] == 0 else b"a")
                    c["sent"] += 1
                    # a cut connection reads EOF (or RST); nothing else ever arrives
                    if c["sock"].recv(1024) == b"":
                        raise ConnectionResetError
                except BlockingIOError:
                    continue  # still connecting, or nothing to read: alive
                except OSError:
                    self.lifetimes[c["target"]].append(now - c["t0"])
                    c["sock"].close()
                    conns[k] = None
            time.sleep(0.5)
        for c in conns:
            if c:
                c["sock"].close()


def check_slowloris(serve_addr, stage_addr, seconds):
    attack = Slowloris([serve_addr, stage_addr], seconds)
    th = threading.Thread(target=attack.run, daemon=True)
    th.start()
    time.sleep(1.5)  # let the attack fill the listeners
    probes, worst, bad = 0, 0.0, []
    while th.is_alive():
        for addr, path in ((serve_addr, "/v1/likes/p"), (serve_addr, "/healthz"),
                           (stage_addr, "/healthz"), (stage_addr, "/metrics")):
            st, body, dt = get(addr, path)
            probes += 1
            worst = max(worst, dt)
            if st != 200:
                bad.append((addr[1], path, st, body[:60], round(dt, 2)))
        time.sleep(0.2)
    th.join()
    check(not bad, f"slowloris: {len(bad)} of {probes} probes failed: {bad[:5]}")
    check(worst < PROBE_BOUND_S, f"slowloris: a probe took {worst:.2f}s")
    for addr, limit_ms in ((serve_addr, SERVE_TIMEOUT_MS), (stage_addr, STAGE_TIMEOUT_MS)):
        lt = attack.lifetimes[addr]
        longest = max(lt) if lt else 0.0
        check(lt, f"slowloris: no connection to {addr} was ever cut")
        check(longest <= limit_ms / 1000 + 1.5,
              f"slowloris: a trickling connection to {addr} lived {longest:.1f}s")
    print(f"slowloris: {attack.opened} connections opened over {seconds}s; {probes} probes, "
          f"worst {worst * 1000:.0f} ms; cut: serve {len(attack.lifetimes[serve_addr])}, "
          f"stage {len(attack.lifetimes[stage_addr])}")


# ---- output escaping ---------------------------------------------------------------------------

NASTY = {"ansi\x1b[2Jclear": 7, "tab\tforged\nrow": 6, "c1\u009bcsi": 5, "back\\slash": 4}
ESCAPED = {"ansi\x1b[2Jclear": "ansi\\x1b[2Jclear", "tab\tforged\nrow": "tab\\x09forged\\x0arow",
           "c1\u009bcsi": "c1\\xc2\\x9bcsi", "back\\slash": "back\\\\slash"}


def check_output(args):
    import sqlite3
    store = None
    for line in open(args.config):
        if line.startswith("store=sqlite:"):
            store = line.strip()[len("store=sqlite:"):]
    if not check(store, "output: the store is not SQLite"):
        return
    db = sqlite3.connect(store)
    with db:
        for post, n in NASTY.items():
            db.execute("INSERT OR REPLACE INTO hotcount_counts (post_id, likes, updated_at) "
                       "VALUES (?, ?, 0)", (post, n))
    db.close()
    base = [args.hotcount]
    out = subprocess.run(base + ["get", "-c", args.config] + list(NASTY), capture_output=True,
                         check=True).stdout.decode()
    want = "".join(f"{ESCAPED[p]}\t{n}\n" for p, n in NASTY.items())
    check(out == want, f"output: get printed {out!r}, want {want!r}")
    for cmd in (["get", "--all"], ["top", "-n", "10"]):
        out = subprocess.run(base + cmd[:1] + ["-c", args.config] + cmd[1:], capture_output=True,
                             check=True).stdout.decode()
        lines = out.splitlines()
        check(all(len(line.split("\t")) == 2 for line in lines) and "\x1b" not in out
              and "\u009b" not in out, f"output: {' '.join(cmd)} printed raw bytes: {out!r}")
        for p in NASTY:
            check(any(line.startswith(ESCAPED[p] + "\t") for line in lines),
                  f"output: {' '.join(cmd)} lacks {ESCAPED[p]!r}")
    p, addr = start_serve(args, [])
    try:
        st, body, _ = get(addr, "/v1/top?n=100", timeout=5)
        rows = {r["post_id"]: r["likes"] for r in json.loads(body)} if st == 200 else {}
        check(all(rows.get(k) == v for k, v in NASTY.items()), f"output: /v1/top {rows}")
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=10)
    print(f"output: {len(NASTY)} hostile ids printed escaped by get, get --all, top")


# ---- sigterm -----------------------------------------------------------------------------------

def check_sigterm(args, stages):
    p, addr = start_serve(args, stages[1:])  # the trickling and the unreachable stage only
    time.sleep(1.5)
    t0 = time.monotonic()
    p.send_signal(signal.SIGTERM)
    try:
        rc = p.wait(timeout=10)
    except subprocess.TimeoutExpired:
        p.kill()
        rc = None
    dt = time.monotonic() - t0
    check(rc == 0 and dt <= 2.0, f"sigterm: exit {rc} after {dt:.2f}s")
    print(f"sigterm: serve exited {rc} in {dt * 1000:.0f} ms while scraping hanging stages")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hotcount", required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--metrics", required=True)
    ap.add_argument("--work", default=".")
    ap.add_argument("--seconds", type=float, default=15)
    args = ap.parse_args()
    host, port = args.metrics.rsplit(":", 1)
    stage_addr = (host, int(port))
    stages, keep = start_fake_stages()
    p, addr = start_serve(args, stages)
    try:
        check_stages(args, addr)
        check_smuggling("serve", addr, serve_metrics=True)
        check_smuggling("stage metrics", stage_addr)
        check_slowloris(addr, stage_addr, args.seconds)
        check(p.poll() is None, "serve died during the attacks")
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=10)
    check_sigterm(args, stages)
    check_output(args)
    del keep
    print(f"http_attacks: {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
