#!/usr/bin/env bash
# Exactly-once across a broker crash: the Kafka broker is SIGKILLed mid-stream and started
# again; both stages must recover by themselves (no hotcount process restarted).
#
#   broker.sh HOTCOUNT STORE
#
# STORE sqlite, redis or postgresql; the broker is with-servers' ($HC_TEST_KAFKA_CTL kill, then
# start: same port, same data). Two stage-1 and two stage-2 processes; `hotcount produce` sends
# HC_FAULT_EVENTS (1 000 000) Zipfian events over HC_FAULT_SECONDS (40: the broker takes 10-15 s to start again). Once every process has
# finished a window and the stream flows, the broker is killed (transactions, fetches and store
# batches in flight), kept down for HC_FAULT_DOWN_MS (3000) and started again (its start waits
# until it answers). Then each of the four processes, with the pid it had before the crash,
# must finish a window again within 120 s, and the end-of-run checks (tests/faults/lib.sh) must
# find 0 lost and 0 duplicated likes.
# Last line: broker STORE: N events, 1 broker crash, L lost, D duplicated
#
# Environment: HC_FAULT_EVENTS, HC_FAULT_SECONDS, HC_FAULT_DOWN_MS, HC_FAULT_SEED,
# HC_FAULT_TIMEOUT (stream + 180 s), HC_FAULT_KEEP=1.
set -Eeuo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$here/lib.sh"
[ $# -eq 2 ] || usage
store_kind=$2
: "${HC_TEST_KAFKA_CTL:?run under tests/harness/with-servers --kafka}"

hcf_stream 1000000 40
down_ms=${HC_FAULT_DOWN_MS:-3000}

HCF_TILING=1
hcf_init broker "$1" "$store_kind"
hcf_deadline "${HC_FAULT_TIMEOUT:-$((seconds + 180))}"
# a broker left down by a failed run would fail every later test of the same harness
broker_up() { "$HC_TEST_KAFKA_CTL" status >/dev/null 2>&1 || "$HC_TEST_KAFKA_CTL" start >/dev/null 2>&1; }
hcf_on_exit=broker_up

declare -A mark=()
each_windowed() {
    local id
    for id in s1-a s1-b s2-a s2-b; do
        ours "${pid_of[$id]}" || fail "$id (pid ${pid_of[$id]}) exited: it did not ride out the broker crash"
        windowed_since "$id" "${mark[$id]}" || return 1
    done
}

ids=(s1-a s1-b s2-a s2-b)
start_stage stage1 s1-a
start_stage stage1 s1-b
start_stage stage2 s2-a
start_stage stage2 s2-b
for id in "${ids[@]}"; do
    wait_assigned "$id" 60 || fail "$id holds no partitions 60 s after its start"
    mark[$id]=0
done
say "broker $store_kind: $events events at $rate/s (~$seconds s), broker down ${down_ms} ms, seed $seed, run $run"
start_producer "$events" "$rate" "$seed"
wait_for 60 0.1 each_windowed || fail "not every process finished a window within 60 s"
before=$(for id in "${ids[@]}"; do printf '%s=%s ' "$id" "${pid_of[$id]}"; done)
ours "$producer" || fail "the stream ended before the crash (raise HC_FAULT_SECONDS)"

"$HC_TEST_KAFKA_CTL" kill >/dev/null
t_kill=$(date +%s%3N)
say "broker SIGKILLed at +$(elapsed) s"
sleep "$((down_ms / 1000)).$(printf '%03d' $((down_ms % 1000)))" # the outage itself is timed
run_waiting "$HC_TEST_KAFKA_CTL" start >/dev/null || fail "the broker did not come back"
say "broker answers again at +$(elapsed) s ($(($(date +%s%3N) - t_kill)) ms after the kill)"
for id in "${ids[@]}"; do
    mark[$id]=$(windows "$id") || fail "$id does not answer on its metrics port"
done
wait_for 120 0.2 each_windowed || fail "not every process finished a window within 120 s of the restart"
after=$(for id in "${ids[@]}"; do printf '%s=%s ' "$id" "${pid_of[$id]}"; done)
[ "$before" = "$after" ] || fail "processes changed: $before -> $after"
say "every process (${after% }) finished a window again at +$(elapsed) s"
for id in "${ids[@]}"; do # a report, from the metrics and the log's area field
    say "  $id: $(sample_of "$id" hotcount_transactions_total '{outcome="abort"}') aborted windows, $(sample_of "$id" hotcount_store_batches_total '{outcome="error"}') failed store batches, $(log_lines_of_area "$id" rdkafka) client log lines"
done

producer_done
hcf_finish "$events"
say "broker $store_kind: $events events, 1 broker crash, $lost lost, $duplicated duplicated"
say "wall time $(elapsed) s"
hcf_pass
