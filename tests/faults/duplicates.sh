#!/usr/bin/env bash
# A producer that retries without idempotence writes the same event twice; hotcount counts the
# log as it is: both copies. Application-level dedup (by event_id) is out of scope
# (docs/RELIABILITY.md): the log is the truth, and an idempotent producer keeps retries out of it.
#
#   duplicates.sh HOTCOUNT STORE
#
# STORE sqlite, redis or postgresql. Two stage-1 and one stage-2 process; `hotcount produce`
# sends HC_FAULT_EVENTS (1 000 000) Zipfian events over HC_FAULT_SECONDS (30) while
# tests/faults/dup_produce.py (enable.idempotence=false) writes HC_FAULT_DUP_POSTS (20 000) likes
# of posts dup-1..dup-N, each message twice, byte for byte (half of them back to back, half as
# a whole batch sent again). Then the end-of-run checks of tests/faults/lib.sh (the oracle's
# recount of the log, which holds both copies, must equal the store: 0 lost, 0 duplicated in
# tally.py's sense) and, on top, every dup-* post must be stored with exactly 2 likes.
# Last line: duplicates STORE: N events + M events sent twice, each counted twice, L lost,
# D duplicated
#
# Environment: HC_FAULT_EVENTS, HC_FAULT_SECONDS, HC_FAULT_DUP_POSTS, HC_FAULT_SEED,
# HC_FAULT_TIMEOUT (stream + 120 s), HC_FAULT_KEEP=1.
set -Eeuo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$here/lib.sh"
[ $# -eq 2 ] || usage
store_kind=$2

hcf_stream 1000000 30
dups=${HC_FAULT_DUP_POSTS:-20000}

HCF_TILING=1
hcf_init duplicates "$1" "$store_kind"
hcf_deadline "${HC_FAULT_TIMEOUT:-$((seconds + 120))}"

start_stage stage1 s1-a
start_stage stage1 s1-b
start_stage stage2 s2-a
wait_all_assigned s1-a s1-b s2-a
say "duplicates $store_kind: $events events at $rate/s (~$seconds s) + $dups events sent twice, seed $seed, run $run"
start_producer "$events" "$rate" "$seed"
wait_for 60 0.1 windowed_since s2-a 0 || fail "s2-a stored no batch within 60 s"
ours "$producer" || fail "the stream ended before the duplicates (raise HC_FAULT_SECONDS)"
run_waiting python3 "$here/dup_produce.py" --brokers "$HC_TEST_BROKERS" --topic "f$run.raw" \
    --posts "$dups" >"$work/dup_produce.log" 2>&1 || { cat "$work/dup_produce.log"; fail "dup_produce.py"; }
say "$(cat "$work/dup_produce.log") at +$(elapsed) s, while the stream flowed: $(ours "$producer" && echo yes || echo no)"

producer_done
hcf_finish $((events + 2 * dups))
twice=$(awk -F '\t' '$1 ~ /^dup-[0-9]+$/ && $2 == 2 { n++ } END { print n + 0 }' "$work/store.tsv")
other=$(awk -F '\t' '$1 ~ /^dup-[0-9]+$/ && $2 != 2 { n++ } END { print n + 0 }' "$work/store.tsv")
say "duplicates $store_kind: $events events + $dups events sent twice, $twice counted twice ($other otherwise), $lost lost, $duplicated duplicated"
say "wall time $(elapsed) s"
if [ "$twice" -ne "$dups" ] || [ "$other" -ne 0 ]; then
    fail "want all $dups dup-* posts at 2 likes: $twice are, $other are not"
fi
hcf_pass
