#!/usr/bin/env python3
"""Checks a running `hotcount serve` against the store and the stages (see serve.sh).

  serve_check.py special-events BROKERS RAW_TOPIC
      produces a few like events whose post ids need URL-encoding
  serve_check.py check --hotcount H --config CFG --url URL --nostages-url URL --stages A,B
                       --ttl-ms T --max-ids N --top-max N --artifacts DIR
      every route, status code, header and body; coalescing; /v1/stats; the live page in
      headless Chromium (screenshots kept in DIR), on the real serve and on fixed /v1/stats
      answers (the page fetched from the real serve)
  serve_check.py page --html FILE --artifacts DIR
      the fixture half alone, on a page file (web/live.html): no servers needed

Exit 0 when every check holds; otherwise the failures are printed and the exit status is 1.
"""
import argparse
import html.parser
import http.client
import http.server
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
    """The live page's numbers: elements with an id, the rows of #top / #hot, and the hot-set
    bars (.hot-post, each with the marks and bars inside it)."""

    VOID = {"meta", "br", "img", "input", "link", "hr"}

    def __init__(self):
        super().__init__()
        self.by_id, self.rows, self.stack, self.table = {}, {"top": [], "hot": []}, [], None
        self.body = {}
        self.hot_posts = []  # [{"attrs": ..., "inside": [(tag, attrs), ...]}]

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "body":
            self.body = a
        if tag == "table":
            self.table = a.get("id")
        if tag == "tr" and "data-post-id" in a and self.table in self.rows:
            self.rows[self.table].append(a)
        if self.hot_posts and any(t[3] for t in self.stack):
            self.hot_posts[-1]["inside"].append((tag, a))
        is_hot = "hot-post" in a.get("class", "").split()
        if is_hot:
            self.hot_posts.append({"attrs": a, "inside": []})
        if tag in self.VOID:
            return
        self.stack.append((tag, a.get("id"), [], is_hot))
        if a.get("id"):
            self.by_id[a["id"]] = {"attrs": a, "text": ""}

    def handle_endtag(self, tag):
        while self.stack:
            t, ident, parts, _ = self.stack.pop()
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


def path_points(d):
    """The points of an SVG path's d (M/L commands only, as the page draws)."""
    return len(re.findall(r"[ML]\s*-?[0-9.]+\s+-?[0-9.]+", d or ""))


def check_plot(name, d, hist, stage_absent=()):
    """The two series drawn with one point per non-null history value, and the gap label the
    ratio of their sums where both are known; an absent stage's series not drawn, and said."""
    for ident, key, k in (("series-likes-in", "likes_in_per_s", 1),
                          ("series-store-writes", "store_writes_per_s", 2)):
        e = d.by_id.get(ident)
        if not check(e is not None, f"{name}: no #{ident} in the plot"):
            continue
        want = 0 if k in stage_absent else sum(v is not None for v in hist[key])
        got = int(e["attrs"].get("data-points", "-1"))
        check(got == want and path_points(e["attrs"].get("d")) == want,
              f"{name}: #{ident} has {got} points ({path_points(e['attrs'].get('d'))} in its "
              f"path), /v1/stats history {want}")
        if k in stage_absent:
            note = d.by_id.get(f"stage{k}-note", {}).get("text", "")
            check(f"stage {k} not configured" in note, f"{name}: stage {k} note {note!r}")
            check("not configured" in d.by_id.get(ident + "-note", {}).get("text", ""),
                  f"{name}: the plot does not say stage {k} is not configured")
    gap = d.by_id.get("gap", {"attrs": {}, "text": ""})
    pairs = [(a, b) for a, b in zip(hist["likes_in_per_s"], hist["store_writes_per_s"])
             if a is not None and b is not None]
    if stage_absent or not pairs or sum(b for _, b in pairs) == 0:
        check(gap["attrs"].get("data-value") == "", f"{name}: gap {gap} without both series")
        return None
    want = sum(a for a, _ in pairs) / sum(b for _, b in pairs)
    raw = gap["attrs"].get("data-value") or "nan"
    m = re.match(r"^([0-9][0-9,]*(?:\.[0-9])?) likes per store write$", gap["text"])
    check(abs(float(raw) - want) <= 1e-6 * want and m and
          abs(float(m.group(1).replace(",", "")) - want) <= max(0.05, want * 0.005),
          f"{name}: gap label {gap['text']!r} ({raw}), want {want:.2f} likes per store write")
    return want


def fixture_stats(stage1=True, hot=True):
    """A /v1/stats answer: 5 minutes of history (likes about 100x the writes, a gap of nulls),
    two hot-set members around the thresholds; or stage 1 absent."""
    n = 300
    likes = [None if 100 <= i < 110 else 2000.0 + 10 * (i % 7) for i in range(n)]
    writes = [None if 100 <= i < 110 else 20.0 + (i % 3) for i in range(n)]
    s = {"as_of": 1764600000000, "sample_age_ms": 300, "stages_up": 2,
         "stages": [{"stage": 1, "up": True, "age_ms": 300},
                    {"stage": 2, "up": True, "age_ms": 300}],
         "events_in": 123456, "events_in_per_second": 2010.0, "store_writes": 1234,
         "store_writes_per_second": 21.0, "events_stored": 123000,
         "events_per_store_write": 99.7, "consumer_lag": 0,
         "stage1_instances": 1, "stage2_instances": 1,
         "hot_keys": [], "top": [], "hotkeys_enter_rate": 1000.0, "hotkeys_leave_rate": 500.0,
         "hot_set": [], "history": {"step_ms": 1000, "rate_span_ms": 5000, "newest_age_ms": 300,
                                    "likes_in_per_s": likes, "store_writes_per_s": writes}}
    if hot:
        s["hot_set"] = [
            {"post_id": "<b>viral</b>", "likes_per_second": 1500.0, "source": "detected",
             "state": "hot"},
            {"post_id": "cooling-1", "likes_per_second": 320.0, "source": "detected",
             "state": "cooling"},
            # from topic.hotkeys: no stage measures it, so no rate and no bar
            {"post_id": "final", "likes_per_second": None, "source": "declared",
             "state": "hot", "until": 1796160779904}]
    if not stage1:
        s.update(stage1_instances=0, events_in=0, events_in_per_second=0.0,
                 stages=s["stages"][1:], stages_up=1)
        s["history"]["likes_in_per_s"] = [0.0] * n
    return s


def check_hot_set(name, d, s):
    """One bar per member, in order, with its rate, source and both threshold marks."""
    got = [p["attrs"].get("data-post-id") for p in d.hot_posts]
    check(got == [p["post_id"] for p in s["hot_set"]], f"{name}: hot posts {got}")
    for p, want in zip(d.hot_posts, s["hot_set"]):
        a, inside = p["attrs"], p["inside"]
        rate = want["likes_per_second"]
        check((a.get("data-rate") == "null" if rate is None
               else float(a.get("data-rate", "nan")) == rate) and
              a.get("data-source") == want["source"] and a.get("data-state") == want["state"],
              f"{name}: hot post {a}")
        marks = {c.split()[-1]: float(t.get("data-value", "nan")) for tag, t in inside
                 if tag == "line" and "mark" in (c := t.get("class", "")).split()}
        check(marks == {"mark-enter": s["hotkeys_enter_rate"],
                        "mark-leave": s["hotkeys_leave_rate"]},
              f"{name}: {want['post_id']!r} threshold marks {marks}")
        bars = [float(t.get("width", "nan")) for tag, t in inside
                if tag == "rect" and t.get("class") == "rate"]
        check(len(bars) == 1 and (bars[0] == 0 if rate is None else bars[0] > 0),
              f"{name}: {want['post_id']!r} bar {bars}")
        # the bar against the marks: the same scale, so a hot post's bar passes the enter mark
        xs = {c.split()[-1]: float(t.get("x1", "nan")) for tag, t in inside
              if tag == "line" and "mark" in (c := t.get("class", "")).split()}
        if bars and len(xs) == 2 and rate is not None:
            over_enter = rate >= s["hotkeys_enter_rate"]
            check((bars[0] >= xs["mark-enter"]) == over_enter and xs["mark-leave"] <
                  xs["mark-enter"], f"{name}: bar {bars[0]} vs marks {xs}")


class FixtureServer:
    """The page and one fixed /v1/stats answer on a loopback port of its own."""

    def __init__(self, page):
        self.page, self.stats = page, b"{}"
        outer = self

        class H(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's name
                body, ctype = ((outer.page, "text/html; charset=utf-8") if self.path == "/" else
                               (outer.stats, "application/json") if self.path == "/v1/stats"
                               else (b'{"error":"not found"}', "application/json"))
                self.send_response(200 if self.path in ("/", "/v1/stats") else 404)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def check_fixtures(page, artifacts):
    """The page on fixed answers: the plot and its gap, the hot-set bars, a missing stage."""
    srv = FixtureServer(page)
    try:
        s = fixture_stats()
        srv.stats = json.dumps(s).encode()
        d = chromium(srv.url, artifacts, "live-fixture")
        if d:
            check_plot("live-fixture", d, s["history"])
            check_hot_set("live-fixture", d, s)
        s = fixture_stats(stage1=False, hot=False)
        srv.stats = json.dumps(s).encode()
        d = chromium(srv.url, artifacts, "live-fixture-nostage1")
        if d:
            check_plot("live-fixture-nostage1", d, s["history"], stage_absent=(1,))
            check(d.hot_posts == [], "live-fixture-nostage1: hot posts shown for an empty set")
            note = d.by_id.get("hotset-note", {}).get("text", "")
            check("no post is hot" in note, f"live-fixture-nostage1: hot-set note {note!r}")
            note = d.by_id.get("events-in-note", {}).get("text", "")
            check(note == "stage 1 not configured", f"events-in card note {note!r}")
    finally:
        srv.close()


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    sp = sub.add_parser("special-events")
    sp.add_argument("brokers")
    sp.add_argument("topic")
    pg = sub.add_parser("page")
    pg.add_argument("--html", required=True)
    pg.add_argument("--artifacts", required=True)
    ck = sub.add_parser("check")
    for a in ("--hotcount", "--config", "--url", "--nostages-url", "--stages", "--artifacts"):
        ck.add_argument(a, required=True)
    for a in ("--ttl-ms", "--max-ids", "--top-max"):
        ck.add_argument(a, type=int, required=True)
    args = ap.parse_args()
    if args.cmd == "special-events":
        special_events(args.brokers, args.topic)
        return 0
    if args.cmd == "page":
        with open(args.html, "rb") as f:
            check_fixtures(f.read(), args.artifacts)
        print(f"serve_check page: {len(failures)} failures")
        return 1 if failures else 0

    c = Client(args.url)
    top_want = check_routes(args, c)
    check_coalescing(args, top_want[0][0])
    check_stats(args, c, top_want)
    d = check_page(args, c, "live", args.url)
    if d:
        st = d.by_id.get("stages", {}).get("text", "")
        check(all(a + " up" in st for a in args.stages.split(",")), f"stages shown: {st!r}")
        # the plot of this run: both stages configured, the stream within the last 5 minutes
        for ident in ("series-likes-in", "series-store-writes"):
            pts = int(d.by_id.get(ident, {"attrs": {}})["attrs"].get("data-points", "0"))
            check(pts >= 2, f"live: #{ident} has {pts} points after the stream")
        raw = d.by_id.get("gap", {"attrs": {}})["attrs"].get("data-value", "")
        check(raw not in ("", None) and float(raw) > 1,
              f"live: gap {d.by_id.get('gap')} (likes in per store write over the window)")
    # the page the binary serves, on fixed answers
    status, _, page = c.req("GET", "/")
    if check(status == 200, f"GET /: {status}"):
        check_fixtures(page, args.artifacts)
    # without stages: the store's top only
    c2 = Client(args.nostages_url)
    s2, _ = c2.json("/v1/stats")
    check(s2["stages"] == [] and all(s2[f] is None for f in STAT_FIELDS),
          f"no stages: {s2}")
    d2 = check_page(args, c2, "live-nostages", args.nostages_url)
    if d2:
        check("none configured" in d2.by_id.get("stages", {}).get("text", ""),
              "no stages: the page does not say so")
        check("no stages configured" in d2.by_id.get("stage1-note", {}).get("text", "") and
              d2.by_id.get("series-likes-in", {"attrs": {}})["attrs"].get("data-points") == "0",
              "no stages: the plot does not say so")

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
