#!/usr/bin/env bash
# kafka-smoke.sh: does this Kafka broker version work with Debian's librdkafka (2.0.2)?
# Run it when changing HC_KAFKA_VERSION / kafka/pom.xml (tests/README.md records the last run).
#
#   tests/harness/kafka-smoke.sh [--kcat-produce] HOTCOUNT_BINARY
#
# Under with-servers --kafka: kcat -L; kcat produce + consume + consumer-group consume; then
# hotcount's transactional path: init, produce 20 000 events over 100 posts, stage1 for 8 s
# then SIGTERM (exit 0), stage2 for 8 s then SIGTERM (exit 0), verify --timeout 30 must
# print "verify: exact". --kcat-produce writes the events with kcat instead of
# `hotcount produce` (same event format), to test the broker when the load generator is
# broken. Prints "kafka-smoke: N passed, N failed".
set -euo pipefail

HARNESS=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)

if [ "${1:-}" != --inner ]; then
    producer=hotcount
    if [ "${1:-}" = --kcat-produce ]; then
        producer=kcat
        shift
    fi
    if [ $# -ne 1 ] || [ ! -x "$1" ]; then
        sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2
        exit 2
    fi
    hc=$(cd "$(dirname "$1")" && pwd -P)/$(basename "$1")
    exec "$HARNESS/with-servers" --kafka -- "${BASH_SOURCE[0]}" --inner "$hc" "$producer"
fi

hc=$2 producer=$3
B=$HC_TEST_BROKERS
W=$HC_TEST_SERVERS_DIR/smoke
mkdir -p "$W"
db=$W/smoke.db
passed=0 failed=0

check() {
    local name=$1
    shift
    if "$@"; then
        printf 'ok   %s\n' "$name"
        passed=$((passed + 1))
    else
        printf 'FAIL %s\n' "$name"
        failed=$((failed + 1))
    fi
}

lists_broker() { kcat -b "$B" -L -m 5 | grep -q "broker 1 at $B"; }
count_is() { [ "$("$@" 2>/dev/null | wc -l)" = 1000 ]; }

# run_for SECONDS LOG CMD...: runs CMD for SECONDS, then SIGTERM; its exit status.
run_for() {
    local secs=$1 log=$2 pid rc
    shift 2
    "$@" >"$log" 2>&1 &
    pid=$!
    sleep "$secs"
    kill -TERM "$pid"
    rc=0
    wait "$pid" || rc=$?
    [ "$rc" -eq 0 ] || tail -n 20 "$log"
    return "$rc"
}

# kcat_events N POSTS: N like/unlike events in hotcount's format, keyed post#salt.
kcat_events() {
    awk -v n="$1" -v posts="$2" 'BEGIN {
        srand(7)
        for (i = 0; i < n; i++) {
            p = int(posts * rand() * rand()) + 1     # skewed towards small ids
            op = (rand() < 0.05) ? "unlike" : "like"
            pid = (i % 2) ? "\"" p "\"" : p
            printf "%d#%d\t{\"post_id\":%s,\"user_id\":\"u%d\",\"op\":\"%s\"}\n", p, i % 16, pid, i, op
        }
    }' | kcat -b "$B" -P -t likes.raw -K $'\t' -X acks=all
}

verify_exact() {
    "$hc" verify -X brokers="$B" -X store="sqlite:$db" --timeout 30 >"$W/verify.log" 2>&1 || true
    cat "$W/verify.log"
    grep -q '^verify: exact' "$W/verify.log"
}

no_unsupported() {
    ! grep -il 'unsupported.version\|UNSUPPORTED_VERSION' "$W"/*.log "$HC_TEST_SERVERS_DIR/kafka/server.log"
}

check "kcat -L lists the broker" lists_broker
check "create topic smoke" "$HC_TEST_KAFKA_CTL" topics --create --topic smoke --partitions 3
check "kcat produce 1000" bash -c "seq 1 1000 | kcat -b $B -P -t smoke -X acks=all"
check "kcat consume 1000" count_is kcat -b "$B" -C -t smoke -e -q
check "kcat consumer group consumes 1000 and commits" \
    count_is kcat -b "$B" -G smoke-group -X auto.offset.reset=earliest -e -q smoke
check "hotcount init" "$hc" init -X brokers="$B" -X store="sqlite:$db"
if [ "$producer" = kcat ]; then
    check "20000 events produced with kcat" kcat_events 20000 100
else
    check "hotcount produce --events 20000 --posts 100" \
        "$hc" produce -X brokers="$B" --events 20000 --posts 100
fi
check "hotcount stage1 for 8 s, SIGTERM, exit 0" \
    run_for 8 "$W/stage1.log" "$hc" stage1 -X brokers="$B" -X instance.id=t1
check "hotcount stage2 for 8 s, SIGTERM, exit 0" \
    run_for 8 "$W/stage2.log" "$hc" stage2 -X brokers="$B" -X store="sqlite:$db"
check "hotcount verify: exact" verify_exact
check "no UNSUPPORTED_VERSION in the client or broker logs" no_unsupported
printf 'kafka-smoke: %d passed, %d failed (Kafka %s, librdkafka %s)\n' "$passed" "$failed" \
    "$("$HC_TEST_KAFKA_CTL" version)" "$(dpkg-query -W -f='${Version}' librdkafka1 2>/dev/null || echo '?')"
[ "$failed" -eq 0 ]
