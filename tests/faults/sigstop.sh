#!/usr/bin/env bash
# Exactly-once against a zombie: a stage process is SIGSTOPped with a window open, its session
# expires (6 s), its partitions move to the other process, and after SIGCONT its late work must
# be refused and change nothing.
#
#   sigstop.sh HOTCOUNT STAGE STORE
#
# STAGE stage1, stage2 or both (stage 2's zombie, then stage 1's, in one stream), STORE sqlite,
# redis, postgresql or cassandra. Two processes of each stage run (session.timeout.ms=6000); the victim
# (s1-a / s2-a) runs with a long flush.ms (3000 / 20000) so that its window is open for a second
# or more when it is stopped: once it has finished a window, it is stopped when the next one has
# been open for 0.8-2.5 s / 0.2-1.0 s (hotcount_unflushed_input_seconds), while events flow.
# Then the other process must hold every partition and finish a window of its own (so the
# stored offsets / committed offsets moved past the zombie's window) before SIGCONT.
#   stage 2: the zombie's batch carries the offsets its window started from; the store's
#     compare-and-set refuses it: its hotcount_store_batches_total{outcome="conflict"} must
#     grow past its value before the SIGSTOP.
#   stage 1: the zombie's transaction holds an old consumer-group generation; the broker
#     refuses its offsets (or librdkafka reports the assignment lost first) and the stage aborts
#     the transaction: its hotcount_transactions_total{outcome="abort"} must grow past its
#     value before the SIGSTOP.
# Either way the zombie must keep running and get partitions back (it rejoins the group), and
# the end-of-run checks (tests/faults/lib.sh) must find 0 lost and 0 duplicated likes.
# Last line: sigstop STAGE STORE: N events, Z zombies refused, L lost, D duplicated
#
# Environment: HC_FAULT_EVENTS (1 000 000), HC_FAULT_SECONDS (14 s per stage + 6 s),
# HC_FAULT_SEED, HC_FAULT_TIMEOUT (stream + 120 s), HC_FAULT_KEEP=1.
set -Eeuo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$here/lib.sh"
[ $# -eq 3 ] || usage
which=$2
store_kind=$3
case "$which" in stage1) stages=(stage1) ;; stage2) stages=(stage2) ;; both) stages=(stage2 stage1) ;; *) usage ;; esac

hcf_stream 1000000 $((14 * ${#stages[@]} + 6))
RANDOM=$seed

HCF_TILING=1
hcf_init sigstop "$1" "$store_kind"
hcf_deadline "${HC_FAULT_TIMEOUT:-$((seconds + 120))}"
victim_flush_ms=3000   # stage 1's victim
victim2_flush_ms=20000 # stage 2's (below)

holds_all() { [ "$(assigned "$1")" -eq "$2" ]; }
open_past() { # id ms: its open window has waited at least ms for its flush
    local t
    t=$(unflushed_ms "$1") && [ "$t" -ge "$2" ]
}
refusals() { # id: its refused stage-2 batches or aborted stage-1 transactions (metrics)
    if [ "${kind_of[$1]}" = stage2 ]; then
        sample_of "$1" hotcount_store_batches_total '{outcome="conflict"}'
    else
        sample_of "$1" hotcount_transactions_total '{outcome="abort"}'
    fi
}
refused_since() { # id count
    local n
    n=$(refusals "$1") && [ "$n" -gt "$2" ]
}

start_stage stage1 s1-a -X flush.ms=$victim_flush_ms
start_stage stage1 s1-b
# stage 2's victim: its window closes flush.ms/10 after its first partial (src/core/window.c),
# so flush.ms=20000 keeps one open for 2 s, a margin of a second or more past the aim below
# for the metrics read and the SIGSTOP on a loaded machine
start_stage stage2 s2-a -X flush.ms=$victim2_flush_ms
start_stage stage2 s2-b
wait_all_assigned s1-a s1-b s2-a s2-b
say "sigstop $which $store_kind: $events events at $rate/s (~$seconds s), seed $seed, run $run"
start_producer "$events" "$rate" "$seed"

refused=0
for st in "${stages[@]}"; do
    p=${st#stage}
    v=s$p-a peer=s$p-b total=$raw_partitions # partition counts from the broker (lib.sh)
    [ "$st" = stage2 ] && total=$partials_partitions
    wait_assigned "$v" 60 || fail "$v holds no partitions"
    # a window open for a while: after a flush, the next window (the stream flows into it) open
    # for 0.8-2.5 s of stage 1's flush.ms=3000, or 0.2-1.0 s of the 2 s stage 2's victim holds
    # one (above). Nothing but the open_past read stands between the aim and the SIGSTOP: the
    # window must still be open when the signal lands, or the zombie's batch reaches the store
    # before its takeover and nothing is left to refuse.
    if [ "$st" = stage2 ]; then
        aim=$((200 + RANDOM % 801))
    else
        aim=$((800 + RANDOM % 1701))
    fi
    n0=$(windows "$v") || fail "$v does not answer on its metrics port"
    r0=$(refusals "$v") || fail "$v does not answer on its metrics port"
    wait_for 30 0.1 windowed_since "$v" "$n0" || fail "$v finished no window within 30 s"
    wait_for 30 0.05 open_past "$v" "$aim" || fail "$v had no window open for $aim ms within 30 s"
    kill -STOP "${pid_of[$v]}"
    ours "$producer" || fail "the stream ended before $v was stopped (raise HC_FAULT_SECONDS)"
    say "SIGSTOP $st $v pid ${pid_of[$v]} at +$(elapsed) s, its window open for >= $aim ms ($(assigned "$peer") partitions on $peer)"
    wait_for 60 0.2 holds_all "$peer" "$total" ||
        fail "$peer does not hold all $total partitions within 60 s of the SIGSTOP"
    n0=$(windows "$peer") || fail "$peer does not answer on its metrics port"
    wait_for 30 0.1 windowed_since "$peer" "$n0" ||
        fail "$peer finished no window after taking $v's partitions"
    say "$peer holds all $total partitions and finished a window at +$(elapsed) s"
    kill -CONT "${pid_of[$v]}"
    say "SIGCONT $v at +$(elapsed) s"
    if [ "$st" = stage2 ]; then
        wait_for 60 0.2 refused_since "$v" "$r0" ||
            fail "$v: no refused store batch (conflict) within 60 s of SIGCONT"
        say "$v refused: store batches with outcome conflict $r0 -> $(refusals "$v")"
    else
        wait_for 60 0.2 refused_since "$v" "$r0" ||
            fail "$v: its zombie transaction was not aborted within 60 s of SIGCONT"
        say "$v fenced: transactions with outcome abort $r0 -> $(refusals "$v")"
    fi
    refused=$((refused + 1))
    wait_assigned "$v" 60 || fail "$v did not rejoin (no partitions 60 s after SIGCONT)"
    say "$v (same pid ${pid_of[$v]}) holds $(assigned "$v") partitions again at +$(elapsed) s"
done

producer_done
hcf_finish "$events"
say "sigstop $which $store_kind: $events events, $refused zombies refused, $lost lost, $duplicated duplicated"
say "wall time $(elapsed) s"
hcf_pass
