#!/usr/bin/env bash
# `hotcount dlq replay`, exactly once through a kill -9, against a real broker:
#
#   dlq_replay.sh HOTCOUNT REPLAY_KILL     (REPLAY_KILL: tests/support/replay_kill.c)
#
# Stage 1 runs with event.max.bytes=300 and dead-letters 30 valid but oversized likes (posts
# big-0..big-29) as too_large; a dead letter that already carries hotcount-replayed-from (post
# loop-0, written by the test) stands for a replayed record that failed again, and huge-0 is
# larger than even the default limit. Then stage 1 is restarted with the limit relaxed, and:
#   - `replay --dry-run` counts 31 to replay and 1 skipped, and writes nothing to topic.raw;
#   - a replay in batches of 10 is killed (SIGKILL) after its 2nd batch is written, before that
#     transaction commits; run again it completes; run a third time it replays nothing;
#   - every big-N counts exactly 1 in the store (the killed transaction's copies count 0, the
#     first batch is not replayed twice) and loop-0 counts 0;
#   - huge-0, replayed and refused again, is dead-lettered with the replay's mark, so a fourth
#     replay, once stage 1 has caught up, replays nothing (no loop);
#   - a dead letter of the same reason whose hotcount-source is in the partials topic (as stage
#     2 writes them; its value a valid-looking like of post foreign-0) is never replayed: every
#     run counts it in skipped_foreign, and foreign-0 counts 0.
set -euo pipefail
hc=$(realpath "${1:?usage: dlq_replay.sh HOTCOUNT REPLAY_KILL}")
replay_kill=$(realpath "${2:?usage: dlq_replay.sh HOTCOUNT REPLAY_KILL}")
here=$(cd "$(dirname "$0")" && pwd)
: "${HC_TEST_BROKERS:?run under tests/harness/with-servers}"

# shellcheck source-path=SCRIPTDIR source=namespace.sh
. "$here/namespace.sh"
hc_scratch
hc_namespace sqlite
fail() { echo "FAIL: $*"; for f in "$work"/*.log; do echo "== $f"; tail -20 "$f"; done; exit 1; }

"$hc" init "${cfg[@]}" >/dev/null
start_stage() { # stage instance-id [-X ...]
    local stage=$1 id=$2
    shift 2
    "$hc" "$stage" "${cfg[@]}" -X instance.id="$id" -X metrics.listen= "$@" 2>>"$work/$id.log" &
    pids+=($!)
    last_pid=$!
}
start_stage stage1 s1 -X event.max.bytes=300
s1=$last_pid
start_stage stage2 s2

pad=$(printf 'x%.0s' $(seq 400))
for i in $(seq 0 29); do
    printf 'big-%d#0|{"post_id":"big-%d","pad":"%s"}\n' "$i" "$i" "$pad"
done >"$work/big.txt"
printf 'huge-0#0|{"post_id":"huge-0","pad":"%s"}\n' "$(printf 'y%.0s' $(seq 5000))" >>"$work/big.txt"
kcat -P -b "$HC_TEST_BROKERS" -t "t$run.raw" -K '|' -l "$work/big.txt"
printf '%s\n' "loop-0#0|{\"post_id\":\"loop-0\",\"pad\":\"$pad\"}" |
    kcat -P -b "$HC_TEST_BROKERS" -t "t$run.dlq" -K '|' -H hotcount-error=too_large \
        -H "hotcount-source=t$run.raw/0/0" -H "hotcount-replayed-from=t$run.dlq/0/0"
printf '%s\n' "foreign-0#0|{\"post_id\":\"foreign-0\",\"pad\":\"$pad\"}" |
    kcat -P -b "$HC_TEST_BROKERS" -t "t$run.dlq" -K '|' -H hotcount-error=too_large \
        -H "hotcount-source=t$run.partials/0/0"
# exact under the 300-byte limit: the big events are invalid and counted nowhere
"$hc" verify "${cfg[@]}" -X event.max.bytes=300 --timeout 120 >"$work/verify.log" ||
    fail "verify before the replay"
n=$("$hc" dlq list "${cfg[@]}" --reason too_large --json |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["records"])')
[ "$n" = 33 ] || fail "want 33 too_large dead letters, have $n"

# relax the limit: stage 1 restarts with the default event.max.bytes
kill -TERM "$s1"
wait "$s1" || fail "stage 1 exited $? on SIGTERM"
start_stage stage1 s1

raw_end() {
    "$hc" status "${cfg[@]}" --json | python3 -c \
        'import json,sys; print(sum(p["end"] for p in json.load(sys.stdin)["stage1"]["partitions"]))'
}
before=$(raw_end || true)
out=$("$hc" dlq replay "${cfg[@]}" --reason too_large --dry-run --json) || fail "dry run: $out"
python3 - "$out" <<'EOF' || fail "dry run: $out"
import json, sys
r = json.loads(sys.argv[1])
assert r["replayed"] == 31 and r["skipped_replayed"] == 1 and r["transactions"] == 0, r
assert r["skipped_foreign"] == 1, r
EOF
[ "$(raw_end || true)" = "$before" ] || fail "the dry run wrote to topic.raw"

rc=0
# the replay of `hotcount dlq replay`, with a hook that SIGKILLs it after batch 2's records are
# written and before its transaction commits (tests/support/replay_kill.c)
"$replay_kill" 2 too_large 10 "${cfg[@]}" >"$work/replay1.log" 2>&1 || rc=$?
[ "$rc" -eq 137 ] || fail "the replay was to be killed at its 2nd batch, exited $rc"
out=$("$hc" dlq replay "${cfg[@]}" --reason too_large --batch 10 --json) || fail "rerun: $out"
python3 - "$out" <<'EOF' || fail "rerun: $out"
import json, sys
r = json.loads(sys.argv[1])
# the first batch (10 records) committed before the kill; the other 21 now
assert r["complete"] and r["replayed"] == 21 and r["skipped_replayed"] <= 1, r
assert r["skipped_foreign"] <= 1, r
EOF
out=$("$hc" dlq replay "${cfg[@]}" --reason too_large --json) || fail "third run: $out"
python3 -c 'import json,sys; r=json.loads(sys.argv[1]); assert r["replayed"] == 0, r' "$out" ||
    fail "a third replay replayed again: $out"

# every replayed like counted exactly once: wait (bounded) until stage 1 and stage 2 are
# caught up (status counts the records past each committed offset, not the transaction
# markers the replay left in topic.raw) and every big post is counted
posts=()
for i in $(seq 0 29); do posts+=("big-$i"); done
settled() {
    "$hc" status "${cfg[@]}" --json --dlq-scan 1 | python3 -c 'import json,sys
r = json.load(sys.stdin)
sys.exit(not (r["stage1"]["lag"] == 0 and r["stage2"]["lag"] == 0))' &&
        "$hc" get "${cfg[@]}" "${posts[@]}" loop-0 huge-0 foreign-0 >"$work/counts.txt" &&
        ! head -30 "$work/counts.txt" | grep -q $'\t0$'
}
for _ in $(seq 120); do
    settled && break
    sleep 0.5
done
settled || fail "stages not caught up after the replay: $(cat "$work/counts.txt")"
python3 - "$work/counts.txt" <<'EOF' || fail "counts: $(cat "$work/counts.txt")"
import sys
counts = dict(line.rstrip("\n").split("\t") for line in open(sys.argv[1]))
assert all(counts[f"big-{i}"] == "1" for i in range(30)), counts
assert counts["loop-0"] == "0" and counts["huge-0"] == "0", counts
assert counts["foreign-0"] == "0", counts
EOF
# huge-0 failed again once replayed: its new dead letter carries the mark and is skipped
out=$("$hc" dlq replay "${cfg[@]}" --reason too_large --json) || fail "fourth run: $out"
python3 - "$out" <<'EOF' || fail "a replayed record that failed again was replayed again: $out"
import json, sys
r = json.loads(sys.argv[1])
assert r["replayed"] == 0, r
EOF
echo "dlq_replay: ok"
