/* Layer: core. Stage 2's hot set: the posts whose exact global rate is high, with hysteresis and
 * a dwell time, and the records of topic.hotkeys that announce its changes.
 *
 * Stage 1's sketch (hotkeys.h) sees only the raw partitions its process holds: a post salted
 * over 16 partitions and so over many stage-1 processes can be under the threshold in each of
 * them and over it in total. Stage 2 gets every partial of a post (partials are keyed by post),
 * so after the merge it knows each post's exact likes in the window; this set is fed from there.
 *
 * States, one enum, transitions in hc_hotset_next only:
 *   COLD    --rate >= enter_rate-->  HOT       (announced: a "hot" record)
 *   HOT     --rate <  leave_rate-->  COOLING   (dwell_ms 0: straight to COLD)
 *   COOLING --rate >= leave_rate-->  HOT       (silent: the post never stopped being hot)
 *   COOLING --below leave_rate for dwell_ms--> COLD (announced: a "cool" record)
 * A rate that moves between leave_rate and enter_rate changes nothing, and a dip below
 * leave_rate shorter than dwell_ms is not announced: a post near a threshold does not flap.
 *
 * Memory is fixed by opts.max whatever the number of posts: only posts already in the set and,
 * per window, the opts.max hottest newcomers at or over enter_rate are kept (COLD posts are not
 * remembered). When newcomers do not fit, the coldest members (lowest rate this window; a
 * COOLING member first, as its rate is below leave_rate) are evicted for hotter newcomers, with
 * a "cool" transition flagged `evicted`. All allocation is in hc_hotset_new.
 *
 * Time comes from an injected clock (opts.now_ms, milliseconds; stage 2 passes the wall clock,
 * as `since` and `expires` go into records; tests pass a fake one). A window's rate is its
 * events over the time since the previous hc_hotset_end (or since hc_hotset_new), so windows
 * tile time and every event counts once. On purpose this errs low at a restart and after an
 * idle time: a backlog read at start-up is not mistaken for a burst, and a burst after a quiet
 * spell is seen one window later. While stage 2 catches up a lag faster than real time, rates
 * read high (processing time, not event time). A clock that went back counts as window_ms.
 *
 * A member HOT for opts.ttl_ms / 3 since its last record is announced again (REFRESH): its
 * records carry expires = now + ttl_ms, so a set entry whose stage 2 died or lost the post in a
 * rebalance expires in readers instead of staying hot forever. ttl_ms 0: no expiry, no refresh.
 *
 * Pure module, no I/O. Not thread-safe: one owner thread (a stage-2 instance). */
#ifndef HOTCOUNT_HOTSET_H
#define HOTCOUNT_HOTSET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hotcount/err.h"
#include "hotcount/event.h"

/* opts.max's ceiling. hc_hotset_new allocates about 1.3 KB per member: 1 282 992 bytes at max
 * 1000, 129 700 096 at 100 000 (mallinfo2 around hc_hotset_new, gcc -O2, 2026-12-01). */
#define HC_HOTSET_MAX 100000
#define HC_HOTSET_NONE INT64_MIN

typedef enum hc_hotset_state {
    HC_HOTSET_COLD = 0,
    HC_HOTSET_HOT,
    HC_HOTSET_COOLING,
} hc_hotset_state_t;

typedef int64_t (*hc_hotset_clock_fn)(void *opaque);

typedef struct hc_hotset_opts {
    double enter_rate;         /* events/s, > 0 */
    double leave_rate;         /* events/s, 0 <= leave_rate < enter_rate */
    int64_t dwell_ms;          /* >= 0: how long below leave_rate before COLD */
    size_t max;                /* 1 .. HC_HOTSET_MAX members */
    int64_t window_ms;         /* >= 1: the nominal window (flush.ms), see above */
    int64_t ttl_ms;            /* >= 0: records' expiry, 0 = none */
    int64_t flap_ms;           /* >= 0: re-entering within this of leaving is a flap; 0: none */
    hc_hotset_clock_fn now_ms; /* required */
    void *clock_opaque;
} hc_hotset_opts_t;

/* The one transition function. rate: the post's events/s in the window just closed;
 * cooling_ms: how long the post has been COOLING (ignored in other states). */
hc_hotset_state_t hc_hotset_next(hc_hotset_state_t state, double rate, int64_t cooling_ms,
                                 const hc_hotset_opts_t *opts);

const char *hc_hotset_state_name(hc_hotset_state_t state); /* "cold", "hot", "cooling" */

typedef enum hc_hotset_change {
    HC_HOTSET_TO_HOT,  /* COLD -> HOT */
    HC_HOTSET_TO_COOL, /* COOLING -> COLD, or evicted */
    HC_HOTSET_REFRESH, /* still HOT: the same "hot" record again, with a later expiry */
} hc_hotset_change_t;

typedef struct hc_hotset_transition {
    hc_hotset_change_t change;
    char post_id[HC_POST_ID_MAX + 1]; /* NUL-terminated copy, may hold NULs */
    size_t post_id_len;
    double rate;        /* events/s in the window just closed */
    int64_t since_ms;   /* TO_HOT, REFRESH: when it became hot; TO_COOL: now */
    int64_t expires_ms; /* TO_HOT, REFRESH: now + ttl_ms (HC_HOTSET_NONE without ttl); TO_COOL:
                           HC_HOTSET_NONE */
    bool evicted;       /* TO_COOL: pushed out by hotter newcomers, not cooled down */
} hc_hotset_transition_t;

typedef struct hc_hotset hc_hotset_t;

/* NULL on bad options (errstr says which) or out of memory. */
hc_hotset_t *hc_hotset_new(const hc_hotset_opts_t *opts, char *errstr, size_t errstr_size);
void hc_hotset_destroy(hc_hotset_t *hs);

/* One window: begin, one offer per post of the window with its whole window's events (a post
 * offered twice in one window may be missed as a newcomer), end. offer is O(1) expected, or
 * O(log max) for a newcomer, and never allocates; events < 1 are ignored, as are ids longer than
 * HC_POST_ID_MAX. */
void hc_hotset_begin(hc_hotset_t *hs);
void hc_hotset_offer(hc_hotset_t *hs, const char *post_id, size_t post_id_len, int64_t events);

/* Applies the window: the transitions (cools and evictions first, then refreshes, then new hot
 * posts by rate, largest first), at most 2 x max. Borrowed, valid until the next begin. */
const hc_hotset_transition_t *hc_hotset_end(hc_hotset_t *hs, size_t *n);

/* The state of post_id after the last end (COLD for any post not in the set). */
hc_hotset_state_t hc_hotset_state(const hc_hotset_t *hs, const char *post_id, size_t post_id_len);
size_t hc_hotset_size(const hc_hotset_t *hs); /* members: HOT or COOLING */

/* Member i (0 <= i < hc_hotset_size, in no particular order) after the last end: its id
 * (borrowed, valid until the next end), state and the last closed window's rate. For the
 * metrics. */
typedef struct hc_hotset_member {
    const char *post_id;
    size_t post_id_len;
    hc_hotset_state_t state;
    double rate;
} hc_hotset_member_t;
hc_hotset_member_t hc_hotset_member(const hc_hotset_t *hs, size_t i);

typedef struct hc_hotset_stats {
    int64_t to_hot;  /* TO_HOT transitions so far */
    int64_t to_cool; /* TO_COOL transitions so far (evictions included) */
    int64_t evicted; /* of which evictions */
    int64_t dropped; /* newcomers at or over enter_rate that did not fit */
    int64_t dips;    /* COOLING -> HOT: dips below leave_rate the dwell kept silent */
    int64_t flaps;   /* TO_HOT less than flap_ms after the same post's TO_COOL (may err low) */
} hc_hotset_stats_t;
hc_hotset_stats_t hc_hotset_stats(const hc_hotset_t *hs);

/* ---- the records of topic.hotkeys (docs/FORMATS.md) ---- */

typedef enum hc_hotkey_source {
    HC_HOTKEY_DETECTED, /* stage 2's hot set */
    HC_HOTKEY_DECLARED, /* `hotcount hotkeys declare` */
} hc_hotkey_source_t;

typedef struct hc_hotkey_record {
    char post_id[HC_POST_ID_MAX + 1]; /* NUL-terminated, may hold NULs */
    size_t post_id_len;
    bool hot;         /* state "hot" (else "cool") */
    double rate;      /* events/s; 0 for declared records */
    int64_t since_ms; /* ms since the epoch */
    hc_hotkey_source_t source;
    int64_t expires_ms; /* HC_HOTSET_NONE: null */
    int32_t salts;      /* declared: the salts asked for, 0 = not given */
} hc_hotkey_record_t;

/* Kafka key of a record: "<source>:" then the post id ("detected:p1", "declared:p1"). The
 * topic is compacted, so the key decides which records survive: one per post and source, so
 * that a detection never compacts a declaration away. Writes at most size bytes, returns the
 * key's length (0 when it does not fit). */
size_t hc_hotkey_record_key(const hc_hotkey_record_t *rec, char *out, size_t size);

/* The record as compact JSON (malloc'd, caller frees), or NULL when out of memory. */
char *hc_hotkey_record_encode(const hc_hotkey_record_t *rec);

/* Parses a record's value. HC_ERR_RECORD with errstr when it is not one. */
hc_err_t hc_hotkey_record_parse(const void *value, size_t len, hc_hotkey_record_t *rec,
                                char *errstr, size_t errstr_size);

/* Whether rec makes its post hot at now_ms: a "hot" record not yet expired and, for a
 * declared one, whose start (since) has come. */
bool hc_hotkey_record_is_hot(const hc_hotkey_record_t *rec, int64_t now_ms);

#endif
