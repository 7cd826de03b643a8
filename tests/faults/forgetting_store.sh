#!/usr/bin/env bash
# A store that forgets, on the real broker (issue 16, item 5): a Redis without persistence is
# SIGKILLed and restarted while the pipeline is idle and exact; it comes back empty with a new
# run_id. With no new event, stage 2's store check (store.check.ms) must notice and rebuild
# every count from the partials still in Kafka within HC_FAULT_REPAIR_S (20) seconds; then
# the end-of-run checks (verify, oracle, tally: 0 lost, 0 duplicated). Then the retention gap:
# the partials of one partition are deleted (DeleteRecords, as retention would), the
# store forgets again, and a new stage 2 must hold that partition back with a retention_gap
# event naming it, hotcount_retention_gap_partitions 1 and /readyz 503, `hotcount verify`
# failing, and the stage still running (it exits 0 on SIGTERM).
#
#   forgetting_store.sh HOTCOUNT
#
# The Redis is a private server of this run (tests/harness/redis-ctl, --appendonly no), so
# killing it disturbs no other test. One stage-1 and one stage-2 process; `hotcount produce`
# sends HC_FAULT_EVENTS (20 000) events over HC_FAULT_SECONDS (4) before the store is killed.
# Last line: forgetting_store: N events, repaired in R ms, gap on partition P
#
# Environment: HC_FAULT_EVENTS, HC_FAULT_SECONDS, HC_FAULT_REPAIR_S, HC_FAULT_SEED,
# HC_FAULT_TIMEOUT (stream + 150 s), HC_FAULT_KEEP=1.
set -Eeuo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$here/lib.sh"
[ $# -eq 1 ] || usage
harness=$(cd "$here/../harness" && pwd)

hcf_stream 20000 4
repair_s=${HC_FAULT_REPAIR_S:-20}

ctl=()
private_store() { # a Redis of our own in $work/server, without persistence
    ctl=("$harness/redis-ctl" --dir "$work/server" --appendonly no)
    "${ctl[@]}" start >/dev/null || fail "private redis-server did not start"
    HC_TEST_REDIS_URI=$("${ctl[@]}" uri)
    export HC_TEST_REDIS_URI
}
private_store_stop() { [ ${#ctl[@]} -eq 0 ] || "${ctl[@]}" stop >/dev/null 2>&1 || true; }
hcf_pre_store=private_store
hcf_on_exit=private_store_stop
hcf_private_store=1
HCF_PARTIALS_PARTITIONS=${HCF_PARTIALS_PARTITIONS:-4}
HCF_CHANGELOG=off # the changelog is not what this run is about; its repair has its own script

hcf_init forgetting_store "$1" redis
hcf_deadline "${HC_FAULT_TIMEOUT:-$((seconds + 150))}"

forgot() { sample_of s2-a hotcount_store_forgot_total; }
forgot_past() { local n; n=$(forgot) && [ "$n" -gt "$1" ]; }
run_id() { "${ctl[@]}" cli INFO server | sed -n 's/^run_id:\([0-9a-f]*\).*/\1/p'; }
store_keys() { "${ctl[@]}" cli DBSIZE | tr -d '\r'; }
verify_exact() { # timeout-s: verify waits that long for stage 2 to store every partial
    run_waiting "$hc" verify "${cfg[@]}" --timeout "$1" >"$work/verify.log" 2>&1
}
idle() { [ "$(unflushed_ms s1-a)" -eq 0 ] && [ "$(unflushed_ms s2-a)" -eq 0 ]; }

start_stage stage1 s1-a
start_stage stage2 s2-a
wait_all_assigned s1-a s2-a
pid2=${pid_of[s2-a]}
say "forgetting_store: $events events at $rate/s (~$seconds s), seed $seed, run $run"
start_producer "$events" "$rate" "$seed"
producer_done
verify_exact 60 || { cat "$work/verify.log"; fail "not exact 60 s after the stream"; }
wait_for 10 0.1 idle || fail "the stages did not go idle"
say "exact and idle at +$(elapsed) s: $(store_keys) keys in the store"

# --- the store forgets: killed and restarted empty, no new event ----------------------------
forgot0=$(forgot) || fail "s2-a does not answer on its metrics port"
id0=$(run_id)
batches0=$(windows s1-a) || fail "s1-a does not answer on its metrics port"
"${ctl[@]}" kill >/dev/null
"${ctl[@]}" start >/dev/null || fail "the store did not come back"
t_back=$(date +%s%3N)
keys=$(store_keys)
id1=$(run_id)
say "store SIGKILLed and restarted at +$(elapsed) s: $keys keys, run_id ${id0:0:8}… -> ${id1:0:8}…"
# the premise: it really forgot, and is another incarnation
[ "$keys" -eq 0 ] || fail "the restarted store kept $keys keys (persistence on?)"
[ -n "$id1" ] && [ "$id1" != "$id0" ] || fail "the restarted store kept its run_id"
wait_for "$repair_s" 0.2 forgot_past "$forgot0" ||
    fail "s2-a did not notice within $repair_s s that the store forgot"
say "stage 2 noticed at +$(elapsed) s: $(events s2-a store_forgot | tail -n 1)"
verify_exact "$repair_s" || {
    cat "$work/verify.log"
    fail "not exact again within $repair_s s of the store's return"
}
repaired_ms=$(($(date +%s%3N) - t_back))
# verify's wait for stage 2 is bounded by repair_s; its recount of likes.raw comes on top
[ "$repaired_ms" -le $(((repair_s + 30) * 1000)) ] || fail "repaired only after $repaired_ms ms"
say "exact again at +$(elapsed) s, $repaired_ms ms after the store came back: $(store_keys) keys"
# no traffic did it: stage 1 committed no window meanwhile, stage 2 is the same process
batches1=$(windows s1-a) || fail "s1-a does not answer on its metrics port"
[ "$batches1" -eq "$batches0" ] || fail "stage 1 committed $((batches1 - batches0)) windows meanwhile"
[ "${pid_of[s2-a]}" = "$pid2" ] && ours "$pid2" || fail "stage 2 was restarted or exited"

hcf_finish "$events"

# --- the retention gap: partition 0's partials deleted, the store forgets again --------------
topic=f$run.partials
end0=$(kcat -Q -b "$HC_TEST_BROKERS" -t "$topic:0:-1" 2>/dev/null | awk '{ print $NF }')
[ "${end0:-0}" -gt 0 ] || fail "partition 0 of $topic holds no partials (end offset '${end0:-}')"
# what kafka-delete-records does (DeleteRecords), without a JVM start: the oracle's client
delete_records() { # topic partition before
    python3 - "$@" <<'PY'
import os, sys
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient
topic, part, before = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
admin = AdminClient({"bootstrap.servers": os.environ["HC_TEST_BROKERS"]})
for tp, fut in admin.delete_records([TopicPartition(topic, part, before)]).items():
    res = fut.result(timeout=30)
    if res.low_watermark != before:
        sys.exit(f"{tp}: low watermark {res.low_watermark}, want {before}")
PY
}
run_waiting delete_records "$topic" 0 "$end0" >"$work/delete.log" 2>&1 ||
    { cat "$work/delete.log"; fail "DeleteRecords on $topic/0"; }
"${ctl[@]}" kill >/dev/null
"${ctl[@]}" start >/dev/null || fail "the store did not come back"
say "partials of $topic/0 deleted below $end0, the store forgot again at +$(elapsed) s"
start_stage stage2 s2-b
pid2=${pid_of[s2-b]}
gap() { [ "$(sample_of s2-b hotcount_retention_gap_partitions)" -ge 1 ]; }
wait_for 60 0.2 gap || fail "s2-b did not report the retention gap within 60 s"
line=$(events s2-b retention_gap | head -n 1)
say "stage 2 held partition 0 back at +$(elapsed) s: $line"
gap_part=$(event_field s2-b retention_gap partition | head -n 1)
gap_start=$(event_field s2-b retention_gap log_start | head -n 1)
gap_topic=$(event_field s2-b retention_gap topic | head -n 1)
gap_stored=$(event_field s2-b retention_gap store_offset | head -n 1)
[ "$gap_part" = 0 ] && [ "$gap_start" = "$end0" ] && [ "$gap_topic" = "$topic" ] &&
    [ "$gap_stored" = -1 ] ||
    fail "retention_gap names $gap_topic/$gap_part store offset $gap_stored log start $gap_start, want $topic/0 -1 $end0"
[ "$(sample_of s2-b hotcount_retention_gap_partitions)" -eq 1 ] || fail "more than one gap"
ready=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "${url_of[s2-b]%/metrics}/readyz")
[ "$ready" = 503 ] || fail "/readyz answered $ready over a retention gap, want 503"
body=$(curl -s --max-time 2 "${url_of[s2-b]%/metrics}/readyz" || true)
[[ "$body" == "not ready: stage2 holds back 1 partitions: their partials are past retention"* ]] ||
    fail "/readyz does not say why: $body"
verify_status=0
# --no-wait: partition 0 never catches up, which is the point
run_waiting "$hc" verify "${cfg[@]}" --no-wait >"$work/verify-gap.log" 2>&1 || verify_status=$?
[ "$verify_status" -ne 0 ] || fail "hotcount verify passed over a retention gap"
say "verify exits $verify_status over the gap: $(tail -n 1 "$work/verify-gap.log")"
ours "$pid2" || fail "s2-b exited over the retention gap"
stop_stage s2-b
say "forgetting_store: $events events, repaired in $repaired_ms ms, gap on partition $gap_part"
hcf_pass
