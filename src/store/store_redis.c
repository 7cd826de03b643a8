/* The Redis store: "redis://[[user]:password@]host[:port][/db]" (port 6379 and db 0 by default;
 * user and password may be percent-encoded; a user name is sent as Redis 6 ACL `AUTH user pw`).
 * The password may come from store.password.file instead ("redis://user@host", hotcount's
 * config: cfg->store_password).
 *
 * TLS: "rediss://...[?cacert=FILE][&capath=DIR][&cert=FILE&key=FILE][&servername=NAME]" (values
 * percent-encoded; the option names are redis-cli's --cacert, --cacertdir, --cert, --key, --sni).
 * The server's certificate must chain to cacert/capath (default: the system's trust store) and
 * name the host (or servername): an IP literal must be among its IP addresses, a name among its
 * DNS names, as libpq's sslmode=verify-full checks. hiredis itself verifies only the chain, so
 * the store builds the OpenSSL context and connection itself and hands the SSL object to
 * hiredis (redisInitiateSSL). There is no way to switch verification off. TLS 1.2 at least. A
 * certificate that does not verify, or a client key that does not load, is HC_ERR_INVALID (a
 * configuration mistake, like a wrong password); a handshake cut short or timed out is
 * HC_ERR_TRANSIENT. A build without hiredis_ssl (HC_DEPS=system: Debian 12's hiredis 0.14)
 * refuses rediss:// with a message saying so.
 *
 * Layout (docs/FORMATS.md, "Store layout"):
 *
 *   <store.redis.prefix>P        string: the count of post P, an integer (`GET likes:P` reads it)
 *   hotcount:offsets:<group>     hash: field "<topic>/<partition>", value the next offset to read
 *   hotcount:staging:<batch id>  list: the staged parts of a split batch, gone after its commit
 *
 * There is no updated_at: the contract's Redis layout has none, and keeping one would mean a
 * second key per post (twice the writes) or a hash instead of a plain string (no plain GET).
 * The prefix may not overlap "hotcount:offsets:" or "hotcount:staging:", or a post id could
 * name one of those keys.
 *
 * apply. One Lua script, loaded with SCRIPT LOAD when the handle opens and run with EVALSHA (a
 * NOSCRIPT reply, after a server restart or SCRIPT FLUSH, loads it again and retries once).
 * Redis runs a script atomically but does not roll back a script that fails halfway, so the
 * script makes every check before its first write: each partition's stored offset must equal
 * the batch's expected one (HC_OFFSET_NONE: the field must not exist), and each count it will
 * add to must be absent or an integer far from overflow (else INCRBY would fail after earlier
 * INCRBYs landed). Only then does it INCRBY every count and HSET every offset. A lost
 * compare-and-set answers {0, index of the partition, stored offset} and has written nothing.
 *
 * Split batches. One script call carries at most REDIS_PART_DELTAS deltas and about
 * REDIS_PART_BYTES bytes of arguments. Bigger batches (max.keys allows a million posts) are cut
 * into parts so that no single command is tens of megabytes that the server must buffer whole
 * and turn into Lua KEYS/ARGV tables at once. Every part but the last is staged: the script
 * RPUSHes its (count key, delta) pairs onto a list named with a fresh random 128-bit batch id,
 * which expires REDIS_STAGING_TTL_MS after the last part touched it. The last part commits: one
 * script checks the offsets, checks that the list holds exactly the pairs staged so far (LLEN),
 * checks every count, then adds the staged deltas and its own, moves the offsets and deletes the
 * list. Hence:
 *  - nothing of a batch is visible before its commit and all of it after: staged pairs live
 *    outside the count keys, and the commit is one script;
 *  - offsets move only with the last part, in the same script as every delta;
 *  - a part that fails, or a connection lost midway, leaves at most an orphaned list that
 *    expires; the retry of the batch stages under a new batch id, so no part is applied twice,
 *    and the compare-and-set turns a retry of a commit that did land into HC_ERR_CONFLICT;
 *  - a list that expired or was evicted before the commit fails the LLEN check
 *    (HC_ERR_TRANSIENT: retry the batch) instead of silently dropping deltas;
 *  - a stale batch already loses at its first part (each part checks the offsets and drops its
 *    list) and in any case at the commit, which changes nothing then.
 * The commit still walks the whole batch inside one script: atomicity costs that, and the server
 * serves no one else meanwhile. Measured on loopback on a 2-CPU VM: a 50 000-delta batch takes
 * 0.15-0.27 s end to end, of which the commit script is 0.11-0.22 s and each staged part of
 * 10 000 deltas 3-7 ms (under heavy load on the box, up to ~0.45 s for the commit).
 *
 * Reads. read_offsets is one HMGET, get is MGET in chunks. top and foreach SCAN the keys under
 * the prefix (MATCH, the prefix glob-escaped) and MGET each page: O(keys in the database) on the
 * server, a bounded min-heap of n rows for top. Redis has no snapshot reads: each page shows the
 * counts of the moment it is read, so foreach is consistent only while nothing writes (verify
 * runs once stage 2 has caught up). SCAN may return a key twice when the keyspace is resized
 * during the scan; a set of the ids seen (on the client, about 100 bytes per post) makes foreach
 * and top report each post once.
 *
 * Errors. A refused connection, a reset, or no reply within the command bound
 * (cfg->timeouts.store_statement_ms; a whole batch within store_batch_ms) is
 * HC_ERR_TRANSIENT; hiredis cannot reuse a context after an I/O error, so the handle drops it and
 * the next call reconnects (stage 2 then retries the same batch and the compare-and-set guards
 * it: a command that timed out, say behind a DEBUG SLEEP, may still run once the server is back,
 * and the retry then loses the compare-and-set). Error replies that mean "not now" (LOADING,
 * BUSY: a script or function running past busy-reply-threshold, MASTERDOWN, READONLY, OOM,
 * MISCONF, TRYAGAIN, ..., and "ERR max number of clients reached") are HC_ERR_TRANSIENT too,
 * returned at once: the store does not retry inside a call, stage 2's back-off does; READONLY
 * and MASTERDOWN also drop the connection so that the next call reaches whatever primary the
 * address leads to by then. Anything else (a script error, an unexpected reply) is HC_ERR_FATAL
 * with the server's message; a count the batch cannot add to (near overflow, not an integer) is
 * HC_ERR_RECORD naming that delta. Run with SIGPIPE ignored (the CLI does): hiredis writes with
 * write(2). A batch's on_progress is called after each part's script call that got through (a
 * staged part, the commit).
 *
 * Not supported: Redis Cluster (the commit touches keys in every slot). Durability is the
 * server's: with AOF everysec a crash loses up to a second of batches, counts and offsets
 * together, and stage 2 re-reads the offsets on the conflict that follows. Run the server with
 * maxmemory-policy noeviction: an evicted count is lost for good (an evicted staging list is
 * merely retried). */
#include "store_impl.h"
#include "store_util.h"

#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/time.h>

#include "hotcount/clock.h"
#include "hotcount/timeouts.h"

#ifdef HC_REDIS_TLS
#include <hiredis/hiredis_ssl.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#endif

#define REDIS_URI_PREFIX "redis://"
#define REDISS_URI_PREFIX "rediss://"
#define REDIS_URI_FORM                                                                             \
    "redis[s]://[[user]:password@]host[:port][/db]"                                                \
    "[?cacert=FILE&capath=DIR&cert=FILE&key=FILE&servername=NAME (rediss only)]"
#define REDIS_DEFAULT_PORT 6379
#define OFFSETS_KEY_PREFIX "hotcount:offsets:"
#define STAGING_KEY_PREFIX "hotcount:staging:"

/* Connecting and every command are bounded by cfg->timeouts (store_connect_ms,
 * store_statement_ms: hotcount/timeouts.h), so an unresponsive server (stopped, partitioned,
 * stuck) becomes HC_ERR_TRANSIENT rather than a hang... except a commit, which runs the whole batch
 * in one script and gets this much longer per delta: 50 us, five times what a loaded 2-CPU test VM
 * needed (about 9 us), so a million-delta commit may take a minute before it counts as lost. A
 * commit that times out anyway is safe: it may still land, and the retry then meets BUSY while it
 * runs and HC_ERR_CONFLICT after. */
#define REDIS_COMMIT_US_PER_DELTA 50

/* One script call's share of a batch: 10 000 deltas, or 1 MiB of keys and values, whichever
 * comes first. The server parses and stages such a part in 3-7 ms (measured), so no client of a
 * shared Redis waits long behind one, and the per-part round trip is already negligible. */
#define REDIS_PART_DELTAS 10000
#define REDIS_PART_BYTES (1024 * 1024)

/* A staged list lives this long after the last part that touched it. Parts follow each other
 * within one command timeout, so a live batch never loses its list; an abandoned one (the
 * process died or the connection broke mid-batch) frees its memory within two minutes. */
#define REDIS_STAGING_TTL_MS 120000

/* Keys per SCAN page and per MGET: big enough that round trips do not dominate, small enough
 * that no reply holds more than a few hundred kilobytes. */
#define REDIS_PAGE_KEYS 1000

/* See the file comment. Arguments:
 *   KEYS[1] offsets hash, KEYS[2] staging list, KEYS[3..] count keys (commit only)
 *   ARGV[1] "stage", "commit" or "commit_quiet", ARGV[2] m = number of offsets,
 *   ARGV[3] pairs staged by earlier parts, ARGV[4] staging TTL (ms),
 *   ARGV[5..4+3m] per offset: field, expected ("" = must not exist), next,
 *   then stage: count key, delta, count key, delta...; commit: one delta per KEYS[3..].
 * Staged pairs hold whole count keys, so the commit need not build them (twice) itself.
 * Replies: {1} a part staged, or committed by "commit_quiet" (the caller wants no totals: a
 * reply of one integer per post would cost both sides about 70 bytes a post while it lasts);
 * {1, total...} committed by "commit", each post's new total in batch order (staged parts
 * first; exact below 2^53, as Lua numbers are doubles); {0, i, stored} offset i
 * conflicts (nothing written); {-1} the staged pairs
 * are not all there (nothing written); {-2, key, i, why} the count key of delta i (0-based, in
 * batch order) cannot take INCRBY (nothing written): why "overflow" (its magnitude would pass
 * 9e18) or "type" (not an integer, or another type).
 * RPUSH takes 200 arguments at a time: unpack() is bounded by Lua's C stack; 200 is even, so
 * pairs stay whole. LRANGE reads 1000 elements (500 pairs) at a time for the same reason. */
static const char apply_script[] =
    "local m = tonumber(ARGV[2])\n"
    "local staged = tonumber(ARGV[3])\n"
    "local first = 5 + 3 * m\n"
    "for i = 0, m - 1 do\n"
    "  local have = redis.call('HGET', KEYS[1], ARGV[5 + 3 * i])\n"
    "  local want = ARGV[6 + 3 * i]\n"
    "  if (want == '' and have) or (want ~= '' and have ~= want) then\n"
    "    redis.call('DEL', KEYS[2])\n"
    "    return {0, i, have or ''}\n"
    "  end\n"
    "end\n"
    "if redis.call('LLEN', KEYS[2]) ~= 2 * staged then\n"
    "  redis.call('DEL', KEYS[2])\n"
    "  return {-1}\n"
    "end\n"
    "if ARGV[1] == 'stage' then\n"
    "  for j = first, #ARGV, 200 do\n"
    "    redis.call('RPUSH', KEYS[2], unpack(ARGV, j, math.min(j + 199, #ARGV)))\n"
    "  end\n"
    "  redis.call('PEXPIRE', KEYS[2], ARGV[4])\n"
    "  return {1}\n"
    "end\n"
    "local n = #KEYS - 2\n"
    /* INCRBY fails on a wrong type, a non-integer or an overflow: refuse those up front. Lua
     * numbers are doubles, so the bound is 9e18, far enough below 2^63 that rounding cannot
     * hide an overflow, and an absent count is 0 (a first delta is bounded too). */
    "local function bad(key, d)\n"
    "  local v = redis.pcall('GET', key)\n"
    "  if type(v) == 'table' then return 'type' end\n"
    "  v = v or '0'\n"
    "  if v ~= '0' and not string.find(v, '^%-?[1-9]%d*$') then return 'type' end\n"
    "  local s = tonumber(v) + tonumber(d)\n"
    "  if s > 9e18 or s < -9e18 then return 'overflow' end\n"
    "  return nil\n"
    "end\n"
    "local function each_staged(fn)\n"
    "  for s = 0, 2 * staged - 1, 1000 do\n"
    "    local items = redis.call('LRANGE', KEYS[2], s, s + 999)\n"
    "    for j = 1, #items, 2 do\n"
    "      local r = fn(items[j], items[j + 1], s / 2 + (j - 1) / 2)\n"
    "      if r then return r end\n"
    "    end\n"
    "  end\n"
    "end\n"
    "local refused = each_staged(function(key, d, pos)\n"
    "  local why = bad(key, d)\n"
    "  if why then return {-2, key, pos, why} end\n"
    "end)\n"
    "for i = 1, n do\n"
    "  if refused then break end\n"
    "  local why = bad(KEYS[i + 2], ARGV[first + i - 1])\n"
    "  if why then refused = {-2, KEYS[i + 2], staged + i - 1, why} end\n"
    "end\n"
    "if refused then\n"
    "  redis.call('DEL', KEYS[2])\n"
    "  return refused\n"
    "end\n"
    "local totals = {1}\n"
    "local keep = ARGV[1] == 'commit'\n"
    "local function incr(key, d)\n"
    "  local t = redis.call('INCRBY', key, d)\n"
    "  if keep then totals[#totals + 1] = t end\n"
    "end\n"
    "each_staged(incr)\n"
    "for i = 1, n do incr(KEYS[i + 2], ARGV[first + i - 1]) end\n"
    "for i = 0, m - 1 do redis.call('HSET', KEYS[1], ARGV[5 + 3 * i], ARGV[7 + 3 * i]) end\n"
    "redis.call('DEL', KEYS[2])\n"
    "return totals\n";

/* The arguments of one command. Each is copied into buf (NUL-terminated, for readers that like
 * C strings) and located by offset, because buf moves while it grows; args_finish then turns
 * the offsets into the pointers hiredis wants. An allocation failure is remembered and
 * reported once, by args_finish, so building a command needs no error check per argument. */
typedef struct args {
    char *buf; /* owned */
    size_t used;
    size_t size;
    size_t *offs;      /* owned */
    size_t *lens;      /* owned */
    const char **argv; /* owned; valid after args_finish until the next args_reset */
    size_t count;
    size_t cap;
    bool failed;
} args_t;

typedef struct redis_store {
    hc_store_t base;   /* first: store.c only sees this */
    redisContext *ctx; /* owned; NULL until connected and after any I/O error */
    redisReply *reply; /* owned: the last reply, valid until the next command */
    char *host;        /* owned */
    int port;
    int db;
    char *user;           /* owned; NULL: AUTH with the password alone */
    char *password;       /* owned; NULL: no AUTH */
    bool tls;             /* rediss:// */
    char *tls_cacert;     /* owned; NULL: none (the system's trust store without capath too) */
    char *tls_capath;     /* owned; NULL: none */
    char *tls_cert;       /* owned; NULL: no client certificate */
    char *tls_key;        /* owned; NULL: no client certificate */
    char *tls_servername; /* owned; NULL: the host's name is verified and sent as SNI */
    void *ssl_ctx;        /* owned SSL_CTX *, built once at open; NULL without TLS */
    char *prefix;         /* owned copy of store.redis.prefix */
    size_t prefix_len;
    long timeout_ms;     /* the reply timeout the next command should have */
    long connect_ms;     /* cfg->timeouts.store_connect_ms */
    long command_ms;     /* cfg->timeouts.store_statement_ms */
    int64_t batch_ms;    /* cfg->timeouts.store_batch_ms: every part of one apply */
    long ctx_timeout_ms; /* the reply timeout set on ctx */
    char name[80];       /* CLIENT SETNAME: "hotcount-<instance.id>" */
    char sha[41];        /* the script's SHA1, as SCRIPT LOAD reported it */
    args_t args;         /* owned scratch: one command's arguments */
} redis_store_t;

static redis_store_t *redis_store(hc_store_t *st)
{
    return (redis_store_t *)st;
}

static struct timeval ms_to_timeval(long ms)
{
    struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};

    return tv;
}

/* ---- argument lists ---- */

static void args_reset(args_t *a)
{
    a->used = 0;
    a->count = 0;
    a->failed = false;
}

static void args_fini(args_t *a)
{
    free(a->buf);
    free(a->offs);
    free(a->lens);
    free(a->argv);
    memset(a, 0, sizeof(*a));
}

static bool args_reserve(args_t *a, size_t bytes)
{
    size_t size;
    size_t cap;
    char *buf;
    size_t *offs;
    size_t *lens;
    const char **argv;

    if (a->failed) {
        return false;
    }
    if (a->count == a->cap) {
        cap = a->cap == 0 ? 64 : a->cap * 2;
        offs = realloc(a->offs, cap * sizeof(*offs));
        if (offs != NULL) {
            a->offs = offs;
        }
        lens = realloc(a->lens, cap * sizeof(*lens));
        if (lens != NULL) {
            a->lens = lens;
        }
        argv = realloc(a->argv, cap * sizeof(*argv));
        if (argv != NULL) {
            a->argv = argv;
        }
        if (offs == NULL || lens == NULL || argv == NULL) {
            a->failed = true;
            return false;
        }
        a->cap = cap;
    }
    if (a->size - a->used < bytes + 1) {
        size = a->size == 0 ? 4096 : a->size;
        while (size - a->used < bytes + 1) {
            size *= 2;
        }
        buf = realloc(a->buf, size);
        if (buf == NULL) {
            a->failed = true;
            return false;
        }
        a->buf = buf;
        a->size = size;
    }
    return true;
}

/* Appends one argument made of two byte ranges (a key prefix and a name, often). */
static void args_push2(args_t *a, const void *p1, size_t len1, const void *p2, size_t len2)
{
    if (!args_reserve(a, len1 + len2)) {
        return;
    }
    a->offs[a->count] = a->used;
    a->lens[a->count] = len1 + len2;
    a->count++;
    if (len1 > 0) {
        memcpy(a->buf + a->used, p1, len1);
    }
    if (len2 > 0) {
        memcpy(a->buf + a->used + len1, p2, len2);
    }
    a->used += len1 + len2;
    a->buf[a->used++] = '\0';
}

static void args_push(args_t *a, const void *p, size_t len)
{
    args_push2(a, p, len, NULL, 0);
}

static void args_push_str(args_t *a, const char *s)
{
    args_push(a, s, strlen(s));
}

static void args_pushf(args_t *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void args_pushf(args_t *a, const char *fmt, ...)
{
    va_list ap;
    int len;

    va_start(ap, fmt);
    len = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (len < 0 || !args_reserve(a, (size_t)len)) {
        a->failed = true;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(a->buf + a->used, (size_t)len + 1, fmt, ap);
    va_end(ap);
    a->offs[a->count] = a->used;
    a->lens[a->count] = (size_t)len;
    a->count++;
    a->used += (size_t)len + 1;
}

static hc_err_t args_finish(args_t *a, char *errstr, size_t errstr_size)
{
    size_t i;

    if (a->failed || a->count > INT32_MAX) {
        hc_errstr_set(errstr, errstr_size, "redis store: out of memory building a command");
        return HC_ERR_FATAL;
    }
    for (i = 0; i < a->count; i++) {
        a->argv[i] = a->buf + a->offs[i];
    }
    return HC_OK;
}

/* ---- the seen set ---- */

/* ---- connection and commands ---- */

/* Releases the last reply: the one place replies are freed. */
static void release_reply(redis_store_t *rs)
{
    freeReplyObject(rs->reply); /* accepts NULL */
    rs->reply = NULL;
}

static void disconnect(redis_store_t *rs)
{
    release_reply(rs);
    if (rs->ctx != NULL) {
        redisFree(rs->ctx);
        rs->ctx = NULL;
    }
}

static bool first_word_is(const char *msg, const char *word)
{
    size_t len = strlen(word);

    return strncmp(msg, word, len) == 0 && (msg[len] == ' ' || msg[len] == '\0');
}

/* Error replies that say "not now" rather than "never": retrying the same call later is the
 * cure. OOM and MISCONF (a failing RDB save stops writes) pass once memory or disk is freed;
 * they must not kill stage 2, whose retries are safe. */
static hc_err_t error_reply_class(const char *msg)
{
    static const char *const transient[] = {
        "LOADING",     "BUSY", "MASTERDOWN", "READONLY",   "TRYAGAIN",
        "CLUSTERDOWN", "OOM",  "MISCONF",    "NOREPLICAS",
    };
    size_t i;

    for (i = 0; i < sizeof(transient) / sizeof(transient[0]); i++) {
        if (first_word_is(msg, transient[i])) {
            return HC_ERR_TRANSIENT;
        }
    }
    /* maxclients: the server refuses a new connection with this before it closes it (the
     * handshake's first command gets it); clients come and go, so it passes */
    if (strncmp(msg, "ERR max number of clients reached", 33) == 0) {
        return HC_ERR_TRANSIENT;
    }
    return HC_ERR_FATAL;
}

/* A call that got no reply: the context is spent (hiredis cannot resume a stream after an
 * error), so drop it; the next call reconnects. */
static hc_err_t connection_failed(redis_store_t *rs, const char *what, char *errstr,
                                  size_t errstr_size)
{
    int kind = rs->ctx->err;
    hc_err_t err;

    if (kind == REDIS_ERR_IO && strstr(rs->ctx->errstr, "temporarily unavailable") != NULL) {
        hc_errstr_set(errstr, errstr_size, "redis store: %s: no reply from %s:%d within %ld ms",
                      what, rs->host, rs->port, rs->ctx_timeout_ms);
    } else {
        hc_errstr_set(errstr, errstr_size, "redis store: %s: %s:%d: %s", what, rs->host, rs->port,
                      rs->ctx->errstr[0] != '\0' ? rs->ctx->errstr : "connection lost");
    }
    /* A protocol error means the peer is not a Redis server we understand: retrying will not
     * change that. */
    err = kind == REDIS_ERR_PROTOCOL || kind == REDIS_ERR_OOM ? HC_ERR_FATAL : HC_ERR_TRANSIENT;
    disconnect(rs);
    return err;
}

/* Sends a's command on the open connection. On HC_OK *reply_out is a non-error reply owned by
 * the handle, valid until the next command. An error reply is described in errstr and
 * classified; *noscript (when given) tells whether it was NOSCRIPT. */
static hc_err_t roundtrip(redis_store_t *rs, args_t *a, const char *what, redisReply **reply_out,
                          bool *noscript, char *errstr, size_t errstr_size)
{
    hc_err_t err;

    *reply_out = NULL;
    if (noscript != NULL) {
        *noscript = false;
    }
    err = args_finish(a, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    release_reply(rs);
    if (rs->ctx_timeout_ms != rs->timeout_ms) {
        if (redisSetTimeout(rs->ctx, ms_to_timeval(rs->timeout_ms)) != REDIS_OK) {
            return connection_failed(rs, what, errstr, errstr_size);
        }
        rs->ctx_timeout_ms = rs->timeout_ms;
    }
    rs->reply = redisCommandArgv(rs->ctx, (int)a->count, a->argv, a->lens);
    if (rs->reply == NULL) {
        return connection_failed(rs, what, errstr, errstr_size);
    }
    if (rs->reply->type != REDIS_REPLY_ERROR) {
        *reply_out = rs->reply;
        return HC_OK;
    }
    hc_errstr_set(errstr, errstr_size, "redis store: %s: %s", what, rs->reply->str);
    if (noscript != NULL) {
        *noscript = first_word_is(rs->reply->str, "NOSCRIPT");
    }
    err = error_reply_class(rs->reply->str);
    if (first_word_is(rs->reply->str, "READONLY") || first_word_is(rs->reply->str, "MASTERDOWN")) {
        /* We reached a replica (after a failover, say): reconnect to find the primary. */
        disconnect(rs);
    } else {
        release_reply(rs);
    }
    return err;
}

/* AUTH, SELECT and CLIENT SETNAME on a fresh connection. A refusal of AUTH or SELECT that is
 * not transient is a configuration mistake (wrong password, no such database): HC_ERR_INVALID,
 * reported against the key. The commands are built in a list of their own: a reconnect happens
 * inside command(), while rs->args holds the caller's command. */
static hc_err_t handshake(redis_store_t *rs, char *errstr, size_t errstr_size)
{
    args_t a = {0};
    redisReply *reply;
    hc_err_t err = HC_OK;

    if (rs->password != NULL) {
        args_push_str(&a, "AUTH");
        if (rs->user != NULL) {
            args_push_str(&a, rs->user);
        }
        args_push_str(&a, rs->password);
        err = roundtrip(rs, &a, "AUTH", &reply, NULL, errstr, errstr_size);
        if (err != HC_OK) {
            /* Say which server refused whom (the reply, WRONGPASS, names neither). */
            size_t used = errstr != NULL ? strlen(errstr) : 0;
            if (used + 1 < errstr_size) {
                snprintf(errstr + used, errstr_size - used, " (server %s:%d, user %s)", rs->host,
                         rs->port, rs->user != NULL ? rs->user : "default");
            }
            goto out_fini;
        }
    }
    if (rs->db != 0) {
        args_reset(&a);
        args_push_str(&a, "SELECT");
        args_pushf(&a, "%d", rs->db);
        err = roundtrip(rs, &a, "SELECT", &reply, NULL, errstr, errstr_size);
        if (err != HC_OK) {
            goto out_fini;
        }
    }
    /* So that CLIENT LIST tells which replica holds which connection. Only a courtesy: an ACL
     * user without +client gets an error reply, and that is no reason to refuse to work. */
    args_reset(&a);
    args_push_str(&a, "CLIENT");
    args_push_str(&a, "SETNAME");
    args_push_str(&a, rs->name);
    err = roundtrip(rs, &a, "CLIENT SETNAME", &reply, NULL, errstr, errstr_size);
    if (err == HC_ERR_FATAL && rs->ctx != NULL) {
        err = HC_OK;
    }

out_fini:
    args_fini(&a);
    return err == HC_ERR_FATAL ? HC_ERR_INVALID : err;
}

#ifdef HC_REDIS_TLS
/* OpenSSL's reason for the last error on this thread, or fallback. */
static const char *openssl_reason(const char *fallback)
{
    const char *why = ERR_reason_error_string(ERR_peek_last_error());

    return why != NULL ? why : fallback;
}

/* An encrypted client key would make OpenSSL ask for its passphrase on the terminal, blocking a
 * service: refuse instead (the key must be stored unencrypted, readable by this user only). */
static int no_passphrase(char *buf, int size, int rwflag, void *userdata)
{
    (void)buf;
    (void)size;
    (void)rwflag;
    (void)userdata;
    return 0;
}

/* The SSL_CTX every connection of this handle uses: loaded once, so a reconnect does not read
 * the files again (and does not fail because a file was rotated away meanwhile). */
static hc_err_t tls_context_new(redis_store_t *rs, char *errstr, size_t errstr_size)
{
    SSL_CTX *ctx;
    hc_err_t err = HC_ERR_INVALID;

    ERR_clear_error();
    ctx = SSL_CTX_new(TLS_client_method());
    if (ctx == NULL) {
        hc_errstr_set(errstr, errstr_size, "redis store: cannot set up TLS: %s",
                      openssl_reason("SSL_CTX_new failed"));
        return HC_ERR_FATAL;
    }
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    SSL_CTX_set_default_passwd_cb(ctx, no_passphrase);
    if (rs->tls_cacert != NULL || rs->tls_capath != NULL) {
        if (SSL_CTX_load_verify_locations(ctx, rs->tls_cacert, rs->tls_capath) != 1) {
            hc_errstr_set(errstr, errstr_size,
                          "store: rediss:// cacert/capath: cannot load CA certificates from %s: %s",
                          rs->tls_cacert != NULL ? rs->tls_cacert : rs->tls_capath,
                          openssl_reason("unreadable"));
            goto fail_free;
        }
    } else if (SSL_CTX_set_default_verify_paths(ctx) != 1) {
        hc_errstr_set(errstr, errstr_size,
                      "store: rediss://: cannot load the system's CA certificates: %s (give "
                      "cacert=FILE)",
                      openssl_reason("unreadable"));
        goto fail_free;
    }
    if ((rs->tls_cert == NULL) != (rs->tls_key == NULL)) {
        hc_errstr_set(errstr, errstr_size,
                      "store: rediss://: a client certificate needs both cert=FILE and key=FILE");
        goto fail_free;
    }
    if (rs->tls_cert != NULL) {
        if (SSL_CTX_use_certificate_chain_file(ctx, rs->tls_cert) != 1) {
            hc_errstr_set(errstr, errstr_size, "store: rediss:// cert=%s: %s", rs->tls_cert,
                          openssl_reason("cannot load the client certificate"));
            goto fail_free;
        }
        if (SSL_CTX_use_PrivateKey_file(ctx, rs->tls_key, SSL_FILETYPE_PEM) != 1 ||
            SSL_CTX_check_private_key(ctx) != 1) {
            hc_errstr_set(errstr, errstr_size,
                          "store: rediss:// key=%s: %s (an unencrypted PEM key matching cert)",
                          rs->tls_key, openssl_reason("cannot load the client key"));
            goto fail_free;
        }
    }
    rs->ssl_ctx = ctx;
    return HC_OK;

fail_free:
    SSL_CTX_free(ctx);
    return err;
}

/* The TLS handshake on the fresh TCP connection rs->ctx, bounded by the connect timeout (the
 * socket's timeouts bound each blocking read and write of it). */
static hc_err_t start_tls(redis_store_t *rs, char *errstr, size_t errstr_size)
{
    const char *name = rs->tls_servername != NULL ? rs->tls_servername : rs->host;
    long verify;
    SSL *ssl;

    ERR_clear_error();
    ssl = SSL_new(rs->ssl_ctx);
    if (ssl == NULL) {
        hc_errstr_set(errstr, errstr_size, "redis store: cannot set up TLS: %s",
                      openssl_reason("SSL_new failed"));
        return HC_ERR_FATAL;
    }
    /* The name check hiredis leaves out: an IP literal against the certificate's IP
     * addresses, anything else against its DNS names (no partial wildcards), and as SNI.
     * -DHC_MUTANT_TLS_NO_NAME_CHECK drops it, so that tests/integration/tls.sh can show it
     * would notice (its redis_wrong_name case must fail on such a build). Never in a product. */
#ifndef HC_MUTANT_TLS_NO_NAME_CHECK
    X509_VERIFY_PARAM *param = SSL_get0_param(ssl);
    X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    if (X509_VERIFY_PARAM_set1_ip_asc(param, name) != 1 &&
        (X509_VERIFY_PARAM_set1_host(param, name, 0) != 1 ||
         SSL_set_tlsext_host_name(ssl, name) != 1)) {
        hc_errstr_set(errstr, errstr_size, "store: rediss://: cannot verify the name \"%s\": %s",
                      name, openssl_reason("not a host name"));
        SSL_free(ssl);
        return HC_ERR_INVALID;
    }
#else
    (void)name;
#endif
    if (redisSetTimeout(rs->ctx, ms_to_timeval(rs->connect_ms)) != REDIS_OK) {
        hc_errstr_set(errstr, errstr_size, "redis store: setting up the connection to %s:%d: %s",
                      rs->host, rs->port, rs->ctx->errstr);
        SSL_free(ssl);
        return HC_ERR_TRANSIENT;
    }
    if (redisInitiateSSL(rs->ctx, ssl) == REDIS_OK) {
        return HC_OK; /* hiredis owns ssl now */
    }
    /* On failure hiredis leaves ssl to us. */
    verify = SSL_get_verify_result(ssl);
    SSL_free(ssl);
    if (verify != X509_V_OK) {
        hc_errstr_set(errstr, errstr_size,
                      "redis store: TLS with %s:%d: the server's certificate does not verify: %s "
                      "(check the rediss:// URI's host or servername and its cacert)",
                      rs->host, rs->port, X509_verify_cert_error_string(verify));
        return HC_ERR_INVALID;
    }
    hc_errstr_set(errstr, errstr_size, "redis store: TLS handshake with %s:%d failed: %s%s",
                  rs->host, rs->port, rs->ctx->errstr[0] != '\0' ? rs->ctx->errstr : "no reason",
                  " (is it a TLS port? does it want a client certificate?)");
    return HC_ERR_TRANSIENT;
}
#else
static hc_err_t tls_context_new(redis_store_t *rs, char *errstr, size_t errstr_size)
{
    (void)rs;
    hc_errstr_set(errstr, errstr_size,
                  "store: rediss:// needs a hotcount built with TLS for Redis (hiredis >= 1.0 "
                  "with hiredis_ssl, and OpenSSL: the default HC_DEPS=debian-testing); this one "
                  "was built without");
    return HC_ERR_INVALID;
}

static hc_err_t start_tls(redis_store_t *rs, char *errstr, size_t errstr_size)
{
    return tls_context_new(rs, errstr, errstr_size);
}
#endif

static hc_err_t ensure_connected(redis_store_t *rs, char *errstr, size_t errstr_size)
{
    hc_err_t err;

    if (rs->ctx != NULL) {
        return HC_OK;
    }
    rs->ctx = redisConnectWithTimeout(rs->host, rs->port, ms_to_timeval(rs->connect_ms));
    if (rs->ctx == NULL) {
        hc_errstr_set(errstr, errstr_size, "redis store: out of memory connecting");
        return HC_ERR_FATAL;
    }
    if (rs->ctx->err != 0) {
        hc_errstr_set(errstr, errstr_size, "redis store: cannot connect to %s:%d: %s", rs->host,
                      rs->port, rs->ctx->errstr);
        err = HC_ERR_TRANSIENT;
        goto fail_disconnect;
    }
    if (rs->tls) {
        err = start_tls(rs, errstr, errstr_size);
        if (err != HC_OK) {
            goto fail_disconnect;
        }
    }
    /* Keepalive finds a peer that vanished without a FIN while we wait for a reply. */
    if (redisSetTimeout(rs->ctx, ms_to_timeval(rs->command_ms)) != REDIS_OK ||
        redisEnableKeepAlive(rs->ctx) != REDIS_OK) {
        hc_errstr_set(errstr, errstr_size, "redis store: setting up the connection to %s:%d: %s",
                      rs->host, rs->port, rs->ctx->errstr);
        err = HC_ERR_TRANSIENT;
        goto fail_disconnect;
    }
    rs->ctx_timeout_ms = rs->command_ms;
    err = handshake(rs, errstr, errstr_size);
    if (err != HC_OK) {
        goto fail_disconnect;
    }
    return HC_OK;

fail_disconnect:
    disconnect(rs);
    return err;
}

/* Connects if needed, then runs a's command (see roundtrip). */
static hc_err_t command(redis_store_t *rs, args_t *a, const char *what, redisReply **reply_out,
                        bool *noscript, char *errstr, size_t errstr_size)
{
    hc_err_t err;

    *reply_out = NULL;
    err = ensure_connected(rs, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    return roundtrip(rs, a, what, reply_out, noscript, errstr, errstr_size);
}

static hc_err_t load_script(redis_store_t *rs, char *errstr, size_t errstr_size)
{
    args_t a = {0};
    redisReply *reply;
    hc_err_t err;

    /* Its own argument list: the caller's (rs->args) may hold the EVALSHA to retry. */
    args_push_str(&a, "SCRIPT");
    args_push_str(&a, "LOAD");
    args_push(&a, apply_script, sizeof(apply_script) - 1);
    err = command(rs, &a, "SCRIPT LOAD", &reply, NULL, errstr, errstr_size);
    if (err != HC_OK) {
        goto out_fini;
    }
    if (reply->type != REDIS_REPLY_STRING || reply->len != sizeof(rs->sha) - 1) {
        hc_errstr_set(errstr, errstr_size, "redis store: SCRIPT LOAD: unexpected reply");
        err = HC_ERR_FATAL;
        goto out_fini;
    }
    memcpy(rs->sha, reply->str, sizeof(rs->sha) - 1);
    rs->sha[sizeof(rs->sha) - 1] = '\0';

out_fini:
    args_fini(&a);
    return err;
}

/* Runs the EVALSHA in a (its argv[1] is the SHA). The script cache is empty after a restart,
 * a failover or SCRIPT FLUSH: then load the script again and retry once. Retrying is safe
 * because NOSCRIPT means the script did not run. */
static hc_err_t run_script(redis_store_t *rs, args_t *a, redisReply **reply_out, char *errstr,
                           size_t errstr_size)
{
    bool noscript = false;
    hc_err_t err;

    err = command(rs, a, "apply", reply_out, &noscript, errstr, errstr_size);
    if (err == HC_OK || !noscript) {
        return err;
    }
    err = load_script(rs, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    return command(rs, a, "apply", reply_out, NULL, errstr, errstr_size);
}

/* ---- opening ---- */

/* Decimal digits in [p, end) as an int within [min, max]. */
static bool parse_uint_range(const char *p, const char *end, long min, long max, int *out)
{
    long v = 0;

    if (p == end) {
        return false;
    }
    for (; p < end; p++) {
        if (*p < '0' || *p > '9') {
            return false;
        }
        v = v * 10 + (*p - '0');
        if (v > max) {
            return false;
        }
    }
    if (v < min) {
        return false;
    }
    *out = (int)v;
    return true;
}

/* Fills host, port, db, user and password from the URI. Messages never repeat the URI: it may
 * carry a password, and they end up in logs. */
/* The TLS options of a rediss:// URI: "name=value" pairs after '?', joined by '&'. */
static hc_err_t parse_tls_options(redis_store_t *rs, const char *p, const char **why, bool *bad)
{
    static const struct {
        const char *name;
        size_t offset;
    } opts[] = {
        {"cacert", offsetof(redis_store_t, tls_cacert)},
        {"capath", offsetof(redis_store_t, tls_capath)},
        {"cert", offsetof(redis_store_t, tls_cert)},
        {"key", offsetof(redis_store_t, tls_key)},
        {"servername", offsetof(redis_store_t, tls_servername)},
    };

    while (*p != '\0') {
        size_t len = strcspn(p, "&");
        const char *eq = memchr(p, '=', len);
        size_t i;

        for (i = 0; eq != NULL && i < sizeof(opts) / sizeof(opts[0]); i++) {
            if ((size_t)(eq - p) == strlen(opts[i].name) &&
                strncmp(p, opts[i].name, (size_t)(eq - p)) == 0) {
                break;
            }
        }
        if (eq == NULL || i == sizeof(opts) / sizeof(opts[0])) {
            *why = "unknown option after '?' (rediss:// knows cacert, capath, cert, key and "
                   "servername)";
            return HC_ERR_INVALID;
        }
        char **slot = (char **)(void *)((char *)rs + opts[i].offset);
        if (*slot != NULL || eq + 1 == p + len) {
            *why = "a TLS option is empty or given twice";
            return HC_ERR_INVALID;
        }
        *slot = hc_store_percent_decode(eq + 1, (size_t)(p + len - eq - 1), bad);
        if (*slot == NULL) {
            *why = *bad ? "bad percent-encoding in a TLS option" : NULL;
            return *bad ? HC_ERR_INVALID : HC_ERR_FATAL;
        }
        p += len;
        p += *p == '&';
    }
    return HC_OK;
}

static hc_err_t parse_uri(redis_store_t *rs, const char *uri, char *errstr, size_t errstr_size)
{
    const char *rest;
    const char *at;
    const char *host;
    const char *host_end;
    const char *p;
    const char *colon;
    const char *why;
    bool bad = false;
    hc_err_t err;

    rs->tls = strncmp(uri, REDISS_URI_PREFIX, strlen(REDISS_URI_PREFIX)) == 0;
    rest = uri + strlen(rs->tls ? REDISS_URI_PREFIX : REDIS_URI_PREFIX);
    at = strrchr(rest, '@');
    if (at != NULL) {
        colon = memchr(rest, ':', (size_t)(at - rest));
        if (colon == NULL) {
            /* "user@": the password comes from store.password.file */
            rs->user = hc_store_percent_decode(rest, (size_t)(at - rest), &bad);
            if (rs->user == NULL) {
                goto fail_decode;
            }
            if (rs->user[0] == '\0') {
                why = "empty user name before '@'";
                goto fail_invalid;
            }
        } else if (colon > rest) {
            rs->user = hc_store_percent_decode(rest, (size_t)(colon - rest), &bad);
            if (rs->user == NULL) {
                goto fail_decode;
            }
        }
        if (colon != NULL) {
            rs->password = hc_store_percent_decode(colon + 1, (size_t)(at - colon - 1), &bad);
            if (rs->password == NULL) {
                goto fail_decode;
            }
        }
        rest = at + 1;
    }
    if (rest[0] == '[') { /* [IPv6] */
        host = rest + 1;
        host_end = strchr(host, ']');
        if (host_end == NULL) {
            why = "unclosed '[' in the host";
            goto fail_invalid;
        }
        p = host_end + 1;
    } else {
        host = rest;
        host_end = host + strcspn(host, ":/?#");
        p = host_end;
    }
    if (host_end == host) {
        why = "missing host";
        goto fail_invalid;
    }
    rs->port = REDIS_DEFAULT_PORT;
    if (*p == ':') {
        p++;
        if (!parse_uint_range(p, p + strcspn(p, "/?#"), 1, 65535, &rs->port)) {
            why = "the port must be 1..65535";
            goto fail_invalid;
        }
        p += strcspn(p, "/?#");
    }
    rs->db = 0;
    if (*p == '/') {
        p++;
        if (*p != '\0' && !parse_uint_range(p, p + strcspn(p, "?#"), 0, INT32_MAX, &rs->db)) {
            why = "the database must be a number";
            goto fail_invalid;
        }
        p += strcspn(p, "?#");
    }
    if (*p == '?' && rs->tls) {
        err = parse_tls_options(rs, p + 1, &why, &bad);
        if (err == HC_ERR_INVALID) {
            goto fail_invalid;
        }
        if (err != HC_OK) {
            goto fail_decode;
        }
        p += strlen(p);
    }
    if (*p != '\0') {
        why = *p == '?' ? "query options are for rediss:// (TLS) only"
                        : "unexpected text after the host, port or database";
        goto fail_invalid;
    }
    rs->host = strndup(host, (size_t)(host_end - host));
    if (rs->host == NULL) {
        goto fail_decode;
    }
    return HC_OK;

fail_decode:
    if (bad) {
        why = "bad percent-encoding in the credentials";
        goto fail_invalid;
    }
    hc_errstr_set(errstr, errstr_size, "redis store: out of memory");
    return HC_ERR_FATAL;

fail_invalid:
    hc_errstr_set(errstr, errstr_size, "store: bad redis URI: %s (expected %s)", why,
                  REDIS_URI_FORM);
    return HC_ERR_INVALID;
}

/* "hotcount-<instance.id>", cut to fit, with every byte Redis refuses in a client name (spaces,
 * control and non-ASCII bytes) replaced by '_'. */
static void client_name(char *buf, size_t buf_size, const char *instance_id)
{
    size_t i;

    snprintf(buf, buf_size, "hotcount-%s", instance_id != NULL ? instance_id : "");
    for (i = 0; buf[i] != '\0'; i++) {
        if (buf[i] < '!' || buf[i] > '~') {
            buf[i] = '_';
        }
    }
}

/* True when a key <prefix>P could equal a key that starts with `internal`. */
static bool prefix_overlaps(const char *prefix, const char *internal)
{
    size_t a = strlen(prefix);
    size_t b = strlen(internal);

    return strncmp(prefix, internal, a < b ? a : b) == 0;
}

static void redis_close(hc_store_t *st)
{
    redis_store_t *rs = redis_store(st);

    if (rs == NULL) {
        return;
    }
    disconnect(rs);
    args_fini(&rs->args);
    free(rs->host);
    free(rs->user);
    free(rs->password);
    free(rs->tls_cacert);
    free(rs->tls_capath);
    free(rs->tls_cert);
    free(rs->tls_key);
    free(rs->tls_servername);
#ifdef HC_REDIS_TLS
    SSL_CTX_free(rs->ssl_ctx); /* accepts NULL */
#endif
    free(rs->prefix);
    free(rs);
}

static hc_err_t redis_open(const hc_config_t *cfg, hc_store_t **stp, char *errstr,
                           size_t errstr_size)
{
    const char *prefix = cfg->store_redis_prefix != NULL ? cfg->store_redis_prefix : "";
    redis_store_t *rs;
    hc_err_t err;

    *stp = NULL;
    if (strncmp(cfg->store, REDIS_URI_PREFIX, strlen(REDIS_URI_PREFIX)) != 0 &&
        strncmp(cfg->store, REDISS_URI_PREFIX, strlen(REDISS_URI_PREFIX)) != 0) {
        hc_errstr_set(errstr, errstr_size, "store: bad redis URI (expected %s)", REDIS_URI_FORM);
        return HC_ERR_INVALID;
    }
    if (prefix_overlaps(prefix, OFFSETS_KEY_PREFIX) ||
        prefix_overlaps(prefix, STAGING_KEY_PREFIX)) {
        hc_errstr_set(errstr, errstr_size,
                      "store.redis.prefix: \"%s\" would put counts among hotcount's own keys "
                      "(" OFFSETS_KEY_PREFIX "*, " STAGING_KEY_PREFIX "*); choose another, such "
                      "as the default \"likes:\"",
                      prefix);
        return HC_ERR_INVALID;
    }

    rs = calloc(1, sizeof(*rs));
    if (rs == NULL) {
        hc_errstr_set(errstr, errstr_size, "redis store: out of memory");
        return HC_ERR_FATAL;
    }
    rs->base.ops = hc_store_redis_backend.ops;
    hc_timeouts_t scratch;
    const hc_timeouts_t *t = hc_store_timeouts(cfg, &scratch);
    rs->connect_ms = (long)t->store_connect_ms;
    rs->command_ms = (long)t->store_statement_ms;
    rs->batch_ms = t->store_batch_ms;
    rs->timeout_ms = rs->command_ms;
    err = parse_uri(rs, cfg->store, errstr, errstr_size);
    if (err != HC_OK) {
        goto fail_close;
    }
    if (cfg->store_password != NULL && cfg->store_password[0] != '\0') {
        if (rs->password != NULL) { /* hc_config_validate refuses this too */
            hc_errstr_set(errstr, errstr_size,
                          "store.password.file and a password in `store`: give only one");
            err = HC_ERR_INVALID;
            goto fail_close;
        }
        rs->password = strdup(cfg->store_password);
        if (rs->password == NULL) {
            hc_errstr_set(errstr, errstr_size, "redis store: out of memory");
            err = HC_ERR_FATAL;
            goto fail_close;
        }
    } else if (rs->user != NULL && rs->password == NULL) {
        /* Not quoted: "redis://PASSWORD@host" is a common slip, and this would print it. */
        hc_errstr_set(errstr, errstr_size,
                      "store: bad redis URI: a user without a password (user:password@, user@ "
                      "with store.password.file, or :password@ for the password alone)");
        err = HC_ERR_INVALID;
        goto fail_close;
    }
    if (rs->tls) {
        err = tls_context_new(rs, errstr, errstr_size);
        if (err != HC_OK) {
            goto fail_close;
        }
    }
    rs->prefix = strdup(prefix);
    if (rs->prefix == NULL) {
        hc_errstr_set(errstr, errstr_size, "redis store: out of memory");
        err = HC_ERR_FATAL;
        goto fail_close;
    }
    rs->prefix_len = strlen(prefix);
    client_name(rs->name, sizeof(rs->name), cfg->instance_id);

    /* Connect now, so that a wrong address or password shows at open rather than at the first
     * batch, and load the script, which also proves the server runs Lua. */
    err = load_script(rs, errstr, errstr_size);
    if (err != HC_OK) {
        goto fail_close;
    }
    *stp = &rs->base;
    return HC_OK;

fail_close:
    redis_close(&rs->base);
    return err;
}

/* Nothing to create: keys appear with the first write. Loading the script is the one thing a
 * server must be ready for. */
static hc_err_t redis_init_schema(hc_store_t *st, char *errstr, size_t errstr_size)
{
    return load_script(redis_store(st), errstr, errstr_size);
}

/* ---- replies ---- */

/* A decimal int64 written by INCRBY or by us. */
static bool parse_i64(const char *p, size_t len, int64_t *out)
{
    bool neg = len > 0 && p[0] == '-';
    uint64_t limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    uint64_t v = 0;
    size_t i = neg ? 1 : 0;

    if (i == len || len - i > 19) {
        return false;
    }
    for (; i < len; i++) {
        if (p[i] < '0' || p[i] > '9') {
            return false;
        }
        v = v * 10 + (uint64_t)(p[i] - '0');
    }
    if (v > limit) {
        return false;
    }
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return true;
}

/* One count from an MGET: nil (no such key, or a key of another type) is 0. */
static hc_err_t count_value(const redisReply *r, const char *key, size_t key_len, int64_t *likes,
                            bool *present, char *errstr, size_t errstr_size)
{
    *present = false;
    *likes = 0;
    if (r->type == REDIS_REPLY_NIL) {
        return HC_OK;
    }
    if (r->type != REDIS_REPLY_STRING || !parse_i64(r->str, r->len, likes)) {
        hc_errstr_set(errstr, errstr_size,
                      "redis store: key \"%.*s\" does not hold an integer count",
                      key_len > 300 ? 300 : (int)key_len, key);
        return HC_ERR_FATAL;
    }
    *present = true;
    return HC_OK;
}

static hc_err_t unexpected_reply(const char *what, char *errstr, size_t errstr_size)
{
    hc_errstr_set(errstr, errstr_size, "redis store: %s: unexpected reply", what);
    return HC_ERR_FATAL;
}

/* ---- offsets ---- */

static void push_offsets_key(args_t *a, const char *group)
{
    args_push2(a, OFFSETS_KEY_PREFIX, strlen(OFFSETS_KEY_PREFIX), group,
               group != NULL ? strlen(group) : 0);
}

static hc_err_t redis_read_offsets(hc_store_t *st, const char *group, const char *topic,
                                   const int32_t *partitions, size_t count, int64_t *offsets_out,
                                   char *errstr, size_t errstr_size)
{
    redis_store_t *rs = redis_store(st);
    redisReply *reply;
    redisReply *r;
    hc_err_t err;
    size_t i;

    /* One HMGET: all partitions as of one moment, like the SQL stores' snapshot. */
    args_reset(&rs->args);
    args_push_str(&rs->args, "HMGET");
    push_offsets_key(&rs->args, group);
    for (i = 0; i < count; i++) {
        args_pushf(&rs->args, "%s/%d", topic, (int)partitions[i]);
    }
    err = command(rs, &rs->args, "reading offsets", &reply, NULL, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    if (reply->type != REDIS_REPLY_ARRAY || reply->elements != count) {
        return unexpected_reply("HMGET", errstr, errstr_size);
    }
    for (i = 0; i < count; i++) {
        r = reply->element[i];
        if (r->type == REDIS_REPLY_NIL) {
            offsets_out[i] = HC_OFFSET_NONE;
        } else if (r->type != REDIS_REPLY_STRING || !parse_i64(r->str, r->len, &offsets_out[i]) ||
                   offsets_out[i] < 0) {
            hc_errstr_set(errstr, errstr_size,
                          "redis store: " OFFSETS_KEY_PREFIX "%s field %s/%d is not an offset",
                          group, topic, (int)partitions[i]);
            return HC_ERR_FATAL;
        }
    }
    return HC_OK;
}

/* ---- apply ---- */

static void format_offset(char *buf, size_t buf_size, int64_t offset)
{
    if (offset == HC_OFFSET_NONE) {
        snprintf(buf, buf_size, "none");
    } else {
        snprintf(buf, buf_size, "%lld", (long long)offset);
    }
}

/* The end of the part that starts at delta `start`: at least one delta, at most
 * REDIS_PART_DELTAS, and no more than REDIS_PART_BYTES of keys and values. */
static size_t part_end(const redis_store_t *rs, const hc_store_batch_t *batch, size_t start)
{
    size_t bytes = 0;
    size_t i;

    for (i = start; i < batch->delta_count && i - start < REDIS_PART_DELTAS; i++) {
        bytes += rs->prefix_len + batch->deltas[i].post_id_len + 20;
        if (bytes > REDIS_PART_BYTES && i > start) {
            break;
        }
    }
    return i;
}

/* A random 128-bit id in hex: staging lists of concurrent batches, also from other processes
 * and hosts, must never share a name. */
static hc_err_t new_batch_id(char out[33], char *errstr, size_t errstr_size)
{
    static const char hex[] = "0123456789abcdef";
    unsigned char raw[16];
    size_t i;

    if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw)) {
        hc_errstr_set(errstr, errstr_size, "redis store: getrandom failed");
        return HC_ERR_FATAL;
    }
    for (i = 0; i < sizeof(raw); i++) {
        out[2 * i] = hex[raw[i] >> 4];
        out[2 * i + 1] = hex[raw[i] & 15];
    }
    out[32] = '\0';
    return HC_OK;
}

/* Builds the EVALSHA for deltas [start, end): staged, or the commit when it is the last part. */
static void build_part(redis_store_t *rs, const hc_store_batch_t *batch, const char *batch_id,
                       size_t start, size_t end, bool commit)
{
    args_t *a = &rs->args;
    const hc_store_offset_t *off;
    const hc_store_delta_t *d;
    size_t i;

    args_reset(a);
    args_push_str(a, "EVALSHA");
    args_push_str(a, rs->sha);
    args_pushf(a, "%zu", 2 + (commit ? end - start : 0));
    push_offsets_key(a, batch->group);
    args_push2(a, STAGING_KEY_PREFIX, strlen(STAGING_KEY_PREFIX), batch_id, strlen(batch_id));
    if (commit) {
        for (i = start; i < end; i++) {
            d = &batch->deltas[i];
            args_push2(a, rs->prefix, rs->prefix_len, d->post_id, d->post_id_len);
        }
    }
    args_push_str(a, !commit ? "stage" : batch->totals_out ? "commit" : "commit_quiet");
    args_pushf(a, "%zu", batch->offset_count);
    args_pushf(a, "%zu", start); /* every earlier part staged its deltas */
    args_pushf(a, "%d", REDIS_STAGING_TTL_MS);
    for (i = 0; i < batch->offset_count; i++) {
        off = &batch->offsets[i];
        args_pushf(a, "%s/%d", batch->topic, (int)off->partition);
        if (off->expected == HC_OFFSET_NONE) {
            args_push(a, "", 0);
        } else {
            args_pushf(a, "%lld", (long long)off->expected);
        }
        args_pushf(a, "%lld", (long long)off->next);
    }
    for (i = start; i < end; i++) {
        d = &batch->deltas[i];
        if (!commit) {
            args_push2(a, rs->prefix, rs->prefix_len, d->post_id, d->post_id_len);
        }
        args_pushf(a, "%lld", (long long)d->delta);
    }
}

/* Turns the script's reply into an outcome (see apply_script); a commit's totals go to the
 * batch's totals_out. */
static hc_err_t part_outcome(const redisReply *reply, const hc_store_batch_t *batch, bool commit,
                             char *errstr, size_t errstr_size)
{
    const hc_store_offset_t *off;
    const redisReply *stored;
    char expected_buf[24];
    long long code;
    long long index;

    if (reply->type != REDIS_REPLY_ARRAY || reply->elements < 1 ||
        reply->element[0]->type != REDIS_REPLY_INTEGER) {
        return unexpected_reply("apply", errstr, errstr_size);
    }
    code = reply->element[0]->integer;
    if (code == 1 && !commit) {
        return HC_OK;
    }
    if (code == 1) {
        if (reply->elements != 1 + (batch->totals_out ? batch->delta_count : 0)) {
            return unexpected_reply("apply", errstr, errstr_size);
        }
        for (size_t i = 0; batch->totals_out != NULL && i < batch->delta_count; i++) {
            if (reply->element[1 + i]->type != REDIS_REPLY_INTEGER) {
                return unexpected_reply("apply", errstr, errstr_size);
            }
            batch->totals_out[i] = reply->element[1 + i]->integer;
        }
        return HC_OK;
    }
    if (code == 0 && reply->elements == 3 && reply->element[1]->type == REDIS_REPLY_INTEGER &&
        reply->element[2]->type == REDIS_REPLY_STRING) {
        index = reply->element[1]->integer;
        stored = reply->element[2];
        if (index < 0 || (size_t)index >= batch->offset_count) {
            return unexpected_reply("apply", errstr, errstr_size);
        }
        off = &batch->offsets[index];
        format_offset(expected_buf, sizeof(expected_buf), off->expected);
        hc_errstr_set(errstr, errstr_size,
                      "redis store: offset conflict on %s/%d (group %s): stored next_offset %.*s, "
                      "batch expected %s",
                      batch->topic, (int)off->partition, batch->group,
                      stored->len == 0 ? 4 : (stored->len > 24 ? 24 : (int)stored->len),
                      stored->len == 0 ? "none" : stored->str, expected_buf);
        return HC_ERR_CONFLICT;
    }
    if (code == -1) {
        hc_errstr_set(errstr, errstr_size,
                      "redis store: the staged parts of a split batch were gone at its commit "
                      "(expired or evicted); nothing was written, retry the batch");
        return HC_ERR_TRANSIENT;
    }
    if (code == -2 && reply->elements == 4 && reply->element[1]->type == REDIS_REPLY_STRING &&
        reply->element[2]->type == REDIS_REPLY_INTEGER &&
        reply->element[3]->type == REDIS_REPLY_STRING) {
        index = reply->element[2]->integer;
        if (index < 0 || (size_t)index >= batch->delta_count) {
            return unexpected_reply("apply", errstr, errstr_size);
        }
        bool overflow = strcmp(reply->element[3]->str, "overflow") == 0;
        hc_errstr_set(errstr, errstr_size,
                      "redis store: delta %lld (%lld) %s key \"%.*s\"; nothing was written", index,
                      (long long)batch->deltas[index].delta,
                      overflow ? "would take past 9e18 the count at"
                               : "cannot be added to (not an integer, or another type)",
                      reply->element[1]->len > 300 ? 300 : (int)reply->element[1]->len,
                      reply->element[1]->str);
        if (batch->refused_out != NULL) {
            *batch->refused_out = (size_t)index;
        }
        /* One post's count is refused, the store is fine: the caller sets that post aside. */
        return HC_ERR_RECORD;
    }
    return unexpected_reply("apply", errstr, errstr_size);
}

static hc_err_t redis_apply(hc_store_t *st, const hc_store_batch_t *batch, char *errstr,
                            size_t errstr_size)
{
    redis_store_t *rs = redis_store(st);
    redisReply *reply;
    char batch_id[33];
    size_t start = 0;
    size_t end;
    bool last;
    hc_err_t err;

    err = new_batch_id(batch_id, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    /* On any failure the parts staged so far stay behind, invisible, until their list expires;
     * a retry stages under a new id. */
    /* The parts share one deadline, so a batch of any size is bounded by store_batch_ms. */
    int64_t deadline = hc_now_ms() + rs->batch_ms;
    do {
        end = part_end(rs, batch, start);
        last = end == batch->delta_count;
        build_part(rs, batch, batch_id, start, end, last);
        long want = rs->command_ms;
        if (last) {
            want += (long)(batch->delta_count * REDIS_COMMIT_US_PER_DELTA / 1000);
        }
        int64_t left = deadline - hc_now_ms();
        if (left <= 0) {
            hc_errstr_set(errstr, errstr_size,
                          "redis store: apply: the batch took longer than %" PRId64
                          " ms; nothing of it was applied",
                          rs->batch_ms);
            err = HC_ERR_TRANSIENT;
            break;
        }
        rs->timeout_ms = left < want ? (long)left : want;
        err = run_script(rs, &rs->args, &reply, errstr, errstr_size);
        if (err == HC_OK) {
            err = part_outcome(reply, batch, last, errstr, errstr_size);
        }
        if (err == HC_OK && batch->on_progress != NULL) {
            batch->on_progress(batch->progress_opaque); /* a part staged, or the commit */
        }
        start = end;
    } while (err == HC_OK && !last);
    rs->timeout_ms = rs->command_ms;
    return err;
}

/* ---- get ---- */

static hc_err_t redis_get(hc_store_t *st, const char *const *post_ids, const size_t *post_id_lens,
                          size_t count, int64_t *likes_out, char *errstr, size_t errstr_size)
{
    redis_store_t *rs = redis_store(st);
    redisReply *reply;
    bool present;
    hc_err_t err;
    size_t base;
    size_t n;
    size_t i;

    /* In pages, so that a long list of posts is not one huge command and reply. Unlike the
     * SQL stores the pages are not one snapshot: Redis has none. */
    for (base = 0; base < count; base += n) {
        n = count - base < REDIS_PAGE_KEYS ? count - base : REDIS_PAGE_KEYS;
        args_reset(&rs->args);
        args_push_str(&rs->args, "MGET");
        for (i = 0; i < n; i++) {
            args_push2(&rs->args, rs->prefix, rs->prefix_len, post_ids[base + i],
                       post_id_lens[base + i]);
        }
        err = command(rs, &rs->args, "reading counts", &reply, NULL, errstr, errstr_size);
        if (err != HC_OK) {
            return err;
        }
        if (reply->type != REDIS_REPLY_ARRAY || reply->elements != n) {
            return unexpected_reply("MGET", errstr, errstr_size);
        }
        for (i = 0; i < n; i++) {
            err = count_value(reply->element[i], rs->args.argv[i + 1], rs->args.lens[i + 1],
                              &likes_out[base + i], &present, errstr, errstr_size);
            if (err != HC_OK) {
                return err;
            }
        }
    }
    return HC_OK;
}

/* ---- scans: top and foreach ---- */

/* MATCH pattern for every key under the prefix: the prefix with glob characters escaped. */
static char *scan_pattern(const redis_store_t *rs)
{
    char *pattern = malloc(rs->prefix_len * 2 + 2);
    size_t n = 0;
    size_t i;

    if (pattern == NULL) {
        return NULL;
    }
    for (i = 0; i < rs->prefix_len; i++) {
        if (strchr("*?[]\\", rs->prefix[i]) != NULL) {
            pattern[n++] = '\\';
        }
        pattern[n++] = rs->prefix[i];
    }
    pattern[n++] = '*';
    pattern[n] = '\0';
    return pattern;
}

/* One SCAN page and the MGET of its keys; fn is called once per post not seen before. Updates
 * cursor; *more turns false at the end of the scan or when fn asks to stop. */
static hc_err_t scan_page(redis_store_t *rs, const char *pattern, char cursor[24],
                          hc_store_seen_t *seen, hc_store_row_fn fn, void *opaque, bool *more,
                          char *errstr, size_t errstr_size)
{
    redisReply *reply;
    redisReply *keys;
    const char *id;
    size_t id_len;
    int64_t likes;
    bool present;
    bool fresh;
    hc_err_t err;
    size_t i;

    args_reset(&rs->args);
    args_push_str(&rs->args, "SCAN");
    args_push_str(&rs->args, cursor);
    args_push_str(&rs->args, "MATCH");
    args_push_str(&rs->args, pattern);
    args_push_str(&rs->args, "COUNT");
    args_pushf(&rs->args, "%d", REDIS_PAGE_KEYS);
    err = command(rs, &rs->args, "scanning counts", &reply, NULL, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2 ||
        reply->element[0]->type != REDIS_REPLY_STRING || reply->element[0]->len >= 24 ||
        reply->element[1]->type != REDIS_REPLY_ARRAY) {
        return unexpected_reply("SCAN", errstr, errstr_size);
    }
    memcpy(cursor, reply->element[0]->str, reply->element[0]->len);
    cursor[reply->element[0]->len] = '\0';
    *more = strcmp(cursor, "0") != 0;
    keys = reply->element[1];
    if (keys->elements == 0) {
        return HC_OK;
    }

    /* The keys are copied into the MGET, which outlives the SCAN reply. */
    args_reset(&rs->args);
    args_push_str(&rs->args, "MGET");
    for (i = 0; i < keys->elements; i++) {
        if (keys->element[i]->type != REDIS_REPLY_STRING) {
            return unexpected_reply("SCAN", errstr, errstr_size);
        }
        args_push(&rs->args, keys->element[i]->str, keys->element[i]->len);
    }
    err = command(rs, &rs->args, "reading counts", &reply, NULL, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    if (reply->type != REDIS_REPLY_ARRAY || reply->elements != rs->args.count - 1) {
        return unexpected_reply("MGET", errstr, errstr_size);
    }
    for (i = 0; i < reply->elements; i++) {
        err = count_value(reply->element[i], rs->args.argv[i + 1], rs->args.lens[i + 1], &likes,
                          &present, errstr, errstr_size);
        if (err != HC_OK) {
            return err;
        }
        if (!present) {
            continue; /* deleted since the SCAN, or not a string: not a count */
        }
        id = rs->args.argv[i + 1] + rs->prefix_len;
        id_len = rs->args.lens[i + 1] - rs->prefix_len;
        if (id_len == 0 || id_len > HC_POST_ID_MAX) {
            /* hc_store_apply never writes such a key: someone else did, under our prefix. */
            hc_errstr_set(errstr, errstr_size,
                          "redis store: key \"%.*s\" under the prefix has a post id of %zu bytes "
                          "(allowed 1..%d)",
                          (int)(rs->args.lens[i + 1] > 300 ? 300 : rs->args.lens[i + 1]),
                          rs->args.argv[i + 1], id_len, HC_POST_ID_MAX);
            return HC_ERR_FATAL;
        }
        if (!hc_store_seen_add(seen, id, id_len, &fresh)) {
            hc_errstr_set(errstr, errstr_size, "redis store: out of memory while scanning");
            return HC_ERR_FATAL;
        }
        if (fresh && !fn(id, id_len, likes, opaque)) {
            *more = false;
            return HC_OK;
        }
    }
    return HC_OK;
}

static hc_err_t scan_counts(redis_store_t *rs, hc_store_row_fn fn, void *opaque, char *errstr,
                            size_t errstr_size)
{
    char cursor[24] = "0";
    hc_store_seen_t seen = {0};
    char *pattern;
    bool more = true;
    hc_err_t err = HC_OK;

    pattern = scan_pattern(rs);
    if (pattern == NULL) {
        hc_errstr_set(errstr, errstr_size, "redis store: out of memory");
        return HC_ERR_FATAL;
    }
    while (err == HC_OK && more) {
        err = scan_page(rs, pattern, cursor, &seen, fn, opaque, &more, errstr, errstr_size);
    }
    hc_store_seen_fini(&seen);
    free(pattern);
    return err;
}

static hc_err_t redis_foreach(hc_store_t *st, hc_store_row_fn fn, void *opaque, char *errstr,
                              size_t errstr_size)
{
    return scan_counts(redis_store(st), fn, opaque, errstr, errstr_size);
}

static hc_err_t redis_top(hc_store_t *st, size_t n, hc_store_row_t *rows_out, size_t *count_out,
                          char *errstr, size_t errstr_size)
{
    hc_store_top_t heap;
    hc_err_t err;

    /* Redis keeps no order by value: every count is read once (O(keys)), and only n rows are
     * ever held. */
    hc_store_top_init(&heap, rows_out, n);
    err = scan_counts(redis_store(st), hc_store_top_offer, &heap, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    *count_out = hc_store_top_finish(&heap);
    return HC_OK;
}

/* The server's run_id, from INFO server: a random id each start, so a restart that lost the
 * data (no persistence) or a failover to another server changes it. */
static hc_err_t redis_identity(hc_store_t *st, char *id_out, size_t id_size, char *errstr,
                               size_t errstr_size)
{
    redis_store_t *rs = redis_store(st);
    redisReply *reply;
    hc_err_t err;

    args_reset(&rs->args);
    args_push_str(&rs->args, "INFO");
    args_push_str(&rs->args, "server");
    err = command(rs, &rs->args, "reading the server's run_id", &reply, NULL, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    if (reply->type != REDIS_REPLY_STRING && reply->type != REDIS_REPLY_VERB) {
        return unexpected_reply("INFO server", errstr, errstr_size);
    }
    static const char field[] = "run_id:";
    const char *p = reply->str != NULL ? strstr(reply->str, field) : NULL;
    if (p == NULL) {
        id_out[0] = '\0'; /* a server that does not say: no identity */
        return HC_OK;
    }
    p += sizeof(field) - 1;
    size_t len = strcspn(p, "\r\n");
    snprintf(id_out, id_size, "%.*s", (int)len, p);
    return HC_OK;
}

static const hc_store_ops_t redis_ops = {
    .kind = "redis",
    .open = redis_open,
    .close = redis_close,
    .init_schema = redis_init_schema,
    .read_offsets = redis_read_offsets,
    .apply = redis_apply,
    .get = redis_get,
    .top = redis_top,
    .foreach = redis_foreach,
    .identity = redis_identity,
};

/* One command's bound (a script call of REDIS_PART_DELTAS deltas takes well under a second). */
#define REDIS_COMMAND_MS 10000

static const char *const redis_schemes[] = {REDIS_URI_PREFIX, REDISS_URI_PREFIX, NULL};

static int64_t redis_statements_per_batch(int64_t max_keys)
{
    /* one script call per part, the last one commits */
    return (max_keys + REDIS_PART_DELTAS - 1) / REDIS_PART_DELTAS + 1;
}

const hc_store_backend_t hc_store_redis_backend = {
    .facts =
        {
            .name = "redis",
            .title = "Redis",
            .schemes = redis_schemes,
            .uri_form = "redis[s]://[user:pw@]host:port[/db]",
            .takes_password_file = true,
            .connect_ms = HC_STORE_CONNECT_MS,
            .statement_ms = REDIS_COMMAND_MS,
            .statements_per_batch = redis_statements_per_batch,
        },
    .ops = &redis_ops,
};
