#!/usr/bin/env python3
"""The Redis commit script against the one it replaced (issue 27): random batches, applied once
through tests/integration/redis_commit_v1.lua and once through src/store/redis/commit.lua, each
into a key space of its own, must leave identical counts, types and offsets and get identical
replies (totals, conflicts, refusals with the refused delta's index and reason). The batches are
split into parts of a few deltas (so most are staged) and touch counts that are absent, integers
near 2^53 and near 9e18, strings that are not integers ("012", "-0", " 5", "banana") and other
types; deltas reach +-2^63 and a batch may list a post twice (incr_only). Run under
tests/harness/with-servers (HC_TEST_REDIS_URI).

    redis_commit_diff.py NEW_SCRIPT [CASES] [SEED]
"""
import os
import random
import socket
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


class Redis:
    def __init__(self, uri):
        hostport = uri.split("://", 1)[1].split("/", 1)[0].rsplit("@", 1)[-1]
        host, port = hostport.rsplit(":", 1)
        self.s = socket.create_connection((host, int(port)))
        self.f = self.s.makefile("rb")
        db = uri.split("://", 1)[1].split("/", 1)[1:] or ["0"]
        if db[0]:
            self.call("SELECT", db[0])

    def call(self, *args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(a), a))
        self.s.sendall(b"".join(out))
        return self.read()

    def read(self):
        line = self.f.readline()
        kind, rest = line[:1], line[1:-2]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise RuntimeError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self.f.read(n + 2)[:-2]
        if kind == b"*":
            return [self.read() for _ in range(int(rest))]
        raise RuntimeError(f"unexpected reply {line!r}")


def pack(pairs):
    """What src/store/redis/redis_commit.c's pack_part sends."""
    out = [b"\xdd" + struct.pack(">I", 2 * len(pairs))]
    for key, d in pairs:
        k = key.encode()
        out.append((bytes([0xa0 | len(k)]) if len(k) < 32 else b"\xd9" + bytes([len(k)])) + k)
        if 0 <= d < 128:
            out.append(bytes([d]))
        elif -2**53 < d < 2**53:
            out.append(b"\xd3" + struct.pack(">q", d))
        else:
            s = str(d).encode()
            out.append(bytes([0xa0 | len(s)]) + s)
    return b"".join(out)


def apply_old(r, sha, ns, batch, expected, nxt, mode, part):
    parts = [batch[i:i + part] for i in range(0, len(batch), part)] or [[]]
    for i, p in enumerate(parts):
        commit = i == len(parts) - 1
        args = ["EVALSHA", sha, 2 + (len(p) if commit else 0), f"hotcount:offsets:{ns}",
                f"hotcount:staging:{ns}-{nxt}"]
        if commit:
            args += [k for k, _ in p]
        args += [mode if commit else "stage", 1, i * part, 120000, "t/0", expected, nxt]
        for k, d in p:
            args += [d] if commit else [k, d]
        res = r.call(*args)
        if commit or res != [1]:
            return res


def apply_new(r, sha, ns, batch, expected, nxt, mode, part):
    parts = [batch[i:i + part] for i in range(0, len(batch), part)] or [[]]
    incr_only = (len({k for k, _ in batch}) < len(batch)
                 or any(abs(d) >= 2**53 for _, d in batch))
    for i, p in enumerate(parts):
        commit = i == len(parts) - 1
        res = r.call("EVALSHA", sha, 2, f"hotcount:offsets:{ns}", f"hotcount:staging:{ns}-{nxt}",
                     mode if commit else "stage", 1, i, 120000, "t/0", expected, nxt, pack(p),
                     "1" if incr_only else "0")
        if commit or res != [1]:
            return res


def main():
    new_script = sys.argv[1]
    cases = int(sys.argv[2]) if len(sys.argv) > 2 else 400
    seed = int(sys.argv[3]) if len(sys.argv) > 3 else random.randrange(1 << 30)
    rnd = random.Random(seed)
    r = Redis(os.environ["HC_TEST_REDIS_URI"])
    sha_old = r.call("SCRIPT", "LOAD", open(os.path.join(HERE, "redis_commit_v1.lua")).read())
    sha_new = r.call("SCRIPT", "LOAD", open(new_script).read())
    run = f"diff{os.getpid()}-{seed}"

    def value():
        c = rnd.random()
        if c < 0.6:
            return rnd.randint(-5, 20)
        if c < 0.75:
            return rnd.choice([2**53 - 1, 2**53, -2**53, 2**53 + 7, 2**62, -2**62,
                               9 * 10**18 - 3, 2**63 - 1, -2**63])
        return rnd.randint(-10**6, 10**6)

    def state(ns):
        out = []
        for k in sorted(r.call("KEYS", f"{ns}*")):
            t = r.call("TYPE", k)
            out.append((k[len(ns):], t, r.call("GET", k) if t == "string" else None))
        out.append(r.call("HGETALL", f"hotcount:offsets:{ns}"))
        return out

    def norm(res, ns):
        return [x.replace(ns.encode(), b"NS") if isinstance(x, bytes) else x for x in res]

    failures = 0
    for case in range(cases):
        old_ns, new_ns = f"{run}-o{case}:", f"{run}-n{case}:"
        for _ in range(rnd.randint(0, 12)):
            key, kind = f"p{rnd.randint(0, 15)}", rnd.random()
            v, junk = str(value()), rnd.choice(["banana", "012", "-0", "1.5", " 5", "+3", "0"])
            for ns in (old_ns, new_ns):
                r.call("DEL", ns + key)
                if kind < 0.7:
                    r.call("SET", ns + key, v)
                elif kind < 0.78:
                    r.call("SET", ns + key, junk)
                elif kind < 0.85:
                    r.call("HSET", ns + key, "f", "v")
        expected = ""
        part = rnd.choice([1, 2, 3, 7, 50])
        for b in range(3):
            ids = [f"p{rnd.randint(0, 15)}" for _ in range(rnd.randint(0, 25))]
            if rnd.random() < 0.8:
                ids = list(dict.fromkeys(ids))
            deltas = [value() if rnd.random() < 0.3 else rnd.randint(-3, 9) for _ in ids]
            mode = rnd.choice(["commit", "commit_quiet"])
            nxt = str(b + 1) if rnd.random() < 0.9 else "7"
            exp = expected if rnd.random() < 0.9 else "5"
            got_old = apply_old(r, sha_old, old_ns, [(old_ns + i, d) for i, d in zip(ids, deltas)],
                                exp, nxt, mode, part)
            got_new = apply_new(r, sha_new, new_ns, [(new_ns + i, d) for i, d in zip(ids, deltas)],
                                exp, nxt, mode, part)
            a, c = norm(got_old, old_ns), norm(got_new, new_ns)
            sa, sc = state(old_ns), state(new_ns)
            if a != c or sa != sc:
                failures += 1
                if failures <= 5:
                    print(f"case {case} batch {b} (seed {seed}): ids {ids} deltas {deltas}\n"
                          f"  old: {a} {sa}\n  new: {c} {sc}")
            if got_old and got_old[0] == 1:
                expected = nxt
        for ns in (old_ns, new_ns):
            keys = r.call("KEYS", f"{ns}*") + [f"hotcount:offsets:{ns}"]
            r.call("DEL", *keys)
    print(f"redis_commit_diff: {cases} cases, seed {seed}, {failures} differ")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
