/* Space-saving top-K with hysteresis (see include/core/hotcount/hotkeys.h for the guarantees).
 *
 * Layout, chosen so that an offer touches few cache lines:
 *   ctr     k small counter records (count, error, hash, key length, group, position, slot);
 *   keys    k key buffers of HC_POST_ID_MAX bytes, read only to confirm a hash match;
 *   ord     counter numbers sorted by count, ascending: ord[0] is always a smallest counter;
 *   groups  one record per run of equal counts in ord ({count, lo, hi}), at most k live;
 *   slots   open addressing (linear probing, >= 8k slots, so <= 12.5% full: probes and
 *           back-shifts rarely go past one slot, which keeps their branches predictable) from a
 *           key's hash to its counter; removal shifts back instead of leaving tombstones, so
 *           probes stay short however many posts a window sees.
 *
 * Unused counters have count 0 and sit in the lowest group, so "take over the smallest counter"
 * fills empty counters first without a special case. */
#include "hotcount/hotkeys.h"

#include <stdlib.h>
#include <string.h>

#include "hotcount/siphash.h"

typedef struct counter {
    int64_t count;
    int64_t error;
    uint32_t hash;
    uint16_t len;
    uint16_t group;
    uint16_t pos;  /* index in ord */
    uint16_t slot; /* index in slots while monitored (kept current by the back-shifts) */
    bool hot_seen; /* window_end: this counter's post was hot before this window */
    bool hot_now;  /* window_end: this counter's post is hot after this window */
} counter_t;

typedef struct group {
    int64_t count;
    uint16_t lo; /* ord[lo .. hi] hold this count */
    uint16_t hi;
} group_t;

typedef struct slot {
    uint32_t hash;
    uint16_t ctr1; /* counter number + 1; 0 = empty */
} slot_t;

typedef struct hot {
    uint32_t hash;
    uint16_t len;
    char key[HC_POST_ID_MAX];
} hot_t;

struct hc_hotkeys {
    size_t k;
    double enter_rate; /* <= 0: hysteresis off */
    double leave_rate;
    int64_t events;
    counter_t *ctr;  /* owned, k */
    char *keys;      /* owned, k * HC_POST_ID_MAX */
    uint16_t *ord;   /* owned, k */
    group_t *groups; /* owned, k */
    uint16_t *spare; /* owned, k: a stack of unused group numbers */
    size_t spare_n;
    slot_t *slots; /* owned, mask + 1 */
    size_t mask;
    hot_t *hot; /* owned, k: the hot set */
    size_t hot_n;
    hc_hotkey_transition_t *trans; /* owned, 2 k */
    size_t trans_n;
    hc_hash_key_t hkey; /* the process key */
};

/* SipHash-1-3 under the process's random key (hotcount/siphash.h), folded to 32 bits: post ids
 * come from any producer, and with an unkeyed hash a crafted set of ids could share one probe
 * run of the index on every offer. */
static uint32_t hash_key(const hc_hotkeys_t *hk, const char *key, size_t len)
{
    uint64_t h = hc_siphash13(&hk->hkey, key, len);
    return (uint32_t)h ^ (uint32_t)(h >> 32);
}

static const char *key_of(const hc_hotkeys_t *hk, size_t c)
{
    return hk->keys + c * HC_POST_ID_MAX;
}

static void window_clear(hc_hotkeys_t *hk)
{
    for (size_t i = 0; i < hk->k; i++) {
        hk->ctr[i] = (counter_t){.group = 0, .pos = (uint16_t)i};
        hk->ord[i] = (uint16_t)i;
    }
    hk->groups[0] = (group_t){.count = 0, .lo = 0, .hi = (uint16_t)(hk->k - 1)};
    hk->spare_n = 0;
    for (size_t g = hk->k; g-- > 1;) {
        hk->spare[hk->spare_n++] = (uint16_t)g;
    }
    memset(hk->slots, 0, (hk->mask + 1) * sizeof(*hk->slots));
    hk->events = 0;
}

hc_hotkeys_t *hc_hotkeys_new(size_t k, double enter_rate, double leave_rate)
{
    if (k < 1 || k > HC_HOTKEYS_MAX_K) {
        return NULL;
    }
    if (enter_rate > 0 && !(leave_rate >= 0 && leave_rate < enter_rate)) {
        return NULL;
    }
    hc_hotkeys_t *hk = calloc(1, sizeof(*hk));
    if (!hk) {
        return NULL;
    }
    hk->k = k;
    hk->hkey = hc_hash_process_key();
    hk->enter_rate = enter_rate > 0 ? enter_rate : 0;
    hk->leave_rate = enter_rate > 0 ? leave_rate : 0;
    size_t slots = 16;
    while (slots < 8 * k) {
        slots *= 2;
    }
    hk->mask = slots - 1;
    hk->ctr = calloc(k, sizeof(*hk->ctr));
    hk->keys = malloc(k * HC_POST_ID_MAX);
    hk->ord = calloc(k, sizeof(*hk->ord));
    hk->groups = calloc(k, sizeof(*hk->groups));
    hk->spare = calloc(k, sizeof(*hk->spare));
    hk->slots = calloc(slots, sizeof(*hk->slots));
    hk->hot = calloc(k, sizeof(*hk->hot));
    hk->trans = calloc(2 * k, sizeof(*hk->trans));
    if (!hk->ctr || !hk->keys || !hk->ord || !hk->groups || !hk->spare || !hk->slots || !hk->hot ||
        !hk->trans) {
        hc_hotkeys_destroy(hk);
        return NULL;
    }
    window_clear(hk);
    return hk;
}

void hc_hotkeys_destroy(hc_hotkeys_t *hk)
{
    if (!hk) {
        return;
    }
    free(hk->ctr);
    free(hk->keys);
    free(hk->ord);
    free(hk->groups);
    free(hk->spare);
    free(hk->slots);
    free(hk->hot);
    free(hk->trans);
    free(hk);
}

/* Key equality over 8-byte words (the tail re-reads an overlapping word), without a call into
 * libc: on the per-event path the ids are short and a memcmp call costs more than the compare. */
static inline bool keys_equal(const char *a, const char *b, size_t len)
{
    uint64_t x;
    uint64_t y;
    if (len >= 8) {
        for (size_t i = 0; i + 8 < len; i += 8) {
            memcpy(&x, a + i, 8);
            memcpy(&y, b + i, 8);
            if (x != y) {
                return false;
            }
        }
        memcpy(&x, a + len - 8, 8);
        memcpy(&y, b + len - 8, 8);
        return x == y;
    }
    for (size_t i = 0; i < len; i++) {
        if (a[i] != b[i]) {
            return false;
        }
    }
    return true;
}

/* Copies a key into its counter's buffer (HC_POST_ID_MAX bytes), by words like keys_equal. */
static inline void key_copy(char *dst, const char *src, size_t len)
{
    uint64_t w;
    if (len >= 8) {
        for (size_t i = 0; i + 8 < len; i += 8) {
            memcpy(&w, src + i, 8);
            memcpy(dst + i, &w, 8);
        }
        memcpy(&w, src + len - 8, 8);
        memcpy(dst + len - 8, &w, 8);
        return;
    }
    for (size_t i = 0; i < len; i++) {
        dst[i] = src[i];
    }
}

/* The counter holding key, or -1. */
static inline int find(const hc_hotkeys_t *hk, const char *key, size_t len, uint32_t h)
{
    for (size_t pos = h & hk->mask;; pos = (pos + 1) & hk->mask) {
        slot_t s = hk->slots[pos];
        if (s.ctr1 == 0) {
            return -1;
        }
        if (s.hash == h) {
            int c = s.ctr1 - 1;
            if (hk->ctr[c].len == len && keys_equal(key_of(hk, (size_t)c), key, len)) {
                return c;
            }
        }
    }
}

static void index_insert(hc_hotkeys_t *hk, uint16_t c, uint32_t h)
{
    size_t pos = h & hk->mask;
    while (hk->slots[pos].ctr1 != 0) {
        pos = (pos + 1) & hk->mask;
    }
    hk->slots[pos] = (slot_t){.hash = h, .ctr1 = (uint16_t)(c + 1)};
    hk->ctr[c].slot = (uint16_t)pos;
}

/* Removes counter c's slot (known from the counter: no search) and shifts later members of the
 * probe run back into the hole, so every remaining key stays reachable from its home slot without
 * tombstones. */
static void index_remove(hc_hotkeys_t *hk, uint16_t c)
{
    size_t mask = hk->mask;
    size_t i = hk->ctr[c].slot;
    for (size_t j = i;;) {
        j = (j + 1) & mask;
        if (hk->slots[j].ctr1 == 0) {
            break;
        }
        size_t home = hk->slots[j].hash & mask;
        /* slot j's key may fill the hole at i only if i lies on its probe path home..j */
        if (((j - home) & mask) >= ((j - i) & mask)) {
            hk->slots[i] = hk->slots[j];
            hk->ctr[hk->slots[i].ctr1 - 1].slot = (uint16_t)i;
            i = j;
        }
    }
    hk->slots[i].ctr1 = 0;
}

/* Moves counter c to the top end of its run (one swap; the run's counts are all equal, so ord
 * stays sorted) and returns that position. */
static inline uint16_t move_to_run_top(hc_hotkeys_t *hk, uint16_t c)
{
    counter_t *ct = &hk->ctr[c];
    uint16_t hi = hk->groups[ct->group].hi;
    if (ct->pos != hi) {
        uint16_t other = hk->ord[hi];
        hk->ord[ct->pos] = other;
        hk->ctr[other].pos = ct->pos;
        hk->ord[hi] = c;
        ct->pos = hi;
    }
    return hi;
}

/* count += 1 for counter c, keeping ord sorted: c moves to the top end of its run (one swap),
 * then either its run shrinks and c starts or joins the next run, or a one-counter run simply
 * takes the new count. O(1). */
static inline void increment(hc_hotkeys_t *hk, uint16_t c)
{
    counter_t *ct = &hk->ctr[c];
    uint16_t g = ct->group;
    group_t *grp = &hk->groups[g];
    uint16_t hi = move_to_run_top(hk, c);

    ct->count++;
    uint16_t next = UINT16_MAX;
    if ((size_t)hi + 1 < hk->k) {
        uint16_t ng = hk->ctr[hk->ord[hi + 1]].group;
        if (hk->groups[ng].count == ct->count) {
            next = ng;
        }
    }
    if (grp->lo == hi) {
        if (next == UINT16_MAX) {
            grp->count++;
            return;
        }
        hk->spare[hk->spare_n++] = g;
    } else {
        grp->hi = (uint16_t)(hi - 1);
        if (next == UINT16_MAX) {
            /* a run left behind means fewer than k runs are live: a spare exists */
            uint16_t fresh = hk->spare[--hk->spare_n];
            hk->groups[fresh] = (group_t){.count = ct->count, .lo = hi, .hi = hi};
            ct->group = fresh;
            return;
        }
    }
    hk->groups[next].lo = hi;
    ct->group = next;
}

/* count += d for counter c, where count + d stays below the next run's count (or c's run is the
 * top one): c moves to the top end of its run and keeps it (alone in it) or starts a run of its
 * own. O(1). */
static void raise_within_gap(hc_hotkeys_t *hk, uint16_t c, int64_t d)
{
    counter_t *ct = &hk->ctr[c];
    group_t *grp = &hk->groups[ct->group];
    uint16_t hi = move_to_run_top(hk, c);

    ct->count += d;
    if (grp->lo == hi) {
        grp->count += d;
        return;
    }
    grp->hi = (uint16_t)(hi - 1);
    /* the run had two counters or more, so fewer than k runs are live: a spare exists */
    uint16_t fresh = hk->spare[--hk->spare_n];
    hk->groups[fresh] = (group_t){.count = ct->count, .lo = hi, .hi = hi};
    ct->group = fresh;
}

/* count += w for counter c, keeping ord sorted: a jump through each gap between runs and one
 * increment into each run passed. O(runs passed), at most k. */
static void increment_by(hc_hotkeys_t *hk, uint16_t c, int64_t w)
{
    while (w > 0) {
        const counter_t *ct = &hk->ctr[c];
        uint16_t hi = hk->groups[ct->group].hi;
        int64_t gap = INT64_MAX; /* counts strictly between c's and the next run's */
        if ((size_t)hi + 1 < hk->k) {
            gap = hk->groups[hk->ctr[hk->ord[hi + 1]].group].count - ct->count - 1;
        }
        if (gap > 0) {
            int64_t d = gap < w ? gap : w;
            raise_within_gap(hk, c, d);
            w -= d;
            if (w == 0) {
                return;
            }
        }
        increment(hk, c); /* joins the next run */
        w--;
    }
}

/* The miss path: a smallest counter goes to the newcomer, which may have occurred up to that
 * counter's count times while unmonitored; that count becomes its error. Returns the counter,
 * still to be incremented. */
static uint16_t take_over(hc_hotkeys_t *hk, const char *post_id, size_t post_id_len, uint32_t h)
{
    uint16_t victim = hk->ord[0];
    counter_t *ct = &hk->ctr[victim];
    if (ct->count > 0) {
        index_remove(hk, victim);
    }
    ct->error = ct->count;
    ct->hash = h;
    ct->len = (uint16_t)post_id_len;
    key_copy(hk->keys + (size_t)victim * HC_POST_ID_MAX, post_id, post_id_len);
    index_insert(hk, victim, h);
    return victim;
}

void hc_hotkeys_offer(hc_hotkeys_t *hk, const char *post_id, size_t post_id_len)
{
    if (post_id_len > HC_POST_ID_MAX) {
        return;
    }
    uint32_t h = hash_key(hk, post_id, post_id_len);
    hk->events++;
    int c = find(hk, post_id, post_id_len, h);
    /* one call site, so the compiler inlines increment */
    increment(hk, c >= 0 ? (uint16_t)c : take_over(hk, post_id, post_id_len, h));
}

void hc_hotkeys_offer_n(hc_hotkeys_t *hk, const char *post_id, size_t post_id_len, int64_t n)
{
    if (post_id_len > HC_POST_ID_MAX || n < 1) {
        return;
    }
    uint32_t h = hash_key(hk, post_id, post_id_len);
    hk->events += n;
    int c = find(hk, post_id, post_id_len, h);
    increment_by(hk, c >= 0 ? (uint16_t)c : take_over(hk, post_id, post_id_len, h), n);
}

int64_t hc_hotkeys_events(const hc_hotkeys_t *hk)
{
    return hk->events;
}

static void add_transition(hc_hotkeys_t *hk, hc_hotkey_change_t change, const char *key, size_t len,
                           double rate, bool not_monitored)
{
    hc_hotkey_transition_t *tr = &hk->trans[hk->trans_n++];
    tr->change = change;
    memcpy(tr->post_id, key, len);
    tr->post_id[len] = '\0';
    tr->post_id_len = len;
    tr->events_per_second = rate;
    tr->not_monitored = not_monitored;
}

/* Leaves, then enters. The hot set only ever holds monitored posts, one per counter, so it
 * never exceeds k entries and transitions never exceed 2 k. */
static void apply_hysteresis(hc_hotkeys_t *hk, double secs)
{
    int64_t smallest = hk->ctr[hk->ord[0]].count;
    size_t keep = 0;

    for (size_t i = 0; i < hk->hot_n; i++) {
        hot_t *ht = &hk->hot[i];
        int c = find(hk, ht->key, ht->len, ht->hash);
        if (c < 0) {
            add_transition(hk, HC_HOTKEY_LEAVE, ht->key, ht->len, (double)smallest / secs, true);
            continue;
        }
        counter_t *ct = &hk->ctr[c];
        double rate = (double)ct->count / secs;
        ct->hot_seen = true;
        if (rate < hk->leave_rate) {
            add_transition(hk, HC_HOTKEY_LEAVE, ht->key, ht->len, rate, false);
            continue;
        }
        ct->hot_now = true;
        if (keep != i) {
            hk->hot[keep] = *ht;
        }
        keep++;
    }
    hk->hot_n = keep;

    for (size_t i = hk->k; i-- > 0;) {
        uint16_t c = hk->ord[i];
        counter_t *ct = &hk->ctr[c];
        if (ct->count == 0) {
            break;
        }
        double guaranteed = (double)(ct->count - ct->error) / secs;
        if (ct->hot_seen || guaranteed < hk->enter_rate) {
            continue;
        }
        add_transition(hk, HC_HOTKEY_ENTER, key_of(hk, c), ct->len, guaranteed, false);
        hot_t *ht = &hk->hot[hk->hot_n++];
        ht->hash = ct->hash;
        ht->len = ct->len;
        memcpy(ht->key, key_of(hk, c), ct->len);
        ct->hot_now = true;
    }
}

void hc_hotkeys_window_end(hc_hotkeys_t *hk, int64_t window_ms, hc_hotkey_t *out, size_t max,
                           size_t *n)
{
    double secs = (double)(window_ms < 1 ? 1 : window_ms) / 1000.0;

    hk->trans_n = 0;
    if (hk->enter_rate > 0) {
        apply_hysteresis(hk, secs);
    }
    size_t got = 0;
    for (size_t i = hk->k; i-- > 0 && got < max;) {
        const counter_t *ct = &hk->ctr[hk->ord[i]];
        if (ct->count == 0) {
            break;
        }
        hc_hotkey_t *hot = &out[got++];
        memcpy(hot->post_id, key_of(hk, hk->ord[i]), ct->len);
        hot->post_id[ct->len] = '\0';
        hot->post_id_len = ct->len;
        hot->count = ct->count;
        hot->error = ct->error;
        hot->events_per_second = (double)ct->count / secs;
        hot->error_per_second = (double)ct->error / secs;
        hot->hot = ct->hot_now;
    }
    *n = got;
    window_clear(hk);
}

const hc_hotkey_transition_t *hc_hotkeys_transitions(const hc_hotkeys_t *hk, size_t *n)
{
    *n = hk->trans_n;
    return hk->trans;
}

void hc_hotkeys_reset(hc_hotkeys_t *hk)
{
    hk->trans_n = 0;
    window_clear(hk);
}

bool hc_hotkeys_is_hot(const hc_hotkeys_t *hk, const char *post_id, size_t post_id_len)
{
    for (size_t i = 0; i < hk->hot_n; i++) {
        if (hk->hot[i].len == post_id_len && memcmp(hk->hot[i].key, post_id, post_id_len) == 0) {
            return true;
        }
    }
    return false;
}
