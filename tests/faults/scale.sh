#!/usr/bin/env bash
# Exactly-once while a stage scales 1 -> 3 -> 1 processes under a flowing stream.
#
#   scale.sh HOTCOUNT STAGE STORE [CYCLES]
#
# STAGE stage1, stage2 or both (stage 1's cycles, then stage 2's), STORE sqlite, redis or
# postgresql, CYCLES 2 by default. One process of each stage runs; `hotcount produce` sends
# HC_FAULT_EVENTS (1 000 000) Zipfian events with 5 % unlikes and 0.2 % malformed ones over
# HC_FAULT_SECONDS (6 s per cycle + 6 s). Each cycle, for the scaled stage: two more processes
# join (the group rebalances: the first process gives partitions up), all three must hold
# partitions and each must finish a window of its own (a committed transaction or a stored
# batch); then the two leave on SIGTERM (exit 0; their revoke commits or stores their open
# window) and the first must hold every partition again and finish a window. Every rebalance
# must begin while the producer still runs, or the run fails (it would not prove anything).
# Then the end-of-run checks of tests/faults/lib.sh: verify, oracle, tally.py 0 lost and 0
# duplicated. Last line: scale STAGE STORE: N events, C cycles (R rebalances), L lost, D duplicated
#
# HC_SCALE_RESTART=1 adds a rolling restart to each cycle: with three processes up, the second
# one stops (SIGTERM) and starts again with the same instance.id, and all three must hold
# partitions and finish a window again. HC_SCALE_PAUSES=1 prints stage 1's processing pause per
# step (scale-up, scale-down, restart) from its committed manifests (tests/faults/pauses.py),
# one "pause LABEL MS PARTITION" line each; a pause is measured, not asserted.
#
# Environment: HC_FAULT_EVENTS, HC_FAULT_SECONDS, HC_FAULT_SEED, HC_FAULT_TIMEOUT (default stream
# + 120 s), HC_FAULT_KEEP=1, HC_SCALE_RESTART, HC_SCALE_PAUSES, and the group knobs of lib.sh
# (HC_GROUP_PROTOCOL=classic|consumer, HC_GROUP_STATIC=1).
set -Eeuo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$here/lib.sh"
if [ $# -lt 3 ] || [ $# -gt 4 ]; then usage; fi
which=$2
store_kind=$3
cycles=${4:-2}
case "$which" in stage1) stages=(stage1) ;; stage2) stages=(stage2) ;; both) stages=(stage1 stage2) ;; *) usage ;; esac
[[ "$cycles" =~ ^[1-9][0-9]*$ ]] || usage

per_cycle=6
[ -z "${HC_SCALE_RESTART:-}" ] || per_cycle=10
hcf_stream 1000000 $((per_cycle * cycles * ${#stages[@]} + 6))

HCF_TILING=1
hcf_init scale "$1" "$store_kind"
extra=0
[ -z "${HC_SCALE_PAUSES:-}" ] || extra=60 # reading the manifests for the pauses, and settling
hcf_deadline "${HC_FAULT_TIMEOUT:-$((seconds + 120 + extra))}"

holds_all() { # id partitions: it alone holds every partition
    [ "$(assigned "$1")" -eq "$2" ]
}
all_hold() { # ids...: each holds partitions
    local id
    for id in "$@"; do [ "$(assigned "$id")" -gt 0 ] || return 1; done
}
each_windowed() { # ids...: each finished a window since the mark
    local id
    for id in "$@"; do windowed_since "$id" "${mark[$id]:-0}" || return 1; done
}
set_mark() { # id: its windows so far
    mark[$1]=$(windows "$1") || fail "$1 does not answer on its metrics port"
}
flowing() { # what: the producer must still run
    ours "$producer" || fail "the stream ended before $1 (raise HC_FAULT_SECONDS or lower HC_FAULT_EVENTS)"
}
declare -A mark=()
step() { # label: a step of stage 1 begins now (for pauses.py)
    [ "$st" = stage1 ] || return 0
    printf '%s %s\n' "$1" "$(date +%s%3N)" >>"$work/steps"
}
settle() { # ids...: with HC_SCALE_PAUSES, until each finished 10 more windows (about 3 s), so
    # that one step's stall has ended before the next step begins and is measured alone
    [ -n "${HC_SCALE_PAUSES:-}" ] || return 0
    local id
    for id in "$@"; do set_mark "$id"; mark[$id]=$((mark[$id] + 9)); done
    wait_for 60 0.1 each_windowed "$@" || fail "$st: no steady windows after a step"
}

start_stage stage1 s1-a
start_stage stage2 s2-a
wait_assigned s1-a 60 || fail "s1-a holds no partitions 60 s after its start"
wait_assigned s2-a 60 || fail "s2-a holds no partitions 60 s after its start"
say "scale $which $store_kind: $events events at $rate/s (~$seconds s), $cycles cycles, seed $seed, run $run"
start_producer "$events" "$rate" "$seed"

rebalances=0
for st in "${stages[@]}"; do
    p=${st#stage}
    total=$raw_partitions # from the broker (lib.sh)
    [ "$st" = stage2 ] && total=$partials_partitions
    for ((c = 1; c <= cycles; c++)); do
        # up: 1 -> 3
        set_mark "s$p-a"
        wait_for 30 0.1 each_windowed "s$p-a" || fail "s$p-a finished no window (stream stalled?)"
        flowing "scale-up $c of $st"
        step "up-$c"
        start_stage "$st" "s$p-b"
        start_stage "$st" "s$p-c"
        wait_for 60 0.2 all_hold "s$p-a" "s$p-b" "s$p-c" || fail "$st: not all three hold partitions within 60 s"
        for id in "s$p-a" "s$p-b" "s$p-c"; do set_mark "$id"; done
        wait_for 30 0.1 each_windowed "s$p-a" "s$p-b" "s$p-c" ||
            fail "$st: not each of three processes finished a window within 30 s"
        rebalances=$((rebalances + 1))
        settle "s$p-a" "s$p-b" "s$p-c"
        say "cycle $c of $st at +$(elapsed) s: 3 processes hold $(assigned "s$p-a")+$(assigned "s$p-b")+$(assigned "s$p-c") partitions, each finished a window"
        if [ -n "${HC_SCALE_RESTART:-}" ]; then
            flowing "restart $c of $st"
            step "restart-$c"
            stop_stage "s$p-b"
            start_stage "$st" "s$p-b"
            wait_for 60 0.2 all_hold "s$p-a" "s$p-b" "s$p-c" || fail "$st: not all three hold partitions within 60 s of the restart"
            for id in "s$p-a" "s$p-b" "s$p-c"; do set_mark "$id"; done
            wait_for 30 0.1 each_windowed "s$p-a" "s$p-b" "s$p-c" ||
                fail "$st: not each of three processes finished a window within 30 s of the restart"
            settle "s$p-a" "s$p-b" "s$p-c"
            say "cycle $c of $st at +$(elapsed) s: s$p-b restarted, 3 processes hold partitions again"
        fi
        # down: 3 -> 1
        flowing "scale-down $c of $st"
        step "down-$c"
        stop_stage "s$p-b"
        stop_stage "s$p-c"
        wait_for 60 0.2 holds_all "s$p-a" "$total" || fail "$st: s$p-a does not hold all $total partitions within 60 s"
        set_mark "s$p-a"
        wait_for 30 0.1 each_windowed "s$p-a" || fail "s$p-a finished no window after the scale-down"
        rebalances=$((rebalances + 1))
        settle "s$p-a"
        say "cycle $c of $st at +$(elapsed) s: back to 1 process holding all $total partitions"
    done
done

producer_done
hcf_finish "$events"
if [ -n "${HC_SCALE_PAUSES:-}" ] && [ -s "$work/steps" ]; then
    run_waiting python3 "$here/pauses.py" --brokers "$HC_TEST_BROKERS" --raw "f$run.raw" \
        --manifest "f$run.manifest" --steps "$work/steps" ||
        say "pauses: a step had no window after it"
fi
say "scale $which $store_kind: $events events, $cycles cycles ($rebalances rebalances), $lost lost, $duplicated duplicated"
say "wall time $(elapsed) s"
hcf_pass
