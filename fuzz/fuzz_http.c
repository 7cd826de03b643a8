/* libFuzzer target for the read API's request parsing: routing a raw URI and parsing its path and
 * query (src/serve/serve_parse.c), and the request-framing rule of every listener
 * (hc_http_framing_verdict, src/obs/http_guard.c). fuzz/http.sh builds and runs it.
 *
 * An input is "URI\nHEADERS": the bytes up to the first '\n' (or NUL) are the request URI as
 * received; the rest, one "Name: value" per line, the request's headers. Checked for every input:
 *   - the route is one of hc_serve_route_t, a tail only for /v1/likes/{id}, inside the URI;
 *   - a post id accepted from a path or from ?ids= is 1..256 bytes, NUL-terminated, and valid by
 *     the post-id rule (no C0, DEL, C1; strict UTF-8); percent-encoding it byte by byte and
 *     parsing again gives the same id (the decoder loses nothing);
 *   - ?ids= never yields more ids than serve.max.ids, ?n= is within 1..serve.top.max when taken;
 *   - the framing verdict is 400 exactly when there is a Transfer-Encoding, more than one
 *     Content-Length, or one that is not all zero digits; 0 otherwise.
 * Any failure prints a message and aborts (libFuzzer saves the input). */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "hotcount/event.h"
#include "hotcount/http_guard.h"
#include "hotcount/serve_parse.h"

#define MAX_IDS 100
#define TOP_MAX 100

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what)
{
    fprintf(stderr, "==== fuzz_http: %s\n", what);
    abort();
}

static void check_id(const char *id, size_t len)
{
    if (len < 1 || len > HC_POST_ID_MAX || id[len] != '\0' || !hc_post_id_valid(id, len)) {
        fail("an accepted post id breaks the post-id rule");
    }
    /* round trip: %XX for every byte */
    static const char hex[] = "0123456789ABCDEF";
    char enc[3 * HC_POST_ID_MAX + 1];
    for (size_t i = 0; i < len; i++) {
        enc[3 * i] = '%';
        enc[3 * i + 1] = hex[(unsigned char)id[i] >> 4];
        enc[3 * i + 2] = hex[(unsigned char)id[i] & 15];
    }
    char again[HC_POST_ID_MAX + 1];
    size_t again_len = 0;
    if (!hc_serve_parse_one(enc, 3 * len, again, &again_len) || again_len != len ||
        memcmp(again, id, len) != 0) {
        fail("a percent-encoded post id does not decode to itself");
    }
}

static void check_uri(const char *uri)
{
    static hc_serve_uri_t u;
    hc_serve_parse_uri(uri, &u);
    if ((unsigned)u.route > HC_ROUTE_QUERY_TOO_LONG) {
        fail("route out of range");
    }
    if (u.route == HC_ROUTE_ONE) {
        if (u.tail < uri || u.tail + u.tail_len > uri + strlen(uri)) {
            fail("the tail is outside the URI");
        }
        char id[HC_POST_ID_MAX + 1];
        size_t len = 0;
        if (hc_serve_parse_one(u.tail, u.tail_len, id, &len)) {
            check_id(id, len);
        }
    } else if (u.tail != NULL) {
        fail("a tail for a route that has none");
    }
    if (strlen(u.query) > HC_SERVE_QUERY_MAX) {
        fail("query longer than its buffer");
    }
    uint64_t n = 0;
    if (hc_serve_parse_top_n(u.query, TOP_MAX, &n) && (n < 1 || n > TOP_MAX)) {
        fail("?n= accepted out of 1..max");
    }
    hc_serve_ids_t it;
    if (hc_serve_parse_ids(u.query, MAX_IDS, &it) == HC_IDS_OK) {
        char id[HC_POST_ID_MAX + 1];
        size_t len = 0, count = 0;
        bool ok = false;
        while (hc_serve_next_id(&it, id, &len, &ok)) {
            if (++count > MAX_IDS) {
                fail("more ids than serve.max.ids");
            }
            if (ok) {
                check_id(id, len);
            }
        }
        if (count == 0) {
            fail("?ids= accepted with no id");
        }
    }
}

static void check_framing(const char *headers, size_t len)
{
    const char *cl[8];
    char values[8][64];
    size_t cl_count = 0;
    int has_te = 0;
    bool expect_bad = false;
    for (size_t i = 0; i < len;) {
        const char *line = headers + i;
        const char *nl = memchr(line, '\n', len - i);
        size_t n = nl ? (size_t)(nl - line) : len - i;
        i += n + 1;
        const char *colon = memchr(line, ':', n);
        if (!colon) {
            continue;
        }
        size_t key_len = (size_t)(colon - line);
        const char *v = colon + 1;
        size_t vlen = n - key_len - 1;
        while (vlen > 0 && *v == ' ') {
            v++, vlen--;
        }
        if (key_len == 14 && strncasecmp(line, "content-length", 14) == 0) {
            if (cl_count < 8) {
                size_t c = vlen < 63 ? vlen : 63;
                memcpy(values[cl_count], v, c);
                values[cl_count][c] = '\0';
                cl[cl_count] = values[cl_count];
                const char *s = values[cl_count];
                if (s[0] == '\0' || strspn(s, "0") != strlen(s)) {
                    expect_bad = true;
                }
                cl_count++;
            }
        } else if (key_len == 17 && strncasecmp(line, "transfer-encoding", 17) == 0) {
            has_te = 1;
        }
    }
    expect_bad = expect_bad || has_te || cl_count > 1;
    const char *why = NULL;
    unsigned status = hc_http_framing_verdict(cl, cl_count, has_te, &why);
    if ((status != 0) != expect_bad || (status != 0 && (status != 400 || !why))) {
        fail("the framing verdict disagrees with the rule");
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *buf = malloc(size + 1);
    if (!buf) {
        return 0;
    }
    memcpy(buf, data, size);
    buf[size] = '\0';
    size_t uri_len = strcspn(buf, "\n");
    bool has_headers = uri_len < size && buf[uri_len] == '\n';
    buf[uri_len] = '\0';
    check_uri(buf);
    if (has_headers) {
        check_framing(buf + uri_len + 1, size - uri_len - 1);
    }
    free(buf);
    return 0;
}
