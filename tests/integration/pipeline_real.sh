#!/usr/bin/env bash
# The whole pipeline against a real Kafka broker and a real store, with stage 1 and stage 2 as
# separate hotcount processes:
#
#   pipeline_real.sh HOTCOUNT STORE [--restart]
#
# STORE is sqlite, redis, postgresql, dynamodb or cassandra (the servers come from
# tests/harness/with-servers, which exports HC_TEST_BROKERS, HC_TEST_REDIS_URI, HC_TEST_PG_URI,
# HC_TEST_DYNAMODB_URI and HC_TEST_CASSANDRA_CONTACT; on dynamodb the oracle reads the counts table
# itself, with boto3, on cassandra with the Python driver). Two stage-1 processes and one
# stage-2 process consume while `hotcount produce` sends 1 000 000 Zipfian events with unlikes
# and 0.5 % malformed ones. With --restart, one stage-1 and the stage-2 process are stopped with
# SIGTERM mid-stream and started again. Then `hotcount verify` must report exact counts, every
# stage must stop cleanly (exit 0) on SIGTERM, and the independent oracle (tests/oracle) must
# agree: every post's count equals its own recount of likes.raw, the dead-letter topic holds
# exactly the malformed events, and stage 1's committed offsets are stored on the broker; and the
# offset ranges recorded in stage 1's committed transactions (topic.manifest) tile every raw
# partition exactly once (tests/faults/tiling.py).
set -euo pipefail
hc=$(realpath "${1:?usage: pipeline_real.sh HOTCOUNT STORE [--restart]}")
store_kind=${2:?store kind}
restart=${3:-}
here=$(cd "$(dirname "$0")" && pwd)
: "${HC_TEST_BROKERS:?run under tests/harness/with-servers}"
events=${HC_TEST_EVENTS:-1000000}

# shellcheck source-path=SCRIPTDIR source=namespace.sh
. "$here/namespace.sh"
hc_scratch
hc_namespace "$store_kind" "topic.counts=t$run.counts" "topic.manifest=t$run.manifest"

"$hc" init "${cfg[@]}" >/dev/null
"$hc" init "${cfg[@]}" >/dev/null # safe to repeat

declare -A pid_of metrics_of
start_stage() { # stage instance-id
    metrics_of[$2]=127.0.0.1:$(free_port)
    "$hc" "$1" "${cfg[@]}" -X instance.id="$2" -X metrics.listen="${metrics_of[$2]}" \
        2>>"$work/$2.log" &
    pids+=($!)
    pid_of[$2]=$!
}
stop_stage() { # instance-id
    local status=0
    kill -TERM "${pid_of[$1]}"
    wait "${pid_of[$1]}" || status=$?
    if [ "$status" -ne 0 ]; then
        echo "FAIL: $1 exited $status on SIGTERM"; cat "$work/$1.log"; exit 1
    fi
}

start_stage stage1 s1-a
start_stage stage1 s1-b
start_stage stage2 s2-a

# With restarts, the stream lasts about 8 s so that they land while it flows.
rate=0
[ "$restart" = "--restart" ] && rate=$((events / 8))
"$hc" produce "${cfg[@]}" --events "$events" --rate "$rate" --posts 100000 --zipf 1.1 \
    --unlike-ratio 0.05 --invalid-ratio 0.005 --seed "$$" >"$work/produce.log" &
producer=$!
pids+=($producer)

if [ "$restart" = "--restart" ]; then
    # mid-stream: once stage 2 has stored its first batch, while the producer still runs
    until [ -n "$("$hc" top -n 1 "${cfg[@]}" 2>/dev/null)" ]; do
        kill -0 "$producer" 2>/dev/null || { echo "FAIL: producer finished before any batch"; exit 1; }
        sleep 0.2
    done
    stop_stage s1-a
    stop_stage s2-a
    echo "stopped s1-a and s2-a mid-stream"
    # While events flow, stage 1's hot-key detector shows the hottest posts (once s1-b has
    # closed a window since the rebalance that the restart caused).
    until "$hc" top --live --from "${metrics_of[s1-b]}" --iterations 1 >"$work/hot.txt" &&
        grep -Eq '^ +1  [0-9]+ +[0-9]+$' "$work/hot.txt"; do
        if ! kill -0 "$producer" 2>/dev/null; then
            echo "FAIL: top --live --from showed no hot post while events flowed"
            cat "$work/hot.txt"; exit 1
        fi
        sleep 0.2
    done
    start_stage stage1 s1-a
    start_stage stage2 s2-a
fi

wait "$producer"
cat "$work/produce.log"

# (HC_TEST_VERIFY_TIMEOUT: longer on the DynamoDB emulator, which stores ~100 posts/s when loaded)
"$hc" verify "${cfg[@]}" --timeout "${HC_TEST_VERIFY_TIMEOUT:-300}" | tee "$work/verify.log"
grep -q '^verify: exact' "$work/verify.log"

# The operators' view: each stage's metrics endpoint answers with the contract's names.
python3 "$here/../oracle/scrape.py" stage1 "${metrics_of[s1-a]}" "${metrics_of[s1-b]}"
python3 "$here/../oracle/scrape.py" stage2 "${metrics_of[s2-a]}"

for id in s1-a s1-b s2-a; do
    stop_stage "$id"
done
pids=()

"$hc" get --all "${cfg[@]}" >"$work/store.tsv"
store_arg=(--store-dump "$work/store.tsv")
[ "$store_kind" != dynamodb ] || store_arg=(--store-dynamodb "$store")
[ "$store_kind" != cassandra ] || store_arg=(--store-cassandra "$store")
python3 "$here/../oracle/oracle.py" --brokers "$HC_TEST_BROKERS" --raw "t$run.raw" \
    --dlq "t$run.dlq" --group "g$run-stage1" "${store_arg[@]}" \
    --min-events "$events" --counts-topic "t$run.counts"
# Stage 1's committed transactions consumed every raw offset exactly once.
python3 "$here/../faults/tiling.py" --brokers "$HC_TEST_BROKERS" --raw "t$run.raw" \
    --manifest "t$run.manifest" --partials "t$run.partials"
echo "pipeline on $store_kind${restart:+ with restarts}: exact"
