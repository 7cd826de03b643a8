/* The read API on libmicrohttpd (see include/serve/hotcount/serve.h for the routes and the
 * caching).
 *
 * Request URIs are parsed from the raw URI that MHD hands to the URI log callback, not from the
 * `url` argument of the handler: MHD unescapes that one into a C string, so "/v1/likes/a%00b"
 * would arrive as "/v1/likes/a" and answer for the wrong post. Decoding here keeps every byte
 * and lets a malformed escape be a 404 (path) or 400 (query). */
#include "hotcount/serve.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
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
#include "hotcount/listen.h"
#include "hotcount/log.h"
#include "hotcount/metrics.h"
#include "hotcount/serve_cache.h"
#include "hotcount/serve_stats.h"
#include "hotcount/store.h"

#define LISTEN_BACKLOG 512
#define MAX_CONNECTIONS 1000u
#define CONNECTION_TIMEOUT_S 30u
#define TOP_DEFAULT 10
#define STATS_TOP 10
#define STATS_TTL_MS 1000 /* the page polls once a second; scraping the stages is not free */
#define SCRAPE_TIMEOUT_MS 500

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
    int port;
    char cache_control[96];

    hc_store_t *st; /* owned; used only under store_lock */
    pthread_mutex_t store_lock;

    hc_serve_cache_t *likes;  /* owned: post_id -> likes_value_t */
    hc_serve_cache_t *top;    /* owned: "top" -> top_value_t + rows */
    hc_serve_cache_t *stats;  /* owned: "stats" -> JSON text */
    hc_serve_stats_t *staged; /* owned; called only from the stats cache's (coalesced) load */

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

static int hexval(char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* Percent-decodes s[0..n) into out (room for cap bytes); '+' is a space in queries only.
 * False for a malformed escape or when the result does not fit. */
static bool url_decode(const char *s, size_t n, bool plus_is_space, char *out, size_t cap,
                       size_t *out_len)
{
    size_t len = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '%') {
            if (i + 2 >= n) {
                return false;
            }
            int hi = hexval(s[i + 1]);
            int lo = hexval(s[i + 2]);
            if (hi < 0 || lo < 0) {
                return false;
            }
            c = (char)(hi * 16 + lo);
            i += 2;
        } else if (c == '+' && plus_is_space) {
            c = ' ';
        }
        if (len == cap) {
            return false;
        }
        out[len++] = c;
    }
    *out_len = len;
    return true;
}

/* Strict UTF-8: no overlong forms, no surrogates, nothing above U+10FFFF. */
static bool is_utf8(const unsigned char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        size_t k;
        unsigned min;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xe0) == 0xc0) {
            k = 1, min = 0x80, c &= 0x1f;
        } else if ((c & 0xf0) == 0xe0) {
            k = 2, min = 0x800, c &= 0x0f;
        } else if ((c & 0xf8) == 0xf0) {
            k = 3, min = 0x10000, c &= 0x07;
        } else {
            return false;
        }
        if (i + k >= n) {
            return false;
        }
        for (size_t j = 1; j <= k; j++) {
            if ((s[i + j] & 0xc0) != 0x80) {
                return false;
            }
            c = (c << 6) | (s[i + j] & 0x3f);
        }
        if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff)) {
            return false;
        }
        i += k + 1;
    }
    return true;
}

/* The contract's post_id rules: 1..256 bytes, no byte < 0x20 nor 0x7f; and UTF-8, since an
 * event's post_id is a JSON string. */
static bool is_post_id(const char *id, size_t len)
{
    if (len == 0 || len > HC_POST_ID_MAX) {
        return false;
    }
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)id[i];
        if (c < 0x20 || c == 0x7f) {
            return false;
        }
    }
    return is_utf8((const unsigned char *)id, len);
}

static uint64_t fnv64(uint64_t h, const void *data, size_t n)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) {
        h = (h ^ p[i]) * 1099511628211ull;
    }
    return h;
}

#define FNV64_BASIS 14695981039346656037ull

static uint64_t etag_add(uint64_t h, const char *id, size_t len, int64_t likes)
{
    h = fnv64(h, id, len);
    h = fnv64(h, "\0", 1);
    return fnv64(h, &likes, sizeof(likes));
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
 * cacheable selects Cache-Control public/max-age or no-store. */
static enum MHD_Result respond(hc_serve_t *srv, struct MHD_Connection *conn, unsigned status,
                               const char *ctype, char *body, size_t len, bool must_free,
                               const char *etag, bool cacheable)
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
    count_status(srv, status);
    enum MHD_Result ret = MHD_queue_response(conn, status, resp);
    MHD_destroy_response(resp);
    return ret;
}

static enum MHD_Result respond_error(hc_serve_t *srv, struct MHD_Connection *conn, unsigned status,
                                     const char *msg)
{
    json_t *obj = json_pack("{s:s}", "error", msg);
    char *body = obj ? json_dumps(obj, JSON_COMPACT) : NULL;
    json_decref(obj);
    if (!body) {
        return MHD_NO;
    }
    return respond(srv, conn, status, "application/json", body, strlen(body), true, NULL, false);
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
    pthread_mutex_lock(&srv->store_lock);
    hc_err_t err = hc_store_top(srv->st, max, rows, &v->count, errstr, errstr_size);
    pthread_mutex_unlock(&srv->store_lock);
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
    char *json = hc_serve_stats_render(srv->staged, (const hc_store_row_t *)(top + 1), n,
                                       hc_now_ms(), hc_wall_ms());
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

static hc_err_t get_likes(hc_serve_t *srv, const char *id, size_t len, likes_value_t *out,
                          char *errstr, size_t errstr_size)
{
    void *v = NULL;
    size_t vlen = 0;
    int64_t at;
    hc_err_t err = hc_serve_cache_get(srv->likes, id, len, &v, &vlen, &at, errstr, errstr_size);
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
    if (!url_decode(raw, raw_len, false, id, HC_POST_ID_MAX, &len) || !is_post_id(id, len)) {
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
    return respond_json(srv, conn, json, etag_add(FNV64_BASIS, id, len, v.likes));
}

/* Finds parameter `name` in a raw query string; *dup is set when it appears more than once. */
static const char *query_param(const char *query, const char *name, size_t *len, bool *dup)
{
    const char *found = NULL;
    size_t name_len = strlen(name);
    *dup = false;
    for (const char *p = query; p && *p;) {
        size_t n = strcspn(p, "&");
        if (n > name_len && strncmp(p, name, name_len) == 0 && p[name_len] == '=') {
            if (found) {
                *dup = true;
            }
            found = p + name_len + 1;
            *len = n - name_len - 1;
        } else if (n == name_len && strncmp(p, name, name_len) == 0) {
            if (found) {
                *dup = true;
            }
            found = p + n;
            *len = 0;
        }
        p = p[n] ? p + n + 1 : NULL;
    }
    return found;
}

static enum MHD_Result route_many(hc_serve_t *srv, struct MHD_Connection *conn, const char *query)
{
    size_t ids_len = 0;
    bool dup = false;
    const char *ids = query_param(query, "ids", &ids_len, &dup);
    if (!ids || ids_len == 0 || dup) {
        return respond_error(srv, conn, MHD_HTTP_BAD_REQUEST,
                             "give the post ids once, as ?ids=a,b,c");
    }
    size_t count = 1;
    for (size_t i = 0; i < ids_len; i++) {
        count += ids[i] == ',';
    }
    if (count > (size_t)srv->cfg->serve_max_ids) {
        char msg[96];
        snprintf(msg, sizeof(msg), "at most %" PRId64 " ids per request (serve.max.ids)",
                 srv->cfg->serve_max_ids);
        return respond_error(srv, conn, MHD_HTTP_BAD_REQUEST, msg);
    }
    json_t *arr = json_array();
    if (!arr) {
        return respond_error(srv, conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory");
    }
    uint64_t etag = FNV64_BASIS;
    const char *p = ids, *end = ids + ids_len;
    while (p <= end) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        size_t n = (size_t)((comma ? comma : end) - p);
        char id[HC_POST_ID_MAX + 1];
        size_t len = 0;
        if (!url_decode(p, n, true, id, HC_POST_ID_MAX, &len) || !is_post_id(id, len)) {
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
        p += n + 1;
    }
    return respond_json(srv, conn, arr, etag);
}

static enum MHD_Result route_top(hc_serve_t *srv, struct MHD_Connection *conn, const char *query)
{
    size_t n_len = 0;
    bool dup = false;
    const char *n_raw = query_param(query, "n", &n_len, &dup);
    uint64_t n = TOP_DEFAULT;
    if (n_raw) {
        char digits[8];
        size_t len = 0;
        if (dup || !url_decode(n_raw, n_len, true, digits, sizeof(digits) - 1, &len) || len == 0 ||
            strspn(digits, "0123456789") < len) {
            n = 0;
        } else {
            digits[len] = '\0';
            n = strtoull(digits, NULL, 10);
        }
    }
    if (n < 1 || n > (uint64_t)srv->cfg->serve_top_max) {
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
    uint64_t etag = FNV64_BASIS;
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

static void render_counter(FILE *f, const char *name, const char *help, uint64_t v)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s counter\n%s %" PRIu64 "\n", name, help, name, name, v);
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
    fprintf(f, "# HELP hotcount_up always 1 while the process serves /metrics\n"
               "# TYPE hotcount_up gauge\nhotcount_up 1\n");
    fprintf(f, "# HELP hotcount_serve_requests_total HTTP requests answered, by status code\n"
               "# TYPE hotcount_serve_requests_total counter\n");
    for (size_t i = 0; i <= CODE_COUNT; i++) {
        char code[16];
        snprintf(code, sizeof(code), i < CODE_COUNT ? "%u" : "other",
                 i < CODE_COUNT ? codes[i] : 0);
        fprintf(f, "hotcount_serve_requests_total{code=\"%s\"} %" PRIu64 "\n", code,
                (uint64_t)atomic_load_explicit(&srv->requests[i], memory_order_relaxed));
    }
    fprintf(f, "# HELP hotcount_serve_store_reads_total store reads (hc_store_get of one post, "
               "hc_store_top), at most one per post per serve.ttl.ms\n"
               "# TYPE hotcount_serve_store_reads_total counter\n");
    for (size_t i = 0; i < READ_KIND_COUNT; i++) {
        fprintf(f, "hotcount_serve_store_reads_total{kind=\"%s\"} %" PRIu64 "\n",
                read_kind_names[i],
                (uint64_t)atomic_load_explicit(&srv->store_reads[i], memory_order_relaxed));
    }
    render_counter(f, "hotcount_serve_store_read_errors_total", "store reads that failed",
                   atomic_load_explicit(&srv->store_read_errors, memory_order_relaxed));
    render_counter(f, "hotcount_serve_cache_hits_total",
                   "post lookups answered from a fresh cache entry", cs.hits);
    render_counter(f, "hotcount_serve_cache_coalesced_total",
                   "post lookups that waited for another request's store read", cs.coalesced);
    render_counter(f, "hotcount_serve_cache_evictions_total",
                   "posts evicted from the cache (serve.cache.max.keys)", cs.evictions);
    fprintf(f,
            "# HELP hotcount_serve_cache_entries posts in the cache\n"
            "# TYPE hotcount_serve_cache_entries gauge\nhotcount_serve_cache_entries %zu\n",
            cs.entries);
    fprintf(f, "# HELP hotcount_serve_request_seconds one request, from its first byte parsed to "
               "its answer sent\n# TYPE hotcount_serve_request_seconds histogram\n");
    for (size_t i = 0; i <= srv->latency.bound_count; i++) {
        char le[32];
        if (i < srv->latency.bound_count) {
            snprintf(le, sizeof(le), "%g", srv->latency.bounds[i]);
        } else {
            snprintf(le, sizeof(le), "+Inf");
        }
        fprintf(f, "hotcount_serve_request_seconds_bucket{le=\"%s\"} %" PRIu64 "\n", le,
                hc_histogram_cumulative(&srv->latency, i));
    }
    fprintf(f,
            "hotcount_serve_request_seconds_sum %.9g\nhotcount_serve_request_seconds_count %" PRIu64
            "\n",
            hc_histogram_sum(&srv->latency), hc_histogram_count(&srv->latency));
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
    (void)upload_data_size;

    if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0) {
        return respond_error(srv, conn, MHD_HTTP_METHOD_NOT_ALLOWED, "method not allowed");
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
    const char *uri = req->uri;
    size_t path_len = strcspn(uri, "?#");
    const char *query = uri[path_len] == '?' ? uri + path_len + 1 : "";
    char query_buf[8192];
    size_t qlen = strcspn(query, "#");
    if (qlen >= sizeof(query_buf)) {
        return respond_error(srv, conn, MHD_HTTP_BAD_REQUEST, "query too long");
    }
    memcpy(query_buf, query, qlen);
    query_buf[qlen] = '\0';

#define PATH_IS(lit) (path_len == sizeof(lit) - 1 && memcmp(uri, lit, path_len) == 0)
    static const char one_prefix[] = "/v1/likes/";
    if (path_len >= sizeof(one_prefix) - 1 &&
        memcmp(uri, one_prefix, sizeof(one_prefix) - 1) == 0) {
        return route_one(srv, conn, uri + sizeof(one_prefix) - 1,
                         path_len - (sizeof(one_prefix) - 1));
    }
    if (PATH_IS("/v1/likes")) {
        return route_many(srv, conn, query_buf);
    }
    if (PATH_IS("/v1/top")) {
        return route_top(srv, conn, query_buf);
    }
    if (PATH_IS("/v1/stats")) {
        return route_stats(srv, conn);
    }
    if (PATH_IS("/") || PATH_IS("/index.html")) {
        return respond(srv, conn, MHD_HTTP_OK, "text/html; charset=utf-8",
                       (char *)(uintptr_t)hc_serve_live_html, hc_serve_live_html_len, false, NULL,
                       false);
    }
    if (PATH_IS("/metrics")) {
        return route_metrics(srv, conn);
    }
    if (PATH_IS("/healthz")) {
        return respond(srv, conn, MHD_HTTP_OK, "text/plain; charset=utf-8", (char *)"ok\n", 3,
                       false, NULL, false);
    }
#undef PATH_IS
    return respond_error(srv, conn, MHD_HTTP_NOT_FOUND, "not found");
}

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
    (void)conn;
    if (!req) {
        return;
    }
    if (toe == MHD_REQUEST_TERMINATED_COMPLETED_OK) {
        hc_histogram_observe(&srv->latency, seconds_since(&req->start));
    }
    free(req->uri);
    free(req);
    *req_cls = NULL;
}

static void mhd_log(void *cls, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    char msg[512];
    (void)cls;
    vsnprintf(msg, sizeof(msg), fmt, ap);
    hc_log(HC_LOG_WARN, "serve", "%s", msg);
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
    err = hc_store_open(cfg, &srv->st, errstr, errstr_size);
    if (err != HC_OK) {
        goto destroy_lock;
    }
    if ((err = new_cache(srv, cfg->serve_ttl_ms, (size_t)cfg->serve_cache_max_keys, load_likes,
                         &srv->likes, errstr, errstr_size)) != HC_OK ||
        (err = new_cache(srv, cfg->serve_ttl_ms, 1, load_top, &srv->top, errstr, errstr_size)) !=
            HC_OK ||
        (err = new_cache(srv, STATS_TTL_MS, 1, load_stats, &srv->stats, errstr, errstr_size)) !=
            HC_OK ||
        (err = hc_serve_stats_new(cfg->serve_stages, SCRAPE_TIMEOUT_MS, &srv->staged, errstr,
                                  errstr_size)) != HC_OK) {
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
        flags, 0, NULL, NULL, handle, srv, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
        MHD_OPTION_LISTEN_SOCKET, (MHD_socket)fd, MHD_OPTION_THREAD_POOL_SIZE,
        (unsigned int)cfg->serve_threads, MHD_OPTION_CONNECTION_LIMIT, MAX_CONNECTIONS,
        MHD_OPTION_CONNECTION_TIMEOUT, CONNECTION_TIMEOUT_S, MHD_OPTION_URI_LOG_CALLBACK, on_uri,
        srv, MHD_OPTION_NOTIFY_COMPLETED, on_completed, srv, MHD_OPTION_END);
    if (!srv->daemon) {
        hc_errstr_set(errstr, errstr_size, "serve.listen: %s: the HTTP server did not start",
                      cfg->serve_listen);
        err = HC_ERR_FATAL;
        goto destroy_caches;
    }
    hc_log(HC_LOG_INFO, "serve",
           "serving the read API on %s (port %d), store %s, TTL %" PRId64 " ms, %d threads",
           cfg->serve_listen, srv->port, hc_store_kind(srv->st), cfg->serve_ttl_ms,
           (int)cfg->serve_threads);
    *out = srv;
    return HC_OK;
destroy_caches:
    hc_serve_stats_destroy(srv->staged);
    hc_serve_cache_destroy(srv->stats);
    hc_serve_cache_destroy(srv->top);
    hc_serve_cache_destroy(srv->likes);
    hc_store_close(srv->st);
destroy_lock:
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
    hc_serve_stats_destroy(srv->staged);
    hc_serve_cache_destroy(srv->stats);
    hc_serve_cache_destroy(srv->top);
    hc_serve_cache_destroy(srv->likes);
    hc_store_close(srv->st);
    pthread_mutex_destroy(&srv->store_lock);
    free(srv);
}
