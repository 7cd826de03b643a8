#!/usr/bin/env bash
# A backlog drained through a slow store: stage 2 must get through it with the same process,
# its lag falling every minute, and every count exact.
#
#   slow_store.sh HOTCOUNT STORE
#
# STORE dynamodb, postgresql or redis. Two stage-1 processes run without stage 2 while
# `hotcount produce` sends HC_FAULT_EVENTS (300 000) events over HC_FAULT_POSTS (150 000) posts at
# Zipf HC_FAULT_ZIPF (0.5: about 117 000 distinct posts) in HC_FAULT_SECONDS (20); once stage 1
# has committed all of them, the partials topic holds the backlog. Then the store is made slow
# and one stage-2 process starts against it:
#   dynamodb    the emulator (moto) behind tests/harness/fault-proxy.py in throttle mode: a
#               HC_FAULT_THROTTLE (0.3) share of the write requests answered HTTP 400
#               ProvisionedThroughputExceededException without reaching the emulator, every
#               other request held HC_FAULT_DELAY_MS (100) ms; a smaller backlog by default
#               (12 000 events over 6 000 posts, about 4 700 distinct: the emulator takes
#               0.1-2 s per 100-action transaction even when nothing is in the way, so that
#               slowed it stores about 170 posts a second, and stage 2's first batch after its
#               start, which takes the whole backlog up to max.keys before the batch limit has
#               learnt the store's pace, must land within the first minute);
#   postgresql  two statement triggers on this run's hotcount_counts (AFTER INSERT and AFTER
#               UPDATE, with their transition tables) that pg_sleep HC_FAULT_PG_STATEMENT_MS (200)
#               ms per upsert plus HC_FAULT_PG_ROW_US (700) us per row it wrote: a batch of
#               43 000 posts takes 30 s, past the 30 s statement_timeout (57014);
#   redis       a private redis-server (enable-debug-command local) kept busy by a loop of
#               `DEBUG SLEEP HC_FAULT_REDIS_SLEEP` (0.2) calls: every command waits behind one;
#               and 2 s in, then every HC_FAULT_REDIS_STALL_EVERY_S (20) s, one `DEBUG SLEEP
#               HC_FAULT_REDIS_STALL_S` (11; 0: none), past the 10 s bound of a command, so that
#               some parts and commits time out (an ambiguous commit among them) and are retried.
# The run requires, within HC_FAULT_DRAIN_S (240) s of stage 2's start:
#   * the backlog drains: the store's offsets reach the partials topic's end (`hotcount status`:
#     stage 2's lag, counted from the offsets in the store, is 0);
#   * the lag falls every minute (HC_FAULT_MINUTE_S, 60): each minute's sample below the one
#     before, from the backlog at stage 2's start;
#   * stage 2 keeps its pid: it never exits (no fatal error, no watchdog) until the final SIGTERM;
#   * its lag gauge is on /metrics throughout (sampled every 10 s from 15 s on): an operator
#     sees the drain. Until 2026-12-05 the statistics waited behind the fetched records and the
#     slow batches (src/kafka/main_queue.c), and the gauge went missing during them;
#   * then, the store back to speed, the end-of-run checks of tests/faults/lib.sh: verify, the
#     oracle, tally.py (0 lost, 0 duplicated) and tiling.py.
# It reports, per minute since stage 2's start: the lag from the store's offsets (records of the
# partials topic) and from stage 2's own hotcount_consumer_lag, and the batches stage 2 stored
# (the `stored batch` log lines: how many, their posts min/median/max, their apply ms), failed
# (`store_batch_failed` events), lost the compare-and-set, and its batch limit
# (hotcount_store_batch_limit_posts, and the `store_batch_limit` events that changed it).
# Last line: slow_store STORE: N events, backlog B records (P partials), drained in D s, lag per
# minute L0 L1 ... 0, L lost, D duplicated.
#
# Environment: HC_FAULT_EVENTS, HC_FAULT_POSTS, HC_FAULT_ZIPF, HC_FAULT_SECONDS,
# HC_FAULT_DRAIN_S, HC_FAULT_MINUTE_S, HC_FAULT_THROTTLE, HC_FAULT_DELAY_MS, HC_FAULT_PG_ROW_US,
# HC_FAULT_PG_STATEMENT_MS, HC_FAULT_REDIS_SLEEP, HC_FAULT_REDIS_STALL_S,
# HC_FAULT_REDIS_STALL_EVERY_S, HC_FAULT_SEED, HC_FAULT_TIMEOUT (stream + drain + 240 s),
# HC_FAULT_KEEP=1, HC_FAULT_LAG_REPORT_ONLY=1 (a minute whose lag did not fall is reported, not
# failed: to watch a whole drain). Long variants by hand: HC_FAULT_EVENTS=1000000
# HC_FAULT_POSTS=500000 HC_FAULT_SECONDS=60 HC_FAULT_DRAIN_S=1200 (redis, postgresql);
# HC_FAULT_EVENTS=60000 HC_FAULT_POSTS=30000 HC_FAULT_DRAIN_S=900 (dynamodb: about 4 min, and
# its first minute flat, the first batch taking the whole first window: 65 s on 2026-12-05).
set -Eeuo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$here/lib.sh"
[ $# -eq 2 ] || usage
store_kind=$2
case "$store_kind" in redis | postgresql | dynamodb) ;; *) usage ;; esac
harness=$(cd "$here/../harness" && pwd)

if [ "$store_kind" = dynamodb ]; then
    hcf_stream 12000 10
    posts=${HC_FAULT_POSTS:-6000}
else
    hcf_stream 300000 20
    posts=${HC_FAULT_POSTS:-150000}
fi
zipf=${HC_FAULT_ZIPF:-0.5}
drain_s=${HC_FAULT_DRAIN_S:-240}
minute_s=${HC_FAULT_MINUTE_S:-60}
throttle=${HC_FAULT_THROTTLE:-0.3}
delay_ms=${HC_FAULT_DELAY_MS:-100}
pg_row_us=${HC_FAULT_PG_ROW_US:-700}
pg_statement_ms=${HC_FAULT_PG_STATEMENT_MS:-200}
redis_sleep=${HC_FAULT_REDIS_SLEEP:-0.2}
redis_stall=${HC_FAULT_REDIS_STALL_S:-11}
redis_stall_every=${HC_FAULT_REDIS_STALL_EVERY_S:-20}

ctl=() proxy_pid='' ddb_direct_uri='' sleeper=''
private_store() { # redis: a server of our own that takes DEBUG; dynamodb: the proxy, relaying
    case "$store_kind" in
    redis)
        ctl=("$harness/redis-ctl" --dir "$work/server")
        # the harness's configuration, plus DEBUG from loopback (only at start-up)
        "${ctl[@]}" start >/dev/null && "${ctl[@]}" stop >/dev/null ||
            fail "private redis-server did not start"
        echo 'enable-debug-command local' >>"$work/server/redis.conf"
        "${ctl[@]}" start >/dev/null || fail "private redis-server did not start with DEBUG"
        HC_TEST_REDIS_URI=$("${ctl[@]}" uri)
        export HC_TEST_REDIS_URI
        ;;
    dynamodb)
        ddb_direct_uri=${HC_TEST_DYNAMODB_URI:?run under tests/harness/with-servers --dynamodb}
        python3 "$harness/fault-proxy.py" --upstream "${ddb_direct_uri##*endpoint=http://}" \
            --port-file "$work/proxy.port" --state-file "$work/proxy.json" \
            --lifetime "${HC_FAULT_TIMEOUT:-$((seconds + drain_s + 240))}" \
            --throttle "$throttle" --delay-ms "$delay_ms" --seed "$seed" 2>"$work/proxy.log" &
        proxy_pid=$!
        live[$proxy_pid]=fault-proxy
        wait_for 10 0.05 test -s "$work/proxy.port" || fail "fault-proxy.py did not start"
        HC_TEST_DYNAMODB_URI="${ddb_direct_uri%%endpoint=*}endpoint=http://127.0.0.1:$(cat "$work/proxy.port")"
        export HC_TEST_DYNAMODB_URI
        ;;
    esac
}
private_store_stop() {
    [ ${#ctl[@]} -eq 0 ] || "${ctl[@]}" stop >/dev/null 2>&1 || true
    [ -z "$ddb_direct_uri" ] || [ -z "$ok" ] || [ -n "${HC_FAULT_KEEP:-}" ] ||
        "$HC_TEST_DYNAMODB_CTL" drop-tables "h${run//-/_}_" >/dev/null 2>&1 || true
}
hcf_pre_store=private_store
hcf_on_exit=private_store_stop
[ "$store_kind" != redis ] || hcf_private_store=1
HCF_PROPS=kafka.consumer.statistics.interval.ms=1000

HCF_TILING=1
hcf_init slow_store "$1" "$store_kind"
hcf_deadline "${HC_FAULT_TIMEOUT:-$((seconds + drain_s + 240))}"

# --- the store made slow, and back to speed ---
slow_down() {
    case "$store_kind" in
    dynamodb) kill -WINCH "$proxy_pid" ;;
    postgresql)
        psql -q -v ON_ERROR_STOP=1 "$HC_TEST_PG_URI" >"$work/slow.log" 2>&1 <<SQL || {
CREATE FUNCTION $schema.hc_slow() RETURNS trigger LANGUAGE plpgsql AS \$f\$
DECLARE n bigint;
BEGIN
    SELECT count(*) INTO n FROM changed;
    PERFORM pg_sleep(((CASE WHEN TG_OP = 'INSERT' THEN $pg_statement_ms ELSE 0 END)
                      + n * $pg_row_us / 1000.0) / 1000.0);
    RETURN NULL;
END \$f\$;
CREATE TRIGGER hc_slow_insert AFTER INSERT ON $schema.hotcount_counts
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION $schema.hc_slow();
CREATE TRIGGER hc_slow_update AFTER UPDATE ON $schema.hotcount_counts
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION $schema.hc_slow();
SQL
            cat "$work/slow.log"
            fail "could not slow PostgreSQL down"
        }
        ;;
    redis)
        local port=${HC_TEST_REDIS_URI##*:}
        redis-cli -h 127.0.0.1 -p "$port" DEBUG SLEEP 0 >/dev/null 2>&1 ||
            fail "the private redis-server refuses DEBUG"
        (
            trap 'exit 0' TERM
            next_stall=$(($(date +%s) + 2)) # the first while stage 2 starts and takes its first batch
            while :; do
                s=$redis_sleep
                if [ "$redis_stall" != 0 ] && [ "$(date +%s)" -ge "$next_stall" ]; then
                    s=$redis_stall next_stall=$((next_stall + redis_stall_every))
                fi
                redis-cli -h 127.0.0.1 -p "$port" DEBUG SLEEP "$s" >/dev/null 2>&1 || sleep "$s"
            done
        ) &
        sleeper=$!
        live[$sleeper]=debug-sleep-loop
        ;;
    esac
}
back_to_speed() {
    case "$store_kind" in
    dynamodb)
        kill -HUP "$proxy_pid"
        store="${store%%endpoint=*}endpoint=${ddb_direct_uri##*endpoint=}" # the oracle: direct
        ;;
    postgresql)
        psql -q -v ON_ERROR_STOP=1 "$HC_TEST_PG_URI" \
            -c "DROP TRIGGER hc_slow_insert ON $schema.hotcount_counts" \
            -c "DROP TRIGGER hc_slow_update ON $schema.hotcount_counts" >>"$work/slow.log" 2>&1 ||
            fail "could not drop the slowing triggers"
        ;;
    redis)
        kill -TERM "$sleeper"
        reap "$sleeper"
        ;;
    esac
}

# --- what is read while it drains ---
store_lag() { # stage 2's lag from the offsets in the store, in records of the partials topic
    "$hc" status "${cfg[@]}" --json --dlq-scan 1 >"$work/status.json" 2>>"$work/status.err" || true
    python3 -c '
import json, sys
try:
    lag = json.load(open(sys.argv[1])).get("stage2", {}).get("lag")
except ValueError:
    lag = None
print(lag if isinstance(lag, int) else "?")' "$work/status.json"
}
consumer_lag() { metric_sum "$(scrape s2-a)" "hotcount_consumer_lag{topic=\"f$run.partials\""; }
# Whether stage 2's /metrics shows its lag gauge for the partials topic (left out when its
# statistics are older than 3 intervals): an operator watching the drain must see it throughout.
consumer_lag_shown() { grep -q "^hotcount_consumer_lag{topic=\"f$run.partials\"" <<<"$(scrape s2-a)"; }
stage1_events() { # raw events in stage 1's committed windows, both processes
    local a b
    a=$(scrape_sure s1-a) && b=$(scrape_sure s1-b) || return 1
    echo $(($(metric_sum "$a" hotcount_events_total) + $(metric_sum "$b" hotcount_events_total)))
}
stage1_partials() {
    echo $(($(sample_of s1-a hotcount_partials_total) + $(sample_of s1-b hotcount_partials_total)))
}
all_committed() { local n; n=$(stage1_events) && [ "$n" -ge "$events" ]; }
# Per minute since stage 2's start (epoch ms $1): its stored batches (count, posts
# min/median/max, apply ms median/max, events) and failed ones, from its JSON log.
batch_report() {
    python3 - "${log_of[s2-a]}" "$1" "$minute_s" <<'EOF'
import json, re, statistics, sys
from datetime import datetime
path, t0, minute = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rows = {}
pat = re.compile(r"stored batch: (\d+) posts, (\d+) events, \d+ partitions, (\d+) ms")
for line in open(path, errors="replace"):
    try:
        ev = json.loads(line)
        ts = datetime.strptime(ev["ts"], "%Y-%m-%dT%H:%M:%S.%fZ")
    except (ValueError, KeyError, TypeError):
        continue
    ms = int((ts - datetime(1970, 1, 1)).total_seconds() * 1000)
    r = rows.setdefault(max(0, (ms - t0) // (minute * 1000)),
                        {"posts": [], "ms": [], "events": 0, "failed": 0, "errors": set()})
    m = pat.search(ev.get("msg", ""))
    if m:
        r["posts"].append(int(m.group(1)))
        r["events"] += int(m.group(2))
        r["ms"].append(int(m.group(3)))
    elif ev.get("event") == "store_batch_failed":
        r["failed"] += 1
        r["errors"].add(re.sub(r"[0-9]+", "N", str(ev.get("error", "")))[:90])
    elif ev.get("msg", "").startswith("store batch refused"):
        r["conflicts"] = r.get("conflicts", 0) + 1
    elif ev.get("event") == "store_batch_limit":
        r.setdefault("limits", []).append(f"{ev.get('was')}->{ev.get('posts')}")
for k in sorted(rows):
    r = rows[k]
    p = r["posts"]
    line = f"  minute {k}: {len(p)} batches stored"
    if p:
        line += (f", posts/batch min {min(p)} median {int(statistics.median(p))} max {max(p)}"
                 f", apply ms median {int(statistics.median(r['ms']))} max {max(r['ms'])}"
                 f", {r['events']} events")
    line += f"; {r['failed']} failed"
    if r.get("conflicts"):
        line += f", {r['conflicts']} lost the compare-and-set (re-read)"
    if r["errors"]:
        line += " (" + "; ".join(sorted(r["errors"])[:3]) + ")"
    if r.get("limits"):
        lim = r["limits"]
        line += f"; batch limit {', '.join(lim[:6])}{' ...' if len(lim) > 6 else ''}"
    print(line)
EOF
}

start_stage stage1 s1-a
start_stage stage1 s1-b
wait_all_assigned s1-a s1-b
say "slow_store $store_kind: backlog of $events events over $posts posts (Zipf $zipf) at $rate/s, seed $seed, run $run"
start_producer "$events" "$rate" "$seed" --posts "$posts" --zipf "$zipf"
producer_done
wait_for 120 0.5 all_committed ||
    fail "stage 1 committed $(stage1_events) of $events events within 120 s of the producer's end"
backlog_partials=$(stage1_partials)
backlog=$(store_lag)
say "backlog at +$(elapsed) s: $backlog records of f$run.partials, $backlog_partials partials (posts per window) for stage 2"
[ "$backlog" != '?' ] && [ "$backlog" -gt 0 ] || fail "no backlog for stage 2 (hotcount status: $(cat "$work/status.json"))"

slow_down
case "$store_kind" in
dynamodb) say "store slowed: $throttle of the write requests throttled (HTTP 400 ProvisionedThroughputExceededException), the others held $delay_ms ms" ;;
postgresql) say "store slowed: every upsert sleeps $pg_statement_ms ms + $pg_row_us us per row" ;;
redis) say "store slowed: DEBUG SLEEP $redis_sleep in a loop, DEBUG SLEEP $redis_stall every $redis_stall_every s" ;;
esac
start_stage stage2 s2-a
pid2=${pid_of[s2-a]}
t2=$(date +%s%3N)
t2_wall=$(date +%s%3N)
say "stage 2 (pid $pid2) started at +$(elapsed) s"

# Every minute: the store's lag must be below the last minute's. Between the minute marks the
# process is watched every second and the lag read every 10 s, so a drain is seen early.
lags=("$backlog") clags=() flat=() unseen=() drained='' n=0
next_minute=$((t2 + minute_s * 1000))
limit=$((t2 + drain_s * 1000))
while :; do
    ours "$pid2" || {
        reap "$pid2"
        fail "stage 2 (pid $pid2) exited with status $status $(($(date +%s%3N) - t2)) ms after its start (3: the watchdog)"
    }
    now=$(date +%s%3N)
    if [ "$now" -ge "$next_minute" ]; then
        l=$(store_lag)
        c=$(consumer_lag)
        lags+=("$l") clags+=("$c")
        say "minute ${#clags[@]}: store lag $l records (stage 2's consumer lag $c), batch limit $(sample_of s2-a hotcount_store_batch_limit_posts || echo '?') posts, pid $pid2"
        [ "$l" = 0 ] && { drained=1; break; }
        prev=${lags[${#lags[@]} - 2]}
        if [ "$l" = '?' ] || [ "$prev" = '?' ] || [ "$l" -ge "$prev" ]; then
            if [ -n "${HC_FAULT_LAG_REPORT_ONLY:-}" ]; then
                flat+=("${#clags[@]}")
            else
                batch_report "$t2_wall"
                fail "stage 2's lag did not fall in minute ${#clags[@]}: $prev -> $l records (lag per minute: ${lags[*]})"
            fi
        fi
        next_minute=$((next_minute + minute_s * 1000))
    elif [ $((n % 10)) -eq 9 ] && [ "$(store_lag)" = 0 ]; then
        drained=1
        break
    fi
    # every 10 s from 15 s on (by then its assignment, its first fetch and report are long
    # done; a series appears once the consumer has a position): the lag gauge is shown
    if [ "$n" -ge 14 ] && [ $((n % 10)) -eq 4 ] && ! consumer_lag_shown; then
        unseen+=("$(((now - t2) / 1000))")
    fi
    [ "$now" -lt "$limit" ] || break
    n=$((n + 1))
    sleep 1
done
drain_ms=$(($(date +%s%3N) - t2))
[ -z "$drained" ] || [ "${lags[${#lags[@]} - 1]}" = 0 ] || lags+=(0) # drained between the marks
say "lag per minute (store offsets, records): ${lags[*]}$([ -n "$drained" ] && echo ", 0 at $((drain_ms / 1000)) s")"
say "batches per minute of stage 2:"
batch_report "$t2_wall"
[ -n "$drained" ] ||
    fail "the backlog did not drain within $drain_s s of stage 2's start (lag per minute: ${lags[*]})"
[ ${#flat[@]} -eq 0 ] ||
    say "NOT REQUIRED (HC_FAULT_LAG_REPORT_ONLY): the lag did not fall in minute(s) ${flat[*]}"
[ "${pid_of[s2-a]}" = "$pid2" ] && ours "$pid2" || fail "stage 2 was restarted"
[ ${#unseen[@]} -eq 0 ] ||
    fail "stage 2's hotcount_consumer_lag was missing from /metrics during the drain at ${unseen[*]} s after its start (its statistics stale)"
if [ "$store_kind" = dynamodb ]; then
    say "fault-proxy: $(python3 -c '
import json, sys
s = json.load(open(sys.argv[1]))
print("%d of %d write requests throttled, %d requests held" % (s["throttled"], s["writes"], s["delayed"]))' "$work/proxy.json")"
fi

back_to_speed
say "store back to speed at +$(elapsed) s; stage 2 still pid $pid2"
hcf_finish "$events"
say "slow_store $store_kind: $events events, backlog $backlog records ($backlog_partials partials), drained in $((drain_ms / 1000)) s, lag per minute ${lags[*]}, $lost lost, $duplicated duplicated"
say "wall time $(elapsed) s"
hcf_pass
