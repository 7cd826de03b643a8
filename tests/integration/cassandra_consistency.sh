#!/usr/bin/env bash
# cassandra_consistency.sh HOTCOUNT: `consistency=one` and `local_one` only on a keyspace that
# keeps one replica of each row (src/store/cassandra/cassandra_uri.c,
# hc_cass_consistency_check: a base read at ONE on RF 3 could miss a write another replica
# acknowledged, and the count built on it would lose likes). On the suite's node: `hotcount init
# --no-topics` with ?replication=simple:3&consistency=one exits 2 naming the contradiction and
# creates nothing (the URI's check); on an RF 3 keyspace made by the Python driver, init with
# consistency=one, then local_one, exits 2 naming the option (the check at open, against
# system_schema.keyspaces); ?replication=simple:1&consistency=one initialises (the refusal is
# about the replication, not the level). Needs HC_TEST_CASSANDRA_CONTACT (cassandra_suite.sh)
# and cassandra-driver (the harness's Python).
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
expect_refused() { # what URI-tail words-of-the-message
    local rc=0
    init "$2" || rc=$?
    if [ $rc -ne 2 ] || ! grep -q "$3" "$out"; then
        echo "cassandra_consistency: $1: exit $rc, expected 2 saying '$3':" >&2
        cat "$out" >&2
        exit 1
    fi
    echo "cassandra_consistency: $1: refused (exit 2)"
}
cql() { # keyspace statement...: "exists" or "absent" for the keyspace, after the statements
    python3 - "$contact" "$@" <<'PY'
import sys
from cassandra.auth import PlainTextAuthProvider
from cassandra.cluster import Cluster
host, _, port = sys.argv[1].rpartition(":")
cluster = Cluster([host], port=int(port), auth_provider=PlainTextAuthProvider("cassandra", "cassandra"))
session = cluster.connect()
for stmt in sys.argv[3:]:
    session.execute(stmt)
row = session.execute("SELECT keyspace_name FROM system_schema.keyspaces WHERE keyspace_name = %s",
                      (sys.argv[2],)).one()
print("exists" if row else "absent")
cluster.shutdown()
PY
}
expect_refused "init of an RF 3 keyspace at ONE" "${ks}_3?replication=simple:3&consistency=one" \
    "consistency one or local_one with a replication that keeps more than one replica"
[ "$(cql "${ks}_3")" = absent ] ||
    { echo "cassandra_consistency: the refused init created keyspace ${ks}_3" >&2; exit 1; }
[ "$(cql "${ks}_3" "CREATE KEYSPACE ${ks}_3 WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 3}")" = exists ]
expect_refused "open of the RF 3 keyspace at ONE" "${ks}_3?consistency=one" \
    "consistency=one on keyspace"
expect_refused "open of the RF 3 keyspace at LOCAL_ONE" "${ks}_3?consistency=local_one" \
    "consistency=local_one on keyspace"
if ! init "${ks}_1?replication=simple:1&consistency=one"; then
    echo "cassandra_consistency: RF 1 at ONE refused:" >&2
    cat "$out" >&2
    exit 1
fi
echo "cassandra_consistency: RF 1 at ONE initialised"
