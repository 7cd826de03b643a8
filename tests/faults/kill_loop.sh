#!/usr/bin/env bash
# Exactly-once under kill -9: one stage's processes are SIGKILLed and restarted again and again
# while the stream flows, and afterwards every like must be counted exactly once.
#
#   kill_loop.sh HOTCOUNT STAGE STORE [KILLS]
#
# STAGE is stage1 or stage2 (the stage whose processes are killed), STORE sqlite, redis,
# postgresql, dynamodb or cassandra (servers from tests/harness/with-servers --kafka --redis
# --postgres --dynamodb --cassandra; dynamodb is moto's server, an emulator), KILLS 10 by
# default. Two stage-1 and two stage-2 processes run (session.timeout.ms=6000, heartbeats every
# second, flush.ms=300) while `hotcount produce` sends HC_FAULT_EVENTS (1 000 000) Zipfian events
# with 5 % unlikes and 0.2 % malformed ones at a bounded rate, so that the stream lasts
# HC_FAULT_SECONDS (7 s per kill + 8 s). KILLS times, alternating between the two instances of
# STAGE: wait until the group has settled (the instance holds partitions), wait a random
# 0.5-2.5 s, look at what the instance has in flight (its metrics: a window open or not; between
# two windows, look again every 50 ms for up to 1 s), SIGKILL it and start it again at once with
# the same instance.id. Stage 1's restarted producer fences its zombie (init_transactions aborts
# the open transaction); stage 2's offsets compare-and-set refuses any stale batch. One line per kill says
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
case "$store_kind" in sqlite | redis | postgresql | dynamodb | cassandra) ;; *) usage ;; esac
[[ "$kills" =~ ^[1-9][0-9]*$ ]] || usage
: "${HC_TEST_BROKERS:?run under tests/harness/with-servers --kafka}"

hcf_stream 1000000 $((7 * kills + 8))
rate=${HC_FAULT_RATE:-$rate}
timeout_s=${HC_FAULT_TIMEOUT:-$((seconds + 120))}
RANDOM=$seed

HCF_TILING=1 # topic.manifest on; tiling.py checks stage 1's committed offset ranges at the end
hcf_init kill_loop "$1" "$store_kind"
hcf_deadline "$timeout_s"

# What the instance has in flight, just before it is killed: sets $site and $busy (1 or ''). All
# from its metrics (docs/EVENTS.md): the partitions it holds, and how long the input it consumed
# has waited for a flush (its open window: a stage-1 transaction with events in it, or a stage-2
# window with partials in it; 0 when it is between two windows).
probe() { # instance-id
    local id=$1 m s held open_ms done_
    m=$(scrape_sure "$id") || fail "$id (pid ${pid_of[$id]}) does not answer on its metrics port"
    s=${kind_of[$id]#stage}
    held=$(metric "$m" "hotcount_assigned_partitions{stage=\"$s\"}")
    open_ms=$(awk -v n="hotcount_unflushed_input_seconds{stage=\"$s\"}" \
        '$1 == n { v = $2 } END { printf "%d\n", v * 1000 }' <<<"$m")
    if [ "$s" = 1 ]; then
        done_="$(metric "$m" 'hotcount_transactions_total{outcome="commit"}') committed, $(metric "$m" 'hotcount_transactions_total{outcome="abort"}') aborted windows"
    else
        done_="$(metric "$m" 'hotcount_store_batches_total{outcome="commit"}') stored, $(metric "$m" 'hotcount_store_batches_total{outcome="conflict"}') refused batches"
    fi
    busy=''
    if [ "$held" -gt 0 ] && [ "$open_ms" -gt 0 ]; then
        busy=1
        site="window open for $open_ms ms ($held partitions, $done_ so far)"
        # input flows: a window older than flush.ms is being flushed right now
        [ "$open_ms" -le "$flush_ms" ] || site="$site, probably flushing"
    else
        site="idle ($held partitions, no input waiting, $done_ so far)"
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
