#!/usr/bin/env bash
# A store that stops answering (redis-server under SIGSTOP) leaves stage 2 stuck inside a store
# call: the watchdog must end the process with status 3 within watchdog.ms, and a restarted
# stage 2 must still count every like exactly once.
#   watchdog.sh HOTCOUNT        (under tests/harness/with-servers --kafka --redis)
set -euo pipefail
hc=$(realpath "${1:?usage: watchdog.sh HOTCOUNT}")
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
cfg=(-X brokers="$HC_TEST_BROKERS" -X topic.raw="w$run.raw" -X topic.partials="w$run.partials"
     -X topic.dlq="w$run.dlq" -X group.stage1="w$run-1" -X group.stage2="w$run-2"
     -X store="$HC_TEST_REDIS_URI" -X store.redis.prefix="w$run:" -X flush.ms=300
     -X metrics.listen= -X log.level=warn
     -X kafka.consumer.session.timeout.ms=6000 -X kafka.consumer.heartbeat.interval.ms=1000)

"$hc" init "${cfg[@]}" >/dev/null
"$hc" stage1 "${cfg[@]}" -X instance.id=w1 2>"$work/s1.log" &
s1=$!
pids+=("$s1")
"$hc" stage2 "${cfg[@]}" -X instance.id=w2 -X watchdog.ms=3000 2>"$work/s2.log" &
s2=$!
pids+=("$s2")
"$hc" produce "${cfg[@]}" --events 100000 --rate 10000 --posts 1000 >/dev/null &
producer=$!
pids+=("$producer")

until [ -n "$("$hc" top -n 1 "${cfg[@]}" 2>/dev/null)" ]; do sleep 0.2; done
"$HC_TEST_REDIS_CTL" pause
started=$(date +%s)
status=0
wait "$s2" || status=$?
elapsed=$(( $(date +%s) - started ))
"$HC_TEST_REDIS_CTL" resume
if [ "$status" -ne 3 ]; then
    echo "FAIL: stage 2 exited $status, want 3 (watchdog)"; cat "$work/s2.log"; exit 1
fi
grep -q 'no progress for' "$work/s2.log" || { echo "FAIL: no watchdog log line"; exit 1; }
echo "watchdog ended the stuck stage 2 with status 3 after ${elapsed} s"

"$hc" stage2 "${cfg[@]}" -X instance.id=w2 2>>"$work/s2.log" &
s2=$!
pids+=("$s2")
wait "$producer"
"$hc" verify "${cfg[@]}" --timeout 120 | tail -1 | tee "$work/verify"
grep -q '^verify: exact' "$work/verify"
