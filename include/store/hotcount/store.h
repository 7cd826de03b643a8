/* Layer: store. The store: where counts and stage 2's consumed offsets live, side by side.
 *
 * The only door to the backends (src/store/<backend>/, each one descriptor behind the seam in
 * src/store/store_impl.h, listed once in HC_STORE_BACKENDS). The URI's scheme picks the backend;
 * hc_store_facts() lists them all (`hotcount --help` shows their URI forms).
 *
 * The one write is hc_store_apply: a batch of per-post deltas plus, for every partition the
 * batch consumed, the offset it started from (expected) and the next offset to read. It is
 * atomic and conditional: if any partition's stored next_offset differs from `expected`
 * (HC_OFFSET_NONE: no row may exist) the batch changes nothing and returns HC_ERR_CONFLICT.
 *
 * A store handle is used by one thread at a time. Errors: HC_ERR_TRANSIENT (outage, busy:
 * retry the same call later; nothing changed), HC_ERR_CONFLICT (see above), HC_ERR_FATAL
 * (schema missing or broken, an error that a retry cannot fix), HC_ERR_INVALID (bad arguments,
 * a bad URI), HC_ERR_RECORD (one post of the batch is refused, see hc_store_apply). The layouts
 * of the backends: docs/FORMATS.md, "Store layout". */
#ifndef HOTCOUNT_STORE_H
#define HOTCOUNT_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hotcount/config.h"
#include "hotcount/err.h"
#include "hotcount/event.h"
#include "hotcount/offset.h"

typedef struct hc_store hc_store_t;
struct hc_store_ops; /* the backends' function table: src/store/store_impl.h */

typedef struct hc_store_offset {
    int32_t partition;
    int64_t expected; /* stored next_offset the batch started from, or HC_OFFSET_NONE */
    int64_t next;     /* next offset to read once the batch is applied */
} hc_store_offset_t;

typedef struct hc_store_delta {
    const char *post_id; /* borrowed */
    size_t post_id_len;
    int64_t delta;
} hc_store_delta_t;

typedef struct hc_store_batch {
    const char *group; /* consumer group that owns the offsets */
    const char *topic; /* the topic the offsets belong to */
    const hc_store_offset_t *offsets;
    size_t offset_count;
    const hc_store_delta_t *deltas; /* each post at most once */
    size_t delta_count;
    int64_t now_ms; /* updated_at for the written rows */
    /* Optional, delta_count long: on HC_OK, deltas[i]'s post's total as this batch left it (the
     * changelog publishes these; reading them back later would cost a round trip). NULL: not
     * wanted. Valid only on HC_OK. */
    int64_t *totals_out;
    /* Optional: on HC_ERR_RECORD, the index in deltas of the post the store refused (the first
     * it found). NULL: not wanted. Valid only on HC_ERR_RECORD. */
    size_t *refused_out;
    /* Optional: called on the caller's thread each time a batch that takes several requests or
     * statements got one of them through (a staged part, a committed part, a chunk's upsert),
     * so that a caller whose watchdog counts silence as a hang sees a slow store that still
     * moves as alive. NULL: not wanted. Never called after hc_store_apply returned. */
    void (*on_progress)(void *opaque);
    void *progress_opaque;
} hc_store_batch_t;

typedef struct hc_store_row {
    char post_id[HC_POST_ID_MAX + 1];
    size_t post_id_len;
    int64_t likes;
} hc_store_row_t;

/* Opens cfg->store. On error *stp is NULL and errstr says why (HC_ERR_INVALID for a bad URI,
 * HC_ERR_TRANSIENT when the server is unreachable). */
hc_err_t hc_store_open(const hc_config_t *cfg, hc_store_t **stp, char *errstr, size_t errstr_size);

/* The facts of every backend of this build (name, schemes, URI form, password rule, timing),
 * NULL-terminated, static: what hc_config_init is handed so that the configuration checks the
 * `store` key and derives the store's timeouts without knowing any backend. */
const hc_store_facts_t *const *hc_store_facts(void);
void hc_store_close(hc_store_t *st); /* accepts NULL */

/* hc_store_open over the given ops table instead of the one cfg->store's scheme picks: the seam
 * through which a test runs the stages on a store of its own (tests/support/fake_store.c). The
 * handle behaves like any other: every call below checks its arguments, then reaches ops. */
hc_err_t hc_store_open_ops(const struct hc_store_ops *ops, const hc_config_t *cfg, hc_store_t **stp,
                           char *errstr, size_t errstr_size);

/* "sqlite", "redis" or "postgresql". */
const char *hc_store_kind(const hc_store_t *st);

/* Creates the schema if absent; safe to repeat, also from several handles at once. The other
 * calls return HC_ERR_FATAL ("run `hotcount init`") while the schema is missing. */
hc_err_t hc_store_init_schema(hc_store_t *st, char *errstr, size_t errstr_size);

/* offsets_out[i] = stored next_offset of (group, topic, partitions[i]) or HC_OFFSET_NONE. */
hc_err_t hc_store_read_offsets(hc_store_t *st, const char *group, const char *topic,
                               const int32_t *partitions, size_t count, int64_t *offsets_out,
                               char *errstr, size_t errstr_size);

/* Longest identity hc_store_identity writes, its NUL included. */
#define HC_STORE_IDENTITY_MAX 128

/* Writes into id_out (id_size >= 1) a short string naming the store's current incarnation, ""
 * when the backend has none: it changes when the data may have been lost or replaced under the
 * same address, so stage 2 can notice a store that forgot before any traffic shows it.
 * Redis: the server's run_id (INFO server: new at every restart, other on another server after
 * a failover). PostgreSQL: pg_postmaster_start_time() (new at every restart; the
 * system_identifier of pg_control_system() is left out: reading it needs the pg_monitor role
 * on a locked-down server). SQLite: the database file's device and inode (a file replaced by a
 * restore or a delete). DynamoDB: none (stage 2's check of its offsets alone covers a table
 * that was re-created; DescribeTable would be a second call every check). Secret-free: no URI,
 * no password. */
hc_err_t hc_store_identity(hc_store_t *st, char *id_out, size_t id_size, char *errstr,
                           size_t errstr_size);

/* See the file comment. HC_ERR_INVALID, before anything is touched, for a batch that no store
 * could apply safely: a post_id outside 1..HC_POST_ID_MAX bytes, a partition listed twice, an
 * offset that would move backwards (next < expected) or is negative, offsets without group or
 * topic. A batch with offsets and no deltas is valid (it moves the offsets only).
 * HC_ERR_TRANSIENT is safe to retry with the same batch even when the failure was an
 * ambiguous commit: if the first attempt did land, the retry's compare-and-set fails with
 * HC_ERR_CONFLICT instead of counting twice.
 * HC_ERR_RECORD: the batch changed nothing because of one post, *batch->refused_out its index in
 * deltas: its count would leave int64 (every backend refuses that instead of wrapping it or
 * changing its type; Redis, whose scripts compute in doubles, refuses a count whose magnitude
 * would pass 9e18), or the backend cannot hold its value or id (a count key of another type
 * or not an integer on Redis; on PostgreSQL an id with a NUL byte or invalid UTF-8, which no
 * text column holds). Applying the same batch again fails the same way: the caller sets that
 * post aside (stage 2: dead-letters its partials) and applies the batch without it (which may
 * then lose the compare-and-set, as any batch may). */
hc_err_t hc_store_apply(hc_store_t *st, const hc_store_batch_t *batch, char *errstr,
                        size_t errstr_size);

/* likes_out[i] = count of post_ids[i] (0 for an unknown post). */
hc_err_t hc_store_get(hc_store_t *st, const char *const *post_ids, const size_t *post_id_lens,
                      size_t count, int64_t *likes_out, char *errstr, size_t errstr_size);

/* The most rows one top returns: serve.top.max's own bound (a top reads an index of about that
 * many entries, issue 25; `hotcount top -n` and /v1/top stop at serve.top.max). */
#define HC_STORE_TOP_MAX 10000

/* The n largest counts, largest first (ties by post_id ascending); *rows_out has room for n.
 * HC_ERR_INVALID for n past HC_STORE_TOP_MAX. */
hc_err_t hc_store_top(hc_store_t *st, size_t n, hc_store_row_t *rows_out, size_t *count_out,
                      char *errstr, size_t errstr_size);

/* Calls fn once per stored count (any order), from one consistent snapshot. fn returns false to
 * stop early; it must not call back into the same handle (post_id is only valid during the
 * call). */
typedef bool (*hc_store_row_fn)(const char *post_id, size_t post_id_len, int64_t likes,
                                void *opaque);
hc_err_t hc_store_foreach(hc_store_t *st, hc_store_row_fn fn, void *opaque, char *errstr,
                          size_t errstr_size);

#endif
