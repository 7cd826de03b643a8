/* Layer: obs. Scrapes a stage's metrics endpoint: stage 1's hot keys (the
 * hotcount_hot_key_events_per_second{post_id="..."} samples) for `hotcount top --live --from`,
 * and the whole text for `hotcount serve`'s /v1/stats. One HTTP/1.0 GET of /metrics over a plain
 * loopback-or-LAN socket, within a deadline. Blocking, any thread. */
#ifndef HOTCOUNT_HOTKEYS_SCRAPE_H
#define HOTCOUNT_HOTKEYS_SCRAPE_H

#include <stddef.h>

#include "hotcount/err.h"
#include "hotcount/event.h"

typedef struct hc_scraped_hotkey {
    char post_id[HC_POST_ID_MAX + 1]; /* label value unescaped, NUL-terminated */
    size_t post_id_len;
    double events_per_second;
    char source[16]; /* the source label ("detected"), "" without one; a longer value is cut */
} hc_scraped_hotkey_t;

/* addr is "host:port". Fills up to max entries in the order served (the endpoint sorts them
 * hottest first). HC_ERR_TRANSIENT when the endpoint cannot be reached or answers badly, or
 * not wholly within timeout_ms (one deadline for connect, request and answer, whatever the
 * endpoint trickles). A rate that is not a finite number >= 0 is skipped; one above 1e15 is
 * clamped to 1e15. */
hc_err_t hc_hotkeys_scrape(const char *addr, int timeout_ms, hc_scraped_hotkey_t *out, size_t max,
                           size_t *count, char *errstr, size_t errstr_size);

/* The building blocks, also for `hotcount serve`'s /v1/stats: one GET /metrics from addr into a
 * malloc'ed, NUL-terminated *text (the body only) that the caller frees (HC_ERR_TRANSIENT as
 * above, *text NULL then); and the hot keys found in such a text. */
hc_err_t hc_metrics_scrape_text(const char *addr, int timeout_ms, char **text, char *errstr,
                                size_t errstr_size);
size_t hc_hotkeys_parse(const char *text, hc_scraped_hotkey_t *out, size_t max);
/* The same for any family whose samples are family{post_id="..."[,source="..."]} rate, e.g.
 * stage 2's hot set (hotcount_hot_post_events_per_second). */
size_t hc_hotkeys_parse_family(const char *text, const char *family, hc_scraped_hotkey_t *out,
                               size_t max);

/* hc_metrics_scrape_text with a separate connect deadline: the connection must be up within
 * connect_ms and the whole answer in within total_ms of the call (DNS resolution of a host name
 * is not bounded by either: give addresses). */
hc_err_t hc_metrics_scrape_text_deadline(const char *addr, int connect_ms, int total_ms,
                                         char **text, char *errstr, size_t errstr_size);

#endif
