#!/usr/bin/env bash
# with-cassandra.sh COMMAND...: runs COMMAND with HC_TEST_CASSANDRA_CONTACT set: the node the
# environment already names (a run under tests/harness/with-servers --cassandra), else a node of
# its own that tests/harness/with-servers --cassandra starts for COMMAND and stops afterwards
# (about 20-35 s and 1.5 GB: Cassandra is not part of with-servers --all).
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: with-cassandra.sh COMMAND..." >&2; exit 2; }
if [ -n "${HC_TEST_CASSANDRA_CONTACT:-}" ]; then
    exec "$@"
fi
exec "$(dirname "$0")/../harness/with-servers" --cassandra -- "$@"
