/* Layer: core. Adaptive salting for producers: key a post "<post_id>#<salt>" over N ways only
 * while it is in the hot set, otherwise "<post_id>#0" (docs/FORMATS.md, "Adaptive salting").
 *
 * A cold post then costs one partial per stage-1 window instead of up to `salts`; a hot post
 * still spreads over N raw partitions. Stage 1 never trusts the key (it counts the value's
 * post_id), so whatever key a producer picks, counts stay exact: this is load shaping only.
 *
 * The hot-set view is a pure data structure fed with the values of topic.hotkeys records (the
 * codec of hotset.h), in log order per partition; it keeps the last record per key
 * ("<source>:<post>", what compaction keeps), exactly as `hotcount hotkeys` does. A post is hot
 * at now_ms when one of its records is (hc_hotkey_record_is_hot). Its N: the largest `salts`
 * among its hot records that carry one (declarations do), else default_salts.
 *
 * Memory grows with the distinct keys of the topic (compacted: small); cool records are kept,
 * as a later record for the same key replaces them. Not thread-safe: one owner thread, which
 * both feeds it and asks for keys (the follower in kafka/hotkeys_follow.h is polled from the
 * producer's own loop). */
#ifndef HOTCOUNT_PRODUCER_KEY_H
#define HOTCOUNT_PRODUCER_KEY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hotcount/err.h"
#include "hotcount/hotset.h"

typedef struct hc_hotview hc_hotview_t;

/* default_salts: the N of a hot post no declaration gives one (the `salts` key, >= 1). NULL
 * when out of memory. */
hc_hotview_t *hc_hotview_new(uint32_t default_salts);
void hc_hotview_destroy(hc_hotview_t *hv);

/* At most this many posts in a view. Anyone who may write topic.hotkeys could otherwise grow
 * every adaptive producer's memory without bound; stage 2 keeps hotkeys.max posts (1000 by
 * default) and declarations are few, so a real hot set is far below it. */
#define HC_HOTVIEW_MAX_POSTS 100000

/* Feeds one record (replacing the last one of the same source and post). HC_ERR_FATAL when out
 * of memory, HC_ERR_RECORD for a post that is new while the view holds HC_HOTVIEW_MAX_POSTS
 * (then nothing changed). */
hc_err_t hc_hotview_apply(hc_hotview_t *hv, const hc_hotkey_record_t *rec);

/* Feeds one record's value as read from the topic. HC_ERR_RECORD (errstr says why) for a value
 * that is not a hotkeys record: the caller skips it, the view is unchanged. */
hc_err_t hc_hotview_apply_value(hc_hotview_t *hv, const void *value, size_t len, char *errstr,
                                size_t errstr_size);

/* The ways post_id is salted over at now_ms: 0 when it is not hot (key "<post>#0"), else N. */
uint32_t hc_hotview_salts(const hc_hotview_t *hv, const char *post_id, size_t post_id_len,
                          int64_t now_ms);

/* Posts with at least one record, and records fed so far (valid ones). */
size_t hc_hotview_posts(const hc_hotview_t *hv);

/* Each record that makes its post hot at now_ms (hc_hotkey_record_is_hot), declared ones and
 * detected ones alike (a post hot by both is seen twice, once per source), in table order; at
 * most `max` calls. Returns how many such records there are, which may exceed `max` (the
 * caller can say its list is cut). O(table size): for listings (an HTTP answer, a page), not
 * for every key. hv NULL: none. */
typedef void (*hc_hotview_each_fn)(void *opaque, const hc_hotkey_record_t *rec);
size_t hc_hotview_each_hot(const hc_hotview_t *hv, int64_t now_ms, size_t max,
                           hc_hotview_each_fn fn, void *opaque);
int64_t hc_hotview_records(const hc_hotview_t *hv);

/* The key: "<post_id>#<hc_salt(user_id, N)>" while the post is hot at now_ms, else
 * "<post_id>#0". hv NULL: every post cold. Same buffer contract as hc_salt_key (salt.h):
 * returns the length, 0 when buf is too small (nothing written). */
size_t hc_producer_key(const hc_hotview_t *hv, const char *post_id, size_t post_id_len,
                       const void *user_id, size_t user_id_len, int64_t now_ms, char *buf,
                       size_t buf_size);

#endif
