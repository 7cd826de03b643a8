/* Layer: serve. Read-hot promotion for `hotcount serve`: which posts are read so often that
 * their cached count may live serve.hot.ttl.ms instead of serve.ttl.ms.
 *
 * Demand is sampled before the cache: every read of a post (a GET /v1/likes/{id}, each id of
 * ?ids=) is counted whether the cache answers it or not, since the cache hides exactly the
 * demand that matters. Two core modules do the work, reused as they are:
 *   - the sampler is stage 1's space-saving sketch (core/hotkeys.h) with its own hysteresis
 *     off: `max` counters, O(1) per read, no allocation; every post read more than
 *     reads / max times in a window is monitored, and its count is within [count - error,
 *     count];
 *   - the state machine is stage 2's hot set (core/hotset.h, hc_hotset_next): COLD -> HOT at
 *     serve.hot.enter.rate, HOT -> COOLING below serve.hot.leave.rate, COOLING -> COLD after
 *     serve.hot.dwell.ms below it; a rate between the thresholds, or a dip shorter than the
 *     dwell, changes nothing. HOT and COOLING posts are read-hot (source "reads").
 * Each window of `window_ms` is closed by the first read (or list/stats call) after it ends:
 * every monitored post is offered to the hot set, a member with its estimated count (it stays
 * hot unless even the overestimate is below the leave rate), a newcomer with its guaranteed
 * count (count - error: inheriting a big counter does not promote a post).
 *
 * Posts hot in topic.hotkeys (stage 2's detections and declarations) may be promoted up front:
 * with a topic function set (hc_serve_hot_set_topic), a post that is not read-hot but that the
 * function says is hot gets the hot TTL from its first read (source "topic"), and is listed
 * until the function says it is not (checked at every window's close).
 *
 * Memory is fixed at hc_serve_hot_new whatever the number of distinct posts read: about 2.9 KB
 * per unit of `max` (sketch counters, hot-set members, the topic list; the measured figure is
 * in bench/RESULTS.md, "Memory"; docs/READERS.md, "Read-hot promotion", has the design). A
 * topic-hot post that finds the topic list full still gets the hot TTL; it is only not listed
 * (counted in `unlisted`).
 *
 * Threads: every call may come from any thread (one mutex). The topic function is called with
 * that mutex held: it must not call back into this module. */
#ifndef HOTCOUNT_SERVE_HOT_H
#define HOTCOUNT_SERVE_HOT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hotcount/err.h"
#include "hotcount/event.h"

#define HC_SERVE_HOT_MAX 4096       /* `max`'s ceiling: the sketch's (HC_HOTKEYS_MAX_K) */
#define HC_SERVE_HOT_WINDOW_MS 1000 /* serve's rate window, see docs/READERS.md */

typedef int64_t (*hc_serve_hot_clock_fn)(void *opaque); /* monotonic milliseconds */

/* Whether post_id is hot in topic.hotkeys now. Any thread. */
typedef bool (*hc_serve_hot_topic_fn)(void *opaque, const char *post_id, size_t post_id_len);

typedef struct hc_serve_hot_opts {
    double enter_rate;  /* reads/s, > 0 */
    double leave_rate;  /* reads/s, 0 <= leave_rate < enter_rate */
    int64_t dwell_ms;   /* >= 0 */
    int64_t ttl_ms;     /* a cold post's TTL, >= 1 */
    int64_t hot_ttl_ms; /* a read-hot post's TTL, >= ttl_ms */
    size_t max;         /* 1 .. HC_SERVE_HOT_MAX: sketch counters, hot-set members, topic list */
    int64_t window_ms;  /* >= 1 */
    hc_serve_hot_clock_fn now_ms; /* required */
    void *clock_opaque;
} hc_serve_hot_opts_t;

typedef struct hc_serve_hot hc_serve_hot_t;

/* HC_ERR_INVALID for bad options, HC_ERR_FATAL when out of memory (errstr says which). */
hc_err_t hc_serve_hot_new(const hc_serve_hot_opts_t *opts, hc_serve_hot_t **out, char *errstr,
                          size_t errstr_size);
void hc_serve_hot_destroy(hc_serve_hot_t *hot); /* NULL: nothing */

/* fn NULL: no topic (the default). Borrowed; opaque must outlive its use. */
void hc_serve_hot_set_topic(hc_serve_hot_t *hot, hc_serve_hot_topic_fn fn, void *opaque);

/* Counts one read of post_id and returns the TTL its cache entry gets for this read, in ms:
 * hot_ttl_ms while the post is read-hot, else ttl_ms. O(1) expected, never allocates. */
int64_t hc_serve_hot_read(hc_serve_hot_t *hot, const char *post_id, size_t post_id_len);

typedef enum hc_serve_hot_source {
    HC_SERVE_HOT_READS, /* its read rate */
    HC_SERVE_HOT_TOPIC, /* topic.hotkeys says it is hot (and its reads alone do not) */
} hc_serve_hot_source_t;

typedef struct hc_serve_hot_post {
    char post_id[HC_POST_ID_MAX + 1]; /* NUL-terminated copy, may hold NULs */
    size_t post_id_len;
    double rate;      /* reads/s in the last closed window */
    int64_t since_ms; /* by the module's clock: when it became read-hot */
    hc_serve_hot_source_t source;
    bool cooling; /* source reads: below the leave rate, within the dwell */
} hc_serve_hot_post_t;

/* Closes a window that is due, then writes up to max read-hot posts, hottest first, to out;
 * returns how many there are in all (may exceed max). */
size_t hc_serve_hot_list(hc_serve_hot_t *hot, hc_serve_hot_post_t *out, size_t max, size_t *n);

#define HC_SERVE_HOT_FLAP_MS 60000 /* promoted again within this of a demotion: a flap */

typedef struct hc_serve_hot_stats {
    size_t posts;          /* read-hot now, both sources */
    int64_t promotions[2]; /* by hc_serve_hot_source_t */
    int64_t demotions[2];
    int64_t flaps;    /* source reads: promoted within HC_SERVE_HOT_FLAP_MS of its demotion */
    int64_t unlisted; /* topic-hot reads of posts the full topic list could not hold */
    size_t sampled;   /* posts the sketch monitored in the last closed window (<= max) */
    int64_t reads;
} hc_serve_hot_stats_t;

/* Closes a window that is due, then the counters. */
hc_serve_hot_stats_t hc_serve_hot_stats(hc_serve_hot_t *hot);

#endif
