#!/usr/bin/env bash
# `hotcount serve` under load, on loopback: requests/s, p99 latency and store reads/s.
#
#   bench/serve/run.sh [HOTCOUNT]        (default: build/hotcount)
#
# Seeds a SQLite store with POSTS posts (Zipfian counts; no Kafka needed), starts
# `hotcount serve` on a free port, and runs wrk twice: every request for the hottest post, then
# a Zipfian mix of ids (bench/serve/zipf.lua). Store reads/s come from serve's own
# hotcount_serve_store_reads_total before and after each run. The target: store reads per hot
# key <= 1000 / serve.ttl.ms per second (50/s at the default 20 ms), whatever the request rate.
# Environment: DURATION (s, 10), CONNECTIONS (64), WRK_THREADS (2), TTL_MS (20), POSTS (100000),
# ZIPF_S (1.1), SERVE_THREADS (4), STORE (a store URI instead of the seeded SQLite file).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
hc=$(realpath "${1:-$here/../../build/hotcount}")
duration=${DURATION:-10} conns=${CONNECTIONS:-64} wthreads=${WRK_THREADS:-2}
ttl=${TTL_MS:-20} posts=${POSTS:-100000} zipf_s=${ZIPF_S:-1.1} sthreads=${SERVE_THREADS:-4}
command -v wrk >/dev/null || { echo "wrk is not installed (tools/install-deps)" >&2; exit 2; }

work=$(mktemp -d)
serve_pid=
cleanup() {
    [ -z "$serve_pid" ] || { kill -TERM "$serve_pid" 2>/dev/null; wait "$serve_pid" 2>/dev/null; }
    rm -rf "$work"
}
trap cleanup EXIT

store=${STORE:-sqlite:$work/bench.db}
if [ -z "${STORE:-}" ]; then
    "$hc" init --no-topics -X store="$store" >/dev/null
    # post k gets about 10^7 / k^s likes, like a long Zipfian stream would leave it
    sqlite3 "$work/bench.db" "WITH RECURSIVE k(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM k
        WHERE i < $posts) INSERT INTO hotcount_counts SELECT CAST(i AS TEXT),
        CAST(10000000 / pow(i, $zipf_s) AS INTEGER) + 1, 0 FROM k;" 2>/dev/null ||
    sqlite3 "$work/bench.db" "WITH RECURSIVE k(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM k
        WHERE i < $posts) INSERT INTO hotcount_counts SELECT CAST(i AS TEXT),
        10000000 / i + 1, 0 FROM k;"
fi

"$hc" serve -X store="$store" -X serve.listen=127.0.0.1:0 -X serve.ttl.ms="$ttl" \
    -X serve.threads="$sthreads" -X log.level=warn >"$work/url" 2>"$work/serve.log" &
serve_pid=$!
for _ in $(seq 100); do [ -s "$work/url" ] && break; sleep 0.1; done
url=$(head -1 "$work/url")
[ -n "$url" ] || { cat "$work/serve.log"; exit 1; }

reads() {
    curl -sf "${url}metrics" | awk '/^hotcount_serve_store_reads_total\{kind="likes"\}/ {print $2}'
}

echo "hotcount serve: store ${store%%:*}, TTL ${ttl} ms," \
    "$sthreads serve threads; wrk -t$wthreads -c$conns -d${duration}s on $(nproc) cores"
printf '%-10s %12s %10s %10s %16s %14s\n' run requests/s p50 p99 "store reads/s" "target/key"
bench() { # name wrk-args...
    local name=$1
    shift
    local r0 t0 r1 t1
    r0=$(reads)
    t0=$(date +%s.%N)
    wrk -t"$wthreads" -c"$conns" -d"${duration}s" --latency "$@" >"$work/$name.txt"
    t1=$(date +%s.%N)
    r1=$(reads)
    local rps p50 p99 errors
    rps=$(awk '/^Requests\/sec:/ {print $2}' "$work/$name.txt")
    p50=$(awk '$1 == "50%" {print $2}' "$work/$name.txt")
    p99=$(awk '$1 == "99%" {print $2}' "$work/$name.txt")
    errors=$(grep -E "Non-2xx|Socket errors" "$work/$name.txt" || true)
    printf '%-10s %12.0f %10s %10s %16.1f %14s\n' "$name" "$rps" "$p50" "$p99" \
        "$(awk -v a="$r0" -v b="$r1" -v s="$t0" -v e="$t1" 'BEGIN {print (b - a) / (e - s)}')" "<= $((1000 / ttl))"
    [ -z "$errors" ] || echo "  $name: $errors"
}
bench hot "${url}v1/likes/1"
ZIPF_POSTS=$posts ZIPF_S=$zipf_s bench zipf -s "$here/zipf.lua" "$url"
curl -sf "${url}metrics" | grep -E '^hotcount_serve_(cache_(hits|coalesced|evictions)_total|cache_entries) '
