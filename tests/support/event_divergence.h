/* Differential check of hc_event_parse against the jansson reference (event_ref.h), with the
 * classifier that forgives exactly the documented divergences D1..D5 listed there.
 *
 * Shared by the unit test's differential run (tests/unit/test_event.c) and the libFuzzer target
 * (fuzz/fuzz_event.c), so that both judge a disagreement the same way. Test code only: it
 * allocates (the normalised copies in hc_event_divergence_of), and is not meant to be fast.
 * Any thread; no global state. */
#ifndef HOTCOUNT_TESTS_EVENT_DIVERGENCE_H
#define HOTCOUNT_TESTS_EVENT_DIVERGENCE_H

#include <stdbool.h>
#include <stddef.h>

#include "hotcount/event.h"

/* The documented divergences, as indices (D1 = 0 .. D5 = 4) and as flag bits. */
enum {
    HC_DIV_BIG_NUMBER = 0, /* D1 */
    HC_DIV_DEPTH,          /* D2 */
    HC_DIV_MINUS_ZERO,     /* D3 */
    HC_DIV_NUL_KEY,        /* D4 */
    HC_DIV_NUL_TOKEN,      /* D5 */
    HC_DIV_KINDS
};
#define HC_DIV_FLAG(kind) (1u << (kind))

/* Both parsers' verdicts and events for one input. */
typedef struct hc_event_both {
    hc_event_reason_t fast_r;
    hc_event_reason_t ref_r;
    hc_event_t fast;
    hc_event_t ref;
} hc_event_both_t;

/* Runs both parsers on buf[0..n) with max_bytes and fills *b. True when they agree: on valid
 * input every field matches; when jansson loaded the text (no well-formedness problem), the
 * reasons match exactly; when it did not, the fast parser also found a well-formedness problem.
 * buf need not be NUL-terminated. */
bool hc_event_run_both(const char *buf, size_t n, size_t max_bytes, hc_event_both_t *b);

/* Lexical look at a (possibly broken) input for the constructs behind the divergences: returns
 * the HC_DIV_FLAG bits found, and writes into norm (room for n bytes) a normalised copy in which
 * the two parsers should agree again: each integer -0 becomes " 0" (what jansson reads), each
 * integer outside int64 becomes 1 or -1, each real that overflows a double becomes 1.5. The
 * copy is never longer than the input; *norm_len gets its length. */
unsigned hc_event_divergence_of(const unsigned char *s, size_t n, char *norm, size_t *norm_len);

/* Which documented divergence (HC_DIV_BIG_NUMBER .. HC_DIV_NUL_TOKEN) explains the disagreement
 * in *orig (from hc_event_run_both on the same buf, n), or -1 when none does: a bug in one of
 * the parsers. Each forgiveness demands both its construct in the input and its symptom. Returns
 * -1 as well when memory for the normalised copies runs out. */
int hc_event_divergence_explain(const char *buf, size_t n, const hc_event_both_t *orig);

/* "big numbers", "depth", "-0", "NUL key", "NUL after token"; "?" outside the range. */
const char *hc_event_divergence_name(int kind);

#endif
