#!/usr/bin/env bash
# Overload: events arrive faster than the store takes them. Stage 2's memory must stay under a
# stated bound, its lag must grow and then drain to zero, and every count must be exact.
#
#   overload.sh HOTCOUNT
#
# The store is PostgreSQL (this run's own schema). Two stage-1 processes and one stage-2 process
# with a tiny max.keys=HC_FAULT_MAX_KEYS (200: a full table closes the window, so each store
# batch holds at most 200 posts) and statistics every second; `hotcount produce` sends
# HC_FAULT_EVENTS (1 000 000) Zipfian events over HC_FAULT_SECONDS (25). Once stage 2 has stored
# a batch, a psql session slows the store down for HC_FAULT_SLOW_S (8) seconds: again and again
# it holds an ACCESS EXCLUSIVE lock on hotcount_counts for 0.9 s and lets go for 0.05 s, so
# stage 2 gets about one batch of at most max.keys posts through per second (each waits on the
# lock, below the 30 s statement_timeout: no error path) while stage 1 produces partials for
# many more. Stage 2 keeps polling between its batches, so its statistics (lag) stay current.
# Stage 2's VmRSS and hotcount_consumer_lag (partials topic) are sampled every 200 ms from then
# until the lag is back to 0. The run requires:
#   * the lag grew: its peak >= its value before + HC_FAULT_MIN_LAG (100) records, and >= 2x.
#     The lag counts records, and a packed record carries a window's posts of one partials
#     partition: two stage-1 processes at flush.ms 300 over 8 partitions write about 50 a
#     second, so the 8 s slow-down leaves some 200-400 behind (234 in a run of 2026-12-01; with
#     partials.format=single it was thousands, one record a post). At max.keys 1000 a batch a
#     second took most of a Zipfian second's posts: the CI's short variant (100 000 events over
#     15 s) peaked at 64 and 69 on a loaded machine and failed, 113 and 141 on a quiet one; at 200
#     it peaked at 374 and 402 (2 runs each, 2026-12-05 10:37 UTC);
#   * it drained: after the producer, the lag summed over the partials partitions comes down to
#     at most 2 per partition within 120 s (the transaction markers after the last partial, one
#     per stage-1 producer, which librdkafka 2.0.2 does not count as consumed); `hotcount
#     verify` then proves that every committed partial is stored;
#   * memory bounded: peak VmRSS <= VmRSS before the slow-down + HC_FAULT_RSS_MB (96 MiB: the
#     consumer's pre-fetch queue, librdkafka's queued.max.messages.kbytes default of 64 MiB,
#     which hotcount does not lower, plus the max.keys table and slack);
#   * the end-of-run checks of tests/faults/lib.sh: 0 lost, 0 duplicated.
# Last line: overload: N events, slow store S s, lag L0 -> peak P -> E, RSS A -> B kB, L lost,
# D duplicated
#
# Environment: HC_FAULT_EVENTS, HC_FAULT_SECONDS, HC_FAULT_SLOW_S, HC_FAULT_MAX_KEYS,
# HC_FAULT_MIN_LAG, HC_FAULT_RSS_MB, HC_FAULT_SEED, HC_FAULT_TIMEOUT (stream + 180 s),
# HC_FAULT_KEEP=1.
set -Eeuo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$here/lib.sh"
[ $# -eq 1 ] || usage

hcf_stream 1000000 25
stall_s=${HC_FAULT_SLOW_S:-8}
max_keys=${HC_FAULT_MAX_KEYS:-200}
min_lag=${HC_FAULT_MIN_LAG:-100}
rss_mb=${HC_FAULT_RSS_MB:-96}
HCF_PROPS=kafka.consumer.statistics.interval.ms=1000

HCF_TILING=1
hcf_init overload "$1" postgresql
hcf_deadline "${HC_FAULT_TIMEOUT:-$((seconds + 180))}"

lag_text() { grep "^hotcount_consumer_lag{topic=\"f$run.partials\"" <<<"$(scrape s2-a)" || true; }
lag_of() { awk '{ s += $2 } END { printf "%d\n", s + 0 }' <<<"$1"; }

start_stage stage1 s1-a
start_stage stage1 s1-b
start_stage stage2 s2-a -X max.keys="$max_keys"
wait_all_assigned s1-a s1-b s2-a
pid2=${pid_of[s2-a]}
say "overload: $events events at $rate/s (~$seconds s), store slowed ${stall_s} s, stage 2 max.keys=$max_keys, seed $seed, run $run"
start_producer "$events" "$rate" "$seed"
wait_for 60 0.1 windowed_since s2-a 0 || fail "s2-a stored no batch within 60 s"
ours "$producer" || fail "the stream ended before the stall (raise HC_FAULT_SECONDS)"

rss0=$(vmrss_kb "$pid2")
lag0=$(lag_of "$(lag_text)")
for ((i = 0; i < stall_s * 100 / 95; i++)); do
    printf 'BEGIN; LOCK TABLE %s.hotcount_counts IN ACCESS EXCLUSIVE MODE; SELECT pg_sleep(0.9); COMMIT; SELECT pg_sleep(0.05);\n' "$schema"
done >"$work/lock.sql"
psql -q -v ON_ERROR_STOP=1 "$HC_TEST_PG_URI" -f "$work/lock.sql" >"$work/lock.log" 2>&1 &
locker=$!
live[$locker]=psql-lock
t_stall=$(date +%s%3N)
say "store slowed down at +$(elapsed) s (stage 2: VmRSS $rss0 kB, partials lag $lag0)"

# Sample through the slow-down and the drain, until the producer is done and the lag is 0.
peak_rss=$rss0 peak_lag=$lag0 series=() n=0 drained=''
limit=$(($(date +%s%3N) + (seconds + 120) * 1000))
while [ "$(date +%s%3N)" -lt "$limit" ]; do
    ours "$pid2" || fail "s2-a (pid $pid2) exited"
    r=$(vmrss_kb "$pid2")
    [ "$r" -le "$peak_rss" ] || peak_rss=$r
    t=$(lag_text)
    l=$(lag_of "$t")
    [ "$l" -le "$peak_lag" ] || peak_lag=$l
    [ $((n++ % 5)) -ne 0 ] || series+=("$l")
    if [ -n "${live[$locker]:-}" ] && ! ours "$locker"; then
        reap "$locker"
        [ "$status" -eq 0 ] || { cat "$work/lock.log"; fail "the locking psql session failed"; }
        say "store back to speed at +$(elapsed) s ($(($(date +%s%3N) - t_stall)) ms after the slow-down began)"
    fi
    # drained: what is left is at most the transaction markers after the last partial of each
    # partition, one per stage-1 producer (two) that wrote there: librdkafka 2.0.2 does not
    # move a read_committed consumer's position past trailing control records, so the gauge
    # can rest at up to 2 per partition
    if [ -z "${live[$locker]:-}" ] && ! ours "$producer" && [ -n "$t" ] &&
        [ "$l" -le $((2 * partials_partitions)) ]; then
        drained=1
        break
    fi
    sleep 0.2
done
say "partials lag each second from the slow-down: ${series[*]}"
[ -n "$drained" ] ||
    fail "stage 2's lag did not drain to <= $((2 * partials_partitions)) within 120 s of the stream's end"
say "lag drained to $l at +$(elapsed) s; peak lag $peak_lag (before $lag0), peak VmRSS $peak_rss kB (before $rss0)"
if [ "$peak_lag" -lt $((lag0 + min_lag)) ] || [ "$peak_lag" -lt $((2 * lag0)) ]; then
    fail "the lag did not grow enough: peak $peak_lag, before $lag0 (want >= +$min_lag and >= 2x)"
fi
[ "$peak_rss" -le $((rss0 + rss_mb * 1024)) ] ||
    fail "stage 2's VmRSS grew from $rss0 to $peak_rss kB (bound +$rss_mb MiB)"

producer_done
hcf_finish "$events"
say "overload: $events events, slow store ${stall_s} s, lag $lag0 -> peak $peak_lag -> $l, RSS $rss0 -> $peak_rss kB, $lost lost, $duplicated duplicated"
say "wall time $(elapsed) s"
hcf_pass
