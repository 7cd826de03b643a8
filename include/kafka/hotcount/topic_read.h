/* Layer: kafka. Reading slices of a topic to their end, for the commands and repairs that
 * replay a log (verify's recount, the changelog repair), never for the stages' own
 * consumption. */
#ifndef HOTCOUNT_TOPIC_READ_H
#define HOTCOUNT_TOPIC_READ_H

#include <librdkafka/rdkafka.h>
#include <stddef.h>
#include <stdint.h>

#include "hotcount/err.h"

/* One partition's slice [from, to); from is HC_OFFSET_NONE (offset.h) for the partition's first
 * offset. */
typedef struct hc_topic_range {
    int32_t partition;
    int64_t from;
    int64_t to;
} hc_topic_range_t;

/* Gets one message; a result other than HC_OK stops the read and is returned. */
typedef hc_err_t (*hc_topic_message_fn)(const rd_kafka_message_t *rkm, void *opaque);

/* Reads the ranges of topic with rk, a HC_KAFKA_ROLE_READER client (partition EOF on), which it
 * assigns and unassigns again: fn gets every message below its range's `to`, in offset order
 * per partition. A partition is done at `to` or at its end (with read_committed the end may be
 * a transaction marker below `to`). HC_ERR_TRANSIENT after HC_TIMEOUTS_TOPIC_READ_IDLE_MS
 * (30 s) without a message. The calling thread polls rk. */
hc_err_t hc_topic_read_ranges(rd_kafka_t *rk, const char *topic, const hc_topic_range_t *ranges,
                              size_t count, hc_topic_message_fn fn, void *opaque, char *errstr,
                              size_t errstr_size);

/* The same, giving up after idle_ms without a message: a stage passes
 * cfg->timeouts.topic_read_idle_ms. */
hc_err_t hc_topic_read_ranges_idle(rd_kafka_t *rk, const char *topic,
                                   const hc_topic_range_t *ranges, size_t count, int64_t idle_ms,
                                   hc_topic_message_fn fn, void *opaque, char *errstr,
                                   size_t errstr_size);

#endif
