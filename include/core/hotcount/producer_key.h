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
 * The view holds only what decides something: a post whose records are all "cool" (or have
 * expired, or were deleted by a tombstone) leaves it, since "not in the view" and "cool" key
 * alike. So memory follows the hot set, not the topic's history (issue 25: a compacted topic
 * keeps every post's last record, and a view that kept cool ones filled its bound with them for
 * good). Not thread-safe: one owner thread, which
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

/* Feeds one record (replacing the last one of the same source and post) at now_ms, the
 * reader's wall clock. A record that leaves its post with nothing hot (a "cool" record, or
 * one expired at now_ms, for both sources) removes the post. A new post while the view holds
 * HC_HOTVIEW_MAX_POSTS first sweeps out the posts whose records have all expired (at most once
 * per HC_HOTVIEW_MAX_POSTS / 64 records, so a flood costs O(1) per record amortised); only when
 * every post held is still hot is the newcomer refused: HC_ERR_RECORD, nothing changed, counted
 * in hc_hotview_refused. HC_ERR_FATAL when out of memory (nothing changed).
 * now_ms HC_HOTSET_NONE: the time is not known; no expiry is judged and nothing is swept. */
hc_err_t hc_hotview_apply_at(hc_hotview_t *hv, const hc_hotkey_record_t *rec, int64_t now_ms);

/* hc_hotview_apply_at without a time (HC_HOTSET_NONE). */
hc_err_t hc_hotview_apply(hc_hotview_t *hv, const hc_hotkey_record_t *rec);

/* Feeds one message of topic.hotkeys as read: value NULL is a tombstone (Kafka's delete
 * marker), which removes the record of its key "<source>:<post>" (hc_hotkey_record_key);
 * anything else is a record's value (hc_hotview_apply_at). HC_ERR_RECORD (errstr says why) for
 * a value that is not a record or a tombstone whose key names no source: the view is
 * unchanged. */
hc_err_t hc_hotview_apply_message(hc_hotview_t *hv, const void *key, size_t key_len,
                                  const void *value, size_t len, int64_t now_ms, char *errstr,
                                  size_t errstr_size);

/* New posts refused while the view was full of hot ones; posts swept out as expired. */
int64_t hc_hotview_refused(const hc_hotview_t *hv);
int64_t hc_hotview_evicted(const hc_hotview_t *hv);

/* Feeds one record's value as read from the topic. HC_ERR_RECORD (errstr says why) for a value
 * that is not a hotkeys record: the caller skips it, the view is unchanged. */
hc_err_t hc_hotview_apply_value(hc_hotview_t *hv, const void *value, size_t len, char *errstr,
                                size_t errstr_size);

/* The ways post_id is salted over at now_ms: 0 when it is not hot (key "<post>#0"), else N. */
uint32_t hc_hotview_salts(const hc_hotview_t *hv, const char *post_id, size_t post_id_len,
                          int64_t now_ms);

/* Posts held (with a record that is or may become hot), and records fed so far (valid ones,
 * tombstones included). */
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
