#!/usr/bin/env bash
# Forged partials without a key (issue 25, items 1 and 2), on the real broker:
#
#   forged_partials.sh HOTCOUNT [window|overflow|all]   (under tests/harness/with-servers --kafka)
#
# window:   before any like, kcat writes one legal no-op partial (delta 0, events 1) into every
#           partials partition whose hotcount-window header claims raw offsets around 10^15 of
#           every raw partition under a writer of its own. Before, stage 2 remembered those
#           ranges and dead-lettered every real partial of the partition as source_overlap:
#           0 of 1 500 likes counted, lost for good.
# overflow: while likes flow, kcat writes a legal partial with events = 2^63 - 1 (delta 0)
#           into every partials partition about every 0.3 s. Before, it filled its window's
#           event total and every later record of that window was dead-lettered
#           partial_overflow (595 of 2 000 likes counted in the issue's run).
# Either way `hotcount verify` must then find every count exact, and stage 2 must still run.
set -euo pipefail
hc=$(realpath "${1:?usage: forged_partials.sh HOTCOUNT [window|overflow|all]}")
mode=${2:-all}
here=$(cd "$(dirname "$0")" && pwd)
: "${HC_TEST_BROKERS:?run under tests/harness/with-servers --kafka}"
command -v kcat >/dev/null || { echo "FAIL: no kcat"; exit 1; }

# shellcheck source-path=SCRIPTDIR source=../integration/namespace.sh
. "$here/../integration/namespace.sh"

one_pass() { # window|overflow
    local what=$1
    hc_scratch
    hc_namespace sqlite
    fail() { echo "FAIL ($what): $*"; for f in "$work"/*.log; do [ -e "$f" ] && { echo "== $f"; tail -20 "$f"; }; done; exit 1; }
    "$hc" init "${cfg[@]}" >/dev/null
    local nparts nraw ranges p
    nparts=$(kcat -L -b "$HC_TEST_BROKERS" -t "t$run.partials" | grep -c 'partition [0-9]*, leader')
    nraw=$(kcat -L -b "$HC_TEST_BROKERS" -t "t$run.raw" | grep -c 'partition [0-9]*, leader')
    ranges=$(for ((p = 0; p < nraw; p++)); do printf '%s%d:1000000000000000+1' "${p:+,}" "$p"; done)
    ranges=${ranges#,}
    forge() { # VALUE HEADER: one record into every partials partition
        for ((p = 0; p < nparts; p++)); do
            printf '%s' "$1" | kcat -P -b "$HC_TEST_BROKERS" -t "t$run.partials" -p "$p" -k forged \
                -H "hotcount-window=$2"
        done
    }
    if [ "$what" = window ]; then
        forge '{"post_id":"forged","delta":0,"events":1,"ts_min":null,"ts_max":null}' \
            "1 fedcba9876543210 1 1 $ranges"
    fi
    "$hc" stage1 "${cfg[@]}" -X instance.id=s1 -X metrics.listen= 2>>"$work/s1.log" &
    pids+=($!)
    "$hc" stage2 "${cfg[@]}" -X instance.id=s2 -X metrics.listen= 2>>"$work/s2.log" &
    local s2=$!
    pids+=($s2)
    local forger=
    if [ "$what" = overflow ]; then
        (
            w=1
            while :; do
                forge '{"post_id":"forged-events","delta":0,"events":9223372036854775807,"ts_min":null,"ts_max":null}' \
                    "1 fedcba9876543210 2 $w 0:$w+1"
                w=$((w + 1))
                sleep 0.3
            done
        ) 2>/dev/null &
        forger=$!
    fi
    "$hc" produce "${cfg[@]}" --events 1500 --posts 50 --rate 500 >"$work/produce.log" 2>&1 ||
        fail "produce"
    [ -z "$forger" ] || { kill "$forger"; wait "$forger" 2>/dev/null || true; }
    "$hc" verify "${cfg[@]}" --timeout 90 >"$work/verify.log" 2>&1 ||
        fail "verify: $(tail -5 "$work/verify.log")"
    kill -0 "$s2" 2>/dev/null || fail "stage 2 stopped"
    echo "ok   $what: every like counted"
    stop_tracked
    pids=()
    rm -rf "$work"
    trap - EXIT
}

case "$mode" in
window | overflow) one_pass "$mode" ;;
all) one_pass window && one_pass overflow ;;
*) echo "usage: forged_partials.sh HOTCOUNT [window|overflow|all]"; exit 2 ;;
esac
echo "forged_partials: ok"
