/* /v1/stats: the stages' metrics summed, the store's top, and rates.
 *
 * The stages are scraped by a refresher thread of our own (hc_serve_stats_start), never on a
 * request: a stage that is slow, trickles, or does not answer costs that thread its scrape
 * deadline and nothing else; a render reads the last good sample of each stage under a mutex. */
#include "hotcount/serve_stats.h"

#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hotcount/clock.h"
#include "hotcount/hotkeys_scrape.h"
#include "hotcount/metric_defs.h"
#include "hotcount/metrics.h"
#include "hotcount/prom_text.h"
#include "hotcount/table.h"

#define MAX_STAGES 64
#define HOT_PER_STAGE HC_METRICS_HOT_KEYS
#define PREV_TOP_MAX 100000
/* The history: one point per refresh tick, 5 minutes at the 1 s refresh. A point's rate is over
 * the RATE_SPAN ticks before it: stage 1 commits once per flush.ms, so the difference over one
 * tick would swing between 0 and twice the rate as the commits fall on either side of a tick. */
#define HISTORY_POINTS 300
#define RATE_SPAN 5
#define RING_POINTS (HISTORY_POINTS + RATE_SPAN) /* the oldest shown has its whole span */

typedef struct reading {
    double events_in, store_writes, events_stored, lag, inst1, inst2, enter, leave;
    int have_events, have_writes, have_stored, have_lag, have_inst1, have_inst2, have_enter,
        have_leave;
} reading_t;

/* The pipeline's totals at one tick: the sum over stages of their counters since this serve
 * first saw them, made monotonic (a stage that restarted counts from its new value). */
typedef struct hist_point {
    int64_t tick;
    int64_t t_ms; /* when the tick's scrapes were done (hc_now_ms) */
    double in, writes;
    bool have_in, have_writes; /* every stage that reports the family answered this tick */
} hist_point_t;

typedef struct stage {
    char *addr; /* owned */
    bool up;    /* the last scrape answered */
    char error[256];
    bool have; /* a good sample exists */
    int64_t good_ms;
    reading_t cur;
    bool have_prev; /* the good sample before cur, for rates */
    int64_t prev_ms;
    reading_t prev;
    hc_scraped_hotkey_t *hot; /* owned: HOT_PER_STAGE */
    size_t hot_n;
    hc_scraped_hotkey_t *hotset; /* owned: HOT_PER_STAGE, stage 2's hot-set members */
    size_t hotset_n;
    double acc_in, acc_writes; /* monotonic totals since the first good sample, for history */
} stage_t;

struct hc_serve_stats {
    stage_t *stages; /* owned, stage_count of them */
    size_t stage_count;
    int connect_ms;
    int total_ms;
    bool expose;
    pthread_mutex_t lock; /* over stages[] samples */
    hc_table_t *prev_top; /* owned: post -> likes at the previous render (render's only) */
    int64_t prev_top_ms;
    hist_point_t *hist;       /* owned ring of RING_POINTS, under lock; ticks ascending */
    size_t hist_n, hist_head; /* points held; index of the oldest */
    int64_t last_tick;        /* -1 before the first */
    int step_ms;              /* a tick's nominal length */
    /* the refresher */
    bool running;
    int interval_ms;
    atomic_bool stop;
    pthread_mutex_t wait_lock;
    pthread_cond_t wait_cond;
    pthread_t thread;
};

/* A stage metric's name, from the registry (hotcount/metric_defs.h). */
#define NAME(id) (hc_metric_defs[id].name)

double hc_serve_stats_clamp(double v)
{
    /* jansson integers are int64: a double at or past 2^63 does not convert (undefined
     * behaviour), so the extremes stand for "at least this much". */
    if (v >= 9.2e18) {
        return 9.2e18;
    }
    if (v <= -9.2e18) {
        return -9.2e18;
    }
    return v;
}

double hc_serve_stats_sum(const char *text, const char *name, const char *label, int *found)
{
    size_t lab_len = label ? strlen(label) : 0;
    double sum = 0;
    *found = 0;
    hc_prom_sample_t smp;
    for (const char *pos = text; hc_prom_next(&pos, &smp);) {
        if (!hc_prom_is(&smp, name) ||
            (label && !memmem(smp.labels, smp.labels_len, label, lab_len))) {
            continue;
        }
        /* NaN and infinities are no counts: skipped, so one absurd sample cannot make the sum
         * meaningless; huge finite values are clamped. */
        if (isfinite(smp.value)) {
            sum = hc_serve_stats_clamp(sum + hc_serve_stats_clamp(smp.value));
            *found = 1;
        }
    }
    return sum;
}

hc_err_t hc_serve_stats_new(const char *stages, int connect_ms, int total_ms, bool expose,
                            hc_serve_stats_t **out, char *errstr, size_t errstr_size)
{
    *out = NULL;
    hc_serve_stats_t *s = calloc(1, sizeof(*s));
    if (!s) {
        goto oom;
    }
    s->connect_ms = connect_ms;
    s->total_ms = total_ms;
    s->expose = expose;
    atomic_init(&s->stop, false);
    if (pthread_mutex_init(&s->lock, NULL) != 0) {
        free(s);
        goto oom;
    }
    pthread_mutex_init(&s->wait_lock, NULL);
    pthread_cond_init(&s->wait_cond, NULL);
    s->stages = calloc(MAX_STAGES, sizeof(*s->stages));
    s->prev_top = hc_table_new(PREV_TOP_MAX);
    s->hist = calloc(RING_POINTS, sizeof(*s->hist));
    s->last_tick = -1;
    s->step_ms = 1000;
    if (!s->stages || !s->prev_top || !s->hist) {
        goto free_stats;
    }
    for (const char *p = stages; *p && s->stage_count < MAX_STAGES;) {
        size_t n = strcspn(p, ",");
        if (n > 0) {
            stage_t *st = &s->stages[s->stage_count];
            st->addr = strndup(p, n);
            st->hot = calloc(HOT_PER_STAGE, sizeof(*st->hot));
            st->hotset = calloc(HOT_PER_STAGE, sizeof(*st->hotset));
            s->stage_count++;
            if (!st->addr || !st->hot || !st->hotset) {
                goto free_stats;
            }
        }
        p += n;
        p += *p == ',';
    }
    *out = s;
    return HC_OK;
free_stats:
    hc_serve_stats_destroy(s);
oom:
    hc_errstr_set(errstr, errstr_size, "out of memory");
    return HC_ERR_FATAL;
}

static void refresh_at(hc_serve_stats_t *s, int64_t tick);

/* Ticks on a fixed schedule (start + k x interval), not interval after each refresh: the
 * history's points then fall one per tick however long the scrapes take; a refresh that
 * overruns skips the ticks it missed (null points: no sample then). */
static void *refresher(void *opaque)
{
    hc_serve_stats_t *s = opaque;
    int64_t start = hc_now_ms();
    for (int64_t tick = 0; !atomic_load(&s->stop);) {
        refresh_at(s, tick);
        int64_t now = hc_now_ms();
        tick++;
        if (start + tick * s->interval_ms <= now) {
            tick = (now - start) / s->interval_ms + 1;
        }
        int64_t wait_ms = start + tick * s->interval_ms - now;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += (time_t)(wait_ms / 1000);
        ts.tv_nsec += (long)(wait_ms % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_mutex_lock(&s->wait_lock);
        if (!atomic_load(&s->stop)) {
            pthread_cond_timedwait(&s->wait_cond, &s->wait_lock, &ts);
        }
        pthread_mutex_unlock(&s->wait_lock);
    }
    return NULL;
}

hc_err_t hc_serve_stats_start(hc_serve_stats_t *s, int interval_ms, char *errstr,
                              size_t errstr_size)
{
    if (s->stage_count == 0) {
        return HC_OK;
    }
    s->interval_ms = interval_ms > 0 ? interval_ms : 1000;
    s->step_ms = s->interval_ms;
    if (pthread_create(&s->thread, NULL, refresher, s) != 0) {
        hc_errstr_set(errstr, errstr_size, "cannot start the stats refresher thread");
        return HC_ERR_FATAL;
    }
    s->running = true;
    return HC_OK;
}

void hc_serve_stats_destroy(hc_serve_stats_t *s)
{
    if (!s) {
        return;
    }
    if (s->running) {
        pthread_mutex_lock(&s->wait_lock);
        atomic_store(&s->stop, true);
        pthread_cond_signal(&s->wait_cond);
        pthread_mutex_unlock(&s->wait_lock);
        pthread_join(s->thread, NULL);
    }
    for (size_t i = 0; s->stages && i < s->stage_count; i++) {
        free(s->stages[i].addr);
        free(s->stages[i].hot);
        free(s->stages[i].hotset);
    }
    free(s->hist);
    free(s->stages);
    hc_table_destroy(s->prev_top);
    pthread_cond_destroy(&s->wait_cond);
    pthread_mutex_destroy(&s->wait_lock);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

/* The counter's growth since the previous good sample: a value below the previous one is a
 * stage that restarted (its counters from 0), so all of the new value is growth. */
static double growth(double cur, int have_cur, double prev, int have_prev)
{
    if (!have_cur || !have_prev) {
        return 0;
    }
    return cur >= prev ? cur - prev : cur;
}

void hc_serve_stats_ingest(hc_serve_stats_t *s, size_t i, const char *text, const char *error,
                           int64_t now_ms)
{
    if (i >= s->stage_count) {
        return;
    }
    stage_t *st = &s->stages[i];
    reading_t r = {0};
    hc_scraped_hotkey_t *keys = NULL, *set = NULL;
    size_t n = 0, set_n = 0;
    if (text) {
        keys = calloc(HOT_PER_STAGE, sizeof(*keys));
        set = calloc(HOT_PER_STAGE, sizeof(*set));
        if (!keys || !set) {
            free(keys);
            free(set);
            return; /* out of memory: the stage keeps its last sample */
        }
        r.events_in = hc_serve_stats_sum(text, NAME(HC_M_EVENTS), NULL, &r.have_events);
        r.store_writes =
            hc_serve_stats_sum(text, NAME(HC_M_STORE_KEYS_WRITTEN), NULL, &r.have_writes);
        r.events_stored = hc_serve_stats_sum(text, NAME(HC_M_EVENTS_STORED), NULL, &r.have_stored);
        r.lag = hc_serve_stats_sum(text, NAME(HC_M_CONSUMER_LAG), NULL, &r.have_lag);
        r.inst1 =
            hc_serve_stats_sum(text, NAME(HC_M_STAGE_INSTANCES), "stage=\"1\"", &r.have_inst1);
        r.inst2 =
            hc_serve_stats_sum(text, NAME(HC_M_STAGE_INSTANCES), "stage=\"2\"", &r.have_inst2);
        r.enter = hc_serve_stats_sum(text, NAME(HC_M_HOTKEYS_ENTER_RATE), NULL, &r.have_enter);
        r.leave = hc_serve_stats_sum(text, NAME(HC_M_HOTKEYS_LEAVE_RATE), NULL, &r.have_leave);
        n = hc_hotkeys_parse(text, keys, HOT_PER_STAGE);
        set_n = hc_hotkeys_parse_family(text, NAME(HC_M_HOT_POST_EVENTS_PER_SECOND), set,
                                        HOT_PER_STAGE);
    }
    pthread_mutex_lock(&s->lock);
    st->up = text != NULL;
    if (text) {
        st->error[0] = '\0';
        if (st->have) {
            st->acc_in +=
                growth(r.events_in, r.have_events, st->cur.events_in, st->cur.have_events);
            st->acc_writes +=
                growth(r.store_writes, r.have_writes, st->cur.store_writes, st->cur.have_writes);
            st->prev = st->cur;
            st->prev_ms = st->good_ms;
            st->have_prev = true;
        }
        st->cur = r;
        st->good_ms = now_ms;
        st->have = true;
        memcpy(st->hot, keys, n * sizeof(*keys));
        st->hot_n = n;
        memcpy(st->hotset, set, set_n * sizeof(*set));
        st->hotset_n = set_n;
    } else {
        snprintf(st->error, sizeof(st->error), "%s", error ? error : "scrape failed");
    }
    pthread_mutex_unlock(&s->lock);
    free(keys);
    free(set);
}

void hc_serve_stats_tick(hc_serve_stats_t *s, int64_t tick, int64_t now_ms)
{
    pthread_mutex_lock(&s->lock);
    if (tick <= s->last_tick) { /* ticks only go forward: the ring stays ordered */
        pthread_mutex_unlock(&s->lock);
        return;
    }
    hist_point_t p = {.tick = tick, .t_ms = now_ms};
    bool in_partial = false, writes_partial = false;
    for (size_t i = 0; i < s->stage_count; i++) {
        const stage_t *st = &s->stages[i];
        /* a stage that reports a family and did not answer now would make the sum dip: the
         * point is unknown instead */
        if (st->have && st->cur.have_events) {
            p.in += st->acc_in;
            p.have_in = true;
            in_partial |= !st->up;
        }
        if (st->have && st->cur.have_writes) {
            p.writes += st->acc_writes;
            p.have_writes = true;
            writes_partial |= !st->up;
        }
    }
    p.have_in &= !in_partial;
    p.have_writes &= !writes_partial;
    if (s->hist_n < RING_POINTS) {
        s->hist[(s->hist_head + s->hist_n++) % RING_POINTS] = p;
    } else {
        s->hist[s->hist_head] = p;
        s->hist_head = (s->hist_head + 1) % RING_POINTS;
    }
    s->last_tick = tick;
    pthread_mutex_unlock(&s->lock);
}

static void refresh_at(hc_serve_stats_t *s, int64_t tick)
{
    for (size_t i = 0; i < s->stage_count && !atomic_load(&s->stop); i++) {
        char errstr[256];
        char *text = NULL;
        hc_err_t err = hc_metrics_scrape_text_deadline(s->stages[i].addr, s->connect_ms,
                                                       s->total_ms, &text, errstr, sizeof(errstr));
        hc_serve_stats_ingest(s, i, err == HC_OK ? text : NULL, errstr, hc_now_ms());
        free(text);
    }
    hc_serve_stats_tick(s, tick, hc_now_ms());
}

void hc_serve_stats_refresh(hc_serve_stats_t *s)
{
    pthread_mutex_lock(&s->lock);
    int64_t tick = s->last_tick + 1;
    pthread_mutex_unlock(&s->lock);
    refresh_at(s, tick);
}

static json_t *number_or_null(bool have, double v)
{
    return have && isfinite(v) ? json_real(v) : json_null();
}

static json_t *integer_or_null(bool have, double v)
{
    if (!have || !isfinite(v)) {
        return json_null();
    }
    return json_integer((json_int_t)hc_serve_stats_clamp(v));
}

static int by_rate_desc(const void *a, const void *b)
{
    double x = ((const hc_scraped_hotkey_t *)a)->events_per_second;
    double y = ((const hc_scraped_hotkey_t *)b)->events_per_second;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* Adds one stage's hot keys into hot[0..*n), summing a post's rates over stages (a post is hot
 * in every stage-1 process that holds one of its salted partitions). */
static void merge_hot(hc_scraped_hotkey_t *hot, size_t *n, const hc_scraped_hotkey_t *keys,
                      size_t count)
{
    for (size_t i = 0; i < count; i++) {
        size_t j = 0;
        while (j < *n && (hot[j].post_id_len != keys[i].post_id_len ||
                          memcmp(hot[j].post_id, keys[i].post_id, keys[i].post_id_len) != 0)) {
            j++;
        }
        if (j < *n) {
            hot[j].events_per_second += keys[i].events_per_second;
        } else {
            hot[(*n)++] = keys[i];
        }
    }
}

/* Adds one stage's hot-set members into set[0..*n): a post is in one stage 2's set (partials
 * are keyed by post), but during a rebalance two may hold it for a window: the larger rate. */
static void merge_set(hc_scraped_hotkey_t *set, size_t *n, const hc_scraped_hotkey_t *keys,
                      size_t count)
{
    for (size_t i = 0; i < count; i++) {
        size_t j = 0;
        while (j < *n && (set[j].post_id_len != keys[i].post_id_len ||
                          memcmp(set[j].post_id, keys[i].post_id, keys[i].post_id_len) != 0)) {
            j++;
        }
        if (j == *n) {
            set[(*n)++] = keys[i];
        } else if (keys[i].events_per_second > set[j].events_per_second) {
            set[j] = keys[i];
        }
    }
}

/* The history as JSON (under s->lock): one value per tick from the oldest point held to the
 * newest, null for a tick without a point or without a rate. A rate is the growth of the totals
 * from the earliest point at most RATE_SPAN ticks before, over the time between them. */
static json_t *render_history(const hc_serve_stats_t *s, int64_t mono_ms)
{
    json_t *h = json_object();
    json_t *in = json_array();
    json_t *writes = json_array();
    if (!h || !in || !writes) {
        json_decref(h);
        json_decref(in);
        json_decref(writes);
        return NULL;
    }
    json_object_set_new(h, "step_ms", json_integer(s->step_ms));
    json_object_set_new(h, "rate_span_ms", json_integer((json_int_t)s->step_ms * RATE_SPAN));
    const hist_point_t *newest =
        s->hist_n ? &s->hist[(s->hist_head + s->hist_n - 1) % RING_POINTS] : NULL;
    json_object_set_new(h, "newest_age_ms",
                        newest ? json_integer(mono_ms - newest->t_ms) : json_null());
    int64_t first = newest ? newest->tick - HISTORY_POINTS + 1 : 0;
    size_t k = 0; /* the ring's index of the next point to emit */
    while (k < s->hist_n && s->hist[(s->hist_head + k) % RING_POINTS].tick < first) {
        k++;
    }
    if (k < s->hist_n) {
        first = s->hist[(s->hist_head + k) % RING_POINTS].tick;
    }
    for (int64_t t = first; newest && t <= newest->tick; t++) {
        const hist_point_t *p = NULL;
        size_t at = k;
        if (k < s->hist_n && s->hist[(s->hist_head + k) % RING_POINTS].tick == t) {
            p = &s->hist[(s->hist_head + k++) % RING_POINTS];
        }
        double rin = NAN, rw = NAN;
        /* ticks ascend, so the points within RATE_SPAN ticks are among the RATE_SPAN before */
        for (size_t j = at > RATE_SPAN ? at - RATE_SPAN : 0; p && j < at; j++) {
            const hist_point_t *q = &s->hist[(s->hist_head + j) % RING_POINTS];
            if (q->tick < t - RATE_SPAN || q->t_ms >= p->t_ms) {
                continue;
            }
            double dt = (double)(p->t_ms - q->t_ms) / 1000.0;
            if (isnan(rin) && p->have_in && q->have_in) {
                rin = (p->in - q->in) / dt;
            }
            if (isnan(rw) && p->have_writes && q->have_writes) {
                rw = (p->writes - q->writes) / dt;
            }
        }
        json_array_append_new(in, number_or_null(true, rin));
        json_array_append_new(writes, number_or_null(true, rw));
    }
    json_object_set_new(h, "likes_in_per_s", in);
    json_object_set_new(h, "store_writes_per_s", writes);
    return h;
}

/* A rate between a stage's last two good samples, or NAN. */
static double stage_rate(const stage_t *st, double cur, double prev, int have_cur, int have_prev)
{
    if (!st->have_prev || !have_cur || !have_prev || st->good_ms <= st->prev_ms) {
        return NAN;
    }
    return (cur - prev) / ((double)(st->good_ms - st->prev_ms) / 1000.0);
}

/* topic[r] into hot_set when it is a declaration of a post that neither the detected members
 * shown (set[0..shown)) nor an earlier declaration has: its rate is unknown here (null), its
 * state "hot", with the declaration's end ("until"). */
static void append_declared(json_t *set_json, const hc_scraped_hotkey_t *set, size_t shown,
                            const hc_hotkey_record_t *topic, size_t r)
{
    const hc_hotkey_record_t *rec = &topic[r];
    if (rec->source != HC_HOTKEY_DECLARED) {
        return;
    }
    for (size_t i = 0; i < shown; i++) {
        if (set[i].post_id_len == rec->post_id_len &&
            memcmp(set[i].post_id, rec->post_id, rec->post_id_len) == 0) {
            return;
        }
    }
    for (size_t q = 0; q < r; q++) {
        if (topic[q].source == HC_HOTKEY_DECLARED && topic[q].post_id_len == rec->post_id_len &&
            memcmp(topic[q].post_id, rec->post_id, rec->post_id_len) == 0) {
            return;
        }
    }
    json_t *k = json_pack("{s:s%,s:n,s:s,s:s}", "post_id", rec->post_id, rec->post_id_len,
                          "likes_per_second", "source", "declared", "state", "hot");
    if (k) { /* a post id that is not UTF-8 cannot be a JSON string: left out */
        json_object_set_new(k, "until",
                            rec->expires_ms == HC_HOTSET_NONE
                                ? json_null()
                                : json_integer((json_int_t)rec->expires_ms));
        json_array_append_new(set_json, k);
    }
}

char *hc_serve_stats_render(hc_serve_stats_t *s, const hc_store_row_t *top, size_t top_count,
                            const hc_hotkey_record_t *topic, size_t topic_count, int64_t mono_ms,
                            int64_t wall_ms)
{
    json_t *root = json_object();
    json_t *stages = json_array();
    json_t *hot_json = json_array();
    json_t *top_json = json_array();
    json_t *set_json = json_array();
    json_t *history = NULL;
    hc_scraped_hotkey_t *hot = calloc(s->stage_count * HOT_PER_STAGE + 1, sizeof(*hot));
    hc_scraped_hotkey_t *set = calloc(s->stage_count * HOT_PER_STAGE + 1, sizeof(*set));
    char *out = NULL;
    if (!root || !stages || !hot_json || !top_json || !hot || !set_json || !set) {
        goto done;
    }
    reading_t sum = {0};
    double in_rate = 0, write_rate = 0;
    bool have_in_rate = false, have_write_rate = false;
    int64_t oldest = -1;
    size_t hot_n = 0, set_n = 0, up = 0;
    double enter = 0, leave = 0;
    bool have_enter = false, have_leave = false;
    pthread_mutex_lock(&s->lock);
    for (size_t i = 0; i < s->stage_count; i++) {
        const stage_t *st = &s->stages[i];
        json_t *g = json_pack("{s:I,s:b}", "stage", (json_int_t)(i + 1), "up", st->up);
        if (g) {
            json_object_set_new(g, "age_ms",
                                st->have ? json_integer(mono_ms - st->good_ms) : json_null());
            if (s->expose) {
                json_object_set_new(g, "addr", json_string(st->addr));
                if (!st->up) {
                    json_object_set_new(g, "error",
                                        json_string(st->error[0] ? st->error : "not scraped yet"));
                }
            }
            json_array_append_new(stages, g);
        }
        up += st->up;
        if (!st->have) {
            continue;
        }
        if (oldest < 0 || st->good_ms < oldest) {
            oldest = st->good_ms;
        }
        const reading_t *r = &st->cur;
        sum.events_in = hc_serve_stats_clamp(sum.events_in + r->events_in);
        sum.have_events |= r->have_events;
        sum.store_writes = hc_serve_stats_clamp(sum.store_writes + r->store_writes);
        sum.have_writes |= r->have_writes;
        sum.events_stored = hc_serve_stats_clamp(sum.events_stored + r->events_stored);
        sum.have_stored |= r->have_stored;
        sum.lag = hc_serve_stats_clamp(sum.lag + r->lag);
        sum.have_lag |= r->have_lag;
        double ri =
            stage_rate(st, r->events_in, st->prev.events_in, r->have_events, st->prev.have_events);
        if (!isnan(ri)) {
            in_rate += ri;
            have_in_rate = true;
        }
        double rw = stage_rate(st, r->store_writes, st->prev.store_writes, r->have_writes,
                               st->prev.have_writes);
        if (!isnan(rw)) {
            write_rate += rw;
            have_write_rate = true;
        }
        sum.inst1 = hc_serve_stats_clamp(sum.inst1 + r->inst1);
        sum.have_inst1 |= r->have_inst1;
        sum.inst2 = hc_serve_stats_clamp(sum.inst2 + r->inst2);
        sum.have_inst2 |= r->have_inst2;
        /* one configuration per pipeline: any stage 2's thresholds (the largest, should two
         * disagree mid-rollout) */
        if (r->have_enter && (!have_enter || r->enter > enter)) {
            enter = r->enter;
            have_enter = true;
        }
        if (r->have_leave && (!have_leave || r->leave > leave)) {
            leave = r->leave;
            have_leave = true;
        }
        merge_hot(hot, &hot_n, st->hot, st->hot_n);
        merge_set(set, &set_n, st->hotset, st->hotset_n);
    }
    history = render_history(s, mono_ms);
    pthread_mutex_unlock(&s->lock);
    /* The stage that counts events may be up while the one that writes is not yet: a family
     * absent everywhere is null, not 0, so the page can tell "unknown" from "none". */
    json_object_set_new(root, "as_of", json_integer(wall_ms));
    json_object_set_new(root, "sample_age_ms",
                        oldest < 0 ? json_null() : json_integer(mono_ms - oldest));
    json_object_set_new(root, "stages_up", json_integer((json_int_t)up));
    json_object_set_new(root, "stages", stages);
    stages = NULL;
    json_object_set_new(root, "events_in", integer_or_null(sum.have_events, sum.events_in));
    json_object_set_new(root, "events_in_per_second",
                        number_or_null(sum.have_events && have_in_rate, in_rate));
    json_object_set_new(root, "store_writes", integer_or_null(sum.have_writes, sum.store_writes));
    json_object_set_new(root, "store_writes_per_second",
                        number_or_null(sum.have_writes && have_write_rate, write_rate));
    json_object_set_new(root, "events_stored", integer_or_null(sum.have_stored, sum.events_stored));
    json_object_set_new(
        root, "events_per_store_write",
        number_or_null(sum.have_stored && sum.have_writes && sum.store_writes > 0,
                       sum.events_stored / (sum.store_writes > 0 ? sum.store_writes : 1)));
    json_object_set_new(root, "consumer_lag", integer_or_null(sum.have_lag, sum.lag));
    json_object_set_new(root, "stage1_instances", integer_or_null(sum.have_inst1, sum.inst1));
    json_object_set_new(root, "stage2_instances", integer_or_null(sum.have_inst2, sum.inst2));
    json_object_set_new(root, "history", history ? history : json_null());
    history = NULL;

    qsort(hot, hot_n, sizeof(*hot), by_rate_desc);
    for (size_t i = 0; i < hot_n && i < HOT_PER_STAGE; i++) {
        json_t *k = json_pack("{s:s%,s:f}", "post_id", hot[i].post_id, hot[i].post_id_len,
                              "likes_per_second", hot[i].events_per_second);
        if (k) { /* a label that is not UTF-8 is no post id: left out */
            json_array_append_new(hot_json, k);
        }
    }
    json_object_set_new(root, "hot_keys", hot_json);
    hot_json = NULL;

    json_object_set_new(root, "hotkeys_enter_rate", number_or_null(have_enter, enter));
    json_object_set_new(root, "hotkeys_leave_rate", number_or_null(have_leave, leave));
    qsort(set, set_n, sizeof(*set), by_rate_desc);
    for (size_t i = 0; i < set_n && i < HOT_PER_STAGE; i++) {
        json_t *k = json_pack("{s:s%,s:f}", "post_id", set[i].post_id, set[i].post_id_len,
                              "likes_per_second", set[i].events_per_second);
        if (k) {
            /* as the stage labels it; null without a label (a stage that does not say) */
            json_object_set_new(k, "source",
                                set[i].source[0] ? json_string(set[i].source) : json_null());
            /* a member's state follows from its rate (hotset.h): below leave it is cooling */
            json_object_set_new(k, "state",
                                !have_leave                        ? json_null()
                                : set[i].events_per_second < leave ? json_string("cooling")
                                                                   : json_string("hot"));
            json_array_append_new(set_json, k);
        }
    }
    for (size_t r = 0; r < topic_count; r++) {
        append_declared(set_json, set, set_n < HOT_PER_STAGE ? set_n : HOT_PER_STAGE, topic, r);
    }
    json_object_set_new(root, "hot_set", set_json);
    set_json = NULL;

    double top_dt = s->prev_top_ms ? (double)(mono_ms - s->prev_top_ms) / 1000.0 : 0;
    for (size_t i = 0; i < top_count; i++) {
        const hc_table_entry_t *was =
            hc_table_find(s->prev_top, top[i].post_id, top[i].post_id_len);
        json_t *row = json_pack("{s:s%,s:I}", "post_id", top[i].post_id, top[i].post_id_len,
                                "likes", (json_int_t)top[i].likes);
        if (!row) {
            continue;
        }
        json_object_set_new(row, "likes_per_second",
                            number_or_null(was && top_dt > 0,
                                           ((double)top[i].likes - (was ? (double)was->delta : 0)) /
                                               (top_dt > 0 ? top_dt : 1)));
        json_array_append_new(top_json, row);
    }
    json_object_set_new(root, "top", top_json);
    top_json = NULL;
    hc_table_clear(s->prev_top);
    for (size_t i = 0; i < top_count; i++) {
        hc_table_add(s->prev_top, top[i].post_id, top[i].post_id_len, top[i].likes, 1, HC_TS_NONE,
                     HC_TS_NONE);
    }
    s->prev_top_ms = mono_ms;
    out = json_dumps(root, JSON_COMPACT | JSON_REAL_PRECISION(10));
done:
    json_decref(stages);
    json_decref(hot_json);
    json_decref(top_json);
    json_decref(set_json);
    json_decref(history);
    json_decref(root);
    free(hot);
    free(set);
    return out;
}
