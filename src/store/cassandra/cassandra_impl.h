/* Layer: store (private to src/store/cassandra/, its unit test and the test-only library
 * src/store/testing/). The Cassandra backend's shared parts (docs/CASSANDRA.md is the design):
 * the URI, the handle, the prepared statements, the claims, the error mapping.
 *
 *   cassandra_uri.c  the URI (hc_cass_uri_parse)
 *   cassandra.c      descriptor, open/close, schema (`hotcount init`), errors, statements
 *   cass_commit.c    apply (R0-R5)
 *   cass_recover.c   the claims read and the recovery of open claims
 *   cass_exec.c      request groups, repeats, the count and done writes
 *   cass_read.c      read_offsets, get, top, foreach, identity
 *   cass_cache.c     the count cache (R1 reads only the posts it does not hold)
 *
 * One thread at a time per handle, as every store handle (hotcount/store.h). */
#ifndef HOTCOUNT_CASSANDRA_IMPL_H
#define HOTCOUNT_CASSANDRA_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cass_seam.h"
#include "hc_cql.h"
#include "hotcount/err.h"
#include "hotcount/store.h"
#include "store_impl.h"

/* A keyspace name as CQL takes it unquoted: a letter, then letters, digits and '_', at most 48
 * (Cassandra's limit), folded to lower case. */
#define HC_CASS_KEYSPACE_MAX 48
/* Contact points one URI may list. */
#define HC_CASS_HOSTS_MAX 16

typedef enum hc_cass_replication_kind {
    HC_CASS_REPLICATION_NONE, /* not given: `hotcount init` refuses to create the keyspace */
    HC_CASS_REPLICATION_SIMPLE,
    HC_CASS_REPLICATION_NETWORK,
} hc_cass_replication_kind_t;

/* What `cassandra://[user[:password]@]host[:port][,host[:port]...]/KEYSPACE[?options]` says.
 * Options (each at most once; an unknown one is an error naming it, never its value):
 *   tls=0|1, tls_verify=0|1 (default 1), tls_ca=PATH, tls_cert=PATH, tls_key=PATH
 *   consistency=local_quorum|quorum|each_quorum|all|local_one|one (default local_quorum;
 *     one and local_one only on a keyspace with one replica: hc_cass_consistency_check)
 *   serial_consistency=local_serial|serial (default local_serial)
 *   local_dc=NAME (routing stays in that datacenter)
 *   replication=simple:N | DC:N[,DC:N...] (for `hotcount init` only: SimpleStrategy only when
 *     asked for by name; DC:N is NetworkTopologyStrategy)
 *   staging_ttl=SECONDS (the staged batches' TTL, default 604800: docs/CASSANDRA.md) */
typedef struct hc_cass_uri {
    char *user;     /* owned, percent-decoded; NULL: none */
    char *password; /* owned, percent-decoded; NULL: none (store.password.file may give one) */
    char *contact_points; /* owned: "host:port,host:port" as the shim takes it */
    size_t host_count;
    char keyspace[HC_CASS_KEYSPACE_MAX + 1];
    bool tls;
    bool tls_verify;
    char *tls_ca;           /* owned, NULL: none */
    char *tls_cert;         /* owned */
    char *tls_key;          /* owned */
    int consistency;        /* HC_CQL_* consistency code (hc_cql.h) */
    int serial_consistency; /* HC_CQL_SERIAL or HC_CQL_LOCAL_SERIAL */
    char *local_dc;         /* owned, NULL: none */
    hc_cass_replication_kind_t replication;
    /* the CQL replication map for CREATE KEYSPACE, e.g. {'class': 'SimpleStrategy',
     * 'replication_factor': 1}; "" when replication is NONE */
    char replication_cql[256];
    /* its replica counts: in all (SimpleStrategy's factor, or the datacenters' sum) and in the
     * datacenter that keeps most; 0 when replication is NONE */
    int replicas_total;
    int replicas_most;
    int64_t staging_ttl_s;
} hc_cass_uri_t;

/* Parses uri into *u (zeroed first). HC_ERR_INVALID with the reason in errstr (never a
 * password, never an option's value) on a bad URI; HC_ERR_FATAL when out of memory. On error
 * *u holds nothing to free. */
hc_err_t hc_cass_uri_parse(const char *uri, hc_cass_uri_t *u, char *errstr, size_t errstr_size);
void hc_cass_uri_fini(hc_cass_uri_t *u); /* accepts a zeroed or parsed u */

/* Whether the protocol's reads see every acknowledged write when they and the writes run at
 * `consistency` on a keyspace replicated as replication_json says (the row of `SELECT JSON
 * replication FROM system_schema.keyspaces`: {"replication": {"class": ..., "replication_factor"
 * or one key per datacenter: "N"}}). A read and a write at one level overlap when the level
 * covers more than half of the replicas it counts: the QUORUM levels and ALL always; ONE only
 * when the keyspace keeps one replica in all, LOCAL_ONE only when it keeps at most one in every
 * datacenter (R1's base read at ONE on RF 3 could miss the last write and lose its likes).
 * HC_OK, or HC_ERR_INVALID with the reason in errstr (also when the map cannot be read). */
hc_err_t hc_cass_consistency_check(int consistency, const char *keyspace,
                                   const char *replication_json, char *errstr, size_t errstr_size);

/* ---- the handle ---- */

/* The prepared statements (cassandra.c: cass_cql[] holds their text). */
typedef enum cass_stmt_id {
    CASS_Q_GET,       /* SELECT likes ... WHERE post_id = ? (the readers' query) */
    CASS_Q_BASE,      /* SELECT likes, writetime(likes) ... WHERE post_id = ? (R1) */
    CASS_Q_COUNT,     /* UPDATE hotcount_counts SET likes = ?, updated_at = ? (R4) */
    CASS_Q_STAGE,     /* INSERT INTO hotcount_staging (R2) */
    CASS_Q_STAGED,    /* SELECT payload FROM hotcount_staging (recovery) */
    CASS_Q_CLAIMS,    /* SELECT the claim rows of a (group, topic) (R0, at SERIAL) */
    CASS_Q_DONE,      /* SELECT the done rows of a (group, topic) (R0) */
    CASS_Q_CLAIM,     /* UPDATE hotcount_claims ... IF next_offset = ? AND seq = ? (R3) */
    CASS_Q_CLAIM_NEW, /* INSERT INTO hotcount_claims ... IF NOT EXISTS (R3, HC_OFFSET_NONE) */
    CASS_Q_DONE_SET,  /* UPDATE hotcount_done SET seq = ? (R5) */
    CASS_Q_SCAN,      /* SELECT post_id, likes FROM hotcount_counts (top, foreach) */
    CASS_Q_META,      /* SELECT value FROM hotcount_meta WHERE name = 'incarnation' */
    CASS_Q_TABLES,    /* SELECT table_name, id FROM system_schema.tables (identity) */
    CASS_Q__COUNT
} cass_stmt_id_t;

/* What this handle knows of one partials partition's claim row: as its own last claim left it
 * (complete), or as R0 read it once every open claim was finished. */
typedef struct cass_known {
    int32_t partition;
    int64_t next; /* next_offset, HC_OFFSET_NONE: no row */
    int64_t seq;  /* 0: no row */
    int64_t ts;   /* the claim's write timestamp (us), 0: no row */
} cass_known_t;

/* The count cache (cass_cache.c): post -> the count and timestamp this handle last wrote. */
typedef struct cass_cache_slot {
    uint64_t hash; /* 0: empty */
    size_t off;    /* the id in the arena */
    size_t len;
    int64_t count;
    int64_t ts;
} cass_cache_slot_t;

typedef struct cass_cache {
    cass_cache_slot_t *slots; /* owned; cap a power of two, or 0 */
    size_t cap;
    size_t count;
    char *arena; /* owned */
    size_t used;
    size_t size;
} cass_cache_t;

const cass_cache_slot_t *cass_cache_get(const cass_cache_t *c, const char *id, size_t len);
void cass_cache_put(cass_cache_t *c, const char *id, size_t len, int64_t count, int64_t ts);
void cass_cache_clear(cass_cache_t *c); /* frees; c is then empty and reusable */

typedef struct cass_store {
    hc_store_t base; /* first: hc_store_t * <-> cass_store_t * */
    hc_cass_uri_t uri;
    hc_cql_session_t *session;
    hc_cql_prepared_t *prep[CASS_Q__COUNT]; /* NULL until cass_prepare */
    uint32_t statement_ms;
    int64_t batch_ms;
    /* the claim rows this handle knows, all of one (group, topic); cleared by any error */
    char *known_group;
    char *known_topic;
    cass_known_t *known;
    size_t known_count;
    size_t known_cap;
    cass_cache_t cache;                /* valid with the known claims; cleared with them */
    const hc_cass_test_hooks_t *hooks; /* test-only (cass_seam.h); NULL in the product */
} cass_store_t;

/* One claim row, with its partition's done seq (0: no done row). */
typedef struct cass_claim {
    int32_t partition;
    int64_t next_offset;
    int64_t from_offset;
    int64_t seq;
    int64_t ts;
    uint8_t batch[16];
    int32_t parts;
    int32_t posts;
    int64_t done_seq;
} cass_claim_t;

/* Packed staging parts (docs/CASSANDRA.md R2): version byte 1, the batch's now_ms (8 bytes, big
 * endian), then per post a 2-byte id length, the id, the new count (8 bytes). At most this. */
#define CASS_PART_BYTES 32768
#define CASS_PART_VERSION 1

static inline cass_store_t *cass_store(hc_store_t *st)
{
    return (cass_store_t *)st;
}

/* A driver status as hc_err_t, with "cassandra store: <what>: <driver message>" in errstr. */
hc_err_t cass_err(int status, const hc_cql_error_t *e, const char *what, char *errstr,
                  size_t errstr_size);
/* Prepares every statement once per handle (the tables must exist: HC_ERR_FATAL "run `hotcount
 * init`" otherwise). */
hc_err_t cass_prepare(cass_store_t *cs, char *errstr, size_t errstr_size);
/* A new statement of q at the URI's consistency and the statement bound; NULL: out of memory. */
hc_cql_stmt_t *cass_stmt(cass_store_t *cs, cass_stmt_id_t q);
int64_t cass_now_us(void);
int64_t cass_mono_ms(void);
/* Text Cassandra takes: well-formed UTF-8 (no overlong form, no surrogate, <= U+10FFFF). */
bool cass_is_text(const char *s, size_t len);
void cass_known_clear(cass_store_t *cs);

/* cass_exec.c: requests */
enum { CASS_REPEAT_UNKNOWN = 1, CASS_REPEAT_TRANSIENT = 2, CASS_REPEAT_ALL = 3 };
/* One count write: the post and its new absolute count. */
typedef struct cass_count_write {
    const char *id;
    size_t len;
    int64_t count;
} cass_count_write_t;

void cass_put_be64(uint8_t *p, uint64_t v);
uint64_t cass_get_be64(const uint8_t *p);
/* Statements per request group (the test seam may lower it). */
size_t cass_group_size(const cass_store_t *cs);
/* The test seam: before each request group; after it (true: the apply stops there). */
void cass_before(cass_store_t *cs, hc_cass_step_t step);
bool cass_stopped(cass_store_t *cs, hc_cass_step_t step, size_t *k, char *errstr,
                  size_t errstr_size);
/* Runs stmts[0..n) concurrently; those that failed with a class `repeat` names (not applied:
 * CASS_REPEAT_TRANSIENT, unknown outcome: CASS_REPEAT_UNKNOWN; only idempotent statements)
 * are sent again until they all pass or deadline_ms (monotonic; at most 4 s after the first
 * failure) passes. rows_out optional, n long. Returns the driver's status. */
int cass_run_many(cass_store_t *cs, hc_cql_stmt_t *const *stmts, size_t n, hc_cql_rows_t **rows_out,
                  int repeat, int64_t deadline_ms, hc_cql_error_t *e);
void cass_free_stmts(hc_cql_stmt_t **stmts, size_t n);
void cass_free_rows(hc_cql_rows_t **rows, size_t n); /* and sets each to NULL */
/* R4: w[0..n) at timestamp ts, in groups, repeated as cass_run_many says. k: the apply's
 * request groups for the test seam, NULL in a recovery (no hooks there); b: for on_progress,
 * or NULL. */
hc_err_t cass_write_counts(cass_store_t *cs, const cass_count_write_t *w, size_t n, int64_t ts,
                           int64_t now_ms, int64_t deadline_ms, size_t *k,
                           const hc_store_batch_t *b, char *errstr, size_t errstr_size);
/* R5: the done rows of parts[0..n), seq[i] each, at ts: one single-partition unlogged batch. */
hc_err_t cass_write_done(cass_store_t *cs, const char *group, const char *topic,
                         const int32_t *parts, const int64_t *seq, size_t n, int64_t ts,
                         int64_t deadline_ms, char *errstr, size_t errstr_size);

/* cass_recover.c */
/* Every claim row of (group, topic), read at the serial consistency (which completes any Paxos
 * round in flight), with its done seq: *out malloc'd, the caller frees. */
hc_err_t cass_read_claims(cass_store_t *cs, const char *group, const char *topic,
                          cass_claim_t **out, size_t *count, char *errstr, size_t errstr_size);
/* R0 and the recovery: reads every claim of (group, topic) at the serial consistency and the
 * done rows, finishes each open claim of the partitions listed (all when partitions is NULL),
 * and fills *claims_out (malloc'd, the caller frees) with every claim row as it now stands. */
hc_err_t cass_settle(cass_store_t *cs, const char *group, const char *topic,
                     const int32_t *partitions, size_t count, cass_claim_t **claims_out,
                     size_t *claims_count, char *errstr, size_t errstr_size);
/* cass_commit.c */
hc_err_t cass_apply(hc_store_t *st, const hc_store_batch_t *batch, char *errstr,
                    size_t errstr_size);

/* cass_read.c */
hc_err_t cass_read_offsets(hc_store_t *st, const char *group, const char *topic,
                           const int32_t *partitions, size_t count, int64_t *offsets_out,
                           char *errstr, size_t errstr_size);
hc_err_t cass_get(hc_store_t *st, const char *const *post_ids, const size_t *post_id_lens,
                  size_t count, int64_t *likes_out, char *errstr, size_t errstr_size);
hc_err_t cass_top(hc_store_t *st, size_t n, hc_store_row_t *rows_out, size_t *count_out,
                  char *errstr, size_t errstr_size);
hc_err_t cass_foreach(hc_store_t *st, hc_store_row_fn fn, void *opaque, char *errstr,
                      size_t errstr_size);
hc_err_t cass_identity(hc_store_t *st, char *id_out, size_t id_size, char *errstr,
                       size_t errstr_size);

#endif
