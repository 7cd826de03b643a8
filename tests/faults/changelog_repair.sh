#!/usr/bin/env bash
# The changelog's repair, made certain to run: stage 2 counts the whole stream with topic.counts
# off (nothing reaches the changelog, no mark is committed), then starts again with it on. On
# taking its partitions over it must find the changelog behind the store and republish every
# post's total; the oracle then requires topic.counts to equal the store, post for post. This is
# also the upgrade path of a group that ran without a changelog.
#
#   changelog_repair.sh HOTCOUNT STORE
#
# STORE sqlite, redis or postgresql. One stage-1 and one stage-2 process; `hotcount produce`
# sends HC_FAULT_EVENTS (200 000) Zipfian events over HC_FAULT_SECONDS (5). Then the end-of-run
# checks of tests/faults/lib.sh with the changelog checked strictly.
# Last line: changelog_repair STORE: N events, P posts republished, L lost, D duplicated
#
# Environment: HC_FAULT_EVENTS, HC_FAULT_SECONDS, HC_FAULT_SEED, HC_FAULT_TIMEOUT
# (stream + 120 s), HC_FAULT_KEEP=1.
set -Eeuo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$here/lib.sh"
[ $# -eq 2 ] || usage
store_kind=$2

hcf_stream 200000 5

HCF_CHANGELOG=strict
hcf_init changelog_repair "$1" "$store_kind"
hcf_deadline "${HC_FAULT_TIMEOUT:-$((seconds + 120))}"

repaired() { [ -n "$(events s2-a changelog_repaired)" ]; }

start_stage stage1 s1-a
start_stage stage2 s2-a -X topic.counts=
wait_all_assigned s1-a s2-a
say "changelog_repair $store_kind: $events events at $rate/s (~$seconds s), seed $seed, run $run"
start_producer "$events" "$rate" "$seed"
producer_done
run_waiting "$hc" verify "${cfg[@]}" --timeout 120 >"$work/verify-before.log" ||
    { cat "$work/verify-before.log"; fail "stage 2 did not catch up without the changelog"; }
say "stored without a changelog at +$(elapsed) s; restarting stage 2 with topic.counts on"
stop_stage s2-a
start_stage stage2 s2-a
wait_for 60 0.2 repaired || fail "s2-a logged no changelog repair within 60 s"
republished=$(event_field s2-a changelog_repaired posts | awk '{ n += $1 } END { print n + 0 }')
say "changelog repaired at +$(elapsed) s: $republished posts republished"
hcf_finish "$events"
posts=$(wc -l <"$work/store.tsv")
say "changelog_repair $store_kind: $events events, $republished posts republished ($posts stored), $lost lost, $duplicated duplicated"
say "wall time $(elapsed) s"
[ "$republished" -ge "$posts" ] || fail "republished $republished posts, want every one of the $posts stored"
hcf_pass
