/* Layer: store (private to src/store/dynamodb/ and the test-only src/store/testing/). The
 * DynamoDB backend's handle, its batch and what its files share: dynamodb.c (the descriptor,
 * the URI, open, the tables), ddb_creds.c (credentials), ddb_http.c (requests: signing,
 * retries, back-off, deadlines), ddb_batch.c (a batch, its requests and its marker),
 * ddb_parts.c (the multi-part protocol: staging, parts, roll-forward), ddb_apply.c (apply) and
 * ddb_scan.c (offsets, get, scans, top). The protocol: dynamodb.c's file comment and
 * docs/DYNAMODB.md. */
#ifndef HOTCOUNT_STORE_DDB_IMPL_H
#define HOTCOUNT_STORE_DDB_IMPL_H

#include "store_impl.h"
#include "store_util.h"

#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "ddb_seam.h"
#include "hotcount/clock.h"
#include "hotcount/log.h"
#include "hotcount/timeouts.h"

#define DDB_URI_PREFIX "dynamodb://"
#define DDB_URI_FORM "dynamodb://REGION[/PREFIX][?endpoint=URL&profile=NAME]"
#define DDB_DEFAULT_PREFIX "hotcount_"
#define DDB_TARGET_PREFIX "X-Amz-Target: DynamoDB_20120810."

/* TransactWriteItems' limit; a part holds its deltas, the marker update and the staged part's
 * delete. Partitions: the begin and finish transactions hold one action per offset plus the
 * marker. */
#define TXN_MAX_ACTIONS 100
#define PART_DELTAS (TXN_MAX_ACTIONS - 2)
#define MAX_PARTITIONS (TXN_MAX_ACTIONS - 1)
/* BatchGetItem takes 100 keys, BatchWriteItem 25 puts. */
#define GET_KEYS 100
#define PUT_ITEMS 25

/* A request waits this long for its reply (a 100-action transaction takes tens of ms on
 * DynamoDB, ~0.1 s on the emulator); connecting, this long. */
#define DDB_REQUEST_TIMEOUT_MS 10000
/* ...except a Scan page (1 MB of items): DynamoDB serves one in well under a second, but a
 * DynamoDB-API emulator walks the whole table for every page (moto: seconds on a loaded VM for
 * 20 000 items), and verify must not give up on it. */
#define DDB_SCAN_TIMEOUT_MS 60000
#define DDB_CONNECT_TIMEOUT_MS 5000
/* DynamoDB keeps no order by count, and a top item written in every transaction would put
 * every stage-2 writer of the table on one item (docs/DYNAMODB.md, "top"): top Scans instead,
 * at most this many pages (1 MB each: with post ids of ~20 bytes about 20 000 posts a page, 256
 * read units strongly consistent), the URI's top_pages= otherwise, and refuses a table that
 * needs more. */
#define DDB_TOP_PAGES 16
#define DDB_TOP_PAGES_MAX 100000
/* Retries inside one call: 8 attempts, back-off 50 ms doubling to 2 s, full jitter: at most
 * ~6 s of sleeping before HC_ERR_TRANSIENT hands the decision to the caller; and no new attempt
 * once the call has taken 3 request timeouts (a hung server: 3 attempts, 30 s), so that stage 2
 * sees the outage and backs off on its own schedule. */
#define DDB_ATTEMPTS 8
#define DDB_CALL_TIMEOUTS 3
#define DDB_BACKOFF_BASE_MS 50
#define DDB_BACKOFF_CAP_MS 2000
/* Rounds of "another batch is in flight: finish it, then try ours". */
#define DDB_ROUNDS 8
/* An abandoned staged part (its batch lost the begin race) expires after a week; a batch in
 * flight is finished at the next apply or read_offsets of its group, long before. */
#define STAGING_TTL_S (7 * 24 * 3600)

typedef struct ddb_store {
    hc_store_t base;
    CURL *curl;                  /* owned; one handle, so the connection is reused */
    struct curl_slist *cred_hdr; /* owned: X-Amz-Security-Token, or NULL */
    char *endpoint;              /* owned */
    char *userpwd;               /* owned: "key:secret", wiped on close */
    char sigv4[96];              /* "aws:amz:REGION:dynamodb" */
    char t_counts[256];
    char t_offsets[256];
    char t_staging[256];
    long top_pages; /* the most Scan pages one top reads (DDB_TOP_PAGES, top_pages=) */
    char *resp;     /* owned: the last reply's body */
    size_t resp_len;
    size_t resp_cap;
    const hc_ddb_test_hooks_t *hooks; /* borrowed, NULL in the product (ddb_seam.h) */
    ddb_observer_t *observer;         /* owned, NULL in the product (ddb_seam.h) */
    int64_t batch_ms;            /* cfg->timeouts.store_batch_ms: one apply, every request of it */
    int64_t deadline_ms;         /* while an apply runs, when it must end (hc_now_ms()); else 0 */
    const hc_store_batch_t *cur; /* the batch of the apply that runs, for its on_progress */
    /* A split batch not begun yet whose apply ended early (its deadline, a throttled call):
     * its id, how many of its deltas (in part order) were found clear of int64 and how many
     * of its parts were staged. A retry of the same batch goes on from there. */
    char resume_id[33];
    size_t resume_checked;
    size_t resume_staged;
} ddb_store_t;

/* What a request came back with, beyond HC_OK. */
typedef struct ddb_reply {
    long http;
    char type[96];      /* DynamoDB error type without its namespace, "" on success */
    json_t *body;       /* owned by the caller: the parsed reply (also of an error) */
    bool reasons_valid; /* TransactionCanceledException carried CancellationReasons */
} ddb_reply_t;

/* Two FNV-1a 64-bit hashes with different offset bases: a 128-bit batch id. Not a
 * cryptographic hash: ids of one group and topic differ in their offsets already, the hash of
 * the deltas only tells apart batches of the same range (which stage 2 does not make). */
typedef struct hash2 {
    uint64_t a;
    uint64_t b;
} hash2_t;

/* ---- the batch ---- */

typedef struct ddb_batch {
    const hc_store_batch_t *in;
    size_t *order;           /* owned: delta indices sorted by post id */
    size_t part_deltas;      /* deltas per part */
    size_t parts;            /* number of parts */
    char id[33];             /* 128-bit batch id, hex */
    char *offsets_text;      /* owned: "p:e:n,..." ('-' for HC_OFFSET_NONE) */
    const char *group;       /* marker key's group (borrowed) */
    char topic[256];         /* the offsets' topic */
    char marker_key[300];    /* "<topic>#batch" */
    hc_store_offset_t *offs; /* owned: the offsets (of a marker, for a roll-forward) */
    size_t offset_count;
    int64_t now_ms;
} ddb_batch_t;

/* ---- reads ---- */

/* The marker of (b->group, b->topic) as it is now. */
typedef struct marker {
    bool present;
    char id[33];
    int64_t done;
    int64_t total;
    int64_t now_ms;
    int64_t part_deltas;
    hc_store_offset_t *offs; /* owned */
    size_t offset_count;
} marker_t;

/* BatchGetItem of keys (an array it takes), strongly consistent, unprocessed keys retried; fn
 * is called for each item returned. */
typedef void (*item_fn)(const json_t *item, void *opaque);

typedef struct offsets_visit {
    const char *topic;
    const int32_t *partitions;
    size_t count;
    int64_t *out;
} offsets_visit_t;

/* ---- the multi-part protocol ---- */

typedef enum step {
    STEP_DONE,           /* the batch's finish landed through this call */
    STEP_FINISHED_OTHER, /* someone else finished the batch (or it is gone) */
} step_t;

/* The deltas of part j: of our own batch from memory, else from the staging table. */
typedef struct part_deltas {
    json_t *item; /* owned: the staged item, or NULL for our own batch */
    size_t count;
} part_deltas_t;

typedef struct totals_visit {
    const ddb_batch_t *b;
    int64_t *totals; /* indexed like in->deltas */
} totals_visit_t;

typedef struct get_visit {
    const char *const *ids;
    const size_t *lens;
    size_t from;
    size_t to;
    int64_t *out;
} get_visit_t;

/* Scan of the counts table; fn per item, false stops. */
typedef bool (*scan_fn)(const char *id, size_t len, int64_t likes, void *opaque);

typedef struct each_visit {
    hc_store_row_fn fn;
    void *opaque;
} each_visit_t;

void ddb_wipe_free(char *s);
hc_err_t ddb_load_credentials(ddb_store_t *ds, const char *profile, char *errstr,
                              size_t errstr_size);
ddb_store_t *ddb_store(hc_store_t *st);
CURLcode ddb_curl_init(void);
json_t *ddb_av_s(const char *s, size_t len);
json_t *ddb_av_n(int64_t n);
bool ddb_av_get_n(const json_t *item, const char *name, int64_t *out);
const char *ddb_av_get_s(const json_t *item, const char *name, size_t *len);
uint64_t ddb_rand64(void);
void ddb_hash_bytes(hash2_t *h, const void *data, size_t len);
void ddb_hash_i64(hash2_t *h, int64_t v);
void ddb_token_new(char out[33]);
size_t ddb_on_body(char *data, size_t size, size_t nmemb, void *opaque);
void ddb_backoff(const ddb_store_t *ds, int attempt);
void ddb_progress(const ddb_store_t *ds);
hc_err_t ddb_call(ddb_store_t *ds, const char *op, json_t *req, ddb_reply_t *rep, char *errstr,
                  size_t errstr_size);
void ddb_batch_fini(ddb_batch_t *b);
void ddb_marker_key_of(ddb_batch_t *b, const char *group, const char *topic);
hc_err_t ddb_batch_init(ddb_store_t *ds, ddb_batch_t *b, const hc_store_batch_t *in, char *errstr,
                        size_t errstr_size);
json_t *ddb_offset_item_key(const char *group, const char *topic, int32_t partition);
json_t *ddb_marker_item_key(const ddb_batch_t *b);
json_t *ddb_count_update(const ddb_store_t *ds, const char *post_id, size_t len, int64_t delta,
                         int64_t now_ms, const int64_t *old);
bool ddb_count_overflows(int64_t old, int64_t delta);
hc_err_t ddb_refuse_delta(const hc_store_batch_t *in, size_t i, const char *likes, char *errstr,
                          size_t errstr_size);
json_t *ddb_offset_update(const ddb_store_t *ds, const char *group, const char *topic,
                          const hc_store_offset_t *off);
json_t *ddb_offset_check(const ddb_store_t *ds, const char *group, const char *topic,
                         const hc_store_offset_t *off);
long ddb_failed_action(const ddb_reply_t *rep);
bool ddb_action_failed(const ddb_reply_t *rep, size_t i);
const json_t *ddb_reason_item(const ddb_reply_t *rep, size_t i);
const char *ddb_item_likes(const json_t *item);
bool ddb_is_cancelled(hc_err_t err, const ddb_reply_t *rep);
hc_err_t ddb_transact(ddb_store_t *ds, json_t *actions, size_t want, bool is_part, ddb_reply_t *rep,
                      char *errstr, size_t errstr_size);
void ddb_marker_fini(marker_t *mk);
hc_err_t ddb_marker_read(ddb_store_t *ds, const ddb_batch_t *b, marker_t *mk, char *errstr,
                         size_t errstr_size);
hc_err_t ddb_read_totals_chunk(ddb_store_t *ds, const ddb_batch_t *b, size_t from, size_t to,
                               int64_t *totals, char *errstr, size_t errstr_size);
hc_err_t ddb_read_totals(ddb_store_t *ds, const ddb_batch_t *b, int64_t *totals, char *errstr,
                         size_t errstr_size);
hc_err_t ddb_run_parts(ddb_store_t *ds, ddb_batch_t *m, int64_t from, step_t *step, char *errstr,
                       size_t errstr_size);
hc_err_t ddb_roll_forward(ddb_store_t *ds, const ddb_batch_t *ours, marker_t *mk, char *errstr,
                          size_t errstr_size);
hc_err_t ddb_stage_parts(ddb_store_t *ds, const ddb_batch_t *b, size_t *staged, char *errstr,
                         size_t errstr_size);
hc_err_t ddb_apply(hc_store_t *st, const hc_store_batch_t *in, char *errstr, size_t errstr_size);
hc_err_t ddb_batch_get(ddb_store_t *ds, const char *table, json_t *keys, item_fn fn, void *opaque,
                       char *errstr, size_t errstr_size);
hc_err_t ddb_offsets_read(ddb_store_t *ds, const char *group, const char *topic,
                          const int32_t *partitions, size_t count, int64_t *out, char *errstr,
                          size_t errstr_size);
hc_err_t ddb_read_offsets(hc_store_t *st, const char *group, const char *topic,
                          const int32_t *partitions, size_t count, int64_t *offsets_out,
                          char *errstr, size_t errstr_size);
hc_err_t ddb_get(hc_store_t *st, const char *const *post_ids, const size_t *post_id_lens,
                 size_t count, int64_t *likes_out, char *errstr, size_t errstr_size);
hc_err_t ddb_top(hc_store_t *st, size_t n, hc_store_row_t *rows_out, size_t *count_out,
                 char *errstr, size_t errstr_size);
hc_err_t ddb_foreach(hc_store_t *st, hc_store_row_fn fn, void *opaque, char *errstr,
                     size_t errstr_size);

#endif
