/* Layer: obs. The one reader of Prometheus text (format 0.0.4) in hotcount: `hotcount status`
 * (a stage's readiness and stalled partitions), `hotcount serve`'s /v1/stats (sums of the
 * stages' counters) and the hot-keys scrape (`top --live --from`, serve's hot set) read a
 * stage's /metrics page through it; the names they look for come from the metric registry
 * (hotcount/metric_defs.h).
 *
 * The page is untrusted (any endpoint a user points a command at): every scan stops at the end
 * of its line, so a page costs time linear in its size however its lines are broken (issue 25,
 * item 8), and nothing is allocated. No state; any thread. */
#ifndef HOTCOUNT_PROM_TEXT_H
#define HOTCOUNT_PROM_TEXT_H

#include <stdbool.h>
#include <stddef.h>

/* One sample line: `name[{labels}] value [timestamp]`. Pointers are into the page (borrowed,
 * not NUL-terminated). */
typedef struct hc_prom_sample {
    const char *name;
    size_t name_len;
    const char *labels; /* between the braces, still escaped; "" (len 0) without labels */
    size_t labels_len;
    double value; /* as strtod reads it: NaN and infinities included */
} hc_prom_sample_t;

/* The next sample of the page at *pos (start with *pos = the page's text), advancing *pos past
 * its line; false at the end. Comments, blank lines and lines that are no sample (no value, a
 * label set that does not close on its line) are skipped. */
bool hc_prom_next(const char **pos, hc_prom_sample_t *s);

/* Whether s is a sample of the family `name` (exactly: not hotcount_x_total for hotcount_x). */
bool hc_prom_is(const hc_prom_sample_t *s, const char *name);

/* The value of label `key` in s, escapes (\\, \", \n) undone, NUL-terminated into out (cut to
 * out_size - 1 bytes; *len, if not NULL, gets the length written). false when s has no such
 * label. */
bool hc_prom_label(const hc_prom_sample_t *s, const char *key, char *out, size_t out_size,
                   size_t *len);

/* Whether s has label key="value" (value compared unescaped). */
bool hc_prom_has_label(const hc_prom_sample_t *s, const char *key, const char *value);

#endif
