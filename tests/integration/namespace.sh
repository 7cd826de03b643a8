# shellcheck shell=bash
# A namespace of its own for one test run on the harness's shared servers (topics, groups, a
# Redis key prefix and a PostgreSQL schema, all named after $run) and the properties file that
# names them. Sourced by tests/integration/*.sh and tests/hostile/hostile.sh; the fault tests
# (tests/faults/lib.sh) take only the store from here and write their own properties file.
#
#   . namespace.sh; hc_scratch                # sets run (a unique id) and work (a scratch
#                                            # directory), and an EXIT trap that runs
#                                            # stop_tracked and removes work
#   (or set run and work yourself before calling what follows)
#   hc_namespace STORE_KIND [key=value]...   # sqlite|redis|postgresql|dynamodb|cassandra; extra
#                                            # lines go into the properties file; sets store and
#                                            # cfg (-c FILE)
#   hc_store_uri STORE_KIND                  # only the store (a PostgreSQL schema hc_<run>)
#   free_port                                # a free TCP port on 127.0.0.1
#   pids+=($!) ... stop_tracked              # SIGTERM every tracked process, then reap it
#                                            # (for the caller's EXIT trap)

hc_scratch() {
    run=$(date +%s%N | tail -c 9)-$$
    work=$(mktemp -d)
    trap 'stop_tracked; rm -rf "$work"' EXIT
}

hc_store_uri() { # KIND: sets store; status 2 for an unknown KIND
    case "$1" in
    sqlite) store="sqlite:$work/counts.db" ;;
    redis) store="${HC_TEST_REDIS_URI:?no redis from the harness}" ;;
    postgresql)
        # a schema of its own per run: the harness's database is shared by every test
        psql -q -v ON_ERROR_STOP=1 "${HC_TEST_PG_URI:?no postgresql from the harness}" \
            -c "CREATE SCHEMA hc_${run//-/_}"
        store="$HC_TEST_PG_URI?options=-csearch_path%3Dhc_${run//-/_}"
        ;;
    dynamodb)
        # tables of its own per run (prefix h<run>_) on the harness's emulator (moto)
        local uri=${HC_TEST_DYNAMODB_URI:?no dynamodb from the harness}
        store="dynamodb://us-east-1/h${run//-/_}_?${uri#*\?}"
        ;;
    cassandra)
        # a keyspace of its own per run (h<run>, one replica) on the harness's node, which runs
        # with password authentication and Cassandra's default superuser
        store="cassandra://cassandra:cassandra@${HC_TEST_CASSANDRA_CONTACT:?no cassandra from the harness}/h${run//-/_}?replication=simple:1"
        ;;
    *) return 2 ;;
    esac
}

hc_namespace() {
    local kind=$1
    shift
    hc_store_uri "$kind" || { echo "unknown store $kind" >&2; exit 2; }
    {
        printf '%s\n' "brokers=$HC_TEST_BROKERS" "topic.raw=t$run.raw" \
            "topic.partials=t$run.partials" "topic.dlq=t$run.dlq" "topic.hotkeys=t$run.hotkeys" \
            "group.stage1=g$run-stage1" \
            "group.stage2=g$run-stage2" "store=$store" "store.redis.prefix=likes-$run:" \
            "flush.ms=500" "log.level=warn" \
            "# consumer lag reaches the metrics sooner than with the default 5 s" \
            "kafka.consumer.statistics.interval.ms=1000"
        [ $# -eq 0 ] || printf '%s\n' "$@"
    } >"$work/hotcount.properties"
    cfg=(-c "$work/hotcount.properties")
}

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

pids=()
stop_tracked() {
    local pid
    for pid in "${pids[@]}"; do
        kill -TERM "$pid" 2>/dev/null || true
    done
    for pid in "${pids[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
}
