#!/usr/bin/env bash
# Hostile input against the real pipeline:
#
#   hostile.sh HOTCOUNT
#
# Under tests/harness/with-servers --kafka (HC_TEST_BROKERS), with a SQLite store and a unique
# namespace per run: one stage-1 and one stage-2 process consume while `hotcount produce` sends
# 200 000 valid events and, interleaved, tests/hostile/hostile.py sends every message of
# tests/hostile/corpus.jsonl (malformed and adversarial events, and some tricky valid ones; see
# make_corpus.py) five times at random moments, with its original key. Then:
#   - `hotcount verify` reports exact counts;
#   - neither stage ever stopped (same pids alive throughout), and each exits 0 on SIGTERM;
#   - hostile.py check: every copy of every invalid message is in the dead-letter topic exactly
#     once, with exactly its expected hotcount-error reason, its key and its bytes (the 1 MB one
#     cut to event.max.bytes with hotcount-truncated-from, the 1 MB key to 1024 bytes with
#     hotcount-key-truncated-from); no valid one is; the valid ones'
#     posts have their expected counts;
#   - the independent oracle (tests/oracle/oracle.py, or $HC_HOSTILE_ORACLE) says exact.
# Needs python3 with confluent-kafka (tools/test puts the venv on PATH). About a minute.
set -euo pipefail
hc=$(realpath "${1:?usage: hostile.sh HOTCOUNT}")
here=$(cd "$(dirname "$0")" && pwd)
: "${HC_TEST_BROKERS:?run under tests/harness/with-servers --kafka}"
oracle=${HC_HOSTILE_ORACLE:-$here/../oracle/oracle.py}
events=${HC_HOSTILE_EVENTS:-200000}
rounds=5
python3 -c 'import confluent_kafka' 2>/dev/null ||
    { echo "FAIL: python3 lacks confluent_kafka (PATH=\$HOME/.cache/hotcount/venv/bin:\$PATH)"; exit 1; }

run=$(date +%s%N | tail -c 9)-$$
work=$(mktemp -d)
# shellcheck source-path=SCRIPTDIR source=../integration/namespace.sh
. "$here/../integration/namespace.sh"
monitor=''
cleanup() {
    [ -z "$monitor" ] || kill "$monitor" 2>/dev/null || true
    stop_tracked
    if [ "${status:-1}" -eq 0 ]; then
        rm -rf "$work"
    else
        echo "hostile: work directory kept: $work"
    fi
}
trap cleanup EXIT
t0=$SECONDS

hc_namespace sqlite "metrics.listen=" "log.format=json"
"$hc" init "${cfg[@]}" >/dev/null

declare -A pid_of
start_stage() { # stage instance-id
    "$hc" "$1" "${cfg[@]}" -X instance.id="$2" 2>>"$work/$2.log" &
    pids+=("$!")
    pid_of[$2]=$!
}
start_stage stage1 s1
start_stage stage2 s2

# A stage that stops is a zombie until reaped (kill -0 still succeeds): read its state instead.
alive() { # pid
    local state
    state=$(sed -n 's/^State:[[:space:]]*\([A-Z]\).*/\1/p' "/proc/$1/status" 2>/dev/null) || return 1
    [ -n "$state" ] && [ "$state" != Z ] && [ "$state" != X ]
}
# Watches both stages from the start until they are asked to stop.
(
    while :; do
        for id in s1 s2; do
            if ! alive "${pid_of[$id]}"; then
                echo "$id (pid ${pid_of[$id]}) stopped at $((SECONDS - t0)) s" >>"$work/died"
                exit 0
            fi
        done
        sleep 0.2
    done
) &
monitor=$!

# The stream lasts about 4 s; the hostile copies land at random moments in it.
"$hc" produce "${cfg[@]}" --events "$events" --rate $((events / 4)) --posts 10000 --zipf 1.1 \
    --unlike-ratio 0.05 --seed "$$" >"$work/produce.log" 2>&1 &
producer=$!
pids+=("$producer")
python3 "$here/hostile.py" produce --brokers "$HC_TEST_BROKERS" --topic "t$run.raw" \
    --corpus "$here/corpus.jsonl" --rounds "$rounds" --spread 4 --seed "$$" \
    --sent "$work/sent.json" || { echo "FAIL: the hostile producer"; exit 1; }
wait "$producer" || { echo "FAIL: hotcount produce"; cat "$work/produce.log"; exit 1; }
cat "$work/produce.log"

"$hc" verify "${cfg[@]}" --timeout 60 | tee "$work/verify.log" | tail -n 5
grep -q '^verify: exact' "$work/verify.log" || { echo "FAIL: verify"; exit 1; }

kill "$monitor" 2>/dev/null || true
wait "$monitor" 2>/dev/null || true
monitor=''
if [ -s "$work/died" ]; then
    echo "FAIL: a stage stopped while it should have run:"
    cat "$work/died"
    for id in s1 s2; do echo "--- $id log"; tail -n 30 "$work/$id.log"; done
    exit 1
fi
for id in s1 s2; do
    rc=0
    kill -TERM "${pid_of[$id]}"
    wait "${pid_of[$id]}" || rc=$?
    if [ "$rc" -ne 0 ]; then
        echo "FAIL: $id exited $rc on SIGTERM"
        tail -n 30 "$work/$id.log"
        exit 1
    fi
done
pids=()
# a report: the lines at level warn or error (log.format=json) of both stages
echo "stages ran throughout and stopped cleanly ($(python3 -c '
import json, sys
n = 0
for path in sys.argv[1:]:
    for line in open(path, errors="replace"):
        try:
            n += json.loads(line).get("level") in ("warn", "error")
        except (ValueError, AttributeError):
            n += 1  # not a log line: a sanitizer report, say
print(n)' "$work/s1.log" "$work/s2.log") warning/error lines in their logs)"

"$hc" get --all "${cfg[@]}" >"$work/store.tsv"
failed=''
python3 "$here/hostile.py" check --brokers "$HC_TEST_BROKERS" --raw "t$run.raw" \
    --dlq "t$run.dlq" --corpus "$here/corpus.jsonl" --sent "$work/sent.json" \
    --store-dump "$work/store.tsv" || failed+=' hostile-check'
corpus_copies=$(($(wc -l <"$here/corpus.jsonl") * rounds))
python3 "$oracle" --brokers "$HC_TEST_BROKERS" --raw "t$run.raw" --dlq "t$run.dlq" \
    --group "g$run-stage1" --store-dump "$work/store.tsv" \
    --min-events $((events + corpus_copies)) || failed+=' oracle'

if [ -n "$failed" ]; then
    echo "FAIL:$failed ($((SECONDS - t0)) s)"
    exit 1
fi
status=0
echo "hostile input: handled exactly ($((SECONDS - t0)) s)"
