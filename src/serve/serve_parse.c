/* See include/serve/hotcount/serve_parse.h. */
#include "hotcount/serve_parse.h"

#include <stdlib.h>
#include <string.h>

#include "hotcount/percent.h"

const char *hc_query_param(const char *query, const char *name, size_t *len, bool *dup)
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

void hc_serve_parse_uri(const char *uri, hc_serve_uri_t *out)
{
    size_t path_len = strcspn(uri, "?#");
    const char *query = uri[path_len] == '?' ? uri + path_len + 1 : "";
    size_t qlen = strcspn(query, "#");
    out->tail = NULL;
    out->tail_len = 0;
    out->query[0] = '\0';
    if (qlen > HC_SERVE_QUERY_MAX) {
        out->route = HC_ROUTE_QUERY_TOO_LONG;
        return;
    }
    memcpy(out->query, query, qlen);
    out->query[qlen] = '\0';
#define PATH_IS(lit) (path_len == sizeof(lit) - 1 && memcmp(uri, lit, path_len) == 0)
    static const char one_prefix[] = "/v1/likes/";
    if (path_len >= sizeof(one_prefix) - 1 &&
        memcmp(uri, one_prefix, sizeof(one_prefix) - 1) == 0) {
        out->route = HC_ROUTE_ONE;
        out->tail = uri + sizeof(one_prefix) - 1;
        out->tail_len = path_len - (sizeof(one_prefix) - 1);
    } else if (PATH_IS("/v1/likes")) {
        out->route = HC_ROUTE_MANY;
    } else if (PATH_IS("/v1/top")) {
        out->route = HC_ROUTE_TOP;
    } else if (PATH_IS("/v1/stats")) {
        out->route = HC_ROUTE_STATS;
    } else if (PATH_IS("/v1/hotkeys")) {
        out->route = HC_ROUTE_HOTKEYS;
    } else if (PATH_IS("/") || PATH_IS("/index.html")) {
        out->route = HC_ROUTE_PAGE;
    } else if (PATH_IS("/metrics")) {
        out->route = HC_ROUTE_METRICS;
    } else if (PATH_IS("/healthz")) {
        out->route = HC_ROUTE_HEALTHZ;
    } else {
        out->route = HC_ROUTE_NOT_FOUND;
    }
#undef PATH_IS
}

bool hc_serve_parse_one(const char *raw, size_t raw_len, char *id, size_t *len)
{
    *len = 0;
    if (!hc_percent_decode(raw, raw_len, 0, id, HC_POST_ID_MAX, len) ||
        !hc_post_id_valid(id, *len)) {
        return false;
    }
    id[*len] = '\0';
    return true;
}

bool hc_serve_parse_top_n(const char *query, int64_t max, uint64_t *n)
{
    size_t n_len = 0;
    bool dup = false;
    const char *n_raw = hc_query_param(query, "n", &n_len, &dup);
    *n = 10;
    if (n_raw) {
        char digits[8];
        size_t len = 0;
        /* digits is terminated before strspn reads it: a value that is not all digits must be
         * judged on its own bytes, not on what the stack held after them. */
        if (dup ||
            !hc_percent_decode(n_raw, n_len, HC_PCT_PLUS_IS_SPACE, digits, sizeof(digits) - 1,
                               &len) ||
            len == 0) {
            *n = 0;
        } else {
            digits[len] = '\0';
            *n = strspn(digits, "0123456789") == len ? strtoull(digits, NULL, 10) : 0;
        }
    }
    return *n >= 1 && *n <= (uint64_t)max;
}

hc_serve_ids_status_t hc_serve_parse_ids(const char *query, int64_t max_ids, hc_serve_ids_t *it)
{
    size_t ids_len = 0;
    bool dup = false;
    const char *ids = hc_query_param(query, "ids", &ids_len, &dup);
    it->p = it->end = NULL;
    it->done = true;
    if (!ids || ids_len == 0 || dup) {
        return HC_IDS_MISSING;
    }
    size_t count = 1;
    for (size_t i = 0; i < ids_len; i++) {
        count += ids[i] == ',';
    }
    if (count > (size_t)max_ids) {
        return HC_IDS_TOO_MANY;
    }
    it->p = ids;
    it->end = ids + ids_len;
    it->done = false;
    return HC_IDS_OK;
}

bool hc_serve_next_id(hc_serve_ids_t *it, char *id, size_t *len, bool *ok)
{
    if (it->done) {
        return false;
    }
    const char *comma = memchr(it->p, ',', (size_t)(it->end - it->p));
    size_t n = (size_t)((comma ? comma : it->end) - it->p);
    *len = 0;
    *ok = hc_percent_decode(it->p, n, HC_PCT_PLUS_IS_SPACE, id, HC_POST_ID_MAX, len) &&
          hc_post_id_valid(id, *len);
    if (*ok) {
        id[*len] = '\0';
    }
    if (comma) {
        it->p = comma + 1;
    } else {
        it->done = true;
    }
    return true;
}
