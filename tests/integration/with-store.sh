#!/usr/bin/env bash
# with-store.sh KIND COMMAND...: runs COMMAND with HC_TEST_STORE_URI set to the harness's store
# of that kind (a fresh SQLite file for sqlite).
set -euo pipefail
kind=${1:?usage: with-store.sh sqlite|redis|postgresql COMMAND...}
shift
case "$kind" in
sqlite)
    dir=$(mktemp -d)
    trap 'rm -rf "$dir"' EXIT
    HC_TEST_STORE_URI="sqlite:$dir/contract.db" "$@"
    ;;
redis) HC_TEST_STORE_URI="${HC_TEST_REDIS_URI:?run under tests/harness/with-servers}" exec "$@" ;;
postgresql) HC_TEST_STORE_URI="${HC_TEST_PG_URI:?run under tests/harness/with-servers}" exec "$@" ;;
*) echo "with-store.sh: unknown store kind $kind" >&2; exit 2 ;;
esac
