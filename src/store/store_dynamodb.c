/* The DynamoDB store: "dynamodb://REGION[/PREFIX][?endpoint=URL&profile=NAME]".
 *
 * REGION empty: AWS_REGION, then AWS_DEFAULT_REGION. PREFIX (default "hotcount_") names the three
 * tables PREFIXcounts, PREFIXoffsets, PREFIXstaging. endpoint overrides
 * https://dynamodb.REGION.amazonaws.com (a local DynamoDB-API server). Credentials: the
 * environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN), else the profile
 * (profile=, AWS_PROFILE, "default") of AWS_SHARED_CREDENTIALS_FILE or ~/.aws/credentials. No
 * message of this file ever contains a credential or the URI past its scheme.
 *
 * Layout (docs/DYNAMODB.md):
 *   PREFIXcounts   post_id (S, hash key), likes (N), updated_at (N, ms since the epoch)
 *   PREFIXoffsets  group (S, hash key), key (S, range key):
 *                    "<topic>/<partition>"  next_offset (N): the next offset to read
 *                    "<topic>#batch"        the progress marker of a split batch in flight
 *   PREFIXstaging  batch (S, hash key), part (N, range key): the parts of a split batch
 *
 * apply. A batch whose deltas and offsets fit one TransactWriteItems (100 actions) is one
 * transaction: each offset updated on condition that it equals `expected`, the marker checked
 * absent, each count ADDed. A bigger batch runs the multi-part protocol of docs/DYNAMODB.md:
 *   0. its deltas sorted by post id and cut into parts of PART_DELTAS: the same batch always
 *      gives the same parts; its id hashes (group, topic, offsets, deltas);
 *   1. stage: every part written to the staging table (idempotent puts);
 *   2. begin: one transaction checks every offset equals `expected` and puts the marker
 *      {batch_id, parts_total, parts_done = 0, the offsets, now_ms} where none exists. From here
 *      on the batch is decided: whoever finds the marker finishes it, from the staged parts;
 *   3. parts: part j is one transaction: its count updates, the marker's parts_done moved from
 *      j to j + 1 on condition batch_id and parts_done = j, the staged part deleted;
 *   4. finish: one transaction moves every offset and deletes the marker, on condition that
 *      parts_done = parts_total.
 * A marker of another batch is rolled forward (3 and 4 from the staging table) before an apply
 * does anything else on that group and topic, so a new owner finishes a dead owner's batch
 * whatever it re-reads (read_offsets leaves it alone: its offsets have not moved). A zombie's part
 * fails its condition. Offsets move only in 4. Each request carries a ClientRequestToken fixed for
 * its retries.
 *
 * Reads: read_offsets is BatchGetItem (strongly consistent); get is BatchGetItem; top and
 * foreach Scan the counts table (strongly consistent pages; each page as of its own moment, as
 * Redis' SCAN: consistent while nothing writes). A Scan reads the whole table: about one read
 * unit per 4 KB of items, so `top` on 10 million posts reads ~1 GB and costs ~250 000 units.
 *
 * Errors: connection failures, timeouts, 5xx, HTTP 429, throttling
 * (ProvisionedThroughputExceeded, Throttling, RequestLimitExceeded, a cancelled transaction whose
 * reasons are throttling) and transaction conflicts are retried here with capped exponential
 * back-off and full jitter, then HC_ERR_TRANSIENT. One apply, every request and back-off of it
 * included, ends by cfg->timeouts.store_batch_ms: past that it returns HC_ERR_TRANSIENT where it
 * stands (a request cut short is an ambiguous one), and the next apply of the group rolls the
 * begun batch forward from its marker, so a batch of thousands of slow requests is finished over
 * several applies instead of holding stage 2 in one call. batch->on_progress is called after
 * each write request that got through (a staged BatchWriteItem, the begin, each part, including
 * a rolled-forward batch's, the finish, a single transaction). A missing table is HC_ERR_FATAL
 * ("run hotcount init"); other 4xx are HC_ERR_FATAL with DynamoDB's error type and message. A
 * delta that would take a count past int64 (DynamoDB's numbers would hold it) is HC_ERR_RECORD
 * naming the post: each count update is conditional on staying inside int64, and a split batch
 * checks its counts before it begins (docs/DYNAMODB.md, "Counts past int64"). */
#include "store_dynamodb.h"
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
    char *resp; /* owned: the last reply's body */
    size_t resp_len;
    size_t resp_cap;
    const hc_ddb_test_hooks_t *hooks; /* borrowed, NULL in the product */
    hc_ddb_usage_t usage;
    size_t marker_bytes;         /* the size of the marker this handle last wrote or read */
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

static ddb_store_t *ddb_store(hc_store_t *st)
{
    return (ddb_store_t *)st;
}

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_global_rc;

static void curl_global(void)
{
    curl_global_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

/* ---- JSON helpers ---- */

static json_t *av_s(const char *s, size_t len)
{
    return json_pack("{s:s%}", "S", s, len);
}

static json_t *av_n(int64_t n)
{
    char buf[32];

    snprintf(buf, sizeof(buf), "%" PRId64, n);
    return json_pack("{s:s}", "N", buf);
}

static bool av_get_n(const json_t *item, const char *name, int64_t *out)
{
    const char *s = json_string_value(json_object_get(json_object_get(item, name), "N"));
    char *end;
    long long v;

    if (s == NULL) {
        return false;
    }
    errno = 0;
    v = strtoll(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0') {
        return false;
    }
    *out = (int64_t)v;
    return true;
}

static const char *av_get_s(const json_t *item, const char *name, size_t *len)
{
    const json_t *s = json_object_get(json_object_get(item, name), "S");

    if (!json_is_string(s)) {
        return NULL;
    }
    if (len != NULL) {
        *len = json_string_length(s);
    }
    return json_string_value(s);
}

/* ---- random numbers and hashes ---- */

static uint64_t rand64(void)
{
    uint64_t v = 0;

    if (getrandom(&v, sizeof(v), 0) != (ssize_t)sizeof(v)) {
        v = (uint64_t)hc_now_ms() * 0x9e3779b97f4a7c15ULL ^ (uint64_t)(uintptr_t)&v;
    }
    return v;
}

/* Two FNV-1a 64-bit hashes with different offset bases: a 128-bit batch id. Not a
 * cryptographic hash: ids of one group and topic differ in their offsets already, the hash of
 * the deltas only tells apart batches of the same range (which stage 2 does not make). */
typedef struct hash2 {
    uint64_t a;
    uint64_t b;
} hash2_t;

static void hash_bytes(hash2_t *h, const void *data, size_t len)
{
    h->a = hc_store_fnv1a64(h->a, data, len);
    h->b = hc_store_fnv1a64(h->b, data, len);
}

static void hash_i64(hash2_t *h, int64_t v)
{
    hash_bytes(h, &v, sizeof(v));
}

static void token_new(char out[33])
{
    snprintf(out, 33, "%016" PRIx64 "%016" PRIx64, rand64(), rand64());
}

/* ---- HTTP ---- */

static size_t on_body(char *data, size_t size, size_t nmemb, void *opaque)
{
    ddb_store_t *ds = opaque;
    size_t n = size * nmemb;
    size_t cap;
    char *p;

    if (ds->resp_len + n + 1 > ds->resp_cap) {
        cap = ds->resp_cap == 0 ? 16384 : ds->resp_cap;
        while (cap < ds->resp_len + n + 1) {
            cap *= 2;
        }
        p = realloc(ds->resp, cap);
        if (p == NULL) {
            return 0; /* curl reports CURLE_WRITE_ERROR */
        }
        ds->resp = p;
        ds->resp_cap = cap;
    }
    memcpy(ds->resp + ds->resp_len, data, n);
    ds->resp_len += n;
    ds->resp[ds->resp_len] = '\0';
    return n;
}

static bool retryable_type(const char *type)
{
    static const char *const types[] = {
        "ProvisionedThroughputExceededException",
        "ThrottlingException",
        "RequestLimitExceeded",
        "InternalServerError",
        "ServiceUnavailable",
        "TransactionInProgressException",
        "LimitExceededException",
        "Throttling",
        "TooManyRequestsException",
        "ReplicatedWriteConflictException",
    };
    size_t i;

    for (i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
        if (strcmp(type, types[i]) == 0) {
            return true;
        }
    }
    return false;
}

/* A TransactionCanceledException whose reasons include TransactionConflict or throttling is
 * "not now", not a lost condition: retry the same request. */
static bool cancel_is_transient(const json_t *body)
{
    const json_t *reasons = json_object_get(body, "CancellationReasons");
    const json_t *r;
    const char *code;
    size_t i;

    json_array_foreach(reasons, i, r)
    {
        code = json_string_value(json_object_get(r, "Code"));
        if (code != NULL &&
            (strcmp(code, "TransactionConflict") == 0 || strcmp(code, "ThrottlingError") == 0 ||
             strcmp(code, "ProvisionedThroughputExceeded") == 0)) {
            return true;
        }
    }
    return false;
}

/* What is left of the running apply's store_batch_ms, or INT64_MAX outside an apply. */
static int64_t time_left(const ddb_store_t *ds)
{
    return ds->deadline_ms > 0 ? ds->deadline_ms - hc_now_ms() : INT64_MAX;
}

/* Full jitter over a capped exponential, never past the apply's deadline. */
static void backoff(const ddb_store_t *ds, int attempt)
{
    int64_t cap = DDB_BACKOFF_BASE_MS << (attempt < 6 ? attempt : 6);
    int64_t ms;
    int64_t left = time_left(ds);

    if (cap > DDB_BACKOFF_CAP_MS) {
        cap = DDB_BACKOFF_CAP_MS;
    }
    ms = (int64_t)(rand64() % (uint64_t)(cap + 1));
    hc_sleep_ms(ms < left ? ms : left > 0 ? left : 0);
}

/* A write request of the running apply got through: tell its caller (hotcount/store.h). */
static void progress(const ddb_store_t *ds)
{
    if (ds->cur != NULL && ds->cur->on_progress != NULL) {
        ds->cur->on_progress(ds->cur->progress_opaque);
    }
}

/* HC_ERR_TRANSIENT once the running apply has used its store_batch_ms. */
static hc_err_t past_deadline(const ddb_store_t *ds, const char *op, char *errstr,
                              size_t errstr_size)
{
    if (time_left(ds) > 0) {
        return HC_OK;
    }
    hc_errstr_set(errstr, errstr_size,
                  "dynamodb %s: the batch took longer than store_batch_ms (%" PRId64
                  " ms); a begun batch goes on from its marker at the next apply",
                  op, ds->batch_ms);
    return HC_ERR_TRANSIENT;
}

/* ---- cost: capacity units by DynamoDB's published rules (docs/DYNAMODB.md, "Cost") ----
 *
 * An item's size is the sum of its attribute names' and values' sizes: a string its UTF-8
 * bytes, a number 1 byte per two significant digits plus 1, a list or map 3 bytes plus its
 * elements plus 1 byte each. A write costs 1 unit per KB of the item (the larger of before and
 * after), rounded up, 2 in a transaction (a ConditionCheck priced as such a write: the docs say
 * less, see docs/DYNAMODB.md); a strongly consistent read 1 unit per 4 KB. */

static size_t n_text_bytes(const char *s)
{
    size_t digits = 0;
    size_t zeros = 0; /* trailing zeros seen so far, dropped unless a digit follows */
    bool lead = true;

    for (; s != NULL && *s != '\0'; s++) {
        if (*s < '0' || *s > '9') {
            continue;
        }
        if (*s == '0') {
            if (!lead) {
                zeros++;
            }
            continue;
        }
        lead = false;
        digits += zeros + 1;
        zeros = 0;
    }
    return (digits + 1) / 2 + 1;
}

static size_t av_bytes(const json_t *v)
{
    const char *type;
    json_t *inner;
    size_t n = 0;

    json_object_foreach((json_t *)v, type, inner)
    {
        if (strcmp(type, "S") == 0) {
            n += json_string_length(inner);
        } else if (strcmp(type, "N") == 0) {
            n += n_text_bytes(json_string_value(inner));
        } else if (strcmp(type, "L") == 0) {
            const json_t *e;
            size_t i;
            n += 3;
            json_array_foreach(inner, i, e)
            {
                n += av_bytes(e) + 1;
            }
        } else if (strcmp(type, "M") == 0) {
            const char *k;
            json_t *e;
            n += 3;
            json_object_foreach(inner, k, e)
            {
                n += strlen(k) + av_bytes(e) + 1;
            }
        } else {
            n += 1; /* BOOL, NULL; hotcount writes no binary */
        }
    }
    return n;
}

static size_t item_bytes(const json_t *item)
{
    const char *name;
    json_t *v;
    size_t n = 0;

    json_object_foreach((json_t *)item, name, v)
    {
        n += strlen(name) + av_bytes(v);
    }
    return n;
}

/* Units of an item of `bytes` per `unit` bytes, rounded up; at least 1. */
static double units_of(size_t bytes, size_t unit)
{
    return bytes == 0 ? 1.0 : (double)((bytes + unit - 1) / unit);
}

/* Bounds of what an update leaves beside the key: a count's likes (an int64: 19 digits) and
 * updated_at (ms since the epoch: 13 digits); an offset's next_offset. */
#define COUNT_REST_BYTES (5 + 11 + 10 + 8)
#define OFFSET_REST_BYTES (11 + 11)

/* The size of the item a transaction's action writes or checks, by the layout. A part's staged
 * item holds exactly the ids and deltas of that transaction's count updates. */
static size_t action_bytes(const ddb_store_t *ds, const char *kind, const json_t *a,
                           size_t staged_bytes)
{
    const char *table = json_string_value(json_object_get(a, "TableName"));
    const json_t *key = json_object_get(a, "Key");
    const char *k;

    if (strcmp(kind, "Put") == 0) {
        return item_bytes(json_object_get(a, "Item"));
    }
    if (table == NULL) {
        return 0;
    }
    if (strcmp(table, ds->t_counts) == 0) {
        return item_bytes(key) + COUNT_REST_BYTES;
    }
    if (strcmp(table, ds->t_staging) == 0) {
        return staged_bytes;
    }
    k = av_get_s(key, "key", NULL);
    if (k != NULL && strlen(k) > 6 && strcmp(k + strlen(k) - 6, "#batch") == 0) {
        /* the marker: a ConditionCheck that it is absent finds no item (the minimum) */
        return strcmp(kind, "ConditionCheck") == 0 ? 0 : ds->marker_bytes;
    }
    return item_bytes(key) + OFFSET_REST_BYTES;
}

/* Which table's tally an action's units go to. */
static double *tally_of(ddb_store_t *ds, const json_t *a)
{
    const char *table = json_string_value(json_object_get(a, "TableName"));

    if (table != NULL && strcmp(table, ds->t_counts) == 0) {
        return &ds->usage.write_units_counts;
    }
    if (table != NULL && strcmp(table, ds->t_staging) == 0) {
        return &ds->usage.write_units_staging;
    }
    return &ds->usage.write_units_offsets;
}

static void account_transaction(ddb_store_t *ds, const json_t *req, bool committed)
{
    const json_t *acts = json_object_get(req, "TransactItems");
    const json_t *e;
    size_t staged = 0;
    size_t i;

    /* A part's staged item: its batch and part (the Delete's key), the ids and the deltas of
     * the count updates, expires_at. */
    json_array_foreach(acts, i, e)
    {
        const json_t *a = json_object_get(e, "Update");
        const json_t *d = json_object_get(e, "Delete");
        const char *t = json_string_value(json_object_get(a != NULL ? a : d, "TableName"));
        if (a != NULL && t != NULL && strcmp(t, ds->t_counts) == 0) {
            staged +=
                av_bytes(json_object_get(json_object_get(a, "Key"), "post_id")) + 1 +
                av_bytes(json_object_get(json_object_get(a, "ExpressionAttributeValues"), ":d")) +
                1;
        } else if (d != NULL && t != NULL && strcmp(t, ds->t_staging) == 0) {
            staged += item_bytes(json_object_get(d, "Key")) + 3 + 3 + 6 + 3 + 10 + 6;
        }
    }
    json_array_foreach(acts, i, e)
    {
        const char *kind;
        json_t *a;
        json_object_foreach((json_t *)e, kind, a)
        {
            double u = 2.0 * units_of(action_bytes(ds, kind, a, staged), 1024);
            if (!committed) {
                ds->usage.write_units_cancelled += u;
                continue;
            }
            *tally_of(ds, a) += u;
            ds->usage.write_units += u;
            if (strcmp(kind, "Put") == 0 &&
                strcmp(json_string_value(json_object_get(a, "TableName")), ds->t_offsets) == 0) {
                ds->marker_bytes = item_bytes(json_object_get(a, "Item"));
            }
        }
    }
    if (committed) {
        ds->usage.transactions++;
    } else {
        ds->usage.cancelled++;
    }
}

/* What an answered request cost (the rules above) and what the server said it cost. */
static void account(ddb_store_t *ds, const char *op, const json_t *req, const json_t *body, bool ok)
{
    const json_t *cc = json_object_get(body, "ConsumedCapacity");
    const json_t *e;
    size_t i;

    bool writes = strcmp(op, "TransactWriteItems") == 0 || strcmp(op, "BatchWriteItem") == 0;
    uint64_t *replies =
        writes ? &ds->usage.reported_write_replies : &ds->usage.reported_read_replies;
    double *units = writes ? &ds->usage.reported_write_units : &ds->usage.reported_read_units;

    ds->usage.requests++;
    ds->usage.write_requests += writes;
    if (json_is_object(cc) && json_object_get(cc, "CapacityUnits") != NULL) {
        (*replies)++;
        *units += json_number_value(json_object_get(cc, "CapacityUnits"));
    } else if (json_is_array(cc) && json_array_size(cc) > 0) {
        (*replies)++;
        json_array_foreach(cc, i, e)
        {
            *units += json_number_value(json_object_get(e, "CapacityUnits"));
        }
    }
    if (strcmp(op, "TransactWriteItems") == 0) {
        account_transaction(ds, req, ok);
    } else if (!ok) {
        return;
    } else if (strcmp(op, "BatchWriteItem") == 0) {
        const json_t *puts = json_object_get(json_object_get(req, "RequestItems"), ds->t_staging);
        const json_t *left =
            json_object_get(json_object_get(body, "UnprocessedItems"), ds->t_staging);
        double u = 0;
        json_array_foreach(puts, i, e)
        {
            u += units_of(item_bytes(json_object_get(json_object_get(e, "PutRequest"), "Item")),
                          1024);
        }
        /* unprocessed puts are sent (and charged) again */
        json_array_foreach(left, i, e)
        {
            u -= units_of(item_bytes(json_object_get(json_object_get(e, "PutRequest"), "Item")),
                          1024);
        }
        ds->usage.write_units += u;
        ds->usage.write_units_staging += u;
    } else if (strcmp(op, "GetItem") == 0) {
        const json_t *item = json_object_get(body, "Item");
        ds->usage.read_units += units_of(item_bytes(item), 4096);
        if (json_object_get(item, "batch_id") != NULL) {
            ds->marker_bytes = item_bytes(item);
        }
    } else if (strcmp(op, "BatchGetItem") == 0) {
        const char *table;
        json_t *ask;
        json_object_foreach(json_object_get((json_t *)req, "RequestItems"), table, ask)
        {
            /* each key at least one unit, found or not; our items are all under 4 KB */
            ds->usage.read_units += (double)json_array_size(json_object_get(ask, "Keys"));
            ds->usage.read_units -= (double)json_array_size(json_object_get(
                json_object_get(json_object_get(body, "UnprocessedKeys"), table), "Keys"));
        }
    } else if (strcmp(op, "Scan") == 0) {
        size_t bytes = 0;
        json_array_foreach(json_object_get(body, "Items"), i, e)
        {
            bytes += item_bytes(e);
        }
        ds->usage.read_units += units_of(bytes, 4096);
    }
}

void hc_store_dynamodb_usage(hc_store_t *st, hc_ddb_usage_t *out)
{
    *out = ddb_store(st)->usage;
}

/* Sends one DynamoDB request (op, body req), retrying what may succeed later. HC_OK: 2xx, reply
 * parsed into rep->body. HC_ERR_FATAL with rep->type set: DynamoDB refused it (the caller may
 * recognise the type, e.g. a cancelled transaction or a missing table); rep->body holds the
 * error. HC_ERR_TRANSIENT: no answer worth having after DDB_ATTEMPTS. rep->body may be set in
 * every case and is the caller's to json_decref. */
static hc_err_t ddb_call(ddb_store_t *ds, const char *op, json_t *req, ddb_reply_t *rep,
                         char *errstr, size_t errstr_size)
{
    char target[96];
    char curl_err[CURL_ERROR_SIZE];
    struct curl_slist *hdrs = NULL;
    struct curl_slist *h;
    char *payload;
    CURLcode rc = CURLE_OK;
    const char *type;
    const char *msg;
    hc_err_t err = HC_ERR_TRANSIENT;
    int64_t timeout_ms;
    int64_t t0;
    int attempt;

    memset(rep, 0, sizeof(*rep));
    if (strncmp(op, "Batch", 5) == 0 || strcmp(op, "GetItem") == 0 || strcmp(op, "Scan") == 0) {
        json_object_set_new(req, "ReturnConsumedCapacity", json_string("TOTAL"));
    }
    payload = json_dumps(req, JSON_COMPACT);
    if (payload == NULL) {
        hc_errstr_set(errstr, errstr_size, "dynamodb %s: cannot encode the request", op);
        return HC_ERR_FATAL;
    }
    snprintf(target, sizeof(target), DDB_TARGET_PREFIX "%s", op);
    h = curl_slist_append(NULL, "Content-Type: application/x-amz-json-1.0");
    hdrs = h;
    if (h != NULL) {
        h = curl_slist_append(hdrs, target);
    }
    if (h != NULL && ds->cred_hdr != NULL) {
        h = curl_slist_append(hdrs, ds->cred_hdr->data);
    }
    if (h == NULL) {
        curl_slist_free_all(hdrs);
        free(payload);
        hc_errstr_set(errstr, errstr_size, "dynamodb %s: out of memory", op);
        return HC_ERR_FATAL;
    }
    curl_easy_setopt(ds->curl, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(ds->curl, CURLOPT_POSTFIELDS, payload);
    curl_easy_setopt(ds->curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(payload));
    curl_easy_setopt(ds->curl, CURLOPT_ERRORBUFFER, curl_err);
    timeout_ms = strcmp(op, "Scan") == 0 ? DDB_SCAN_TIMEOUT_MS : DDB_REQUEST_TIMEOUT_MS;

    t0 = hc_now_ms();
    for (attempt = 0; attempt < DDB_ATTEMPTS; attempt++) {
        if (attempt > 0) {
            if (hc_now_ms() - t0 >= DDB_CALL_TIMEOUTS * timeout_ms) {
                break;
            }
            backoff(ds, attempt);
        }
        /* No attempt starts past the apply's deadline, and none outlives it. */
        int64_t left = time_left(ds);
        if (left <= 0) {
            err = past_deadline(ds, op, errstr, errstr_size);
            break;
        }
        curl_easy_setopt(ds->curl, CURLOPT_TIMEOUT_MS,
                         (long)(left < timeout_ms ? left : timeout_ms));
        json_decref(rep->body);
        rep->body = NULL;
        rep->type[0] = '\0';
        rep->http = 0;
        ds->resp_len = 0;
        curl_err[0] = '\0';
        rc = curl_easy_perform(ds->curl);
        if (rc != CURLE_OK) {
            /* Connection refused, reset, timeout: the request may or may not have landed; the
             * same body (same token) is safe to send again. */
            hc_errstr_set(errstr, errstr_size, "dynamodb %s: %s", op,
                          curl_err[0] != '\0' ? curl_err : curl_easy_strerror(rc));
            err = HC_ERR_TRANSIENT;
            continue;
        }
        curl_easy_getinfo(ds->curl, CURLINFO_RESPONSE_CODE, &rep->http);
        rep->body = ds->resp_len > 0 ? json_loadb(ds->resp, ds->resp_len, 0, NULL) : NULL;
        if (rep->http >= 200 && rep->http < 300) {
            if (rep->body == NULL) {
                hc_errstr_set(errstr, errstr_size, "dynamodb %s: unreadable reply", op);
                err = HC_ERR_TRANSIENT;
                continue;
            }
            err = HC_OK;
            account(ds, op, req, rep->body, true);
            break;
        }
        type = json_string_value(json_object_get(rep->body, "__type"));
        msg = json_string_value(json_object_get(rep->body, "message"));
        if (msg == NULL) {
            msg = json_string_value(json_object_get(rep->body, "Message"));
        }
        if (type != NULL && strchr(type, '#') != NULL) {
            type = strchr(type, '#') + 1;
        }
        snprintf(rep->type, sizeof(rep->type), "%s", type != NULL ? type : "");
        hc_errstr_set(errstr, errstr_size, "dynamodb %s: HTTP %ld %s: %s", op, rep->http,
                      rep->type[0] != '\0' ? rep->type : "error", msg != NULL ? msg : "");
        if (rep->http >= 500 || rep->http == 429 || retryable_type(rep->type) ||
            (strcmp(rep->type, "TransactionCanceledException") == 0 &&
             cancel_is_transient(rep->body))) {
            err = HC_ERR_TRANSIENT;
            continue;
        }
        rep->reasons_valid = json_is_array(json_object_get(rep->body, "CancellationReasons")) != 0;
        account(ds, op, req, rep->body, false);
        err = HC_ERR_FATAL;
        if (strcmp(rep->type, "ResourceNotFoundException") == 0) {
            hc_errstr_set(errstr, errstr_size,
                          "dynamodb %s: table missing (run `hotcount init`): %s", op,
                          msg != NULL ? msg : "");
        }
        break;
    }
    curl_easy_setopt(ds->curl, CURLOPT_HTTPHEADER, NULL);
    curl_easy_setopt(ds->curl, CURLOPT_POSTFIELDS, NULL);
    curl_easy_setopt(ds->curl, CURLOPT_ERRORBUFFER, NULL);
    curl_slist_free_all(hdrs);
    free(payload);
    return err;
}

/* ---- opening: URI, credentials ---- */

static bool prefix_ok(const char *p, size_t len)
{
    size_t i;

    for (i = 0; i < len; i++) {
        char c = p[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-' || c == '.')) {
            return false;
        }
    }
    return len <= 200;
}

static char *dup_n(const char *s, size_t n)
{
    char *p = malloc(n + 1);

    if (p != NULL) {
        memcpy(p, s, n);
        p[n] = '\0';
    }
    return p;
}

/* Reads key = value lines of [profile] from an AWS credentials file. */
static void profile_read(const char *path, const char *profile, char **key, char **secret,
                         char **token)
{
    FILE *f = fopen(path, "r");
    char line[2048];
    char want[256];
    bool in = false;

    if (f == NULL) {
        return;
    }
    snprintf(want, sizeof(want), "[%s]", profile);
    while (fgets(line, sizeof(line), f) != NULL) {
        char *s = line;
        char *e = s + strlen(s);
        char *eq;
        char *v;
        char *ke;
        char **slot = NULL;

        while (s < e && (*s == ' ' || *s == '\t')) {
            s++;
        }
        while (e > s && (e[-1] == '\n' || e[-1] == '\r' || e[-1] == ' ' || e[-1] == '\t')) {
            *--e = '\0';
        }
        if (*s == '[') {
            in = strcmp(s, want) == 0;
            continue;
        }
        eq = strchr(s, '=');
        if (!in || eq == NULL) {
            continue;
        }
        ke = eq;
        while (ke > s && (ke[-1] == ' ' || ke[-1] == '\t')) {
            ke--;
        }
        v = eq + 1;
        while (*v == ' ' || *v == '\t') {
            v++;
        }
        if ((size_t)(ke - s) == strlen("aws_access_key_id") &&
            strncmp(s, "aws_access_key_id", (size_t)(ke - s)) == 0) {
            slot = key;
        } else if ((size_t)(ke - s) == strlen("aws_secret_access_key") &&
                   strncmp(s, "aws_secret_access_key", (size_t)(ke - s)) == 0) {
            slot = secret;
        } else if ((size_t)(ke - s) == strlen("aws_session_token") &&
                   strncmp(s, "aws_session_token", (size_t)(ke - s)) == 0) {
            slot = token;
        }
        if (slot != NULL && *slot == NULL) {
            *slot = strdup(v);
        }
    }
    explicit_bzero(line, sizeof(line));
    fclose(f);
}

static void wipe_free(char *s)
{
    if (s != NULL) {
        explicit_bzero(s, strlen(s));
        free(s);
    }
}

static hc_err_t load_credentials(ddb_store_t *ds, const char *profile, char *errstr,
                                 size_t errstr_size)
{
    const char *env_key = getenv("AWS_ACCESS_KEY_ID");
    const char *env_secret = getenv("AWS_SECRET_ACCESS_KEY");
    const char *env_token = getenv("AWS_SESSION_TOKEN");
    char *key = NULL;
    char *secret = NULL;
    char *token = NULL;
    char path[1024];
    hc_err_t err = HC_OK;
    size_t n;

    if (env_key != NULL && env_key[0] != '\0' && env_secret != NULL && env_secret[0] != '\0') {
        key = strdup(env_key);
        secret = strdup(env_secret);
        token = env_token != NULL && env_token[0] != '\0' ? strdup(env_token) : NULL;
    } else {
        if (profile == NULL) {
            profile = getenv("AWS_PROFILE");
        }
        if (profile == NULL || profile[0] == '\0') {
            profile = "default";
        }
        if (getenv("AWS_SHARED_CREDENTIALS_FILE") != NULL) {
            snprintf(path, sizeof(path), "%s", getenv("AWS_SHARED_CREDENTIALS_FILE"));
        } else {
            snprintf(path, sizeof(path), "%s/.aws/credentials",
                     getenv("HOME") != NULL ? getenv("HOME") : "");
        }
        profile_read(path, profile, &key, &secret, &token);
    }
    if (key == NULL || secret == NULL) {
        hc_errstr_set(errstr, errstr_size,
                      "dynamodb store: no AWS credentials (set AWS_ACCESS_KEY_ID and "
                      "AWS_SECRET_ACCESS_KEY, or a profile in ~/.aws/credentials)");
        err = HC_ERR_INVALID;
        goto out;
    }
    if (strchr(key, ':') != NULL) {
        hc_errstr_set(errstr, errstr_size, "dynamodb store: the access key id contains ':'");
        err = HC_ERR_INVALID;
        goto out;
    }
    n = strlen(key) + 1 + strlen(secret) + 1;
    ds->userpwd = malloc(n);
    if (ds->userpwd == NULL) {
        err = HC_ERR_FATAL;
        hc_errstr_set(errstr, errstr_size, "dynamodb store: out of memory");
        goto out;
    }
    snprintf(ds->userpwd, n, "%s:%s", key, secret);
    if (token != NULL) {
        char *hdr;
        n = strlen("X-Amz-Security-Token: ") + strlen(token) + 1;
        hdr = malloc(n);
        if (hdr != NULL) {
            snprintf(hdr, n, "X-Amz-Security-Token: %s", token);
            ds->cred_hdr = curl_slist_append(NULL, hdr);
            wipe_free(hdr);
        }
        if (ds->cred_hdr == NULL) {
            err = HC_ERR_FATAL;
            hc_errstr_set(errstr, errstr_size, "dynamodb store: out of memory");
        }
    }
out:
    wipe_free(key);
    wipe_free(secret);
    wipe_free(token);
    return err;
}

static hc_err_t parse_uri(ddb_store_t *ds, const char *uri, char **profile_out, char *errstr,
                          size_t errstr_size)
{
    const char *p = uri + strlen(DDB_URI_PREFIX);
    size_t region_len = strcspn(p, "/?");
    const char *prefix = DDB_DEFAULT_PREFIX;
    size_t prefix_len = strlen(DDB_DEFAULT_PREFIX);
    char region[64];
    const char *q;
    const char *endpoint = NULL;
    size_t endpoint_len = 0;

    if (region_len >= sizeof(region)) {
        hc_errstr_set(errstr, errstr_size, "dynamodb store: region too long (%s)", DDB_URI_FORM);
        return HC_ERR_INVALID;
    }
    memcpy(region, p, region_len);
    region[region_len] = '\0';
    if (region[0] == '\0') {
        const char *env = getenv("AWS_REGION");
        if (env == NULL || env[0] == '\0') {
            env = getenv("AWS_DEFAULT_REGION");
        }
        if (env == NULL || env[0] == '\0' || strlen(env) >= sizeof(region)) {
            hc_errstr_set(errstr, errstr_size,
                          "dynamodb store: no region (in the URI, AWS_REGION or "
                          "AWS_DEFAULT_REGION; %s)",
                          DDB_URI_FORM);
            return HC_ERR_INVALID;
        }
        snprintf(region, sizeof(region), "%s", env);
    }
    if (!prefix_ok(region, strlen(region))) {
        hc_errstr_set(errstr, errstr_size, "dynamodb store: bad region (%s)", DDB_URI_FORM);
        return HC_ERR_INVALID;
    }
    p += region_len;
    if (*p == '/') {
        p++;
        prefix = p;
        prefix_len = strcspn(p, "?");
        p += prefix_len;
        if (prefix_len == 0) {
            prefix = DDB_DEFAULT_PREFIX;
            prefix_len = strlen(DDB_DEFAULT_PREFIX);
        }
    }
    if (!prefix_ok(prefix, prefix_len)) {
        hc_errstr_set(errstr, errstr_size,
                      "dynamodb store: the table prefix takes [A-Za-z0-9_.-], at most 200");
        return HC_ERR_INVALID;
    }
    if (*p == '?') {
        p++;
    }
    while (*p != '\0') {
        size_t len = strcspn(p, "&");
        q = memchr(p, '=', len);
        if (q != NULL && (size_t)(q - p) == 8 && strncmp(p, "endpoint", 8) == 0) {
            endpoint = q + 1;
            endpoint_len = len - 9;
        } else if (q != NULL && (size_t)(q - p) == 7 && strncmp(p, "profile", 7) == 0) {
            free(*profile_out);
            *profile_out = dup_n(q + 1, len - 8);
        } else {
            hc_errstr_set(errstr, errstr_size,
                          "dynamodb store: unknown URI parameter \"%.*s\" (endpoint, profile)",
                          q != NULL ? (int)(q - p) : (int)(len > 32 ? 32 : len), p);
            return HC_ERR_INVALID;
        }
        p += len;
        if (*p == '&') {
            p++;
        }
    }
    snprintf(ds->sigv4, sizeof(ds->sigv4), "aws:amz:%s:dynamodb", region);
    snprintf(ds->t_counts, sizeof(ds->t_counts), "%.*scounts", (int)prefix_len, prefix);
    snprintf(ds->t_offsets, sizeof(ds->t_offsets), "%.*soffsets", (int)prefix_len, prefix);
    snprintf(ds->t_staging, sizeof(ds->t_staging), "%.*sstaging", (int)prefix_len, prefix);
    if (endpoint != NULL) {
        if (strncmp(endpoint, "http://", 7) != 0 && strncmp(endpoint, "https://", 8) != 0) {
            hc_errstr_set(errstr, errstr_size,
                          "dynamodb store: endpoint must start with http:// or https://");
            return HC_ERR_INVALID;
        }
        ds->endpoint = dup_n(endpoint, endpoint_len);
    } else {
        size_t n = strlen("https://dynamodb..amazonaws.com/") + strlen(region) + 1;
        ds->endpoint = malloc(n);
        if (ds->endpoint != NULL) {
            snprintf(ds->endpoint, n, "https://dynamodb.%s.amazonaws.com/", region);
        }
    }
    if (ds->endpoint == NULL) {
        hc_errstr_set(errstr, errstr_size, "dynamodb store: out of memory");
        return HC_ERR_FATAL;
    }
    return HC_OK;
}

static void ddb_close(hc_store_t *st)
{
    ddb_store_t *ds = ddb_store(st);

    if (ds == NULL) {
        return;
    }
    if (ds->curl != NULL) {
        curl_easy_cleanup(ds->curl);
    }
    if (ds->cred_hdr != NULL) {
        explicit_bzero(ds->cred_hdr->data, strlen(ds->cred_hdr->data));
        curl_slist_free_all(ds->cred_hdr);
    }
    wipe_free(ds->userpwd);
    free(ds->endpoint);
    free(ds->resp);
    free(ds);
}

static hc_err_t ddb_open(const hc_config_t *cfg, hc_store_t **stp, char *errstr, size_t errstr_size)
{
    ddb_store_t *ds;
    char *profile = NULL;
    hc_err_t err;

    *stp = NULL;
    if (strncmp(cfg->store, DDB_URI_PREFIX, strlen(DDB_URI_PREFIX)) != 0) {
        hc_errstr_set(errstr, errstr_size, "store: bad dynamodb URI (expected %s)", DDB_URI_FORM);
        return HC_ERR_INVALID;
    }
    pthread_once(&curl_once, curl_global);
    if (curl_global_rc != CURLE_OK) {
        hc_errstr_set(errstr, errstr_size, "dynamodb store: libcurl failed to initialise");
        return HC_ERR_FATAL;
    }
    ds = calloc(1, sizeof(*ds));
    if (ds == NULL) {
        hc_errstr_set(errstr, errstr_size, "dynamodb store: out of memory");
        return HC_ERR_FATAL;
    }
    ds->base.ops = hc_store_dynamodb_backend.ops;
    {
        hc_timeouts_t scratch;
        ds->batch_ms = hc_store_timeouts(cfg, &scratch)->store_batch_ms;
    }
    err = parse_uri(ds, cfg->store, &profile, errstr, errstr_size);
    if (err == HC_OK) {
        err = load_credentials(ds, profile, errstr, errstr_size);
    }
    free(profile);
    if (err != HC_OK) {
        goto fail_close;
    }
    ds->curl = curl_easy_init();
    if (ds->curl == NULL) {
        hc_errstr_set(errstr, errstr_size, "dynamodb store: curl_easy_init failed");
        err = HC_ERR_FATAL;
        goto fail_close;
    }
    curl_easy_setopt(ds->curl, CURLOPT_URL, ds->endpoint);
    curl_easy_setopt(ds->curl, CURLOPT_AWS_SIGV4, ds->sigv4);
    curl_easy_setopt(ds->curl, CURLOPT_USERPWD, ds->userpwd);
    curl_easy_setopt(ds->curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(ds->curl, CURLOPT_TIMEOUT_MS, (long)DDB_REQUEST_TIMEOUT_MS);
    curl_easy_setopt(ds->curl, CURLOPT_CONNECTTIMEOUT_MS, (long)DDB_CONNECT_TIMEOUT_MS);
    curl_easy_setopt(ds->curl, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(ds->curl, CURLOPT_WRITEDATA, ds);
    curl_easy_setopt(ds->curl, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(ds->curl, CURLOPT_PROTOCOLS_STR, "http,https");
    *stp = &ds->base;
    return HC_OK;

fail_close:
    ddb_close(&ds->base);
    return err;
}

void hc_store_dynamodb_set_test_hooks(hc_store_t *st, const hc_ddb_test_hooks_t *hooks)
{
    ddb_store(st)->hooks = hooks;
}

/* ---- init ---- */

static hc_err_t create_table(ddb_store_t *ds, const char *name, const char *hash_key,
                             const char *range_key, const char *range_type, char *errstr,
                             size_t errstr_size)
{
    json_t *req;
    ddb_reply_t rep;
    hc_err_t err;

    if (range_key == NULL) {
        req = json_pack("{s:s, s:s, s:[{s:s, s:s}], s:[{s:s, s:s}]}", "TableName", name,
                        "BillingMode", "PAY_PER_REQUEST", "KeySchema", "AttributeName", hash_key,
                        "KeyType", "HASH", "AttributeDefinitions", "AttributeName", hash_key,
                        "AttributeType", "S");
    } else {
        req = json_pack("{s:s, s:s, s:[{s:s, s:s}, {s:s, s:s}], s:[{s:s, s:s}, {s:s, s:s}]}",
                        "TableName", name, "BillingMode", "PAY_PER_REQUEST", "KeySchema",
                        "AttributeName", hash_key, "KeyType", "HASH", "AttributeName", range_key,
                        "KeyType", "RANGE", "AttributeDefinitions", "AttributeName", hash_key,
                        "AttributeType", "S", "AttributeName", range_key, "AttributeType",
                        range_type);
    }
    err = ddb_call(ds, "CreateTable", req, &rep, errstr, errstr_size);
    json_decref(req);
    if (err == HC_ERR_FATAL && strcmp(rep.type, "ResourceInUseException") == 0) {
        err = HC_OK; /* it exists: init is safe to repeat */
    }
    json_decref(rep.body);
    return err;
}

/* Waits until the table is ACTIVE (DynamoDB creates tables asynchronously, in seconds). */
static hc_err_t wait_active(ddb_store_t *ds, const char *name, char *errstr, size_t errstr_size)
{
    int64_t deadline = hc_now_ms() + 120000;
    json_t *req = json_pack("{s:s}", "TableName", name);
    ddb_reply_t rep;
    hc_err_t err;
    const char *status;

    for (;;) {
        err = ddb_call(ds, "DescribeTable", req, &rep, errstr, errstr_size);
        status = err == HC_OK ? json_string_value(json_object_get(
                                    json_object_get(rep.body, "Table"), "TableStatus"))
                              : NULL;
        if (status != NULL && strcmp(status, "ACTIVE") == 0) {
            json_decref(rep.body);
            break;
        }
        json_decref(rep.body);
        if ((err != HC_OK && err != HC_ERR_TRANSIENT) || hc_now_ms() > deadline) {
            if (err == HC_OK) {
                hc_errstr_set(errstr, errstr_size, "dynamodb: table %s not ACTIVE after 120 s",
                              name);
                err = HC_ERR_TRANSIENT;
            }
            json_decref(req);
            return err;
        }
        hc_sleep_ms(500);
    }
    json_decref(req);
    return HC_OK;
}

static hc_err_t ddb_init_schema(hc_store_t *st, char *errstr, size_t errstr_size)
{
    ddb_store_t *ds = ddb_store(st);
    ddb_reply_t rep;
    json_t *req;
    hc_err_t err;

    err = create_table(ds, ds->t_counts, "post_id", NULL, NULL, errstr, errstr_size);
    if (err == HC_OK) {
        err = create_table(ds, ds->t_offsets, "group", "key", "S", errstr, errstr_size);
    }
    if (err == HC_OK) {
        err = create_table(ds, ds->t_staging, "batch", "part", "N", errstr, errstr_size);
    }
    if (err == HC_OK) {
        err = wait_active(ds, ds->t_counts, errstr, errstr_size);
    }
    if (err == HC_OK) {
        err = wait_active(ds, ds->t_offsets, errstr, errstr_size);
    }
    if (err == HC_OK) {
        err = wait_active(ds, ds->t_staging, errstr, errstr_size);
    }
    if (err != HC_OK) {
        return err;
    }
    /* Abandoned staged parts expire (best effort: a second init finds TTL already on, which
     * DynamoDB answers with a ValidationException). */
    req = json_pack("{s:s, s:{s:b, s:s}}", "TableName", ds->t_staging, "TimeToLiveSpecification",
                    "Enabled", 1, "AttributeName", "expires_at");
    err = ddb_call(ds, "UpdateTimeToLive", req, &rep, errstr, errstr_size);
    json_decref(req);
    json_decref(rep.body);
    if (err == HC_ERR_FATAL) {
        err = HC_OK;
        if (errstr != NULL && errstr_size > 0) {
            errstr[0] = '\0';
        }
    }
    return err;
}

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

/* qsort has no context argument in C11; handles of several threads sort at once. */
static _Thread_local const hc_store_batch_t *sort_batch;

static int cmp_delta(const void *a, const void *b)
{
    return hc_store_delta_cmp(&sort_batch->deltas[*(const size_t *)a],
                              &sort_batch->deltas[*(const size_t *)b]);
}

static char *offsets_to_text(const hc_store_offset_t *offs, size_t n)
{
    size_t cap = n * 64 + 1;
    char *s = malloc(cap);
    size_t len = 0;
    size_t i;

    if (s == NULL) {
        return NULL;
    }
    s[0] = '\0';
    for (i = 0; i < n; i++) {
        if (offs[i].expected == HC_OFFSET_NONE) {
            len += (size_t)snprintf(s + len, cap - len, "%s%d:-:%" PRId64, i > 0 ? "," : "",
                                    (int)offs[i].partition, offs[i].next);
        } else {
            len +=
                (size_t)snprintf(s + len, cap - len, "%s%d:%" PRId64 ":%" PRId64, i > 0 ? "," : "",
                                 (int)offs[i].partition, offs[i].expected, offs[i].next);
        }
    }
    return s;
}

static bool offsets_from_text(const char *s, hc_store_offset_t **out, size_t *count)
{
    size_t n = *s == '\0' ? 0 : 1;
    const char *p;
    hc_store_offset_t *offs;
    size_t i = 0;

    for (p = s; *p != '\0'; p++) {
        n += *p == ',';
    }
    offs = calloc(n + 1, sizeof(*offs));
    if (offs == NULL) {
        return false;
    }
    p = s;
    while (i < n) {
        char *end;
        long part = strtol(p, &end, 10);
        if (*end != ':') {
            goto bad;
        }
        p = end + 1;
        if (*p == '-') {
            offs[i].expected = HC_OFFSET_NONE;
            p++;
        } else {
            offs[i].expected = strtoll(p, &end, 10);
            p = end;
        }
        if (*p != ':') {
            goto bad;
        }
        offs[i].next = strtoll(p + 1, &end, 10);
        offs[i].partition = (int32_t)part;
        p = end;
        i++;
        if (*p == ',') {
            p++;
        } else if (*p != '\0' || i != n) {
            goto bad;
        }
    }
    *out = offs;
    *count = n;
    return true;
bad:
    free(offs);
    return false;
}

static void batch_fini(ddb_batch_t *b)
{
    free(b->order);
    free(b->offsets_text);
    free(b->offs);
    memset(b, 0, sizeof(*b));
}

static void marker_key_of(ddb_batch_t *b, const char *group, const char *topic)
{
    b->group = group != NULL && group[0] != '\0' ? group : "#none";
    snprintf(b->topic, sizeof(b->topic), "%s", topic != NULL && topic[0] != '\0' ? topic : "#none");
    snprintf(b->marker_key, sizeof(b->marker_key), "%s#batch", b->topic);
}

static hc_err_t batch_init(ddb_store_t *ds, ddb_batch_t *b, const hc_store_batch_t *in,
                           char *errstr, size_t errstr_size)
{
    hash2_t h = {HC_STORE_FNV1A64_BASIS, 0x84222325cbf29ce4ULL};
    size_t i;

    memset(b, 0, sizeof(*b));
    b->in = in;
    b->now_ms = in->now_ms;
    b->part_deltas =
        ds->hooks != NULL && ds->hooks->part_deltas > 0 ? ds->hooks->part_deltas : PART_DELTAS;
    if (b->part_deltas > PART_DELTAS) {
        b->part_deltas = PART_DELTAS;
    }
    b->parts = (in->delta_count + b->part_deltas - 1) / b->part_deltas;
    b->order = malloc((in->delta_count + 1) * sizeof(*b->order));
    b->offs = malloc((in->offset_count + 1) * sizeof(*b->offs));
    if (b->order == NULL || b->offs == NULL) {
        goto oom;
    }
    for (i = 0; i < in->delta_count; i++) {
        /* DynamoDB strings are UTF-8 (and jansson refuses anything else): say so now rather
         * than build a transaction short of a delta. */
        json_t *probe = json_stringn(in->deltas[i].post_id, in->deltas[i].post_id_len);
        if (probe == NULL) {
            /* A record: the id came from likes.partials, and no DynamoDB string holds it. */
            batch_fini(b);
            hc_errstr_set(errstr, errstr_size,
                          "dynamodb store: delta %zu: post_id is not valid UTF-8; nothing was "
                          "written",
                          i);
            if (in->refused_out != NULL) {
                *in->refused_out = i;
            }
            return HC_ERR_RECORD;
        }
        json_decref(probe);
        b->order[i] = i;
    }
    sort_batch = in;
    qsort(b->order, in->delta_count, sizeof(*b->order), cmp_delta);
    if (in->offset_count > 0) {
        memcpy(b->offs, in->offsets, in->offset_count * sizeof(*b->offs));
    }
    b->offset_count = in->offset_count;
    qsort(b->offs, b->offset_count, sizeof(*b->offs), hc_store_offset_cmp);
    b->offsets_text = offsets_to_text(b->offs, b->offset_count);
    if (b->offsets_text == NULL) {
        goto oom;
    }
    marker_key_of(b, in->group, in->topic);
    /* The id: what the batch is (group, topic, offsets, deltas in their sorted order). A batch
     * without offsets has no compare-and-set and may legitimately be applied twice: a random
     * part makes its ids differ. */
    hash_bytes(&h, b->group, strlen(b->group) + 1);
    hash_bytes(&h, b->marker_key, strlen(b->marker_key) + 1);
    hash_bytes(&h, b->offsets_text, strlen(b->offsets_text) + 1);
    for (i = 0; i < in->delta_count; i++) {
        const hc_store_delta_t *d = &in->deltas[b->order[i]];
        hash_i64(&h, (int64_t)d->post_id_len);
        hash_bytes(&h, d->post_id, d->post_id_len);
        hash_i64(&h, d->delta);
    }
    hash_i64(&h, (int64_t)b->part_deltas);
    if (in->offset_count == 0) {
        hash_i64(&h, (int64_t)rand64());
    }
    snprintf(b->id, sizeof(b->id), "%016" PRIx64 "%016" PRIx64, h.a, h.b);
    return HC_OK;
oom:
    batch_fini(b);
    hc_errstr_set(errstr, errstr_size, "dynamodb store: out of memory");
    return HC_ERR_FATAL;
}

/* ---- request builders ---- */

static json_t *offset_item_key(const char *group, const char *topic, int32_t partition)
{
    char key[300];

    snprintf(key, sizeof(key), "%s/%d", topic, (int)partition);
    return json_pack("{s:o, s:o}", "group", av_s(group, strlen(group)), "key",
                     av_s(key, strlen(key)));
}

static json_t *marker_item_key(const ddb_batch_t *b)
{
    return json_pack("{s:o, s:o}", "group", av_s(b->group, strlen(b->group)), "key",
                     av_s(b->marker_key, strlen(b->marker_key)));
}

/* A count's ADD. DynamoDB numbers hold 38 digits, so nothing on the server stops a count from
 * leaving int64 (and then no reader of ours could parse it): without `old`, the update is
 * conditional on the count staying inside int64 (likes <= INT64_MAX - delta for a positive
 * delta, >= INT64_MIN - delta for a negative one; an absent count is 0, and any delta fits).
 * With `old` (the count read just before), it is conditional on being exactly that, and the
 * caller has checked old + delta itself. A failed condition returns the item (ALL_OLD), which
 * names the post in the cancellation reasons. */
static json_t *count_update(const ddb_store_t *ds, const char *post_id, size_t len, int64_t delta,
                            int64_t now_ms, const int64_t *old)
{
    json_t *u = json_pack("{s:s, s:{s:o}, s:s, s:{s:o, s:o}, s:s}", "TableName", ds->t_counts,
                          "Key", "post_id", av_s(post_id, len), "UpdateExpression",
                          "ADD likes :d SET updated_at = :t", "ExpressionAttributeValues", ":d",
                          av_n(delta), ":t", av_n(now_ms), "ReturnValuesOnConditionCheckFailure",
                          "ALL_OLD");

    if (old != NULL && u != NULL) {
        /* The count is what we read: the total we report is then exact. */
        if (*old == 0) {
            json_object_set_new(u, "ConditionExpression",
                                json_string("attribute_not_exists(likes) OR likes = :o"));
        } else {
            json_object_set_new(u, "ConditionExpression", json_string("likes = :o"));
        }
        json_object_set_new(json_object_get(u, "ExpressionAttributeValues"), ":o", av_n(*old));
    } else if (u != NULL && delta != 0) {
        json_object_set_new(u, "ConditionExpression",
                            json_string(delta > 0 ? "attribute_not_exists(likes) OR likes <= :m"
                                                  : "attribute_not_exists(likes) OR likes >= :m"));
        json_object_set_new(json_object_get(u, "ExpressionAttributeValues"), ":m",
                            av_n(delta > 0 ? INT64_MAX - delta : INT64_MIN - delta));
    }
    return json_pack("{s:o}", "Update", u);
}

/* old + delta leaves int64. */
static bool count_overflows(int64_t old, int64_t delta)
{
    int64_t sum;

    return __builtin_add_overflow(old, delta, &sum);
}

/* The refusal of deltas[i] (HC_ERR_RECORD): its post named, the caller's refused_out set. likes:
 * the stored count as DynamoDB gave it, or NULL when it gave none. */
static hc_err_t refuse_delta(const hc_store_batch_t *in, size_t i, const char *likes, char *errstr,
                             size_t errstr_size)
{
    const hc_store_delta_t *d = &in->deltas[i];

    hc_errstr_set(errstr, errstr_size,
                  "dynamodb store: delta %zu (%lld) would take the count of post \"%.*s\" (%.40s) "
                  "past int64; nothing was written",
                  i, (long long)d->delta, d->post_id_len > 200 ? 200 : (int)d->post_id_len,
                  d->post_id, likes != NULL ? likes : "not a number");
    if (in->refused_out != NULL) {
        *in->refused_out = i;
    }
    /* One post's count is refused, the store is fine: the caller sets that post aside. */
    return HC_ERR_RECORD;
}

/* The offset of one partition moved from expected to next, on condition. */
static json_t *offset_update(const ddb_store_t *ds, const char *group, const char *topic,
                             const hc_store_offset_t *off)
{
    json_t *u;

    if (off->expected == HC_OFFSET_NONE) {
        u = json_pack("{s:s, s:o, s:s, s:s, s:{s:o}}", "TableName", ds->t_offsets, "Key",
                      offset_item_key(group, topic, off->partition), "UpdateExpression",
                      "SET next_offset = :n", "ConditionExpression",
                      "attribute_not_exists(next_offset)", "ExpressionAttributeValues", ":n",
                      av_n(off->next));
    } else {
        u = json_pack("{s:s, s:o, s:s, s:s, s:{s:o, s:o}}", "TableName", ds->t_offsets, "Key",
                      offset_item_key(group, topic, off->partition), "UpdateExpression",
                      "SET next_offset = :n", "ConditionExpression", "next_offset = :e",
                      "ExpressionAttributeValues", ":n", av_n(off->next), ":e",
                      av_n(off->expected));
    }
    return json_pack("{s:o}", "Update", u);
}

static json_t *offset_check(const ddb_store_t *ds, const char *group, const char *topic,
                            const hc_store_offset_t *off)
{
    json_t *c;

    if (off->expected == HC_OFFSET_NONE) {
        c = json_pack("{s:s, s:o, s:s}", "TableName", ds->t_offsets, "Key",
                      offset_item_key(group, topic, off->partition), "ConditionExpression",
                      "attribute_not_exists(next_offset)");
    } else {
        c = json_pack("{s:s, s:o, s:s, s:{s:o}}", "TableName", ds->t_offsets, "Key",
                      offset_item_key(group, topic, off->partition), "ConditionExpression",
                      "next_offset = :e", "ExpressionAttributeValues", ":e", av_n(off->expected));
    }
    return json_pack("{s:o}", "ConditionCheck", c);
}

/* Index of the first action whose condition failed, or -1 (no reasons, or none failed). */
static long failed_action(const ddb_reply_t *rep)
{
    const json_t *reasons = json_object_get(rep->body, "CancellationReasons");
    const json_t *r;
    const char *code;
    size_t i;

    json_array_foreach(reasons, i, r)
    {
        code = json_string_value(json_object_get(r, "Code"));
        if (code != NULL && strcmp(code, "ConditionalCheckFailed") == 0) {
            return (long)i;
        }
    }
    return -1;
}

/* Action i's condition failed. */
static bool action_failed(const ddb_reply_t *rep, size_t i)
{
    const char *code = json_string_value(json_object_get(
        json_array_get(json_object_get(rep->body, "CancellationReasons"), i), "Code"));

    return code != NULL && strcmp(code, "ConditionalCheckFailed") == 0;
}

/* The item that reason i of a cancelled transaction returned (ALL_OLD), or NULL. */
static const json_t *reason_item(const ddb_reply_t *rep, size_t i)
{
    return json_object_get(json_array_get(json_object_get(rep->body, "CancellationReasons"), i),
                           "Item");
}

/* The count (an N's text) in such an item, or NULL. */
static const char *item_likes(const json_t *item)
{
    return json_string_value(json_object_get(json_object_get(item, "likes"), "N"));
}

static bool is_cancelled(hc_err_t err, const ddb_reply_t *rep)
{
    return err == HC_ERR_FATAL && strcmp(rep->type, "TransactionCanceledException") == 0;
}

/* TransactWriteItems with a fresh token, kept across the retries of ddb_call. */
static hc_err_t transact(ddb_store_t *ds, json_t *actions, size_t want, bool is_part,
                         ddb_reply_t *rep, char *errstr, size_t errstr_size)
{
    char token[33];
    json_t *req;
    hc_err_t err;

    if (json_array_size(actions) != want) {
        /* An action failed to build (out of memory): never send a transaction short of one. */
        json_decref(actions);
        memset(rep, 0, sizeof(*rep));
        hc_errstr_set(errstr, errstr_size, "dynamodb store: cannot build a transaction");
        return HC_ERR_FATAL;
    }
    token_new(token);
    req = json_pack("{s:o, s:s, s:s}", "TransactItems", actions, "ClientRequestToken", token,
                    "ReturnConsumedCapacity", "TOTAL");
    if (req == NULL) {
        hc_errstr_set(errstr, errstr_size, "dynamodb store: out of memory");
        memset(rep, 0, sizeof(*rep));
        return HC_ERR_FATAL;
    }
    err = ddb_call(ds, "TransactWriteItems", req, rep, errstr, errstr_size);
    if (err == HC_OK && is_part && ds->hooks != NULL && ds->hooks->resend_parts) {
        /* Test seam: the reply was "lost"; the same request goes out again. Its outcome is what
         * a caller sees. */
        json_decref(rep->body);
        err = ddb_call(ds, "TransactWriteItems", req, rep, errstr, errstr_size);
    }
    json_decref(req);
    return err;
}

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

static void marker_fini(marker_t *mk)
{
    free(mk->offs);
    memset(mk, 0, sizeof(*mk));
}

static hc_err_t marker_read(ddb_store_t *ds, const ddb_batch_t *b, marker_t *mk, char *errstr,
                            size_t errstr_size)
{
    json_t *req = json_pack("{s:s, s:o, s:b}", "TableName", ds->t_offsets, "Key",
                            marker_item_key(b), "ConsistentRead", 1);
    ddb_reply_t rep;
    const json_t *item;
    const char *id;
    const char *text;
    hc_err_t err;

    memset(mk, 0, sizeof(*mk));
    err = ddb_call(ds, "GetItem", req, &rep, errstr, errstr_size);
    json_decref(req);
    if (err != HC_OK) {
        json_decref(rep.body);
        return err;
    }
    item = json_object_get(rep.body, "Item");
    if (item == NULL) {
        json_decref(rep.body);
        return HC_OK;
    }
    id = av_get_s(item, "batch_id", NULL);
    text = av_get_s(item, "offsets", NULL);
    if (id == NULL || text == NULL || strlen(id) >= sizeof(mk->id) ||
        !av_get_n(item, "parts_done", &mk->done) || !av_get_n(item, "parts_total", &mk->total) ||
        !av_get_n(item, "now_ms", &mk->now_ms) ||
        !av_get_n(item, "part_deltas", &mk->part_deltas) || mk->part_deltas < 1 ||
        mk->part_deltas > PART_DELTAS || mk->done < 0 || mk->done > mk->total ||
        !offsets_from_text(text, &mk->offs, &mk->offset_count)) {
        json_decref(rep.body);
        hc_errstr_set(errstr, errstr_size, "dynamodb store: malformed batch marker in %s",
                      ds->t_offsets);
        return HC_ERR_FATAL;
    }
    snprintf(mk->id, sizeof(mk->id), "%s", id);
    mk->present = true;
    json_decref(rep.body);
    return HC_OK;
}

/* BatchGetItem of keys (an array it takes), strongly consistent, unprocessed keys retried; fn
 * is called for each item returned. */
typedef void (*item_fn)(const json_t *item, void *opaque);

static hc_err_t batch_get(ddb_store_t *ds, const char *table, json_t *keys, item_fn fn,
                          void *opaque, char *errstr, size_t errstr_size)
{
    json_t *req =
        json_pack("{s:{s:{s:o, s:b}}}", "RequestItems", table, "Keys", keys, "ConsistentRead", 1);
    ddb_reply_t rep;
    hc_err_t err = HC_OK;
    int rounds = 0;

    while (req != NULL) {
        const json_t *items;
        const json_t *item;
        const json_t *left;
        size_t i;

        err = ddb_call(ds, "BatchGetItem", req, &rep, errstr, errstr_size);
        json_decref(req);
        req = NULL;
        if (err != HC_OK) {
            json_decref(rep.body);
            return err;
        }
        items = json_object_get(json_object_get(rep.body, "Responses"), table);
        json_array_foreach(items, i, item)
        {
            fn(item, opaque);
        }
        left = json_object_get(json_object_get(rep.body, "UnprocessedKeys"), table);
        if (left != NULL && json_array_size(json_object_get(left, "Keys")) > 0) {
            if (++rounds > DDB_ATTEMPTS) {
                json_decref(rep.body);
                hc_errstr_set(errstr, errstr_size, "dynamodb BatchGetItem: throttled");
                return HC_ERR_TRANSIENT;
            }
            backoff(ds, rounds);
            req = json_pack("{s:{s:O}}", "RequestItems", table, left);
        }
        json_decref(rep.body);
    }
    return err;
}

typedef struct offsets_visit {
    const char *topic;
    const int32_t *partitions;
    size_t count;
    int64_t *out;
} offsets_visit_t;

static void on_offset_item(const json_t *item, void *opaque)
{
    offsets_visit_t *v = opaque;
    const char *key = av_get_s(item, "key", NULL);
    size_t tlen = strlen(v->topic);
    int64_t next;
    long part;
    char *end;
    size_t i;

    if (key == NULL || strncmp(key, v->topic, tlen) != 0 || key[tlen] != '/' ||
        !av_get_n(item, "next_offset", &next)) {
        return;
    }
    part = strtol(key + tlen + 1, &end, 10);
    for (i = 0; i < v->count; i++) {
        if (v->partitions[i] == part) {
            v->out[i] = next;
        }
    }
}

static hc_err_t offsets_read(ddb_store_t *ds, const char *group, const char *topic,
                             const int32_t *partitions, size_t count, int64_t *out, char *errstr,
                             size_t errstr_size)
{
    offsets_visit_t v = {topic, partitions, count, out};
    size_t i;
    size_t j;
    hc_err_t err;

    for (i = 0; i < count; i++) {
        out[i] = HC_OFFSET_NONE;
    }
    for (i = 0; i < count; i += GET_KEYS) {
        json_t *keys = json_array();
        for (j = i; j < count && j < i + GET_KEYS; j++) {
            bool dup = false;
            size_t k;
            for (k = i; k < j; k++) {
                dup = dup || partitions[k] == partitions[j];
            }
            if (!dup) {
                json_array_append_new(keys, offset_item_key(group, topic, partitions[j]));
            }
        }
        err = batch_get(ds, ds->t_offsets, keys, on_offset_item, &v, errstr, errstr_size);
        if (err != HC_OK) {
            return err;
        }
    }
    return HC_OK;
}

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

static hc_err_t staged_part_read(ddb_store_t *ds, const ddb_batch_t *m, size_t j, part_deltas_t *pd,
                                 bool *found, char *errstr, size_t errstr_size)
{
    json_t *req =
        json_pack("{s:s, s:{s:o, s:o}, s:b}", "TableName", ds->t_staging, "Key", "batch",
                  av_s(m->id, strlen(m->id)), "part", av_n((int64_t)j), "ConsistentRead", 1);
    ddb_reply_t rep;
    hc_err_t err = ddb_call(ds, "GetItem", req, &rep, errstr, errstr_size);
    json_t *item;

    json_decref(req);
    *found = false;
    if (err != HC_OK) {
        json_decref(rep.body);
        return err;
    }
    item = json_object_get(rep.body, "Item");
    if (item != NULL) {
        const json_t *ids = json_object_get(json_object_get(item, "ids"), "L");
        const json_t *deltas = json_object_get(json_object_get(item, "deltas"), "L");
        size_t i;
        const json_t *v;
        bool ok = json_array_size(ids) == json_array_size(deltas) && json_array_size(ids) > 0;
        json_array_foreach(ids, i, v)
        {
            ok = ok && json_is_string(json_object_get(v, "S"));
        }
        json_array_foreach(deltas, i, v)
        {
            ok = ok && json_is_string(json_object_get(v, "N"));
        }
        if (!ok) {
            json_decref(rep.body);
            hc_errstr_set(errstr, errstr_size, "dynamodb store: malformed staged part");
            return HC_ERR_FATAL;
        }
        pd->item = json_incref(item);
        pd->count = json_array_size(ids);
        *found = true;
    }
    json_decref(rep.body);
    return HC_OK;
}

static json_t *staging_key(const ddb_store_t *ds, const ddb_batch_t *m, size_t j)
{
    return json_pack("{s:s, s:{s:o, s:o}}", "TableName", ds->t_staging, "Key", "batch",
                     av_s(m->id, strlen(m->id)), "part", av_n((int64_t)j));
}

/* Builds part j's transaction: its count updates, the marker's step, the staged part's delete. */
static json_t *part_actions(const ddb_store_t *ds, const ddb_batch_t *m, size_t j,
                            const part_deltas_t *pd)
{
    json_t *acts = json_array();
    size_t i;

    if (pd->item == NULL) {
        const hc_store_batch_t *in = m->in;
        size_t end = (j + 1) * m->part_deltas;
        for (i = j * m->part_deltas; i < end && i < in->delta_count; i++) {
            const hc_store_delta_t *d = &in->deltas[m->order[i]];
            json_array_append_new(
                acts, count_update(ds, d->post_id, d->post_id_len, d->delta, m->now_ms, NULL));
        }
    } else {
        const json_t *ids = json_object_get(json_object_get(pd->item, "ids"), "L");
        const json_t *deltas = json_object_get(json_object_get(pd->item, "deltas"), "L");
        for (i = 0; i < pd->count; i++) {
            const json_t *sv = json_object_get(json_array_get(ids, i), "S");
            const char *dv = json_string_value(json_object_get(json_array_get(deltas, i), "N"));
            json_array_append_new(
                acts, count_update(ds, json_string_value(sv), json_string_length(sv),
                                   dv != NULL ? strtoll(dv, NULL, 10) : 0, m->now_ms, NULL));
        }
    }
    json_array_append_new(acts,
                          json_pack("{s:{s:s, s:o, s:s, s:s, s:{s:o, s:o, s:o}}}", "Update",
                                    "TableName", ds->t_offsets, "Key", marker_item_key(m),
                                    "UpdateExpression", "SET parts_done = :j1",
                                    "ConditionExpression", "batch_id = :b AND parts_done = :j",
                                    "ExpressionAttributeValues", ":b", av_s(m->id, strlen(m->id)),
                                    ":j", av_n((int64_t)j), ":j1", av_n((int64_t)j + 1)));
    json_array_append_new(acts, json_pack("{s:o}", "Delete", staging_key(ds, m, j)));
    return acts;
}

typedef struct totals_visit {
    const ddb_batch_t *b;
    int64_t *totals; /* indexed like in->deltas */
} totals_visit_t;

/* Finds the delta of post_id by binary search over the sorted order. */
static long find_post(const ddb_batch_t *b, const char *id, size_t len)
{
    size_t lo = 0;
    size_t hi = b->in->delta_count;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const hc_store_delta_t *d = &b->in->deltas[b->order[mid]];
        size_t n = d->post_id_len < len ? d->post_id_len : len;
        int c = memcmp(d->post_id, id, n);
        if (c == 0) {
            c = d->post_id_len < len ? -1 : d->post_id_len > len;
        }
        if (c == 0) {
            return (long)b->order[mid];
        }
        if (c < 0) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return -1;
}

static void on_total_item(const json_t *item, void *opaque)
{
    totals_visit_t *v = opaque;
    size_t len;
    const char *id = av_get_s(item, "post_id", &len);
    int64_t likes;
    long i;

    if (id == NULL || !av_get_n(item, "likes", &likes)) {
        return;
    }
    i = find_post(v->b, id, len);
    if (i >= 0) {
        v->totals[i] = likes;
    }
}

/* The counts of the posts of [from, to) in sorted order (at most GET_KEYS of them), into
 * totals (indexed like in->deltas; 0 for a post not stored). */
static hc_err_t read_totals_chunk(ddb_store_t *ds, const ddb_batch_t *b, size_t from, size_t to,
                                  int64_t *totals, char *errstr, size_t errstr_size)
{
    totals_visit_t v = {b, totals};
    const hc_store_batch_t *in = b->in;
    json_t *keys = json_array();
    size_t j;

    for (j = from; j < to; j++) {
        const hc_store_delta_t *d = &in->deltas[b->order[j]];
        totals[b->order[j]] = 0;
        json_array_append_new(keys,
                              json_pack("{s:o}", "post_id", av_s(d->post_id, d->post_id_len)));
    }
    return batch_get(ds, ds->t_counts, keys, on_total_item, &v, errstr, errstr_size);
}

/* The counts of the batch's posts now, into totals (0 for a post not stored). */
static hc_err_t read_totals(ddb_store_t *ds, const ddb_batch_t *b, int64_t *totals, char *errstr,
                            size_t errstr_size)
{
    size_t n = b->in->delta_count;
    size_t i;
    hc_err_t err;

    for (i = 0; i < n; i += GET_KEYS) {
        err = read_totals_chunk(ds, b, i, i + GET_KEYS < n ? i + GET_KEYS : n, totals, errstr,
                                errstr_size);
        if (err != HC_OK) {
            return err;
        }
    }
    return HC_OK;
}

/* Steps 3 and 4 for the batch of marker m (m->in set: our own batch, else a roll-forward from
 * the staging table), starting at part `from`. */
/* Where batch m stands now: *ours false when the marker is gone or names another batch (someone
 * finished m, and its offsets moved with it); else *done, the parts applied so far. */
static hc_err_t marker_progress(ddb_store_t *ds, const ddb_batch_t *m, bool *ours, int64_t *done,
                                char *errstr, size_t errstr_size)
{
    marker_t now;
    hc_err_t err = marker_read(ds, m, &now, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    *ours = now.present && strcmp(now.id, m->id) == 0;
    *done = now.done;
    marker_fini(&now);
    return HC_OK;
}

static hc_err_t run_parts(ddb_store_t *ds, ddb_batch_t *m, int64_t from, step_t *step, char *errstr,
                          size_t errstr_size)
{
    size_t j = (size_t)from;
    size_t want;
    long landed = 0;
    ddb_reply_t rep;
    json_t *acts;
    hc_err_t err;
    size_t i;

    while (j < m->parts) {
        part_deltas_t pd = {NULL, 0};
        if (m->in == NULL) {
            bool found;
            err = staged_part_read(ds, m, j, &pd, &found, errstr, errstr_size);
            if (err != HC_OK) {
                return err;
            }
            if (!found) {
                /* Consumed by a part that landed meanwhile, or the batch is finished. */
                int64_t done;
                bool ours;
                if ((err = marker_progress(ds, m, &ours, &done, errstr, errstr_size)) != HC_OK) {
                    return err;
                }
                if (!ours) {
                    *step = STEP_FINISHED_OTHER;
                    return HC_OK;
                }
                if ((size_t)done == j) {
                    hc_errstr_set(errstr, errstr_size,
                                  "dynamodb store: staged part %zu of batch %s is missing "
                                  "(expired?): the batch cannot be finished",
                                  j, m->id);
                    return HC_ERR_FATAL;
                }
                j = (size_t)done;
                continue;
            }
        }
        if (ds->hooks != NULL && ds->hooks->before_part != NULL) {
            ds->hooks->before_part(ds->hooks->opaque, j);
        }
        want = (pd.item != NULL ? pd.count
                : (j + 1) * m->part_deltas <= m->in->delta_count
                    ? m->part_deltas
                    : m->in->delta_count - j * m->part_deltas) +
               2;
        acts = part_actions(ds, m, j, &pd);
        json_decref(pd.item);
        err = transact(ds, acts, want, true, &rep, errstr, errstr_size);
        if (err == HC_OK) {
            json_decref(rep.body);
            progress(ds);
            j++;
            landed++;
            if (ds->hooks != NULL && ds->hooks->crash_after_parts > 0 &&
                landed >= ds->hooks->crash_after_parts) {
                hc_errstr_set(errstr, errstr_size, "test hook: stopped after %ld parts", landed);
                return HC_ERR_TRANSIENT;
            }
            continue;
        }
        if (!is_cancelled(err, &rep)) {
            json_decref(rep.body);
            return err;
        }
        {
            /* A count's overflow condition failed while the marker's held: the count moved
             * outside the protocol since the batch's check (refuse_overflow). The part changed
             * nothing, the batch is begun and cannot be taken back (parts before j landed): stop
             * here, marker at j, offsets unmoved, until someone repairs that count (see
             * docs/DYNAMODB.md); every apply on the group then finishes the batch. */
            size_t n = want - 2; /* the count updates come first */
            long k = failed_action(&rep);
            if (k >= 0 && (size_t)k < n && !action_failed(&rep, n)) {
                const json_t *item = reason_item(&rep, (size_t)k);
                size_t len = 0;
                const char *id = av_get_s(item, "post_id", &len);
                const char *likes = item_likes(item);
                hc_errstr_set(errstr, errstr_size,
                              "dynamodb store: part %zu of batch %s cannot land: the count of "
                              "post \"%.*s\" (%.40s) would leave int64; it was written outside "
                              "this group's batches after the batch's check. The batch stays in "
                              "flight (marker at part %zu, offsets unmoved) until that count is "
                              "repaired (docs/DYNAMODB.md)",
                              j, m->id, id != NULL ? (len > 200 ? 200 : (int)len) : 1,
                              id != NULL ? id : "?", likes != NULL ? likes : "not a number", j);
                json_decref(rep.body);
                return HC_ERR_FATAL;
            }
        }
        json_decref(rep.body);
        /* The marker's condition failed: re-read where the batch is. */
        {
            int64_t done;
            bool ours;
            if ((err = marker_progress(ds, m, &ours, &done, errstr, errstr_size)) != HC_OK) {
                return err;
            }
            if (!ours) {
                *step = STEP_FINISHED_OTHER;
                return HC_OK;
            }
            if ((size_t)done <= j) {
                hc_errstr_set(errstr, errstr_size,
                              "dynamodb store: part %zu of batch %s refused, marker at %lld", j,
                              m->id, (long long)done);
                return HC_ERR_FATAL;
            }
            j = (size_t)done;
        }
    }
    if (m->in != NULL && m->in->totals_out != NULL) {
        /* Every part landed and the marker still holds the group: no other batch can touch the
         * counts until the finish, so these are the totals as this batch left them. */
        err = read_totals(ds, m, m->in->totals_out, errstr, errstr_size);
        if (err != HC_OK) {
            return err;
        }
    }
    acts = json_array();
    for (i = 0; i < m->offset_count; i++) {
        json_array_append_new(acts, offset_update(ds, m->group, m->topic, &m->offs[i]));
    }
    json_array_append_new(
        acts, json_pack("{s:{s:s, s:o, s:s, s:{s:o, s:o}}}", "Delete", "TableName", ds->t_offsets,
                        "Key", marker_item_key(m), "ConditionExpression",
                        "batch_id = :b AND parts_done = :t", "ExpressionAttributeValues", ":b",
                        av_s(m->id, strlen(m->id)), ":t", av_n((int64_t)m->parts)));
    err = transact(ds, acts, m->offset_count + 1, false, &rep, errstr, errstr_size);
    if (err == HC_OK) {
        json_decref(rep.body);
        progress(ds);
        *step = STEP_DONE;
        return HC_OK;
    }
    if (is_cancelled(err, &rep)) {
        /* The marker is gone or moved on: someone finished the batch (its offsets moved too,
         * so their conditions fail as well). Only offsets failing alone mean trouble. */
        bool marker_lost = action_failed(&rep, m->offset_count) || !rep.reasons_valid;
        long k = failed_action(&rep);
        json_decref(rep.body);
        if (!marker_lost && k >= 0 && (size_t)k < m->offset_count) {
            hc_errstr_set(errstr, errstr_size,
                          "dynamodb store: an offset of batch %s moved while it was in flight "
                          "(something writes %s outside hotcount)",
                          m->id, ds->t_offsets);
            return HC_ERR_FATAL;
        }
        *step = STEP_FINISHED_OTHER;
        return HC_OK;
    }
    json_decref(rep.body);
    return err;
}

/* A marker of another batch: finish that batch from the staging table (roll forward). */
static hc_err_t roll_forward(ddb_store_t *ds, const ddb_batch_t *ours, marker_t *mk, char *errstr,
                             size_t errstr_size)
{
    ddb_batch_t other;
    step_t step;
    hc_err_t err;

    memset(&other, 0, sizeof(other));
    other.group = ours->group;
    snprintf(other.topic, sizeof(other.topic), "%s", ours->topic);
    snprintf(other.marker_key, sizeof(other.marker_key), "%s", ours->marker_key);
    snprintf(other.id, sizeof(other.id), "%s", mk->id);
    other.part_deltas = (size_t)mk->part_deltas;
    other.parts = (size_t)mk->total;
    other.now_ms = mk->now_ms;
    other.offs = mk->offs; /* moved */
    other.offset_count = mk->offset_count;
    mk->offs = NULL;
    /* A warning: it means an owner died or lost its partitions mid-batch, two instances'
     * split batches met on the group's one marker, or an apply of this handle ran out of
     * store_batch_ms and the caller came back with another batch (stage 2 shrinks a batch that
     * failed). */
    hc_log(HC_LOG_WARN, "store",
           "dynamodb: finishing batch %s of group %s (part %lld of %lld), left unfinished by "
           "another owner or an earlier apply",
           other.id, other.group, (long long)mk->done, (long long)mk->total);
    err = run_parts(ds, &other, mk->done, &step, errstr, errstr_size);
    free(other.offs);
    return err;
}

/* Step 1: every part from *staged on into the staging table, 25 puts per BatchWriteItem;
 * *staged follows each request that landed whole, so that an apply cut short by its deadline
 * goes on from there (ddb_store_t's resume_*). */
static hc_err_t stage_parts(ddb_store_t *ds, const ddb_batch_t *b, size_t *staged, char *errstr,
                            size_t errstr_size)
{
    const hc_store_batch_t *in = b->in;
    int64_t expires = hc_wall_ms() / 1000 + STAGING_TTL_S;
    size_t j = *staged;
    hc_err_t err;

    while (j < b->parts) {
        json_t *puts = json_array();
        json_t *req;
        size_t k;
        int rounds = 0;

        for (k = 0; k < PUT_ITEMS && j < b->parts; k++, j++) {
            json_t *ids = json_array();
            json_t *deltas = json_array();
            size_t i;
            for (i = j * b->part_deltas; i < (j + 1) * b->part_deltas && i < in->delta_count; i++) {
                const hc_store_delta_t *d = &in->deltas[b->order[i]];
                json_array_append_new(ids, av_s(d->post_id, d->post_id_len));
                json_array_append_new(deltas, av_n(d->delta));
            }
            json_array_append_new(puts, json_pack("{s:{s:{s:o, s:o, s:{s:o}, s:{s:o}, s:o}}}",
                                                  "PutRequest", "Item", "batch",
                                                  av_s(b->id, strlen(b->id)), "part",
                                                  av_n((int64_t)j), "ids", "L", ids, "deltas", "L",
                                                  deltas, "expires_at", av_n(expires)));
        }
        if (json_array_size(puts) != k) {
            json_decref(puts);
            hc_errstr_set(errstr, errstr_size, "dynamodb store: cannot build the staged parts");
            return HC_ERR_FATAL;
        }
        req = json_pack("{s:{s:o}}", "RequestItems", ds->t_staging, puts);
        while (req != NULL) {
            ddb_reply_t rep;
            const json_t *left;
            err = ddb_call(ds, "BatchWriteItem", req, &rep, errstr, errstr_size);
            json_decref(req);
            req = NULL;
            if (err != HC_OK) {
                json_decref(rep.body);
                return err;
            }
            progress(ds);
            left = json_object_get(json_object_get(rep.body, "UnprocessedItems"), ds->t_staging);
            if (json_array_size(left) > 0) {
                if (++rounds > DDB_ATTEMPTS) {
                    json_decref(rep.body);
                    hc_errstr_set(errstr, errstr_size, "dynamodb BatchWriteItem: throttled");
                    return HC_ERR_TRANSIENT;
                }
                backoff(ds, rounds);
                req = json_pack("{s:{s:O}}", "RequestItems", ds->t_staging, left);
            }
            json_decref(rep.body);
        }
        *staged = j;
    }
    return HC_OK;
}

/* A cancelled transaction whose first actions were the batch's offset checks: HC_ERR_CONFLICT
 * when one of those failed (another owner moved the offsets), else HC_OK with *again set (a
 * marker or count changed under us: the caller looks again). Consumes rep. */
static hc_err_t cancelled_outcome(const ddb_batch_t *b, ddb_reply_t *rep, bool *again, char *errstr,
                                  size_t errstr_size)
{
    long k = failed_action(rep);
    json_decref(rep->body);
    if (k >= 0 && (size_t)k < b->offset_count) {
        hc_errstr_set(errstr, errstr_size,
                      "dynamodb store: partition %d's stored offset differs from the batch's "
                      "expected one",
                      (int)b->offs[k].partition);
        return HC_ERR_CONFLICT;
    }
    *again = true;
    return HC_OK;
}

/* Step 2. HC_OK: the marker is ours. HC_ERR_CONFLICT: an offset differs. *marker_taken: a
 * marker (ours or another's) was there; the caller looks again. */
static hc_err_t begin_batch(ddb_store_t *ds, const ddb_batch_t *b, bool *marker_taken, char *errstr,
                            size_t errstr_size)
{
    json_t *acts = json_array();
    ddb_reply_t rep;
    hc_err_t err;
    size_t i;

    *marker_taken = false;
    for (i = 0; i < b->offset_count; i++) {
        json_array_append_new(acts, offset_check(ds, b->group, b->topic, &b->offs[i]));
    }
    json_array_append_new(
        acts,
        json_pack("{s:{s:s, s:{s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o}, s:s}}", "Put", "TableName",
                  ds->t_offsets, "Item", "group", av_s(b->group, strlen(b->group)), "key",
                  av_s(b->marker_key, strlen(b->marker_key)), "batch_id",
                  av_s(b->id, strlen(b->id)), "parts_total", av_n((int64_t)b->parts), "parts_done",
                  av_n(0), "part_deltas", av_n((int64_t)b->part_deltas), "now_ms", av_n(b->now_ms),
                  "offsets", av_s(b->offsets_text, strlen(b->offsets_text)), "ConditionExpression",
                  "attribute_not_exists(batch_id)"));
    err = transact(ds, acts, b->offset_count + 1, false, &rep, errstr, errstr_size);
    if (err == HC_OK) {
        progress(ds);
    }
    if (err == HC_OK || !is_cancelled(err, &rep)) {
        json_decref(rep.body);
        return err;
    }
    return cancelled_outcome(b, &rep, marker_taken, errstr, errstr_size);
}

/* A batch that fits one transaction: offsets compared and moved, marker checked absent,
 * counts added. *retry: the marker or a count changed under us; look again. */
static hc_err_t apply_single(ddb_store_t *ds, const ddb_batch_t *b, bool *retry, char *errstr,
                             size_t errstr_size)
{
    const hc_store_batch_t *in = b->in;
    int64_t *old = NULL;
    json_t *acts;
    ddb_reply_t rep;
    hc_err_t err;
    size_t i;

    *retry = false;
    if (in->totals_out != NULL && in->delta_count > 0) {
        /* Read the counts first and make each update conditional on them: the totals we
         * report are then exactly what this transaction left. */
        old = in->totals_out;
        err = read_totals(ds, b, old, errstr, errstr_size);
        if (err != HC_OK) {
            return err;
        }
        for (i = 0; i < in->delta_count; i++) {
            /* Each update holds only if its count is still `old`: then old + delta is what it
             * would become. */
            if (count_overflows(old[i], in->deltas[i].delta)) {
                char likes[24];
                snprintf(likes, sizeof(likes), "%lld", (long long)old[i]);
                return refuse_delta(in, i, likes, errstr, errstr_size);
            }
        }
    }
    acts = json_array();
    for (i = 0; i < b->offset_count; i++) {
        json_array_append_new(acts, offset_update(ds, b->group, b->topic, &b->offs[i]));
    }
    if (b->offset_count > 0) {
        json_array_append_new(acts,
                              json_pack("{s:{s:s, s:o, s:s}}", "ConditionCheck", "TableName",
                                        ds->t_offsets, "Key", marker_item_key(b),
                                        "ConditionExpression", "attribute_not_exists(batch_id)"));
    }
    for (i = 0; i < in->delta_count; i++) {
        const hc_store_delta_t *d = &in->deltas[b->order[i]];
        json_array_append_new(acts,
                              count_update(ds, d->post_id, d->post_id_len, d->delta, b->now_ms,
                                           old != NULL ? &old[b->order[i]] : NULL));
    }
    err = transact(ds, acts, b->offset_count + (b->offset_count > 0) + in->delta_count, false, &rep,
                   errstr, errstr_size);
    if (err == HC_OK) {
        json_decref(rep.body);
        progress(ds);
        if (old != NULL) {
            for (i = 0; i < in->delta_count; i++) {
                old[i] += in->deltas[i].delta;
            }
        }
        return HC_OK;
    }
    if (!is_cancelled(err, &rep)) {
        json_decref(rep.body);
        return err;
    }
    if (old == NULL) {
        /* The actions: the offsets, the marker check (with offsets), then the counts in sorted
         * order. A count's condition (without `old`) fails only when the sum would leave int64.
         * The first failed action decides: a stale offset is a conflict before anything. */
        size_t base = b->offset_count + (b->offset_count > 0);
        long k = failed_action(&rep);
        if (k >= 0 && (size_t)k >= base && (size_t)k < base + in->delta_count) {
            err = refuse_delta(in, b->order[(size_t)k - base],
                               item_likes(reason_item(&rep, (size_t)k)), errstr, errstr_size);
            json_decref(rep.body);
            return err;
        }
    }
    return cancelled_outcome(b, &rep, retry, errstr, errstr_size);
}

/* Before a split batch writes anything: a post whose count (read strongly consistent now)
 * would leave int64 refuses the batch (HC_ERR_RECORD), since once begun the batch must finish.
 * Between this read and the parts no other batch of the group changes these counts and lets
 * this one begin (a post's partials are one partition's, whose offset every such batch moves,
 * and the marker holds the group from the begin), so the parts' own overflow conditions then
 * hold; run_parts says what happens if something outside the protocol writes a count
 * meanwhile. */
static hc_err_t refuse_overflow(ddb_store_t *ds, const ddb_batch_t *b, size_t *checked,
                                char *errstr, size_t errstr_size)
{
    const hc_store_batch_t *in = b->in;
    int64_t *now = malloc((in->delta_count + 1) * sizeof(*now));
    hc_err_t err = HC_OK;
    size_t from;
    size_t i;

    if (now == NULL) {
        hc_errstr_set(errstr, errstr_size, "dynamodb store: out of memory");
        return HC_ERR_FATAL;
    }
    /* In part order, a chunk of GET_KEYS at a time; *checked follows each chunk found fine, so
     * that an apply cut short by its deadline goes on from there (ddb_store_t's resume_*). */
    for (from = *checked; err == HC_OK && from < in->delta_count; from += GET_KEYS) {
        size_t to = from + GET_KEYS < in->delta_count ? from + GET_KEYS : in->delta_count;
        err = read_totals_chunk(ds, b, from, to, now, errstr, errstr_size);
        for (i = from; err == HC_OK && i < to; i++) {
            size_t k = b->order[i]; /* the first in part order */
            if (count_overflows(now[k], in->deltas[k].delta)) {
                char likes[24];
                snprintf(likes, sizeof(likes), "%lld", (long long)now[k]);
                err = refuse_delta(in, k, likes, errstr, errstr_size);
            }
        }
        if (err == HC_OK) {
            *checked = to;
        }
    }
    free(now);
    return err;
}

static hc_err_t apply_batch(ddb_store_t *ds, const hc_store_batch_t *in, char *errstr,
                            size_t errstr_size)
{
    ddb_batch_t b;
    marker_t mk;
    hc_err_t err;
    int round;

    if (in->offset_count == 0 && in->delta_count == 0) {
        return HC_OK;
    }
    if (in->offset_count > MAX_PARTITIONS) {
        hc_errstr_set(errstr, errstr_size,
                      "dynamodb store: a batch may move at most %d partitions' offsets (got "
                      "%zu): one transaction moves them all",
                      MAX_PARTITIONS, in->offset_count);
        return HC_ERR_INVALID;
    }
    err = batch_init(ds, &b, in, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    for (round = 0; round < DDB_ROUNDS; round++) {
        bool again = false;
        step_t step;

        err = marker_read(ds, &b, &mk, errstr, errstr_size);
        if (err != HC_OK) {
            goto out;
        }
        if (mk.present && strcmp(mk.id, b.id) == 0) {
            /* Our own batch, begun by an earlier attempt or by another owner: finish it. */
            err = run_parts(ds, &b, mk.done, &step, errstr, errstr_size);
            marker_fini(&mk);
            if (err == HC_OK && step == STEP_FINISHED_OTHER) {
                hc_errstr_set(errstr, errstr_size,
                              "dynamodb store: batch %s was finished by another handle", b.id);
                err = HC_ERR_CONFLICT;
            }
            goto out;
        }
        if (mk.present) {
            err = roll_forward(ds, &b, &mk, errstr, errstr_size);
            marker_fini(&mk);
            if (err != HC_OK) {
                goto out;
            }
            continue;
        }
        marker_fini(&mk);
        if (in->delta_count <= b.part_deltas &&
            in->delta_count + in->offset_count + 1 <= TXN_MAX_ACTIONS) {
            err = apply_single(ds, &b, &again, errstr, errstr_size);
            if (err != HC_OK || !again) {
                goto out;
            }
            backoff(ds, round);
            continue;
        }
        if (b.offset_count > 0) {
            /* A stale batch loses here, before it stages anything. begin_batch checks again,
             * atomically. */
            int32_t parts[MAX_PARTITIONS];
            int64_t stored[MAX_PARTITIONS];
            size_t i;
            for (i = 0; i < b.offset_count; i++) {
                parts[i] = b.offs[i].partition;
            }
            err = offsets_read(ds, b.group, b.topic, parts, b.offset_count, stored, errstr,
                               errstr_size);
            if (err != HC_OK) {
                goto out;
            }
            for (i = 0; i < b.offset_count; i++) {
                if (stored[i] != b.offs[i].expected) {
                    hc_errstr_set(errstr, errstr_size,
                                  "dynamodb store: partition %d's stored offset differs from "
                                  "the batch's expected one",
                                  (int)b.offs[i].partition);
                    err = HC_ERR_CONFLICT;
                    goto out;
                }
            }
        }
        /* What an earlier apply of this very batch (same id: same group, topic, offsets,
         * deltas and parts) checked and staged holds still: nothing of the group moved
         * meanwhile without moving an offset, which the begin checks again. */
        if (strcmp(ds->resume_id, b.id) != 0) {
            snprintf(ds->resume_id, sizeof(ds->resume_id), "%s", b.id);
            ds->resume_checked = 0;
            ds->resume_staged = 0;
        }
        err = refuse_overflow(ds, &b, &ds->resume_checked, errstr, errstr_size);
        if (err == HC_OK) {
            err = stage_parts(ds, &b, &ds->resume_staged, errstr, errstr_size);
        }
        if (err == HC_OK) {
            err = begin_batch(ds, &b, &again, errstr, errstr_size);
        }
        if (err != HC_ERR_TRANSIENT) {
            ds->resume_id[0] = '\0'; /* begun, refused or lost: nothing to resume */
        }
        if (err != HC_OK) {
            goto out;
        }
        if (again) {
            continue; /* someone's marker: the next round finishes it */
        }
        err = run_parts(ds, &b, 0, &step, errstr, errstr_size);
        if (err == HC_OK && step == STEP_FINISHED_OTHER) {
            hc_errstr_set(errstr, errstr_size,
                          "dynamodb store: batch %s was finished by another handle", b.id);
            err = HC_ERR_CONFLICT;
        }
        goto out;
    }
    hc_errstr_set(errstr, errstr_size,
                  "dynamodb store: other batches kept taking the group's marker; retry");
    err = HC_ERR_TRANSIENT;
out:
    batch_fini(&b);
    return err;
}

/* One apply, every request of it within store_batch_ms (the deadline ddb_call and the back-offs
 * keep to). */
static hc_err_t ddb_apply(hc_store_t *st, const hc_store_batch_t *in, char *errstr,
                          size_t errstr_size)
{
    ddb_store_t *ds = ddb_store(st);
    hc_err_t err;

    ds->deadline_ms = hc_now_ms() + ds->batch_ms;
    ds->cur = in;
    err = apply_batch(ds, in, errstr, errstr_size);
    ds->deadline_ms = 0;
    ds->cur = NULL;
    return err;
}

/* ---- reads ---- */

static hc_err_t ddb_read_offsets(hc_store_t *st, const char *group, const char *topic,
                                 const int32_t *partitions, size_t count, int64_t *offsets_out,
                                 char *errstr, size_t errstr_size)
{
    /* A batch in flight on this group and topic is left alone: its offsets have not moved, so
     * a new owner starts at its beginning, re-reads its partials, and its first apply finishes
     * the batch in flight (roll forward) before its own. Finishing it here would make every
     * reader (verify polls this) race the live owner and cost it a conflict per poll. */
    return offsets_read(ddb_store(st), group, topic, partitions, count, offsets_out, errstr,
                        errstr_size);
}

typedef struct get_visit {
    const char *const *ids;
    const size_t *lens;
    size_t from;
    size_t to;
    int64_t *out;
} get_visit_t;

static void on_get_item(const json_t *item, void *opaque)
{
    get_visit_t *v = opaque;
    size_t len;
    const char *id = av_get_s(item, "post_id", &len);
    int64_t likes;
    size_t i;

    if (id == NULL || !av_get_n(item, "likes", &likes)) {
        return;
    }
    for (i = v->from; i < v->to; i++) {
        if (v->lens[i] == len && memcmp(v->ids[i], id, len) == 0) {
            v->out[i] = likes;
        }
    }
}

static hc_err_t ddb_get(hc_store_t *st, const char *const *post_ids, const size_t *post_id_lens,
                        size_t count, int64_t *likes_out, char *errstr, size_t errstr_size)
{
    ddb_store_t *ds = ddb_store(st);
    size_t i = 0;
    size_t j;
    hc_err_t err;

    for (j = 0; j < count; j++) {
        likes_out[j] = 0;
    }
    while (i < count) {
        json_t *keys = json_array();
        get_visit_t v = {post_ids, post_id_lens, i, i, likes_out};
        size_t n = 0;
        for (j = i; j < count && n < GET_KEYS; j++) {
            size_t k;
            bool dup = post_id_lens[j] == 0 || post_id_lens[j] > HC_POST_ID_MAX;
            for (k = i; k < j && !dup; k++) {
                dup = post_id_lens[k] == post_id_lens[j] &&
                      memcmp(post_ids[k], post_ids[j], post_id_lens[j]) == 0;
            }
            if (!dup) {
                /* BatchGetItem refuses a key twice in one request. */
                json_t *key = json_pack("{s:o}", "post_id", av_s(post_ids[j], post_id_lens[j]));
                if (key == NULL) {
                    /* not valid UTF-8: no such post can be stored (apply refuses it), so its
                     * count is 0, as every store answers for a post it does not hold */
                    continue;
                }
                json_array_append_new(keys, key);
                n++;
            }
        }
        v.to = j;
        if (n == 0) {
            json_decref(keys);
        } else {
            err = batch_get(ds, ds->t_counts, keys, on_get_item, &v, errstr, errstr_size);
            if (err != HC_OK) {
                return err;
            }
        }
        i = j;
    }
    return HC_OK;
}

/* Scan of the counts table; fn per item, false stops. */
typedef bool (*scan_fn)(const char *id, size_t len, int64_t likes, void *opaque);

static hc_err_t scan_counts(ddb_store_t *ds, scan_fn fn, void *opaque, char *errstr,
                            size_t errstr_size)
{
    json_t *start = NULL;

    for (;;) {
        json_t *req = json_pack("{s:s, s:b}", "TableName", ds->t_counts, "ConsistentRead", 1);
        ddb_reply_t rep;
        const json_t *items;
        const json_t *item;
        hc_err_t err;
        size_t i;

        if (start != NULL) {
            json_object_set_new(req, "ExclusiveStartKey", start);
            start = NULL;
        }
        err = ddb_call(ds, "Scan", req, &rep, errstr, errstr_size);
        json_decref(req);
        if (err != HC_OK) {
            json_decref(rep.body);
            return err;
        }
        items = json_object_get(rep.body, "Items");
        json_array_foreach(items, i, item)
        {
            size_t len;
            const char *id = av_get_s(item, "post_id", &len);
            int64_t likes;
            if (id == NULL || len == 0 || len > HC_POST_ID_MAX ||
                !av_get_n(item, "likes", &likes)) {
                continue;
            }
            if (!fn(id, len, likes, opaque)) {
                json_decref(rep.body);
                return HC_OK;
            }
        }
        start = json_object_get(rep.body, "LastEvaluatedKey");
        if (start == NULL) {
            json_decref(rep.body);
            return HC_OK;
        }
        json_incref(start);
        json_decref(rep.body);
    }
}

static hc_err_t ddb_top(hc_store_t *st, size_t n, hc_store_row_t *rows_out, size_t *count_out,
                        char *errstr, size_t errstr_size)
{
    hc_store_top_t h;
    hc_err_t err;

    hc_store_top_init(&h, rows_out, n);
    err = scan_counts(ddb_store(st), hc_store_top_offer, &h, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    *count_out = hc_store_top_finish(&h);
    return HC_OK;
}

typedef struct each_visit {
    hc_store_row_fn fn;
    void *opaque;
} each_visit_t;

static bool on_each_item(const char *id, size_t len, int64_t likes, void *opaque)
{
    each_visit_t *v = opaque;

    return v->fn(id, len, likes, v->opaque);
}

static hc_err_t ddb_foreach(hc_store_t *st, hc_store_row_fn fn, void *opaque, char *errstr,
                            size_t errstr_size)
{
    each_visit_t v = {fn, opaque};

    return scan_counts(ddb_store(st), on_each_item, &v, errstr, errstr_size);
}

static const hc_store_ops_t dynamodb_ops = {
    .kind = "dynamodb",
    .open = ddb_open,
    .close = ddb_close,
    .init_schema = ddb_init_schema,
    .read_offsets = ddb_read_offsets,
    .apply = ddb_apply,
    .get = ddb_get,
    .top = ddb_top,
    .foreach = ddb_foreach,
};

static const char *const ddb_schemes[] = {DDB_URI_PREFIX, NULL};

static int64_t ddb_statements_per_batch(int64_t max_keys)
{
    /* one HTTP request per call (DDB_REQUEST_TIMEOUT_MS each), a transaction per
     * TXN_MAX_ACTIONS items; a batch is bounded as a whole by store_batch_ms */
    return (max_keys + TXN_MAX_ACTIONS - 1) / TXN_MAX_ACTIONS + 1;
}

const hc_store_backend_t hc_store_dynamodb_backend = {
    .facts =
        {
            .name = "dynamodb",
            .title = "DynamoDB",
            .schemes = ddb_schemes,
            .uri_form = DDB_URI_FORM,
            .takes_password_file = false,
            .connect_ms = HC_STORE_CONNECT_MS,
            .statement_ms = DDB_REQUEST_TIMEOUT_MS,
            .statements_per_batch = ddb_statements_per_batch,
        },
    .ops = &dynamodb_ops,
};

hc_err_t hc_store_dynamodb_test_peek(hc_store_t *st, const char *group, const char *topic,
                                     int32_t partition, int64_t *offset, int64_t *parts_done,
                                     char *errstr, size_t errstr_size)
{
    ddb_store_t *ds = ddb_store(st);
    ddb_batch_t key;
    marker_t mk;
    hc_err_t err;

    memset(&key, 0, sizeof(key));
    marker_key_of(&key, group, topic);
    err = marker_read(ds, &key, &mk, errstr, errstr_size);
    *parts_done = mk.present ? mk.done : -1;
    marker_fini(&mk);
    if (err != HC_OK) {
        return err;
    }
    return offsets_read(ds, group, topic, &partition, 1, offset, errstr, errstr_size);
}
