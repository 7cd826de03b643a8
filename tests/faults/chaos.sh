#!/usr/bin/env bash
# Combined faults (issue 23): one seeded random schedule of every fault kind in one run while
# events flow, then exactly-once and liveness: every partition reaches its log end within a
# bound after the last fault heals.
#
#   chaos.sh HOTCOUNT STORE PROTOCOL [SECONDS]
#
# STORE sqlite, redis (appendonly yes, appendfsync everysec), redis_nopersist (no persistence:
# a killed Redis comes back empty and stage 2 rebuilds it from likes.partials), postgresql or
# dynamodb (moto's server, an emulator: run under tests/harness/with-servers --dynamodb), or
# cassandra (the harness's node, with-servers --cassandra: SIGKILLed and started again).
# PROTOCOL classic or consumer (group.protocol=consumer, KIP-848). SECONDS: the stream's and the
# fault phase's length (135 by default, the long variant; the short one is 45), one round of
# faults per 45 s. The broker and the store are private servers of the run
# (tests/harness/kafka-ctl, redis-ctl, pg-ctl in the work directory; for DynamoDB a private
# tests/harness/fault-proxy.py in front of the harness's emulator), so that killing them
# disturbs no other test.
#
# Two stage-1 and two stage-2 processes run (session.timeout.ms=6000, flush.ms=300) while
# `hotcount produce` sends HC_FAULT_EVENTS Zipfian events (5 % unlikes, 0.2 % malformed) over
# SECONDS. The schedule (tests/faults/chaos_schedule.py plan, from the seed alone) has per round:
#   * a SIGKILL of a stage-1 and of a stage-2 process, each aimed at work in flight (its metrics:
#     partitions held and input waiting for a flush, as kill_loop.sh), restarted at once with
#     the same instance.id (when every process of the stage is stopped, a zombie is killed);
#   * a SIGSTOPped stage-1 and stage-2 process ("zombie") held 8-10 s, past the 6 s session,
#     then SIGCONT;
#   * one stage scaled 2 -> 3 -> 1 -> 2 processes, the other stage in the next round; leavers
#     get SIGTERM and must exit 0 (or 5, stop.timeout.ms, when a broker or store outage
#     overlapped their stop); an instance id is reused only once its last process has exited;
#   * the broker SIGKILLed, down 1-3 s, started again (same port and data);
#   * the store down 9-14 s: Redis or PostgreSQL SIGKILLed and started again, SQLite's write
#     lock held by another connection (past stage 2's 5 s busy wait), the DynamoDB emulator's
#     proxy refusing connections or black-holing them (past the store's 10 s request timeout).
#     One stage-2 change always rebalances stage 2 inside the outage, after it has failed for a
#     while: a kill or a zombie whose session (6 s) ends inside it, or the scale-down.
# Spans overlap as the schedule has them. Every step is printed with its time and appended to
# WORK/schedule.log (ms since the fault phase began, fault, detail); WORK/plan is the schedule.
#
# After the last fault healed (every process resumed, the broker and the store answering, the
# scale-down's leavers gone) and the producer finished:
#   * liveness: `hotcount status --json` every 2 s (chaos_schedule.py watch): every partition of
#     both stages (stage 1's committed raw offsets, stage 2's stored partials offsets) must reach
#     its log end within the settle bound, and none may stand still while behind for longer than
#     the standstill bound; both bounds are derived from the progress bound and printed;
#   * hotcount's own detector, where the binary has it (partition.progress.ms in `hotcount
#     config`): every `partition_stalled` event of every incarnation's log is printed; one logged
#     later than the recovery margin after the healing fails the run, so does a stage exiting 4
#     (partition_stalled_exit) then, or `hotcount_partition_stalled` at 1 at the end. A stage
#     exiting 4 is restarted with the same instance.id, as a supervisor would;
#   * the checks of lib.sh's hcf_finish: verify exact, every stage exits 0 on SIGTERM, the oracle
#     exact, tally.py 0 lost and 0 duplicated, tiling.py exact; and tests/faults/txn_ids.sh on the
#     private broker: one transactional id per stage-1 instance.id.
# Last line: chaos STORE PROTOCOL: N events, seed S, F faults, settled in T s, L lost,
# D duplicated; then the wall time.
#
# Environment: HC_FAULT_SEED (the schedule, the picks and the producer; printed first and on
# failure), HC_FAULT_EVENTS (600 000; dynamodb 40 000), HC_FAULT_TIMEOUT (the whole run's bound;
# SECONDS + the settle bound + 120 s),
# HC_FAULT_KEEP=1, HC_FAULT_CHANGELOG=report (stale changelog totals only counted, not failed),
# HC_CHAOS_STOP_EXITS=report (a scale-down leaver exiting neither 0 nor 5 is reported, not failed),
# HC_CHAOS_PROGRESS_MS (20000: the progress bound, given to hotcount as
# partition.progress.ms when it has the key), HC_CHAOS_REPORT=FILE (appends one tab-separated
# line per run: date, result, store, protocol, seed, events, seconds, faults, settle, wall, work).
set -Eeuo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$here/lib.sh"
if [ $# -lt 3 ] || [ $# -gt 4 ]; then usage; fi
store_arg=$2
protocol=$3
case "$store_arg" in sqlite | redis | redis_nopersist | postgresql | dynamodb | cassandra) ;; *) usage ;; esac
case "$protocol" in classic | consumer) ;; *) usage ;; esac
[[ "${4:-135}" =~ ^[1-9][0-9]*$ ]] || usage
[ "${4:-135}" -ge 40 ] || { say "chaos: SECONDS must be at least 40 (one round of faults)"; exit 2; }
harness=$(cd "$here/../harness" && pwd)
schedule=$here/chaos_schedule.py

default_events=600000
# the emulator applies about one 100-action transaction per 0.1-2 s
[ "$store_arg" = dynamodb ] && default_events=40000
hcf_stream "$default_events" "${4:-135}"
export HC_GROUP_PROTOCOL=$protocol

# The bounds, all derived from the progress bound P (hotcount's partition.progress.ms, or the
# same value for the script's own watch when the binary predates it):
#   recovery margin M: what may pass after the healing before a partition moves again: a
#     rebalance waits for a killed member's session (6 s), a batch for the store's capped
#     back-off (5 s), a KIP-848 assignment for a heartbeat or two (4 s); on the DynamoDB
#     emulator also a black-holed request's 10 s timeout;
#   standstill bound P + M: no partition behind its log end may stand still longer (from the
#     healing or its last move): hotcount's own detector would have flagged it by then;
#   settle bound P + M + C: every partition at its log end, C for the backlog's catch-up
#     (10 s; 60 s on the emulator).
progress_ms=${HC_CHAOS_PROGRESS_MS:-20000}
margin_ms=15000 catchup_ms=10000
if [ "$store_arg" = dynamodb ]; then margin_ms=25000 catchup_ms=60000; fi
still_ms=$((progress_ms + margin_ms))
settle_ms=$((still_ms + catchup_ms))
detector='' detector_says='absent from this binary (the script watches alone)'
if grep -q '^partition\.progress\.ms=' <<<"$("$1" config 2>/dev/null)"; then
    detector=1
    "$1" config -X partition.progress.ms="$progress_ms" >/dev/null 2>&1 ||
        { say "chaos: hotcount refuses partition.progress.ms=$progress_ms"; exit 2; }
    HCF_PROPS="partition.progress.ms=$progress_ms"
    detector_says="on, partition.progress.ms=$progress_ms"
fi

# --- private servers: the broker, the store (hcf_init's hook, before the store is set up) ----
bctl='' sctl=() proxy_pid='' ddb_direct_uri='' db_file=''
private_servers() {
    # A kafka-ctl bound to $work/kafka, as with-servers makes them: txn_ids.sh calls it too.
    mkdir -p "$work/kafka"
    bctl=$work/kafka/ctl
    printf '#!/bin/sh\nexec %q --dir %q "$@"\n' "$harness/kafka-ctl" "$work/kafka" >"$bctl"
    chmod 755 "$bctl"
    run_waiting "$bctl" start >/dev/null || fail "the private Kafka broker did not start"
    HC_TEST_BROKERS=$("$bctl" brokers)
    # txn_ids.sh's registry of this run's stage-1 instance ids (lib.sh txn_record) goes here,
    # next to the broker that holds those ids: this script runs txn_ids.sh on it at the end. The
    # harness's registry only learns that the run was made (no id of it is on the harness's
    # broker), so that fault_txn_ids, which CTest brings along with any fault test, finds a run.
    txn_record run "g$run-stage1"
    HC_TEST_KAFKA_CTL=$bctl HC_TEST_SERVERS_DIR=$work
    export HC_TEST_BROKERS HC_TEST_KAFKA_CTL HC_TEST_SERVERS_DIR
    case "$store_arg" in
    redis | redis_nopersist)
        local aof=yes
        [ "$store_arg" = redis ] || aof=no
        sctl=("$harness/redis-ctl" --dir "$work/store" --appendonly "$aof")
        "${sctl[@]}" start >/dev/null || fail "the private redis-server did not start"
        HC_TEST_REDIS_URI=$("${sctl[@]}" uri)
        export HC_TEST_REDIS_URI
        ;;
    postgresql)
        chmod 755 "$work" # pg-ctl runs the server as the postgres user
        sctl=("$harness/pg-ctl" --dir "$work/store")
        "${sctl[@]}" start >/dev/null || fail "the private PostgreSQL did not start"
        HC_TEST_PG_URI=$("${sctl[@]}" uri)
        export HC_TEST_PG_URI
        ;;
    dynamodb)
        # moto keeps its tables in memory, so the outage is between stage 2 and it: a proxy
        ddb_direct_uri=${HC_TEST_DYNAMODB_URI:?run under tests/harness/with-servers --dynamodb}
        python3 "$harness/fault-proxy.py" --upstream "${ddb_direct_uri##*endpoint=http://}" \
            --port-file "$work/proxy.port" --state-file "$work/proxy.json" \
            --lifetime "$timeout_s" 2>"$work/proxy.log" &
        proxy_pid=$!
        live[$proxy_pid]=fault-proxy
        wait_for 10 0.05 test -s "$work/proxy.port" || fail "fault-proxy.py did not start"
        HC_TEST_DYNAMODB_URI="${ddb_direct_uri%%endpoint=*}endpoint=http://127.0.0.1:$(cat "$work/proxy.port")"
        export HC_TEST_DYNAMODB_URI
        ;;
    sqlite) db_file=$work/counts.db ;; # hc_store_uri's file
    cassandra)
        # The harness's node (a private one costs another 15-35 s and 1.5 GB; the run keeps to
        # a keyspace of its own): SIGKILLed and started again like the other servers.
        sctl=("${HC_TEST_CASSANDRA_CTL:?run under tests/harness/with-servers --cassandra}")
        ;;
    esac
}
private_servers_stop() {
    if [ "$store_arg" = cassandra ]; then # the harness's node: leave it running
        "${sctl[@]}" status >/dev/null 2>&1 || "${sctl[@]}" start >/dev/null 2>&1 || true
        sctl=()
    fi
    [ ${#sctl[@]} -eq 0 ] || "${sctl[@]}" stop >/dev/null 2>&1 || true
    # a crash costs nothing here: the broker's data goes with the work directory
    [ -z "$bctl" ] || "$bctl" kill >/dev/null 2>&1 || true
    [ -z "$ddb_direct_uri" ] || [ -z "$ok" ] || [ -n "${HC_FAULT_KEEP:-}" ] ||
        "$HC_TEST_DYNAMODB_CTL" drop-tables "h${run//-/_}_" >/dev/null 2>&1 || true
}

# --- the run's record: the seed first and on any failure; the report line ------------------
fail_reason=''
eval "lib_fail() $(declare -f fail | tail -n +2)"
skipped=''
fail() { # lib.sh's fail (which reports a run the broker's defect spoilt as skipped: exit 77),
    # remembering why for the report line
    [ -n "$fail_reason" ] || fail_reason="$*"
    ! hcf_broker_skipped_markers || skipped=1
    lib_fail "$@"
}
faults=() # one word group per injected fault, for the summary and the report
settled='-'
chaos_exit() {
    private_servers_stop
    local result=pass
    if [ -n "$skipped" ]; then
        result="SKIP: the broker skipped a transaction's markers after its restart; ${fail_reason}"
        say "chaos: SKIPPED: store $store_arg, protocol $protocol, seed $seed; replay: HC_FAULT_SEED=$seed HC_FAULT_EVENTS=$events tests/faults/chaos.sh HOTCOUNT $store_arg $protocol $seconds"
    elif [ -z "$ok" ]; then
        result="FAIL: ${fail_reason:-error or interruption (see the log)}"
        say "chaos: FAILED: store $store_arg, protocol $protocol, seed $seed; replay: HC_FAULT_SEED=$seed HC_FAULT_EVENTS=$events tests/faults/chaos.sh HOTCOUNT $store_arg $protocol $seconds"
        [ ! -s "$work/schedule.log" ] || { say "schedule so far (ms, fault, detail):"; cat "$work/schedule.log"; }
    fi
    [ -z "${HC_CHAOS_REPORT:-}" ] || printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' \
        "$(date -u +%FT%TZ)" "$result" "$store_arg" "$protocol" "$seed" "$events" "$seconds" \
        "$(IFS=';'; echo "${faults[*]:-}")" "$settled" "$(elapsed)" \
        "$([ -n "$ok" ] && [ -z "${HC_FAULT_KEEP:-}" ] && echo - || echo "$work")" \
        >>"$HC_CHAOS_REPORT"
}
hcf_pre_store=private_servers
hcf_on_exit=chaos_exit
hcf_private_store=1
HCF_TILING=1

timeout_s=${HC_FAULT_TIMEOUT:-$((seconds + settle_ms / 1000 + 120))}
# hcf_init requires a broker before its hook starts ours: the harness's is never used here
export HC_TEST_BROKERS=${HC_TEST_BROKERS:-private}
say "chaos $store_arg $protocol: seed $seed, $events events over $seconds s"
hcf_init chaos "$1" "$([ "$store_arg" = redis_nopersist ] && echo redis || echo "$store_arg")"
hcf_deadline "$timeout_s"

# --- the stages ----------------------------------------------------------------------------
declare -A stopped=() ends=() jobs=() retiring=() retiring_at=() retiring_outage=()
# Outages of the broker or the store: a stage stopped meanwhile may need more than its
# stop.timeout.ms (a call waits out its own bound) and then exits 5 by design (docs/OPERATIONS.md,
# stop.timeout.ms); a leaver whose stop overlapped one may exit 5, any other must exit 0.
store_down='' broker_down='' outages=0
phase0=$(date +%s%3N)
phase_ms() { echo $(($(date +%s%3N) - phase0)); }
secs() { printf '%d.%d' $(($1 / 1000)) $(($1 % 1000 / 100)); }
log_fault() { # fault detail...: a schedule line, printed and kept in the work directory
    local ms
    ms=$(phase_ms)
    say "chaos +$(elapsed) s (fault phase +$(secs "$ms") s): $1 ${*:2}"
    printf '%s\t%s\t%s\n' "$ms" "$1" "${*:2}" >>"$work/schedule.log"
}

# What an instance has in flight (its metrics, docs/EVENTS.md, as kill_loop.sh reads them):
# sets busy (1: it holds partitions and consumed input waits for a flush) and site.
probe() { # instance-id
    local id=$1 m s held open_ms
    busy='' site='no metrics answer'
    m=$(scrape_sure "$id") || return 0
    s=${kind_of[$id]#stage}
    held=$(metric "$m" "hotcount_assigned_partitions{stage=\"$s\"}")
    open_ms=$(awk -v n="hotcount_unflushed_input_seconds{stage=\"$s\"}" \
        '$1 == n { v = $2 } END { printf "%d\n", v * 1000 }' <<<"$m")
    if [ "$held" -gt 0 ] && [ "$open_ms" -gt 0 ]; then
        busy=1 site="in flight: window open for $open_ms ms, $held partitions"
        [ "$open_ms" -le "$flush_ms" ] || site="$site, probably flushing"
    else
        site="idle: $held partitions, no input waiting"
    fi
}
aim() { # instance-id tries: probe every 50 ms until it has work in flight (tries at most)
    local n
    probe "$1"
    for ((n = 0; n < $2 && !busy; n++)); do
        sleep 0.05
        probe "$1"
    done
}
candidates() { # stage: its running processes that are not stopped, in instance-id order
    local id p=${1#stage}
    for id in $(running); do
        [[ "$id" == s$p-* ]] && [ -z "${stopped[$id]:-}" ] && printf '%s\n' "$id"
    done
    return 0
}
count_of() { # stage: its running processes, stopped or not
    local id p=${1#stage} n=0
    for id in $(running); do [[ "$id" != s$p-* ]] || n=$((n + 1)); done
    echo "$n"
}
pick_of() { # stage pick: one candidate (pick modulo their number), or nothing; those that
    # hold partitions first: a process waiting outside the group (a stage 2 started while its
    # store is down waits for it before it joins) would take the fault without a rebalance
    local c=() h=() id
    mapfile -t c < <(candidates "$1")
    for id in "${c[@]}"; do [ "$(assigned "$id")" -eq 0 ] || h+=("$id"); done
    [ ${#h[@]} -eq 0 ] || c=("${h[@]}")
    [ ${#c[@]} -eq 0 ] || printf '%s\n' "${c[$2 % ${#c[@]}]}"
}

# --- the faults ----------------------------------------------------------------------------
do_kill() { # stage pick
    local st=$1 id victim
    id=$(pick_of "$st" "$2")
    if [ -z "$id" ]; then # every process of the stage is stopped: a zombie dies, then
        id=$(for x in "${!stopped[@]}"; do [[ "$x" != s${st#stage}-* ]] || echo "$x"; done | sort | head -n 1)
        [ -n "$id" ] || { log_fault kill "$st: no process (skipped)"; return 0; }
        unset "stopped[$id]" "ends[cont $id]"
        busy='' site='stopped (a zombie)'
    else
        aim "$id" 40 # up to 2 s for a window to open: between two windows a kill proves little
    fi
    victim=${pid_of[$id]}
    kill -KILL "$victim"
    reap "$victim"
    [ "$status" -eq 137 ] || fail "$id (pid $victim) exited $status before the SIGKILL landed"
    log_fault kill "$st $id pid $victim, $site; restarted with the same instance.id"
    faults+=("kill $id@$(secs "$(phase_ms)")${busy:+ in flight}")
    start_stage "$st" "$id"
}
do_stop() { # stage pick hold-ms
    local st=$1 id
    id=$(pick_of "$st" "$2")
    [ -n "$id" ] || { log_fault stop "$st: no process that is not stopped (skipped)"; return 0; }
    aim "$id" 20
    kill -STOP "${pid_of[$id]}"
    stopped[$id]=${pid_of[$id]}
    ends["cont $id"]=$(($(phase_ms) + $3))
    log_fault stop "$st $id pid ${pid_of[$id]} SIGSTOPped for $3 ms, $site"
    faults+=("stop $id@$(secs "$(phase_ms)") $(secs "$3")s")
}
do_cont() { # instance-id
    kill -CONT "${stopped[$1]}"
    log_fault cont "$1 pid ${stopped[$1]} SIGCONT"
    unset "stopped[$1]"
}
do_scale() { # stage up|down
    local st=$1 p=${1#stage} n l id c=()
    n=$(count_of "$st")
    if [ "$2" = up ]; then
        # an id whose last process is still stopping is not reused: its new stage 1 would
        # fence the old one mid-stop (exit 1), which no supervisor does to a live instance
        local busy_ids=" ${retiring[*]:-} "
        for l in a b c d e f; do
            id=s$p-$l
            [ -z "${pid_of[$id]:-}" ] && [[ "$busy_ids" != *" $id "* ]] || continue
            start_stage "$st" "$id"
            log_fault scale "$st up: $n -> $((n + 1)) processes ($id pid ${pid_of[$id]} joins)"
            faults+=("scale $st $n>$((n + 1))@$(secs "$(phase_ms)")")
            return 0
        done
        fail "$st: no free instance id to scale up with"
    fi
    # down to one process: the newest leave first (SIGTERM; each must exit 0, reaped later so
    # that the schedule goes on meanwhile); a stopped one does not get SIGTERM (it could not act
    # on it before its SIGCONT), so it may be the one that stays
    mapfile -t c < <(candidates "$st" | sort -r)
    local left=$n gone=()
    for id in "${c[@]}"; do
        [ "$left" -gt 1 ] || break
        kill -TERM "${pid_of[$id]}"
        retiring[${pid_of[$id]}]=$id
        retiring_at[${pid_of[$id]}]=$(date +%s)
        retiring_outage[${pid_of[$id]}]=$outages${store_down:+ store}${broker_down:+ broker}
        gone+=("$id")
        unset "pid_of[$id]"
        left=$((left - 1))
    done
    log_fault scale "$st down: $n -> $left processes (${gone[*]:-none} sent SIGTERM)"
    faults+=("scale $st $n>$left@$(secs "$(phase_ms)")")
}
do_broker() { # down-ms
    "$bctl" kill >/dev/null
    broker_down=1 outages=$((outages + 1))
    ends[broker]=$(($(phase_ms) + $1))
    log_fault broker "SIGKILLed, start again in $1 ms"
    faults+=("broker@$(secs "$(phase_ms)") down $(secs "$1")s")
}
broker_start() {
    "$bctl" start >/dev/null 2>&1 &
    jobs[$!]=broker
    live[$!]=broker-start
    broker_started=$(date +%s%3N)
    log_fault broker "started (waiting until it answers)"
}
do_store() { # mode ms
    store_down=1 outages=$((outages + 1))
    case $1 in
    kill)
        "${sctl[@]}" kill >/dev/null
        ends[store]=$(($(phase_ms) + $2))
        log_fault store "$store_arg SIGKILLed, start again in $2 ms"
        ;;
    lock) # SQLite: another connection holds the write lock; stage 2's busy wait is 5 s
        python3 -c '
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1], timeout=30, isolation_level=None)
db.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
time.sleep(int(sys.argv[2]) / 1000)
db.execute("ROLLBACK")' "$db_file" "$2" >"$work/lock.log" 2>&1 &
        jobs[$!]=store-lock
        live[$!]=sqlite-lock
        log_fault store "sqlite write lock held for $2 ms by another connection"
        ;;
    refuse | blackhole)
        if [ "$1" = refuse ]; then kill -USR1 "$proxy_pid"; else kill -USR2 "$proxy_pid"; fi
        ends[store]=$(($(phase_ms) + $2))
        log_fault store "dynamodb emulator's proxy: $1 for $2 ms"
        ;;
    esac
    faults+=("store $1@$(secs "$(phase_ms)") $(secs "$2")s")
}
store_back() {
    if [ "$proxy_pid" ]; then
        kill -HUP "$proxy_pid"
        store_down=''
        log_fault store "proxy restored"
        return 0
    fi
    "${sctl[@]}" start >/dev/null 2>&1 &
    jobs[$!]=store
    live[$!]=store-start
    log_fault store "$store_arg started again"
}

# Processes that ended by themselves, leavers of a scale-down, background starts. A stage that
# exits 4 (partition_stalled_exit) is restarted with the same instance.id, as a supervisor
# would; any other exit nothing asked for fails the run.
stall_exits=() bad_stops=()
check_children() {
    local id pid
    for id in $(running); do
        pid=${pid_of[$id]}
        ! ours "$pid" || continue
        reap "$pid"
        [ "$status" -eq 4 ] || fail "$id (pid $pid) exited $status by itself"
        stall_exits+=("$id $(date +%s%3N)")
        log_fault stall_exit "$id pid $pid exited 4 (partition_stalled_exit); restarted"
        unset "pid_of[$id]"
        start_stage "${kind_of[$id]}" "$id"
    done
    for pid in "${!retiring[@]}"; do
        if ours "$pid"; then
            [ $(($(date +%s) - retiring_at[$pid])) -le 60 ] ||
                fail "${retiring[$pid]} (pid $pid) still running 60 s after SIGTERM"
            continue
        fi
        reap "$pid"
        local at=${retiring_outage[$pid]} how='exited 0'
        if [ "$status" -eq 5 ] && { [ "${at#* }" != "$at" ] || [ "${at%% *}" != "$outages" ] ||
            [ -n "$store_down$broker_down" ]; }; then
            how='exited 5 (stop_timeout) with an outage during its stop: its bounded stop'
        elif [ "$status" -ne 0 ] && [ "${HC_CHAOS_STOP_EXITS:-}" = report ]; then
            how="exited $status on SIGTERM (reported only: HC_CHAOS_STOP_EXITS=report)"
            bad_stops+=("${retiring[$pid]}:$status")
            faults+=("leaver ${retiring[$pid]} exited $status")
        elif [ "$status" -ne 0 ]; then
            fail "${retiring[$pid]} (pid $pid) exited $status on SIGTERM, want 0"
        fi
        log_fault left "${retiring[$pid]} pid $pid $how"
        unset "retiring[$pid]" "retiring_at[$pid]" "retiring_outage[$pid]"
    done
    for pid in "${!jobs[@]}"; do
        ! ours "$pid" || continue
        reap "$pid"
        [ "$status" -eq 0 ] || fail "${jobs[$pid]}: its start failed ($status)"
        case ${jobs[$pid]} in
        broker)
            broker_down=''
            log_fault healed "broker answers, $(($(date +%s%3N) - broker_started)) ms after its start"
            ;;
        *)
            store_down=''
            log_fault healed "${jobs[$pid]} over"
            ;;
        esac
        unset "jobs[$pid]"
    done
}

# --- the run -------------------------------------------------------------------------------
run_waiting python3 "$schedule" plan --seed "$seed" --store "$store_arg" --seconds "$seconds" \
    >"$work/plan" || fail "chaos_schedule.py plan"
say "chaos $store_arg $protocol: $events events at $rate/s (~$seconds s), seed $seed, run $run, $(wc -l <"$work/plan") steps planned, hotcount's progress detector: $detector_says"
say "bounds: recovery margin M = $((margin_ms / 1000)) s, standstill P + M = $((still_ms / 1000)) s, settle P + M + catch-up = $((settle_ms / 1000)) s (P = $((progress_ms / 1000)) s)"
start_stage stage1 s1-a
start_stage stage1 s1-b
start_stage stage2 s2-a
start_stage stage2 s2-b
wait_all_assigned s1-a s1-b s2-a s2-b
start_producer "$events" "$rate" "$seed"
phase0=$(date +%s%3N)
mapfile -t plan <"$work/plan"
# A step that blocks (a kill aims for up to 2 s, a new process is waited for until it serves
# metrics) delays the next; the rest of the plan then slips by as much, so that the steps keep
# their planned distances. A step anchored to a round's store outage (@storeR+OFF) is due OFF
# ms after that round's store step ran, whatever came between (it must fall inside the outage).
declare -A done_=() store_at=()
slip=0 stores_run=0
next_due() { # sets step to the pending step due first (and due), or step='' when none is due
    local i d line
    step='' due=''
    for ((i = 0; i < ${#plan[@]}; i++)); do
        [ -z "${done_[$i]:-}" ] || continue
        line=${plan[i]}
        if [[ "$line" =~ @store([0-9]+)\+([0-9]+)$ ]]; then
            # due once its round's store step has run
            [ -n "${store_at[${BASH_REMATCH[1]}]:-}" ] || continue
            d=$((store_at[${BASH_REMATCH[1]}] + BASH_REMATCH[2]))
        else
            d=$((${line%% *} + slip))
        fi
        [ "$d" -le "$now" ] || continue
        if [ -z "$step" ] || [ "$d" -lt "$due" ]; then step=$i due=$d; fi
    done
}
run_ends() { # the spans whose end is due: SIGCONT, the broker's and the store's start
    local key
    for key in "${!ends[@]}"; do
        [ "${ends[$key]}" -le "$(phase_ms)" ] || continue
        unset "ends[$key]"
        case $key in
        cont\ *) do_cont "${key#cont }" ;;
        broker) broker_start ;;
        store) store_back ;;
        esac
    done
}
while [ ${#done_[@]} -lt ${#plan[@]} ] || [ ${#ends[@]} -gt 0 ] || [ ${#jobs[@]} -gt 0 ] ||
    [ ${#retiring[@]} -gt 0 ]; do
    now=$(phase_ms)
    next_due
    while [ -n "$step" ]; do
        line=${plan[step]}
        done_[$step]=1
        late=$((now - due))
        [[ "$line" == *@store* ]] || [ "$late" -le 150 ] || slip=$((slip + late))
        read -r _ what a b c _ <<<"$line"
        case $what in
        kill) do_kill "$a" "$b" ;;
        stop) do_stop "$a" "$b" "$c" ;;
        scale) do_scale "$a" "$b" ;;
        broker) do_broker "$a" ;;
        store)
            store_at[$stores_run]=$(phase_ms)
            stores_run=$((stores_run + 1))
            do_store "$a" "$b"
            ;;
        *) fail "unknown step in the plan: $line" ;;
        esac
        now=$(phase_ms)
        run_ends # a span's end is not held up by the steps
        next_due
    done
    run_ends
    check_children
    sleep 0.1
done
healed=$(date +%s%3N)
log_fault healed "every fault over: processes resumed, broker and store answer, leavers gone (the plan slipped $slip ms)"
# The stream may still flow; the stages keep being watched meanwhile.
while ours "$producer"; do
    check_children
    sleep 0.2
done
producer_done
since=$(date +%s%3N)

# --- liveness ------------------------------------------------------------------------------
stalled_gauges() { # every live stage's hotcount_partition_stalled samples at 1, one per line
    local id
    for id in $(running); do
        scrape "$id" | awk -v id="$id" '/^hotcount_partition_stalled\{/ && $2 + 0 >= 1 { print id ": " $1 }'
    done
    return 0
}
say "liveness: every partition at its log end within $((settle_ms / 1000)) s, none still for over $((still_ms / 1000)) s while behind (from +$(secs $((since - phase0))) s)"
python3 "$schedule" watch --hotcount "$hc" --config "$work/hotcount.properties" \
    --since-ms "$since" --still-ms "$still_ms" --settle-ms "$settle_ms" \
    --out "$work/watch.jsonl" >"$work/watch.out" 2>&1 &
watcher=$!
live[$watcher]=watch
late_gauges=''
while ours "$watcher"; do
    check_children
    if [ -n "$detector" ] && [ $(($(date +%s%3N) - healed)) -gt "$margin_ms" ]; then
        g=$(stalled_gauges)
        [ -z "$g" ] || late_gauges+="$g (+$(secs $(($(date +%s%3N) - healed))) s after the healing)"$'\n'
    fi
    sleep 1
done
reap "$watcher"
watch_status=$status
cat "$work/watch.out"
settled=$(sed -n 's/^settled \([0-9.]*\) s.*/\1/p' "$work/watch.out")
settled=${settled:--}

# hotcount's own detector: its events (every incarnation's log), its exits, its gauges
mapfile -t logs < <(ls "$work"/s[12]-?.*.log)
stall_status=0
python3 "$schedule" stalls --healed-ms "$healed" --grace-ms "$margin_ms" "${logs[@]}" \
    >"$work/stalls.out" || stall_status=$?
if [ -s "$work/stalls.out" ]; then cat "$work/stalls.out"; else say "no partition_stalled event in any stage log"; fi
late_exits=''
for x in "${stall_exits[@]}"; do
    [ $((${x#* } - healed)) -le "$margin_ms" ] || late_exits+="${x% *} "
done
[ -z "$late_gauges" ] || say "hotcount_partition_stalled at 1 after the healing:"$'\n'"$late_gauges"
[ "$watch_status" -eq 0 ] || fail "liveness: $(tail -n 1 "$work/watch.out")"
[ "$stall_status" -eq 0 ] || fail "liveness: partition_stalled logged more than $((margin_ms / 1000)) s after the faults healed (above)"
[ -z "$late_exits" ] || fail "liveness: partition_stalled_exit (status 4) after the healing: $late_exits"
[ -z "$late_gauges" ] || fail "liveness: hotcount_partition_stalled at 1 after the healing"
if [ -n "$detector" ]; then
    g=$(stalled_gauges)
    [ -z "$g" ] || fail "liveness: settled, yet hotcount_partition_stalled at 1: $g"
fi

# --- exactly once --------------------------------------------------------------------------
# the oracle reads the emulator's tables directly, not through the proxy
[ -z "$ddb_direct_uri" ] || store="${store%%endpoint=*}endpoint=${ddb_direct_uri##*endpoint=}"
# HC_FAULT_CHANGELOG=report only counts stale changelog totals (tally.py), as kill_loop.sh's,
# to tell a stale topic.counts apart from wrong counts while investigating; strict by default
HCF_CHANGELOG=${HC_FAULT_CHANGELOG:-strict}
HCF_FINISH_REPORT_ONLY=1
hcf_finish "$events"
txn_status=0
run_waiting "$here/txn_ids.sh" >"$work/txn_ids.log" 2>&1 || txn_status=$?
tail -n 2 "$work/txn_ids.log"

say "chaos $store_arg $protocol: $events events, seed $seed, ${#faults[@]} faults, settled in $settled s, $lost lost, $duplicated duplicated"
say "faults: $(IFS=';'; echo "${faults[*]}")"
[ ${#bad_stops[@]} -eq 0 ] || say "leavers that did not exit 0 (reported only): ${bad_stops[*]}"
say "wall time $(elapsed) s"
hcf_check_exact
[ "$txn_status" -eq 0 ] || fail "txn_ids.sh: transactional ids not one per stage-1 instance.id"
hcf_pass
