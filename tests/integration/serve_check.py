#!/usr/bin/env python3
"""Checks a running `hotcount serve` against the store and the stages (see serve.sh).

  serve_check.py special-events BROKERS RAW_TOPIC
      produces a few like events whose post ids need URL-encoding
  serve_check.py check --hotcount H --config CFG --url URL --nostages-url URL --stages A,B
                       --ttl-ms T --max-ids N --top-max N --artifacts DIR
      every route, status code, header and body; coalescing; /v1/stats; the live page in
      headless Chromium (screenshots kept in DIR)

Exit 0 when every check holds; otherwise the failures are printed and the exit status is 1.
"""
import argparse
import html.parser
import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

# Post ids that a URL must escape, each liked a few times (index + 1 likes).
SPECIAL_IDS = ["a b", "x,y", "q?&=#%/", "\u00e9\U0001F525", "+plus", "%41", "z" * 256, "tab\\t"]

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, flush=True)
    return cond


def special_events(brokers, topic):
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": brokers, "enable.idempotence": True})
    for i, pid in enumerate(SPECIAL_IDS):
        for u in range(i + 1):
            ev = json.dumps({"post_id": pid, "user_id": f"u{u}", "op": "like"})
            p.produce(topic, key=f"{pid}#0".encode(), value=ev.encode())
    if p.flush(30) != 0:
        sys.exit("special events not delivered")


class Client:
    """One persistent HTTP/1.1 connection."""

    def __init__(self, url):
        u = urllib.parse.urlsplit(url)
        self.host, self.port = u.hostname, u.port
        self.conn = None

    def req(self, method, path, headers=None):
        for attempt in range(2):
            if self.conn is None:
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
            try:
                self.conn.request(method, path, headers=headers or {})
                r = self.conn.getresponse()
                body = r.read()
                if r.getheader("Connection", "").lower() == "close":
                    self.conn.close()
                    self.conn = None
                return r.status, {k.lower(): v for k, v in r.getheaders()}, body
            except (ConnectionError, http.client.HTTPException):
                self.conn.close()
                self.conn = None
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def json(self, path):
        status, headers, body = self.req("GET", path)
        if status != 200:
            raise AssertionError(f"GET {path}: {status} {body[:200]!r}")
        return json.loads(body), headers


def q(pid):
    return urllib.parse.quote(pid, safe="")


def hc_json(args, cmd, ids=()):
    argv = [args.hotcount, *cmd, "-c", args.config, "--json"] + (["--", *ids] if ids else [])
    out = subprocess.run(argv, check=True, capture_output=True, text=True, timeout=60).stdout
    return [json.loads(line) for line in out.splitlines() if line]


def metric_values(text, name):
    """{labels: value} of one family in Prometheus text."""
    out = {}
    for line in text.splitlines():
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$", line)
        if m and m.group(1) == name:
            out[m.group(2) or ""] = float(m.group(3))
    return out


def scrape(url):
    c = Client(url)
    status, _, body = c.req("GET", "/metrics")
    assert status == 200, f"{url}/metrics: {status}"
    return body.decode()


def check_routes(args, c):
    t0 = int(time.time() * 1000)
    top20 = hc_json(args, ["top", "-n", "20"])
    ids = [r["post_id"] for r in top20] + SPECIAL_IDS + [f"no-such-post-{os.getpid()}"]
    want = {r["post_id"]: r["likes"] for r in hc_json(args, ["get"], ids)}
    check(len(want) == len(ids), f"hotcount get returned {len(want)} of {len(ids)} posts")
    for i, pid in enumerate(SPECIAL_IDS):
        check(want.get(pid) == i + 1, f"store count of {pid!r} is {want.get(pid)}, want {i + 1}")
    ttl_s = max(1, -(-args.ttl_ms // 1000))
    cache_control = f"public, max-age={ttl_s}, s-maxage={ttl_s}"

    for pid in ids:
        status, h, body = c.req("GET", "/v1/likes/" + q(pid))
        if not check(status == 200, f"GET /v1/likes/{q(pid)}: {status}"):
            continue
        obj = json.loads(body)
        now = int(time.time() * 1000)
        check(obj.get("post_id") == pid and obj.get("likes") == want[pid],
              f"/v1/likes/{q(pid)}: {obj} != hotcount get {want[pid]}")
        check(isinstance(obj.get("as_of"), int) and t0 - 1000 <= obj["as_of"] <= now,
              f"/v1/likes/{q(pid)}: as_of {obj.get('as_of')} not within the test's run")
        check(set(obj) == {"post_id", "likes", "as_of"}, f"unexpected fields {set(obj)}")
        check(h.get("cache-control") == cache_control,
              f"Cache-Control {h.get('cache-control')!r} != {cache_control!r}")
        check(re.fullmatch(r'W/"[0-9a-f]{16}"', h.get("etag", "")), f"ETag {h.get('etag')!r}")
        check(h.get("content-type", "").startswith("application/json"), "Content-Type")

    # the batch form, every id escaped (commas inside ids included)
    arr, _ = c.json("/v1/likes?ids=" + ",".join(q(p) for p in ids))
    check([(o["post_id"], o["likes"]) for o in arr] == [(p, want[p]) for p in ids],
          "/v1/likes?ids=... differs from hotcount get")
    arr, _ = c.json("/v1/likes?ids=" + ",".join(f"cold{i}" for i in range(args.max_ids)))
    check(len(arr) == args.max_ids and all(o["likes"] == 0 for o in arr),
          f"{args.max_ids} unknown ids: {len(arr)} answers")

    top_want = [(r["post_id"], r["likes"]) for r in hc_json(args, ["top", "-n", "10"])]
    for path in ("/v1/top?n=10", "/v1/top"):
        arr, h = c.json(path)
        check([(o["post_id"], o["likes"]) for o in arr] == top_want,
              f"{path} differs from hotcount top -n 10")
        check(h.get("cache-control") == cache_control and "etag" in h, f"{path}: headers")
    arr, _ = c.json(f"/v1/top?n={args.top_max}")
    check(len(arr) <= args.top_max and [o["likes"] for o in arr] ==
          sorted((o["likes"] for o in arr), reverse=True), "top is not largest first")

    statuses = [
        ("GET", "/v1/likes/a%00b", 404), ("GET", "/v1/likes/a%1Fb", 404),
        ("GET", "/v1/likes/a%7Fb", 404), ("GET", "/v1/likes/%FF", 404),
        ("GET", "/v1/likes/%C0%AF", 404), ("GET", "/v1/likes/%ED%A0%80", 404),
        ("GET", "/v1/likes/" + "z" * 257, 404), ("GET", "/v1/likes/" + "%C3%A9" * 129, 404),
        ("GET", "/v1/likes/%G1", 404), ("GET", "/v1/likes/%4", 404), ("GET", "/v1/likes/", 404),
        ("GET", "/v1/likes", 400), ("GET", "/v1/likes?ids=", 400), ("GET", "/v1/likes?ids", 400),
        ("GET", "/v1/likes?ids=a,,b", 400), ("GET", "/v1/likes?ids=a,", 400),
        ("GET", "/v1/likes?ids=a%00", 400), ("GET", "/v1/likes?ids=a&ids=b", 400),
        ("GET", "/v1/likes?ids=" + ",".join(f"p{i}" for i in range(args.max_ids + 1)), 400),
        ("GET", "/v1/top?n=0", 400), ("GET", "/v1/top?n=-1", 400), ("GET", "/v1/top?n=abc", 400),
        ("GET", f"/v1/top?n={args.top_max + 1}", 400), ("GET", "/v1/top?n=1&n=2", 400),
        ("GET", "/v1/top?n=99999999999999999999", 400), ("GET", "/v1/top?n=", 400),
        ("GET", "/nope", 404), ("GET", "/v1/likez", 404), ("GET", "/v1", 404),
        ("POST", "/v1/likes/1", 405), ("PUT", "/v1/top", 405), ("DELETE", "/", 405),
        ("GET", "/healthz", 200), ("HEAD", "/v1/likes/1", 200), ("GET", "/v1/likes/1?x=y", 200),
        ("GET", "/v1/likes/%2541", 200),
    ]
    for method, path, code in statuses:
        status, h, body = Client(args.url).req(method, path)
        check(status == code, f"{method} {path[:80]}: {status}, want {code}")
        if code >= 400:
            check(h.get("cache-control") == "no-store", f"{method} {path[:60]}: error cacheable")
            if method != "HEAD":
                check("error" in json.loads(body), f"{method} {path[:60]}: no JSON error")
        if code == 405:
            check(h.get("allow") == "GET, HEAD", f"{method} {path}: Allow {h.get('allow')!r}")
        if method == "HEAD":
            check(body == b"", "HEAD has a body")

    # conditional requests
    hot = top_want[0][0]
    status, h, body = c.req("GET", "/v1/likes/" + q(hot))
    etag = h["etag"]
    for inm, code in ((etag, 304), (etag[2:], 304), (f'"nope", {etag}', 304), ("*", 304),
                      ('"nope"', 200), ('W/"0000000000000000"', 200)):
        status, h2, body = c.req("GET", "/v1/likes/" + q(hot), {"If-None-Match": inm})
        check(status == code, f"If-None-Match {inm}: {status}, want {code}")
        if code == 304:
            check(body == b"" and h2.get("etag") == etag and
                  h2.get("cache-control") == cache_control, "304 without its ETag/Cache-Control")
    status, h, _ = c.req("GET", "/v1/likes/" + q(SPECIAL_IDS[0]))
    check(h["etag"] != etag, "two posts with one ETag")
    _, h_top, _ = c.req("GET", "/v1/top?n=10")
    status, _, _ = c.req("GET", "/v1/top?n=10", {"If-None-Match": h_top["etag"]})
    check(status == 304, f"/v1/top If-None-Match: {status}")
    return top_want


def check_coalescing(args, hot):
    """200 clients hammer one post: store reads grow by at most elapsed / TTL + 1."""
    def reads():
        return metric_values(scrape(args.url), "hotcount_serve_store_reads_total").get(
            '{kind="likes"}', 0)

    clients, duration = 200, 2.0
    barrier = threading.Barrier(clients + 1)
    counts, errors = [0] * clients, []

    def worker(i):
        c = Client(args.url)
        barrier.wait()
        end = time.monotonic() + duration
        try:
            while time.monotonic() < end:
                status, _, _ = c.req("GET", "/v1/likes/" + q(hot))
                if status != 200:
                    errors.append(status)
                counts[i] += 1
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    before = reads()
    t0 = time.monotonic()
    barrier.wait()
    for t in threads:
        t.join(60)
    elapsed = time.monotonic() - t0
    after = reads()
    total = sum(counts)
    bound = elapsed * 1000 / args.ttl_ms + 1
    print(f"coalescing: {clients} clients, {total} requests in {elapsed:.2f} s, "
          f"{after - before:.0f} store reads (bound {bound:.0f})", flush=True)
    check(not errors, f"coalescing: errors {errors[:5]}")
    check(after - before <= bound, f"coalescing: {after - before} store reads > {bound:.1f}")
    check(total > after - before, "coalescing: no request was served from the cache")


STAT_FIELDS = ("events_in", "store_writes", "events_stored", "events_per_store_write",
               "consumer_lag")


def stable_stats(c):
    """/v1/stats once the stages' numbers have stopped moving (three equal polls)."""
    deadline, last, same = time.monotonic() + 60, None, 0
    while time.monotonic() < deadline:
        s, _ = c.json("/v1/stats")
        key = (tuple(s[f] for f in STAT_FIELDS), tuple((r["post_id"], r["likes"]) for r in s["top"]))
        same = same + 1 if key == last else 0
        last = key
        if same >= 2:
            return s
        time.sleep(1.1)
    raise AssertionError(f"/v1/stats did not settle: {last}")


def check_stats(args, c, top_want):
    s = stable_stats(c)
    addrs = args.stages.split(",")
    check([(g.get("addr"), g["up"]) for g in s["stages"]] == [(a, True) for a in addrs],
          f"stages {s['stages']}")
    check(s["stages_up"] == len(addrs) and isinstance(s["sample_age_ms"], int),
          f"stages_up {s.get('stages_up')}, sample_age_ms {s.get('sample_age_ms')}")
    texts = [scrape("http://" + a) for a in addrs]

    def total(name):
        return sum(sum(metric_values(t, name).values()) for t in texts)

    check(s["events_in"] == total("hotcount_events_total"), "events_in != the stages' sum")
    check(s["store_writes"] == total("hotcount_store_keys_written_total"), "store_writes")
    check(s["events_stored"] == total("hotcount_events_stored_total"), "events_stored")
    check(s["consumer_lag"] == total("hotcount_consumer_lag"), "consumer_lag")
    check(s["events_in"] > 0 and s["store_writes"] > 0, "no events counted")
    check(abs(s["events_per_store_write"] - s["events_stored"] / s["store_writes"]) < 1e-6,
          "events_per_store_write")
    check([(r["post_id"], r["likes"]) for r in s["top"]] == top_want, "stats top != /v1/top")
    return s


class Dom(html.parser.HTMLParser):
    """The live page's numbers: elements with an id, and the rows of #top / #hot."""

    def __init__(self):
        super().__init__()
        self.by_id, self.rows, self.stack, self.table = {}, {"top": [], "hot": []}, [], None
        self.body = {}

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "body":
            self.body = a
        if tag == "table":
            self.table = a.get("id")
        if tag == "tr" and "data-post-id" in a and self.table in self.rows:
            self.rows[self.table].append(a)
        self.stack.append((tag, a.get("id"), []))
        if a.get("id"):
            self.by_id[a["id"]] = {"attrs": a, "text": ""}

    def handle_endtag(self, tag):
        while self.stack:
            t, ident, parts = self.stack.pop()
            if ident:
                self.by_id[ident]["text"] = "".join(parts).strip()
            if self.stack:
                self.stack[-1][2].extend(parts)
            if t == tag:
                break

    def handle_data(self, data):
        if self.stack:
            self.stack[-1][2].append(data)


def chromium(url, artifacts, name):
    """The page after a few seconds of (virtual) time: its DOM, and a screenshot."""
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if not check(exe, "chromium is not installed (tools/install-deps)"):
        return None
    with tempfile.TemporaryDirectory() as profile:
        base = [exe, "--headless", "--disable-gpu", "--no-first-run", "--hide-scrollbars",
                f"--user-data-dir={profile}", "--virtual-time-budget=5000",
                "--window-size=1200,900"]
        if os.geteuid() == 0:
            base.append("--no-sandbox")  # chromium refuses to run as root with its sandbox
        dom = subprocess.run(base + ["--dump-dom", url], capture_output=True, text=True,
                             timeout=90)
        with open(os.path.join(artifacts, name + ".html"), "w") as f:
            f.write(dom.stdout)
        shot = os.path.join(artifacts, name + ".png")
        subprocess.run(base + [f"--screenshot={shot}", url], capture_output=True, timeout=90)
        check(os.path.getsize(shot) > 1000 if os.path.exists(shot) else False,
              f"no screenshot {shot}")
    d = Dom()
    d.feed(dom.stdout)
    check(int(d.body.get("data-polls", "0")) >= 1, f"{name}: the page never loaded /v1/stats")
    return d


def page_number(d, ident):
    e = d.by_id.get(ident)
    return (e["attrs"].get("data-value"), e["text"]) if e else (None, None)


def check_page(args, c, name, url):
    d = chromium(url, args.artifacts, name)
    if d is None:
        return
    s, _ = c.json("/v1/stats")
    top, _ = c.json("/v1/top?n=10")
    for ident, field, decimals in (("events-in", "events_in", 0),
                                   ("store-writes", "store_writes", 0),
                                   ("events-per-write", "events_per_store_write", 1),
                                   ("consumer-lag", "consumer_lag", 0)):
        raw, text = page_number(d, ident)
        v = s[field]
        if v is None:
            check(raw == "" and text == "\u2013", f"{name}: #{ident} shows {text!r} for null")
            continue
        check(raw is not None and raw != "" and float(raw) == float(v),
              f"{name}: #{ident} data-value {raw!r} != /v1/stats {field} {v}")
        shown = f"{v:.{decimals}f}" if decimals else str(v)
        check(text is not None and (text == shown or (decimals and abs(float(text) - v) <= 0.05)),
              f"{name}: #{ident} shows {text!r}, /v1/stats says {shown}")
    rows = [(r["data-post-id"], int(r["data-likes"])) for r in d.rows["top"]]
    check(rows == [(o["post_id"], o["likes"]) for o in top],
          f"{name}: the page's top {rows[:3]}... != /v1/top {top[:3]}...")
    # Rates are per poll of /v1/stats (cached for 1 s): exact when the page shows the very
    # snapshot fetched here (same as_of); otherwise, the stream being over, both must be idle
    # (0, or unknown on a first sample).
    same = page_number(d, "as-of")[0] == str(s["as_of"])
    rates = {r["data-post-id"]: r["data-rate"] for r in d.rows["top"]}
    for r in s["top"]:
        want = r["likes_per_second"]
        got = rates.get(r["post_id"])
        if same:
            ok = got == ("" if want is None else str(want)) or (
                got not in (None, "") and want is not None and float(got) == float(want))
        else:
            ok = got in ("", "0") and want in (None, 0)
        check(ok, f"{name}: rate of {r['post_id']!r} {got!r} != {want!r} (same snapshot: {same})")
    return d


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    sp = sub.add_parser("special-events")
    sp.add_argument("brokers")
    sp.add_argument("topic")
    ck = sub.add_parser("check")
    for a in ("--hotcount", "--config", "--url", "--nostages-url", "--stages", "--artifacts"):
        ck.add_argument(a, required=True)
    for a in ("--ttl-ms", "--max-ids", "--top-max"):
        ck.add_argument(a, type=int, required=True)
    args = ap.parse_args()
    if args.cmd == "special-events":
        special_events(args.brokers, args.topic)
        return 0

    c = Client(args.url)
    top_want = check_routes(args, c)
    check_coalescing(args, top_want[0][0])
    check_stats(args, c, top_want)
    d = check_page(args, c, "live", args.url)
    if d:
        st = d.by_id.get("stages", {}).get("text", "")
        check(all(a + " up" in st for a in args.stages.split(",")), f"stages shown: {st!r}")
    # without stages: the store's top only
    c2 = Client(args.nostages_url)
    s2, _ = c2.json("/v1/stats")
    check(s2["stages"] == [] and all(s2[f] is None for f in STAT_FIELDS),
          f"no stages: {s2}")
    d2 = check_page(args, c2, "live-nostages", args.nostages_url)
    if d2:
        check("none configured" in d2.by_id.get("stages", {}).get("text", ""),
              "no stages: the page does not say so")

    text = scrape(args.url)
    reqs = metric_values(text, "hotcount_serve_requests_total")
    for code in ("200", "304", "400", "404", "405"):
        check(reqs.get(f'{{code="{code}"}}', 0) > 0, f"requests_total{{code={code}}} is 0")
    check(metric_values(text, "hotcount_serve_request_seconds_count").get("", 0) > 0,
          "latency histogram empty")
    print(f"serve_check: {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
