#!/usr/bin/env bash
# Adaptive salting keeps every count exact while the hot set changes mid-stream (issue 18,
# docs/FORMATS.md "Adaptive salting"). Two stage-1 and one stage-2 process; `hotcount produce
# --adaptive` sends HC_FAULT_EVENTS (40 000) Zipfian events over HC_FAULT_SECONDS (20) while
# following topic.hotkeys; half-way `hotcount hotkeys declare 1 --salts 32` makes post 1 hot, so
# the producer switches it from key "1#0" to "1#<salt of 32>". Stage 2's own detection is kept
# out of the way (hotkeys.enter.rate far above the stream). Then the end-of-run checks of
# tests/faults/lib.sh (verify, the oracle, tally.py, tiling): every count exact. On top, the raw
# topic must show the switch: post 1's keys both "1#0" (before) and salted (after), each 15-85 %.
# Last line: adaptive STORE: N events, post 1 keys: C at #0, S salted, L lost, D duplicated
#
#   adaptive.sh HOTCOUNT STORE
#
# Environment: HC_FAULT_EVENTS, HC_FAULT_SECONDS, HC_FAULT_SEED, HC_FAULT_TIMEOUT (stream +
# 120 s), HC_FAULT_KEEP=1.
set -Eeuo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$here/lib.sh"
[ $# -eq 2 ] || usage
store_kind=$2

hcf_stream 40000 20
HCF_TILING=1
hcf_init adaptive "$1" "$store_kind"
hcf_deadline "${HC_FAULT_TIMEOUT:-$((seconds + 120))}"
# detection out of the way (lib.sh gives the run its own topic.hotkeys): only the declaration acts
printf 'hotkeys.enter.rate=1000000000\nhotkeys.leave.rate=999999999\n' >>"$work/hotcount.properties"
run_waiting "$hc" init "${cfg[@]}" >/dev/null || fail "hotcount init (topic.hotkeys)"

start_stage stage1 s1-a
start_stage stage1 s1-b
start_stage stage2 s2-a
wait_all_assigned s1-a s1-b s2-a
say "adaptive $store_kind: $events events at $rate/s (~$seconds s), seed $seed, run $run"
start_producer "$events" "$rate" "$seed" --adaptive
wait_for 60 0.1 windowed_since s2-a 0 || fail "s2-a stored no batch within 60 s"
# half-way through the stream (the producer paces itself at $rate/s)
while [ $(($(date +%s%3N) - t0)) -lt $((seconds * 1000 / 2)) ]; do sleep 0.2; done
ours "$producer" || fail "the stream ended before the declaration (raise HC_FAULT_SECONDS)"
until_ms=$(($(date +%s%3N) + 3600000))
run_waiting "$hc" hotkeys declare 1 --until "$until_ms" --salts 32 "${cfg[@]}" \
    >"$work/declare.log" 2>&1 || { cat "$work/declare.log"; fail "hotkeys declare"; }
say "post 1 declared hot (32 salts) at +$(elapsed) s"

producer_done
grep -q '^adaptive: [1-9][0-9]* valid events salted' "$work/produce.log" ||
    fail "the producer salted nothing after the declaration: $(tail -n 1 "$work/produce.log")"
hcf_finish "$events"

# the switch, as the raw log holds it: post 1's keys before (1#0) and after (1#1..1#31)
kcat -b "$HC_TEST_BROKERS" -C -t "f$run.raw" -e -q -f '%k\n' >"$work/keys.txt" 2>/dev/null ||
    fail "kcat could not read f$run.raw"
at0=$(grep -c '^1#0$' "$work/keys.txt" || true)
salted=$(grep -c '^1#[1-9][0-9]*$' "$work/keys.txt" || true)
total=$((at0 + salted))
say "adaptive $store_kind: $events events, post 1 keys: $at0 at #0, $salted salted, $lost lost, $duplicated duplicated"
say "wall time $(elapsed) s"
[ "$total" -gt 0 ] || fail "no event of post 1 in the raw topic"
if [ $((at0 * 100)) -lt $((total * 15)) ] || [ $((salted * 100)) -lt $((total * 15)) ]; then
    fail "want post 1 keyed 1#0 before and salted after the declaration (15-85 % each)"
fi
hcf_pass
