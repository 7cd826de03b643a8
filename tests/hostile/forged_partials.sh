#!/usr/bin/env bash
# Forged partials without a key (issue 25, items 1 and 2), on the real broker:
#
#   forged_partials.sh HOTCOUNT [window|overflow|auth|all]...   (under with-servers --kafka)
#
# window:   before any like, kcat writes one legal no-op partial (delta 0, events 1) into every
#           partials partition whose hotcount-window header claims raw offsets around 10^15 of
#           every raw partition under a writer of its own. Before, stage 2 remembered those
#           ranges and dead-lettered every real partial of the partition as source_overlap:
#           0 of 1 500 likes counted, lost for good.
# overflow: while likes flow, kcat writes a legal partial with events = 2^63 - 1 (delta 0)
#           into every partials partition every 0.1 s. Before, it filled its window's
#           event total and every later record of that window was dead-lettered
#           partial_overflow (595 of 2 000 likes counted in the issue's run).
# auth:     with partials.auth.key.file (made by `hotcount init --new-auth-key`) on both stages,
#           kcat writes into every partials partition a partial of post 1 with delta 1000 and
#           no signature, one with a wrong one, and one signed under a key id no stage holds:
#           each is dead-lettered partial_unauthenticated, and the key's secret shows in no log
#           and no `hotcount config` output.
# Each way `hotcount verify` must then find every count exact, and stage 2 must still run.
set -euo pipefail
hc=$(realpath "${1:?usage: forged_partials.sh HOTCOUNT [window|overflow|all]}")
mode=${2:-all}
[ $# -ge 2 ] || set -- "$1" all
here=$(cd "$(dirname "$0")" && pwd)
: "${HC_TEST_BROKERS:?run under tests/harness/with-servers --kafka}"
command -v kcat >/dev/null || { echo "FAIL: no kcat"; exit 1; }

# shellcheck source-path=SCRIPTDIR source=../integration/namespace.sh
. "$here/../integration/namespace.sh"

one_pass() { # window|overflow
    local what=$1
    hc_scratch
    if [ "$what" = auth ]; then
        hc_namespace sqlite "partials.auth.key.file=$work/partials.key"
    else
        hc_namespace sqlite
    fi
    local forgers=()
    fail() {
        echo "FAIL ($what): $*"
        for f in "$work"/*.log; do [ -e "$f" ] && { echo "== $f"; tail -20 "$f"; }; done
        for f in "${forgers[@]}"; do kill "$f" 2>/dev/null || true; done
        exit 1
    }
    if [ "$what" = auth ]; then
        "$hc" init "${cfg[@]}" --new-auth-key >"$work/init.out" || fail "init --new-auth-key"
        [ "$(stat -c %a "$work/partials.key")" = 600 ] || fail "the key file is not mode 0600"
        secret=$(awk '!/^#/ {print $2}' "$work/partials.key")
        [ ${#secret} = 64 ] || fail "no 64-digit secret in the key file"
        "$hc" init "${cfg[@]}" --new-auth-key >/dev/null 2>&1 && fail "init overwrote the key"
    else
        "$hc" init "${cfg[@]}" >/dev/null
    fi
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
    if [ "$what" = auth ]; then
        local bad
        bad=$(printf '0%.0s' $(seq 64))
        for ((p = 0; p < nparts; p++)); do
            for h in "" "hotcount-auth=$(awk '!/^#/ {print $1}' "$work/partials.key"):$bad" \
                "hotcount-auth=nobody:$bad"; do
                printf '%s' '{"post_id":"1","delta":1000,"events":1000,"ts_min":null,"ts_max":null}' |
                    kcat -P -b "$HC_TEST_BROKERS" -t "t$run.partials" -p "$p" -k 1 ${h:+-H "$h"}
            done
        done
    fi
    if [ "$what" = window ]; then
        forge '{"post_id":"forged","delta":0,"events":1,"ts_min":null,"ts_max":null}' \
            "1 fedcba9876543210 1 1 $ranges"
    fi
    "$hc" stage1 "${cfg[@]}" -X instance.id=s1 -X metrics.listen= 2>>"$work/s1.log" &
    pids+=($!)
    "$hc" stage2 "${cfg[@]}" -X instance.id=s2 -X metrics.listen= 2>>"$work/s2.log" &
    local s2=$!
    pids+=($s2)
    if [ "$what" = overflow ]; then
        # one kcat per partials partition, fed a record every 0.1 s: every window of stage 2
        # meets several (the header is the same for all: siblings of one forged window)
        for ((p = 0; p < nparts; p++)); do
            while :; do
                printf '%s\n' '{"post_id":"forged-events","delta":0,"events":9223372036854775807,"ts_min":null,"ts_max":null}'
                sleep 0.1
            done | kcat -P -b "$HC_TEST_BROKERS" -t "t$run.partials" -p "$p" -k forged \
                -H "hotcount-window=1 fedcba9876543210 2 1 0:1+1" -X queue.buffering.max.ms=10 \
                2>/dev/null &
            forgers+=($!)
        done
        sleep 1
    fi
    "$hc" produce "${cfg[@]}" --events 1500 --posts 50 --rate 500 >"$work/produce.log" 2>&1 ||
        fail "produce"
    for p in "${forgers[@]}"; do
        kill "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
    "$hc" verify "${cfg[@]}" --timeout 90 >"$work/verify.log" 2>&1 ||
        fail "verify: $(tail -5 "$work/verify.log")"
    kill -0 "$s2" 2>/dev/null || fail "stage 2 stopped"
    if [ "$what" = auth ]; then
        local n
        n=$("$hc" dlq list "${cfg[@]}" --reason partial_unauthenticated --json |
            python3 -c 'import json,sys; print(json.load(sys.stdin)["records"])')
        [ "$n" = $((3 * nparts)) ] || fail "want $((3 * nparts)) partial_unauthenticated, have $n"
        "$hc" config "${cfg[@]}" >"$work/config.out" 2>&1 || true
        if grep -rqF "$secret" "$work"/*.log "$work"/*.out; then
            fail "the key's secret shows in a log or an output"
        fi
    fi
    echo "ok   $what: every like counted"
    stop_tracked
    pids=()
    rm -rf "$work"
    trap - EXIT
}

[ "$mode" = all ] && set -- "$1" window overflow auth
for mode in "${@:2}"; do
    case "$mode" in
    window | overflow | auth) one_pass "$mode" ;;
    *) echo "usage: forged_partials.sh HOTCOUNT [window|overflow|auth|all]..."; exit 2 ;;
    esac
done
echo "forged_partials: ok"
