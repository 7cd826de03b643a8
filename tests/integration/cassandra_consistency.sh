#!/usr/bin/env bash
# cassandra_consistency.sh HOTCOUNT: `consistency=one` and `local_one` only on a keyspace that
# keeps one replica of each row (src/store/cassandra/cassandra_uri.c,
# hc_cass_consistency_check: a base read at ONE on RF 3 could miss a write another replica
# acknowledged, and the count built on it would lose likes). On the suite's node: `hotcount init
# --no-topics` with ?replication=simple:3&consistency=one exits 2 naming the option (the check
# after init creates the keyspace), again on the keyspace that now exists (the check at open),
# and with local_one; ?replication=simple:1&consistency=one initialises (the refusal is about the
# replication, not the level). Needs HC_TEST_CASSANDRA_CONTACT (cassandra_suite.sh).
set -euo pipefail
hc=${1:?usage: cassandra_consistency.sh HOTCOUNT}
contact=${HC_TEST_CASSANDRA_CONTACT:?run from cassandra_suite.sh}
ks="hcc_$$_$(date +%s)"
out=$(mktemp)
trap 'rm -f "$out"' EXIT

init() { # URI-tail: exit status of hotcount init, its stderr in $out
    local rc=0
    "$hc" init --no-topics -X "store=cassandra://cassandra:cassandra@$contact/$1" \
        >/dev/null 2>"$out" || rc=$?
    return $rc
}
expect_refused() { # what URI-tail
    local rc=0
    init "$2" || rc=$?
    if [ $rc -ne 2 ] || ! grep -q "consistency=$3 on keyspace" "$out"; then
        echo "cassandra_consistency: $1: exit $rc, expected 2 naming consistency=$3:" >&2
        cat "$out" >&2
        exit 1
    fi
    echo "cassandra_consistency: $1: refused (exit 2)"
}
expect_refused "init creating an RF 3 keyspace at ONE" "${ks}_3?replication=simple:3&consistency=one" one
expect_refused "open of the RF 3 keyspace at ONE" "${ks}_3?consistency=one" one
expect_refused "open of the RF 3 keyspace at LOCAL_ONE" "${ks}_3?consistency=local_one" local_one
if ! init "${ks}_1?replication=simple:1&consistency=one"; then
    echo "cassandra_consistency: RF 1 at ONE refused:" >&2
    cat "$out" >&2
    exit 1
fi
echo "cassandra_consistency: RF 1 at ONE initialised"
