#!/usr/bin/env bash
# `hotcount status` names a partition that stands still (issue 23, item 2): a stage's metrics
# endpoint (here a fixed page served by a loopback server of the script's own) that shows
# hotcount_partition_stalled makes status degraded with cause stageN_partition_stalled, the text
# names the topic, partition and state (label escapes undone), and --json lists them under the
# stage's metrics. A page without it names no such cause. Kafka is `hotcount mock-broker`.
set -u
hc=${1:?usage: status_stalled.sh path/to/hotcount}
tmp=$(mktemp -d)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do
        { kill "$pid" && wait "$pid"; } 2>/dev/null
    done
    rm -rf "$tmp"
}
trap cleanup EXIT
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }

"$hc" mock-broker >"$tmp/broker" 2>"$tmp/broker.err" &
pids+=($!)
for _ in $(seq 100); do
    [ -s "$tmp/broker" ] && break
    sleep 0.1
done
brokers=$(head -1 "$tmp/broker")
[ -n "$brokers" ] || { echo "FAIL mock broker did not start"; cat "$tmp/broker.err"; exit 1; }

mkdir -p "$tmp/stalled" "$tmp/moving"
cat >"$tmp/stalled/metrics" <<'M'
hotcount_ready 0
hotcount_assigned_partitions{stage="2"} 4
hotcount_unflushed_input_seconds{stage="2"} 0
hotcount_partition_stalled{stage="2",topic="likes.partials",partition="3",state="idle, \"odd\""} 1
hotcount_partitions_stalled{stage="2"} 1
M
cat >"$tmp/moving/metrics" <<'M'
hotcount_ready 1
hotcount_assigned_partitions{stage="2"} 4
hotcount_unflushed_input_seconds{stage="2"} 0
hotcount_partitions_stalled{stage="2"} 0
M
# issue 25, item 8: a rogue page (3.5 MB of stalled-partition lines that never close their
# labels) is read in time linear in the page: each line searched the rest of the page before
mkdir -p "$tmp/rogue"
python3 -c 'import sys; sys.stdout.write("hotcount_partition_stalled{stage=\"2\",\n" * 90000)' \
    >"$tmp/rogue/metrics"
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
serve() { # DIR PORT: a static server for 60 s at most
    timeout 60 python3 -m http.server "$2" --bind 127.0.0.1 --directory "$1" >/dev/null 2>&1 &
    pids+=($!)
}
p_stalled=$(port)
serve "$tmp/stalled" "$p_stalled"
p_moving=$(port)
serve "$tmp/moving" "$p_moving"
p_rogue=$(port)
serve "$tmp/rogue" "$p_rogue"
for p in "$p_stalled" "$p_moving" "$p_rogue"; do
    for _ in $(seq 50); do
        curl -sf "http://127.0.0.1:$p/metrics" >/dev/null && break
        sleep 0.1
    done
done

# the mock broker has the topics already; the store stays without a schema (status names it
# store_unreachable beside: these checks read only the stalled partitions)
cfg=(-X "brokers=$brokers" -X "store=sqlite:$tmp/store.db")

"$hc" status "${cfg[@]}" --stage2 "127.0.0.1:$p_stalled" >"$tmp/out" 2>/dev/null
head -1 "$tmp/out" | grep -q "stage2_partition_stalled" || { fail "no stage2_partition_stalled cause"; cat "$tmp/out"; }
grep -q 'partition likes.partials/3 stands still (partition_stalled, state idle, "odd")' "$tmp/out" ||
    { fail "the partition is not named"; cat "$tmp/out"; }
"$hc" status "${cfg[@]}" --stage2 "127.0.0.1:$p_stalled" --json >"$tmp/json" 2>/dev/null
python3 - "$tmp/json" <<'PY' || fail "--json"
import json, sys
r = json.load(open(sys.argv[1]))
assert "stage2_partition_stalled" in r["causes"], r["causes"]
sp = r["stage2"]["metrics"]["stalled_partitions"]
assert sp == [{"topic": "likes.partials", "partition": 3, "state": 'idle, "odd"'}], sp
PY
"$hc" status "${cfg[@]}" --stage2 "127.0.0.1:$p_moving" >"$tmp/out" 2>/dev/null
if head -1 "$tmp/out" | grep -q "partition_stalled"; then
    fail "a moving stage named stalled"; cat "$tmp/out"
fi
start=$(date +%s%N)
timeout 20 "$hc" status "${cfg[@]}" --stage2 "127.0.0.1:$p_rogue" --json >"$tmp/rogue.json" 2>/dev/null
rc=$?
ms=$((($(date +%s%N) - start) / 1000000))
if [ "$rc" = 124 ] || [ "$ms" -gt 10000 ]; then
    fail "a rogue page took ${ms} ms (exit $rc)"
else
    echo "ok   rogue page read in ${ms} ms"
fi
[ "$fails" -eq 0 ] && echo "status_stalled: ok" || echo "status_stalled: $fails failed"
[ "$fails" -eq 0 ]
