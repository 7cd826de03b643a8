/* Layer: kafka. Follows topic.hotkeys in a producer's process and feeds every record into a
 * hot-set view (core's producer_key.h), so that hc_producer_key salts only the posts that are
 * hot now (adaptive salting, docs/FORMATS.md).
 *
 * It reads every partition from the beginning (the topic is compacted: small), catches up to the
 * end before open returns, and then keeps reading whatever arrives when polled. It is advisory:
 * a record it misses or gets late changes only which key a producer picks, never a count.
 * Partitions added to the topic after open are not followed. Values that are not hotkeys
 * records are skipped and counted.
 *
 * Not thread-safe: the thread that owns the view polls the follower (the producer's loop), so
 * the view needs no lock. The view is borrowed and must outlive the follower. */
#ifndef HOTCOUNT_HOTKEYS_FOLLOW_H
#define HOTCOUNT_HOTKEYS_FOLLOW_H

#include <stddef.h>
#include <stdint.h>

#include "hotcount/config.h"
#include "hotcount/err.h"
#include "hotcount/producer_key.h"

typedef struct hc_hotkeys_follow hc_hotkeys_follow_t;

/* Opens a reader on cfg->topic_hotkeys and reads it to its end into hv. HC_ERR_INVALID when
 * topic.hotkeys is off or the client config is bad, HC_ERR_TRANSIENT when the topic's metadata
 * or its end is not reached within timeout_ms, HC_ERR_FATAL when out of memory; on error
 * nothing is left open. */
hc_err_t hc_hotkeys_follow_open(const hc_config_t *cfg, hc_hotview_t *hv, int timeout_ms,
                                hc_hotkeys_follow_t **out, char *errstr, size_t errstr_size);

/* Applies what has arrived, waiting up to timeout_ms for the first message (0: never waits),
 * at most 10 000 records per call so that the producer's loop keeps its pace. Returns how many
 * records it applied, or -1 when out of memory (the record in hand is lost: the caller stops,
 * as for any allocation failure). */
int64_t hc_hotkeys_follow_poll(hc_hotkeys_follow_t *f, int timeout_ms);

/* Records skipped because they did not parse. */
int64_t hc_hotkeys_follow_invalid(const hc_hotkeys_follow_t *f);

void hc_hotkeys_follow_close(hc_hotkeys_follow_t *f); /* NULL: nothing */

#endif
