#!/usr/bin/env bash
# cassandra_suite.sh SHIM_TEST CONTRACT_TEST STORE_TEST HOTCOUNT: the Cassandra tests on ONE
# node (its start costs 15-35 s and 1.5 GB, so CTest runs them as one test, `cassandra`): the
# driver shim, the store contract suite in a keyspace of its own, the backend's own tests, the
# refusal of consistency=one on a keyspace with more than one replica, and the whole pipeline
# (tests/integration/pipeline_real.sh HOTCOUNT cassandra, 200 000 events
# unless HC_TEST_EVENTS says otherwise; it needs the harness's broker too: with-servers --all or
# --kafka). Under tests/harness/with-servers --cassandra the node it names is used; else
# with-cassandra.sh starts one. Every program runs even when an earlier one failed; the exit
# status says whether any did.
set -euo pipefail
[ $# -eq 4 ] || { echo "usage: cassandra_suite.sh SHIM_TEST CONTRACT_TEST STORE_TEST HOTCOUNT" >&2; exit 2; }
here=$(dirname "$0")
if [ -z "${HC_TEST_CASSANDRA_CONTACT:-}" ]; then
    exec "$here/with-cassandra.sh" "$0" "$@"
fi
failed=''
run() {
    local name=$1 t0=$SECONDS
    shift
    echo "== cassandra_suite: $name"
    if "$@"; then
        echo "== cassandra_suite: $name passed in $((SECONDS - t0)) s"
    else
        echo "== cassandra_suite: $name FAILED after $((SECONDS - t0)) s"
        failed="$failed $name"
    fi
}
run cql_shim "$1"
run store_contract_cassandra "$here/with-store.sh" cassandra "$2"
run store_cassandra "$here/with-store.sh" cassandra "$3"
run consistency "$here/cassandra_consistency.sh" "$4"
if [ -n "${HC_TEST_BROKERS:-}" ]; then
    run pipeline_real_cassandra env HC_TEST_EVENTS="${HC_TEST_EVENTS:-200000}" \
        "$here/pipeline_real.sh" "$4" cassandra
else
    echo "== cassandra_suite: pipeline_real_cassandra FAILED: no broker (run under" \
        "tests/harness/with-servers --all, or --kafka --cassandra)"
    failed="$failed pipeline_real_cassandra"
fi
if [ -n "$failed" ]; then
    echo "cassandra_suite: failed:$failed" >&2
    exit 1
fi
