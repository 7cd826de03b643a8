#!/usr/bin/env bash
# A stop within its bound whatever the stage waits on (issue 23, item 5): a stage 2 whose store
# and broker are out of reach, and whose store hangs instead of refusing (a server that accepts
# connections and never answers, as a frozen or black-holed one does), must be gone within
# stop.timeout.ms of SIGTERM, with exit status 5 (stop_timeout); one whose store refuses at once
# stops cleanly (0) well within it. Before the bound existed, the hanging store held the stop
# for its request timeouts (10 s for Redis, 30 s and more for DynamoDB). No servers needed.
# Usage: stop_bound.sh HOTCOUNT
set -euo pipefail
HOTCOUNT=$(realpath "$1")
work=$(mktemp -d)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do
        { kill -9 "$pid" && wait "$pid"; } 2>/dev/null || true
    done
    rm -rf "$work"
}
trap cleanup EXIT

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# A server that accepts and never answers, for 120 s at most.
blackhole=$(free_port)
python3 - "$blackhole" <<'PY' &
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(64)
held, end = [], time.time() + 120
s.settimeout(0.5)
while time.time() < end:
    try:
        held.append(s.accept()[0])
    except socket.timeout:
        pass
PY
pids+=($!)
closed=$(free_port) # nothing listens there: the broker is gone
for _ in $(seq 50); do
    python3 -c "import socket; socket.create_connection(('127.0.0.1', $blackhole), 1)" 2>/dev/null && break
    sleep 0.1
done

BOUND_MS=${HC_STOP_BOUND_MS:-3000}
failures=0
# case NAME STORE WANT_STATUS: starts stage 2, SIGTERM after 2 s, times the exit.
case_run() {
    local name=$1 store=$2 want=$3
    local log=$work/$name.log
    AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test \
        "$HOTCOUNT" stage2 -X "brokers=127.0.0.1:$closed" -X "store=$store" \
        -X stop.timeout.ms=$BOUND_MS -X metrics.listen= -X log.format=json \
        -X instance.id="stop-$name" >"$log" 2>&1 &
    local pid=$!
    pids+=("$pid")
    sleep 2
    local t0
    t0=$(date +%s%N)
    kill -TERM "$pid"
    local status=0
    wait "$pid" || status=$?
    local ms=$((($(date +%s%N) - t0) / 1000000))
    local limit=$((BOUND_MS + 1500))
    if [ "$status" -ne "$want" ] || [ "$ms" -gt "$limit" ]; then
        echo "FAIL $name: exit $status after $ms ms (want $want within $limit ms)"
        tail -5 "$log"
        failures=$((failures + 1))
    else
        echo "ok   $name: exit $status after $ms ms (bound $BOUND_MS ms)"
    fi
    if [ "$want" -eq 5 ] && ! grep -q '"event":"stop_timeout"' "$log"; then
        echo "FAIL $name: no stop_timeout event"
        failures=$((failures + 1))
    fi
}

case_run redis_hanging "redis://127.0.0.1:$blackhole" 5
case_run dynamodb_hanging "dynamodb://us-east-1?endpoint=http://127.0.0.1:$blackhole" 5
case_run redis_refusing "redis://127.0.0.1:$closed" 0
echo "stop_bound: $failures failed"
[ "$failures" -eq 0 ]
