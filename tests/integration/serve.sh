#!/usr/bin/env bash
# `hotcount serve` over a real pipeline:
#
#   serve.sh HOTCOUNT [STORE] [WORKDIR]
#
# STORE is sqlite (default), redis or postgresql (servers from tests/harness/with-servers).
# One stage-1 and one stage-2 process count `hotcount produce`'s Zipfian events plus a handful
# of events whose post ids need URL-encoding (space, comma, '?', '%', '#', '/', UTF-8, 256
# bytes); once `hotcount verify` reports exact counts, `hotcount serve` (scraping both stages'
# metrics) is checked by tests/integration/serve_check.py: every route and status code, JSON
# bodies equal to `hotcount get --json` / `top --json`, ETag, Cache-Control and 304, request
# coalescing under 200 concurrent clients (store reads <= elapsed / TTL + 1), /v1/stats against
# the stages' own metrics, and the live page in headless Chromium (the numbers it shows equal
# /v1/stats and /v1/top; its screenshot is kept in WORKDIR, default serve-artifacts/ under the
# current directory, i.e. the build tree under CTest). A second serve without stages must show
# the store's top alone.
set -euo pipefail
hc=$(realpath "${1:?usage: serve.sh HOTCOUNT [STORE] [WORKDIR]}")
store_kind=${2:-sqlite}
art=$(mkdir -p "${3:-serve-artifacts}" && cd "${3:-serve-artifacts}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
: "${HC_TEST_BROKERS:?run under tests/harness/with-servers}"
export PATH=$HOME/.cache/hotcount/venv/bin:$PATH
events=${HC_TEST_EVENTS:-200000}

run=$(date +%s%N | tail -c 9)-$$
work=$(mktemp -d)
rm -f "$art"/*.png "$art"/*.html "$art"/*.log

# shellcheck source-path=SCRIPTDIR source=namespace.sh
. "$here/namespace.sh"
cleanup() {
    stop_tracked
    cp "$work"/*.log "$art/" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
hc_namespace "$store_kind"
"$hc" init "${cfg[@]}" >/dev/null

m1=127.0.0.1:$(free_port)
m2=127.0.0.1:$(free_port)
"$hc" stage1 "${cfg[@]}" -X instance.id=s1 -X metrics.listen="$m1" 2>>"$work/stage1.log" &
pids+=($!)
"$hc" stage2 "${cfg[@]}" -X instance.id=s2 -X metrics.listen="$m2" 2>>"$work/stage2.log" &
pids+=($!)

start_serve() { # name extra-args...: sets $url
    local name=$1
    shift
    "$hc" serve "${cfg[@]}" -X serve.listen=127.0.0.1:0 -X log.level=info "$@" \
        >"$work/$name.url" 2>>"$work/$name.log" &
    pids+=($!)
    local deadline=$((SECONDS + 30))
    until [ -s "$work/$name.url" ]; do
        if [ $SECONDS -gt $deadline ] || ! kill -0 "${pids[-1]}" 2>/dev/null; then
            echo "FAIL: $name did not start"; cat "$work/$name.log"; exit 1
        fi
        sleep 0.1
    done
    url=$(head -1 "$work/$name.url")
}
# serve.stats.expose=1: /v1/stats names the stages' addresses (checked against serve.stages);
# the coalescing check's 200 concurrent clients all come from 127.0.0.1, as from one CDN node:
# the per-address limit is raised as docs/OPERATIONS.md says to behind a proxy
start_serve serve -X serve.stages="$m1,$m2" -X serve.ttl.ms=20 -X serve.stats.expose=1 \
    -X serve.max.connections.per.ip=1000
serve_url=$url

# The command line: --help like every command; a bad serve.* value or a port in use: exit 2
# naming the key.
"$hc" serve --help >"$work/help.txt" # not piped into grep -q: SIGPIPE under pipefail
grep -q '^usage: hotcount serve' "$work/help.txt"
expect_usage() { # message-pattern args...
    local pattern=$1 status=0
    shift
    "$hc" serve "${cfg[@]}" "$@" >/dev/null 2>"$work/usage.err" || status=$?
    if [ "$status" -ne 2 ] || ! grep -q -- "$pattern" "$work/usage.err"; then
        echo "FAIL: hotcount serve $* exited $status:"; cat "$work/usage.err"; exit 1
    fi
}
expect_usage 'serve.ttl.ms' -X serve.ttl.ms=0
expect_usage 'serve.max.ids' -X serve.max.ids=x
expect_usage 'serve.stages' -X serve.stages=nohostport
expect_usage 'serve.listen: must not be empty' -X serve.listen=
port=${serve_url##*:}
expect_usage 'serve.listen: cannot listen' -X serve.listen="127.0.0.1:${port%/}"
start_serve serve-nostages
nostages_url=$url

"$hc" produce "${cfg[@]}" --events "$events" --posts 2000 --zipf 1.1 --unlike-ratio 0.05 \
    --seed "$$" >"$work/produce.log"
# Post ids that need URL-encoding, straight into likes.raw (stage 1 reads the value, not the key).
python3 "$here/serve_check.py" special-events "$HC_TEST_BROKERS" "t$run.raw"

"$hc" verify "${cfg[@]}" --timeout 120 | tee "$work/verify.log"
grep -q '^verify: exact' "$work/verify.log"

python3 "$here/serve_check.py" check --hotcount "$hc" --config "$work/hotcount.properties" \
    --url "$serve_url" --nostages-url "$nostages_url" --stages "$m1,$m2" --ttl-ms 20 \
    --max-ids 100 --top-max 100 --artifacts "$art"

# A clean stop on SIGTERM.
for i in "${!pids[@]}"; do
    status=0
    kill -TERM "${pids[$i]}"
    wait "${pids[$i]}" || status=$?
    [ "$status" -eq 0 ] || { echo "FAIL: process ${pids[$i]} exited $status on SIGTERM"; exit 1; }
done
pids=()
echo "serve on $store_kind: every check passed"
