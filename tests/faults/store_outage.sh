#!/usr/bin/env bash
# Exactly-once across a store crash: the store is SIGKILLed mid-stream and kept down for at
# least HC_FAULT_OUTAGE_S (10) seconds; stage 2 must pause, retry with capped exponential
# back-off, keep its memory bounded, then catch up.
#
#   store_outage.sh HOTCOUNT STORE
#
# STORE redis, postgresql, dynamodb or cassandra. The store is a private server of this run
# (tests/harness/redis-ctl with appendonly yes, or pg-ctl), started in the work directory, so
# that killing it disturbs no other test of the suite (ctest -j2). dynamodb: the emulator
# (moto, with-servers --dynamodb) keeps its tables in memory, so it is not killed; stage 2
# reaches it through a private tests/harness/fault-proxy.py, and the outage is the proxy
# refusing connections (resetting the open ones); a second outage then black-holes them for
# HC_FAULT_HANG_S (12, above the store's 10 s request timeout): requests still reach the
# emulator, no reply comes back (every write ambiguous). Stage 2 must ride both out with the
# same pid, and the oracle reads the tables directly, not through the proxy. The store retries
# a refused call inside itself for ~4 s before stage 2 sees it fail, so there (outage
# HC_FAULT_OUTAGE_S 15) 2 failed batches and doubling back-offs are required, not the cap.
# Two stage-1 processes and one stage-2 process
# (statistics every second, so hotcount_consumer_lag follows closely); `hotcount produce` sends
# HC_FAULT_EVENTS (1 000 000) Zipfian events over HC_FAULT_SECONDS (25). Once stage 2 has stored
# a batch, `ctl kill` crashes the store; while it is down, stage 2's VmRSS is sampled every
# 200 ms; after the outage `ctl start` recovers it (same port and data). The run requires:
#   * stage 2 noticed: hotcount_store_batches_total{outcome="error"} >= 1 within 10 s, and at
#     least 3 retries (that counter) by the store's return;
#   * the back-off doubles from 100 ms and is capped: every back-off the log gives is <= 5000 ms
#     and 5000 is reached (the outage outlasts 100+200+...+3200 ms);
#   * it paused consumption: stage 1 committed partials during the outage (the growth of its
#     hotcount_partials_total), and stage 2's memory stayed flat (the lag gauge is only
#     reported: it freezes while partitions are paused);
#   * memory bounded: peak VmRSS during the outage <= VmRSS at the kill + HC_FAULT_RSS_MB (64);
#   * it caught up: hotcount_store_batches_total{outcome="commit"} grows after the store's
#     return, then the end-of-run checks of tests/faults/lib.sh (0 lost, 0 duplicated), with
#     the same stage-2 pid throughout;
#   * `hotcount status` names the cause: store_unreachable (and nothing else) during the outage,
#     healthy once the stream is counted, stage1_no_members (only) with stage 1 stopped then.
# Last line: store_outage STORE: N events, outage S s, R retries (max back-off B ms), RSS
# A -> P kB, L lost, D duplicated
#
# Environment: HC_FAULT_EVENTS, HC_FAULT_SECONDS, HC_FAULT_OUTAGE_S, HC_FAULT_RSS_MB,
# HC_FAULT_SEED, HC_FAULT_TIMEOUT (stream + 180 s), HC_FAULT_KEEP=1.
set -Eeuo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$here/lib.sh"
[ $# -eq 2 ] || usage
store_kind=$2
case "$store_kind" in redis | postgresql | dynamodb | cassandra) ;; *) usage ;; esac
harness=$(cd "$here/../harness" && pwd)

hcf_stream 1000000 25
outage_s=${HC_FAULT_OUTAGE_S:-10}
resume_s=60 # for the first batch after the store's return
if [ "$store_kind" = dynamodb ]; then # the emulator: 0.1-2 s per 100-action transaction
    outage_s=${HC_FAULT_OUTAGE_S:-15} resume_s=120
fi
rss_mb=${HC_FAULT_RSS_MB:-64}

ctl=()
proxy_pid='' ddb_direct_uri='' down_how=''
proxy_ctl() { # kill|start: the DynamoDB outage is the proxy refusing; blackhole|start: hanging
    case $1 in
    kill) kill -USR1 "$proxy_pid" ;;
    blackhole) kill -USR2 "$proxy_pid" ;;
    start) kill -HUP "$proxy_pid" ;;
    stop) return 0 ;;
    esac
}
private_store() { # a server of our own in $work/server
    if [ "$store_kind" = dynamodb ]; then
        ddb_direct_uri=${HC_TEST_DYNAMODB_URI:?run under tests/harness/with-servers --dynamodb}
        python3 "$harness/fault-proxy.py" --upstream "${ddb_direct_uri##*endpoint=http://}" \
            --port-file "$work/proxy.port" --state-file "$work/proxy.json" \
            --lifetime "${HC_FAULT_TIMEOUT:-$((seconds + 180))}" \
            2>"$work/proxy.log" &
        proxy_pid=$!
        live[$proxy_pid]=fault-proxy
        wait_for 10 0.05 test -s "$work/proxy.port" || fail "fault-proxy.py did not start"
        HC_TEST_DYNAMODB_URI="${ddb_direct_uri%%endpoint=*}endpoint=http://127.0.0.1:$(cat "$work/proxy.port")"
        export HC_TEST_DYNAMODB_URI
        ctl=(proxy_ctl)
        down_how='refused by the proxy'
        return 0
    fi
    if [ "$store_kind" = cassandra ]; then
        # The harness's node (a private one would cost another 15-35 s and 1.5 GB): the run
        # keeps to a keyspace of its own, and the node is started again whatever happens.
        ctl=("${HC_TEST_CASSANDRA_CTL:?run under tests/harness/with-servers --cassandra}")
        return 0
    fi
    if [ "$store_kind" = redis ]; then
        ctl=("$harness/redis-ctl" --dir "$work/server" --appendonly yes)
        "${ctl[@]}" start >/dev/null || fail "private redis-server did not start"
        HC_TEST_REDIS_URI=$("${ctl[@]}" uri)
    else
        chmod 755 "$work" # pg-ctl runs the server as the postgres user
        ctl=("$harness/pg-ctl" --dir "$work/server")
        "${ctl[@]}" start >/dev/null || fail "private PostgreSQL did not start"
        HC_TEST_PG_URI=$("${ctl[@]}" uri)
    fi
    export HC_TEST_REDIS_URI HC_TEST_PG_URI
}
private_store_stop() {
    if [ "$store_kind" = cassandra ]; then # the harness's node: leave it running
        "${ctl[@]}" status >/dev/null 2>&1 || "${ctl[@]}" start >/dev/null 2>&1 || true
        return 0
    fi
    [ ${#ctl[@]} -eq 0 ] || "${ctl[@]}" stop >/dev/null 2>&1 || true
    # the emulator is the harness's: a passed run drops its tables (h<run>_*) there
    [ -z "$ddb_direct_uri" ] || [ -z "$ok" ] || [ -n "${HC_FAULT_KEEP:-}" ] ||
        "$HC_TEST_DYNAMODB_CTL" drop-tables "h${run//-/_}_" >/dev/null 2>&1 || true
}
hcf_pre_store=private_store
hcf_on_exit=private_store_stop
hcf_private_store=1
HCF_PROPS=kafka.consumer.statistics.interval.ms=1000

HCF_TILING=1
hcf_init store_outage "$1" "$store_kind"
hcf_deadline "${HC_FAULT_TIMEOUT:-$((seconds + 180))}"

batches() { # outcome: stage 2's store batches with that outcome (metrics)
    sample_of s2-a hotcount_store_batches_total "{outcome=\"$1\"}"
}
batches_past() { # outcome count
    local n
    n=$(batches "$1") && [ "$n" -gt "$2" ]
}
upstream_partials() { # partials in stage 1's committed transactions, both processes (metrics)
    local a b
    a=$(sample_of s1-a hotcount_partials_total) && b=$(sample_of s1-b hotcount_partials_total) ||
        fail "stage 1 does not answer on its metrics port"
    echo $((a + b))
}
lag() { metric_sum "$(scrape s2-a)" "hotcount_consumer_lag{topic=\"f$run.partials\""; }

start_stage stage1 s1-a
start_stage stage1 s1-b
start_stage stage2 s2-a
wait_all_assigned s1-a s1-b s2-a
pid2=${pid_of[s2-a]}
say "store_outage $store_kind: $events events at $rate/s (~$seconds s), outage ${outage_s} s, seed $seed, run $run"
start_producer "$events" "$rate" "$seed"
wait_for 60 0.1 windowed_since s2-a 1 || fail "s2-a stored no batch within 60 s"
ours "$producer" || fail "the stream ended before the outage (raise HC_FAULT_SECONDS)"

rss0=$(vmrss_kb "$pid2")
lag0=$(lag)
errors0=$(batches error) || fail "s2-a does not answer on its metrics port"
"${ctl[@]}" kill >/dev/null
t_kill=$(date +%s%3N)
up0=$(upstream_partials)
say "store ${down_how:-SIGKILLed} at +$(elapsed) s (stage 2: VmRSS $rss0 kB, partials lag $lag0)"
wait_for 10 0.1 batches_past error "$errors0" || fail "s2-a counted no failed store batch within 10 s"
# no batch can commit while the store is down: the next commit is the resumption
commits0=$(batches commit) || fail "s2-a does not answer on its metrics port"
say "stage 2 noticed at +$(elapsed) s: $(batches error) failed store batches, $commits0 committed"
# The outage is a timed window; VmRSS is sampled through it.
peak=$rss0 lags=() n=0
while [ $(($(date +%s%3N) - t_kill)) -lt $((outage_s * 1000)) ]; do
    ours "$pid2" || fail "s2-a (pid $pid2) exited during the outage"
    r=$(vmrss_kb "$pid2")
    [ "$r" -le "$peak" ] || peak=$r
    if [ $((n++ % 5)) -eq 0 ]; then # the lag gauge changes once a second
        lags+=("$(lag)")
    fi
    sleep 0.2
done
# still down (after the sampling, which it would slow): `hotcount status` names the store
hcf_status "$work/status-outage.json"
hcf_status_says "$work/status-outage.json" store_unreachable ||
    fail "hotcount status with the store down: $(cat "$work/status-outage.json")"
up1=$(upstream_partials) # before the store is back: what stage 1 committed meanwhile
errors=$(batches error) || fail "s2-a does not answer on its metrics port"
errors=$((errors - errors0)) # failed during the outage
"${ctl[@]}" start >/dev/null || fail "the store did not come back"
down_ms=$(($(date +%s%3N) - t_kill))
say "store answers again at +$(elapsed) s, down $down_ms ms (stage 2: VmRSS peak $peak kB, partials lag each second: ${lags[*]})"
wait_for "$resume_s" 0.2 batches_past commit "$commits0" ||
    fail "s2-a did not resume within $resume_s s of the store's return"
say "stage 2 resumed at +$(elapsed) s: $(batches commit) store batches committed"

backoffs=$(event_field s2-a store_batch_failed backoff_ms)
max_backoff=$(sort -n <<<"$backoffs" | tail -n 1)
say "retries: $errors failed batches; back-offs (ms): $(tr '\n' ' ' <<<"$backoffs")"
if [ "$store_kind" = dynamodb ]; then # each failed call took the store's own ~4 s of retries
    [ "$errors" -ge 2 ] || fail "only $errors failed store batches during a ${outage_s} s outage"
    [ "${max_backoff:-0}" -ge 200 ] && [ "$max_backoff" -le 5000 ] ||
        fail "back-off did not double within the 5000 ms cap (max ${max_backoff:-none})"
else
    [ "$errors" -ge 3 ] || fail "only $errors failed store batches during a ${outage_s} s outage"
    [ "${max_backoff:-0}" -eq 5000 ] || fail "back-off not capped at 5000 ms (max $max_backoff)"
fi
# Input kept coming during the outage, yet stage 2's memory stayed flat (below): it paused.
# (hotcount_consumer_lag is no proof either way: librdkafka refreshes a partition's end
# offsets only from its fetches, so the gauge freezes while the partition is paused.)
upstream=$((up1 - up0))
say "stage 1 committed $upstream partials during the outage"
[ "$upstream" -gt 0 ] || fail "no partials were committed upstream during the outage (raise HC_FAULT_SECONDS)"
[ "$peak" -le $((rss0 + rss_mb * 1024)) ] ||
    fail "stage 2's VmRSS grew from $rss0 to $peak kB during the outage (bound +$rss_mb MiB)"
[ "${pid_of[s2-a]}" = "$pid2" ] || fail "stage 2 was restarted"

if [ "$store_kind" = dynamodb ]; then
    # The second outage: a store that hangs. The proxy still delivers the requests but drops
    # every reply, so each write may land while stage 2 cannot know (ambiguous); the store's
    # 10 s request timeout fires, and on the restore the held connections are reset: stage 2
    # must go on without exiting and with nothing counted twice (the end-of-run checks).
    hang_s=${HC_FAULT_HANG_S:-12}
    commits1=$(batches commit) || fail "s2-a does not answer on its metrics port"
    "${ctl[@]}" blackhole
    say "store black-holed at +$(elapsed) s for $hang_s s ($commits1 batches committed)"
    t_hang=$(date +%s%3N)
    while [ $(($(date +%s%3N) - t_hang)) -lt $((hang_s * 1000)) ]; do
        ours "$pid2" || fail "s2-a (pid $pid2) exited while the store hung"
        sleep 0.2
    done
    commits2=$(batches commit) || fail "s2-a does not answer on its metrics port"
    "${ctl[@]}" start
    proxy_state() { # field: from the proxy's state file (restores, held_reset, dropped_replies)
        python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' \
            "$work/proxy.json" "$1"
    }
    restored() { [ "$(proxy_state restores)" -ge 2 ]; }
    wait_for 10 0.1 restored || fail "fault-proxy.py did not restore"
    held=$(proxy_state held_reset)
    dropped=$(proxy_state dropped_replies)
    say "store answers again at +$(elapsed) s: $dropped reply chunks dropped, $held connections held at the end, $((commits2 - commits1)) batches committed meanwhile"
    [ "${dropped:-0}" -ge 1 ] ||
        fail "stage 2 sent nothing while the store hung (raise HC_FAULT_SECONDS)"
    wait_for "$resume_s" 0.2 batches_past commit "$(batches commit)" ||
        fail "s2-a did not commit within $resume_s s of the hung store's return"
    ours "$pid2" && [ "${pid_of[s2-a]}" = "$pid2" ] || fail "stage 2 was restarted"
    say "stage 2 committed again at +$(elapsed) s: $(batches commit) store batches"
    store="${store%%endpoint=*}endpoint=${ddb_direct_uri##*endpoint=}" # the oracle: direct
fi

producer_done
# hotcount status at rest: healthy with no lag at all (--max-lag 0) once both stages caught up;
# with stage 1 stopped (its input is all committed then), degraded naming stage1_no_members and
# nothing else. Both stage-1 processes get SIGTERM at once, as at the end of every run: one
# stopped alone would hand its partitions to the other first.
status_is() { hcf_status "$1" --max-lag 0 && hcf_status_says "$@" 2>/dev/null; }
wait_for 60 0.5 status_is "$work/status-rest.json" ||
    fail "hotcount status not healthy 60 s after the stream: $(cat "$work/status-rest.json")"
kill -TERM "${pid_of[s1-a]}" "${pid_of[s1-b]}"
for id in s1-a s1-b; do
    reap "${pid_of[$id]}"
    [ "$status" -eq 0 ] || fail "$id exited $status on SIGTERM, want 0"
    unset "pid_of[$id]"
done
wait_for 30 0.5 status_is "$work/status-down.json" stage1_no_members ||
    fail "hotcount status with stage 1 stopped: $(cat "$work/status-down.json")"
say "hotcount status: store_unreachable during the outage, healthy at rest, stage1_no_members with stage 1 stopped (+$(elapsed) s)"
hcf_finish "$events"
say "store_outage $store_kind: $events events, outage $((down_ms / 1000)).$((down_ms % 1000 / 100)) s, $errors retries (max back-off $max_backoff ms), RSS $rss0 -> $peak kB, $lost lost, $duplicated duplicated"
say "wall time $(elapsed) s"
hcf_pass
