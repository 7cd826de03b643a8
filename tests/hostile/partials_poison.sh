#!/usr/bin/env bash
# Poison written with kcat into the partials topic, and raw messages with a 1 MB key, on the
# real broker, while valid traffic flows (issue 16):
#
#   partials_poison.sh HOTCOUNT [STORE...]      (default: sqlite redis postgresql)
#
# Under tests/harness/with-servers --all. For each store, a short pass in a namespace of its own
# (tests/integration/namespace.sh): one stage-1 and one stage-2 process (stage 2 dead-letters to
# a topic of its own, so that the oracle reads stage 1's alone), and two rounds of the same
# poison. In each round `hotcount produce` sends valid events while kcat writes into the
# partials topic every record of tests/hostile/partials_poison.py: undecodable garbage, an empty
# and a null value, a post id with a NUL byte and one with control characters, |delta| > events,
# two partials of one post whose sum overflows int64, a legal partial that brings a post near
# the limit and (once it is stored) a delta that overflows the stored count, absurd and
# reserved timestamps; and into the raw topic a valid and an invalid event with a 1 MB key and
# an event with ts -9223372036854775807. After each round:
#   - neither stage stopped (same pids alive throughout; each exits 0 on SIGTERM at the end);
#   - partials_poison.py check: each poison record is in stage 2's dead-letter topic once per
#     copy with a reason it may have and its own topic/partition/offset as hotcount-source, no
#     other partial is; hotcount_partials_invalid_total{reason} counted each; the counted poison
#     posts hold exactly their sums and `hotcount verify` differs from its recount on those
#     posts only; the 1 MB key's dead letter has its key cut and marked;
#   - the oracle (tests/oracle/oracle.py) says every other count is exact, stage 1's dead letters
#     are exactly the malformed raw events, and stage 1's offsets are at the end.
#   - the second round, the same poison again, is held to the same (the outcome of a record that
#     overflows a count stored in round 1 becomes store_refused: partials_poison.py says which).
# Needs kcat (HC_KCAT, default kcat on PATH) and python3 with confluent-kafka (tools/test puts
# the venv on PATH). About 25 s a store (the first one longer: the broker's transaction
# coordinator loads). HC_POISON_EVENTS: valid events per round (default 10000).
set -euo pipefail
hc=$(realpath "${1:?usage: partials_poison.sh HOTCOUNT [STORE...]}")
shift
stores=("$@")
[ ${#stores[@]} -gt 0 ] || stores=(sqlite redis postgresql)
here=$(cd "$(dirname "$0")" && pwd)
: "${HC_TEST_BROKERS:?run under tests/harness/with-servers --all}"
events=${HC_POISON_EVENTS:-10000}
kcat=${HC_KCAT:-kcat}
command -v "$kcat" >/dev/null || { echo "FAIL: no kcat"; exit 1; }
python3 -c 'import confluent_kafka' 2>/dev/null ||
    { echo "FAIL: python3 lacks confluent_kafka (PATH=\$HOME/.cache/hotcount/venv/bin:\$PATH)"; exit 1; }

# shellcheck source-path=SCRIPTDIR source=../integration/namespace.sh
. "$here/../integration/namespace.sh"
base=$(date +%s%N | tail -c 9)-$$
root=$(mktemp -d)
monitor=''
cleanup() {
    [ -z "$monitor" ] || kill "$monitor" 2>/dev/null || true
    stop_tracked
    if [ "${status:-1}" -eq 0 ]; then
        rm -rf "$root"
    else
        echo "partials_poison: work directory kept: $root"
    fi
}
trap cleanup EXIT
t0=$SECONDS
python3 "$here/partials_poison.py" inputs "$root/in"

# A stage that stops is a zombie until reaped (kill -0 still succeeds): read its state instead.
alive() { # pid
    local state
    state=$(sed -n 's/^State:[[:space:]]*\([A-Z]\).*/\1/p' "/proc/$1/status" 2>/dev/null) || return 1
    [ -n "$state" ] && [ "$state" != Z ] && [ "$state" != X ]
}

put() { # topic file [kcat option...]: every line KEY<TAB>VALUE one record, acknowledged by all
    local topic=$1 file=$2
    shift 2
    "$kcat" -P -q -b "$HC_TEST_BROKERS" -t "$topic" -K $'\t' -X acks=all \
        -X message.max.bytes=1048576 "$@" <"$file" ||
        { echo "FAIL: kcat into $topic ($file)"; exit 1; }
}

one_store() { # kind
    local kind=$1 port s1 s2 round producer checker deadline near refused failed=''
    run=$base-${kind:0:2}
    work=$root/$kind
    mkdir -p "$work"
    hc_namespace "$kind" "metrics.listen=" "log.format=json" "topic.raw.partitions=4" \
        "topic.partials.partitions=4" "topic.dlq.partitions=1"
    "$hc" init "${cfg[@]}" >/dev/null
    "$hc" init "${cfg[@]}" -X topic.dlq="t$run.dlq2" >/dev/null
    port=$(free_port)
    "$hc" stage1 "${cfg[@]}" -X instance.id=s1 2>>"$work/s1.log" &
    s1=$!
    pids+=("$s1")
    "$hc" stage2 "${cfg[@]}" -X instance.id=s2 -X topic.dlq="t$run.dlq2" \
        -X metrics.listen="127.0.0.1:$port" 2>>"$work/s2.log" &
    s2=$!
    pids+=("$s2")
    # watches both stages from the start until they are asked to stop
    (
        while :; do
            for pid in "$s1" "$s2"; do
                if ! alive "$pid"; then
                    echo "pid $pid stopped at $((SECONDS - t0)) s" >>"$work/died"
                    exit 0
                fi
            done
            sleep 0.2
        done
    ) &
    monitor=$!

    for round in 1 2; do
        "$hc" produce "${cfg[@]}" --events "$events" --rate $((events / 2)) --posts 2000 \
            --zipf 1.1 --unlike-ratio 0.05 --seed "$round$$" >"$work/produce.log" 2>&1 &
        producer=$!
        pids+=("$producer")
        # The preload alone first, and the rest only once stage 2 has applied it: its 8e18
        # events would overflow the event total of a window it shared with the overflowing
        # pair, and the delta must find it stored. Round 1 stores it; round 2's copy overflows
        # the stored count and is refused.
        refused=$(python3 "$here/partials_poison.py" metric "127.0.0.1:$port" store_refused)
        put "t$run.partials" "$root/in/preload.in"
        deadline=$((SECONDS + 30))
        while :; do
            if [ "$round" -eq 1 ]; then
                near=$("$hc" get "${cfg[@]}" poison-near 2>/dev/null | cut -f2) || near=?
                [ "$near" != 8000000000000000000 ] || break
            else
                near=$(python3 "$here/partials_poison.py" metric "127.0.0.1:$port" store_refused)
                [ "$near" -le "$refused" ] || break
            fi
            [ "$SECONDS" -lt "$deadline" ] ||
                { echo "FAIL: $kind: round $round's preload not applied in 30 s ($near)"; exit 1; }
            sleep 0.2
        done
        echo "$kind round $round: preload applied at $((SECONDS - t0)) s" >>"$root/timing"
        put "t$run.partials" "$root/in/partials.in"
        put "t$run.partials" "$root/in/null.in" -Z
        for f in "$root"/in/raw-*.in; do
            put "t$run.raw" "$f"
        done
        put "t$run.partials" "$root/in/delta.in"
        wait "$producer" || { echo "FAIL: $kind: hotcount produce"; cat "$work/produce.log"; exit 1; }
        # a stage that stopped is the finding; verify would only wait for it
        if [ -s "$work/died" ]; then
            failed+=" a-stage-stopped(round $round)"
            break
        fi
        # verify waits for both stages; it differs from its recount on the poison posts only,
        # which partials_poison.py checks
        "$hc" verify "${cfg[@]}" --timeout 60 >"$work/verify.log" 2>&1 || true
        echo "$kind round $round: verify done at $((SECONDS - t0)) s" >>"$root/timing"
        "$hc" get --all "${cfg[@]}" >"$work/store.tsv"
        grep -av '^poison-' "$work/store.tsv" >"$work/store-valid.tsv" || true
        # the two checks read the topics independently: side by side
        python3 "$here/partials_poison.py" check --brokers "$HC_TEST_BROKERS" \
            --partials "t$run.partials" --dlq2 "t$run.dlq2" --dlq1 "t$run.dlq" \
            --rounds "$round" --metrics "127.0.0.1:$port" --store-dump "$work/store.tsv" \
            --verify-out "$work/verify.log" >"$work/check.log" 2>&1 &
        checker=$!
        python3 "$here/../oracle/oracle.py" --brokers "$HC_TEST_BROKERS" --raw "t$run.raw" \
            --dlq "t$run.dlq" --group "g$run-stage1" --store-dump "$work/store-valid.tsv" \
            --min-events $(((events + 3) * round)) >"$work/oracle.log" 2>&1 ||
            failed+=" oracle(round $round)"
        wait "$checker" || failed+=" check(round $round)"
        cat "$work/check.log" "$work/oracle.log"
        echo "$kind round $round: checks done at $((SECONDS - t0)) s" >>"$root/timing"
        if [ -s "$work/died" ]; then
            failed+=" a-stage-stopped(round $round)"
            break
        fi
        [ -z "$failed" ] || break
    done

    kill "$monitor" 2>/dev/null || true
    wait "$monitor" 2>/dev/null || true
    monitor=''
    if [ -s "$work/died" ]; then
        echo "FAIL: $kind: a stage stopped while it should have run:"
        cat "$work/died"
    fi
    for pid in "$s1" "$s2"; do
        local rc=0
        kill -TERM "$pid" 2>/dev/null || true
        wait "$pid" || rc=$?
        [ "$rc" -eq 0 ] || failed+=" exit($pid:$rc)"
    done
    pids=()
    if [ -n "$failed" ]; then
        for id in s1 s2; do echo "--- $kind $id log"; tail -n 20 "$work/$id.log"; done
        echo "--- $kind verify"
        tail -n 12 "$work/verify.log"
        echo "FAIL: $kind:$failed ($((SECONDS - t0)) s)"
        exit 1
    fi
    echo "partials_poison: $kind: two rounds handled exactly ($((SECONDS - t0)) s)"
}

for kind in "${stores[@]}"; do
    one_store "$kind"
done
cat "$root/timing"
status=0
echo "poison partials and 1 MB keys: handled exactly on ${stores[*]} ($((SECONDS - t0)) s)"
