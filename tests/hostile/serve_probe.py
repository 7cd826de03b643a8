#!/usr/bin/env python3
"""serve's probe gets in at the per-address limit (issue 25, item 7; docs/THREAT-MODEL.md,
"A probe from a flooding address").

Starts `hotcount serve` on a SQLite store with serve.max.connections.per.ip=4, holds 4 slow
connections from 127.0.0.1 (a request line, never the end of the headers), then asks /healthz
from 127.0.0.1 five times: each must be answered 200 (before: refused at accept, no answer).
A /v1/likes from there is refused (503, closed): probation answers probes only. Ten more slow
connections from there: at most two are held, and none of the first four is cut.

Usage: serve_probe.py path/to/hotcount
"""
import os
import re
import socket
import subprocess
import sys
import tempfile
import time

PER_IP = 4


def status_of(port, path, timeout=3.0):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        data = s.recv(1024)
    except OSError:
        data = b""
    finally:
        s.close()
    m = re.match(rb"HTTP/1\.\d (\d+)", data)
    return int(m.group(1)) if m else 0


def slow(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=3.0)
    s.sendall(b"GET /healthz HTTP/1.1\r\n")
    return s


def closed(s, wait=0.02):
    s.settimeout(wait)
    try:
        return s.recv(1) == b""
    except socket.timeout:
        return False
    except OSError:
        return True


def main():
    hc = sys.argv[1]
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        log = open(os.path.join(tmp, "log"), "w+")
        proc = subprocess.Popen([hc, "serve", "-X", f"store=sqlite:{tmp}/x.db",
                                 "-X", "serve.listen=127.0.0.1:0", "-X", "serve.hot.follow=0",
                                 "-X", f"serve.max.connections.per.ip={PER_IP}"],
                                stdout=log, stderr=subprocess.STDOUT)
        try:
            port = None
            for _ in range(100):
                log.seek(0)
                m = re.search(r"serving the read API on .* \(port (\d+)\)", log.read())
                if m:
                    port = int(m.group(1))
                    break
                time.sleep(0.1)
            if port is None:
                log.seek(0)
                print("FAIL serve did not start\n" + log.read())
                return 1
            held = [slow(port) for _ in range(PER_IP)]
            time.sleep(0.05)
            codes = [status_of(port, "/healthz") for _ in range(5)]
            if codes != [200] * 5:
                failures.append(f"/healthz at the per-address limit: {codes}, want 200 x 5")
            code = status_of(port, "/v1/likes?ids=1")
            if code != 503:
                failures.append(f"/v1/likes on probation: {code}, want 503")
            more = []
            for _ in range(10):
                more.append(slow(port))
                time.sleep(0.01)
            code = status_of(port, "/healthz")
            if code != 200:
                failures.append(f"/healthz after 10 more slow connections: {code}, want 200")
            kept = sum(not closed(s) for s in more)
            cut = sum(closed(s, 0.01) for s in held)
            if kept > 2:
                failures.append(f"{kept} of 10 slow connections past the limit held, want <= 2")
            if cut:
                failures.append(f"{cut} of the first {PER_IP} slow connections cut, want 0")
            for s in held + more:
                s.close()
            print(f"probes {codes}; past the limit {kept} of 10 held, {cut} of {PER_IP} cut")
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    for f in failures:
        print("FAIL", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
