#!/usr/bin/env bash
# `hotcount serve`'s whole /metrics page against the page it served before the metric registry
# (tests/cli/serve_metrics_page.golden): every # HELP, # TYPE, name and label line byte for
# byte, sample values masked. No broker: a SQLite store without a schema (a read fails, which
# is counted). A change to the page is deliberate only when the golden file changes with it.
set -u
hc=${1:?usage: serve_metrics_page.sh path/to/hotcount}
golden=$(dirname "$0")/serve_metrics_page.golden
tmp=$(mktemp -d)
pid=
cleanup() {
    [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT

"$hc" serve -X store=sqlite:"$tmp/x.db" -X serve.listen=127.0.0.1:0 -X serve.hot.follow=0 \
    >"$tmp/log" 2>&1 &
pid=$!
port=
for _ in $(seq 1 100); do
    port=$(sed -n 's/.*serving the read API on .* (port \([0-9]*\)).*/\1/p' "$tmp/log" | head -1)
    [ -n "$port" ] && break
    sleep 0.1
done
[ -n "$port" ] || { echo "FAIL serve did not start"; cat "$tmp/log"; exit 1; }
curl -s "http://127.0.0.1:$port/v1/likes?ids=1" >/dev/null
curl -s "http://127.0.0.1:$port/nope" >/dev/null
curl -sf "http://127.0.0.1:$port/metrics" >"$tmp/page" || { echo "FAIL GET /metrics"; exit 1; }
sed -E 's/^(hotcount_[^ ]*) .*/\1 V/' "$tmp/page" >"$tmp/masked"
if ! diff -u "$golden" "$tmp/masked"; then
    echo "FAIL serve's /metrics page differs from $golden"
    exit 1
fi
echo "ok   serve_metrics_page ($(wc -l <"$tmp/page") lines)"
