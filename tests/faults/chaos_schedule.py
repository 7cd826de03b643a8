#!/usr/bin/env python3
"""The combined-fault test's helpers (tests/faults/chaos.sh): the seeded fault schedule, the
progress watch after the faults, and the reading of the stages' `partition_stalled` events.

    chaos_schedule.py plan --seed N --store STORE --seconds S [--rounds R]
    chaos_schedule.py watch --hotcount H --config FILE --since-ms T --still-ms S --settle-ms B
                            --out FILE
    chaos_schedule.py stalls --healed-ms T --grace-ms G LOG...

plan: one line per step, sorted by time, `MS ACTION ARGS...`, MS counted from the start of the
fault phase (S seconds long, R rounds of every fault kind; the default is one round per 45 s).
The same seed, store and length give the same schedule (Python's own Mersenne Twister, seeded
with the seed alone, so a failing run is replayed by its seed). Steps:

    kill STAGE PICK                 SIGKILL a process of STAGE that holds work, restart it
    stop STAGE PICK HOLD_MS         SIGSTOP a process of STAGE for HOLD_MS (a zombie), SIGCONT
    scale STAGE up|down             one more process of STAGE / down to one process
    broker DOWN_MS                  kill -9 the broker, start it again DOWN_MS later
    store MODE DUR_MS               MODE kill (Redis, PostgreSQL: kill -9, start DUR_MS later),
                                    lock (SQLite: a write lock held DUR_MS), refuse or blackhole
                                    (DynamoDB emulator: its proxy refuses / hangs for DUR_MS)

PICK is a number that chaos.sh turns into one of the processes that can take the fault at that
moment (running, not stopped, holding partitions if any does): index PICK modulo how many there
are, in instance-id order. A step ending in @storeR+OFF is due OFF ms after the store step of
round R (0-based; the R-th store step of the plan) actually ran, whatever the steps between them
delayed (the stage-2 change inside the outage); every other step keeps its distance to the one
before it.

watch: after the faults have healed, `hotcount status --json` every 2 s until both stages hold
every partition at its log end (lag 0, counted in records, so transaction markers do not count).
Fails (exit 1) naming the stage, topic and partition when one stands still while behind for
longer than S ms (counted from T, the healing, epoch ms, or from its last move), or when not
every partition is at its end B ms after T. Each sample is appended to --out as one JSON line;
the line printed last says settled or why not.

stalls: every `partition_stalled` and `partition_stalled_exit` event in the logs given (JSON lines, docs/EVENTS.md), one line
each with its time relative to the healing (T, epoch ms); exit 1 when one was logged later than
G ms after it (a stall that outlived the faults' healing).
"""
import argparse
import datetime
import json
import random
import subprocess
import sys
import time

ROUND_S = 45  # one of every fault fits in 45 s with room for their spans to overlap
SESSION_MS = 6000  # kafka.consumer.session.timeout.ms (lib.sh) and the broker's KIP-848 session


def plan(args):
    rnd = random.Random(args.seed)
    total_ms = args.seconds * 1000
    rounds = args.rounds or max(1, args.seconds // ROUND_S)
    span = total_ms // rounds
    if span < 40000:
        sys.exit(f"plan: {args.seconds} s for {rounds} rounds; each round needs 40 s")
    steps = []
    first_scaled = rnd.choice(["stage1", "stage2"])
    other = {"stage1": "stage2", "stage2": "stage1"}

    def at(ms, *what):
        steps.append((int(ms), " ".join(str(w) for w in what)))

    def pick():
        return rnd.randrange(1000)

    for r in range(rounds):
        base = r * span
        u = lambda lo, hi: base + rnd.uniform(lo, hi) * span  # noqa: E731 (a fraction of the round)
        hold = lambda: rnd.randint(SESSION_MS + 2000, SESSION_MS + 4000)  # noqa: E731
        # 2 -> 3 -> 1 -> 2 processes of one stage, the other stage in the next round
        scaled = first_scaled if r % 2 == 0 else other[first_scaled]
        # The store's outage. Its length: past SQLite's 5 s busy wait, past the 10 s request
        # timeout for a hung DynamoDB (black hole), several store back-offs for the others, and
        # long enough for a session (6 s) to expire inside it.
        if args.store == "sqlite":
            mode, dur = "lock", rnd.randint(9000, 13000)
        elif args.store == "dynamodb":
            mode = "blackhole" if rnd.random() < 0.5 else "refuse"
            dur = rnd.randint(12000, 14000) if mode == "blackhole" else rnd.randint(9000, 13000)
        else:
            mode, dur = "kill", rnd.randint(9000, 13000)
        s_at = u(0.12, 0.45)
        at(s_at, "store", mode, dur)
        # One stage-2 group change always makes stage 2 rebalance inside the store's outage,
        # once it has been failing for a while (its partitions paused for a retry's back-off).
        # A stage 2 started while its store is down waits for the store before it joins, so
        # what rebalances then is a member leaving: a kill (its session expires 6 s later), a
        # zombie (likewise), or, when stage 2 is the scaled stage, its scale-down (SIGTERM:
        # the leavers leave the group at once). The other stage-2 faults land anywhere in the
        # round, inside the outage or not.
        kinds = ["kill", "stop"] + (["scale"] if scaled == "stage2" else [])
        inside = rnd.choice(kinds)
        off = int(rnd.uniform(1000, dur - SESSION_MS - 1500))  # its session ends inside too
        if inside == "kill":
            at(s_at + off, "kill", "stage2", pick(), f"@store{r}+{off}")
        else:
            at(u(0.05, 0.85), "kill", "stage2", pick())
        if inside == "stop":
            at(s_at + off, "stop", "stage2", pick(), hold(), f"@store{r}+{off}")
        else:
            at(u(0.05, 0.7), "stop", "stage2", pick(), hold())
        at(u(0.05, 0.85), "kill", "stage1", pick())
        at(u(0.05, 0.7), "stop", "stage1", pick(), hold())
        at(u(0.08, 0.7), "broker", rnd.randint(1000, 3000))
        gaps = [rnd.uniform(6000, 10000), rnd.uniform(5000, 8000)]
        anchor = []
        if inside == "scale":  # the scale-down 2-11 s into the outage
            off = int(rnd.uniform(2000, dur - 1500))
            gaps[0] = min(gaps[0], s_at + off - base - 500)
            up = s_at + off - gaps[0]
            anchor = [f"@store{r}+{off}"]
        else:
            up = u(0.04, 0.4)
            room = base + 0.92 * span - up  # the round's steps end before its last 8 %
            if sum(gaps) > room:
                gaps = [g * max(room, 8000) / sum(gaps) for g in gaps]
        at(up, "scale", scaled, "up")
        at(up + gaps[0], "scale", scaled, "down", *anchor)
        at(up + gaps[0] + gaps[1], "scale", scaled, "up")
    for ms, what in sorted(steps):
        print(ms, what)


def status_sample(args):
    """One `hotcount status --json`: {(stage, topic, partition): (committed, end, lag)}, or None."""
    try:
        out = subprocess.run([args.hotcount, "status", "-c", args.config, "--json", "-t", "5"],
                             capture_output=True, text=True, timeout=30).stdout
        report = json.loads(out)
    except (subprocess.TimeoutExpired, ValueError):
        return None
    parts = {}
    for stage in ("stage1", "stage2"):
        s = report.get(stage) or {}
        for p in s.get("partitions", []):
            parts[(stage, s.get("topic", "?"), p["partition"])] = (p.get("committed"), p["end"], p["lag"])
    return parts or None


def watch(args):
    out = open(args.out, "a")
    t0 = args.since_ms
    still = {}  # partition -> (committed offset, epoch ms from which it has stood there)
    last = None
    while True:
        now = int(time.time() * 1000)
        parts = status_sample(args)
        if parts is not None:
            last = parts
            behind = []
            for key, (committed, end, lag) in sorted(parts.items()):
                seen = still.get(key)
                if seen is None:
                    still[key] = (committed, t0)  # its clock starts at the healing
                elif seen[0] != committed:
                    still[key] = (committed, now)
                if lag > 0:
                    behind.append(key)
            out.write(json.dumps({"t_ms": now - t0, "behind": [
                {"stage": k[0], "topic": k[1], "partition": k[2], "committed": parts[k][0],
                 "end": parts[k][1], "lag": parts[k][2]} for k in behind]}) + "\n")
            out.flush()
            if not behind:
                print(f"settled {(now - t0) / 1000:.1f} s after the stream ended and the faults "
                      f"healed: every partition of both stages at its log end ({len(parts)} "
                      "partitions)")
                return 0
            stalled = [k for k in behind if now - still[k][1] > args.still_ms]
            if stalled:
                # every partition past the bound, named: the first one and then the others
                print("stalled: " + "; ".join(
                    f"{k[0]} {k[1]} partition {k[2]} stood still at offset {still[k][0]} for "
                    f"{(now - still[k][1]) / 1000:.1f} s while its log ends at {parts[k][1]} "
                    f"({parts[k][2]} records behind)" for k in stalled) +
                    f" (bound {args.still_ms / 1000:.1f} s)")
                return 1
        if now - t0 > args.settle_ms:
            if last is None:
                print(f"not settled: `hotcount status --json` gave no report for "
                      f"{(now - t0) / 1000:.1f} s")
            else:
                left = ", ".join(f"{k[0]} {k[1]}/{k[2]} at {v[0]} of {v[1]} ({v[2]} behind)"
                                 for k, v in sorted(last.items()) if v[2] > 0)
                print(f"not settled {(now - t0) / 1000:.1f} s after the stream ended and the "
                      f"faults healed (bound "
                      f"{args.settle_ms / 1000:.1f} s): {left}")
            return 1
        time.sleep(2)


def epoch_ms(ts):
    """The log's ts, 2026-12-01T14:05:40.123Z, as epoch milliseconds."""
    d = datetime.datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.timezone.utc)
    return int(d.timestamp() * 1000)


STALL_EVENTS = ("partition_stalled", "partition_stalled_exit", "partition_moving")


def stalls(args):
    """Prints the progress events of every log in time order; 1 if a stall came too late."""
    found = []
    for path in args.logs:
        for line in open(path, errors="replace"):
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            if isinstance(ev, dict) and ev.get("event") in STALL_EVENTS:
                found.append((epoch_ms(ev["ts"]), path.rsplit("/", 1)[-1], ev))
    late = 0
    for t, log, ev in sorted(found, key=lambda f: f[0]):
        rel = t - args.healed_ms
        verdict = "during the faults" if rel <= 0 else "after the healing"
        if ev["event"] != "partition_moving" and rel > args.grace_ms:
            verdict = f"MORE THAN {args.grace_ms / 1000:.0f} s AFTER THE HEALING"
            late += 1
        fields = {k: v for k, v in ev.items() if k not in ("ts", "level", "event")}
        print(f"{ev['event']} {rel / 1000:+.1f} s from the healing ({verdict}), {log}: "
              f"{json.dumps(fields)}")
    return 1 if late else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("plan")
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--store", required=True)
    p.add_argument("--seconds", type=int, required=True)
    p.add_argument("--rounds", type=int, default=0)
    w = sub.add_parser("watch")
    w.add_argument("--hotcount", required=True)
    w.add_argument("--config", required=True)
    w.add_argument("--since-ms", type=int, required=True)
    w.add_argument("--still-ms", type=int, required=True)
    w.add_argument("--settle-ms", type=int, required=True)
    w.add_argument("--out", required=True)
    s = sub.add_parser("stalls")
    s.add_argument("--healed-ms", type=int, required=True)
    s.add_argument("--grace-ms", type=int, required=True)
    s.add_argument("logs", nargs="*")
    args = ap.parse_args()
    sys.exit({"plan": plan, "watch": watch, "stalls": stalls}[args.cmd](args))


if __name__ == "__main__":
    main()
