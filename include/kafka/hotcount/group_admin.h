/* Layer: kafka. Read-only looks at consumer groups and topics for `hotcount status` and
 * `hotcount dlq`: a group's members (Admin API DescribeConsumerGroups), its committed offsets
 * (ListConsumerGroupOffsets) and a topic's watermarks, and the dead letters of topic.dlq. None
 * of them joins a group or commits anything: rk is a HC_KAFKA_ROLE_READER client without a
 * group id. Blocking; the calling thread polls rk. Both librdkafka 2.0.2 and later provide
 * every call used here but hc_topic_held_partitions's (ListOffsets with an isolation level,
 * librdkafka 2.3 on). */
#ifndef HOTCOUNT_GROUP_ADMIN_H
#define HOTCOUNT_GROUP_ADMIN_H

#include <librdkafka/rdkafka.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hotcount/dead_letter.h"
#include "hotcount/err.h"

typedef struct hc_group_member {
    char *consumer_id;   /* owned */
    char *client_id;     /* owned */
    char *instance_id;   /* owned; "" without a static membership */
    char *host;          /* owned */
    int32_t *partitions; /* owned: the member's partitions of the topic asked for, ascending */
    size_t partition_count;
} hc_group_member_t;

typedef struct hc_group_desc {
    char state[32];             /* "Stable", "Empty", "PreparingRebalance", ... */
    char protocol[64];          /* the partition assignor, "" when none */
    hc_group_member_t *members; /* owned */
    size_t member_count;
} hc_group_desc_t;

/* Describes group, keeping each member's partitions of topic. On error *desc is empty and
 * errstr says why (HC_ERR_TRANSIENT: the cluster did not answer within timeout_ms). */
hc_err_t hc_group_describe(rd_kafka_t *rk, const char *group, const char *topic, int timeout_ms,
                           hc_group_desc_t *desc, char *errstr, size_t errstr_size);
void hc_group_desc_fini(hc_group_desc_t *desc); /* accepts a zeroed or finished desc */

/* The partition count of topic and each partition's low and high watermark (malloc'ed arrays of
 * *count entries that the caller frees; NULL on error). */
hc_err_t hc_topic_watermarks(rd_kafka_t *rk, const char *topic, int timeout_ms, int *count,
                             int64_t **low, int64_t **high, char *errstr, size_t errstr_size);

/* offsets_out[p] = group's committed offset of topic partition p for p in 0..count, or
 * HC_OFFSET_NONE when none is committed. */
hc_err_t hc_group_committed(rd_kafka_t *rk, const char *group, const char *topic, int count,
                            int timeout_ms, int64_t *offsets_out, char *errstr, size_t errstr_size);

/* *ts_ms = the newest record timestamp among the last committed record of each partition of
 * topic (read_committed: a partition whose last transaction wrote nothing to it counts the
 * record before), or -1 when no partition has one. Reads at most 16 records per partition. */
hc_err_t hc_topic_last_timestamp(rd_kafka_t *rk, const char *topic, int timeout_ms, int64_t *ts_ms,
                                 char *errstr, size_t errstr_size);

/* counts_out[r] = the committed records (read_committed: no transaction markers, nothing of an
 * aborted transaction) in ranges[r] of topic; a partition may appear once. The exact lag behind
 * a log end that transaction markers inflate. */
struct hc_topic_range;
hc_err_t hc_topic_count_records(rd_kafka_t *rk, const char *topic,
                                const struct hc_topic_range *ranges, size_t count,
                                int64_t *counts_out, char *errstr, size_t errstr_size);

/* One partition of a topic whose committed end lags its log end. */
typedef struct hc_held_partition {
    int32_t partition;
    int64_t stable; /* the last stable offset: read_committed's end, where the oldest open
                       transaction writing the partition began */
    int64_t end;    /* the high watermark: read_uncommitted's end */
    bool lingering; /* the record at `stable` is older than the older_than_ms given */
} hc_held_partition_t;

/* The partitions of topic held by an open transaction: those whose last stable offset lies
 * below their high watermark (ListOffsets under read_committed and read_uncommitted). Kafka
 * 4's Admin API can list the transactions themselves (ListTransactions, DescribeTransactions),
 * librdkafka has neither; what a transaction holds is what readers wait on, so this is what is
 * measured. A held partition is lingering when its first held record was written before
 * older_than_ms (wall clock, ms since the epoch): the record at the last stable offset opens the
 * oldest open transaction, and a ListOffsets by that timestamp (read_uncommitted) landing past
 * it says that record is older. With CreateTime timestamps this is the writer's clock: stage 1
 * stamps a window's records with the wall time it closed, just before its transaction begins.
 * *held is a malloc'ed array of *count entries (NULL when none) that the caller frees.
 * HC_ERR_INVALID when librdkafka is older than 2.3. */
hc_err_t hc_topic_held_partitions(rd_kafka_t *rk, const char *topic, int64_t older_than_ms,
                                  int timeout_ms, hc_held_partition_t **held, size_t *count,
                                  char *errstr, size_t errstr_size);

/* One dead letter of topic.dlq: hc_dead_letter_t (hotcount/dead_letter.h), every pointer
 * borrowed from the message and valid during the callback only. */

/* Gets one dead letter; a result other than HC_OK stops the read and is returned. */
typedef hc_err_t (*hc_dead_letter_fn)(const hc_dead_letter_t *dl, void *opaque);

/* Reads topic.dlq: of each partition (every partition when partition < 0) the last
 * max_per_partition records below its high watermark (all when 0), or, when offset >= 0, the
 * one record at offset of partition. In offset order per partition. *scanned counts the
 * records read, *partial is true when a bound left older records unread. */
hc_err_t hc_dead_letters_read(rd_kafka_t *rk, const char *topic, int32_t partition, int64_t offset,
                              int64_t max_per_partition, hc_dead_letter_fn fn, void *opaque,
                              int64_t *scanned, bool *partial, char *errstr, size_t errstr_size);

/* The same over the given ranges [from, to) of topic.dlq (hotcount/topic_read.h). */
struct hc_topic_range;
hc_err_t hc_dead_letters_read_ranges(rd_kafka_t *rk, const char *topic,
                                     const struct hc_topic_range *ranges, size_t count,
                                     hc_dead_letter_fn fn, void *opaque, int64_t *scanned,
                                     char *errstr, size_t errstr_size);

#endif
