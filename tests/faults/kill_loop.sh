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
# tests/faults/tally.py prints the lost and double-counted likes (both must be 0). Last line:
#   kill_loop STAGE STORE: N events, K kills (F in flight), L lost, D duplicated
#
# Environment: HC_FAULT_EVENTS, HC_FAULT_SECONDS (stream length), HC_FAULT_RATE (overrides the
# rate derived from both), HC_FAULT_SEED (kill delays and producer; printed), HC_FAULT_TIMEOUT
# (the whole run's bound, default stream + 120 s), HC_FAULT_KEEP=1 (keep the work directory),
# HC_FAULT_STRICT_CHANGELOG=1 (also check topic.counts when stage 2 is the one killed).
# The work directory with every process's log is kept and printed when the run fails.
set -Eeuo pipefail

usage() {
    sed -n '2,/^set -/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2
    exit 2
}
if [ $# -lt 3 ] || [ $# -gt 4 ]; then usage; fi
hc=$(realpath "$1")
stage=$2
store_kind=$3
kills=${4:-10}
case "$stage" in stage1 | stage2) ;; *) usage ;; esac
case "$store_kind" in sqlite | redis | postgresql) ;; *) usage ;; esac
[[ "$kills" =~ ^[1-9][0-9]*$ ]] || usage
here=$(cd "$(dirname "$0")" && pwd)
: "${HC_TEST_BROKERS:?run under tests/harness/with-servers --kafka}"

events=${HC_FAULT_EVENTS:-1000000}
seconds=${HC_FAULT_SECONDS:-$((7 * kills + 8))}
rate=${HC_FAULT_RATE:-$(((events + seconds - 1) / seconds))}
seed=${HC_FAULT_SEED:-$(((RANDOM << 15 | RANDOM) + 1))}
timeout_s=${HC_FAULT_TIMEOUT:-$((seconds + 120))}
partials_partitions=8
flush_ms=300
RANDOM=$seed

run=$(date +%s%N | tail -c 9)-$$
schema=hc_${run//-/_}
work=$(mktemp -d "${TMPDIR:-/tmp}/hc-kill-loop.XXXXXX")
t0=$(date +%s%3N)
ok='' # set when every check passed

say() { printf '%s\n' "$*"; }
elapsed() { # seconds since the start, one decimal
    local ms=$(($(date +%s%3N) - t0))
    printf '%d.%d' $((ms / 1000)) $((ms % 1000 / 100))
}

# --- processes: only ever signal children of this script that have not been reaped ----------
declare -A live=()     # pid -> what, for every child not yet waited for
declare -A pid_of=()   # instance id -> pid
declare -A log_of=()   # instance id -> current log file
declare -A url_of=()   # instance id -> metrics URL
declare -A kind_of=()  # instance id -> stage1 / stage2
declare -A gen_of=()   # instance id -> incarnation number
guard=''

# bash reaps exited children by itself and keeps their status for `wait`, so an exited child's
# pid may already belong to someone else: signal a pid only while it is still our child.
ours() { # pid
    [ "$(ps -o ppid= -p "$1" 2>/dev/null | tr -d ' ')" = "$$" ]
}
reap() { # pid: waits for it, forgets it, sets $status
    status=0
    wait "$1" 2>/dev/null || status=$?
    unset "live[$1]"
}

# Runs a command in the background and waits for it, so that the deadline's TERM interrupts
# the wait at once (bash runs traps only between foreground commands).
run_waiting() {
    "$@" &
    local pid=$!
    live[$pid]="$1"
    reap "$pid"
    return "$status"
}

cleanup() {
    local rc=$? pid n
    trap - EXIT TERM INT HUP
    [ -z "$guard" ] || { kill -TERM "$guard" 2>/dev/null || true; wait "$guard" 2>/dev/null || true; }
    for pid in "${!live[@]}"; do
        ! ours "$pid" || kill -TERM "$pid" 2>/dev/null || true
    done
    # up to 15 s for a clean exit, then SIGKILL whatever of ours is left
    for ((n = 0; n < 150; n++)); do
        for pid in "${!live[@]}"; do
            ours "$pid" || reap "$pid"
        done
        [ ${#live[@]} -gt 0 ] || break
        sleep 0.1
    done
    for pid in "${!live[@]}"; do
        ! ours "$pid" || kill -KILL "$pid" 2>/dev/null || true
        reap "$pid"
    done
    if [ -n "$ok" ] && [ -z "${HC_FAULT_KEEP:-}" ]; then
        case "$store_kind" in
        postgresql) psql -q "$HC_TEST_PG_URI" -c "DROP SCHEMA IF EXISTS $schema CASCADE" >/dev/null 2>&1 || true ;;
        redis)
            redis-cli -u "$HC_TEST_REDIS_URI" --scan --pattern "f$run:*" |
                xargs -r -n 1000 redis-cli -u "$HC_TEST_REDIS_URI" del >/dev/null 2>&1 || true
            redis-cli -u "$HC_TEST_REDIS_URI" del "hotcount:offsets:g$run-stage2" >/dev/null 2>&1 || true
            ;;
        esac
        rm -rf "$work"
    else
        say "kill_loop: work directory with every log kept: $work"
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'say "FAIL: unexpected status $? at line $LINENO: $BASH_COMMAND"' ERR
trap 'say "FAIL: interrupted"; exit 130' INT HUP
trap 'say "FAIL: terminated"; exit 143' TERM
trap 'say "FAIL: no result within HC_FAULT_TIMEOUT=${timeout_s} s"; exit 1' ALRM

# The deadline: SIGALRM to this script, which then stops everything it started.
(
    trap 'kill -TERM "$s" 2>/dev/null; exit 0' TERM
    sleep "$timeout_s" &
    s=$!
    wait "$s" && kill -ALRM $$
) &
guard=$!

fail() {
    say "FAIL: $*"
    local id
    for id in "${!log_of[@]}"; do
        say "--- last lines of $id (${log_of[$id]}):"
        grep -v 'committed window\|stored batch\| is hot\|cooled down' "${log_of[$id]}" | tail -n 15 || true
    done
    exit 1
}

# --- store and configuration ---------------------------------------------------------------
case "$store_kind" in
sqlite) store="sqlite:$work/counts.db" ;;
redis) store="${HC_TEST_REDIS_URI:?run under tests/harness/with-servers --redis}" ;;
postgresql)
    psql -q -v ON_ERROR_STOP=1 "${HC_TEST_PG_URI:?run under tests/harness/with-servers --postgres}" \
        -c "CREATE SCHEMA $schema"
    store="$HC_TEST_PG_URI?options=-csearch_path%3D$schema"
    ;;
esac

cat >"$work/hotcount.properties" <<PROPS
brokers=$HC_TEST_BROKERS
topic.raw=f$run.raw
topic.partials=f$run.partials
topic.dlq=f$run.dlq
topic.counts=f$run.counts
topic.partials.partitions=$partials_partitions
group.stage1=g$run-stage1
group.stage2=g$run-stage2
store=$store
store.redis.prefix=f$run:
flush.ms=$flush_ms
kafka.consumer.session.timeout.ms=6000
kafka.consumer.heartbeat.interval.ms=1000
log.level=warn
PROPS
cfg=(-c "$work/hotcount.properties")
run_waiting "$hc" init "${cfg[@]}" >/dev/null || fail "hotcount init"

# --- stages --------------------------------------------------------------------------------
start_stage() { # kind instance-id
    local kind=$1 id=$2 log port='' n
    gen_of[$id]=$((${gen_of[$id]:-0} + 1))
    log=$work/$id.${gen_of[$id]}.log
    "$hc" "$kind" "${cfg[@]}" -X instance.id="$id" -X metrics.listen=127.0.0.1:0 \
        -X log.level=info 2>"$log" &
    pid_of[$id]=$!
    live[$!]="$kind $id"
    log_of[$id]=$log
    kind_of[$id]=$kind
    # metrics.listen port 0 picks a free port; the stage logs which. The log file appears only
    # once the background shell has run its redirection (later still under ASan): wait for it.
    for ((n = 0; n < 400; n++)); do
        port=$(sed -n 's/.*metrics on http:.* (port \([0-9]*\)).*/\1/p' "$log" 2>/dev/null |
            head -n 1)
        [ -z "$port" ] || break
        ours "${pid_of[$id]}" || fail "$id exited at start"
        sleep 0.05
    done
    [ -n "$port" ] || fail "$id logged no metrics port"
    url_of[$id]=http://127.0.0.1:$port/metrics
}

scrape() { # instance-id: the metrics text, or nothing
    curl -s --max-time 2 "${url_of[$1]}" 2>/dev/null || true
}
metric() { # text name-with-labels: the sample's value as an integer (0 when absent)
    awk -v n="$2" '$1 == n { v = $2 } END { printf "%d\n", v + 0 }' <<<"$1"
}
assigned() { # instance-id: partitions its stage holds now
    local s=1
    [ "${kind_of[$1]}" = stage2 ] && s=2
    metric "$(scrape "$1")" "hotcount_assigned_partitions{stage=\"$s\"}"
}
wait_assigned() { # instance-id seconds: until it holds partitions; status 1 on timeout
    local n
    for ((n = 0; n < $2 * 5; n++)); do
        ours "${pid_of[$1]}" || fail "$1 (pid ${pid_of[$1]}) exited"
        [ "$(assigned "$1")" -gt 0 ] && return 0
        sleep 0.2
    done
    return 1
}
iso_ms() { # epoch ms -> the stages' log timestamp format (UTC, ms)
    date -u -d "@$(($1 / 1000)).$(printf '%03d' $(($1 % 1000)))" +%Y-%m-%dT%H:%M:%S.%3NZ
}
ms_of() { # log timestamp -> epoch ms
    date -u -d "$1" +%s%3N
}
ago() { # log timestamp: "N ms before" now (0 when the line was logged after the probe began)
    local d=$(($(date +%s%3N) - $(ms_of "$1")))
    printf '%d ms before' $((d < 0 ? 0 : d))
}

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
        # partials stage 1 committed after this instance's last stored batch (or assignment),
        # more than 50 ms ago (time to fetch them): they are in its open window, or on the way
        [ -n "$last" ] || last=0000
        partials=$(cat "$work"/s1-?.*.log | awk -v a="$last" -v b="$(iso_ms $((now - 50)))" '
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
for id in s1-a s1-b s2-a s2-b; do
    wait_assigned "$id" 60 || fail "$id holds no partitions 60 s after its start"
done
say "kill_loop $stage $store_kind: $events events at $rate/s (~$seconds s), $kills kills, seed $seed, run $run"

"$hc" produce "${cfg[@]}" --events "$events" --rate "$rate" --posts 100000 --zipf 1.1 \
    --unlike-ratio 0.05 --invalid-ratio 0.002 --seed "$seed" >"$work/produce.log" 2>&1 &
producer=$!
live[$producer]=produce

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

reap "$producer"
[ "$status" -eq 0 ] || { cat "$work/produce.log"; fail "hotcount produce exited $status"; }
say "producer done at +$(elapsed) s: $(tail -n 1 "$work/produce.log")"

# --- the checks ----------------------------------------------------------------------------
run_waiting "$hc" verify "${cfg[@]}" --timeout 300 >"$work/verify.log" 2>"$work/verify.err" || true
tail -n 3 "$work/verify.log"
grep -q '^verify: exact' "$work/verify.log" || fail "hotcount verify did not report exact counts"
say "verify exact at +$(elapsed) s"

for id in s1-a s1-b s2-a s2-b; do
    kill -TERM "${pid_of[$id]}"
done
for id in s1-a s1-b s2-a s2-b; do
    reap "${pid_of[$id]}"
    [ "$status" -eq 0 ] || fail "$id exited $status on SIGTERM, want 0"
done
say "every stage exited 0 on SIGTERM"

run_waiting "$hc" get --all "${cfg[@]}" >"$work/store.tsv" || fail "hotcount get --all"
oracle_status=0
# The changelog topic must match the store exactly unless stage 2 was killed: a batch committed
# to the store whose changelog records were not yet delivered stays stale until its posts change
# again (documented in the README); then tally.py only reports how many posts are stale.
changelog=(--counts-topic "f$run.counts")
tally_changelog=()
if [ "$stage" = stage2 ] && [ -z "${HC_FAULT_STRICT_CHANGELOG:-}" ]; then
    tally_changelog=("${changelog[@]}")
    changelog=()
fi
run_waiting python3 "$here/../oracle/oracle.py" --brokers "$HC_TEST_BROKERS" --raw "f$run.raw" \
    --dlq "f$run.dlq" --group "g$run-stage1" --store-dump "$work/store.tsv" \
    --min-events "$events" "${changelog[@]}" || oracle_status=$?
tally_status=0
run_waiting python3 "$here/tally.py" --brokers "$HC_TEST_BROKERS" --raw "f$run.raw" \
    --store-dump "$work/store.tsv" "${tally_changelog[@]}" >"$work/tally.log" || tally_status=$?
cat "$work/tally.log"
lost=$(sed -n 's/^tally: lost=\([0-9]*\) .*/\1/p' "$work/tally.log")
duplicated=$(sed -n 's/^tally: .*duplicated=\([0-9]*\) .*/\1/p' "$work/tally.log")

say "kill_loop $stage $store_kind: $events events, $kills kills ($in_flight in flight), ${lost:-?} lost, ${duplicated:-?} duplicated"
say "wall time $(elapsed) s"
[ "$oracle_status" -eq 0 ] || fail "the oracle found the counts inexact"
[ "$tally_status" -eq 0 ] || fail "tally: likes lost or double-counted"
[ $((2 * in_flight)) -ge "$kills" ] ||
    fail "only $in_flight of $kills kills hit work in flight (want at least half)"
ok=1
