/* Layer: core. The stage-1 -> stage-2 record on likes.partials (docs/FORMATS.md, "Partials"):
 *   {"post_id":"...","delta":N,"events":N,"ts_min":ms,"ts_max":ms}
 * keyed by post_id. ts_min/ts_max are null when no event in the window carried a ts. post_id is
 * always written as a JSON string (an integer post id was already turned into its decimal string
 * by the event parser). Pure functions, any thread. */
#ifndef HOTCOUNT_PARTIAL_H
#define HOTCOUNT_PARTIAL_H

#include <stddef.h>
#include <stdint.h>

#include "hotcount/err.h"
#include "hotcount/event.h"
#include "hotcount/table.h"

/* Enough for a 256-byte post id escaped as \u00XX (6x) plus four int64 fields. */
#define HC_PARTIAL_MAX_BYTES 1792

typedef struct hc_partial {
    char post_id[HC_POST_ID_MAX + 1]; /* decoded, NUL-terminated */
    size_t post_id_len;
    int64_t delta;
    int64_t events;
    int64_t ts_min; /* HC_TS_NONE when null */
    int64_t ts_max;
} hc_partial_t;

/* Encodes a table entry as exactly
 *   {"post_id":"<escaped>","delta":N,"events":N,"ts_min":N|null,"ts_max":N|null}
 * (no spaces; in post_id, quote and backslash become \" and \\, bytes < 0x20 and 0x7f become
 * \u00XX, all other bytes are copied as is; HC_TS_NONE is written as null). Returns the byte
 * length written (no NUL counted; buf is NUL-terminated when room allows), or 0 when buf_size is
 * too small, never writing past buf_size. HC_PARTIAL_MAX_BYTES always suffices for a post id of
 * up to HC_POST_ID_MAX bytes. */
size_t hc_partial_encode(const hc_table_entry_t *ent, char *buf, size_t buf_size);

/* The changelog record on topic.counts, keyed by post_id:
 *   {"post_id":"...","likes":N,"as_of":ms}
 * Returns the length written, or 0 when buf_size is too small (HC_PARTIAL_MAX_BYTES is enough). */
size_t hc_count_encode(const char *post_id, size_t post_id_len, int64_t likes, int64_t as_of_ms,
                       char *buf, size_t buf_size);

/* Decodes one partial (with jansson: partials are ~1/1000 of events, not the hot path).
 * Rules: a JSON object without duplicate keys; post_id a string of 1..HC_POST_ID_MAX bytes
 * (after unescaping; \u0000 allowed, so decode inverts encode exactly); delta and events int64
 * integers, events >= 1; ts_min and ts_max both null or both integers with ts_min <= ts_max
 * (the integer INT64_MIN is refused: it is HC_TS_NONE). Every field is required; unknown fields
 * are ignored, for forward compatibility. Returns HC_OK, or HC_ERR_INVALID with the reason in
 * errstr and *partial untouched. */
hc_err_t hc_partial_decode(const char *buf, size_t len, hc_partial_t *partial, char *errstr,
                           size_t errstr_size);

#endif
