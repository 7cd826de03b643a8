#!/usr/bin/env bash
# Bounded transactional ids as a tested property (issue 14): the transactional ids the fault
# tests of this run left on the broker are one per stage-1 instance.id, whatever their kills,
# restarts and rebalances.
#
#   txn_ids.sh
#
# Under tests/harness/with-servers --kafka, after the fault tests that ran on the same broker
# (CMakeLists.txt runs it as the cleanup of their fixture, so ctest orders it after them). Each
# fault run records in $HC_TEST_SERVERS_DIR/fault-txn-ids (tests/faults/lib.sh) its group.stage1
# and the instance.id of every stage-1 process it started. This script lists every transactional
# id the broker's coordinators know, with Kafka's own tool (kafka-transactions.sh list, class
# org.apache.kafka.tools.TransactionsCommand, through kafka-ctl), and fails when one of a run's
# (the ids that start with its "<group.stage1>-") is not
#   <group.stage1>-<instance.id>   of a stage-1 instance the run started (src/stage/stage1.c), or
#   <group.stage1>-dlq-replay      the default of `hotcount dlq replay` (src/cli/cmd_dlq.c);
# (stage 2's changelog producer, <group.stage2>-counts-<instance.id>, is outside that prefix).
# It also fails when a run that started a stage 1 has no
# id at all (the listing or the matching would be broken), or when no run was recorded.
set -euo pipefail
: "${HC_TEST_KAFKA_CTL:?run under tests/harness/with-servers --kafka}"
: "${HC_TEST_BROKERS:?run under tests/harness/with-servers --kafka}"
: "${HC_TEST_SERVERS_DIR:?run under tests/harness/with-servers --kafka}"
registry=$HC_TEST_SERVERS_DIR/fault-txn-ids
[ -s "$registry" ] || { echo "FAIL: no fault run recorded in $registry"; exit 1; }

listing=$(mktemp)
trap 'rm -f "$listing"' EXIT
"$HC_TEST_KAFKA_CTL" tool org.apache.kafka.tools.TransactionsCommand \
    --bootstrap-server "$HC_TEST_BROKERS" list >"$listing" ||
    { echo "FAIL: kafka-transactions list exited $?"; exit 1; }

python3 - "$registry" "$listing" <<'EOF'
import sys

allowed = {}  # group.stage1 -> the transactional ids its run may have used
started = set()  # the groups whose run started a stage 1
for line in open(sys.argv[1]):
    f = line.split()
    if f[0] == "run":
        allowed.setdefault(f[1], {f"{f[1]}-dlq-replay"})
    elif f[0] == "stage1":
        allowed.setdefault(f[1], {f"{f[1]}-dlq-replay"}).add(f"{f[1]}-{f[2]}")
        started.add(f[1])

# TransactionsCommand list: a header line "TransactionalId Coordinator ProducerId
# TransactionState ...", then one line per id, columns separated by blanks
rows = [l.split() for l in open(sys.argv[2]) if l.strip()]
if not rows or rows[0][0] != "TransactionalId":
    sys.exit(f"FAIL: unexpected kafka-transactions output: {rows[:2]}")
ids = [r[0] for r in rows[1:]]

bad, used = [], {g: set() for g in allowed}
for tid in ids:
    for g in allowed:
        if tid.startswith(g + "-"):
            if tid in allowed[g]:
                used[g].add(tid)
            else:
                bad.append(tid)
for tid in bad:
    print(f"FAIL: transactional id {tid} is none of its run's stage-1 instance ids")
for g in sorted(started):
    if not used[g]:
        print(f"FAIL: the run of {g} started a stage 1 but left no transactional id")
if bad or any(not used[g] for g in started):
    sys.exit(1)
n = sum(len(u) for u in used.values())
print(f"txn_ids: {len(allowed)} fault runs, {n} transactional ids, each one of a stage-1 "
      f"instance.id (of {len(ids)} on the broker)")
EOF
