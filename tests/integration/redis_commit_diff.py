#!/usr/bin/env python3
"""The Redis commit script against the one it replaced (issue 27): random batches, applied once
through tests/integration/redis_commit_v1.lua and once through src/store/redis/commit.lua, each
into a key space of its own, must leave identical counts, types and offsets and get identical
replies (totals, conflicts, refusals with the refused delta's index and reason); and after every
batch the new script's top index (a K of 1, 2, 3, 5 or 1000, built before the first batch or,
as `hotcount init` would, after it) must keep its invariants, answer "top" exactly as a recount
ranks the counts whenever it answers, and be left untouched by a refused or conflicting batch. The batches are
split into parts of a few deltas (so most are staged) and touch counts that are absent, integers
near 2^53 and near 9e18, strings that are not integers ("012", "-0", " 5", "banana") and other
types; deltas reach +-2^63 and a batch may list a post twice (incr_only). Where the old
script fails half way (a post listed twice whose deltas overflow together), the new one must
refuse the batch and write nothing. Run under tests/harness/with-servers (HC_TEST_REDIS_URI).

    redis_commit_diff.py NEW_SCRIPT [CASES] [SEED]
"""
import os
import random
import re
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


def apply_v2(r, sha, ns, batch, expected, nxt, mode, part):
    """The packed commit of issue 27 before the top index (redis_commit_v2.lua)."""
    return apply_new(r, sha, ns, batch, expected, nxt, mode, part, top=None)


def apply_new(r, sha, ns, batch, expected, nxt, mode, part, top=1000):
    """src/store/redis/commit.lua; top: K, the index's size (its keys named after ns)."""
    parts = [batch[i:i + part] for i in range(0, len(batch), part)] or [[]]
    incr_only = (len({k for k, _ in batch}) < len(batch)
                 or any(abs(d) >= 2**53 for _, d in batch))
    keys = [f"hotcount:offsets:{ns}", f"hotcount:staging:{ns}-{nxt}"]
    if top is not None:
        keys += [f"hotcount:top:{ns}", f"hotcount:top-meta:{ns}"]
    for i, p in enumerate(parts):
        commit = i == len(parts) - 1
        args = ["EVALSHA", sha, len(keys), *keys, mode if commit else "stage", 1, i, 120000,
                "t/0", expected, nxt, pack(p), "1" if incr_only else "0"]
        if top is not None:
            args.append(top)
        res = r.call(*args)
        if commit or res != [1]:
            return res


def main():
    new_script = sys.argv[1]
    cases = int(sys.argv[2]) if len(sys.argv) > 2 else 400
    seed = int(sys.argv[3]) if len(sys.argv) > 3 else random.randrange(1 << 30)
    rnd = random.Random(seed)
    print(f"redis_commit_diff: seed {seed}", flush=True)  # before any case: a crash names it too
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

    def absorb(ns, k):
        keys = r.call("KEYS", f"{ns}*")
        return r.call("EVALSHA", sha_new, 4, f"hotcount:offsets:{ns}", f"hotcount:staging:{ns}",
                      f"hotcount:top:{ns}", f"hotcount:top-meta:{ns}", "absorb", k, "1", *keys)

    def index(ns):
        return (r.call("ZRANGE", f"hotcount:top:{ns}", 0, -1, "WITHSCORES"),
                r.call("HGETALL", f"hotcount:top-meta:{ns}"))

    def index_faults(ns, k, built):
        """The index's invariants (commit.lua, "The top index") and its top against a recount."""
        faults = []
        zs, meta = index(ns)
        meta = dict(zip(meta[::2], meta[1::2]))
        floor = float(meta.get(b"floor", b"-inf"))
        members = {zs[i]: float(zs[i + 1]) for i in range(0, len(zs), 2)}
        counts = {}
        for key in r.call("KEYS", f"{ns}*"):
            if r.call("TYPE", key) == "string":
                v = r.call("GET", key)
                if re.fullmatch(rb"-?[1-9][0-9]*|0", v):
                    counts[key] = int(v)
        if len(members) > k:
            faults.append(f"{len(members)} members, K {k}")
        for m, score in members.items():
            if m not in counts or float(counts[m]) != score or score < floor:
                faults.append(f"member {m} score {score} count {counts.get(m)} floor {floor}")
        for key, c in counts.items():
            if built and key not in members and float(c) > floor:
                faults.append(f"left out {key} count {c} above floor {floor}")
        ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        for n in range(1, min(k, 17) + 2):  # 16 posts a case: a larger n adds nothing
            res = r.call("EVALSHA", sha_new, 4, "hotcount:offsets:", "hotcount:staging:",
                         f"hotcount:top:{ns}", f"hotcount:top-meta:{ns}", "top", n)
            if res[0] != 1:
                continue
            if not built:
                faults.append("top answered from an index not built")
                break
            got = sorted(((res[i], int(res[i + 1])) for i in range(1, len(res), 2)
                          if res[i + 1] is not None), key=lambda kv: (-kv[1], kv[0]))[:n]
            if got != ranked[:n]:
                faults.append(f"top {n}: {got} against {ranked[:n]}")
        return faults

    LIMIT = 9e18  # commit.lua's

    def stored(ns, key):
        """A count as the scripts read it: an integer, None if absent, False if not a count."""
        t = r.call("TYPE", ns + key)
        if t == "none":
            return None
        v = r.call("GET", ns + key) if t == "string" else b""
        return int(v) if re.fullmatch(rb"-?[1-9][0-9]*|0", v) else False

    def split_verdict(ns, ids, deltas):
        """None, or for a batch where the two checks differ on a post listed twice, whether
        the new check passes every such post."""
        split, passes = False, True
        for key in {i for i in ids if ids.count(i) > 1}:
            old = stored(ns, key)
            if old is False:
                continue  # "type" for both
            old, acc, alone, running = float(old or 0), 0.0, True, True
            for i, d in zip(ids, deltas):
                if i == key:
                    acc += float(d)
                    alone = alone and abs(old + float(d)) <= LIMIT
                    running = running and abs(old + acc) <= LIMIT
            split = split or alone != running
            passes = passes and running
        return passes if split else None

    def judge_split(ns, ids, deltas, passes, got, before_state, before_index, stored_before):
        if got[0] != 1:
            if state(ns) != before_state or index(ns) != before_index:
                return "refused, yet something was written"
            return None
        if not passes:
            return "committed a batch whose totals pass 9e18"
        for key in set(ids):
            want = (stored_before.get(key) or 0) + sum(d for i, d in zip(ids, deltas) if i == key)
            if stored(ns, key) != want:
                return f"{key}: {stored(ns, key)} against {want}"
        return None

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
        k = rnd.choice([1, 2, 3, 5, 1000])
        built = rnd.random() < 0.7  # else built after the first batch, as `init` after commits
        if built:
            absorb(new_ns, k)
        for b in range(3):
            if b == 1 and not built:
                absorb(new_ns, k)
                built = True
            before, before_state = index(new_ns), state(new_ns)
            ids = [f"p{rnd.randint(0, 15)}" for _ in range(rnd.randint(0, 25))]
            if rnd.random() < 0.8:
                ids = list(dict.fromkeys(ids))
            deltas = [value() if rnd.random() < 0.3 else rnd.randint(-3, 9) for _ in ids]
            mode = rnd.choice(["commit", "commit_quiet"])
            nxt = str(b + 1) if rnd.random() < 0.9 else "7"
            exp = expected if rnd.random() < 0.9 else "5"
            # A post listed twice: the reference checks each of its deltas against the stored
            # count alone, the new script checks every total its INCRBYs pass through. Where
            # the two verdicts differ the reference is no oracle (it may even fail half way,
            # its INCRBY overflowing), so the batch is judged by a model of the new check
            # (doubles, as in Lua) and by exact sums, and the case ends there.
            split = split_verdict(new_ns, ids, deltas)
            stored_before = {i: stored(new_ns, i) for i in ids}
            try:
                got_old = apply_old(r, sha_old, old_ns,
                                    [(old_ns + i, d) for i, d in zip(ids, deltas)], exp, nxt,
                                    mode, part)
            except RuntimeError as e:
                if split is None or "overflow" not in str(e):
                    raise
                got_old = None
            got_new = apply_new(r, sha_new, new_ns, [(new_ns + i, d) for i, d in zip(ids, deltas)],
                                exp, nxt, mode, part, top=k)
            if split is not None:
                fault = judge_split(new_ns, ids, deltas, split, got_new, before_state, before,
                                    stored_before)
                if fault:
                    failures += 1
                    print(f"case {case} batch {b} (seed {seed}): ids {ids} deltas {deltas}: "
                          f"{fault}; reply {norm(got_new, new_ns)}")
                break
            a, c = norm(got_old, old_ns), norm(got_new, new_ns)
            sa, sc = state(old_ns), state(new_ns)
            faults = index_faults(new_ns, k, built)
            if got_new[0] != 1 and index(new_ns) != before:
                faults.append("a refused batch changed the index")
            if faults:
                failures += 1
                if failures <= 5:
                    print(f"case {case} batch {b} (seed {seed}, K {k}): ids {ids} deltas "
                          f"{deltas} reply {c}\n  index: {faults[:3]}")
            elif a != c or sa != sc:
                failures += 1
                if failures <= 5:
                    print(f"case {case} batch {b} (seed {seed}): ids {ids} deltas {deltas}\n"
                          f"  old: {a} {sa}\n  new: {c} {sc}")
            if got_old and got_old[0] == 1:
                expected = nxt
        for ns in (old_ns, new_ns):
            keys = r.call("KEYS", f"{ns}*") + [f"hotcount:offsets:{ns}", f"hotcount:top:{ns}",
                                               f"hotcount:top-meta:{ns}"]
            r.call("DEL", *keys)
    print(f"redis_commit_diff: {cases} cases, seed {seed}, {failures} differ")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
