/* The likes.partials record (contract in include/core/hotcount/partial.h).
 *
 * Encoding runs once per post per window in stage 1, so it is hand-written (no snprintf per
 * field); decoding runs in stage 2 on untrusted bytes, so it uses jansson and checks every
 * field. */
#include "hotcount/partial.h"

#include <inttypes.h>
#include <stdbool.h>
#include <string.h>

#include <jansson.h>

/* A bounded writer: every put checks room, so a short buffer is never overrun; once a put fails
 * the writer stays failed and the caller returns 0. */
typedef struct writer {
    char *p;
    char *end;
    bool overflow;
} writer_t;

static void put_bytes(writer_t *w, const char *s, size_t n)
{
    if (w->overflow || (size_t)(w->end - w->p) < n) {
        w->overflow = true;
        return;
    }
    memcpy(w->p, s, n);
    w->p += n;
}

#define PUT_LITERAL(w, lit) put_bytes((w), (lit), sizeof(lit) - 1)

static void put_int64(writer_t *w, int64_t v)
{
    char digits[20]; /* INT64_MIN has 19 digits, plus the sign */
    char *d = digits + sizeof(digits);
    /* Negate in unsigned arithmetic: -INT64_MIN does not fit int64. */
    uint64_t u = v < 0 ? 0u - (uint64_t)v : (uint64_t)v;

    do {
        *--d = (char)('0' + u % 10);
        u /= 10;
    } while (u != 0);
    if (v < 0) {
        *--d = '-';
    }
    put_bytes(w, d, (size_t)(digits + sizeof(digits) - d));
}

static void put_ts(writer_t *w, int64_t ts)
{
    if (ts == HC_TS_NONE) {
        PUT_LITERAL(w, "null");
    } else {
        put_int64(w, ts);
    }
}

/* JSON string body: quote and backslash escaped, control characters (and DEL, which the event
 * rules also treat as one) as \u00XX. Bytes >= 0x80 are copied as is: post ids were validated as
 * UTF-8 when their events were parsed. Runs of plain bytes are copied in one put. */
static void put_escaped(writer_t *w, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    size_t run = 0;

    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];

        if (c >= 0x20 && c != '"' && c != '\\' && c != 0x7f) {
            continue;
        }
        put_bytes(w, s + run, i - run);
        run = i + 1;
        if (c == '"' || c == '\\') {
            char esc[2] = {'\\', (char)c};

            put_bytes(w, esc, sizeof(esc));
        } else {
            char esc[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 0xf]};

            put_bytes(w, esc, sizeof(esc));
        }
    }
    put_bytes(w, s + run, n - run);
}

size_t hc_partial_encode(const hc_table_entry_t *ent, char *buf, size_t buf_size)
{
    writer_t w;
    size_t len;

    /* Even a 0-byte buffer at NULL must not be offset (that is undefined pointer arithmetic). */
    if (buf == NULL || buf_size == 0) {
        return 0;
    }
    w.p = buf;
    w.end = buf + buf_size;
    w.overflow = false;
    PUT_LITERAL(&w, "{\"post_id\":\"");
    put_escaped(&w, ent->post_id, ent->post_id_len);
    PUT_LITERAL(&w, "\",\"delta\":");
    put_int64(&w, ent->delta);
    PUT_LITERAL(&w, ",\"events\":");
    put_int64(&w, ent->events);
    PUT_LITERAL(&w, ",\"ts_min\":");
    put_ts(&w, ent->ts_min);
    PUT_LITERAL(&w, ",\"ts_max\":");
    put_ts(&w, ent->ts_max);
    PUT_LITERAL(&w, "}");
    if (w.overflow) {
        return 0;
    }
    len = (size_t)(w.p - buf);
    if (len < buf_size) {
        buf[len] = '\0';
    }
    return len;
}

size_t hc_count_encode(const char *post_id, size_t post_id_len, int64_t likes, int64_t as_of_ms,
                       char *buf, size_t buf_size)
{
    writer_t w;
    size_t len;

    if (buf == NULL || buf_size == 0) {
        return 0;
    }
    w.p = buf;
    w.end = buf + buf_size;
    w.overflow = false;
    PUT_LITERAL(&w, "{\"post_id\":\"");
    put_escaped(&w, post_id, post_id_len);
    PUT_LITERAL(&w, "\",\"likes\":");
    put_int64(&w, likes);
    PUT_LITERAL(&w, ",\"as_of\":");
    put_int64(&w, as_of_ms);
    PUT_LITERAL(&w, "}");
    if (w.overflow) {
        return 0;
    }
    len = (size_t)(w.p - buf);
    if (len < buf_size) {
        buf[len] = '\0';
    }
    return len;
}

static const char *type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "an object";
    case JSON_ARRAY:
        return "an array";
    case JSON_STRING:
        return "a string";
    case JSON_INTEGER:
        return "an integer";
    case JSON_REAL:
        return "a real number";
    case JSON_TRUE:
    case JSON_FALSE:
        return "a boolean";
    case JSON_NULL:
        return "null";
    }
    return "an unknown type";
}

static hc_err_t get_int(const json_t *obj, const char *name, int64_t *out, char *errstr,
                        size_t errstr_size)
{
    const json_t *v = json_object_get(obj, name);

    if (v == NULL) {
        hc_errstr_set(errstr, errstr_size, "partial: missing \"%s\"", name);
        return HC_ERR_INVALID;
    }
    if (!json_is_integer(v)) {
        hc_errstr_set(errstr, errstr_size, "partial: \"%s\" must be an integer, not %s", name,
                      type_name(v));
        return HC_ERR_INVALID;
    }
    *out = (int64_t)json_integer_value(v);
    return HC_OK;
}

/* ts_min/ts_max: an integer or null (HC_TS_NONE). The integer INT64_MIN is refused because it
 * would read back as HC_TS_NONE and silently turn a timestamp into "no timestamp". */
static hc_err_t get_ts(const json_t *obj, const char *name, int64_t *out, char *errstr,
                       size_t errstr_size)
{
    const json_t *v = json_object_get(obj, name);

    if (v == NULL) {
        hc_errstr_set(errstr, errstr_size, "partial: missing \"%s\"", name);
        return HC_ERR_INVALID;
    }
    if (json_is_null(v)) {
        *out = HC_TS_NONE;
        return HC_OK;
    }
    if (!json_is_integer(v)) {
        hc_errstr_set(errstr, errstr_size, "partial: \"%s\" must be an integer or null, not %s",
                      name, type_name(v));
        return HC_ERR_INVALID;
    }
    if ((int64_t)json_integer_value(v) == HC_TS_NONE) {
        hc_errstr_set(errstr, errstr_size,
                      "partial: \"%s\" %" PRId64 " is out of range (reserved for no timestamp)",
                      name, (int64_t)HC_TS_NONE);
        return HC_ERR_INVALID;
    }
    *out = (int64_t)json_integer_value(v);
    return HC_OK;
}

/* Checks every field into locals and copies into *partial only at the end, so a rejected
 * record leaves *partial untouched. */
static hc_err_t decode_object(const json_t *root, hc_partial_t *partial, char *errstr,
                              size_t errstr_size)
{
    const json_t *id;
    size_t id_len;
    int64_t delta;
    int64_t events;
    int64_t ts_min;
    int64_t ts_max;

    if (!json_is_object(root)) {
        hc_errstr_set(errstr, errstr_size, "partial: must be a JSON object, not %s",
                      type_name(root));
        return HC_ERR_INVALID;
    }
    id = json_object_get(root, "post_id");
    if (id == NULL) {
        hc_errstr_set(errstr, errstr_size, "partial: missing \"post_id\"");
        return HC_ERR_INVALID;
    }
    if (!json_is_string(id)) {
        hc_errstr_set(errstr, errstr_size, "partial: \"post_id\" must be a string, not %s",
                      type_name(id));
        return HC_ERR_INVALID;
    }
    id_len = json_string_length(id);
    if (id_len == 0) {
        hc_errstr_set(errstr, errstr_size, "partial: \"post_id\" is empty");
        return HC_ERR_INVALID;
    }
    if (id_len > HC_POST_ID_MAX) {
        hc_errstr_set(errstr, errstr_size, "partial: \"post_id\" is %zu bytes, over %d", id_len,
                      HC_POST_ID_MAX);
        return HC_ERR_INVALID;
    }
    if (get_int(root, "delta", &delta, errstr, errstr_size) != HC_OK ||
        get_int(root, "events", &events, errstr, errstr_size) != HC_OK ||
        get_ts(root, "ts_min", &ts_min, errstr, errstr_size) != HC_OK ||
        get_ts(root, "ts_max", &ts_max, errstr, errstr_size) != HC_OK) {
        return HC_ERR_INVALID;
    }
    if (events < 1) {
        hc_errstr_set(errstr, errstr_size, "partial: \"events\" is %" PRId64 ", must be >= 1",
                      events);
        return HC_ERR_INVALID;
    }
    if ((ts_min == HC_TS_NONE) != (ts_max == HC_TS_NONE)) {
        hc_errstr_set(errstr, errstr_size,
                      "partial: \"ts_min\" and \"ts_max\" must be both null or both integers");
        return HC_ERR_INVALID;
    }
    if (ts_min > ts_max) {
        hc_errstr_set(errstr, errstr_size,
                      "partial: \"ts_min\" %" PRId64 " is after \"ts_max\" %" PRId64, ts_min,
                      ts_max);
        return HC_ERR_INVALID;
    }

    /* The id may hold NUL bytes (JSON_ALLOW_NUL), hence memcpy with the jansson length. */
    memcpy(partial->post_id, json_string_value(id), id_len);
    partial->post_id[id_len] = '\0';
    partial->post_id_len = id_len;
    partial->delta = delta;
    partial->events = events;
    partial->ts_min = ts_min;
    partial->ts_max = ts_max;
    return HC_OK;
}

hc_err_t hc_partial_decode(const char *buf, size_t len, hc_partial_t *partial, char *errstr,
                           size_t errstr_size)
{
    json_error_t jerr;
    json_t *root;
    hc_err_t err;

    if (buf == NULL || len == 0) {
        hc_errstr_set(errstr, errstr_size, "partial: empty message");
        return HC_ERR_INVALID;
    }
    /* JSON_ALLOW_NUL keeps decode the exact inverse of encode, which writes any table key;
     * JSON_DECODE_ANY lets a scalar through to the precise "must be an object" message. */
    root = json_loadb(buf, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL | JSON_DECODE_ANY, &jerr);
    if (root == NULL) {
        hc_errstr_set(errstr, errstr_size, "partial: bad JSON: %s at byte %d", jerr.text,
                      jerr.position);
        return HC_ERR_INVALID;
    }
    err = decode_object(root, partial, errstr, errstr_size);
    json_decref(root);
    return err;
}
