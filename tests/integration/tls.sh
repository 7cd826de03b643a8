#!/usr/bin/env bash
# Encrypted, authenticated connections to every server (issue 17, item 5):
#
#   tls.sh HOTCOUNT [TEST_STORE_CONTRACT]
#
# Starts its own servers on 127.0.0.1, with a CA and server certificates it makes with openssl
# (subjectAltName IP:127.0.0.1 and DNS:localhost): a Kafka broker with a SASL_SSL listener
# (SCRAM-SHA-256/512; tests/harness/kafka-ctl's TLS mode), a redis-server listening on TLS only
# whose default user is off and whose ACL user `hc-redis` has a password, and PostgreSQL with
# ssl=on where the role hc_tls must come over TLS with a SCRAM password (tests/harness/pg-ctl's
# TLS mode). Every secret comes from a file (kafka.sasl.password.file, store.password.file).
# Then:
#   - the real pipeline through all three at once: one stage 1 (SASL_SSL, SCRAM-SHA-512) and two
#     stage-2 groups reading the same partials, one into rediss:// and one into PostgreSQL with
#     sslmode=verify-full; `hotcount verify` is exact on both stores, every stage stops cleanly,
#     and the independent oracle (tests/oracle/oracle.py, over the broker's PLAINTEXT listener)
#     finds both stores equal to its own recount of likes.raw;
#   - a wrong CA, a wrong password and a wrong server name for each server fail with a message
#     that names the server (its host:port) and the cause; for Kafka the command's last line is
#     that sentence itself ("hotcount: Kafka broker ...: authentication failed: ..."), and a
#     stage 1 with a wrong password keeps running, logs a kafka_auth_failed event naming the
#     broker, and stops cleanly on SIGTERM;
#   - with TEST_STORE_CONTRACT (the test_store_contract binary), the store's conformance suite
#     passes against the TLS-only Redis too (every operation through rediss://);
#   - no password, right or wrong, is in any output.
# Needs no other server (runs beside tests/harness/with-servers' without using them).
set -euo pipefail
hc=$(realpath "${1:?usage: tls.sh HOTCOUNT [TEST_STORE_CONTRACT]}")
contract=${2:+$(realpath "$2")}
here=$(cd "$(dirname "$0")" && pwd)
harness=$here/../harness
py=python3
[ -x "${HC_CACHE_DIR:-$HOME/.cache/hotcount}/venv/bin/python" ] &&
    py=${HC_CACHE_DIR:-$HOME/.cache/hotcount}/venv/bin/python

# shellcheck source-path=SCRIPTDIR source=namespace.sh
. "$here/namespace.sh"
run=$(date +%s%N | tail -c 9)-$$
work=$(mktemp -d)
chmod 711 "$work" # PostgreSQL runs as its own user and must reach $work/pg
redis_pid=''
cleanup() {
    # stop_tracked, but bounded: a stage that hangs must not keep the servers up
    local pid i
    for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for ((i = 0; i < 100; i++)); do
        local alive=''
        for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
        [ -n "$alive" ] || break
        sleep 0.1
    done
    for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
    [ -z "$redis_pid" ] || { kill -TERM "$redis_pid" 2>/dev/null; wait "$redis_pid" 2>/dev/null; }
    "$harness/kafka-ctl" --dir "$work/kafka" stop >/dev/null 2>&1 || true
    "$harness/pg-ctl" --dir "$work/pg" stop >/dev/null 2>&1 || true
    if [ -n "${HC_TEST_KEEP:-}" ]; then echo "kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
fail() {
    echo "FAIL: $*"
    for f in "$work"/*.log; do [ -f "$f" ] && { echo "== $f"; tail -15 "$f"; }; done
    exit 1
}

# ---- certificates: a CA, the servers' certificate, and a second CA nobody trusts
tls=$work/tls
mkdir -p "$tls"
(
    cd "$tls"
    for ca in ca other-ca; do
        openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
            -subj "/CN=hotcount test $ca" -keyout "$ca.key" -out "$ca.pem" 2>/dev/null
    done
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=localhost \
        -keyout server.key -out server.csr 2>/dev/null
    printf '%s\n' 'subjectAltName=IP:127.0.0.1,DNS:localhost' 'basicConstraints=CA:FALSE' \
        'keyUsage=digitalSignature,keyEncipherment' 'extendedKeyUsage=serverAuth' >ext.cnf
    openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
        -extfile ext.cnf -out server.crt 2>/dev/null
    cat server.key server.crt >server.pem # Kafka's PEM keystore: PKCS#8 key, then the chain
    chmod 644 server.crt ca.pem other-ca.pem
)

# ---- secrets: distinct per run, each in a file of its own; the wrong ones too
secret() { printf 'Tls%s%sx%s' "$1" "$RANDOM" "$RANDOM"; }
kafka_pw=$(secret K)
redis_pw=$(secret R)
pg_pw=$(secret P)
wrong_pw=$(secret W)
umask 077
printf '%s\n' "$kafka_pw" >"$work/kafka.pw" # with a line end, as `echo` writes it
printf '%s' "$redis_pw" >"$work/redis.pw"   # without, as Kubernetes mounts a secret
printf '%s\r\n' "$pg_pw" >"$work/pg.pw"
printf '%s\n' "$wrong_pw" >"$work/wrong.pw"
umask 022

# ---- servers: Kafka in the background (the slowest), PostgreSQL and Redis meanwhile
HC_KAFKA_TLS_DIR=$tls "$harness/kafka-ctl" --dir "$work/kafka" start >"$work/kafka-start.log" 2>&1 &
kafka_start=$!
HC_PG_TLS_DIR=$tls "$harness/pg-ctl" --dir "$work/pg" start >"$work/pg-start.log" 2>&1 ||
    fail "PostgreSQL did not start"
"$harness/pg-ctl" --dir "$work/pg" psql -q -v ON_ERROR_STOP=1 >/dev/null <<SQL ||
CREATE ROLE hc_tls LOGIN PASSWORD '$pg_pw';
CREATE SCHEMA AUTHORIZATION hc_tls;
SQL
    fail "could not create the PostgreSQL role"
pg_port=$("$harness/pg-ctl" --dir "$work/pg" uri | sed 's|.*:\([0-9]*\)/.*|\1|')

redis_port=$(free_port)
mkdir -p "$work/redis"
cat >"$work/redis/redis.conf" <<EOF
bind 127.0.0.1
port 0
tls-port $redis_port
tls-cert-file $tls/server.crt
tls-key-file $tls/server.key
tls-ca-cert-file $tls/ca.pem
tls-auth-clients no
dir $work/redis
save ""
appendonly no
user default off
user hc-redis on >$redis_pw ~* &* +@all
EOF
redis-server "$work/redis/redis.conf" >"$work/redis.log" 2>&1 &
redis_pid=$!
wait "$kafka_start" || fail "the Kafka broker did not start: $(tail -5 "$work/kafka-start.log")"
plain=$("$harness/kafka-ctl" --dir "$work/kafka" brokers)
brokers=$("$harness/kafka-ctl" --dir "$work/kafka" sasl-ssl-brokers)
for _ in $(seq 100); do
    redis-cli --tls --cacert "$tls/ca.pem" -p "$redis_port" --user hc-redis --pass "$redis_pw" \
        --no-auth-warning ping 2>/dev/null | grep -q PONG && break
    sleep 0.1
done

# The SCRAM user, over the PLAINTEXT listener (the broker stores only salted hashes).
"$py" - "$plain" "$kafka_pw" <<'EOF' || fail "could not create the SCRAM user"
import sys
from confluent_kafka.admin import (AdminClient, ScramCredentialInfo, ScramMechanism,
                                   UserScramCredentialUpsertion)
admin = AdminClient({"bootstrap.servers": sys.argv[1]})
for m in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512):  # one per request
    up = UserScramCredentialUpsertion("hc-kafka", ScramCredentialInfo(m, 4096), sys.argv[2].encode())
    for f in admin.alter_user_scram_credentials([up]).values():
        f.result(timeout=30)
EOF

# ---- configuration: Kafka over SASL_SSL, each store over TLS, every secret from a file
cat >"$work/kafka.properties" <<EOF
brokers=$brokers
kafka.security.protocol=SASL_SSL
kafka.sasl.mechanism=SCRAM-SHA-512
kafka.sasl.username=hc-kafka
kafka.sasl.password.file=$work/kafka.pw
kafka.ssl.ca.location=$tls/ca.pem
topic.raw=t$run.raw
topic.partials=t$run.partials
topic.dlq=t$run.dlq
group.stage1=g$run-stage1
topic.raw.partitions=4
topic.partials.partitions=2
flush.ms=500
log.level=warn
metrics.listen=
EOF
redis_store="rediss://hc-redis@127.0.0.1:$redis_port/0?cacert=$tls/ca.pem"
pg_store="postgresql://hc_tls@127.0.0.1:$pg_port/hotcount?sslmode=verify-full&sslrootcert=$tls/ca.pem"
cat "$work/kafka.properties" - >"$work/redis.properties" <<EOF
store=$redis_store
store.password.file=$work/redis.pw
group.stage2=g$run-stage2-redis
EOF
cat "$work/kafka.properties" - >"$work/pg.properties" <<EOF
store=$pg_store
store.password.file=$work/pg.pw
group.stage2=g$run-stage2-pg
EOF
rcfg=(-c "$work/redis.properties")
pcfg=(-c "$work/pg.properties")

# ---- the pipeline through all three
"$hc" init "${rcfg[@]}" -X kafka.sasl.mechanism=SCRAM-SHA-256 >"$work/init.log" 2>&1 ||
    fail "init over SASL_SSL (SCRAM-SHA-256) and rediss://"
"$hc" init --no-topics "${pcfg[@]}" >>"$work/init.log" 2>&1 || fail "init on PostgreSQL over TLS"
declare -A pid_of
start_stage() { # stage instance-id config...
    local stage=$1 id=$2
    shift 2
    "$hc" "$stage" "$@" -X instance.id="$id" 2>>"$work/$id.log" &
    pids+=($!)
    pid_of[$id]=$!
}
stop_stage() { # instance-id: SIGTERM, then exit 0 within 30 s (a flush and a bounded close)
    local status=0 pid=${pid_of[$1]} i
    kill -TERM "$pid"
    for ((i = 0; i < 300; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        kill -KILL "$pid"
        wait "$pid" 2>/dev/null || true
        fail "$1 had not exited 30 s after SIGTERM"
    fi
    wait "$pid" || status=$?
    [ "$status" -eq 0 ] || fail "$1 exited $status on SIGTERM"
}
start_stage stage1 s1 "${rcfg[@]}"
start_stage stage2 s2-redis "${rcfg[@]}"
start_stage stage2 s2-pg "${pcfg[@]}"
events=${HC_TLS_EVENTS:-20000}
"$hc" produce "${rcfg[@]}" --events "$events" --posts 2000 --invalid-ratio 0.005 --seed "$$" \
    >"$work/produce.log" 2>&1 || fail "produce over SASL_SSL"
"$hc" verify "${rcfg[@]}" --timeout 120 >"$work/verify-redis.log" 2>&1 || true
grep -q '^verify: exact' "$work/verify-redis.log" || fail "verify on rediss://"
"$hc" verify "${pcfg[@]}" --timeout 120 >"$work/verify-pg.log" 2>&1 || true
grep -q '^verify: exact' "$work/verify-pg.log" || fail "verify on PostgreSQL verify-full"
for id in s1 s2-redis s2-pg; do stop_stage "$id"; done
pids=()
"$hc" get --all "${rcfg[@]}" >"$work/redis.tsv" 2>"$work/get-redis.log" || fail "get --all (redis)"
"$hc" get --all "${pcfg[@]}" >"$work/pg.tsv" 2>"$work/get-pg.log" || fail "get --all (pg)"
for s in redis pg; do
    "$py" "$here/../oracle/oracle.py" --brokers "$plain" --raw "t$run.raw" --dlq "t$run.dlq" \
        --group "g$run-stage1" --store-dump "$work/$s.tsv" --min-events "$events" \
        >"$work/oracle-$s.log" 2>&1 || fail "oracle on $s: $(tail -3 "$work/oracle-$s.log")"
done
echo "pipeline over SASL_SSL, rediss:// and verify-full: exact ($(head -1 "$work/verify-redis.log"))"
if [ -n "$contract" ]; then
    HC_TEST_STORE_URI="rediss://hc-redis:$redis_pw@127.0.0.1:$redis_port/1?cacert=$tls/ca.pem" \
        "$contract" >"$work/contract.log" 2>&1 || fail "the store contract over rediss://"
    echo "store contract over rediss://: $(grep -c '^\[       OK \]' "$work/contract.log") tests passed"
fi

# ---- what fails, and how it says so
# expect_fail NAME WANT_STATUS PATTERN... -- COMMAND...: exits WANT_STATUS (any non-zero for
# "nz") within 60 s, and its output matches every PATTERN (extended regexes)
expect_fail() {
    local name=$1 want=$2 status=0 pat
    shift 2
    local pats=()
    while [ "$1" != -- ]; do pats+=("$1"); shift; done
    shift
    timeout 60 "$@" >"$work/neg-$name.out" 2>&1 </dev/null || status=$?
    if [ "$status" -eq 0 ] || [ "$status" -eq 124 ] || { [ "$want" != nz ] && [ "$status" -ne "$want" ]; }; then
        fail "$name: exit $status (want $want): $(tail -3 "$work/neg-$name.out")"
    fi
    for pat in "${pats[@]}"; do
        grep -Eq -- "$pat" "$work/neg-$name.out" ||
            fail "$name: no /$pat/ in: $(tail -5 "$work/neg-$name.out")"
    done
    echo "  $name: exit $status, $(grep -Em1 -- "${pats[0]}" "$work/neg-$name.out" | cut -c1-150)"
}
bp=${brokers##*:}
# Kafka: the command bounds its wait (init --timeout); librdkafka's own error names the broker.
expect_fail kafka_wrong_ca nz "127\.0\.0\.1:$bp" "certificate verify failed" -- \
    "$hc" init "${rcfg[@]}" --timeout 8000 -X "kafka.ssl.ca.location=$tls/other-ca.pem"
expect_fail kafka_wrong_password nz "127\.0\.0\.1:$bp" "[Aa]uthentication failed" -- \
    "$hc" init "${rcfg[@]}" --timeout 8000 -X "kafka.sasl.password.file=$work/wrong.pw"
# ... and the command's last line says so itself (not a bare timeout): broker, then cause
for c in kafka_wrong_ca:"TLS handshake failed" kafka_wrong_password:"authentication failed"; do
    tail -n1 "$work/neg-${c%%:*}.out" |
        grep -Eq "^hotcount: Kafka broker [a-z_]+://127\.0\.0\.1:$bp/[^ ]+: ${c#*:}: " ||
        fail "${c%%:*}: last line is not the cause: $(tail -n1 "$work/neg-${c%%:*}.out")"
    echo "  ${c%%:*}, last line: $(tail -n1 "$work/neg-${c%%:*}.out" | cut -c1-150)"
done
# A stage with the wrong password keeps running (a broker-side rotation must not kill it) and
# says why it waits: a kafka_auth_failed event naming the broker; it still stops cleanly.
start_stage stage1 s1-wrong-pw "${rcfg[@]}" -X log.format=json \
    -X "kafka.sasl.password.file=$work/wrong.pw"
for ((i = 0; i < 300; i++)); do
    grep -q '"event":"kafka_auth_failed"' "$work/s1-wrong-pw.log" && break
    kill -0 "${pid_of[s1-wrong-pw]}" 2>/dev/null || fail "stage 1 with a wrong password exited"
    sleep 0.1
done
grep '"event":"kafka_auth_failed"' "$work/s1-wrong-pw.log" | head -1 |
    grep -Eq "\"error\":\"Kafka broker [a-z_]+://127\.0\.0\.1:$bp/[^ ]+: authentication failed: " ||
    fail "stage 1 with a wrong password: no kafka_auth_failed event naming the broker in 30 s"
stop_stage s1-wrong-pw
echo "  kafka_wrong_password (stage 1 keeps running): $(grep -m1 '"event":"kafka_auth_failed"' \
    "$work/s1-wrong-pw.log" | grep -o '"error":"[^"]*' | cut -c1-150)"
# Redis
expect_fail redis_wrong_ca 2 "127\.0\.0\.1:$redis_port" "does not verify" -- \
    "$hc" get p1 "${rcfg[@]}" -X "store=rediss://hc-redis@127.0.0.1:$redis_port/0?cacert=$tls/other-ca.pem"
expect_fail redis_wrong_name 2 "127\.0\.0\.1:$redis_port" "does not verify: [Hh]ostname mismatch" -- \
    "$hc" get p1 "${rcfg[@]}" -X "store=$redis_store&servername=db.example.com"
expect_fail redis_wrong_password 2 "WRONGPASS" "server 127\.0\.0\.1:$redis_port, user hc-redis" -- \
    "$hc" get p1 "${rcfg[@]}" -X "store.password.file=$work/wrong.pw"
expect_fail redis_plaintext nz "127\.0\.0\.1:$redis_port" -- \
    "$hc" get p1 "${rcfg[@]}" -X "store=redis://hc-redis@127.0.0.1:$redis_port/0"
# PostgreSQL (libpq's messages name the server; hotcount names the `store` key)
expect_fail pg_wrong_ca nz "\"127\.0\.0\.1\", port $pg_port" "certificate verify failed" -- \
    "$hc" get p1 "${pcfg[@]}" -X "store=${pg_store%sslrootcert=*}sslrootcert=$tls/other-ca.pem"
expect_fail pg_wrong_password nz "\"127\.0\.0\.1\", port $pg_port" "password authentication failed" -- \
    "$hc" get p1 "${pcfg[@]}" -X "store.password.file=$work/wrong.pw"
expect_fail pg_no_tls nz "\"127\.0\.0\.1\", port $pg_port" "no encryption" -- \
    "$hc" get p1 "${pcfg[@]}" -X "store=postgresql://hc_tls@127.0.0.1:$pg_port/hotcount?sslmode=disable"
# the secret files themselves: missing, empty, a password in the URI as well
: >"$work/empty.pw"
expect_fail secret_file_missing 2 "kafka\.sasl\.password\.file: $work/nope: No such file" -- \
    "$hc" init "${rcfg[@]}" -X "kafka.sasl.password.file=$work/nope"
expect_fail secret_file_empty 2 "store\.password\.file: $work/empty\.pw is empty" -- \
    "$hc" get p1 "${pcfg[@]}" -X "store.password.file=$work/empty.pw"
expect_fail two_passwords 2 "give only one" -- \
    "$hc" get p1 "${rcfg[@]}" -X "store=rediss://hc-redis:$redis_pw@127.0.0.1:$redis_port/0"

# ---- no secret anywhere (the properties files and the secret files aside)
for pw in "$kafka_pw" "$redis_pw" "$pg_pw" "$wrong_pw"; do
    if leaks=$(grep -rlF -- "$pw" "$work"/*.log "$work"/*.out "$work"/*.tsv 2>/dev/null); then
        fail "a password is in: $leaks"
    fi
done
echo "tls: exact over TLS everywhere; wrong CA, password and name refused with the server named; no secret printed"
