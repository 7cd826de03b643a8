#!/usr/bin/env python3
"""Drives `hotcount serve` under valgrind (see serve_valgrind.sh): every route, good and bad
input, then SIGTERM; exit 0 only when memcheck reports no error and no definite leak."""
import argparse
import http.client
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

PAGE = (b"hotcount_events_total 1e300\nhotcount_consumer_lag NaN\n"
        b"hotcount_store_keys_written_total -Inf\n"
        b"hotcount_hot_key_events_per_second{post_id=\"a\\\\b\\\"c\\nd\"} NaN\n"
        b"hotcount_hot_key_events_per_second{post_id=\"p1\"} 7\n")


def fake_stage():
    srv = socket.create_server(("127.0.0.1", 0))

    def loop():
        while True:
            c, _ = srv.accept()
            with c:
                c.recv(4096)
                c.sendall(b"HTTP/1.0 200 OK\r\n\r\n" + PAGE)
    threading.Thread(target=loop, daemon=True).start()
    return srv, "127.0.0.1:%d" % srv.getsockname()[1]


PATHS = ["/v1/likes/p1", "/v1/likes/a%00b", "/v1/likes/%C2%85", "/v1/likes/%ZZ", "/v1/likes/",
         "/v1/likes/" + "x" * 300, "/v1/likes?ids=p1,p2,%C3%A9", "/v1/likes?ids=", "/v1/likes?ids=a&ids=b",
         "/v1/likes?ids=" + ",".join(["q"] * 150), "/v1/top", "/v1/top?n=5", "/v1/top?n=abc",
         "/v1/top?n=1%00", "/v1/top?n=12345678901", "/v1/top?n=", "/v1/top?n=5&n=6", "/v1/top?n=0",
         "/v1/top?n=%41", "/v1/stats", "/", "/metrics", "/healthz", "/nope", "/v1/top?" + "a" * 9000]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hotcount", required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--work", required=True)
    args = ap.parse_args()
    _srv, stage = fake_stage()
    log = os.path.join(args.work, "valgrind.log")
    p = subprocess.Popen(["valgrind", "--error-exitcode=99", "--leak-check=full",
                          "--errors-for-leak-kinds=definite", "--track-origins=yes",
                          "--log-file=" + log, args.hotcount, "serve", "-c", args.config,
                          "-X", "serve.listen=127.0.0.1:0", "-X", "serve.stages=" + stage,
                          "-X", "serve.threads=2", "-X", "log.level=error"],
                         stdout=subprocess.PIPE, text=True)
    url = p.stdout.readline().strip()
    host, port = url[len("http://"):].rstrip("/").rsplit(":", 1)
    statuses = []
    time.sleep(2)  # a refresh of the stage under valgrind
    for rounds in range(2):
        for path in PATHS:
            c = http.client.HTTPConnection(host, int(port), timeout=60)
            c.request("GET", path)
            r = c.getresponse()
            r.read()
            statuses.append(r.status)
            c.close()
        for raw in (b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n"
                    b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
                    b"GET /v1/top?n=3 HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nabcd",
                    b"POST /v1/top HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nab"):
            s = socket.create_connection((host, int(port)), timeout=20)
            s.sendall(raw)
            try:
                got = s.recv(4096)
            except OSError:
                got = b""
            statuses.append(int(got.split(b" ")[1]) if got.startswith(b"HTTP/1.") else 0)
            s.close()
    p.send_signal(signal.SIGTERM)
    rc = p.wait(timeout=120)
    text = open(log).read()
    errors = re.search(r"ERROR SUMMARY: (\d+) errors", text)
    definite = re.search(r"definitely lost: ([\d,]+) bytes", text)
    print(f"serve_valgrind: {len(statuses)} requests, statuses {sorted(set(statuses))}; exit {rc}; "
          f"{errors.group(0) if errors else 'no summary'}; "
          f"definitely lost {definite.group(1) if definite else 0} bytes")
    ok = rc == 0 and errors and errors.group(1) == "0"
    if not ok:
        print(text[-6000:])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
