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
#include "hotcount/metrics.h"
#include "hotcount/table.h"

#define MAX_STAGES 64
#define HOT_PER_STAGE HC_METRICS_HOT_KEYS
#define PREV_TOP_MAX 100000

typedef struct reading {
    double events_in, store_writes, events_stored, lag;
    int have_events, have_writes, have_stored, have_lag;
} reading_t;

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
    /* the refresher */
    bool running;
    int interval_ms;
    atomic_bool stop;
    pthread_mutex_t wait_lock;
    pthread_cond_t wait_cond;
    pthread_t thread;
};

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
    size_t name_len = strlen(name);
    double sum = 0;
    *found = 0;
    for (const char *line = text; line && *line;) {
        const char *eol = strchr(line, '\n');
        size_t line_len = eol ? (size_t)(eol - line) : strlen(line);
        if (line[0] != '#' && strncmp(line, name, name_len) == 0 &&
            (line[name_len] == ' ' || line[name_len] == '{')) {
            const char *value = line + name_len;
            bool match = label == NULL;
            if (*value == '{') {
                /* label values are escaped, so the first "} " after the name ends the set */
                const char *close = strstr(value, "} ");
                if (!close || close > line + line_len) {
                    goto next;
                }
                if (label) {
                    size_t lab_len = strlen(label);
                    for (const char *p = value; p + lab_len <= close; p++) {
                        if (memcmp(p, label, lab_len) == 0) {
                            match = true;
                            break;
                        }
                    }
                }
                value = close + 1;
            }
            if (match) {
                char *end;
                double v = strtod(value + 1, &end);
                /* NaN and infinities are no counts: skipped, so one absurd sample cannot make
                 * the sum meaningless; huge finite values are clamped. */
                if (end != value + 1 && isfinite(v)) {
                    sum = hc_serve_stats_clamp(sum + hc_serve_stats_clamp(v));
                    *found = 1;
                }
            }
        }
    next:
        line = eol ? eol + 1 : NULL;
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
    if (!s->stages || !s->prev_top) {
        goto free_stats;
    }
    for (const char *p = stages; *p && s->stage_count < MAX_STAGES;) {
        size_t n = strcspn(p, ",");
        if (n > 0) {
            stage_t *st = &s->stages[s->stage_count];
            st->addr = strndup(p, n);
            st->hot = calloc(HOT_PER_STAGE, sizeof(*st->hot));
            s->stage_count++;
            if (!st->addr || !st->hot) {
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

static void *refresher(void *opaque)
{
    hc_serve_stats_t *s = opaque;
    while (!atomic_load(&s->stop)) {
        hc_serve_stats_refresh(s);
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += s->interval_ms / 1000;
        ts.tv_nsec += (long)(s->interval_ms % 1000) * 1000000L;
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
    s->interval_ms = interval_ms;
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
    }
    free(s->stages);
    hc_table_destroy(s->prev_top);
    pthread_cond_destroy(&s->wait_cond);
    pthread_mutex_destroy(&s->wait_lock);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

void hc_serve_stats_refresh(hc_serve_stats_t *s)
{
    hc_scraped_hotkey_t *keys = calloc(HOT_PER_STAGE, sizeof(*keys));
    for (size_t i = 0; keys && i < s->stage_count && !atomic_load(&s->stop); i++) {
        stage_t *st = &s->stages[i];
        char errstr[256];
        char *text = NULL;
        hc_err_t err = hc_metrics_scrape_text_deadline(st->addr, s->connect_ms, s->total_ms, &text,
                                                       errstr, sizeof(errstr));
        int64_t now = hc_now_ms();
        reading_t r = {0};
        size_t n = 0;
        if (err == HC_OK) {
            r.events_in = hc_serve_stats_sum(text, "hotcount_events_total", NULL, &r.have_events);
            r.store_writes =
                hc_serve_stats_sum(text, "hotcount_store_keys_written_total", NULL, &r.have_writes);
            r.events_stored =
                hc_serve_stats_sum(text, "hotcount_events_stored_total", NULL, &r.have_stored);
            r.lag = hc_serve_stats_sum(text, "hotcount_consumer_lag", NULL, &r.have_lag);
            n = hc_hotkeys_parse(text, keys, HOT_PER_STAGE);
            free(text);
        }
        pthread_mutex_lock(&s->lock);
        st->up = err == HC_OK;
        if (err == HC_OK) {
            st->error[0] = '\0';
            if (st->have) {
                st->prev = st->cur;
                st->prev_ms = st->good_ms;
                st->have_prev = true;
            }
            st->cur = r;
            st->good_ms = now;
            st->have = true;
            memcpy(st->hot, keys, n * sizeof(*keys));
            st->hot_n = n;
        } else {
            snprintf(st->error, sizeof(st->error), "%s", errstr);
        }
        pthread_mutex_unlock(&s->lock);
    }
    free(keys);
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

/* A rate between a stage's last two good samples, or NAN. */
static double stage_rate(const stage_t *st, double cur, double prev, int have_cur, int have_prev)
{
    if (!st->have_prev || !have_cur || !have_prev || st->good_ms <= st->prev_ms) {
        return NAN;
    }
    return (cur - prev) / ((double)(st->good_ms - st->prev_ms) / 1000.0);
}

char *hc_serve_stats_render(hc_serve_stats_t *s, const hc_store_row_t *top, size_t top_count,
                            int64_t mono_ms, int64_t wall_ms)
{
    json_t *root = json_object();
    json_t *stages = json_array();
    json_t *hot_json = json_array();
    json_t *top_json = json_array();
    hc_scraped_hotkey_t *hot = calloc(s->stage_count * HOT_PER_STAGE + 1, sizeof(*hot));
    char *out = NULL;
    if (!root || !stages || !hot_json || !top_json || !hot) {
        goto done;
    }
    reading_t sum = {0};
    double in_rate = 0, write_rate = 0;
    bool have_in_rate = false, have_write_rate = false;
    int64_t oldest = -1;
    size_t hot_n = 0, up = 0;
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
        merge_hot(hot, &hot_n, st->hot, st->hot_n);
    }
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
    json_decref(root);
    free(hot);
    return out;
}
