/* Layer: core. Hot posts of one window: a space-saving top-K (Metwally, Agrawal, El Abbadi,
 * 2005) with hysteresis, for stage 1's "which posts are viral right now" metric and log lines.
 *
 * Space-saving keeps exactly k counters. An offer of a monitored post adds 1 to its counter; an
 * offer of any other post takes over the counter with the smallest count c, which becomes c + 1
 * with error c. So, over the N offers of a window:
 *   - a counter never underestimates: true count <= count, and count - error <= true count;
 *   - every post whose true count is > N / k is monitored (reported by window_end);
 *   - the smallest count is <= N / k, so an unmonitored post had at most N / k events.
 *
 * Cost: O(1) per offer, no allocation. Counters sit in an array kept sorted by count, split into
 * runs of equal counts ("groups", Metwally's Stream-Summary in array form), so a +1 is one swap
 * to the end of the run; a small open-addressing index (>= 8k slots) finds a post's counter.
 * Measured with bench/bench_hotkeys.c (16-byte ids over 100k posts, k = 64, gcc -O2, a shared
 * 2-vCPU VM): 22-28 ns per offer at best and at most 40 ns median under load, for uniform to
 * Zipf s = 1.5 streams (the table is in that file's header).
 *
 * Hysteresis across windows: a post ENTERS the hot set when its guaranteed rate
 * (count - error) / window s is >= enter_rate, and LEAVES when even its estimated rate
 * count / window s is below leave_rate (< enter_rate), or when it is no longer monitored at all
 * (its true rate is then at most N / (k * window s); choose k so that this stays below
 * leave_rate at the expected traffic, or posts near the thresholds may flap). Entering on the
 * lower bound keeps a post that merely inherited a large counter out of the log lines.
 *
 * Memory: about 1.2 KiB per counter (counters, keys, index, hot set, transitions; k = 64: about
 * 76 KiB), all allocated by hc_hotkeys_new; an offer or window_end never allocates.
 * Pure module, no I/O. Not thread-safe: one owner thread (a stage-1 instance). */
#ifndef HOTCOUNT_HOTKEYS_H
#define HOTCOUNT_HOTKEYS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hotcount/event.h"

#define HC_HOTKEYS_DEFAULT_K 64
#define HC_HOTKEYS_MAX_K 4096 /* the index stores 16-bit counter numbers */

typedef struct hc_hotkeys hc_hotkeys_t;

/* One monitored post at the end of a window. */
typedef struct hc_hotkey {
    char post_id[HC_POST_ID_MAX + 1]; /* copy; NUL-terminated for convenience, may hold NULs */
    size_t post_id_len;
    int64_t count;            /* estimated events in the window; never below the true count */
    int64_t error;            /* the true count is in [count - error, count] */
    double events_per_second; /* count / window seconds */
    double error_per_second;  /* error / window seconds */
    bool hot;                 /* in the hot set after this window's transitions */
} hc_hotkey_t;

typedef enum hc_hotkey_change {
    HC_HOTKEY_ENTER, /* rate rose to >= enter_rate: now hot */
    HC_HOTKEY_LEAVE, /* rate fell below leave_rate (or the post is no longer monitored) */
} hc_hotkey_change_t;

typedef struct hc_hotkey_transition {
    hc_hotkey_change_t change;
    char post_id[HC_POST_ID_MAX + 1]; /* NUL-terminated copy, may hold NULs */
    size_t post_id_len;
    /* ENTER: the guaranteed rate (count - error) / s. LEAVE: the estimated rate count / s; for a
     * post no longer monitored, the bound on its rate: the smallest counter / s (<= N / (k * s)),
     * and not_monitored is true. */
    double events_per_second;
    bool not_monitored;
} hc_hotkey_transition_t;

/* k counters (1 <= k <= HC_HOTKEYS_MAX_K). enter_rate > 0 and 0 <= leave_rate < enter_rate turn
 * the hysteresis on; enter_rate <= 0 turns it off (no transitions, nothing is ever hot).
 * Returns NULL on bad arguments or out of memory. */
hc_hotkeys_t *hc_hotkeys_new(size_t k, double enter_rate, double leave_rate);
void hc_hotkeys_destroy(hc_hotkeys_t *hk);

/* Counts one event of post_id in the open window: O(1) expected, no allocation. A post_id longer
 * than HC_POST_ID_MAX (never a valid event) is ignored. */
void hc_hotkeys_offer(hc_hotkeys_t *hk, const char *post_id, size_t post_id_len);

/* n events of post_id at once (weighted space-saving: the bounds above hold with N the sum of
 * the weights): stage 1 offers each post of its table once per window, with the window's exact
 * count, instead of once per event. O(k) at worst, no allocation; n < 1 is ignored. */
void hc_hotkeys_offer_n(hc_hotkeys_t *hk, const char *post_id, size_t post_id_len, int64_t n);

/* Offers (events) in the open window, N above. */
int64_t hc_hotkeys_events(const hc_hotkeys_t *hk);

/* Closes the window of window_ms milliseconds (the real length; values < 1 count as 1): writes
 * up to max monitored posts, largest count first, to out[0 .. *n), applies the hysteresis (see
 * hc_hotkeys_transitions) and starts an empty window. out may be NULL when max is 0. */
void hc_hotkeys_window_end(hc_hotkeys_t *hk, int64_t window_ms, hc_hotkey_t *out, size_t max,
                           size_t *n);

/* The enter/leave transitions of the last hc_hotkeys_window_end (leaves first, then enters by
 * rate, largest first): at most 2 k. Borrowed; valid until the next window_end/reset/destroy. */
const hc_hotkey_transition_t *hc_hotkeys_transitions(const hc_hotkeys_t *hk, size_t *n);

/* Drops the open window's counts without reporting or transitions (stage 1 calls it when a
 * window is aborted: its events will be read again). The hot set is kept. */
void hc_hotkeys_reset(hc_hotkeys_t *hk);

/* True when post_id is in the hot set now (after the last window_end). */
bool hc_hotkeys_is_hot(const hc_hotkeys_t *hk, const char *post_id, size_t post_id_len);

#endif
