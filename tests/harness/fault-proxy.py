#!/usr/bin/env python3
"""A loopback TCP proxy that can fail on command, for store-outage tests (tests/faults/).

    fault-proxy.py --upstream HOST:PORT --port-file FILE [--state-file FILE] [--lifetime SECONDS]

Listens on 127.0.0.1 on a port the kernel picks (written to FILE once it listens) and relays
every connection to HOST:PORT. Signals switch what it does:

  SIGUSR1  refuse: the listening socket is closed (new connections are refused) and every open
           connection is reset (RST, both sides): a server that died.
  SIGUSR2  black-hole: connections are accepted and open ones stay open, but no reply comes
           back: a server that hangs, as its client sees it. The requests still reach the
           server, which may apply them: every one is an ambiguous outcome for its client (the
           hardest case for exactly-once: the write landed, the client cannot know).
  SIGHUP   restore: listening again on the same port; black-holed connections are reset (their
           client retries on a new one), new connections relay again.
  SIGTERM  exit.

Why a proxy: a DynamoDB-API emulator (moto) keeps its tables in memory, so killing it would lose
them; the proxy makes the outage between the client and a server that keeps running.

It exits by itself after --lifetime seconds (default 900), so a test that dies cannot leave it
behind. Each switch is logged to stderr for the reader; what scripts read is --state-file, a
JSON object rewritten (atomically) at start and after each switch: mode, restores (how many
SIGHUPs were done), held_reset (black-holed connections the last restore reset), and the
totals connections, resets and dropped_replies (reply chunks not delivered).
"""
import argparse
import asyncio
import json
import os
import signal
import socket
import struct
import sys


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
    def __init__(self, host, port, state_file):
        self.up_host, self.up_port = host, port
        self.state_file = state_file
        self.restores = 0
        self.held_reset = 0
        self.port = 0
        self.mode = "relay"
        self.server = None
        self.conns = set()
        self.totals = {"connections": 0, "resets": 0, "dropped_replies": 0}

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
            await asyncio.gather(self.pipe(conn, reader, conn.upstream, False),
                                 self.pipe(conn, up_reader, writer, True),
                                 return_exceptions=True)
        finally:
            self.conns.discard(conn)
            for w in (writer, conn.upstream):
                if w is not None:
                    w.close()

    async def pipe(self, conn, reader, writer, is_reply):
        try:
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

    def write_state(self):
        if not self.state_file:
            return
        state = {"mode": self.mode, "port": self.port, "restores": self.restores,
                 "held_reset": self.held_reset, **self.totals}
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

    async def restore(self):
        n = self.reset_all(only_held=True)
        self.mode = "relay"
        if self.server is None:
            await self.listen()
        self.restores += 1
        self.held_reset = n
        self.write_state()
        log(f"restore: relaying on port {self.port} again, {n} held connections reset, "
            f"{self.totals['dropped_replies']} replies dropped in all")


async def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--upstream", required=True, help="HOST:PORT")
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--state-file")
    ap.add_argument("--lifetime", type=float, default=900.0)
    args = ap.parse_args()
    host, _, port = args.upstream.rpartition(":")
    proxy = Proxy(host, int(port), args.state_file)
    await proxy.listen()
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
