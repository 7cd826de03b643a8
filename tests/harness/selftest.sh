#!/usr/bin/env bash
# selftest.sh: tests the harness itself against the real servers.
#   1. with-servers --all: Kafka lists its broker (kcat -L), redis answers PING, PostgreSQL
#      answers SELECT 1 in database hotcount; each server survives kill -9 + start and a
#      clean restart on the same port, keeping what it had committed (Kafka records,
#      PostgreSQL rows); afterwards none of their processes runs and the directory is gone.
#   2. A failing command: its status comes back, servers stopped, directory kept.
#   3. with-servers SIGKILLed (as a CTest timeout does): the watchdog stops its servers.
# Prints one line per check and "selftest: N passed, N failed"; exit 0 only if none failed.
set -euo pipefail

HARNESS=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
HC_PROG=selftest
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$HARNESS/lib.sh"

passed=0 failed=0

# check NAME CMD...: runs CMD, prints ok/FAIL NAME, counts it.
check() {
    local name=$1
    shift
    if "$@"; then
        printf 'ok   %s\n' "$name"
        passed=$((passed + 1))
    else
        printf 'FAIL %s\n' "$name"
        failed=$((failed + 1))
    fi
}

quiet() { "$@" >/dev/null; }

# ---------------------------------------------------------------------------------------
# Inside with-servers (selftest.sh --inner STATE): exercise each server; record every pid.

record() { # record NAME CTL: appends "NAME PID STARTTIME" of the server CTL runs
    local pid
    pid=$("$2" status) || return 0
    printf '%s %s %s\n' "$1" "$pid" "$(hc_proc_starttime "$pid")" >>"$STATE.pids"
}

kafka_lists_broker() {
    kcat -b "$HC_TEST_BROKERS" -L -m 5 2>/dev/null | grep -q "broker 1 at $HC_TEST_BROKERS"
}
kafka_count() { # kafka_count TOPIC: how many records the topic holds
    kcat -b "$HC_TEST_BROKERS" -C -t "$1" -o beginning -e -q -f 'x\n' 2>/dev/null | wc -l
}
kafka_has() { [ "$(kafka_count "$1")" = "$2" ]; }
kafka_produce() { # kafka_produce TOPIC N
    seq 1 "$2" | kcat -b "$HC_TEST_BROKERS" -P -t "$1" -X acks=all 2>/dev/null
}
kafka_down() { ! "$HC_TEST_KAFKA_CTL" status >/dev/null; }
same() { [ "$1" = "$2" ]; }

redis_pong() { [ "$(redis-cli -u "$HC_TEST_REDIS_URI" PING 2>/dev/null)" = PONG ]; }
redis_down() { ! "$HC_TEST_REDIS_CTL" status >/dev/null && ! redis_pong; }
redis_get_is() { [ "$(redis-cli -u "$HC_TEST_REDIS_URI" GET "$1" 2>/dev/null)" = "$2" ]; }

pg_q() { psql -X -qtA "$HC_TEST_PG_URI" -c "$1" 2>/dev/null; }
pg_select1() { [ "$(pg_q 'SELECT 1')" = 1 ]; }
pg_down() { ! "$HC_TEST_PG_CTL" status >/dev/null && ! pg_select1; }
pg_rows_are() { [ "$(pg_q 'SELECT string_agg(x::text, $$,$$ ORDER BY x) FROM selftest')" = "$1" ]; }

inner() {
    local t b0 topic=selftest-$$
    printf '%s\n' "$HC_TEST_SERVERS_DIR" >"$STATE.dir"
    record kafka "$HC_TEST_KAFKA_CTL"
    record redis "$HC_TEST_REDIS_CTL"
    record postgres "$HC_TEST_PG_CTL"

    # Kafka
    b0=$HC_TEST_BROKERS
    check "kafka: kcat -L lists broker 1 at $HC_TEST_BROKERS" kafka_lists_broker
    check "kafka: create topic $topic" quiet "$HC_TEST_KAFKA_CTL" topics --create \
        --topic "$topic" --partitions 2
    check "kafka: produce 100 records" kafka_produce "$topic" 100
    check "kafka: consume 100 records" kafka_has "$topic" 100
    check "kafka: kill -9" "$HC_TEST_KAFKA_CTL" kill
    check "kafka: down after kill" kafka_down
    t=$(hc_now_ms)
    check "kafka: start after kill" "$HC_TEST_KAFKA_CTL" start
    printf '     (start after kill -9: %s ms)\n' "$(($(hc_now_ms) - t))"
    record kafka "$HC_TEST_KAFKA_CTL"
    check "kafka: same address after restart" same "$("$HC_TEST_KAFKA_CTL" brokers)" "$b0"
    check "kafka: the 100 records survived the crash" kafka_has "$topic" 100
    check "kafka: produce 50 more" kafka_produce "$topic" 50
    t=$(hc_now_ms)
    check "kafka: clean restart" "$HC_TEST_KAFKA_CTL" restart
    printf '     (stop + start: %s ms)\n' "$(($(hc_now_ms) - t))"
    record kafka "$HC_TEST_KAFKA_CTL"
    check "kafka: 150 records after the restart" kafka_has "$topic" 150

    # redis
    check "redis: PING answers PONG" redis_pong
    check "redis: SET" quiet redis-cli -u "$HC_TEST_REDIS_URI" SET selftest 1
    check "redis: kill -9" "$HC_TEST_REDIS_CTL" kill
    check "redis: down after kill" redis_down
    check "redis: start after kill" "$HC_TEST_REDIS_CTL" start
    record redis "$HC_TEST_REDIS_CTL"
    check "redis: PING after restart on $HC_TEST_REDIS_URI" redis_pong
    check "redis: no persistence by default (key gone)" redis_get_is selftest ''
    check "redis: clean restart" "$HC_TEST_REDIS_CTL" restart
    record redis "$HC_TEST_REDIS_CTL"
    check "redis: PING after clean restart" redis_pong

    # PostgreSQL
    check "postgres: SELECT 1 on $HC_TEST_PG_URI" pg_select1
    check "postgres: create table, commit rows" pg_q \
        'CREATE TABLE selftest (x int); INSERT INTO selftest VALUES (1), (2)'
    check "postgres: kill -9 (postmaster and backends)" "$HC_TEST_PG_CTL" kill
    check "postgres: down after kill" pg_down
    check "postgres: start after kill (crash recovery)" "$HC_TEST_PG_CTL" start
    record postgres "$HC_TEST_PG_CTL"
    check "postgres: committed rows survived the crash" pg_rows_are 1,2
    check "postgres: insert" pg_q 'INSERT INTO selftest VALUES (3)'
    check "postgres: clean restart" "$HC_TEST_PG_CTL" restart
    record postgres "$HC_TEST_PG_CTL"
    check "postgres: rows after clean restart" pg_rows_are 1,2,3

    printf '%s %s\n' "$passed" "$failed" >"$STATE.counts"
    [ "$failed" -eq 0 ]
}

if [ "${1:-}" = --inner ]; then
    STATE=$2
    inner
    exit
fi

# ---------------------------------------------------------------------------------------
# Outside: run the inner part under with-servers, then check that nothing is left.

# none_running STATE.pids: no recorded server process runs any more.
none_running() {
    local name pid st bad=0
    while read -r name pid st; do
        if hc_pid_alive "$pid" "$st"; then
            printf '     %s (pid %s) still runs\n' "$name" "$pid"
            bad=1
        fi
    done <"$1"
    return "$bad"
}

# nothing_uses DIR: no process has DIR on its command line (redis rewrites its title, so
# the pid check above covers it).
nothing_uses() {
    local p found=0
    for p in /proc/[0-9]*; do
        [ "${p#/proc/}" != $$ ] || continue
        if tr '\0' ' ' 2>/dev/null <"$p/cmdline" | grep -qF -- "$1/"; then
            printf '     pid %s still uses %s: %s\n' "${p#/proc/}" "$1" \
                "$(tr '\0' ' ' 2>/dev/null <"$p/cmdline")"
            found=1
        fi
    done
    return "$found"
}

watchdog_done() {
    local i
    for ((i = 0; i < 100; i++)); do
        grep -q '^server-watchdog: done' "$1" 2>/dev/null && return 0
        sleep 0.1
    done
    return 1
}

not_there() { [ ! -e "$1" ]; }
is_dir() { [ -d "$1" ]; }

STATE=$(mktemp "${TMPDIR:-/tmp}/hc-selftest.XXXXXX")
trap 'rm -f "$STATE" "$STATE".*' EXIT
: >"$STATE.pids"

t0=$(hc_now_ms)
set +e
HC_HARNESS_QUIET='' "$HARNESS/with-servers" --all -- "$HARNESS/selftest.sh" --inner "$STATE"
rc=$?
set -e
if [ -s "$STATE.counts" ]; then
    read -r p f <"$STATE.counts"
    passed=$((passed + p)) failed=$((failed + f))
fi
check "with-servers --all ran the checks and exited 0 ($(($(hc_now_ms) - t0)) ms in all)" \
    [ "$rc" -eq 0 ]
dir=$(cat "$STATE.dir" 2>/dev/null || true)
check "no server process left running" none_running "$STATE.pids"
if [ -n "$dir" ]; then
    check "no process uses the servers' directory" nothing_uses "$dir"
    if [ "$rc" -eq 0 ]; then
        check "the servers' directory was deleted" not_there "$dir"
    fi
fi

# 2. A failing command.
set +e
# shellcheck disable=SC2016 # expanded by the inner shell
"$HARNESS/with-servers" --redis -- bash -c \
    'printf "%s\n" "$HC_TEST_SERVERS_DIR" >"$1.dir"; exit 7' \
    _ "$STATE" 2>/dev/null
rc=$?
set -e
check "a failing command's status (7) is with-servers' status" [ "$rc" -eq 7 ]
dir=$(cat "$STATE.dir" 2>/dev/null || true)
check "after a failure the directory is kept" is_dir "$dir"
if [ -d "$dir" ]; then
    check "after a failure redis is stopped" not_there "$dir/redis/pid"
    check "after a failure no process uses the directory" nothing_uses "$dir"
    rm -rf "$dir"
fi

# 3. with-servers SIGKILLed together with its command.
rm -f "$STATE.dir"
# shellcheck disable=SC2016 # expanded by the inner shell
"$HARNESS/with-servers" --redis -- bash -c \
    'printf "%s\n" "$HC_TEST_SERVERS_DIR" >"$1.dir.tmp"; printf "%s\n" "$$" >"$1.cmd"; mv "$1.dir.tmp" "$1.dir"; exec sleep 120' \
    _ "$STATE" 2>/dev/null &
ws=$!
for ((i = 0; i < 300; i++)); do
    [ -s "$STATE.dir" ] && break
    sleep 0.1
done
dir=$(cat "$STATE.dir" 2>/dev/null || true)
if [ -n "$dir" ]; then
    hc_pidfile_read "$dir/redis/pid" || true
    rpid=$HC_PID rstart=$HC_PID_START
    kill -KILL "$ws" "$(cat "$STATE.cmd")" 2>/dev/null || true
    wait "$ws" 2>/dev/null || true
    check "after SIGKILL of with-servers the watchdog stops redis within 10 s" \
        hc_wait_gone "$rpid" "$rstart" 10
    check "the watchdog logged it and finished" watchdog_done "$dir/watchdog.log"
    rm -rf "$dir"
else
    kill -KILL "$ws" 2>/dev/null || true
    wait "$ws" 2>/dev/null || true
    check "with-servers --redis started (for the SIGKILL test)" false
fi

printf 'selftest: %d passed, %d failed\n' "$passed" "$failed"
[ "$failed" -eq 0 ]
