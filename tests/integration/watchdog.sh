#!/usr/bin/env bash
# The two halves of "a stage never hangs" (include/base/hotcount/timeouts.h):
#
# 1. A store that stops answering (redis-server under SIGSTOP, longer than Redis's command bound)
#    is an outage, not a hang: stage 2's store call returns a transient error within its bound,
#    the stage backs off (event store_batch_failed) and keeps running, and once the store
#    answers again every like is counted exactly once. The watchdog must not fire.
# 2. A call that never returns (the hang_store mutant: the third store batch blocks forever, as
#    a library ignoring its own timeout would) is ended by the watchdog: status 3 within
#    watchdog.ms (the smallest value the configuration check allows over the longest bounded
#    call), event watchdog_expired; a restarted product stage 2 then counts exactly once.
#
#   watchdog.sh HOTCOUNT [--build-root DIR | --no-mutant]
#     (under tests/harness/with-servers --kafka --redis)
# --build-root: where the mutant is built (DIR/build-mutant-hang_store); --no-mutant skips half 2
# (the sanitizer build: the mutant would be a plain build and add nothing there).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
hc=$(realpath "${1:?usage: watchdog.sh HOTCOUNT [--build-root DIR | --no-mutant]}")
shift
root="" mutant=1
case "${1:-}" in
--build-root) root=$(realpath "${2:?}") ;;
--no-mutant) mutant=0 ;;
"") root=$(dirname "$hc") ;;
*) echo "usage: watchdog.sh HOTCOUNT [--build-root DIR | --no-mutant]" >&2; exit 2 ;;
esac
: "${HC_TEST_BROKERS:?run under tests/harness/with-servers --kafka --redis}"
: "${HC_TEST_REDIS_URI:?}" "${HC_TEST_REDIS_CTL:?}"
run=$(date +%s%N | tail -c 9)-$$
work=$(mktemp -d)
pids=()
cleanup() {
    "$HC_TEST_REDIS_CTL" resume >/dev/null 2>&1 || true
    for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; for f in "$work"/*.log; do echo "--- $f"; tail -20 "$f"; done; exit 1; }
# has_event FILE NAME: a JSON log line of that event (docs/EVENTS.md)
has_event() { grep -q "\"event\":\"$2\"" "$1"; }

# until the store holds a count; bounded, and a stage 2 that exited is a failure
wait_first_batch() { # pid config...
    local pid=$1 deadline=$((SECONDS + 60))
    shift
    until [ -n "$("$hc" top -n 1 "$@" 2>/dev/null)" ]; do
        kill -0 "$pid" 2>/dev/null || fail "stage 2 exited before its first batch"
        [ $SECONDS -le $deadline ] || fail "stage 2 stored nothing within 60 s"
        sleep 0.2
    done
}

common=(-X brokers="$HC_TEST_BROKERS" -X flush.ms=300 -X metrics.listen= -X log.level=warn
        -X log.format=json -X kafka.consumer.session.timeout.ms=6000
        -X kafka.consumer.heartbeat.interval.ms=1000)

# --- 1: a frozen store is ridden out -----------------------------------------------------------
cfg=("${common[@]}" -X topic.raw="w$run.raw" -X topic.partials="w$run.partials"
     -X topic.dlq="w$run.dlq" -X group.stage1="w$run-1" -X group.stage2="w$run-2"
     -X store="$HC_TEST_REDIS_URI" -X store.redis.prefix="w$run:")
"$hc" init "${cfg[@]}" >/dev/null
"$hc" stage1 "${cfg[@]}" -X instance.id=w1 2>"$work/s1.log" &
pids+=($!)
"$hc" stage2 "${cfg[@]}" -X instance.id=w2 2>"$work/s2.log" &
s2=$!
pids+=("$s2")
"$hc" produce "${cfg[@]}" --events 60000 --rate 6000 --posts 1000 >/dev/null &
producer=$!
pids+=("$producer")
wait_first_batch "$s2" "${cfg[@]}"
"$HC_TEST_REDIS_CTL" pause
# longer than Redis's command bound, so at least one store call must time out and be retried
deadline=$((SECONDS + 60))
until has_event "$work/s2.log" store_batch_failed; do
    kill -0 "$s2" 2>/dev/null || fail "stage 2 exited while its store was frozen"
    [ $SECONDS -le $deadline ] || fail "no store_batch_failed event within 60 s of the freeze"
    sleep 0.5
done
sleep 2 # a second retry while frozen: still running
"$HC_TEST_REDIS_CTL" resume
kill -0 "$s2" 2>/dev/null || fail "stage 2 exited while its store was frozen"
wait "$producer"
"$hc" verify "${cfg[@]}" --timeout 120 | tail -1 | tee "$work/verify1"
grep -q '^verify: exact' "$work/verify1" || fail "not exact after the frozen store"
kill -0 "$s2" 2>/dev/null || fail "stage 2 exited"
! has_event "$work/s2.log" watchdog_expired || fail "the watchdog fired on a bounded call"
echo "frozen store: stage 2 rode it out and counted exactly"
for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
pids=()

[ "$mutant" -eq 1 ] || exit 0

# --- 2: a call that never returns is ended by the watchdog -------------------------------------
dir=$root/build-mutant-hang_store
gen=()
[ -f "$dir/CMakeCache.txt" ] || ! command -v ninja >/dev/null || gen=(-G Ninja)
mkdir -p "$dir"
cmake -S "$here/../.." -B "$dir" "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DHC_MUTANT=hang_store >"$dir/configure.log" 2>&1 || { cat "$dir/configure.log"; exit 1; }
cmake --build "$dir" --target hotcount -j"$(nproc)" >/dev/null || fail "building the mutant"
hang=$dir/hotcount

# SQLite: the store with the shortest bound, so the smallest watchdog the check allows is short
cfg=("${common[@]}" -X topic.raw="h$run.raw" -X topic.partials="h$run.partials"
     -X topic.dlq="h$run.dlq" -X group.stage1="h$run-1" -X group.stage2="h$run-2"
     -X store="sqlite:$work/hang.db")
# the smallest watchdog.ms the configuration accepts, found by asking it (exit 2 below that)
lo=1000 hi=600000
"$hc" stage2 --check-config "${cfg[@]}" -X watchdog.ms=$hi >/dev/null 2>&1 ||
    fail "watchdog.ms=$hi refused"
while [ $((hi - lo)) -gt 500 ]; do
    mid=$(((lo + hi) / 2))
    if "$hc" stage2 --check-config "${cfg[@]}" -X watchdog.ms=$mid >/dev/null 2>&1; then
        hi=$mid
    else
        lo=$mid
    fi
done
wd=$hi
"$hc" init "${cfg[@]}" >/dev/null
"$hc" stage1 "${cfg[@]}" -X instance.id=h1 2>"$work/h1.log" &
pids+=($!)
"$hang" stage2 "${cfg[@]}" -X instance.id=h2 -X watchdog.ms=$wd 2>"$work/h2.log" &
s2=$!
pids+=("$s2")
"$hc" produce "${cfg[@]}" --events 40000 --rate 4000 --posts 1000 >/dev/null &
producer=$!
pids+=("$producer")
wait_first_batch "$s2" "${cfg[@]}"
started=$SECONDS
# it hangs at its third batch, so it exits no earlier than watchdog.ms after the first, and the
# watchdog checks often enough to fire within seconds of the bound
while kill -0 "$s2" 2>/dev/null; do
    [ $((SECONDS - started)) -le $((wd / 1000 + 30)) ] ||
        fail "the hung stage 2 still runs $((SECONDS - started)) s after its first batch"
    sleep 0.5
done
status=0
wait "$s2" || status=$?
elapsed=$((SECONDS - started))
[ "$status" -eq 3 ] || fail "the hung stage 2 exited $status, want 3 (watchdog)"
has_event "$work/h2.log" watchdog_expired || fail "no watchdog_expired event"
echo "hung store call: the watchdog ended stage 2 with status 3 (watchdog.ms=$wd, ${elapsed} s)"
"$hc" stage2 "${cfg[@]}" -X instance.id=h2 2>>"$work/h2.log" &
pids+=($!)
wait "$producer"
"$hc" verify "${cfg[@]}" --timeout 120 | tail -1 | tee "$work/verify2"
grep -q '^verify: exact' "$work/verify2" || fail "not exact after the watchdog restart"
