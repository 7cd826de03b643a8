#!/usr/bin/env bash
# `hotcount status` and `hotcount dlq` against a small real pipeline:
#
#   status.sh HOTCOUNT
#
# Under tests/harness/with-servers (Kafka and Redis). Two stage-1 processes and one stage-2
# process count 20 000 events plus dead letters the test writes itself with kcat (3 not_json, 2
# empty_post_id, one of them with an ESC and a TAB in its key and a TAB in its value). Then:
#   - `status --json` exits 0 and reports both groups with their members, every raw partition
#     assigned, zero stage-1 lag, the ages of the last window and store batch, the dead letters
#     by reason;
#   - `dlq list --json` counts 3 not_json and 2 empty_post_id; `dlq show --reason empty_post_id`
#     prints both records with their source in topic.raw and the control bytes escaped; `dlq
#     show --partition P --offset O` prints the one record there;
#   - an open transaction of the test's own holding topic.partials partition 0 shows as held
#     (healthy while younger than transaction.timeout.ms); judged against a timeout of 2 s, once
#     it is older, `status` exits 1 naming transaction_lingering and the partition; aborted, it
#     holds nothing;
#   - with stage 2 stopped, `status` exits 1 naming stage2_no_members;
#   - with the store stopped too, `status --json` also names store_unreachable;
#   - a usage error exits 2.
set -euo pipefail
hc=$(realpath "${1:?usage: status.sh HOTCOUNT}")
here=$(cd "$(dirname "$0")" && pwd)
: "${HC_TEST_BROKERS:?run under tests/harness/with-servers}"
: "${HC_TEST_REDIS_CTL:?run under tests/harness/with-servers (redis)}"

# shellcheck source-path=SCRIPTDIR source=namespace.sh
. "$here/namespace.sh"
hc_scratch
hc_namespace redis "topic.counts=t$run.counts"
fail() { echo "FAIL: $*"; for f in "$work"/*.log; do echo "== $f"; tail -20 "$f"; done; exit 1; }

"$hc" init "${cfg[@]}" >/dev/null

declare -A pid_of metrics_of
start_stage() { # stage instance-id
    metrics_of[$2]=127.0.0.1:$(free_port)
    "$hc" "$1" "${cfg[@]}" -X instance.id="$2" -X metrics.listen="${metrics_of[$2]}" \
        2>>"$work/$2.log" &
    pids+=($!)
    pid_of[$2]=$!
}
start_stage stage1 s1-a
start_stage stage1 s1-b
start_stage stage2 s2-a

"$hc" produce "${cfg[@]}" --events 20000 --posts 500 --seed "$$" >"$work/produce.log"
# dead letters of known reasons: key<TAB>value lines, kcat -K sets the key
printf '%s\n' 'k1#0|not json' 'k2#0|{"post_id":' 'k3#0|[1,2' >"$work/bad.txt"
kcat -P -b "$HC_TEST_BROKERS" -t "t$run.raw" -K '|' -l "$work/bad.txt"
printf 'k\033x\t#1|{"post_id":"",\t"x":1}\n' >"$work/bad2.txt"
printf '%s\n' 'k5#1|{"post_id":""}' >>"$work/bad2.txt"
kcat -P -b "$HC_TEST_BROKERS" -t "t$run.raw" -K '|' -l "$work/bad2.txt"

"$hc" verify "${cfg[@]}" --timeout 120 >"$work/verify.log" || fail "verify"

status_json() { # extra args...; sets out and rc
    rc=0
    out=$("$hc" status "${cfg[@]}" --json --stage1 "${metrics_of[s1-a]}" "$@" 2>>"$work/status-err.log") ||
        rc=$?
}

# healthy: both groups described, no lag, dead letters counted. A stage-1 process that came
# up late may still be joining: wait (bounded) until the group is stable with both members.
for _ in $(seq 120); do
    status_json --stage2 "${metrics_of[s2-a]}"
    python3 -c 'import json,sys; s=json.loads(sys.argv[1])["stage1"]
sys.exit(not (s.get("state") == "Stable" and len(s["members"]) == 2
              and all(m["partitions"] for m in s["members"])))' "$out" && break
    sleep 0.5
done
[ "$rc" -eq 0 ] || fail "status exited $rc while healthy: $out"
python3 - "$out" "$run" <<'EOF' || fail "healthy report: $out"
import json, sys
r = json.loads(sys.argv[1]); run = sys.argv[2]
assert r["healthy"] is True and r["causes"] == [], r["causes"]
s1, s2 = r["stage1"], r["stage2"]
assert s1["group"] == f"g{run}-stage1" and s2["group"] == f"g{run}-stage2"
assert sorted(m["instance_id"] or m["client_id"] for m in s1["members"]) != []
assert len(s1["members"]) == 2 and len(s2["members"]) == 1, (s1["members"], s2["members"])
raw = {p["partition"] for p in s1["partitions"]}
owned = [p for m in s1["members"] for p in m["partitions"]]
assert sorted(owned) == sorted(raw) and s1["unassigned"] == [], (owned, raw)
assert s1["lag"] == 0 and all(p["lag"] == 0 for p in s1["partitions"]), s1["partitions"]
assert all(p["committed"] == p["end"] for p in s1["partitions"]), s1["partitions"]
# stage 2: every committed partial stored; only transaction markers lie past the stored offsets
assert s2["lag"] == 0 and all(p["lag"] == 0 for p in s2["partitions"]), s2["partitions"]
assert all(p["committed"] is not None and 0 < p["end"] - p["committed"] <= 2
           for p in s2["partitions"] if p["end"] > 0), s2["partitions"]
assert r["store"]["reachable"] and r["store"]["kind"] == "redis"
assert s1["metrics"]["reachable"] and s2["metrics"]["reachable"]
# the last committed window and store batch of this run: minutes at most (the ages are taken a
# moment apart, so they are not compared with each other)
a1, a2 = s1["last_window_age_seconds"], s2["last_batch_age_seconds"]
assert a1 is not None and a2 is not None and 0 <= a1 < 300 and 0 <= a2 < 300, (a1, a2)
assert r["dlq"]["by_reason"] == {"not_json": 3, "empty_post_id": 2}, r["dlq"]
tx = r["transactions"]
assert tx["lingering"] == 0 and "errors" not in tx and tx["timeout_ms"] > 0, tx
EOF
# the text screen says the same
"$hc" status "${cfg[@]}" >"$work/status.txt" || fail "text status exited non-zero"
grep -q '^hotcount status: healthy$' "$work/status.txt" &&
    grep -q '^  last committed window [0-9.]* s ago$' "$work/status.txt" ||
    fail "text: $(cat "$work/status.txt")"

# dlq list
out=$("$hc" dlq list "${cfg[@]}" --json) || fail "dlq list"
python3 - "$out" <<'EOF' || fail "dlq list: $out"
import json, sys
r = json.loads(sys.argv[1])
assert r["records"] == 5 and r["by_reason"] == {"not_json": 3, "empty_post_id": 2}, r
assert sum(sum(h.values()) for h in r["by_hour"].values()) == 5, r["by_hour"]
EOF
[ "$("$hc" dlq list "${cfg[@]}" --reason not_json --json | python3 -c \
    'import json,sys; print(json.load(sys.stdin)["records"])')" = 3 ] || fail "dlq list --reason"
# nothing is older than the epoch's first second, everything is older than now + 1 h
[ "$("$hc" dlq list "${cfg[@]}" --until 1000 --json | python3 -c \
    'import json,sys; print(json.load(sys.stdin)["records"])')" = 0 ] || fail "dlq list --until"
soon=$(( $(date +%s) * 1000 + 3600000 ))
[ "$("$hc" dlq list "${cfg[@]}" --since 2000-01-01T00:00Z --until "$soon" --json | python3 -c \
    'import json,sys; print(json.load(sys.stdin)["records"])')" = 5 ] || fail "dlq list --since"

# dlq show: reasons, sources, escaped bytes; then one record by partition and offset
out=$("$hc" dlq show "${cfg[@]}" --reason empty_post_id --json) || fail "dlq show"
python3 - "$out" "$run" >"$work/where.txt" <<'EOF' || fail "dlq show: $out"
import json, sys
rows = [json.loads(l) for l in sys.argv[1].splitlines()]; run = sys.argv[2]
assert len(rows) == 2 and all(r["reason"] == "empty_post_id" for r in rows), rows
assert all(r["source"].startswith(f"t{run}.raw/") for r in rows), rows
vals = sorted(r["value"] for r in rows)
assert vals == ['{"post_id":"",\\x09"x":1}', '{"post_id":""}'], vals
keys = sorted(r["key"] for r in rows)
assert keys == ["k5#1", "k\\x1bx\\x09#1"], keys
print(rows[0]["partition"], rows[0]["offset"], rows[0]["value"])
EOF
read -r part off val <"$work/where.txt"
out=$("$hc" dlq show "${cfg[@]}" --partition "$part" --offset "$off" --json) || fail "show one"
python3 - "$out" "$part" "$off" "$val" <<'EOF' || fail "dlq show --partition --offset: $out"
import json, sys
rows = [json.loads(l) for l in sys.argv[1].splitlines()]
assert len(rows) == 1 and rows[0]["partition"] == int(sys.argv[2]), rows
assert rows[0]["offset"] == int(sys.argv[3]) and rows[0]["value"] == sys.argv[4], rows
EOF
"$hc" dlq show "${cfg[@]}" -n 1 >"$work/show.txt" || fail "dlq show -n 1"
[ "$(grep -c '^  value ' "$work/show.txt")" = 1 ] || fail "show -n 1: $(cat "$work/show.txt")"
if grep -q $'\033' "$work/show.txt"; then fail "raw ESC in dlq show's text"; fi

# open and lingering transactions: a transactional producer of the test's own holds partition 0
# of topic.partials (its own transaction timeout is long, so the coordinator leaves it open)
# until its stdin closes, then aborts
mkfifo "$work/txn.in"
python3 -c '
import sys
from confluent_kafka import Producer
p = Producer({"bootstrap.servers": sys.argv[1], "transactional.id": sys.argv[3],
              "transaction.timeout.ms": 120000})
p.init_transactions(30)
p.begin_transaction()
p.produce(sys.argv[2], b"held", partition=0)
p.flush(30)
print("held", flush=True)
sys.stdin.read()
p.abort_transaction(30)
print("aborted", flush=True)
' "$HC_TEST_BROKERS" "t$run.partials" "t$run-held" <"$work/txn.in" >"$work/txn.out" 2>>"$work/txn.log" &
txn_pid=$!
pids+=("$txn_pid")
exec 7>"$work/txn.in"
for _ in $(seq 300); do grep -q '^held$' "$work/txn.out" && break; sleep 0.1; done
grep -q '^held$' "$work/txn.out" || fail "the test's transaction did not begin"
held_started=$(date +%s%N)
status_json
python3 - "$out" "$run" <<'EOF' || fail "open transaction: $out"
import json, sys
r = json.loads(sys.argv[1]); tx = r["transactions"]
held = [h for h in tx["held"] if h["topic"] == f"t{sys.argv[2]}.partials" and h["partition"] == 0]
assert len(held) == 1 and held[0]["end"] > held[0]["stable"], tx
assert not held[0]["lingering"] and "transaction_lingering" not in r["causes"], r
EOF
# against a 2 s transaction timeout the same transaction lingers once it is older than that
short=(-X kafka.producer.transaction.timeout.ms=2000)
for _ in $(seq 100); do
    [ $((($(date +%s%N) - held_started) / 1000000)) -gt 2500 ] && break
    sleep 0.1
done
status_json "${short[@]}"
[ "$rc" -eq 1 ] || fail "status exited $rc with a lingering transaction: $out"
python3 - "$out" "$run" <<'EOF' || fail "lingering transaction: $out"
import json, sys
r = json.loads(sys.argv[1]); tx = r["transactions"]
assert r["causes"] == ["transaction_lingering"], r["causes"]
held = [h for h in tx["held"] if h["lingering"]]
assert tx["timeout_ms"] == 2000 and tx["lingering"] == 1 and len(held) == 1, tx
assert held[0]["topic"] == f"t{sys.argv[2]}.partials" and held[0]["partition"] == 0, held
EOF
rc=0
"$hc" status "${cfg[@]}" "${short[@]}" >"$work/status.txt" || rc=$?
[ "$rc" -eq 1 ] && grep -q '^hotcount status: DEGRADED: transaction_lingering$' "$work/status.txt" &&
    grep -q "^  t$run.partials/0  stable [0-9]*  end [0-9]*  LINGERING\$" "$work/status.txt" ||
    fail "text status with a lingering transaction (exit $rc): $(cat "$work/status.txt")"
exec 7>&-
wait "$txn_pid" || fail "the test's transaction did not abort"
grep -q '^aborted$' "$work/txn.out" || fail "the test's transaction did not abort"
status_json "${short[@]}"
[ "$rc" -eq 0 ] || fail "status exited $rc after the abort: $out"
python3 -c 'import json,sys; t=json.loads(sys.argv[1])["transactions"]
sys.exit(not (t["open"] == 0 and t["held"] == []))' "$out" || fail "held after the abort: $out"

# degraded: stage 2 stopped (it leaves its group on SIGTERM)
kill -TERM "${pid_of[s2-a]}"
wait "${pid_of[s2-a]}" || fail "stage 2 exited $? on SIGTERM"
status_json
[ "$rc" -eq 1 ] || fail "status exited $rc with stage 2 down: $out"
python3 - "$out" <<'EOF' || fail "stage 2 down: $out"
import json, sys
r = json.loads(sys.argv[1])
assert r["healthy"] is False and r["causes"] == ["stage2_no_members"], r["causes"]
assert r["stage2"]["members"] == [] and len(r["stage1"]["members"]) == 2
EOF
rc=0
"$hc" status "${cfg[@]}" >"$work/status.txt" || rc=$?
[ "$rc" -eq 1 ] && grep -q '^hotcount status: DEGRADED: stage2_no_members$' "$work/status.txt" ||
    fail "text status with stage 2 down (exit $rc): $(cat "$work/status.txt")"

# degraded: the store down too
"$HC_TEST_REDIS_CTL" stop >/dev/null
status_json
"$HC_TEST_REDIS_CTL" start >/dev/null
[ "$rc" -eq 1 ] || fail "status exited $rc with the store down: $out"
python3 - "$out" <<'EOF' || fail "store down: $out"
import json, sys
r = json.loads(sys.argv[1])
assert "store_unreachable" in r["causes"] and "stage2_no_members" in r["causes"], r["causes"]
assert r["store"]["reachable"] is False and r["store"]["error"]
EOF

rc=0
"$hc" status "${cfg[@]}" --max-lag nope 2>/dev/null || rc=$?
[ "$rc" -eq 2 ] || fail "status with a bad option exited $rc, want 2"
rc=0
"$hc" dlq "${cfg[@]}" replay-all 2>/dev/null || rc=$?
[ "$rc" -eq 2 ] || fail "dlq with an unknown subcommand exited $rc, want 2"
# exit 1 is also a sanitizer's: the degraded runs must not hide one
if grep -q Sanitizer "$work/status-err.log"; then fail "sanitizer"; fi
echo "status: ok"
