#!/usr/bin/env bash
# The command line's contract: exit statuses, --help, configuration errors naming the key.
# Needs no broker: every case fails or finishes before connecting anywhere.
set -u
hc=${1:?usage: test_cli.sh path/to/hotcount}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0

check() { # name expected_status expected_stderr_or_stdout_regex -- command...
    local name=$1 want=$2 pattern=$3
    shift 4
    "$@" >"$tmp/out" 2>"$tmp/err"
    local got=$?
    if [ "$got" != "$want" ]; then
        echo "FAIL $name: exit $got, want $want"; cat "$tmp/err"; fails=$((fails + 1)); return
    fi
    if [ -n "$pattern" ] && ! grep -Eq -- "$pattern" "$tmp/out" "$tmp/err"; then
        echo "FAIL $name: output lacks /$pattern/"; cat "$tmp/out" "$tmp/err"; fails=$((fails + 1)); return
    fi
    echo "ok   $name"
}

check no_command_is_usage_error 2 'usage: hotcount <command>' -- "$hc"
check help_lists_every_command 0 'mock-broker' -- "$hc" --help
check unknown_command_is_usage_error 2 'unknown command "frobnicate"' -- "$hc" frobnicate
for c in demo stage1 stage2 run produce init get top verify mock-broker config metrics; do
    check "help_of_$c" 0 "usage: hotcount $c" -- "$hc" "$c" --help
done
check help_shows_config_keys 0 'flush\.ms' -- "$hc" stage1 --help
# The generated references (docs/CONFIGURATION.md, the metric tables): their commands.
check config_markdown_is_the_key_reference 0 '^\| `flush\.ms` \| `1000` \| 10\.\.3600000 \| ' -- "$hc" config --markdown
check metrics_lists_the_registry 0 '^hotcount_events_total	counter	result=' -- "$hc" metrics
check metrics_serve_lists_serve_s_page 0 '^hotcount_serve_requests_total	counter	code=' -- "$hc" metrics --serve
check metrics_markdown_is_the_docs_table 0 '^\| `hotcount_consumer_lag` \| gauge \| `topic`, `partition` \| ' -- "$hc" metrics --markdown

# --version: one "NAME VERSION (file...)" line per library; the versions it runs with must be
# the ones CMake built against (HC_EXPECT_*, from ctest): a lost rpath would load another one.
check version_names_every_library 0 '^hotcount [0-9]' -- "$hc" --version
for lib in librdkafka jansson hiredis libpq SQLite libmicrohttpd; do
    grep -Eq "^$lib [0-9]+\.[0-9]+(\.[0-9]+)? \((built with [^,]+, )?/" "$tmp/out" ||
        { echo "FAIL version_of_$lib: not in --version"; cat "$tmp/out"; fails=$((fails + 1)); }
done
check version_takes_no_arguments 2 'no arguments' -- "$hc" --version extra
for want in "librdkafka ${HC_EXPECT_RDKAFKA:-}" "hiredis ${HC_EXPECT_HIREDIS:-}" \
            "libmicrohttpd ${HC_EXPECT_MHD:-}"; do
    [ "${want#* }" != "" ] || continue
    check "version_runs_with_${want% *}_${want#* }" 0 "^${want//./\\.} \\(/" -- "$hc" --version
done
check unknown_key_names_it 2 'flush\.msx' -- "$hc" stage1 -X flush.msx=5
check bad_value_names_key 2 'flush\.ms' -- "$hc" stage2 -X flush.ms=abc
check x_without_equals_is_error 2 'nonsense' -- "$hc" run -X nonsense
printf 'flush.ms=1000\n# comment\nbogus.key=1\n' >"$tmp/bad.properties"
check file_error_names_line_and_key 2 'bad\.properties:3.*bogus\.key' -- "$hc" stage1 -c "$tmp/bad.properties"
check missing_file_is_config_error 2 'nope\.properties' -- "$hc" stage1 -c "$tmp/nope.properties"
check bad_store_scheme_names_key 2 'store' -- "$hc" get -X store=mysql://x 1
check unknown_option_is_usage_error 2 'unknown or incomplete option' -- "$hc" produce --frob
check bad_option_value_names_option 2 '--events' -- "$hc" produce --events many
check get_needs_a_post 2 "at least one post, or --all" -- "$hc" get -X store=sqlite:"$tmp/x.db"
check bad_kafka_property_names_it 2 'kafka\.consumer\.no\.such\.property' -- "$hc" stage2 -X store=sqlite:"$tmp/x.db" -X kafka.consumer.no.such.property=1

check check_config_accepts_good_config 0 'configuration ok' -- "$hc" run --check-config -X kafka.fetch.max.bytes=1048576
check check_config_names_bad_kafka_key 2 'kafka\.producer\.linger\.mss' -- "$hc" stage1 --check-config -X kafka.producer.linger.mss=5
check check_config_names_bad_kafka_value 2 'kafka\.consumer\.fetch\.max\.bytes' -- "$hc" stage2 --check-config -X kafka.consumer.fetch.max.bytes=lots
check check_config_runs_cross_checks 2 'message\.timeout\.ms|transaction\.timeout\.ms' -- "$hc" stage1 --check-config -X kafka.producer.message.timeout.ms=900000

# Settings exactly-once depends on are hotcount's: an override exits 2 naming the key and why
# (issue 16); the same value hotcount sets, and tuning, stay allowed.
check_absent() { # name pattern: the last check's output must not match
    if grep -Eq -- "$2" "$tmp/out" "$tmp/err"; then
        echo "FAIL $1: output has /$2/"; cat "$tmp/out" "$tmp/err"; fails=$((fails + 1)); return
    fi
    echo "ok   $1"
}
for kv in kafka.isolation.level=read_uncommitted kafka.consumer.enable.auto.commit=true \
          kafka.enable.auto.offset.store=true kafka.auto.offset.reset=latest \
          kafka.producer.transactional.id=other kafka.producer.enable.idempotence=false \
          kafka.acks=1 kafka.consumer.partition.assignment.strategy=cooperative-sticky \
          kafka.group.id=mine kafka.consumer.enable.partition.eof=true \
          kafka.auto.commit.enable=true kafka.producer.delivery.report.only.error=true; do
    key=${kv%%=*}
    check "owned_${key#kafka.}_is_refused" 2 "${key//./\\.}=.*exactly-once depends on it" -- "$hc" run --check-config -X "$kv"
done
# Stage 2's dead-letter producer is idempotent (not transactional) and is built only at the first
# bad partial: an override librdkafka would refuse then (or one that makes an outage fatal) is
# refused here, by stage2 --check-config, not by the stage stopping on that record.
for kv in kafka.producer.max.in.flight=6 kafka.producer.max.in.flight.requests.per.connection=10 \
          kafka.producer.retries=0 kafka.producer.message.send.max.retries=0 \
          kafka.producer.queuing.strategy=lifo kafka.producer.enable.gapless.guarantee=true \
          kafka.retries=-1 kafka.max.in.flight=many; do
    key=${kv%%=*}
    check "owned_${key#kafka.}_${kv#*=}_is_refused" 2 "${key//./\\.}=.*exactly-once depends on it: .*idempotent" -- "$hc" stage2 --check-config -X "$kv"
done
check dlq_producer_safe_values_are_fine 0 'configuration ok' -- "$hc" stage2 --check-config -X kafka.producer.max.in.flight=5 -X kafka.producer.retries=10 -X kafka.producer.queuing.strategy=fifo -X kafka.producer.enable.gapless.guarantee=false
check owned_setting_refused_by_every_command 2 'isolation\.level' -- "$hc" produce --events 1 -X kafka.isolation.level=read_uncommitted
check owned_setting_at_hotcounts_value_is_fine 0 'configuration ok' -- "$hc" run --check-config -X kafka.isolation.level=read_committed -X kafka.acks=all -X kafka.consumer.partition.assignment.strategy=range
check tuning_stays_overridable 0 'configuration ok' -- "$hc" run --check-config -X kafka.producer.transaction.timeout.ms=120000 -X kafka.consumer.session.timeout.ms=6000 -X kafka.linger.ms=20
# The consumer group protocol (issue 17): group.protocol=consumer refuses the classic
# protocol's settings, naming the key; the key itself is hotcount's, not kafka.*'s.
for key in kafka.consumer.session.timeout.ms kafka.heartbeat.interval.ms \
           kafka.consumer.partition.assignment.strategy kafka.group.protocol.type; do
    check "consumer_protocol_refuses_${key#kafka.}" 2 "${key//./\\.}: not with group\\.protocol=consumer" -- "$hc" run --check-config -X group.protocol=consumer -X "$key=range"
done
check consumer_protocol_is_fine 0 'configuration ok' -- "$hc" run --check-config -X group.protocol=consumer -X instance.id=r0
check static_is_fine_under_classic 0 'configuration ok' -- "$hc" run --check-config -X group.static=1 -X instance.id=r0
check consumer_protocol_refuses_static 2 'group\.static=1 with group\.protocol=consumer' -- "$hc" run --check-config -X group.protocol=consumer -X group.static=1 -X instance.id=r0
check group_protocol_value_is_checked 2 'group\.protocol: "eager" is not a group protocol' -- "$hc" stage1 --check-config -X group.protocol=eager
check kafka_group_protocol_is_refused 2 'kafka\.group\.protocol: set the key group\.protocol' -- "$hc" stage1 --check-config -X kafka.group.protocol=consumer
check static_and_group_instance_id_is_refused 2 'kafka\.consumer\.group\.instance\.id: group\.static=1' -- "$hc" stage1 --check-config -X group.static=1 -X kafka.consumer.group.instance.id=x
check property_of_the_other_client_kind_is_refused 2 'transaction\.timeout\.ms is a producer property' -- "$hc" stage1 --check-config -X kafka.consumer.transaction.timeout.ms=1000
# Keys checked together, with the reason.
check flush_past_transaction_timeout_is_refused 2 'flush\.ms=3600000.*transaction\.timeout\.ms=60000.*transaction\.max\.timeout\.ms' -- "$hc" stage1 --check-config -X flush.ms=3600000
check users_transaction_timeout_counts 2 'flush\.ms=40000.*kafka\.producer\.transaction\.timeout\.ms=60000' -- "$hc" stage1 --check-config -X kafka.producer.transaction.timeout.ms=60000 -X flush.ms=40000
check watchdog_below_longest_call_is_refused 2 'watchdog\.ms=3000.*longest blocking call' -- "$hc" stage2 --check-config -X watchdog.ms=3000
check watchdog_off_is_fine 0 'configuration ok' -- "$hc" stage2 --check-config -X watchdog.ms=0
check hot_key_thresholds_must_not_cross 2 'hotkeys\.leave\.rate.*hotkeys\.enter\.rate' -- "$hc" stage1 --check-config -X hotkeys.enter.rate=100 -X hotkeys.leave.rate=100
check serve_hot_thresholds_must_not_cross 2 'serve\.hot\.leave\.rate.*serve\.hot\.enter\.rate' -- "$hc" serve -X serve.listen=127.0.0.1:0 -X serve.hot.enter.rate=100 -X serve.hot.leave.rate=100
check serve_hot_ttl_not_below_serve_ttl 2 'serve\.hot\.ttl\.ms.*serve\.ttl\.ms' -- "$hc" serve -X serve.listen=127.0.0.1:0 -X serve.ttl.ms=500 -X serve.hot.ttl.ms=100
check event_max_bytes_must_fit_the_producer 2 'event\.max\.bytes=1048576.*message\.max\.bytes' -- "$hc" stage1 --check-config -X event.max.bytes=1048576
# No CONFWARN for what hotcount hands to a client: neither its own settings nor kafka.<prop>,
# which goes only to the kind of client that reads it.
check check_config_builds_clients_quietly 0 'configuration ok' -- "$hc" run --check-config -X kafka.fetch.max.bytes=1048576 -X kafka.linger.ms=5 -X kafka.transaction.timeout.ms=60000
check_absent check_config_prints_no_confwarn 'CONFWARN'

# The example configuration parses back, and -X overrides apply after the file.
"$hc" config >"$tmp/example.properties"
check example_config_parses 0 '' -- "$hc" config -c "$tmp/example.properties"
check override_after_file_is_checked 2 'salts' -- "$hc" config -c "$tmp/example.properties" -X salts=0

# The store commands on an empty SQLite store.
check init_schema_only 0 'initialised' -- "$hc" init --no-topics -X store=sqlite:"$tmp/c.db"
check init_is_repeatable 0 'initialised' -- "$hc" init --no-topics -X store=sqlite:"$tmp/c.db"
check get_unknown_post_is_zero 0 $'^p1\t0$' -- "$hc" get -X store=sqlite:"$tmp/c.db" p1
check get_json 0 '"post_id": ?"p1".*"likes": ?0' -- "$hc" get --json -X store=sqlite:"$tmp/c.db" p1
check top_of_empty_store 0 '' -- "$hc" top -n 5 -X store=sqlite:"$tmp/c.db"
sqlite3 "$tmp/c.db" "INSERT INTO hotcount_counts VALUES ('p7', 42, 0), ('p8', 5, 0)"
check top_orders_by_count 0 $'^p7\t42$' -- "$hc" top -n 1 -X store=sqlite:"$tmp/c.db"
check top_live_refreshes_with_rates 0 'p7 +42 +0$' -- "$hc" top --live --iterations 2 --interval 0.1 -X store=sqlite:"$tmp/c.db"
check top_rejects_bad_interval 2 'interval' -- "$hc" top --live --interval 0 -X store=sqlite:"$tmp/c.db"
# n stops at serve.top.max, as /v1/top's does (issue 25: no path asks a store for more than
# its index holds); mutant: the CLI's check gone (exit 0).
check top_n_stops_at_serve_top_max 2 'serve.top.max \(100\)' -- "$hc" top -n 101 -X store=sqlite:"$tmp/c.db"
check top_n_follows_serve_top_max 0 $'^p7\t42$' -- "$hc" top -n 101 -X serve.top.max=101 -X store=sqlite:"$tmp/c.db"
check options_after_posts_apply 2 'X store: "mysql' -- "$hc" get p2 -X store=mysql://x
check get_all_of_empty_store 0 '' -- "$hc" get --all -X store=sqlite:"$tmp/c.db"

if [ "$fails" -ne 0 ]; then
    echo "$fails CLI check(s) failed"
    exit 1
fi
echo "all CLI checks passed"
