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
# a batch, the store is slowed down for HC_FAULT_SLOW_S (8) seconds: a statement trigger on
# hotcount_counts sleeps 0.9 s before every upsert, so each store batch of at most max.keys posts
# takes at least 0.9 s (below the 30 s statement_timeout: no error path) while stage 1 produces
# partials for many more. An earlier version held a table lock for 0.9 s and let go for 0.05 s;
# stage 2 got 4-7 batches of 7-10 ms each through every gap and kept up (CI, 2026-12-05 12:39:
# peak lag 28). Stage 2's VmRSS and hotcount_consumer_lag (partials topic) are sampled every
# 200 ms from then until the lag is back to 0. The run requires:
#   * the lag grew: its peak >= its value before + HC_FAULT_MIN_LAG (100) records, and >= 2x.
#     The lag counts records, and a packed record carries a window's posts of one partials
#     partition: two stage-1 processes at flush.ms 300 over 8 partitions write about 50 a
#     second, so the 8 s slow-down leaves some 200-900 behind (the short variant, 100 000 events
#     over 15 s: peaks from 213 to 887 in the runs of 2026-12-05 12:55-13:10 UTC, ASan ones too);
#   * the gauge showed it while the store was slow: the peak sampled during the slow-down alone
#     meets the same +HC_FAULT_MIN_LAG. The consumer's statistics are served on a thread of
#     their own (src/kafka/main_queue.c); forwarded to the message queue, they waited behind the
#     fetched records and the slow batches, and the gauge was absent (0 here) for the whole
#     slow-down, in every run of that day before the fix;
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
# One session: the trigger on, the slow-down's length, the trigger off (autocommit: each
# statement commits, so stage 2's upserts see the trigger at once and lose it at the end).
cat >"$work/slow.sql" <<SQL
CREATE FUNCTION $schema.hc_test_slow() RETURNS trigger LANGUAGE plpgsql
    AS \$\$ BEGIN PERFORM pg_sleep(0.9); RETURN NULL; END \$\$;
CREATE TRIGGER hc_test_slow BEFORE INSERT ON $schema.hotcount_counts
    FOR EACH STATEMENT EXECUTE FUNCTION $schema.hc_test_slow();
SELECT pg_sleep($stall_s);
DROP TRIGGER hc_test_slow ON $schema.hotcount_counts;
SQL
psql -q -v ON_ERROR_STOP=1 "$HC_TEST_PG_URI" -f "$work/slow.sql" >"$work/slow.log" 2>&1 &
slower=$!
live[$slower]=psql-slow
t_stall=$(date +%s%3N)
say "store slowed down at +$(elapsed) s (stage 2: VmRSS $rss0 kB, partials lag $lag0)"

# Sample through the slow-down and the drain, until the producer is done and the lag is 0.
peak_rss=$rss0 peak_lag=$lag0 peak_slow=$lag0 series=() n=0 drained=''
limit=$(($(date +%s%3N) + (seconds + 120) * 1000))
while [ "$(date +%s%3N)" -lt "$limit" ]; do
    ours "$pid2" || fail "s2-a (pid $pid2) exited"
    r=$(vmrss_kb "$pid2")
    [ "$r" -le "$peak_rss" ] || peak_rss=$r
    t=$(lag_text)
    l=$(lag_of "$t")
    [ "$l" -le "$peak_lag" ] || peak_lag=$l
    [ -z "${live[$slower]:-}" ] || [ "$l" -le "$peak_slow" ] || peak_slow=$l
    [ $((n++ % 5)) -ne 0 ] || series+=("$l")
    if [ -n "${live[$slower]:-}" ] && ! ours "$slower"; then
        reap "$slower"
        [ "$status" -eq 0 ] || { cat "$work/slow.log"; fail "the slowing psql session failed"; }
        say "store back to speed at +$(elapsed) s ($(($(date +%s%3N) - t_stall)) ms after the slow-down began)"
    fi
    # drained: what is left is at most the transaction markers after the last partial of each
    # partition, one per stage-1 producer (two) that wrote there: librdkafka 2.0.2 does not
    # move a read_committed consumer's position past trailing control records, so the gauge
    # can rest at up to 2 per partition
    if [ -z "${live[$slower]:-}" ] && ! ours "$producer" && [ -n "$t" ] &&
        [ "$l" -le $((2 * partials_partitions)) ]; then
        drained=1
        break
    fi
    sleep 0.2
done
say "partials lag each second from the slow-down: ${series[*]}"
[ -n "$drained" ] ||
    fail "stage 2's lag did not drain to <= $((2 * partials_partitions)) within 120 s of the stream's end"
say "lag drained to $l at +$(elapsed) s; peak lag $peak_lag (before $lag0, $peak_slow while the store was slow), peak VmRSS $peak_rss kB (before $rss0)"
if [ "$peak_lag" -lt $((lag0 + min_lag)) ] || [ "$peak_lag" -lt $((2 * lag0)) ]; then
    fail "the lag did not grow enough: peak $peak_lag, before $lag0 (want >= +$min_lag and >= 2x)"
fi
[ "$peak_slow" -ge $((lag0 + min_lag)) ] ||
    fail "the lag gauge did not show the growth while the store was slow: peak then $peak_slow, before $lag0 (want >= +$min_lag; it is current only when statistics are served apart from the messages)"
[ "$peak_rss" -le $((rss0 + rss_mb * 1024)) ] ||
    fail "stage 2's VmRSS grew from $rss0 to $peak_rss kB (bound +$rss_mb MiB)"

producer_done
hcf_finish "$events"
say "overload: $events events, slow store ${stall_s} s, lag $lag0 -> peak $peak_lag -> $l, RSS $rss0 -> $peak_rss kB, $lost lost, $duplicated duplicated"
say "wall time $(elapsed) s"
hcf_pass
