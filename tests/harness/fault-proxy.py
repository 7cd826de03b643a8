#!/usr/bin/env python3
"""A loopback TCP proxy that can fail on command, for store-outage tests (tests/faults/).

    fault-proxy.py --upstream HOST:PORT --port-file FILE [--state-file FILE] [--lifetime SECONDS]
                   [--mode relay|throttle] [--throttle FRACTION] [--delay-ms MS] [--seed N]
                   [--throttle-status CODE] [--throttle-type TYPE]

Listens on 127.0.0.1 on a port the kernel picks (written to FILE once it listens) and relays
every connection to HOST:PORT. Signals switch what it does:

  SIGUSR1  refuse: the listening socket is closed (new connections are refused) and every open
           connection is reset (RST, both sides): a server that died.
  SIGUSR2  black-hole: connections are accepted and open ones stay open, but no reply comes
           back: a server that hangs, as its client sees it. The requests still reach the
           server, which may apply them: every one is an ambiguous outcome for its client (the
           hardest case for exactly-once: the write landed, the client cannot know).
  SIGWINCH throttle (DynamoDB's HTTP API): of the write requests (TransactWriteItems,
           BatchWriteItem, UpdateItem, PutItem, DeleteItem), a --throttle FRACTION (0.3) is
           answered by the proxy itself with HTTP --throttle-status (400) and the error
           --throttle-type (ProvisionedThroughputExceededException) and never reaches the
           server; every other request is held --delay-ms (0) before it goes on. Seeded
           (--seed, 1): the same sequence of write requests meets the same answers. A
           throttled request changed nothing, so it is never ambiguous. --mode throttle
           starts in this mode.
  SIGHUP   restore: listening again on the same port; black-holed connections are reset (their
           client retries on a new one), new connections relay again; throttling stops.
  SIGTERM  exit.

Why a proxy: a DynamoDB-API emulator (moto) keeps its tables in memory, so killing it would lose
them; the proxy makes the outage between the client and a server that keeps running.

HTTP: a connection whose first bytes are an HTTP/1.1 request is relayed request by request (each
request read whole: headers, then Content-Length bytes; a chunked request turns the rest of its
connection into a plain relay), which is what lets throttle mode answer or hold one request.
Such a connection's `Expect: 100-continue` is answered by the proxy (and not forwarded), so the
body always comes before a request is judged. Clients do not pipeline (libcurl does not), so a
reply the proxy writes itself never interleaves with one the server sends. Anything else is
relayed byte for byte.

It exits by itself after --lifetime seconds (default 900), so a test that dies cannot leave it
behind. Each switch is logged to stderr for the reader; what scripts read is --state-file, a
JSON object rewritten (atomically) at start and after each switch, and in throttle mode also
at most once a second while requests pass: mode, restores (how many SIGHUPs were done),
held_reset (black-holed connections the last restore reset), and the totals connections,
resets, dropped_replies (reply chunks not delivered), requests (HTTP requests seen), writes
(write requests seen in throttle mode), throttled (answered by the proxy) and delayed (held
--delay-ms).
"""
import argparse
import asyncio
import json
import os
import random
import signal
import socket
import struct
import sys
import time

WRITE_OPS = {"TransactWriteItems", "BatchWriteItem", "UpdateItem", "PutItem", "DeleteItem"}
HTTP_METHODS = (b"GET ", b"POST ", b"PUT ", b"HEAD ", b"DELETE ", b"OPTIONS ", b"PATCH ")
MAX_HEAD = 64 * 1024


def log(msg):
    print(f"fault-proxy[{os.getpid()}]: {msg}", file=sys.stderr, flush=True)


def reset(writer):
    """Closes a connection with RST rather than FIN: the peer sees a reset, not a clean end."""
    try:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    writer.close()


class Conn:
    def __init__(self, client):
        self.client = client
        self.upstream = None
        self.held = False  # black-holed: replies are dropped


class Proxy:
    def __init__(self, args):
        host, _, port = args.upstream.rpartition(":")
        self.up_host, self.up_port = host, int(port)
        self.state_file = args.state_file
        self.fraction = args.throttle
        self.delay_s = args.delay_ms / 1000.0
        self.seed = args.seed
        self.rng = random.Random(args.seed)
        self.throttle_status = args.throttle_status
        self.throttle_type = args.throttle_type
        self.restores = 0
        self.held_reset = 0
        self.port = 0
        self.mode = "relay"
        self.server = None
        self.conns = set()
        self.totals = {"connections": 0, "resets": 0, "dropped_replies": 0, "requests": 0,
                       "writes": 0, "throttled": 0, "delayed": 0}
        self.state_written = 0.0

    async def listen(self):
        self.server = await asyncio.start_server(self.handle, "127.0.0.1", self.port,
                                                 reuse_address=True)
        self.port = self.server.sockets[0].getsockname()[1]

    async def handle(self, reader, writer):
        conn = Conn(writer)
        self.conns.add(conn)
        self.totals["connections"] += 1
        try:
            conn.held = self.mode == "blackhole"
            try:
                up_reader, conn.upstream = await asyncio.open_connection(
                    self.up_host, self.up_port)
            except OSError:
                reset(writer)
                return
            if self.mode == "refuse":  # switched while connecting
                reset(writer)
                return
            conn.held = conn.held or self.mode == "blackhole"
            await asyncio.gather(self.requests(conn, reader, conn.upstream),
                                 self.pipe(conn, up_reader, writer, True),
                                 return_exceptions=True)
        except asyncio.CancelledError:
            pass  # the proxy exits with this connection open
        finally:
            self.conns.discard(conn)
            for w in (writer, conn.upstream):
                if w is not None:
                    w.close()

    async def pipe(self, conn, reader, writer, is_reply, first=b""):
        try:
            if first:
                writer.write(first)
                await writer.drain()
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                if is_reply and conn.held:
                    # one reply (or a piece of one) that its client never gets
                    self.totals["dropped_replies"] += 1
                    continue
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            if not conn.held:
                writer.close()

    async def requests(self, conn, reader, upstream):
        """The client's side: HTTP request by request when it speaks HTTP, else raw bytes."""
        try:
            first = await reader.read(65536)
        except (ConnectionError, OSError):
            first = b""
        if not first:
            if not conn.held:
                upstream.close()
            return
        if not first.startswith(HTTP_METHODS):
            await self.pipe(conn, reader, upstream, False, first)
            return
        buf = first
        try:
            while True:
                while b"\r\n\r\n" not in buf:
                    if len(buf) > MAX_HEAD:
                        await self.pipe(conn, reader, upstream, False, buf)
                        return
                    data = await reader.read(65536)
                    if not data:
                        if buf:
                            upstream.write(buf)
                        return
                    buf += data
                head, _, buf = buf.partition(b"\r\n\r\n")
                lines = head.split(b"\r\n")
                headers = {}
                kept = [lines[0]]
                for line in lines[1:]:
                    name, _, value = line.partition(b":")
                    key = name.strip().lower()
                    headers[key] = value.strip()
                    if key != b"expect":
                        kept.append(line)
                if b"chunked" in headers.get(b"transfer-encoding", b"").lower():
                    await self.pipe(conn, reader, upstream, False, head + b"\r\n\r\n" + buf)
                    return
                length = int(headers.get(b"content-length", b"0") or 0)
                if len(buf) < length and headers.get(b"expect", b"").lower() == b"100-continue":
                    conn.client.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                    await conn.client.drain()
                while len(buf) < length:
                    data = await reader.read(65536)
                    if not data:
                        return
                    buf += data
                body, buf = buf[:length], buf[length:]
                request = b"\r\n".join(kept) + b"\r\n\r\n" + body
                self.totals["requests"] += 1
                if self.mode == "throttle":
                    target = headers.get(b"x-amz-target", b"").decode("latin-1")
                    if await self.throttled(conn, target.rpartition(".")[2]):
                        continue
                upstream.write(request)
                await upstream.drain()
        except (ConnectionError, OSError, ValueError):
            pass
        finally:
            if not conn.held:
                upstream.close()

    async def throttled(self, conn, op):
        """Throttle mode: True when this request was answered here; else after its delay."""
        if op in WRITE_OPS:
            self.totals["writes"] += 1
            if self.rng.random() < self.fraction:
                self.totals["throttled"] += 1
                body = json.dumps({
                    "__type": f"com.amazonaws.dynamodb.v20120810#{self.throttle_type}",
                    "message": f"{op} throttled by fault-proxy.py (throttle mode, "
                               f"{self.fraction:g} of write requests)",
                }).encode()
                reason = {400: "Bad Request", 429: "Too Many Requests",
                          500: "Internal Server Error",
                          503: "Service Unavailable"}.get(self.throttle_status, "Error")
                conn.client.write(
                    f"HTTP/1.1 {self.throttle_status} {reason}\r\n"
                    f"Content-Type: application/x-amz-json-1.0\r\n"
                    f"x-amzn-RequestId: fault-proxy-{self.totals['throttled']}\r\n"
                    f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
                await conn.client.drain()
                self.tick_state()
                return True
        if self.delay_s > 0:
            self.totals["delayed"] += 1
            await asyncio.sleep(self.delay_s)
        self.tick_state()
        return False

    def tick_state(self):
        now = time.monotonic()
        if now - self.state_written >= 1.0:
            self.write_state()

    def write_state(self):
        self.state_written = time.monotonic()
        if not self.state_file:
            return
        state = {"mode": self.mode, "port": self.port, "restores": self.restores,
                 "held_reset": self.held_reset, "throttle": self.fraction,
                 "delay_ms": int(self.delay_s * 1000), "seed": self.seed, **self.totals}
        tmp = self.state_file + ".tmp"
        with open(tmp, "w") as f:
            json.dump(state, f)
        os.rename(tmp, self.state_file)

    def reset_all(self, only_held=False):
        n = 0
        for conn in list(self.conns):
            if only_held and not conn.held:
                continue
            reset(conn.client)
            if conn.upstream is not None:
                reset(conn.upstream)
            self.conns.discard(conn)
            n += 1
        self.totals["resets"] += n
        return n

    def refuse(self):
        self.mode = "refuse"
        if self.server is not None:
            self.server.close()
            self.server = None
        log(f"refuse: not listening, {self.reset_all()} connections reset")
        self.write_state()

    def blackhole(self):
        self.mode = "blackhole"
        for conn in self.conns:
            conn.held = True
        log(f"black-hole: {len(self.conns)} open connections held")
        self.write_state()

    def throttle(self):
        if self.mode in ("refuse", "blackhole"):
            log(f"throttle: ignored in mode {self.mode} (SIGHUP restores first)")
            return
        self.mode = "throttle"
        log(f"throttle: {self.fraction:g} of write requests answered HTTP "
            f"{self.throttle_status} {self.throttle_type}, the others held "
            f"{self.delay_s * 1000:g} ms (seed {self.seed})")
        self.write_state()

    async def restore(self):
        n = self.reset_all(only_held=True)
        self.mode = "relay"
        if self.server is None:
            await self.listen()
        self.restores += 1
        self.held_reset = n
        self.write_state()
        log(f"restore: relaying on port {self.port} again, {n} held connections reset, "
            f"{self.totals['dropped_replies']} replies dropped, "
            f"{self.totals['throttled']} requests throttled in all")


async def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--upstream", required=True, help="HOST:PORT")
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--state-file")
    ap.add_argument("--lifetime", type=float, default=900.0)
    ap.add_argument("--mode", choices=("relay", "throttle"), default="relay",
                    help="the mode at start (default relay)")
    ap.add_argument("--throttle", type=float, default=0.3,
                    help="throttle mode: the fraction of write requests answered as throttled")
    ap.add_argument("--delay-ms", type=float, default=0.0,
                    help="throttle mode: how long every other request is held")
    ap.add_argument("--seed", type=int, default=1, help="throttle mode: the random seed")
    ap.add_argument("--throttle-status", type=int, default=400,
                    help="throttle mode: the HTTP status of a throttled answer")
    ap.add_argument("--throttle-type", default="ProvisionedThroughputExceededException",
                    help="throttle mode: the DynamoDB error type of a throttled answer")
    args = ap.parse_args()
    if not 0.0 <= args.throttle <= 1.0 or args.delay_ms < 0:
        ap.error("--throttle takes 0..1 and --delay-ms a non-negative number")
    proxy = Proxy(args)
    await proxy.listen()
    if args.mode == "throttle":
        proxy.throttle()
    proxy.write_state()
    tmp = args.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(f"{proxy.port}\n")
    os.rename(tmp, args.port_file)
    log(f"relaying 127.0.0.1:{proxy.port} -> {args.upstream} for at most {args.lifetime:g} s")

    loop = asyncio.get_running_loop()
    done = asyncio.Event()
    loop.add_signal_handler(signal.SIGUSR1, proxy.refuse)
    loop.add_signal_handler(signal.SIGUSR2, proxy.blackhole)
    loop.add_signal_handler(signal.SIGWINCH, proxy.throttle)
    loop.add_signal_handler(signal.SIGHUP, lambda: loop.create_task(proxy.restore()))
    loop.add_signal_handler(signal.SIGTERM, done.set)
    loop.add_signal_handler(signal.SIGINT, done.set)
    try:
        await asyncio.wait_for(done.wait(), args.lifetime)
    except asyncio.TimeoutError:
        log(f"lifetime of {args.lifetime:g} s over")
    proxy.reset_all()
    proxy.write_state()
    log("totals: " + " ".join(f"{k}={v}" for k, v in proxy.totals.items()))


if __name__ == "__main__":
    asyncio.run(main())
