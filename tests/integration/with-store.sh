#!/usr/bin/env bash
# with-store.sh KIND COMMAND...: runs COMMAND with HC_TEST_STORE_URI set to the harness's store
# of that kind (a fresh SQLite file for sqlite, tables of its own for dynamodb).
set -euo pipefail
kind=${1:?usage: with-store.sh sqlite|redis|postgresql|dynamodb|cassandra COMMAND...}
shift
case "$kind" in
sqlite)
    dir=$(mktemp -d)
    trap 'rm -rf "$dir"' EXIT
    HC_TEST_STORE_URI="sqlite:$dir/contract.db" "$@"
    ;;
redis) HC_TEST_STORE_URI="${HC_TEST_REDIS_URI:?run under tests/harness/with-servers}" exec "$@" ;;
postgresql) HC_TEST_STORE_URI="${HC_TEST_PG_URI:?run under tests/harness/with-servers}" exec "$@" ;;
dynamodb)
    # Tables of this run's own (a unique prefix), dropped afterwards. The server is moto's, an
    # emulator: ~0.1 s per 100-action transaction, so the large-batch test runs with fewer
    # posts (still dozens of parts) unless HC_TEST_LARGE_BATCH says otherwise.
    uri=${HC_TEST_DYNAMODB_URI:?run under tests/harness/with-servers --dynamodb}
    prefix="hct$$_$(date +%s)_"
    region=${uri#dynamodb://}
    region=${region%%/*}
    trap '"$HC_TEST_DYNAMODB_CTL" drop-tables "$prefix" || true' EXIT
    HC_TEST_LARGE_BATCH=${HC_TEST_LARGE_BATCH:-5000} \
        HC_TEST_STORE_URI="dynamodb://$region/$prefix?${uri#*\?}" "$@"
    ;;
cassandra)
    # A keyspace of this run's own on the harness's node (with-servers --cassandra: password
    # authentication, Cassandra's default superuser), created by
    # the suite's init (replication=simple:1: one node); the node and its data go with the
    # harness's directory. Each post costs a base read and a count write: the large batch runs
    # with fewer posts (still several staged parts) unless HC_TEST_LARGE_BATCH says otherwise.
    contact=${HC_TEST_CASSANDRA_CONTACT:?run under tests/harness/with-servers --cassandra}
    HC_TEST_LARGE_BATCH=${HC_TEST_LARGE_BATCH:-20000} \
        HC_TEST_STORE_URI="cassandra://cassandra:cassandra@$contact/hct_$$_$(date +%s)?replication=simple:1" exec "$@"
    ;;
*) echo "with-store.sh: unknown store kind $kind" >&2; exit 2 ;;
esac
