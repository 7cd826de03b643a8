/* Layer: stage. The counts changelog (topic.counts): after each committed store batch, stage 2
 * publishes the new total of every post the batch changed, keyed by post_id, to a compacted topic.
 *
 * Each batch's totals are one transaction of a transactional producer
 * (<group.stage2>-counts-<instance.id>) that also sends the batch's mark (below) as the group's
 * offsets with the consumer's group metadata (KIP-447). The group coordinator refuses those
 * offsets from a member that has lost its partitions (its generation or member epoch is stale),
 * so the transaction aborts and read_committed readers never see its totals: a stage 2 frozen
 * past its session, or cut off by a broker restart, cannot put older totals after the new
 * owner's (docs/RELIABILITY.md, F2). The records are flushed before the offsets are sent, so a
 * process frozen after the group accepted them can only add a commit marker, not a late record.
 *
 * The store commit and the publish cannot be one atomic step, so a stage 2 killed between them
 * would leave the changelog behind the store for the posts of its last batches. The gap is
 * closed with stage 2's own Kafka committed offsets on topic.partials, which stage 2 does not
 * otherwise use (its position lives in the store): they mark how far the changelog is known
 * delivered. Once every record produced so far is acknowledged, and none failed, the store
 * offsets of the batches they came from are committed. When a stage 2 takes partitions over, it
 * re-reads the partials between that mark and the store's offset and publishes the current
 * totals of their posts again (hc_changelog_repair).
 *
 * Why that is right: totals are idempotent, so a total published twice is harmless; a repaired
 * total is read from the store after the takeover, so it is never older than the one it
 * replaces; every post lands in one partials partition, so only the partition's owner publishes
 * it. A side effect operators may use: Kafka's own tools show stage 2's lag, at most a batch
 * pessimistic.
 *
 * One thread: stage 2's loop, the same one that polls the consumer passed in. */
#ifndef HOTCOUNT_CHANGELOG_H
#define HOTCOUNT_CHANGELOG_H

#include <librdkafka/rdkafka.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hotcount/config.h"
#include "hotcount/err.h"
#include "hotcount/store.h"
#include "hotcount/timeouts.h"
#include "hotcount/topic_read.h"

typedef struct hc_changelog hc_changelog_t;

/* The most partials one repair re-reads per partition; an older mark (a group that ran without
 * a changelog for a long time) is cut to this, with a warning. */
#define HC_CHANGELOG_REPAIR_MAX 2000000

/* *clp is NULL (and HC_OK) when topic.counts is off. name is the stage's log area; instance_id
 * names the transactional id. The producer's init_transactions waits for the first publish. */
hc_err_t hc_changelog_new(const hc_config_t *cfg, const char *name, const char *instance_id,
                          hc_changelog_t **clp, char *errstr, size_t errstr_size);

/* Nothing is queued outside a finished transaction. Accepts NULL. */
void hc_changelog_destroy(hc_changelog_t *cl);

/* After a committed store batch: totals[i], the total of posts[i].post_id (as of as_of_ms; the
 * deltas themselves are not used), in one transaction with the batch's offsets as the marks
 * (moved only when nothing failed since the last repair and no takeover waits for one; else the
 * marks as they stand, for the membership check). Returns when the transaction ended, each call
 * bounded by cfg->timeouts.drain_ms: a transaction not committed (Kafka unreachable, the member
 * fenced) leaves a repair due, and stage 2 goes on. consumer: the stage's, for the group
 * metadata. */
void hc_changelog_publish(hc_changelog_t *cl, rd_kafka_t *consumer, const hc_store_delta_t *posts,
                          const int64_t *totals, size_t n, int64_t as_of_ms,
                          const hc_store_offset_t *offsets, size_t offset_count);

/* Serves the producer's callbacks and replaces it after a fatal error (a fence stops this
 * process's changelog instead). Cheap; call every loop turn. */
void hc_changelog_poll(hc_changelog_t *cl, rd_kafka_t *consumer);

/* Partitions were just assigned to the stage: the previous owner's last batches may be missing
 * from the changelog, so a repair is wanted before any mark moves again. */
void hc_changelog_assigned(hc_changelog_t *cl);

/* True when the caller should repair its assigned partitions now (ranges, then repair): after
 * hc_changelog_assigned, or once a record was not delivered and none is outstanding, and the
 * back-off after a failed repair has passed. No mark moves until a repair succeeds. */
bool hc_changelog_repair_due(const hc_changelog_t *cl, int64_t now_ms);

/* True when a repair is wanted at all, whatever its back-off says: for the one try a clean stop
 * makes, so that a stage stopped after a failed repair leaves no total unpublished until the next
 * owner of its partitions repairs them. */
bool hc_changelog_repair_wanted(const hc_changelog_t *cl);

/* The partials ranges whose posts the changelog may lack, for partitions just taken over: for each
 * partitions[i] whose store offset stored_next[i] is known, [its committed mark, stored_next[i])
 * when that is not empty. ranges_out has room for count; *range_count_out is how many were written.
 * HC_ERR_TRANSIENT when the marks could not be read (retry later). */
hc_err_t hc_changelog_ranges(hc_changelog_t *cl, rd_kafka_t *consumer, const int32_t *partitions,
                             const int64_t *stored_next, size_t count, hc_topic_range_t *ranges_out,
                             size_t *range_count_out, char *errstr, size_t errstr_size);

/* Re-reads the partials of the ranges, and publishes the current store total of every post in
 * them (transactions carrying the marks unmoved, then one moving them to the ranges' ends: the
 * same membership check as a batch's); returns once those are committed, and the repair is no
 * longer wanted. HC_ERR_TRANSIENT (Kafka or the store is down, or a record was not
 * delivered): nothing is lost; hc_changelog_repair_due turns true again after a back-off
 * (cfg->timeouts, growing with each failure). An empty range list repairs nothing and succeeds:
 * every assigned partition's changelog is complete. */
hc_err_t hc_changelog_repair(hc_changelog_t *cl, rd_kafka_t *consumer, hc_store_t *st,
                             const hc_topic_range_t *ranges, size_t count, char *errstr,
                             size_t errstr_size);

#endif
