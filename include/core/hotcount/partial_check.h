/* Layer: core. Stage 2's view of a likes.partials record as untrusted input: anyone with write
 * access to the topic can put bytes there, so every record is checked against the rules every
 * stage-1 record keeps before it may count. A record that breaks one is set aside (stage 2
 * dead-letters it with the reason's string as its `hotcount-error` header) and never stops the
 * stage. Pure functions, any thread. */
#ifndef HOTCOUNT_PARTIAL_CHECK_H
#define HOTCOUNT_PARTIAL_CHECK_H

#include <stddef.h>

#include "hotcount/partial.h"

/* Why stage 2 set a partial aside. Each has a stable string (hc_partial_reason_str): the
 * dead-letter header `hotcount-error` and the label of hotcount_partials_invalid_total. */
typedef enum hc_partial_reason {
    HC_PARTIAL_OK = 0,
    HC_PARTIAL_UNDECODABLE, /* "partial_undecodable": hc_partial_decode refuses it (not JSON,
                               not an object, a field missing or of the wrong type, events < 1) */
    HC_PARTIAL_BAD_TS,      /* "partial_bad_ts": ts_min after ts_max, or only one of them null */
    HC_PARTIAL_BAD_POST_ID, /* "partial_bad_post_id": a post_id no event may carry
                               (hc_post_id_valid: a control character C0/DEL/C1, bad UTF-8) */
    HC_PARTIAL_DELTA_EXCEEDS_EVENTS, /* "partial_delta_exceeds_events": |delta| > events; each
                                        event moves a count by exactly 1 */
    HC_PARTIAL_OVERFLOW,         /* "partial_overflow": its delta would take the window's sum for
                                    the post (or the window's event total) past int64 */
    HC_PARTIAL_STORE_REFUSED,    /* "store_refused": the store refused the post's value or id
                                    (hc_store_apply's HC_ERR_RECORD) */
    HC_PARTIAL_SOURCE_OVERLAP,   /* "source_overlap": its window's raw offsets overlap those of
                                    a partial of another window taken before on its partition, a
                                    late write of a stale transaction (hotcount/source_check.h) */
    HC_PARTIAL_SOURCE_MALFORMED, /* "source_malformed": its hotcount-window header breaks the
                                    format (docs/FORMATS.md, "Partials") */
    HC_PARTIAL_UNAUTHENTICATED,  /* "partial_unauthenticated": partials.auth.key.file is set and
                                    its hotcount-auth header is missing or is no signature of
                                    its value and window under a key held (partial_auth.h) */
    HC_PARTIAL_REASON_COUNT
} hc_partial_reason_t;

/* Decodes buf as a partial and checks the stage-1 rules: HC_PARTIAL_OK with *partial filled,
 * or the first rule broken (UNDECODABLE / BAD_TS, then BAD_POST_ID, then
 * DELTA_EXCEEDS_EVENTS) with the detail in errstr and *partial unspecified. Never returns
 * OVERFLOW, STORE_REFUSED, UNAUTHENTICATED or the SOURCE_ reasons: those depend on the window,
 * the store, the key and what came before (hotcount/source_check.h). */
hc_partial_reason_t hc_partial_check(const char *buf, size_t len, hc_partial_t *partial,
                                     char *errstr, size_t errstr_size);

/* Stable snake_case string; "ok" for HC_PARTIAL_OK, "unknown" outside the enum. Static. */
const char *hc_partial_reason_str(hc_partial_reason_t reason);

#endif
