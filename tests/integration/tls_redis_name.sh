#!/usr/bin/env bash
# The Redis store checks the server's name in its TLS certificate (hiredis leaves that out;
# src/store/redis/redis_conn.c adds it): against a TLS-only redis-server of its own whose
# certificate names 127.0.0.1 and localhost, `hotcount get` must
#   - read with servername=localhost (so the setup itself is sound), and
#   - refuse servername=db.example.com, exit 2, saying "does not verify: Hostname mismatch".
#   tls_redis_name.sh HOTCOUNT
# A few seconds; needs redis-server (with TLS) and openssl, no other server. The binary built
# with -DHC_MUTANT_TLS_NO_NAME_CHECK (hotcount_tls_no_name_check) must fail it: CTest's
# mutant_tls_no_name_check. tests/integration/tls.sh holds the same case in its full TLS run.
set -euo pipefail
hc=$(realpath "${1:?usage: tls_redis_name.sh HOTCOUNT}")
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source-path=SCRIPTDIR source=namespace.sh
. "$here/namespace.sh"
hc_scratch
fail() {
    echo "FAIL: $*"
    exit 1
}
tls=$work/tls
mkdir -p "$tls"
(
    cd "$tls"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
        -subj "/CN=hotcount test ca" -keyout ca.key -out ca.pem 2>/dev/null
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=localhost \
        -keyout server.key -out server.csr 2>/dev/null
    printf '%s\n' 'subjectAltName=IP:127.0.0.1,DNS:localhost' 'basicConstraints=CA:FALSE' \
        'keyUsage=digitalSignature,keyEncipherment' 'extendedKeyUsage=serverAuth' >ext.cnf
    openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
        -extfile ext.cnf -out server.crt 2>/dev/null
)
port=$(free_port)
redis-server --bind 127.0.0.1 --port 0 --tls-port "$port" --tls-cert-file "$tls/server.crt" \
    --tls-key-file "$tls/server.key" --tls-ca-cert-file "$tls/ca.pem" --tls-auth-clients no \
    --dir "$work" --save '' --appendonly no >"$work/redis.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
    redis-cli --tls --cacert "$tls/ca.pem" -p "$port" ping 2>/dev/null | grep -q PONG && break
    sleep 0.1
done
store="rediss://127.0.0.1:$port/0?cacert=$tls/ca.pem"
cfg=(-X metrics.listen= -X log.level=warn)

status=0
timeout 30 "$hc" get p1 "${cfg[@]}" -X "store=$store&servername=localhost" \
    >"$work/right.out" 2>&1 || status=$?
[ "$status" -eq 0 ] && grep -q "^p1	0$" "$work/right.out" ||
    fail "servername=localhost: exit $status: $(tail -3 "$work/right.out")"
echo "  servername=localhost: read ($(head -1 "$work/right.out"))"

status=0
timeout 30 "$hc" get p1 "${cfg[@]}" -X "store=$store&servername=db.example.com" \
    >"$work/wrong.out" 2>&1 || status=$?
[ "$status" -eq 2 ] || fail "servername=db.example.com: exit $status (want 2): $(tail -3 "$work/wrong.out")"
grep -Eq "127\.0\.0\.1:$port.*does not verify: [Hh]ostname mismatch" "$work/wrong.out" ||
    fail "servername=db.example.com: no name mismatch in: $(tail -3 "$work/wrong.out")"
echo "  servername=db.example.com: refused ($(grep -Em1 'does not verify' "$work/wrong.out" | cut -c1-150))"
echo "the Redis store checks the certificate's name"
