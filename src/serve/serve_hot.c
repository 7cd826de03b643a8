/* Read-hot promotion (see include/serve/hotcount/serve_hot.h for the contract).
 *
 * Layout, all allocated by hc_serve_hot_new, `max` of each: the sketch (hc_hotkeys) and `win`,
 * its last closed window; the hot set (hc_hotset), with `since`, its members' promotion times
 * sorted by keyed hash (the hot set's transitions say when a member came and went; its member
 * view gives ids and rates); `topic`, the topic-hot posts that were read and are not read-hot
 * by themselves; `refs`, room to sort both for a list. */
#include "hotcount/serve_hot.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "hotcount/hotkeys.h"
#include "hotcount/hotset.h"
#include "hotcount/siphash.h"

typedef struct since {
    uint64_t hash;
    int64_t since_ms;
} since_t;

typedef struct topic {
    uint64_t hash;
    uint16_t len;
    int64_t since_ms;
    int64_t reads; /* in the open window */
    double rate;   /* the last closed window's */
    char key[HC_POST_ID_MAX];
} topic_t;

typedef struct ref {
    double rate;
    size_t i; /* < max: hot-set member i; else topic[i - max] */
} ref_t;

struct hc_serve_hot {
    hc_serve_hot_opts_t o;
    pthread_mutex_t lock;
    hc_hash_key_t hkey;
    hc_hotkeys_t *sk; /* owned */
    hc_hotkey_t *win; /* owned, max */
    size_t nwin;
    hc_hotset_t *hs; /* owned */
    since_t *since;  /* owned, max, sorted by hash */
    size_t nsince;
    topic_t *topic; /* owned, max */
    size_t ntopic;
    ref_t *refs; /* owned, 2 max */
    hc_serve_hot_topic_fn topic_fn;
    void *topic_opaque;
    int64_t window_start;
    hc_serve_hot_stats_t st; /* topic counters, reads, unlisted; the rest filled on demand */
};

static int64_t hot_clock(void *opaque)
{
    const hc_serve_hot_t *hot = opaque;
    return hot->o.now_ms(hot->o.clock_opaque);
}

static uint64_t hash_key(const hc_serve_hot_t *hot, const char *key, size_t len)
{
    return hc_siphash13(&hot->hkey, key, len);
}

hc_err_t hc_serve_hot_new(const hc_serve_hot_opts_t *opts, hc_serve_hot_t **out, char *errstr,
                          size_t errstr_size)
{
    *out = NULL;
    if (!opts->now_ms || !(opts->enter_rate > 0) || !(opts->leave_rate >= 0) ||
        !(opts->leave_rate < opts->enter_rate) || opts->dwell_ms < 0 || opts->ttl_ms < 1 ||
        opts->hot_ttl_ms < opts->ttl_ms || opts->max < 1 || opts->max > HC_SERVE_HOT_MAX ||
        opts->window_ms < 1) {
        hc_errstr_set(errstr, errstr_size,
                      "read-hot: want a clock, 0 <= leave < enter rate, dwell >= 0, 1 <= ttl <= "
                      "hot ttl, 1 <= max <= %d, window >= 1",
                      HC_SERVE_HOT_MAX);
        return HC_ERR_INVALID;
    }
    hc_serve_hot_t *hot = calloc(1, sizeof(*hot));
    if (!hot) {
        goto oom;
    }
    hot->o = *opts;
    hot->hkey = hc_hash_process_key();
    if (pthread_mutex_init(&hot->lock, NULL) != 0) {
        free(hot);
        goto oom;
    }
    /* enter rate 0: the sketch's own hysteresis off, it only counts */
    hot->sk = hc_hotkeys_new(opts->max, 0, 0);
    hot->win = calloc(opts->max, sizeof(*hot->win));
    hot->since = calloc(opts->max, sizeof(*hot->since));
    hot->topic = calloc(opts->max, sizeof(*hot->topic));
    hot->refs = calloc(2 * opts->max, sizeof(*hot->refs));
    hc_hotset_opts_t ho = {.enter_rate = opts->enter_rate,
                           .leave_rate = opts->leave_rate,
                           .dwell_ms = opts->dwell_ms,
                           .max = opts->max,
                           .window_ms = opts->window_ms,
                           .ttl_ms = 0, /* nothing is announced: no refresh */
                           .flap_ms = HC_SERVE_HOT_FLAP_MS,
                           .now_ms = hot_clock,
                           .clock_opaque = hot};
    hot->hs = hc_hotset_new(&ho, errstr, errstr_size);
    if (!hot->sk || !hot->win || !hot->since || !hot->topic || !hot->refs || !hot->hs) {
        hc_serve_hot_destroy(hot);
        goto oom;
    }
    hot->window_start = opts->now_ms(opts->clock_opaque);
    *out = hot;
    return HC_OK;
oom:
    hc_errstr_set(errstr, errstr_size, "read-hot: out of memory");
    return HC_ERR_FATAL;
}

void hc_serve_hot_destroy(hc_serve_hot_t *hot)
{
    if (!hot) {
        return;
    }
    hc_hotset_destroy(hot->hs);
    hc_hotkeys_destroy(hot->sk);
    free(hot->win);
    free(hot->since);
    free(hot->topic);
    free(hot->refs);
    pthread_mutex_destroy(&hot->lock);
    free(hot);
}

void hc_serve_hot_set_topic(hc_serve_hot_t *hot, hc_serve_hot_topic_fn fn, void *opaque)
{
    pthread_mutex_lock(&hot->lock);
    hot->topic_fn = fn;
    hot->topic_opaque = opaque;
    pthread_mutex_unlock(&hot->lock);
}

static int by_hash(const void *a, const void *b)
{
    const since_t *x = a;
    const since_t *y = b;
    return x->hash < y->hash ? -1 : x->hash > y->hash;
}

static since_t *since_find(hc_serve_hot_t *hot, uint64_t h)
{
    since_t probe = {.hash = h};
    return bsearch(&probe, hot->since, hot->nsince, sizeof(*hot->since), by_hash);
}

/* Keeps `since` in step with the hot set: its transitions list cools before new members. */
static void apply_transitions(hc_serve_hot_t *hot, const hc_hotset_transition_t *t, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t h = hash_key(hot, t[i].post_id, t[i].post_id_len);
        if (t[i].change == HC_HOTSET_TO_COOL) {
            since_t *s = since_find(hot, h);
            if (s) { /* keeps the order for the next finds */
                size_t at = (size_t)(s - hot->since);
                memmove(s, s + 1, (hot->nsince - at - 1) * sizeof(*s));
                hot->nsince--;
            }
        } else if (t[i].change == HC_HOTSET_TO_HOT && hot->nsince < hot->o.max) {
            hot->since[hot->nsince++] = (since_t){h, t[i].since_ms};
        }
    }
    qsort(hot->since, hot->nsince, sizeof(*hot->since), by_hash);
}

/* Closes the window [window_start, now): the sketch's posts into the hot set, the topic list
 * re-checked. Lock held. */
static void close_window(hc_serve_hot_t *hot, int64_t now)
{
    int64_t len = now - hot->window_start;
    hc_hotkeys_window_end(hot->sk, len, hot->win, hot->o.max, &hot->nwin);
    hc_hotset_begin(hot->hs);
    for (size_t i = 0; i < hot->nwin; i++) {
        const hc_hotkey_t *k = &hot->win[i];
        bool member = hc_hotset_state(hot->hs, k->post_id, k->post_id_len) != HC_HOTSET_COLD;
        hc_hotset_offer(hot->hs, k->post_id, k->post_id_len,
                        member ? k->count : k->count - k->error);
    }
    size_t nt = 0;
    const hc_hotset_transition_t *t = hc_hotset_end(hot->hs, &nt);
    apply_transitions(hot, t, nt);
    double window_s = (double)(len > 0 ? len : hot->o.window_ms) / 1000.0;
    size_t kept = 0;
    for (size_t i = 0; i < hot->ntopic; i++) {
        topic_t *e = &hot->topic[i];
        e->rate = (double)e->reads / window_s;
        e->reads = 0;
        if (!hot->topic_fn || !hot->topic_fn(hot->topic_opaque, e->key, e->len)) {
            hot->st.demotions[HC_SERVE_HOT_TOPIC]++;
            continue;
        }
        hot->topic[kept++] = *e;
    }
    hot->ntopic = kept;
    hot->window_start = now;
}

static void tick(hc_serve_hot_t *hot, int64_t now)
{
    if (now - hot->window_start >= hot->o.window_ms) {
        close_window(hot, now);
    } else if (now < hot->window_start) {
        hot->window_start = now; /* a clock that went back: start over */
    }
}

static topic_t *topic_find(hc_serve_hot_t *hot, const char *key, size_t len, uint64_t h)
{
    for (size_t i = 0; i < hot->ntopic; i++) {
        topic_t *e = &hot->topic[i];
        if (e->hash == h && e->len == len && memcmp(e->key, key, len) == 0) {
            return e;
        }
    }
    return NULL;
}

int64_t hc_serve_hot_read(hc_serve_hot_t *hot, const char *post_id, size_t post_id_len)
{
    if (post_id_len == 0 || post_id_len > HC_POST_ID_MAX) {
        return hot->o.ttl_ms;
    }
    pthread_mutex_lock(&hot->lock);
    int64_t now = hot->o.now_ms(hot->o.clock_opaque);
    tick(hot, now);
    hot->st.reads++;
    hc_hotkeys_offer(hot->sk, post_id, post_id_len);
    int64_t ttl = hot->o.ttl_ms;
    if (hc_hotset_state(hot->hs, post_id, post_id_len) != HC_HOTSET_COLD) {
        ttl = hot->o.hot_ttl_ms;
    } else if (hot->topic_fn) {
        uint64_t h = hash_key(hot, post_id, post_id_len);
        topic_t *e = topic_find(hot, post_id, post_id_len, h);
        if (e) {
            e->reads++; /* checked hot at the last window's close at the latest */
            ttl = hot->o.hot_ttl_ms;
        } else if (hot->topic_fn(hot->topic_opaque, post_id, post_id_len)) {
            ttl = hot->o.hot_ttl_ms;
            if (hot->ntopic < hot->o.max) {
                e = &hot->topic[hot->ntopic++];
                e->hash = h;
                e->len = (uint16_t)post_id_len;
                e->since_ms = now;
                e->reads = 1;
                e->rate = 0;
                memcpy(e->key, post_id, post_id_len);
                hot->st.promotions[HC_SERVE_HOT_TOPIC]++;
            } else {
                hot->st.unlisted++;
            }
        }
    }
    pthread_mutex_unlock(&hot->lock);
    return ttl;
}

static int by_rate_desc(const void *a, const void *b)
{
    const ref_t *x = a;
    const ref_t *y = b;
    return x->rate > y->rate ? -1 : x->rate < y->rate;
}

/* Read-hot posts now: hot-set members, then topic posts the hot set does not hold. Lock held. */
static size_t collect(hc_serve_hot_t *hot)
{
    size_t n = 0, members = hc_hotset_size(hot->hs);
    for (size_t i = 0; i < members; i++) {
        hot->refs[n++] = (ref_t){hc_hotset_member(hot->hs, i).rate, i};
    }
    for (size_t i = 0; i < hot->ntopic; i++) {
        const topic_t *e = &hot->topic[i];
        if (hc_hotset_state(hot->hs, e->key, e->len) == HC_HOTSET_COLD) {
            hot->refs[n++] = (ref_t){e->rate, hot->o.max + i};
        }
    }
    return n;
}

size_t hc_serve_hot_list(hc_serve_hot_t *hot, hc_serve_hot_post_t *out, size_t max, size_t *n)
{
    pthread_mutex_lock(&hot->lock);
    tick(hot, hot->o.now_ms(hot->o.clock_opaque));
    size_t total = collect(hot);
    qsort(hot->refs, total, sizeof(*hot->refs), by_rate_desc);
    *n = total < max ? total : max;
    for (size_t j = 0; j < *n; j++) {
        hc_serve_hot_post_t *p = &out[j];
        size_t i = hot->refs[j].i;
        memset(p, 0, sizeof(*p));
        if (i < hot->o.max) {
            hc_hotset_member_t mb = hc_hotset_member(hot->hs, i);
            const since_t *s = since_find(hot, hash_key(hot, mb.post_id, mb.post_id_len));
            memcpy(p->post_id, mb.post_id, mb.post_id_len);
            p->post_id_len = mb.post_id_len;
            p->rate = mb.rate;
            p->since_ms = s ? s->since_ms : hot->window_start;
            p->source = HC_SERVE_HOT_READS;
            p->cooling = mb.state == HC_HOTSET_COOLING;
        } else {
            const topic_t *e = &hot->topic[i - hot->o.max];
            memcpy(p->post_id, e->key, e->len);
            p->post_id_len = e->len;
            p->rate = e->rate;
            p->since_ms = e->since_ms;
            p->source = HC_SERVE_HOT_TOPIC;
        }
    }
    pthread_mutex_unlock(&hot->lock);
    return total;
}

hc_serve_hot_stats_t hc_serve_hot_stats(hc_serve_hot_t *hot)
{
    pthread_mutex_lock(&hot->lock);
    tick(hot, hot->o.now_ms(hot->o.clock_opaque));
    hc_serve_hot_stats_t st = hot->st;
    hc_hotset_stats_t hs = hc_hotset_stats(hot->hs);
    st.posts = collect(hot);
    st.promotions[HC_SERVE_HOT_READS] = hs.to_hot;
    st.demotions[HC_SERVE_HOT_READS] = hs.to_cool;
    st.flaps = hs.flaps;
    st.sampled = hot->nwin;
    pthread_mutex_unlock(&hot->lock);
    return st;
}
