/* Stage 2's rules for a partial; see partial_check.h. */
#include "hotcount/partial_check.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdbool.h>

#include "hotcount/event.h"

/* Whether a record hc_partial_decode refused did so for its timestamps: an object whose
 * ts_min/ts_max are both integers out of order, or one null and one integer. Only on the
 * refusal path (rare), hence a second parse. */
static bool ts_is_the_problem(const char *buf, size_t len)
{
    json_error_t jerr;
    json_t *root = buf && len ? json_loadb(buf, len, JSON_ALLOW_NUL, &jerr) : NULL;
    bool bad = false;
    if (json_is_object(root)) {
        const json_t *lo = json_object_get(root, "ts_min");
        const json_t *hi = json_object_get(root, "ts_max");
        if (json_is_integer(lo) && json_is_integer(hi)) {
            bad = json_integer_value(lo) > json_integer_value(hi);
        } else if ((json_is_null(lo) && json_is_integer(hi)) ||
                   (json_is_integer(lo) && json_is_null(hi))) {
            bad = true;
        }
    }
    json_decref(root);
    return bad;
}

hc_partial_reason_t hc_partial_check(const char *buf, size_t len, hc_partial_t *partial,
                                     char *errstr, size_t errstr_size)
{
    if (hc_partial_decode(buf, len, partial, errstr, errstr_size) != HC_OK) {
        return ts_is_the_problem(buf, len) ? HC_PARTIAL_BAD_TS : HC_PARTIAL_UNDECODABLE;
    }
    if (!hc_post_id_valid(partial->post_id, partial->post_id_len)) {
        hc_errstr_set(errstr, errstr_size,
                      "partial: \"post_id\" breaks the event rules (control character or bad "
                      "UTF-8)");
        return HC_PARTIAL_BAD_POST_ID;
    }
    /* events >= 1 (decode), so -events cannot overflow; delta may be INT64_MIN */
    if (partial->delta > partial->events || partial->delta < -partial->events) {
        hc_errstr_set(errstr, errstr_size,
                      "partial: \"delta\" %" PRId64 " exceeds \"events\" %" PRId64, partial->delta,
                      partial->events);
        return HC_PARTIAL_DELTA_EXCEEDS_EVENTS;
    }
    return HC_PARTIAL_OK;
}

const char *hc_partial_reason_str(hc_partial_reason_t reason)
{
    switch (reason) {
    case HC_PARTIAL_OK:
        return "ok";
    case HC_PARTIAL_UNDECODABLE:
        return "partial_undecodable";
    case HC_PARTIAL_BAD_TS:
        return "partial_bad_ts";
    case HC_PARTIAL_BAD_POST_ID:
        return "partial_bad_post_id";
    case HC_PARTIAL_DELTA_EXCEEDS_EVENTS:
        return "partial_delta_exceeds_events";
    case HC_PARTIAL_OVERFLOW:
        return "partial_overflow";
    case HC_PARTIAL_STORE_REFUSED:
        return "store_refused";
    case HC_PARTIAL_SOURCE_OVERLAP:
        return "source_overlap";
    case HC_PARTIAL_SOURCE_MALFORMED:
        return "source_malformed";
    case HC_PARTIAL_UNAUTHENTICATED:
        return "partial_unauthenticated";
    case HC_PARTIAL_REASON_COUNT:
        break;
    }
    return "unknown";
}
