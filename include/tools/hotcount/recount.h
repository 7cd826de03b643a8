/* Layer: tools. The checks behind `hotcount verify`: are both stages caught up, and does every
 * post's stored count equal a fresh recount of likes.raw from its first offset? */
#ifndef HOTCOUNT_RECOUNT_H
#define HOTCOUNT_RECOUNT_H

#include <stdbool.h>
#include <stdint.h>

#include "hotcount/config.h"
#include "hotcount/err.h"
#include "hotcount/store.h"
#include "hotcount/table.h"

/* Reads topic.raw from the first to the current last offset of every partition and sums each
 * valid event's delta per post into counts (events counts the events per post). */
hc_err_t hc_recount_raw(const hc_config_t *cfg, hc_table_t *counts, int64_t *valid,
                        int64_t *invalid, char *errstr, size_t errstr_size);

/* Stage 1 is caught up when group.stage1's committed offset of every raw partition equals its
 * end; stage 2 when no committed partial lies beyond the offsets in the store. *lag is a rough
 * count of what is left (raw messages + partials). */
hc_err_t hc_recount_caught_up(const hc_config_t *cfg, hc_store_t *st, bool *caught_up, int64_t *lag,
                              char *errstr, size_t errstr_size);

typedef struct hc_recount_diff {
    int64_t posts;      /* distinct posts compared (union of recount and store) */
    int64_t mismatches; /* posts whose store count differs from the recount */
} hc_recount_diff_t;

/* Compares every post in counts and in the store; calls report (may be NULL) per mismatch. */
typedef void (*hc_recount_report_fn)(const char *post_id, size_t post_id_len, int64_t expected,
                                     int64_t stored, void *opaque);
hc_err_t hc_recount_compare(hc_store_t *st, const hc_table_t *counts, hc_recount_diff_t *diff,
                            hc_recount_report_fn report, void *opaque, char *errstr,
                            size_t errstr_size);

#endif
