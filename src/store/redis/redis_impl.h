/* Layer: store (private to src/store/redis/). The Redis backend's handle, its command builder
 * and what its files share: redis.c (the descriptor, the URI, open and close), redis_conn.c
 * (connection, TLS, commands, the script), redis_commit.c (apply: parts and commit) and
 * redis_read.c (offsets, get, scans, top). The protocol: redis.c's file comment and commit.lua. */
#ifndef HOTCOUNT_STORE_REDIS_IMPL_H
#define HOTCOUNT_STORE_REDIS_IMPL_H

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

/* the commit script, compiled in from commit.lua (CMakeLists.txt, web/embed.cmake) */
extern const unsigned char hc_store_redis_commit_lua[];
extern const size_t hc_store_redis_commit_lua_len;

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
/* The top index of the counts under a prefix: a sorted set and its state (redis.c's file
 * comment, "The top index"), named after the prefix so that deployments sharing a database with
 * other prefixes keep apart. */
#define TOP_KEY_PREFIX "hotcount:top:"
#define TOP_META_KEY_PREFIX "hotcount:top-meta:"
/* The most posts the index keeps unless 2 x serve.top.max is more (redis.c's open). */
#define REDIS_TOP_KEEP 1000

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
    int64_t top_keep;    /* K: the most posts the top index keeps */
    long timeout_ms;     /* the reply timeout the next command should have */
    long connect_ms;     /* cfg->timeouts.store_connect_ms */
    long command_ms;     /* cfg->timeouts.store_statement_ms */
    int64_t batch_ms;    /* cfg->timeouts.store_batch_ms: every part of one apply */
    long ctx_timeout_ms; /* the reply timeout set on ctx */
    char name[80];       /* CLIENT SETNAME: "hotcount-<instance.id>" */
    char sha[41];        /* the script's SHA1, as SCRIPT LOAD reported it */
    args_t args;         /* owned scratch: one command's arguments */
    unsigned char *pack; /* owned scratch: one part's deltas, packed (redis_commit.c) */
    size_t pack_len;
    size_t pack_size;
} redis_store_t;

redis_store_t *redis_store(hc_store_t *st);
void redis_args_reset(args_t *a);
void redis_args_fini(args_t *a);
void redis_args_push2(args_t *a, const void *p1, size_t len1, const void *p2, size_t len2);
void redis_args_push(args_t *a, const void *p, size_t len);
void redis_args_push_str(args_t *a, const char *s);
void redis_args_pushf(args_t *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void redis_disconnect(redis_store_t *rs);
hc_err_t redis_tls_context_new(redis_store_t *rs, char *errstr, size_t errstr_size);
hc_err_t redis_command(redis_store_t *rs, args_t *a, const char *what, redisReply **reply_out,
                       bool *noscript, char *errstr, size_t errstr_size);
hc_err_t redis_load_script(redis_store_t *rs, char *errstr, size_t errstr_size);
hc_err_t redis_run_script(redis_store_t *rs, args_t *a, redisReply **reply_out, char *errstr,
                          size_t errstr_size);
hc_err_t redis_apply(hc_store_t *st, const hc_store_batch_t *batch, char *errstr,
                     size_t errstr_size);
hc_err_t redis_unexpected_reply(const char *what, char *errstr, size_t errstr_size);
void redis_push_offsets_key(args_t *a, const char *group);
/* Pushes the four KEYS every call of the script names (numkeys first): the offsets of group,
 * the staging list of batch_id (both "" for the index-only modes), the top index and its state. */
void redis_push_script_keys(redis_store_t *rs, args_t *a, const char *group, const char *batch_id);
hc_err_t redis_build_top_index(redis_store_t *rs, char *errstr, size_t errstr_size);
hc_err_t redis_read_offsets(hc_store_t *st, const char *group, const char *topic,
                            const int32_t *partitions, size_t count, int64_t *offsets_out,
                            char *errstr, size_t errstr_size);
hc_err_t redis_get(hc_store_t *st, const char *const *post_ids, const size_t *post_id_lens,
                   size_t count, int64_t *likes_out, char *errstr, size_t errstr_size);
hc_err_t redis_foreach(hc_store_t *st, hc_store_row_fn fn, void *opaque, char *errstr,
                       size_t errstr_size);
hc_err_t redis_top(hc_store_t *st, size_t n, hc_store_row_t *rows_out, size_t *count_out,
                   char *errstr, size_t errstr_size);
hc_err_t redis_identity(hc_store_t *st, char *id_out, size_t id_size, char *errstr,
                        size_t errstr_size);

#endif
