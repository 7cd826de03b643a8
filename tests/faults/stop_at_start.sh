#!/usr/bin/env bash
# Every shutdown path is bounded: a stage sent SIGTERM at any point of its start-up exits 0
# within a bound, also while its JoinGroup is in flight.
#
#   stop_at_start.sh HOTCOUNT [STAGES] [DELAYS]
#
# STAGES "stage1 stage2" by default; DELAYS (milliseconds after the process catches SIGTERM)
# "0 50 100 200 500 1000 2000" by default. For each stage one member of its group (the blocker) joins and
# takes every partition, then is SIGSTOPped: under the classic protocol the broker then holds the
# next member's JoinGroup until the blocker's session ends (45 s here), so the stage under test
# is stopped with its join in flight, as a rolling restart beside a stuck replica would see it.
# Before each attempt the blocker is let run until it holds the partitions again and is stopped
# anew, so its session is fresh. Under HC_GROUP_PROTOCOL=consumer the broker times the blocker's
# session (6 s) and nothing blocks the join; the stop is still timed.
#
# Each attempt starts `hotcount STAGE`, waits until it catches SIGTERM (its handler is installed
# right after the command line is read; /proc/PID/status shows it), sends SIGTERM after the
# delay counted from there, and must see it exit 0 within HC_STOP_BOUND_MS (default 15000: the
# stage loop's 5 s consumer-close bound, CLOSE_MS in src/stage/stage_loop.c, plus the other steps
# of a stop and a loaded machine's margin). The blocker's session (45 s) is far above the bound,
# so a close that waits for the join fails.
# Last line: stop_at_start: N stops, slowest S ms (bound B ms)
#
# Environment: HC_STOP_BOUND_MS, HC_GROUP_PROTOCOL, HC_GROUP_STATIC, HC_FAULT_TIMEOUT (default
# 300), HC_FAULT_KEEP=1.
set -Eeuo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$here/lib.sh"
if [ $# -lt 1 ] || [ $# -gt 3 ]; then usage; fi
read -r -a stages <<<"${2:-stage1 stage2}"
read -r -a delays <<<"${3:-0 50 100 200 500 1000 2000}"
bound=${HC_STOP_BOUND_MS:-15000}

hcf_init stop_at_start "$1" sqlite
hcf_deadline "${HC_FAULT_TIMEOUT:-300}"

blocker_props=()
[ "${HC_GROUP_PROTOCOL:-classic}" = consumer ] ||
    blocker_props=(-X kafka.consumer.session.timeout.ms=45000 -X kafka.consumer.heartbeat.interval.ms=1000)

# Lets the blocker run until it holds partitions (it rejoins after the last attempt's member
# left), then stops it: its session starts afresh.
freeze() { # blocker-id
    kill -CONT "${pid_of[$1]}"
    wait_assigned "$1" 60 || fail "blocker $1 holds no partitions 60 s after its start"
    kill -STOP "${pid_of[$1]}"
}

stops=0
slowest=0
for st in "${stages[@]}"; do
    case "$st" in stage1 | stage2) ;; *) usage ;; esac
    blk=blk-$st
    start_stage "$st" "$blk" "${blocker_props[@]}"
    for d in "${delays[@]}"; do
        [[ "$d" =~ ^[0-9]+$ ]] || usage
        freeze "$blk"
        id=t-$st-$d
        log=$work/$id.log
        [ "$st" != stage1 ] || txn_record stage1 "g$run-stage1" "$id" # for txn_ids.sh
        "$hc" "$st" "${cfg[@]}" -X instance.id="$id" -X metrics.listen= -X log.level=info \
            -X log.format=json 2>"$log" &
        pid=$!
        live[$pid]="$st $id"
        log_of[$id]=$log
        # "its start" is the moment hotcount catches SIGTERM: a signal sent sooner, while the
        # loader still runs, meets the default action (status 143) before any code of ours
        wait_catching_term "$pid" "$hc" || { reap "$pid"; fail "$id exited $status before it caught SIGTERM"; }
        started=$(date +%s%3N)
        # the delay is the point of the test: where in its start-up the stage is stopped
        sleep "$(printf '%d.%03d' $((d / 1000)) $((d % 1000)))"
        sent=$(date +%s%3N)
        ours "$pid" || { reap "$pid"; fail "$id exited $status before its SIGTERM (+$((sent - started)) ms)"; }
        kill -TERM "$pid"
        # bounded: a stage that hangs fails here, at the bound, not at the run's deadline
        limit=$((sent + bound))
        while ours "$pid" && [ "$(date +%s%3N)" -le "$limit" ]; do sleep 0.05; done
        ours "$pid" && fail "$id still runs $bound ms after SIGTERM at +$((sent - started)) ms"
        reap "$pid"
        took=$(($(date +%s%3N) - sent))
        [ "$status" -eq 0 ] || fail "$id exited $status on SIGTERM $d ms after its start, want 0"
        [ "$took" -le "$bound" ] ||
            fail "$id took $took ms to exit after SIGTERM at +$((sent - started)) ms (bound $bound ms)"
        say "$st stopped at +$((sent - started)) ms: exited 0 in $took ms"
        stops=$((stops + 1))
        [ "$took" -le "$slowest" ] || slowest=$took
        unset "log_of[$id]"
    done
    kill -CONT "${pid_of[$blk]}"
    stop_stage "$blk"
done

say "stop_at_start: $stops stops, slowest $slowest ms (bound $bound ms)"
hcf_pass
