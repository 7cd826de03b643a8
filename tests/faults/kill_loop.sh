#!/usr/bin/env bash
# Exactly-once under kill -9: one stage's processes are SIGKILLed and restarted again and again
# while the stream flows, and afterwards every like must be counted exactly once.
#
#   kill_loop.sh HOTCOUNT STAGE STORE [KILLS]
#
# STAGE is stage1 or stage2 (the stage whose processes are killed), STORE sqlite, redis or
# postgresql (servers from tests/harness/with-servers --kafka --redis --postgres), KILLS 10 by
# default. Two stage-1 and two stage-2 processes run (session.timeout.ms=6000, heartbeats every
# second, flush.ms=300) while `hotcount produce` sends HC_FAULT_EVENTS (1 000 000) Zipfian events
# with 5 % unlikes and 0.2 % malformed ones at a bounded rate, so that the stream lasts
# HC_FAULT_SECONDS (7 s per kill + 8 s). KILLS times, alternating between the two instances of
# STAGE: wait until the group has settled (the instance holds partitions), wait a random
# 0.5-2.5 s, look at what the instance has in flight (its metrics and log; between two windows,
# look again every 50 ms for up to 1 s), SIGKILL it and start it again at once with the same
# instance.id. Stage 1's restarted producer fences its zombie (init_transactions aborts the open
# transaction); stage 2's offsets compare-and-set refuses any stale batch. One line per kill says
# where it landed; fewer than half the kills hitting work in flight is a failure (the run would
# prove nothing).
#
# Then `hotcount verify` must report exact counts, every stage must stop with exit 0 on SIGTERM,
# the oracle (tests/oracle/oracle.py) must find counts, dead letters, the changelog topic (not
# when stage 2 is killed: see tests/faults/README.md) and stage 1's committed offsets exact, and
# tests/faults/tally.py prints the lost and double-counted likes (both must be 0), and
# tests/faults/tiling.py must find that the offset ranges in stage 1's committed transactions
# (topic.manifest) tile every raw partition exactly once and that the committed partials add up
# to what those transactions' manifests say they hold. Last line:
#   kill_loop STAGE STORE: N events, K kills (F in flight), L lost, D duplicated
#
# Environment: HC_FAULT_EVENTS, HC_FAULT_SECONDS (stream length), HC_FAULT_RATE (overrides the
# rate derived from both), HC_FAULT_SEED (kill delays and producer; printed), HC_FAULT_TIMEOUT
# (the whole run's bound, default stream + 120 s), HC_FAULT_KEEP=1 (keep the work directory),
# HC_FAULT_CHANGELOG=report (only count stale changelog totals instead of requiring none).
# The work directory with every process's log is kept and printed when the run fails.
set -Eeuo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$here/lib.sh"
if [ $# -lt 3 ] || [ $# -gt 4 ]; then usage; fi
stage=$2
store_kind=$3
kills=${4:-10}
case "$stage" in stage1 | stage2) ;; *) usage ;; esac
case "$store_kind" in sqlite | redis | postgresql) ;; *) usage ;; esac
[[ "$kills" =~ ^[1-9][0-9]*$ ]] || usage
: "${HC_TEST_BROKERS:?run under tests/harness/with-servers --kafka}"

hcf_stream 1000000 $((7 * kills + 8))
rate=${HC_FAULT_RATE:-$rate}
timeout_s=${HC_FAULT_TIMEOUT:-$((seconds + 120))}
RANDOM=$seed

HCF_TILING=1 # topic.manifest on; tiling.py checks stage 1's committed offset ranges at the end
hcf_init kill_loop "$1" "$store_kind"
hcf_deadline "$timeout_s"

# What the instance has in flight, just before it is killed: sets $site and $busy (1 or '').
probe() { # instance-id
    local id=$1 m now held last since consumed committed aborted open partials share
    # the log first: a window committed between the two reads makes the figures conservative
    if [ "${kind_of[$id]}" = stage1 ]; then
        last=$(awk '/committed window/ { t = $1 } END { print t }' "${log_of[$id]}")
    else
        last=$(awk '/stored batch|assigned [0-9]+ partitions/ { t = $1 } END { print t }' \
            "${log_of[$id]}")
    fi
    m=$(scrape "$id")
    now=$(date +%s%3N)
    busy=''
    if [ "${kind_of[$id]}" = stage1 ]; then
        held=$(metric "$m" 'hotcount_assigned_partitions{stage="1"}')
        # polled by this incarnation, minus what its committed and aborted windows held
        consumed=$(metric "$m" hotcount_events_consumed_total)
        committed=$(($(metric "$m" 'hotcount_events_total{result="ok"}') +
            $(metric "$m" 'hotcount_events_total{result="invalid"}')))
        aborted=$(sed -n 's/.*aborting window (\([0-9]*\) events).*/\1/p' "${log_of[$id]}" |
            awk '{ s += $1 } END { print s + 0 }')
        open=$((consumed - committed - aborted))
        since=never
        [ -z "$last" ] || since=$(ago "$last")
        if [ "$held" -gt 0 ] && [ "$open" -gt 0 ]; then
            busy=1
            site="window open with at least $open uncommitted events ($held partitions, last commit $since)"
            # input flows: a window older than flush.ms is being committed right now
            [ -z "$last" ] || [ $(($(date +%s%3N) - $(ms_of "$last"))) -le "$flush_ms" ] ||
                site="$site, probably committing"
        else
            site="idle ($held partitions, $open uncommitted events, last commit $since)"
        fi
    else
        held=$(metric "$m" 'hotcount_assigned_partitions{stage="2"}')
        # partials stage 1 committed after this instance's last stored batch (or assignment):
        # they are in its open window, or on the way to it. (A stage 2 flushes a stage-1 commit
        # that came after its phase point within tens of milliseconds, window.h: a grace for
        # the fetch would let most probes find it idle.)
        [ -n "$last" ] || last=0000
        partials=$(cat "$work"/s1-?.*.log | awk -v a="$last" -v b="$(iso_ms "$now")" '
            /committed window/ && $1 > a && $1 <= b {
                for (i = 2; i <= NF; i++) if ($i == "partials,") s += $(i - 1)
            }
            END { print s + 0 }')
        share=$((partials * held / partials_partitions))
        since=never
        [ "$last" = 0000 ] || since=$(ago "$last")
        if [ "$held" -gt 0 ] && [ "$partials" -gt 0 ]; then
            busy=1
            site="window open with ~$share partials committed upstream for its $held partitions since its last stored batch ($since)"
        else
            site="idle ($held partitions, no partials committed upstream since its last stored batch, $since)"
        fi
    fi
}

start_stage stage1 s1-a
start_stage stage1 s1-b
start_stage stage2 s2-a
start_stage stage2 s2-b
wait_all_assigned s1-a s1-b s2-a s2-b
say "kill_loop $stage $store_kind: $events events at $rate/s (~$seconds s), $kills kills, seed $seed, run $run"

start_producer "$events" "$rate" "$seed"

# --- the kills -----------------------------------------------------------------------------
if [ "$stage" = stage1 ]; then targets=(s1-a s1-b); else targets=(s2-a s2-b); fi
in_flight=0
for ((k = 1; k <= kills; k++)); do
    id=${targets[(k - 1) % 2]}
    # a settled group first: a kill while every member waits in a rebalance hits nothing
    wait_assigned "$id" 60 || fail "$id holds no partitions 60 s after the previous kill"
    delay=$((500 + RANDOM % 2001))
    sleep "$((delay / 1000)).$(printf '%03d' $((delay % 1000)))"
    stream=''
    ours "$producer" || stream=', after the stream'
    # Aim: a stage between two windows (no input since its last flush) is re-examined every
    # 50 ms for up to 1 s, so that the kill lands in the next window; then it is killed anyway.
    probe "$id"
    for ((aim = 0; aim < 20 && !busy; aim++)); do
        sleep 0.05
        probe "$id"
    done
    [ "$aim" -eq 0 ] || delay="$delay+$((aim * 50))"
    victim=${pid_of[$id]}
    kill -KILL "$victim"
    reap "$victim"
    [ "$status" -eq 137 ] || fail "$id (pid $victim) exited $status before the SIGKILL landed"
    [ -z "$busy" ] || in_flight=$((in_flight + 1))
    say "kill $k/$kills at +$(elapsed) s: $stage $id pid $victim (${delay} ms after settling$stream), in flight: $site"
    start_stage "$stage" "$id"
    # the restarted instance joins once the killed member's session (6 s) has expired
    wait_assigned "$id" 60 || fail "$id did not get partitions back within 60 s of its restart"
done

producer_done

# --- the checks ----------------------------------------------------------------------------
# The changelog topic must match the store exactly, also when stage 2 was the one killed: the
# stage 2 that takes a killed one's partitions over republishes the totals whose records may not
# have been delivered (changelog.h). HC_FAULT_CHANGELOG=report shows how a build without that
# repair fares: tally.py then counts the stale posts instead.
HCF_CHANGELOG=${HC_FAULT_CHANGELOG:-strict}
HCF_FINISH_REPORT_ONLY=1
hcf_finish "$events"

say "kill_loop $stage $store_kind: $events events, $kills kills ($in_flight in flight), $lost lost, $duplicated duplicated"
say "wall time $(elapsed) s"
hcf_check_exact
[ $((2 * in_flight)) -ge "$kills" ] ||
    fail "only $in_flight of $kills kills hit work in flight (want at least half)"
hcf_pass
