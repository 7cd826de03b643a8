/* Reference event parser for tests and benchmarks: the same contract as hc_event_parse
 * (include/core/hotcount/event.h), written the obvious way on jansson. It exists to be obviously
 * right, not fast: the differential test in tests/unit/test_event.c holds the fast scanner to
 * it, and bench/bench_parse.c measures the difference.
 *
 * It loads the message with json_loadb(JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL |
 * JSON_DECODE_ANY), EOF check on, then applies the field rules in the fast parser's order
 * (post_id, user_id, op, ts, event_id). JSON_DECODE_ANY only lets it tell not_object from
 * not_json; it accepts no extra text.
 *
 * Known divergences from hc_event_parse, each a place where jansson departs from RFC 8259 or
 * from our limits. The differential test forgives a disagreement only when the input shows
 * one of these (see divergence_of() there):
 *   D1 big numbers: jansson rejects integers outside int64 ("too big integer") and reals that
 *      overflow a double ("real number overflow"); RFC 8259 allows any magnitude, so the fast
 *      parser accepts them in unknown fields and takes integer post_ids of up to 256 digits.
 *   D2 depth: jansson allows 2048 levels, we allow HC_EVENT_MAX_DEPTH (64): 65..2048 levels
 *      are valid here and too_deep there.
 *   D3 minus zero: jansson turns the integer -0 into 0, so here a post_id of -0 is accepted as
 *      "0" and a user_id of -0 reads "0"; the fast parser sees the '-' (bad_post_id_type) and
 *      keeps the text as written ("-0").
 *   D4 NUL in keys: jansson rejects a key containing \u0000 ("NUL byte in object key not
 *      supported"); RFC 8259 allows it, and so does the fast parser.
 *   D5 raw NUL after a token: jansson's stream cannot push a NUL byte back, so a raw 0x00
 *      directly after a number or true/false/null is silently dropped (e.g. [1<NUL>] loads);
 *      the fast parser says not_json, or trailing_garbage when the token is the whole document.
 * Invalid-message reasons are coarser here: jansson reports only its first error, in
 * document order and including duplicate keys, and most syntax errors map to not_json. Only
 * the valid/invalid verdict and, on valid input, the event fields are meant to agree; field
 * reasons agree whenever jansson loads the text. */
#ifndef HOTCOUNT_TESTS_EVENT_REF_H
#define HOTCOUNT_TESTS_EVENT_REF_H

#include <stddef.h>

#include "hotcount/event.h"

hc_event_reason_t hc_event_parse_ref(const char *buf, size_t len, size_t max_bytes, hc_event_t *ev);

#endif
