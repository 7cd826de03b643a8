#!/usr/bin/env bash
# No secret is ever printed (issue 16): one known password goes through every path that could
# quote it (a mistyped store scheme, unreachable Redis and PostgreSQL stores with a password in
# each URI form, -X without '=', bad properties lines, a bad librdkafka value of a SASL key,
# `hotcount config`, --check-config, a running stage's stderr and /metrics, serve's /v1/stats
# and /metrics; and, read from files, kafka.*.file and store.password.file: used against
# unreachable stores, refused files, refused combinations, `config`), and every byte of output
# is searched for it.
#   secrets.sh HOTCOUNT
# Needs no servers: the stores are unreachable on purpose and Kafka is hotcount's in-process
# mock broker. The check that the search itself bites: a build with -DHC_MUTANT_NO_REDACT
# (src/base/redact.c passes everything through) must fail this script (CTest's
# mutant_no_redact_secrets runs it on hotcount_no_redact).
set -u
hc=$(realpath "${1:?usage: secrets.sh HOTCOUNT}")
tmp=$(mktemp -d)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    rm -rf "$tmp"
}
trap cleanup EXIT
# Distinct per run; no character that a shell, a URI or libpq would treat specially.
pw="Hc7pw${RANDOM}x${RANDOM}Qz"
fails=0
n=0

# run NAME COMMAND...: runs it (any exit status), keeps stdout+stderr as output NAME
run() {
    run_for 60 "$@"
}
# run_for SECONDS NAME COMMAND...: the same, stopped with SIGTERM after SECONDS if still running
run_for() {
    local secs=$1 name=$2
    shift 2
    n=$((n + 1))
    timeout "$secs" "$@" >"$tmp/$n.$name.out" 2>&1 </dev/null
    echo "$?" >"$tmp/$n.$name.status"
}
# expect NAME STATUS: the last run of NAME exited with STATUS (so the path really ran)
expect() {
    local f
    f=$(ls "$tmp"/*."$1".status | tail -1)
    if [ "$(cat "$f")" != "$2" ]; then
        echo "FAIL $1: exit $(cat "$f"), want $2"; cat "${f%.status}.out"; fails=$((fails + 1))
    fi
}
free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# 1. store URIs with the password in every form, where no server answers
run bad_scheme "$hc" stage1 -X "store=redsi://user:$pw@host:1/0"
expect bad_scheme 2
run bad_scheme_config "$hc" config -X "store=redsi://:$pw@host:1/0"
expect bad_scheme_config 2
run no_scheme "$hc" get p1 -X "store=user:$pw@127.0.0.1:1"
expect no_scheme 2
run redis_user_pw "$hc" get p1 -X "store=redis://user:$pw@127.0.0.1:1/0"
expect redis_user_pw 1
run redis_pw "$hc" init --no-topics -X "store=redis://:$pw@127.0.0.1:1/0"
run redis_bad_uri "$hc" get p1 -X "store=redis://:$pw@127.0.0.1:1/0?x=1"
expect redis_bad_uri 2
run pg_user_pw "$hc" get p1 -X "store=postgresql://hc:$pw@127.0.0.1:1/likes"
expect pg_user_pw 1
run pg_query_pw "$hc" top -n 1 -X "store=postgresql://hc@127.0.0.1:1/likes?password=$pw&connect_timeout=2"
run pg_bad_uri "$hc" get p1 -X "store=postgresql://hc:$pw@127.0.0.1:1/likes?nosuchoption=1"
run pg_keyword_form "$hc" get p1 -X "store=host=127.0.0.1 port=1 password=$pw"
expect pg_keyword_form 2

# 1b. secrets read from files (kafka.*.file, store.password.file; issue 17): the content of each
# file is the password; every path that reads, refuses or uses it
printf '%s\n' "$pw" >"$tmp/pw.secret"
printf '%s\0%s\n' "$pw" "$pw" >"$tmp/nul.secret"
run file_redis_down "$hc" get p1 -X "store=redis://user@127.0.0.1:1/0" \
    -X "store.password.file=$tmp/pw.secret"
expect file_redis_down 1
run file_rediss_down "$hc" init --no-topics -X "store=rediss://user@127.0.0.1:1/0" \
    -X "store.password.file=$tmp/pw.secret"
run file_rediss_bad_ca "$hc" get p1 -X "store=rediss://user@127.0.0.1:1/0?cacert=$tmp/nul.secret" \
    -X "store.password.file=$tmp/pw.secret"
expect file_rediss_bad_ca 2
run file_pg_down "$hc" get p1 -X "store=postgresql://hc@127.0.0.1:1/likes?sslmode=verify-full" \
    -X "store.password.file=$tmp/pw.secret"
expect file_pg_down 1
run file_two_passwords "$hc" get p1 -X "store=rediss://user:$pw@127.0.0.1:1/0" \
    -X "store.password.file=$tmp/pw.secret"
expect file_two_passwords 2
run file_sqlite_password "$hc" get p1 -X "store=sqlite:$tmp/x.db" -X "store.password.file=$tmp/pw.secret"
expect file_sqlite_password 2
run file_nul "$hc" stage1 -X "kafka.sasl.password.file=$tmp/nul.secret"
expect file_nul 2
run file_not_secret "$hc" stage1 -X "kafka.client.id.file=$tmp/pw.secret"
expect file_not_secret 2
run file_config "$hc" config -X "kafka.sasl.password.file=$tmp/pw.secret" \
    -X "kafka.consumer.ssl.key.password.file=$tmp/pw.secret" -X "store=rediss://u@h:1/0" \
    -X "store.password.file=$tmp/pw.secret"
expect file_config 0
run file_check_config "$hc" run --check-config -X "kafka.sasl.password.file=$tmp/pw.secret" \
    -X kafka.security.protocol=SASL_SSL -X kafka.sasl.mechanism=SCRAM-SHA-256 \
    -X kafka.sasl.username=u -X "store=postgresql://hc@127.0.0.1:1/likes" \
    -X "store.password.file=$tmp/pw.secret"
expect file_check_config 0

# 2. -X and properties lines that do not parse
run x_without_equals "$hc" stage1 -X "store:redis://u:$pw@h"
expect x_without_equals 2
run x_secret_without_equals "$hc" stage1 -X "kafka.sasl.password $pw"
expect x_secret_without_equals 2
run x_unknown_key_holding_uri "$hc" stage1 -X "redis://u:$pw@h=1"
expect x_unknown_key_holding_uri 2
printf 'flush.ms=1000\nstore redis://:%s@h:1/0\n' "$pw" >"$tmp/bad1.properties"
run file_line_uri "$hc" stage2 -c "$tmp/bad1.properties"
expect file_line_uri 2
printf 'kafka.sasl.password %s\n' "$pw" >"$tmp/bad2.properties"
run file_line_secret "$hc" stage2 -c "$tmp/bad2.properties"
expect file_line_secret 2
printf 'kafka.sasl.password:%s\n' "$pw" >"$tmp/bad3.properties"
run file_line_secret_colon "$hc" stage2 -c "$tmp/bad3.properties"
expect file_line_secret_colon 2
# librdkafka quotes a value it refuses: a SASL key's must not come back
run bad_sasl_value "$hc" stage1 --check-config -X "kafka.sasl.mechanisms=$pw" \
    -X kafka.security.protocol=SASL_PLAINTEXT
expect bad_sasl_value 2
run sasl_value_warned_about "$hc" stage1 --check-config -X "kafka.sasl.mechanisms=$pw"

# 3. a good configuration full of secrets: `config`, --check-config
secrets=(-X "store=postgresql://hc:$pw@127.0.0.1:1/likes" -X "kafka.sasl.password=$pw"
         -X "kafka.producer.ssl.key.password=$pw" -X "kafka.sasl.username=u$pw"
         -X "kafka.sasl.oauthbearer.config=principal=$pw")
printf 'store=redis://user:%s@127.0.0.1:1/0\nkafka.sasl.password=%s\n' "$pw" "$pw" >"$tmp/good.properties"
run config_output "$hc" config -c "$tmp/good.properties" "${secrets[@]}"
expect config_output 0
run check_config "$hc" run --check-config -c "$tmp/good.properties" "${secrets[@]}"
expect check_config 0
run check_config_bad_key "$hc" run --check-config "${secrets[@]}" -X kafka.isolation.level=read_uncommitted
expect check_config_bad_key 2

# 4. running stages and serve on the mock broker: stderr (text and JSON logs), /metrics,
# /v1/stats
"$hc" mock-broker >"$tmp/mock.out" 2>"$tmp/mock.err" &
pids+=("$!")
for _ in $(seq 100); do [ -s "$tmp/mock.out" ] && break; sleep 0.1; done
brokers=$(head -1 "$tmp/mock.out")
[ -n "$brokers" ] || { echo "FAIL: mock-broker printed no address"; cat "$tmp/mock.err"; exit 1; }
m1=$(free_port)
m2=$(free_port)
"$hc" stage1 -X brokers="$brokers" -X instance.id=sec1 -X metrics.listen=127.0.0.1:"$m1" \
    -X "store=redis://user:$pw@127.0.0.1:1/0" -X "kafka.sasl.password=$pw" \
    -X "kafka.ssl.key.password=$pw" -X "kafka.consumer.sasl.mechanisms=$pw" \
    >"$tmp/stage1.out" 2>&1 &
s1=$!
pids+=("$s1")
"$hc" stage2 -X brokers="$brokers" -X instance.id=sec2 -X metrics.listen=127.0.0.1:"$m2" \
    -X log.format=json -X store=sqlite:"$tmp/stage2.db" -X "kafka.sasl.password=$pw" \
    -X "kafka.consumer.ssl.key.password=$pw" >"$tmp/stage2.out" 2>&1 &
s2=$!
pids+=("$s2")
# stage 2 with its store down (it stops, or waits and retries: either way it logs why)
run_for 5 stage2_store_down "$hc" stage2 -X brokers="$brokers" -X instance.id=sec3 \
    -X metrics.listen= -X "store=postgresql://hc:$pw@127.0.0.1:1/likes" -X "kafka.sasl.password=$pw"
run_for 5 stage2_redis_down "$hc" stage2 -X brokers="$brokers" -X instance.id=sec4 \
    -X metrics.listen= -X log.format=json -X "store=redis://user:$pw@127.0.0.1:1/0"
run_for 5 stage2_file_secrets_down "$hc" stage2 -X brokers="$brokers" -X instance.id=sec5 \
    -X metrics.listen= -X "store=rediss://user@127.0.0.1:1/0" -X "store.password.file=$tmp/pw.secret" \
    -X "kafka.sasl.password.file=$tmp/pw.secret"
# status and dlq over a store that does not answer (their reports go to stdout)
run status_store_down "$hc" status --json -t 1 -X brokers="$brokers" \
    -X "store=redis://user:$pw@127.0.0.1:1/0" -X "kafka.sasl.password=$pw"
expect status_store_down 1
run status_pg_down "$hc" status -t 1 -X brokers="$brokers" \
    -X "store=postgresql://hc:$pw@127.0.0.1:1/likes" -X "kafka.sasl.password=$pw"
expect status_pg_down 1
run dlq_list "$hc" dlq list -X brokers="$brokers" -X "store=redis://user:$pw@127.0.0.1:1/0" \
    -X "kafka.sasl.password=$pw"
# serve: over a store that does not answer, and over a SQLite store scraping both stages and
# showing all it may expose (the stages' addresses and errors)
run serve_unreachable "$hc" serve -X serve.listen=127.0.0.1:0 -X "store=redis://:$pw@127.0.0.1:1/0"
"$hc" serve -X serve.listen=127.0.0.1:0 -X store=sqlite:"$tmp/serve.db" -X "kafka.sasl.password=$pw" \
    -X serve.stages=127.0.0.1:"$m1",127.0.0.1:"$m2" -X serve.stats.expose=1 \
    >"$tmp/serve.out" 2>"$tmp/serve.err" &
sv=$!
pids+=("$sv")
for _ in $(seq 100); do
    curl -sf "http://127.0.0.1:$m1/metrics" >"$tmp/stage1.metrics" && break
    sleep 0.1
done
[ -s "$tmp/stage1.metrics" ] || { echo "FAIL: stage 1's /metrics did not answer"; cat "$tmp/stage1.out"; fails=$((fails + 1)); }
for _ in $(seq 100); do
    curl -sf "http://127.0.0.1:$m2/metrics" >"$tmp/stage2.metrics" && break
    sleep 0.1
done
[ -s "$tmp/stage2.metrics" ] || { echo "FAIL: stage 2's /metrics did not answer"; cat "$tmp/stage2.out"; fails=$((fails + 1)); }
for _ in $(seq 50); do [ -s "$tmp/serve.out" ] && break; sleep 0.1; done
base=$(head -1 "$tmp/serve.out")
if [ -n "$base" ]; then
    sleep 1.5 # a scrape or two of the stages (serve scrapes once a second)
    for path in v1/stats metrics v1/likes/p1 v1/top; do
        curl -s "${base}${path}" >"$tmp/serve.${path//\//_}" 2>&1
    done
    [ -s "$tmp/serve.v1_stats" ] || { echo "FAIL: serve's /v1/stats was empty"; fails=$((fails + 1)); }
else
    echo "FAIL: serve printed no URL"; cat "$tmp/serve.err"; fails=$((fails + 1))
fi
sleep 1
for pid in "$s1" "$s2" "$sv"; do kill -TERM "$pid" 2>/dev/null; done
for pid in "$s1" "$s2" "$sv"; do wait "$pid" 2>/dev/null; done
grep -q 'timeouts' "$tmp/stage1.out" || { echo "FAIL: stage 1 never got to log its start"; cat "$tmp/stage1.out"; fails=$((fails + 1)); }

# 5. the paths that succeed: a store that answers, and takes the password (a private
# redis-server with requirepass on a free port, for a second or two; Debian's redis-server)
rport=$(free_port)
redis-server --bind 127.0.0.1 --port "$rport" --requirepass "$pw" --save '' --appendonly no \
    >"$tmp/redis.log" 2>&1 &
rs=$!
for _ in $(seq 50); do redis-cli -p "$rport" ping 2>/dev/null | grep -q NOAUTH && break; sleep 0.1; done
run redis_init_ok "$hc" init --no-topics -X "store=redis://:$pw@127.0.0.1:$rport/0"
expect redis_init_ok 0
run redis_get_ok "$hc" get p1 -X "store=redis://:$pw@127.0.0.1:$rport/0"
expect redis_get_ok 0
kill -TERM "$rs" 2>/dev/null; wait "$rs" 2>/dev/null

# 6. the search: every output of every path
outputs=$(ls "$tmp" | grep -v '\.status$' | grep -v '\.properties$' | grep -v '\.secret$' | wc -l)
if leaks=$(grep -l -a -F -- "$pw" "$tmp"/* 2>/dev/null | grep -v '\.properties$' | grep -v '\.secret$'); then
    for f in $leaks; do
        echo "FAIL: the password is in $(basename "$f"):"
        grep -F -- "$pw" "$f" | head -3 | cut -c1-300
    done
    fails=$((fails + 1))
fi
if [ "$fails" -ne 0 ]; then
    echo "$fails secrets check(s) failed"
    exit 1
fi
echo "no secret in $outputs outputs of $n commands, 2 running stages and serve"
