#!/usr/bin/env bash
# Issue 25, item 9: one dead letter the replay's producer refuses does not block `dlq replay`.
#
#   dlq_oversized.sh HOTCOUNT        (under tests/harness/with-servers: the real broker)
#
# Three dead letters of one reason, all from topic.raw: small-0, then one just under 1 MB
# (written with kcat's limit raised; with the replay's header it is past the producer's
# message.max.bytes, 1 000 000), then small-1. Before, every run aborted at the big one and
# started there again, so small-1 was never replayed. Now:
#   - the first replay completes (exit 0): 2 replayed, 1 skipped_oversized;
#   - a second replay reads nothing new (the progress moved past the big one);
#   - small-0 and small-1 each count exactly 1 once stage 1 and 2 have read them.
set -euo pipefail
hc=$(realpath "${1:?usage: dlq_oversized.sh HOTCOUNT}")
here=$(cd "$(dirname "$0")" && pwd)
: "${HC_TEST_BROKERS:?run under tests/harness/with-servers}"

# shellcheck source-path=SCRIPTDIR source=../integration/namespace.sh
. "$here/../integration/namespace.sh"
hc_scratch
hc_namespace sqlite
fail() { echo "FAIL: $*"; for f in "$work"/*.log; do [ -e "$f" ] && { echo "== $f"; tail -20 "$f"; }; done; exit 1; }

"$hc" init "${cfg[@]}" >/dev/null
put() { # KEY VALUE_FILE: one dead letter of reason too_large from topic.raw
    kcat -P -b "$HC_TEST_BROKERS" -t "t$run.dlq" -X message.max.bytes=1040000 -k "$1" \
        -H hotcount-error=too_large -H "hotcount-source=t$run.raw/0/$3" "$2"
}
printf '{"post_id":"small-0"}' >"$work/s0"
python3 -c 'import sys; sys.stdout.write("{\"post_id\":\"big-0\",\"pad\":\"" + "z" * 999940 + "\"}")' >"$work/big"
printf '{"post_id":"small-1"}' >"$work/s1"
put "small-0#0" "$work/s0" 0
put "big-0#0" "$work/big" 1
put "small-1#0" "$work/s1" 2

out=$(timeout 120 "$hc" dlq replay "${cfg[@]}" --reason too_large --json 2>"$work/replay1.log") ||
    fail "first replay exited $?: $out"
python3 - "$out" <<'EOF' || fail "first replay: $out"
import json, sys
r = json.loads(sys.argv[1])
assert r["complete"] and r["scanned"] == 3, r
assert r["replayed"] == 2 and r["skipped_oversized"] == 1, r
EOF
out=$(timeout 120 "$hc" dlq replay "${cfg[@]}" --reason too_large --json 2>"$work/replay2.log") ||
    fail "second replay exited $?: $out"
python3 - "$out" <<'EOF' || fail "second replay: $out"
import json, sys
r = json.loads(sys.argv[1])
assert r["complete"] and r["scanned"] == 0 and r["replayed"] == 0, r
EOF
# the two small ones are likes now, each counted once
"$hc" stage1 "${cfg[@]}" -X instance.id=s1 -X metrics.listen= 2>>"$work/s1.log" &
pids+=($!)
"$hc" stage2 "${cfg[@]}" -X instance.id=s2 -X metrics.listen= 2>>"$work/s2.log" &
pids+=($!)
for _ in $(seq 120); do
    got=$("$hc" get "${cfg[@]}" small-0 small-1 2>/dev/null | tr '\n\t' '  ' || true)
    [ "$got" = "small-0 1 small-1 1 " ] && break
    sleep 0.5
done
[ "$got" = "small-0 1 small-1 1 " ] || fail "counts after the replay: $got"
echo "dlq_oversized: ok"
