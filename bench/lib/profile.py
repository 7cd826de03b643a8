#!/usr/bin/env python3
"""Where the time goes per event, written as results/profile.md for RESULTS.md.

  profile.py OUTDIR        (environment as for a scenario; bench/run calls it after the runs)

1. callgrind instruction counts (repeatable, unaffected by the machine's load) of
   bench_hotpath's per-event loop for the `hotcount` and `hotcount_no_hotkeys` variants: Ir per
   event and each function's self share.
2. perf (cpu-clock sampling) of one `hotcount stage1` process over the main topic, from its first
   event until its windows are committed: shares by library and the top symbols, which says
   how much of stage 1's CPU is hotcount's own work and how much is librdkafka and the kernel.
Either part is skipped, with a note, when its tool is missing or fails."""

import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as b  # noqa: E402


def callgrind(build, events, work):
    exe = os.path.join(build, "bench", "bench_hotpath")
    out = []
    for variant in ("hotcount", "hotcount_no_hotkeys", "jansson_ref"):
        n = events if variant != "jansson_ref" else events // 4
        cg = os.path.join(work, f"callgrind.{variant}.out")
        p = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={cg}",
                            "--toggle-collect=run", exe, "--events", str(n), "--only",
                            variant], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if p.returncode != 0:
            return [f"callgrind failed: {p.stderr[-500:]}"]
        ann = subprocess.run(["callgrind_annotate", "--inclusive=no", "--threshold=99.5", cg],
                             stdout=subprocess.PIPE, text=True).stdout
        total = None
        rows = []
        for line in ann.splitlines():
            m = re.match(r"\s*([\d,]+)\s+\(\s*([\d.]+)%\)\s+(.*)$", line)
            if m and "PROGRAM TOTALS" in m.group(3):
                total = int(m.group(1).replace(",", ""))
            elif m and total is not None:
                ir = int(m.group(1).replace(",", ""))
                name = m.group(3).split(":", 1)[-1].split(" [")[0].strip()
                if name.startswith("0x"):
                    lib = re.search(r"\[(\S+)\]", m.group(3))
                    name = f"{name} in {os.path.basename(lib.group(1)) if lib else '?'}"
                rows.append((ir, float(m.group(2)), name))
            elif total is None:
                m2 = re.match(r"\s*([\d,]+)\s+\(100.0%\)\s+PROGRAM TOTALS", line)
                if m2:
                    total = int(m2.group(1).replace(",", ""))
        if not total:
            return ["callgrind_annotate gave no totals"]
        out.append(f"\n**{variant}** ({n:,} events): {total / n:,.0f} instructions per event")
        out.append("")
        out.append("| function (self cost) | share | instructions per event |")
        out.append("|---|---|---|")
        for ir, share, name in rows[:12]:
            if share < 0.5:
                break
            out.append(f"| `{name}` | {share:.1f} % | {ir / n:,.0f} |")
    return out


def perf_stage1(events, work):
    if shutil.which("perf") is None:
        return ["perf is not installed: no stage-1 profile."]
    ns = b.Namespace(work, b.env("BENCH_TOPIC"))
    st = b.Stage("stage1", ns, "s1-prof", None, work)
    data = os.path.join(work, "perf-stage1.data")
    rec = None
    try:
        b.wait_for(lambda: (st.metric("hotcount_events_consumed_total") or 0) > 0, 120,
                   "stage 1's first event", [st], poll=0.02)
        rec = subprocess.Popen(["perf", "record", "-e", "cpu-clock", "-F", "999", "-p",
                                str(st.p.pid), "-o", data], stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
        b.wait_for(lambda: (st.metric("hotcount_events_total") or 0) >= events, 600,
                   "stage 1 to commit every event", [st], poll=0.05)
    finally:
        if rec is not None:
            rec.send_signal(2)
            rec.wait()
        st.stop()
    rep = subprocess.run(["perf", "report", "-i", data, "--no-children", "--sort", "dso",
                          "--stdio"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                         text=True).stdout
    out = ["", "| library | share of stage 1's CPU samples |", "|---|---|"]
    for line in rep.splitlines():
        m = re.match(r"\s*([\d.]+)%\s+(\S+)", line)
        if m and float(m.group(1)) >= 0.5:
            out.append(f"| {m.group(2)} | {float(m.group(1)):.1f} % |")
    rep = subprocess.run(["perf", "report", "-i", data, "--no-children", "--sort", "dso,sym",
                          "--stdio"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                         text=True).stdout
    out += ["", "| symbol | library | share |", "|---|---|---|"]
    n = 0
    for line in rep.splitlines():
        m = re.match(r"\s*([\d.]+)%\s+(\S+)\s+\[.\]\s+(.*)$", line)
        if m and n < 20:
            out.append(f"| `{m.group(3).strip()}` | {m.group(2)} | {float(m.group(1)):.1f} % |")
            n += 1
    return out


def main():
    outdir = sys.argv[1]
    build = b.env("BENCH_BUILD")
    events = int(b.env("BENCH_EVENTS"))
    work = tempfile.mkdtemp(prefix="hotcount-profile-", dir=os.environ.get("BENCH_WORK"))
    L = ["## Profile: where the time goes per event", ""]
    L += ["### The hot path (callgrind instruction counts)", "",
          "`valgrind --tool=callgrind --toggle-collect=run bench_hotpath --events N --only "
          "VARIANT` over in-memory events from the same generator (Zipf 0.99, 1 000 000 posts, "
          "200 000-event windows), counting only the per-event loop. Instruction counts do not "
          "depend on the machine's load; shares are of the loop's instructions (self cost)."]
    if shutil.which("valgrind"):
        L += callgrind(build, min(events, 200000), work)
    else:
        L.append("valgrind is not installed: no callgrind profile.")
    L += ["", "### Stage 1 on Kafka (perf, cpu-clock samples)", "",
          f"`perf record -e cpu-clock -F 999 -p <stage 1>` from its first event until its "
          f"committed windows cover all {events:,} events of the main topic."]
    try:
        L += perf_stage1(events, work)
    except (RuntimeError, OSError, subprocess.SubprocessError) as e:
        L.append(f"perf profile failed: {e}")
    with open(os.path.join(outdir, "profile.md"), "w") as f:
        f.write("\n".join(L) + "\n")


if __name__ == "__main__":
    main()
