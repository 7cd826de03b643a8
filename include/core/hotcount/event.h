/* Layer: core. One likes.raw message: parse and validate, no I/O, no allocation.
 *
 * The rules are the contract's (docs/FORMATS.md, "Events"): a UTF-8 JSON object with a required
 * post_id (string of 1..256 bytes without control characters: C0, DEL, C1 U+0080..U+009F; or a
 * non-negative integer counted as its decimal string), optional user_id (string or integer), op
 * ("like" | "unlike"), ts (integer ms), event_id (string); unknown fields ignored (but still
 * fully validated JSON); duplicate keys, invalid UTF-8, trailing garbage and messages over
 * max_bytes are invalid.
 *
 * "JSON" is strict RFC 8259 for the whole message, unknown fields included: numbers of any
 * magnitude in unknown fields, nesting up to HC_EVENT_MAX_DEPTH, duplicate keys rejected at every
 * level (compared after unescaping), only space/tab/CR/LF as whitespace (a UTF-8 BOM is
 * not_json).
 *
 * When a message has several problems, the reason is the first of:
 *   1. too_large, empty: from the length alone, before any byte is read;
 *   2. the first problem in document order that makes it no JSON text: not_json, bad_utf8,
 *      too_deep, trailing_garbage (bad_utf8 when the offending byte is itself invalid UTF-8);
 *   3. not_object;  4. duplicate_key;
 *   5. the field rules in field order: post_id, user_id, op, ts, event_id.
 *
 * This is the per-event hot path: a specialised single-pass scanner, guarded by a differential
 * test against jansson (tests/unit/test_event.c). Any thread; the event borrows nothing from the
 * input after return (post_id is copied, decoded, into the event). */
#ifndef HOTCOUNT_EVENT_H
#define HOTCOUNT_EVENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define HC_POST_ID_MAX 256
#define HC_USER_ID_MAX 256

/* Why a message is invalid. Each has a stable reason string (hc_event_reason_str) that goes into
 * the dead-letter header `hotcount-error` and the metrics label. */
typedef enum hc_event_reason {
    HC_EVENT_OK = 0,
    HC_EVENT_TOO_LARGE,        /* "too_large": over event.max.bytes */
    HC_EVENT_EMPTY,            /* "empty": zero-length value (or NULL) */
    HC_EVENT_NOT_JSON,         /* "not_json": syntax error */
    HC_EVENT_NOT_OBJECT,       /* "not_object": valid JSON, but not an object */
    HC_EVENT_BAD_UTF8,         /* "bad_utf8": invalid UTF-8, or a lone/mis-ordered \u surrogate */
    HC_EVENT_DUPLICATE_KEY,    /* "duplicate_key" */
    HC_EVENT_TRAILING_GARBAGE, /* "trailing_garbage": anything but whitespace after the object */
    HC_EVENT_TOO_DEEP,         /* "too_deep": nesting deeper than HC_EVENT_MAX_DEPTH */
    HC_EVENT_MISSING_POST_ID,  /* "missing_post_id" */
    HC_EVENT_EMPTY_POST_ID,    /* "empty_post_id" */
    HC_EVENT_POST_ID_TOO_LONG, /* "post_id_too_long": over 256 bytes after unescaping */
    HC_EVENT_POST_ID_CONTROL,  /* "post_id_control_char": a control character after unescaping:
                                  C0 (a byte < 0x20), DEL (0x7f), or C1 (U+0080..U+009F, the
                                  UTF-8 bytes C2 80..C2 9F) */
    HC_EVENT_BAD_POST_ID_TYPE, /* "bad_post_id_type": not a string or non-negative integer
                                  (negative, fraction, exponent, bool, null, array, object) */
    HC_EVENT_BAD_USER_ID_TYPE, /* "bad_user_id_type": not a string or integer */
    HC_EVENT_BAD_OP_TYPE,      /* "bad_op_type": op is not a string */
    HC_EVENT_UNKNOWN_OP,       /* "unknown_op": a string other than "like"/"unlike" */
    HC_EVENT_BAD_TS,           /* "bad_ts": ts is not an integer that fits int64 */
    HC_EVENT_BAD_EVENT_ID,     /* "bad_event_id_type": event_id is not a string */
    HC_EVENT_REASON_COUNT
} hc_event_reason_t;

/* Containers open at once, the event object itself counting as 1. */
#define HC_EVENT_MAX_DEPTH 64

typedef struct hc_event {
    char post_id[HC_POST_ID_MAX + 1]; /* decoded bytes, NUL-terminated for convenience */
    size_t post_id_len;
    int delta; /* +1 like, -1 unlike */
    bool has_ts;
    int64_t ts; /* ms since the epoch, valid when has_ts */
    bool has_user_id;
    /* user_id as bytes: a string's decoded bytes, an integer's decimal text as written (so -0
     * stays "-0"), NUL-terminated; empty when !has_user_id */
    char user_id[HC_USER_ID_MAX + 1];
    size_t user_id_len; /* bytes kept, <= HC_USER_ID_MAX: a longer user_id is accepted and cut to
                           its first 256 bytes */
} hc_event_t;

/* Parses one message value (not NUL-terminated; may contain NUL bytes, which are never valid
 * JSON). On HC_EVENT_OK *ev is filled; on any other reason *ev is unspecified. */
hc_event_reason_t hc_event_parse(const char *buf, size_t len, size_t max_bytes, hc_event_t *ev);

/* Stable snake_case reason, e.g. "duplicate_key"; "ok" for HC_EVENT_OK, "unknown" for a value
 * outside the enum. Never NULL; static storage. */
const char *hc_event_reason_str(hc_event_reason_t reason);

/* The post_id rule on bytes already decoded (e.g. from a URL): 1..HC_POST_ID_MAX bytes of strict
 * UTF-8 without a control character (C0, DEL, C1). What an event's string post_id may hold. */
bool hc_post_id_valid(const char *id, size_t len);

#endif
