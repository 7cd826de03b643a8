#!/usr/bin/env bash
# `hotcount serve` under valgrind's memcheck, every route with good and malformed input:
#
#   serve_valgrind.sh HOTCOUNT
#
# Under tests/harness/with-servers (HC_TEST_BROKERS, for `hotcount init`): a SQLite store of its
# own, serve started under valgrind with a fake stage that answers absurd values, then GETs of
# every route (malformed ids, ?n= values that are not numbers, %00, smuggling attempts), then
# SIGTERM. Fails on any memcheck error (uninitialised reads such as route_top's old one,
# invalid accesses) or a definite leak, and without valgrind. About a minute.
set -euo pipefail
hc=$(realpath "${1:?usage: serve_valgrind.sh HOTCOUNT}")
here=$(cd "$(dirname "$0")" && pwd)
: "${HC_TEST_BROKERS:?run under tests/harness/with-servers}"
command -v valgrind >/dev/null || { echo "FAIL: no valgrind (tools/install-deps installs it)"; exit 1; }
# shellcheck source-path=SCRIPTDIR source=../integration/namespace.sh
. "$here/../integration/namespace.sh"
hc_scratch
hc_namespace sqlite
"$hc" init "${cfg[@]}" >/dev/null
python3 "$here/serve_valgrind.py" --hotcount "$hc" --config "$work/hotcount.properties" \
    --work "$work"
