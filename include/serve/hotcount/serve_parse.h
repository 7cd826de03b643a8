/* Layer: serve. The pure part of the read API's request handling: routing a raw request URI and
 * parsing its path and query (percent-decoding, ?ids=, ?n=). No I/O, no allocation, any thread;
 * fuzzed by fuzz/fuzz_http.c. Request URIs are parsed raw (as received), never from
 * libmicrohttpd's unescaped `url`, which stops at a %00. */
#ifndef HOTCOUNT_SERVE_PARSE_H
#define HOTCOUNT_SERVE_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hotcount/event.h"

#define HC_SERVE_QUERY_MAX 8192 /* bytes of query string, NUL excluded; longer: 400 */

typedef enum hc_serve_route {
    HC_ROUTE_NOT_FOUND = 0,
    HC_ROUTE_ONE,     /* /v1/likes/{id}: tail holds the raw id */
    HC_ROUTE_MANY,    /* /v1/likes?ids=... */
    HC_ROUTE_TOP,     /* /v1/top?n=N */
    HC_ROUTE_STATS,   /* /v1/stats */
    HC_ROUTE_HOTKEYS, /* /v1/hotkeys */
    HC_ROUTE_PAGE,    /* / and /index.html */
    HC_ROUTE_METRICS, /* /metrics */
    HC_ROUTE_HEALTHZ, /* /healthz */
    HC_ROUTE_QUERY_TOO_LONG
} hc_serve_route_t;

typedef struct hc_serve_uri {
    hc_serve_route_t route;
    const char *tail; /* HC_ROUTE_ONE: into the uri, not NUL-terminated */
    size_t tail_len;
    char query[HC_SERVE_QUERY_MAX + 1]; /* the raw query (after '?', before '#'), NUL-terminated */
} hc_serve_uri_t;

/* Routes uri (NUL-terminated, as received). */
void hc_serve_parse_uri(const char *uri, hc_serve_uri_t *out);

/* Finds parameter `name` in a raw query string: its raw value and length, or NULL; *dup is set
 * when it appears more than once. */
const char *hc_query_param(const char *query, const char *name, size_t *len, bool *dup);

/* The post id of a /v1/likes/{id} tail: decoded into id (HC_POST_ID_MAX + 1 bytes, NUL-terminated)
 * and valid by the post_id rule (hc_post_id_valid). */
bool hc_serve_parse_one(const char *raw, size_t raw_len, char *id, size_t *len);

/* ?n= of /v1/top: *n = 10 when absent; false unless a whole number within 1..max given once. */
bool hc_serve_parse_top_n(const char *query, int64_t max, uint64_t *n);

/* ?ids=a,b,c of /v1/likes: split at literal commas, each part URL-decoded ('+' a space). */
typedef struct hc_serve_ids {
    const char *p, *end; /* the raw rest */
    bool done;
} hc_serve_ids_t;

typedef enum hc_serve_ids_status {
    HC_IDS_OK = 0,
    HC_IDS_MISSING, /* no ids, empty, or given twice */
    HC_IDS_TOO_MANY /* more than max_ids */
} hc_serve_ids_status_t;

hc_serve_ids_status_t hc_serve_parse_ids(const char *query, int64_t max_ids, hc_serve_ids_t *it);
/* The next id into id (HC_POST_ID_MAX + 1 bytes): true with *ok telling whether it is a valid
 * post id; false when there are no more. */
bool hc_serve_next_id(hc_serve_ids_t *it, char *id, size_t *len, bool *ok);

#endif
