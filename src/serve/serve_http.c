/* The read API on libmicrohttpd (see include/serve/hotcount/serve.h for the routes and the
 * caching).
 *
 * Request URIs are parsed from the raw URI that MHD hands to the URI log callback, not from the
 * `url` argument of the handler: MHD unescapes that one into a C string, so "/v1/likes/a%00b"
 * would arrive as "/v1/likes/a" and answer for the wrong post. Decoding here keeps every byte
 * and lets a malformed escape be a 404 (path) or 400 (query). */
#include "hotcount/serve.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "hotcount/clock.h"
#include "hotcount/event.h"
#include "hotcount/fnv.h"
#include "hotcount/http_guard.h"
#include "hotcount/listen.h"
#include "hotcount/log.h"
#include "hotcount/metric_defs.h"
#include "hotcount/metrics.h"
#include "hotcount/serve_cache.h"
#include "hotcount/serve_hot.h"
#include "hotcount/serve_parse.h"
#include "hotcount/serve_stats.h"
#include "hotcount/store.h"

#define LISTEN_BACKLOG 512 /* bounded: the kernel drops SYNs past it, we never see them */
#define CONNECTION_TIMEOUT_S 30u
#define RESERVED_CONNECTIONS 16u /* past serve.max.connections, for probes: 1 s each */
#define RESERVED_TIMEOUT_MS 1000
/* Answered even from an address at serve.max.connections.per.ip (http_guard.h, probation). */
static const char *const probe_paths[] = {"/healthz", NULL};
#define TOP_DEFAULT 10
#define STATS_TOP 10
#define STATS_TOPIC_MAX 20 /* topic.hotkeys records looked at for /v1/stats' hot_set */
#define STATS_TTL_MS 1000  /* the page polls once a second */
#define STATS_REFRESH_MS 1000
#define SCRAPE_CONNECT_MS 200
#define SCRAPE_TOTAL_MS 500
#define HOTKEYS_ANSWER_MAX 256 /* posts in one GET /v1/hotkeys, hottest first */

/* Status codes counted in hotcount_serve_requests_total{code}; anything else is "other". */
static const unsigned codes[] = {200, 304, 400, 404, 405, 500, 503};
#define CODE_COUNT (sizeof(codes) / sizeof(codes[0]))

static const double latency_bounds[] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
                                        0.025,  0.05,    0.1,    0.25,  0.5,    1,     2.5};

typedef enum read_kind { READ_LIKES, READ_TOP, READ_KIND_COUNT } read_kind_t;
static const char *const read_kind_names[] = {"likes", "top"};

struct hc_serve {
    const hc_config_t *cfg; /* borrowed */
    struct MHD_Daemon *daemon;
    hc_http_guard_t *guard; /* owned */
    int port;
    char cache_control[96];

    hc_store_t *st; /* owned; used only under store_lock: point reads */
    pthread_mutex_t store_lock;
    /* owned; used only under top_lock, by the top cache's one load in flight: a connection of
     * its own, so a top query (an index walk, or a SCAN of every Redis key) never holds the lock
     * point reads need (issue 25, item 5) */
    hc_store_t *st_top;
    pthread_mutex_t top_lock;

    hc_serve_cache_t *likes;           /* owned: post_id -> likes_value_t */
    hc_serve_cache_t *top;             /* owned: "top" -> top_value_t + rows */
    hc_serve_cache_t *stats;           /* owned: "stats" -> JSON text */
    hc_serve_stats_t *staged;          /* owned: its refresher scrapes; rendered only from the stats
                                          cache's (coalesced) load */
    hc_serve_hot_t *hot;               /* owned: read-hot promotion, sampled before srv->likes */
    pthread_mutex_t topic_lock;        /* guards the two below: set while the HTTP threads run */
    hc_serve_topic_list_fn topic_list; /* borrowed; NULL: no topic.hotkeys */
    void *topic_opaque;
    int64_t hot_ttl_ms; /* max(serve.hot.ttl.ms, serve.ttl.ms) */

    atomic_uint_fast64_t requests[CODE_COUNT + 1]; /* last: other */
    atomic_uint_fast64_t store_reads[READ_KIND_COUNT];
    atomic_uint_fast64_t store_read_errors;
    hc_histogram_t latency;
};

typedef struct likes_value {
    int64_t likes;
    int64_t as_of; /* wall ms when the store read started */
} likes_value_t;

typedef struct top_value {
    int64_t as_of;
    size_t count;
    /* hc_store_row_t rows[count] follow */
} top_value_t;

typedef struct request {
    char *uri; /* owned: raw, as received */
    struct timespec start;
    bool headers_seen;
    bool answered; /* a response is queued */
} request_t;

/* ---- small helpers ------------------------------------------------------------------------- */

static int64_t mono_us(void *opaque)
{
    struct timespec t;
    (void)opaque;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000 + t.tv_nsec / 1000;
}

static double seconds_since(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t0->tv_sec) + (double)(t.tv_nsec - t0->tv_nsec) / 1e9;
}

static uint64_t etag_add(uint64_t h, const char *id, size_t len, int64_t likes)
{
    h = hc_fnv1a64(h, id, len);
    h = hc_fnv1a64(h, "\0", 1);
    return hc_fnv1a64(h, &likes, sizeof(likes));
}

/* Weak comparison (RFC 9110 13.1.2): W/ is ignored on both sides; "*" matches anything. */
static bool etag_matches(const char *if_none_match, const char *etag)
{
    const char *tag = etag + 2; /* ours is always W/"…" */
    size_t tag_len = strlen(tag);
    for (const char *p = if_none_match; *p;) {
        p += strspn(p, " \t,");
        if (*p == '*') {
            return true;
        }
        if (p[0] == 'W' && p[1] == '/') {
            p += 2;
        }
        size_t n = strcspn(p, ",");
        while (n > 0 && (p[n - 1] == ' ' || p[n - 1] == '\t')) {
            n--;
        }
        if (n == tag_len && memcmp(p, tag, n) == 0) {
            return true;
        }
        p += strcspn(p, ",");
    }
    return false;
}

/* ---- responses ----------------------------------------------------------------------------- */

static void count_status(hc_serve_t *srv, unsigned status)
{
    size_t i = 0;
    while (i < CODE_COUNT && codes[i] != status) {
        i++;
    }
    atomic_fetch_add_explicit(&srv->requests[i], 1, memory_order_relaxed);
}

/* Queues body (taken over and freed when must_free) with status. etag: NULL for none; then
 * cacheable selects Cache-Control public/max-age or no-store. close_after: Connection: close. */
static enum MHD_Result respond_ex(hc_serve_t *srv, struct MHD_Connection *conn, unsigned status,
                                  const char *ctype, char *body, size_t len, bool must_free,
                                  const char *etag, bool cacheable, bool close_after)
{
    struct MHD_Response *resp = MHD_create_response_from_buffer(
        len, body, must_free ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
    if (!resp) {
        if (must_free) {
            free(body);
        }
        return MHD_NO;
    }
    if (ctype) {
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL,
                            cacheable ? srv->cache_control : "no-store");
    if (etag) {
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ETAG, etag);
    }
    if (status == MHD_HTTP_METHOD_NOT_ALLOWED) {
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
    }
    if (status == MHD_HTTP_SERVICE_UNAVAILABLE) {
        MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, "1");
    }
    if (close_after) {
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    }
    count_status(srv, status);
    enum MHD_Result ret = MHD_queue_response(conn, status, resp);
    MHD_destroy_response(resp);
    return ret;
}

static enum MHD_Result respond(hc_serve_t *srv, struct MHD_Connection *conn, unsigned status,
                               const char *ctype, char *body, size_t len, bool must_free,
                               const char *etag, bool cacheable)
{
    return respond_ex(srv, conn, status, ctype, body, len, must_free, etag, cacheable, false);
}

static enum MHD_Result respond_error_ex(hc_serve_t *srv, struct MHD_Connection *conn,
                                        unsigned status, const char *msg, bool close_after)
{
    json_t *obj = json_pack("{s:s}", "error", msg);
    char *body = obj ? json_dumps(obj, JSON_COMPACT) : NULL;
    json_decref(obj);
    if (!body) {
        return MHD_NO;
    }
    return respond_ex(srv, conn, status, "application/json", body, strlen(body), true, NULL, false,
                      close_after);
}

static enum MHD_Result respond_error(hc_serve_t *srv, struct MHD_Connection *conn, unsigned status,
                                     const char *msg)
{
    return respond_error_ex(srv, conn, status, msg, false);
}

static enum MHD_Result respond_store_error(hc_serve_t *srv, struct MHD_Connection *conn,
                                           hc_err_t err, const char *errstr)
{
    hc_log(HC_LOG_WARN, "serve", "store read failed: %s", errstr);
    return respond_error(srv, conn,
                         err == HC_ERR_TRANSIENT ? MHD_HTTP_SERVICE_UNAVAILABLE
                                                 : MHD_HTTP_INTERNAL_SERVER_ERROR,
                         "the store could not be read; retry");
}

/* A JSON 200 with its ETag, or a 304 when the client already holds that ETag. */
static enum MHD_Result respond_json(hc_serve_t *srv, struct MHD_Connection *conn, json_t *json,
                                    uint64_t etag_hash)
{
    char etag[32];
    snprintf(etag, sizeof(etag), "W/\"%016" PRIx64 "\"", etag_hash);
    const char *inm =
        MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_IF_NONE_MATCH);
    if (inm && etag_matches(inm, etag)) {
        json_decref(json);
        return respond(srv, conn, MHD_HTTP_NOT_MODIFIED, NULL, (char *)"", 0, false, etag, true);
    }
    char *body = json_dumps(json, JSON_COMPACT);
    json_decref(json);
    if (!body) {
        return respond_error(srv, conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory");
    }
    return respond(srv, conn, MHD_HTTP_OK, "application/json", body, strlen(body), true, etag,
                   true);
}

/* ---- loaders (run by the caches, one at a time per key) ------------------------------------ */

static hc_err_t load_likes(void *opaque, const char *key, size_t key_len, void **value,
                           size_t *value_len, char *errstr, size_t errstr_size)
{
    hc_serve_t *srv = opaque;
    likes_value_t *v = malloc(sizeof(*v));
    if (!v) {
        hc_errstr_set(errstr, errstr_size, "out of memory");
        return HC_ERR_FATAL;
    }
    v->as_of = hc_wall_ms();
    pthread_mutex_lock(&srv->store_lock);
    hc_err_t err = hc_store_get(srv->st, &key, &key_len, 1, &v->likes, errstr, errstr_size);
    pthread_mutex_unlock(&srv->store_lock);
    atomic_fetch_add_explicit(&srv->store_reads[READ_LIKES], 1, memory_order_relaxed);
    if (err != HC_OK) {
        atomic_fetch_add_explicit(&srv->store_read_errors, 1, memory_order_relaxed);
        free(v);
        return err;
    }
    *value = v;
    *value_len = sizeof(*v);
    return HC_OK;
}

static hc_err_t load_top(void *opaque, const char *key, size_t key_len, void **value,
                         size_t *value_len, char *errstr, size_t errstr_size)
{
    hc_serve_t *srv = opaque;
    (void)key;
    (void)key_len;
    size_t max = (size_t)srv->cfg->serve_top_max;
    size_t size = sizeof(top_value_t) + max * sizeof(hc_store_row_t);
    top_value_t *v = malloc(size);
    if (!v) {
        hc_errstr_set(errstr, errstr_size, "out of memory");
        return HC_ERR_FATAL;
    }
    hc_store_row_t *rows = (hc_store_row_t *)(v + 1);
    v->as_of = hc_wall_ms();
    pthread_mutex_lock(&srv->top_lock);
    hc_err_t err = hc_store_top(srv->st_top, max, rows, &v->count, errstr, errstr_size);
    pthread_mutex_unlock(&srv->top_lock);
    atomic_fetch_add_explicit(&srv->store_reads[READ_TOP], 1, memory_order_relaxed);
    if (err != HC_OK) {
        atomic_fetch_add_explicit(&srv->store_read_errors, 1, memory_order_relaxed);
        free(v);
        return err;
    }
    *value = v;
    *value_len = sizeof(top_value_t) + v->count * sizeof(hc_store_row_t);
    return HC_OK;
}

static hc_err_t get_top(hc_serve_t *srv, top_value_t **top, char *errstr, size_t errstr_size)
{
    void *v = NULL;
    size_t len = 0;
    int64_t at;
    hc_err_t err = hc_serve_cache_get(srv->top, "top", 3, &v, &len, &at, errstr, errstr_size);
    *top = v;
    return err;
}

/* Up to max hot records of topic.hotkeys into recs (none without a topic); returns how many
 * the topic has. */
typedef struct topic_recs {
    hc_hotkey_record_t *recs;
    size_t n;
} topic_recs_t;

static void take_topic_rec(void *opaque, const hc_hotkey_record_t *rec)
{
    topic_recs_t *t = opaque;
    t->recs[t->n++] = *rec;
}

static size_t topic_hot_records(hc_serve_t *srv, hc_hotkey_record_t *recs, size_t max, size_t *n)
{
    topic_recs_t t = {.recs = recs, .n = 0};
    size_t total = 0;
    pthread_mutex_lock(&srv->topic_lock);
    if (srv->topic_list) {
        total = srv->topic_list(srv->topic_opaque, max, take_topic_rec, &t);
    }
    pthread_mutex_unlock(&srv->topic_lock);
    *n = t.n;
    return total;
}

static hc_err_t load_stats(void *opaque, const char *key, size_t key_len, void **value,
                           size_t *value_len, char *errstr, size_t errstr_size)
{
    hc_serve_t *srv = opaque;
    (void)key;
    (void)key_len;
    top_value_t *top = NULL;
    hc_err_t err = get_top(srv, &top, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    size_t n = top->count < STATS_TOP ? top->count : STATS_TOP;
    hc_hotkey_record_t *recs = malloc(STATS_TOPIC_MAX * sizeof(*recs));
    size_t rn = 0;
    if (recs) {
        topic_hot_records(srv, recs, STATS_TOPIC_MAX, &rn);
    }
    char *json = hc_serve_stats_render(srv->staged, (const hc_store_row_t *)(top + 1), n, recs, rn,
                                       hc_now_ms(), hc_wall_ms());
    free(recs);
    free(top);
    if (!json) {
        hc_errstr_set(errstr, errstr_size, "out of memory");
        return HC_ERR_FATAL;
    }
    *value = json;
    *value_len = strlen(json);
    return HC_OK;
}

/* ---- routes -------------------------------------------------------------------------------- */

static json_t *likes_json(const char *id, size_t len, int64_t likes, int64_t as_of)
{
    return json_pack("{s:s%,s:I,s:I}", "post_id", id, len, "likes", (json_int_t)likes, "as_of",
                     (json_int_t)as_of);
}

/* Every read is counted by the read-hot sampler first, cache hit or not: it decides the TTL. */
static hc_err_t get_likes(hc_serve_t *srv, const char *id, size_t len, likes_value_t *out,
                          char *errstr, size_t errstr_size)
{
    void *v = NULL;
    size_t vlen = 0;
    int64_t at;
    int64_t ttl_ms = hc_serve_hot_read(srv->hot, id, len);
    hc_err_t err = hc_serve_cache_get_ttl(srv->likes, id, len, ttl_ms * 1000, &v, &vlen, &at,
                                          errstr, errstr_size);
    if (err == HC_OK) {
        memcpy(out, v, sizeof(*out));
        free(v);
    }
    return err;
}

static enum MHD_Result route_one(hc_serve_t *srv, struct MHD_Connection *conn, const char *raw,
                                 size_t raw_len)
{
    char id[HC_POST_ID_MAX + 1];
    size_t len = 0;
    if (!hc_serve_parse_one(raw, raw_len, id, &len)) {
        return respond_error(srv, conn, MHD_HTTP_NOT_FOUND,
                             "not a post id (1..256 bytes of UTF-8, no control characters)");
    }
    likes_value_t v;
    char errstr[256];
    hc_err_t err = get_likes(srv, id, len, &v, errstr, sizeof(errstr));
    if (err != HC_OK) {
        return respond_store_error(srv, conn, err, errstr);
    }
    json_t *json = likes_json(id, len, v.likes, v.as_of);
    if (!json) {
        return respond_error(srv, conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory");
    }
    return respond_json(srv, conn, json, etag_add(HC_FNV1A64_BASIS, id, len, v.likes));
}

static enum MHD_Result route_many(hc_serve_t *srv, struct MHD_Connection *conn, const char *query)
{
    hc_serve_ids_t it;
    hc_serve_ids_status_t st = hc_serve_parse_ids(query, srv->cfg->serve_max_ids, &it);
    if (st == HC_IDS_MISSING) {
        return respond_error(srv, conn, MHD_HTTP_BAD_REQUEST,
                             "give the post ids once, as ?ids=a,b,c");
    }
    if (st == HC_IDS_TOO_MANY) {
        char msg[96];
        snprintf(msg, sizeof(msg), "at most %" PRId64 " ids per request (serve.max.ids)",
                 srv->cfg->serve_max_ids);
        return respond_error(srv, conn, MHD_HTTP_BAD_REQUEST, msg);
    }
    json_t *arr = json_array();
    if (!arr) {
        return respond_error(srv, conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory");
    }
    uint64_t etag = HC_FNV1A64_BASIS;
    char id[HC_POST_ID_MAX + 1];
    size_t len = 0;
    bool ok = false;
    while (hc_serve_next_id(&it, id, &len, &ok)) {
        if (!ok) {
            json_decref(arr);
            return respond_error(srv, conn, MHD_HTTP_BAD_REQUEST,
                                 "a malformed post id in ids (1..256 bytes of UTF-8, no control "
                                 "characters, URL-encoded)");
        }
        likes_value_t v;
        char errstr[256];
        hc_err_t err = get_likes(srv, id, len, &v, errstr, sizeof(errstr));
        if (err != HC_OK) {
            json_decref(arr);
            return respond_store_error(srv, conn, err, errstr);
        }
        json_array_append_new(arr, likes_json(id, len, v.likes, v.as_of));
        etag = etag_add(etag, id, len, v.likes);
    }
    return respond_json(srv, conn, arr, etag);
}

static enum MHD_Result route_top(hc_serve_t *srv, struct MHD_Connection *conn, const char *query)
{
    uint64_t n = 0;
    if (!hc_serve_parse_top_n(query, srv->cfg->serve_top_max, &n)) {
        char msg[96];
        snprintf(msg, sizeof(msg), "n must be a whole number within 1..%" PRId64 " (serve.top.max)",
                 srv->cfg->serve_top_max);
        return respond_error(srv, conn, MHD_HTTP_BAD_REQUEST, msg);
    }
    top_value_t *top = NULL;
    char errstr[256];
    hc_err_t err = get_top(srv, &top, errstr, sizeof(errstr));
    if (err != HC_OK) {
        return respond_store_error(srv, conn, err, errstr);
    }
    const hc_store_row_t *rows = (const hc_store_row_t *)(top + 1);
    json_t *arr = json_array();
    uint64_t etag = HC_FNV1A64_BASIS;
    for (size_t i = 0; arr && i < top->count && i < n; i++) {
        json_array_append_new(
            arr, likes_json(rows[i].post_id, rows[i].post_id_len, rows[i].likes, top->as_of));
        etag = etag_add(etag, rows[i].post_id, rows[i].post_id_len, rows[i].likes);
    }
    free(top);
    if (!arr) {
        return respond_error(srv, conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory");
    }
    return respond_json(srv, conn, arr, etag);
}

static enum MHD_Result route_stats(hc_serve_t *srv, struct MHD_Connection *conn)
{
    void *v = NULL;
    size_t len = 0;
    int64_t at;
    char errstr[256];
    hc_err_t err =
        hc_serve_cache_get(srv->stats, "stats", 5, &v, &len, &at, errstr, sizeof(errstr));
    if (err != HC_OK) {
        return respond_store_error(srv, conn, err, errstr);
    }
    return respond(srv, conn, MHD_HTTP_OK, "application/json", v, len, true, NULL, false);
}

static const char *const hot_source_names[] = {"reads", "topic"};

/* The read-hot posts (serve_hot.h), hottest first, at most HOTKEYS_ANSWER_MAX, with the
 * thresholds they are judged by. Never cached: it is the sampler's state, not the store's. */
static enum MHD_Result route_hotkeys(hc_serve_t *srv, struct MHD_Connection *conn)
{
    hc_serve_hot_post_t *posts = malloc(HOTKEYS_ANSWER_MAX * sizeof(*posts));
    json_t *obj = json_object(), *arr = json_array();
    if (!posts || !obj || !arr) {
        free(posts);
        json_decref(obj);
        json_decref(arr);
        return respond_error(srv, conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory");
    }
    size_t n = 0;
    size_t total = hc_serve_hot_list(srv->hot, posts, HOTKEYS_ANSWER_MAX, &n);
    /* since: the sampler's clock is monotonic; shown as wall time, as as_of is */
    int64_t wall_minus_mono = hc_wall_ms() - hc_now_ms();
    for (size_t i = 0; i < n; i++) {
        const hc_serve_hot_post_t *p = &posts[i];
        json_array_append_new(arr, json_pack("{s:s%,s:f,s:I,s:s,s:b,s:I}", "post_id", p->post_id,
                                             p->post_id_len, "rate", round(p->rate * 10.0) / 10.0,
                                             "since", (json_int_t)(p->since_ms + wall_minus_mono),
                                             "source", hot_source_names[p->source], "cooling",
                                             p->cooling, "ttl_ms", (json_int_t)srv->hot_ttl_ms));
    }
    /* then the posts topic.hotkeys makes hot that no read has listed yet (a declaration before
     * its first read): source "topic", with the topic's own source, rate and expiry */
    hc_hotkey_record_t *recs = malloc(HOTKEYS_ANSWER_MAX * sizeof(*recs));
    size_t rn = 0;
    size_t topic_total = recs ? topic_hot_records(srv, recs, HOTKEYS_ANSWER_MAX, &rn) : 0;
    size_t listed = n;
    for (size_t r = 0; r < rn; r++) {
        const hc_hotkey_record_t *rec = &recs[r];
        bool seen = false;
        for (size_t i = 0; i < n && !seen; i++) {
            seen = posts[i].post_id_len == rec->post_id_len &&
                   memcmp(posts[i].post_id, rec->post_id, rec->post_id_len) == 0;
        }
        /* a post hot by both of the topic's sources: listed once, the first record seen */
        for (size_t q = 0; q < r && !seen; q++) {
            seen = recs[q].post_id_len == rec->post_id_len &&
                   memcmp(recs[q].post_id, rec->post_id, rec->post_id_len) == 0;
        }
        if (seen || listed >= HOTKEYS_ANSWER_MAX) {
            continue;
        }
        json_t *row = json_pack("{s:s%,s:f,s:I,s:s,s:s,s:b,s:I}", "post_id", rec->post_id,
                                rec->post_id_len, "rate", round(rec->rate * 10.0) / 10.0, "since",
                                (json_int_t)rec->since_ms, "source", "topic", "topic_source",
                                rec->source == HC_HOTKEY_DECLARED ? "declared" : "detected",
                                "cooling", false, "ttl_ms", (json_int_t)srv->hot_ttl_ms);
        if (row) { /* a post id that is not UTF-8 cannot be a JSON string: left out */
            json_object_set_new(row, "expires",
                                rec->expires_ms == HC_HOTSET_NONE
                                    ? json_null()
                                    : json_integer((json_int_t)rec->expires_ms));
            json_array_append_new(arr, row);
            listed++;
        }
    }
    free(recs);
    free(posts);
    const hc_config_t *cfg = srv->cfg;
    json_object_set_new(obj, "posts", arr);
    json_object_set_new(obj, "total", json_integer((json_int_t)total));
    json_object_set_new(obj, "topic_total", json_integer((json_int_t)topic_total));
    json_object_set_new(obj, "enter_rate", json_integer(cfg->serve_hot_enter_rate));
    json_object_set_new(obj, "leave_rate", json_integer(cfg->serve_hot_leave_rate));
    json_object_set_new(obj, "dwell_ms", json_integer(cfg->serve_hot_dwell_ms));
    json_object_set_new(obj, "ttl_ms", json_integer(cfg->serve_ttl_ms));
    json_object_set_new(obj, "hot_ttl_ms", json_integer(srv->hot_ttl_ms));
    char *body = json_dumps(obj, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(15));
    json_decref(obj);
    if (!body) {
        return respond_error(srv, conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory");
    }
    return respond(srv, conn, MHD_HTTP_OK, "application/json", body, strlen(body), true, NULL,
                   false);
}

/* # HELP and # TYPE of one family of serve's page, as the registry declares it
 * (hotcount/metric_defs.h): no metric name is written here. */
static void render_family(FILE *f, hc_metric_id_t id)
{
    const hc_metric_def_t *def = &hc_metric_defs[id];
    assert(def->page == HC_METRIC_PAGE_SERVE);
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", def->name, def->help, def->name,
            hc_metric_type_str(def->type));
}

static void render_counter(FILE *f, hc_metric_id_t id, uint64_t v)
{
    render_family(f, id);
    fprintf(f, "%s %" PRIu64 "\n", hc_metric_defs[id].name, v);
}

static void render_gauge(FILE *f, hc_metric_id_t id, uint64_t v)
{
    render_family(f, id);
    fprintf(f, "%s %" PRIu64 "\n", hc_metric_defs[id].name, v);
}

/* name{key="value"} v for each of n values of one label */
static void render_labelled(FILE *f, hc_metric_id_t id, const char *key, const char *value,
                            uint64_t v)
{
    fprintf(f, "%s{%s=\"%s\"} %" PRIu64 "\n", hc_metric_defs[id].name, key, value, v);
}

static enum MHD_Result route_metrics(hc_serve_t *srv, struct MHD_Connection *conn)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) {
        return respond_error(srv, conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory");
    }
    hc_serve_cache_stats_t cs;
    hc_serve_cache_get_stats(srv->likes, &cs);
    render_gauge(f, HC_M_SERVE_UP, 1);
    render_family(f, HC_M_SERVE_REQUESTS);
    for (size_t i = 0; i <= CODE_COUNT; i++) {
        char code[16];
        snprintf(code, sizeof(code), i < CODE_COUNT ? "%u" : "other",
                 i < CODE_COUNT ? codes[i] : 0);
        render_labelled(f, HC_M_SERVE_REQUESTS, "code", code,
                        (uint64_t)atomic_load_explicit(&srv->requests[i], memory_order_relaxed));
    }
    render_family(f, HC_M_SERVE_STORE_READS);
    for (size_t i = 0; i < READ_KIND_COUNT; i++) {
        render_labelled(f, HC_M_SERVE_STORE_READS, "kind", read_kind_names[i],
                        (uint64_t)atomic_load_explicit(&srv->store_reads[i], memory_order_relaxed));
    }
    render_counter(f, HC_M_SERVE_STORE_READ_ERRORS,
                   atomic_load_explicit(&srv->store_read_errors, memory_order_relaxed));
    hc_http_guard_stats_t gs;
    hc_http_guard_get_stats(srv->guard, &gs);
    render_counter(f, HC_M_SERVE_CONNECTIONS_REFUSED, gs.refused_total);
    render_counter(f, HC_M_SERVE_CONNECTIONS_TIMED_OUT, gs.timed_out);
    render_counter(f, HC_M_SERVE_CONNECTIONS_EVICTED, gs.evicted);
    render_counter(f, HC_M_SERVE_BAD_FRAMING, gs.bad_framing);
    render_gauge(f, HC_M_SERVE_CONNECTIONS_OPEN, gs.open);
    render_counter(f, HC_M_SERVE_CACHE_HITS, cs.hits);
    render_counter(f, HC_M_SERVE_CACHE_COALESCED, cs.coalesced);
    render_counter(f, HC_M_SERVE_CACHE_EVICTIONS, cs.evictions);
    render_gauge(f, HC_M_SERVE_CACHE_ENTRIES, cs.entries);
    hc_serve_hot_stats_t hs = hc_serve_hot_stats(srv->hot);
    render_gauge(f, HC_M_SERVE_HOT_POSTS, hs.posts);
    render_family(f, HC_M_SERVE_HOT_PROMOTIONS);
    for (size_t i = 0; i < 2; i++) {
        render_labelled(f, HC_M_SERVE_HOT_PROMOTIONS, "source", hot_source_names[i],
                        (uint64_t)hs.promotions[i]);
    }
    render_family(f, HC_M_SERVE_HOT_DEMOTIONS);
    for (size_t i = 0; i < 2; i++) {
        render_labelled(f, HC_M_SERVE_HOT_DEMOTIONS, "source", hot_source_names[i],
                        (uint64_t)hs.demotions[i]);
    }
    render_counter(f, HC_M_SERVE_HOT_FLAPS, (uint64_t)hs.flaps);
    const char *lat = hc_metric_defs[HC_M_SERVE_REQUEST_SECONDS].name;
    render_family(f, HC_M_SERVE_REQUEST_SECONDS);
    for (size_t i = 0; i <= srv->latency.bound_count; i++) {
        char le[32];
        if (i < srv->latency.bound_count) {
            snprintf(le, sizeof(le), "%g", srv->latency.bounds[i]);
        } else {
            snprintf(le, sizeof(le), "+Inf");
        }
        fprintf(f, "%s_bucket{le=\"%s\"} %" PRIu64 "\n", lat, le,
                hc_histogram_cumulative(&srv->latency, i));
    }
    fprintf(f, "%s_sum %.9g\n%s_count %" PRIu64 "\n", lat, hc_histogram_sum(&srv->latency), lat,
            hc_histogram_count(&srv->latency));
    if (fclose(f) != 0 || !text) {
        free(text);
        return respond_error(srv, conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory");
    }
    return respond(srv, conn, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8", text, len,
                   true, NULL, false);
}

/* GET and HEAD have no body to read: answered once the headers are in. */
static enum MHD_Result handle(void *cls, struct MHD_Connection *conn, const char *url,
                              const char *method, const char *version, const char *upload_data,
                              size_t *upload_data_size, void **req_cls)
{
    hc_serve_t *srv = cls;
    request_t *req = *req_cls;
    (void)url;
    (void)version;
    (void)upload_data;

    if (req && req->answered) {
        /* Never reached for a request we refused (its body is not read), but MHD must not be
         * handed a second response. */
        *upload_data_size = 0;
        return MHD_YES;
    }
    /* Framing first, on the first call, before MHD reads any body: a request that carries or
     * announces one is answered 400 and its connection closed, so the bytes after its headers
     * (a smuggled second request) are never parsed. */
    const char *why = NULL;
    bool first = !req || !req->headers_seen;
    unsigned bad =
        first ? hc_http_guard_check_request(srv->guard, conn, req ? req->uri : url, &why) : 0;
    if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0) {
        if (req) {
            req->answered = true;
        }
        /* a refused method's body is not read either: then the connection closes */
        return respond_error_ex(srv, conn, MHD_HTTP_METHOD_NOT_ALLOWED, "method not allowed",
                                bad != 0);
    }
    if (bad != 0) {
        if (req) {
            req->answered = true;
        }
        char msg[128];
        snprintf(msg, sizeof(msg), "%s: %s",
                 bad == MHD_HTTP_BAD_REQUEST ? "bad request" : "refused", why);
        return respond_error_ex(srv, conn, bad, msg, true);
    }
    if (!req || !req->uri) {
        return respond_error(srv, conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory");
    }
    /* Answer on the second call, once the request is complete: a response queued while MHD is
     * still reading the request makes it close the connection, and keep-alive is most of what a
     * cheap cached read costs. */
    if (!req->headers_seen) {
        req->headers_seen = true;
        return MHD_YES;
    }
    if (*upload_data_size != 0) {
        /* A body despite the framing check (cannot happen: no length, no chunking): refused. */
        *upload_data_size = 0;
        req->answered = true;
        return respond_error_ex(srv, conn, MHD_HTTP_BAD_REQUEST, "a GET takes no body", true);
    }
    req->answered = true;
    /* on the heap: 8 KiB of query is a lot of a pool thread's stack */
    hc_serve_uri_t *u = malloc(sizeof(*u));
    if (!u) {
        return respond_error(srv, conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory");
    }
    hc_serve_parse_uri(req->uri, u);
    enum MHD_Result ret;
    switch (u->route) {
    case HC_ROUTE_QUERY_TOO_LONG:
        ret = respond_error(srv, conn, MHD_HTTP_BAD_REQUEST, "query too long");
        break;
    case HC_ROUTE_ONE:
        ret = route_one(srv, conn, u->tail, u->tail_len);
        break;
    case HC_ROUTE_MANY:
        ret = route_many(srv, conn, u->query);
        break;
    case HC_ROUTE_TOP:
        ret = route_top(srv, conn, u->query);
        break;
    case HC_ROUTE_STATS:
        ret = route_stats(srv, conn);
        break;
    case HC_ROUTE_HOTKEYS:
        ret = route_hotkeys(srv, conn);
        break;
    case HC_ROUTE_PAGE:
        ret = respond(srv, conn, MHD_HTTP_OK, "text/html; charset=utf-8",
                      (char *)(uintptr_t)hc_serve_live_html, hc_serve_live_html_len, false, NULL,
                      false);
        break;
    case HC_ROUTE_METRICS:
        ret = route_metrics(srv, conn);
        break;
    case HC_ROUTE_HEALTHZ:
        ret = respond(srv, conn, MHD_HTTP_OK, "text/plain; charset=utf-8", (char *)"ok\n", 3, false,
                      NULL, false);
        break;
    default:
        ret = respond_error(srv, conn, MHD_HTTP_NOT_FOUND, "not found");
        break;
    }
    free(u);
    return ret;
}

/* serve's own libmicrohttpd options, past the guard's. A %00 in the path: libmicrohttpd 1.0
 * refuses it with 400 unless told otherwise, because a handler reading the decoded url as a C
 * string would see it cut short. handle() never reads that url: it parses the raw target on_uri
 * keeps (hc_serve_parse_uri), which refuses a post id holding a control byte (%00 to %1F alike)
 * with 404, as serve did on 0.9.75. Value 1 hands handle() a NULL url then, never a cut one. */
static struct MHD_OptionItem serve_mhd_options[] = {
#if MHD_VERSION >= 0x01000201
    {MHD_OPTION_ALLOW_BIN_ZERO_IN_URI_PATH, 1, NULL},
#endif
    {MHD_OPTION_END, 0, NULL},
};

static void *on_uri(void *cls, const char *uri, struct MHD_Connection *conn)
{
    (void)cls;
    (void)conn;
    request_t *req = calloc(1, sizeof(*req));
    if (req) {
        clock_gettime(CLOCK_MONOTONIC, &req->start);
        req->uri = strdup(uri);
    }
    return req;
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **req_cls,
                         enum MHD_RequestTerminationCode toe)
{
    hc_serve_t *srv = cls;
    request_t *req = *req_cls;
    if (!req) {
        hc_http_guard_request_done(srv->guard, conn);
        return;
    }
    hc_http_guard_request_done(srv->guard, conn);
    if (!req->answered && toe == MHD_REQUEST_TERMINATED_WITH_ERROR) {
        /* libmicrohttpd answered it itself, before handle() saw it: a request its strict parsing
         * refuses (hc_http_guard_mhd_options: an HTTP/1.1 request without Host, an ambiguous
         * length, a folded header line). Counted by the status it queued, as ours are. */
        const union MHD_ConnectionInfo *info =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_HTTP_STATUS);
        if (info) {
            count_status(srv, info->http_status);
        }
    }
    if (toe == MHD_REQUEST_TERMINATED_COMPLETED_OK) {
        hc_histogram_observe(&srv->latency, seconds_since(&req->start));
    }
    free(req->uri);
    free(req);
    *req_cls = NULL;
}

/* ---- start and stop ------------------------------------------------------------------------ */

static hc_err_t new_cache(hc_serve_t *srv, int64_t ttl_ms, size_t max, hc_serve_load_fn load,
                          hc_serve_cache_t **out, char *errstr, size_t errstr_size)
{
    hc_serve_cache_opts_t o = {.ttl = ttl_ms * 1000,
                               .max_entries = max,
                               .load = load,
                               .load_opaque = srv,
                               .clock = mono_us,
                               .clock_opaque = NULL};
    return hc_serve_cache_new(&o, out, errstr, errstr_size);
}

static int64_t mono_ms(void *opaque)
{
    (void)opaque;
    return hc_now_ms();
}

static hc_err_t new_hot(hc_serve_t *srv, char *errstr, size_t errstr_size)
{
    const hc_config_t *cfg = srv->cfg;
    srv->hot_ttl_ms =
        cfg->serve_hot_ttl_ms > cfg->serve_ttl_ms ? cfg->serve_hot_ttl_ms : cfg->serve_ttl_ms;
    hc_serve_hot_opts_t o = {.enter_rate = (double)cfg->serve_hot_enter_rate,
                             .leave_rate = (double)cfg->serve_hot_leave_rate,
                             .dwell_ms = cfg->serve_hot_dwell_ms,
                             .ttl_ms = cfg->serve_ttl_ms,
                             .hot_ttl_ms = srv->hot_ttl_ms,
                             .max = (size_t)cfg->serve_hot_max,
                             .window_ms = HC_SERVE_HOT_WINDOW_MS,
                             .now_ms = mono_ms,
                             .clock_opaque = NULL};
    return hc_serve_hot_new(&o, &srv->hot, errstr, errstr_size);
}

void hc_serve_set_topic(hc_serve_t *srv, hc_serve_hot_topic_fn is_hot, hc_serve_topic_list_fn list,
                        void *opaque)
{
    pthread_mutex_lock(&srv->topic_lock);
    srv->topic_list = list;
    srv->topic_opaque = opaque;
    pthread_mutex_unlock(&srv->topic_lock);
    hc_serve_hot_set_topic(srv->hot, is_hot, opaque);
}

hc_err_t hc_serve_start(const hc_config_t *cfg, hc_serve_t **out, char *errstr, size_t errstr_size)
{
    *out = NULL;
    hc_serve_t *srv = calloc(1, sizeof(*srv));
    if (!srv) {
        hc_errstr_set(errstr, errstr_size, "out of memory");
        return HC_ERR_FATAL;
    }
    srv->cfg = cfg;
    int64_t max_age = (cfg->serve_ttl_ms + 999) / 1000;
    snprintf(srv->cache_control, sizeof(srv->cache_control),
             "public, max-age=%" PRId64 ", s-maxage=%" PRId64, max_age, max_age);
    hc_err_t err = hc_histogram_init(&srv->latency, latency_bounds,
                                     sizeof(latency_bounds) / sizeof(latency_bounds[0]));
    if (err != HC_OK) {
        hc_errstr_set(errstr, errstr_size, "bad latency buckets");
        goto free_srv;
    }
    if (pthread_mutex_init(&srv->store_lock, NULL) != 0) {
        hc_errstr_set(errstr, errstr_size, "cannot create a mutex");
        err = HC_ERR_FATAL;
        goto free_srv;
    }
    if (pthread_mutex_init(&srv->topic_lock, NULL) != 0) {
        pthread_mutex_destroy(&srv->store_lock);
        hc_errstr_set(errstr, errstr_size, "cannot create a mutex");
        err = HC_ERR_FATAL;
        goto free_srv;
    }
    if (pthread_mutex_init(&srv->top_lock, NULL) != 0) {
        pthread_mutex_destroy(&srv->topic_lock);
        pthread_mutex_destroy(&srv->store_lock);
        hc_errstr_set(errstr, errstr_size, "cannot create a mutex");
        err = HC_ERR_FATAL;
        goto free_srv;
    }
    err = hc_store_open(cfg, &srv->st, errstr, errstr_size);
    if (err != HC_OK) {
        goto destroy_lock;
    }
    err = hc_store_open(cfg, &srv->st_top, errstr, errstr_size);
    if (err != HC_OK) {
        goto close_store;
    }
    if ((err = new_cache(srv, cfg->serve_ttl_ms, (size_t)cfg->serve_cache_max_keys, load_likes,
                         &srv->likes, errstr, errstr_size)) != HC_OK ||
        /* one key, "top", whatever the query: n is cut from serve.top.max rows, and other
         * parameters (a cache-busting cb=...) are never read */
        (err = new_cache(srv, cfg->serve_top_ttl_ms, 1, load_top, &srv->top, errstr,
                         errstr_size)) != HC_OK ||
        (err = new_cache(srv, STATS_TTL_MS, 1, load_stats, &srv->stats, errstr, errstr_size)) !=
            HC_OK ||
        (err = new_hot(srv, errstr, errstr_size)) != HC_OK ||
        (err = hc_serve_stats_new(cfg->serve_stages, SCRAPE_CONNECT_MS, SCRAPE_TOTAL_MS,
                                  cfg->serve_stats_expose != 0, &srv->staged, errstr,
                                  errstr_size)) != HC_OK ||
        (err = hc_serve_stats_start(srv->staged, STATS_REFRESH_MS, errstr, errstr_size)) != HC_OK) {
        goto destroy_caches;
    }
    hc_http_limits_t lim = {.max_connections = (unsigned)cfg->serve_max_connections,
                            .reserve = RESERVED_CONNECTIONS,
                            .per_ip = (unsigned)cfg->serve_max_connections_per_ip,
                            .request_timeout_ms = cfg->serve_request_timeout_ms,
                            .reserve_timeout_ms = RESERVED_TIMEOUT_MS,
                            .probe_paths = probe_paths};
    if ((err = hc_http_guard_new(&lim, "serve", &srv->guard, errstr, errstr_size)) != HC_OK) {
        goto destroy_caches;
    }
    int family = AF_INET;
    int fd = hc_listen_open("serve.listen", cfg->serve_listen, LISTEN_BACKLOG, &family, &srv->port,
                            errstr, errstr_size);
    if (fd < 0) {
        err = HC_ERR_INVALID;
        goto destroy_caches;
    }
    /* A pool of epoll loops: the handlers may block on the store (behind its mutex) or on a
     * load in flight, and one slow read must not stall every other connection. */
    unsigned int flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG | MHD_USE_AUTO;
    if (family == AF_INET6) {
        flags |= MHD_USE_IPv6;
    }
    srv->daemon = MHD_start_daemon(
        flags, 0, hc_http_guard_accept, srv->guard, handle, srv, MHD_OPTION_EXTERNAL_LOGGER,
        hc_http_guard_log, srv->guard, MHD_OPTION_LISTEN_SOCKET, (MHD_socket)fd,
        MHD_OPTION_THREAD_POOL_SIZE, (unsigned int)cfg->serve_threads, MHD_OPTION_CONNECTION_LIMIT,
        hc_http_guard_mhd_limit(srv->guard, (unsigned)cfg->serve_threads),
        MHD_OPTION_CONNECTION_TIMEOUT, CONNECTION_TIMEOUT_S, MHD_OPTION_NOTIFY_CONNECTION,
        hc_http_guard_notify, srv->guard, MHD_OPTION_URI_LOG_CALLBACK, on_uri, srv,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, srv, MHD_OPTION_ARRAY,
        hc_http_guard_mhd_options(), MHD_OPTION_ARRAY, serve_mhd_options, MHD_OPTION_END);
    if (!srv->daemon) {
        hc_errstr_set(errstr, errstr_size, "serve.listen: %s: the HTTP server did not start",
                      cfg->serve_listen);
        err = HC_ERR_FATAL;
        goto destroy_caches;
    }
    hc_log(HC_LOG_INFO, "serve",
           "serving the read API on %s (port %d), store %s, TTL %" PRId64
           " ms (read-hot posts %" PRId64 " ms, top %" PRId64 " ms), %d threads",
           cfg->serve_listen, srv->port, hc_store_kind(srv->st), cfg->serve_ttl_ms, srv->hot_ttl_ms,
           cfg->serve_top_ttl_ms, (int)cfg->serve_threads);
    *out = srv;
    return HC_OK;
destroy_caches:
    hc_http_guard_destroy(srv->guard);
    hc_serve_stats_destroy(srv->staged);
    hc_serve_hot_destroy(srv->hot);
    hc_serve_cache_destroy(srv->stats);
    hc_serve_cache_destroy(srv->top);
    hc_serve_cache_destroy(srv->likes);
    hc_store_close(srv->st_top);
close_store:
    hc_store_close(srv->st);
destroy_lock:
    pthread_mutex_destroy(&srv->top_lock);
    pthread_mutex_destroy(&srv->topic_lock);
    pthread_mutex_destroy(&srv->store_lock);
free_srv:
    free(srv);
    return err;
}

int hc_serve_port(const hc_serve_t *srv)
{
    return srv->port;
}

void hc_serve_stop(hc_serve_t *srv)
{
    if (!srv) {
        return;
    }
    MHD_stop_daemon(srv->daemon);
    hc_http_guard_destroy(srv->guard);
    hc_serve_stats_destroy(srv->staged);
    hc_serve_hot_destroy(srv->hot);
    hc_serve_cache_destroy(srv->stats);
    hc_serve_cache_destroy(srv->top);
    hc_serve_cache_destroy(srv->likes);
    hc_store_close(srv->st_top);
    hc_store_close(srv->st);
    pthread_mutex_destroy(&srv->top_lock);
    pthread_mutex_destroy(&srv->topic_lock);
    pthread_mutex_destroy(&srv->store_lock);
    free(srv);
}
