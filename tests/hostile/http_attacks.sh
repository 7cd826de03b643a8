#!/usr/bin/env bash
# Hostile HTTP clients against `hotcount serve` and a stage's metrics endpoint:
#
#   http_attacks.sh HOTCOUNT [SECONDS]
#
# Under tests/harness/with-servers (HC_TEST_BROKERS): a SQLite store and topics of a namespace of
# its own (`hotcount init`), one stage-1 process for its metrics endpoint, then
# tests/hostile/http_attacks.py (fake stages that hang or answer absurd values, request smuggling,
# a slowloris of 240 connections per listener for SECONDS, default 15, SIGTERM during scrapes).
# Loopback only; about 30 s.
set -euo pipefail
hc=$(realpath "${1:?usage: http_attacks.sh HOTCOUNT [SECONDS]}")
seconds=${2:-15}
here=$(cd "$(dirname "$0")" && pwd)
: "${HC_TEST_BROKERS:?run under tests/harness/with-servers}"
# shellcheck source-path=SCRIPTDIR source=../integration/namespace.sh
. "$here/../integration/namespace.sh"
hc_scratch
hc_namespace sqlite
"$hc" init "${cfg[@]}" >/dev/null
m1=127.0.0.1:$(free_port)
"$hc" stage1 "${cfg[@]}" -X instance.id=h1 -X metrics.listen="$m1" 2>>"$work/stage1.log" &
pids+=($!)
deadline=$((SECONDS + 30))
until python3 -c "import urllib.request,sys; urllib.request.urlopen('http://$m1/healthz', timeout=1)" 2>/dev/null; do
    if [ $SECONDS -gt $deadline ] || ! kill -0 "${pids[-1]}" 2>/dev/null; then
        echo "FAIL: stage1 did not serve /healthz"; cat "$work/stage1.log"; exit 1
    fi
    sleep 0.2
done
status=0
python3 "$here/http_attacks.py" --hotcount "$hc" --config "$work/hotcount.properties" \
    --metrics "$m1" --work "$work" --seconds "$seconds" || status=$?
if [ "$status" -ne 0 ]; then
    for f in "$work"/*.log; do echo "---- $f"; tail -n 20 "$f"; done
fi
kill -0 "${pids[-1]}" 2>/dev/null || { echo "FAIL: stage1 died"; status=1; }
exit "$status"
