/* Process metrics: lock-free counters and histograms, a mutex-protected consumer-lag table and
 * hot-keys snapshot, readiness, and the Prometheus text exposition. */
#include "hotcount/metrics.h"

#include <assert.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hotcount/clock.h"
#include "hotcount/metric_defs.h"
#include "hotcount/utf8.h"

/* jemalloc's control call when the executable links jemalloc (HC_ALLOCATOR); weak, so a build
 * with libc's allocator links without it and sees NULL. */
int mallctl(const char *name, void *oldp, size_t *oldlenp, void *newp, size_t newlen)
    __attribute__((weak));

/* ---- histograms ---------------------------------------------------------------------------- */

/* Freshness is an SLO in seconds: sub-second buckets for a healthy pipeline (two flush.ms
 * windows of 1 s are the floor), up to a minute for an outage. */
static const double end_to_end_bounds[] = {0.05, 0.1, 0.25, 0.5, 1, 2, 3, 5, 10, 20, 30, 60};
/* A flush normally takes milliseconds; seconds mean a slow broker or store. */
static const double flush_bounds[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                      0.25,  0.5,    1,     2.5,  5,     10};
static const double latency_bounds[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                        0.25,  0.5,    1,     2.5,  5,     10,   30};
/* Posts per batch: from one hot post to max.keys (1e6 by default), three buckets a decade. */
static const double batch_posts_bounds[] = {1,    3,     10,    30,     100,    300,    1000,
                                            3000, 10000, 30000, 100000, 300000, 1000000};

#define COUNT_OF(a) (sizeof(a) / sizeof((a)[0]))

static double bits_to_double(uint64_t bits)
{
    double d;
    memcpy(&d, &bits, sizeof(d));
    return d;
}

static uint64_t double_to_bits(double d)
{
    uint64_t bits;
    memcpy(&bits, &d, sizeof(bits));
    return bits;
}

hc_err_t hc_histogram_init(hc_histogram_t *h, const double *bounds, size_t bound_count)
{
    if (bound_count < 1 || bound_count > HC_HISTOGRAM_MAX_BUCKETS) {
        return HC_ERR_INVALID;
    }
    for (size_t i = 0; i < bound_count; i++) {
        if (!isfinite(bounds[i]) || (i > 0 && !(bounds[i] > bounds[i - 1]))) {
            return HC_ERR_INVALID;
        }
    }
    memset(h, 0, sizeof(*h));
    h->bounds = bounds;
    h->bound_count = bound_count;
    for (size_t i = 0; i <= HC_HISTOGRAM_MAX_BUCKETS; i++) {
        atomic_init(&h->buckets[i], 0);
    }
    atomic_init(&h->count, 0);
    atomic_init(&h->sum_bits, double_to_bits(0.0));
    return HC_OK;
}

/* The first bucket whose bound is >= value (Prometheus `le`), or bound_count for +Inf. */
static size_t bucket_of(const double *bounds, size_t bound_count, double value)
{
    size_t lo = 0;
    size_t hi = bound_count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (value <= bounds[mid]) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    return lo;
}

static void sum_add(atomic_uint_fast64_t *sum_bits, double add)
{
    uint_fast64_t old = atomic_load_explicit(sum_bits, memory_order_relaxed);
    for (;;) {
        uint_fast64_t next = double_to_bits(bits_to_double(old) + add);
        if (atomic_compare_exchange_weak_explicit(sum_bits, &old, next, memory_order_relaxed,
                                                  memory_order_relaxed)) {
            return;
        }
    }
}

void hc_histogram_observe_n(hc_histogram_t *h, double value, uint64_t n)
{
    if (!h->bounds || isnan(value) || n == 0) {
        return;
    }
    size_t b = bucket_of(h->bounds, h->bound_count, value);
    atomic_fetch_add_explicit(&h->buckets[b], n, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->count, n, memory_order_relaxed);
    sum_add(&h->sum_bits, value * (double)n);
}

void hc_histogram_observe(hc_histogram_t *h, double value)
{
    hc_histogram_observe_n(h, value, 1);
}

uint64_t hc_histogram_count(const hc_histogram_t *h)
{
    return atomic_load_explicit(&h->count, memory_order_relaxed);
}

double hc_histogram_sum(const hc_histogram_t *h)
{
    return bits_to_double(atomic_load_explicit(&h->sum_bits, memory_order_relaxed));
}

uint64_t hc_histogram_cumulative(const hc_histogram_t *h, size_t i)
{
    uint64_t total = 0;
    size_t last = i < h->bound_count ? i : h->bound_count;
    for (size_t b = 0; b <= last; b++) {
        total += atomic_load_explicit(&h->buckets[b], memory_order_relaxed);
    }
    return total;
}

void hc_histogram_acc_init(hc_histogram_acc_t *acc, const hc_histogram_t *h)
{
    memset(acc, 0, sizeof(*acc));
    acc->h = h;
}

void hc_histogram_acc_add(hc_histogram_acc_t *acc, double value, uint64_t n)
{
    if (!acc->h->bounds || isnan(value) || n == 0) {
        return;
    }
    acc->buckets[bucket_of(acc->h->bounds, acc->h->bound_count, value)] += n;
    acc->count += n;
    acc->sum += value * (double)n;
}

void hc_histogram_acc_merge(hc_histogram_acc_t *acc, hc_histogram_t *h)
{
    if (acc->count > 0 && h->bounds) {
        for (size_t b = 0; b <= h->bound_count; b++) {
            if (acc->buckets[b]) {
                atomic_fetch_add_explicit(&h->buckets[b], acc->buckets[b], memory_order_relaxed);
            }
        }
        atomic_fetch_add_explicit(&h->count, acc->count, memory_order_relaxed);
        sum_add(&h->sum_bits, acc->sum);
    }
    hc_histogram_acc_init(acc, acc->h);
}

/* ---- private state: lag table and hot keys ------------------------------------------------- */

#define TOPIC_MAX 249 /* Kafka's limit on topic names */
#define CLIENT_NAME_MAX 255
#define SOURCE_NAME_MAX 159

typedef struct lag_entry {
    char topic[TOPIC_MAX + 1];
    int32_t partition;
    int client;          /* index in clients: the last client that reported it */
    uint64_t generation; /* that client's report number when it did */
    int64_t lag;
    int64_t updated_ms;
} lag_entry_t;

typedef struct lag_client {
    bool used;
    char name[CLIENT_NAME_MAX + 1];
    int64_t last_ms;
    int64_t interval_ms; /* between its last two reports; 0 until measured */
    uint64_t generation;
    int64_t fetchq_bytes; /* its pre-fetch queue in its last report (client_fetchq_bytes) */
} lag_client_t;

/* A partition standing still now (hc_metrics_partition_stalled). */
typedef struct stall_entry {
    int kind; /* hc_metrics_stage_kind_t */
    char topic[TOPIC_MAX + 1];
    int32_t partition;
    char state[HC_METRICS_STALL_STATE_MAX];
    int64_t since_ms;
} stall_entry_t;

struct hc_metrics_lag {
    pthread_mutex_t mu;
    lag_entry_t *ents; /* owned; grows by doubling up to HC_METRICS_LAG_MAX */
    size_t n;
    size_t cap;
    lag_client_t clients[HC_METRICS_LAG_CLIENTS];
    /* the partitions standing still now (under mu; few: they are the exception) */
    stall_entry_t stalls[HC_METRICS_STALLS_MAX];
    size_t stall_n;
};

typedef struct hot_key {
    char post_id[HC_POST_ID_MAX];
    size_t len;
    double rate;
} hot_key_t;

typedef struct hot_source {
    bool used;
    char name[SOURCE_NAME_MAX + 1];
    int64_t published_ms;
    size_t n;
    hot_key_t keys[HC_METRICS_HOT_KEYS];
} hot_source_t;

struct hc_metrics_hot {
    pthread_mutex_t mu;
    hot_source_t src[HC_METRICS_HOT_SOURCES];
};

/* ---- init ---------------------------------------------------------------------------------- */

hc_err_t hc_metrics_init(hc_metrics_t *m)
{
    memset(m, 0, sizeof(*m));
    hc_histogram_init(&m->end_to_end_seconds, end_to_end_bounds, COUNT_OF(end_to_end_bounds));
    for (int k = 0; k < HC_METRICS_STAGE_COUNT; k++) {
        hc_histogram_init(&m->flush_seconds[k], flush_bounds, COUNT_OF(flush_bounds));
    }
    hc_histogram_init(&m->batch_posts, batch_posts_bounds, COUNT_OF(batch_posts_bounds));
    hc_histogram_init(&m->txn_seconds, latency_bounds, COUNT_OF(latency_bounds));
    hc_histogram_init(&m->store_seconds, latency_bounds, COUNT_OF(latency_bounds));

    struct hc_metrics_lag *lag = calloc(1, sizeof(*lag));
    struct hc_metrics_hot *hot = calloc(1, sizeof(*hot));
    struct hc_metrics_hot *hotset = calloc(1, sizeof(*hotset));
    if (!lag || !hot || !hotset) {
        goto fail_alloc;
    }
    if (pthread_mutex_init(&lag->mu, NULL) != 0) {
        goto fail_alloc;
    }
    if (pthread_mutex_init(&hot->mu, NULL) != 0) {
        goto fail_lag_mutex;
    }
    if (pthread_mutex_init(&hotset->mu, NULL) != 0) {
        pthread_mutex_destroy(&hot->mu);
        goto fail_lag_mutex;
    }
    m->lag = lag;
    m->hot = hot;
    m->hotset = hotset;
    return HC_OK;

fail_lag_mutex:
    pthread_mutex_destroy(&lag->mu);
fail_alloc:
    free(lag);
    free(hot);
    free(hotset);
    memset(m, 0, sizeof(*m));
    return HC_ERR_FATAL;
}

void hc_metrics_fini(hc_metrics_t *m)
{
    if (m->lag) {
        pthread_mutex_destroy(&m->lag->mu);
        free(m->lag->ents);
        free(m->lag);
        m->lag = NULL;
    }
    if (m->hot) {
        pthread_mutex_destroy(&m->hot->mu);
        free(m->hot);
        m->hot = NULL;
    }
    if (m->hotset) {
        pthread_mutex_destroy(&m->hotset->mu);
        free(m->hotset);
        m->hotset = NULL;
    }
}

/* ---- stages and readiness ------------------------------------------------------------------ */

void hc_metrics_stage_started(hc_metrics_t *m, hc_metrics_stage_kind_t kind, int64_t now_ms)
{
    hc_metric_set(m->stage[kind].started_ms, now_ms);
    hc_metric_add(m->stage[kind].running, 1);
}

void hc_metrics_stage_stopped(hc_metrics_t *m, hc_metrics_stage_kind_t kind)
{
    hc_metric_add(m->stage[kind].running, -1);
    hc_metric_set(m->stage[kind].input_since_ms, 0);
}

void hc_metrics_stage_input(hc_metrics_t *m, hc_metrics_stage_kind_t kind, int64_t now_ms)
{
    int_fast64_t none = 0;
    /* only the first input after a flush (or release) sets the time */
    atomic_compare_exchange_strong_explicit(&m->stage[kind].input_since_ms, &none, now_ms,
                                            memory_order_relaxed, memory_order_relaxed);
}

void hc_metrics_stage_flushed(hc_metrics_t *m, hc_metrics_stage_kind_t kind, int64_t now_ms,
                              double seconds)
{
    hc_metric_set(m->stage[kind].last_flush_ms, now_ms);
    hc_metric_set(m->stage[kind].input_since_ms, 0);
    hc_histogram_observe(&m->flush_seconds[kind], seconds);
}

void hc_metrics_stage_released(hc_metrics_t *m, hc_metrics_stage_kind_t kind)
{
    hc_metric_set(m->stage[kind].input_since_ms, 0);
}

static int64_t stage_assigned(const hc_metrics_t *m, int kind)
{
    return kind == HC_METRICS_STAGE1 ? hc_metric_get(m->stage1_assigned)
                                     : hc_metric_get(m->stage2_assigned);
}

void hc_metrics_partition_stalled(hc_metrics_t *m, hc_metrics_stage_kind_t kind, const char *topic,
                                  int32_t partition, bool stalled, const char *state,
                                  int64_t now_ms)
{
    struct hc_metrics_lag *lag = m->lag;
    if (stalled) {
        hc_metric_add(m->partition_stalls[kind], 1);
    }
    if (!lag) {
        return;
    }
    pthread_mutex_lock(&lag->mu);
    size_t i = 0;
    while (i < lag->stall_n &&
           !(lag->stalls[i].kind == (int)kind && lag->stalls[i].partition == partition &&
             strcmp(lag->stalls[i].topic, topic) == 0)) {
        i++;
    }
    if (!stalled) {
        if (i < lag->stall_n) {
            lag->stalls[i] = lag->stalls[--lag->stall_n];
        }
    } else if (i < lag->stall_n || lag->stall_n < HC_METRICS_STALLS_MAX) {
        stall_entry_t *ent = &lag->stalls[i];
        if (i == lag->stall_n) {
            lag->stall_n++;
            ent->since_ms = now_ms;
        }
        ent->kind = (int)kind;
        snprintf(ent->topic, sizeof(ent->topic), "%s", topic);
        ent->partition = partition;
        snprintf(ent->state, sizeof(ent->state), "%s", state ? state : "");
    }
    pthread_mutex_unlock(&lag->mu);
}

/* The first stalled partition into why (readiness); false when none is. */
static bool first_stall(const hc_metrics_t *m, int64_t now_ms, char *why, size_t why_size)
{
    static const char *const names[HC_METRICS_STAGE_COUNT] = {"stage1", "stage2"};
    struct hc_metrics_lag *lag = m->lag;
    if (!lag) {
        return false;
    }
    pthread_mutex_lock(&lag->mu);
    bool any = lag->stall_n > 0;
    if (any && why && why_size > 0) {
        const stall_entry_t *ent = &lag->stalls[0];
        snprintf(why, why_size,
                 "%s partition %s/%d has input waiting and has not moved for over %.1f s "
                 "(partition.progress.ms; event partition_stalled, state %s)%s",
                 names[ent->kind], ent->topic, (int)ent->partition,
                 (double)(now_ms - ent->since_ms) / 1000.0, ent->state,
                 lag->stall_n > 1 ? ", and more" : "");
    }
    pthread_mutex_unlock(&lag->mu);
    return any;
}

bool hc_metrics_is_ready(const hc_metrics_t *m, int64_t now_ms, int64_t flush_ms)
{
    return hc_metrics_readiness(m, now_ms, flush_ms, NULL, 0);
}

static bool not_ready(char *why, size_t why_size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static bool not_ready(char *why, size_t why_size, const char *fmt, ...)
{
    if (why && why_size > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, why_size, fmt, ap);
        va_end(ap);
    }
    return false;
}

bool hc_metrics_readiness(const hc_metrics_t *m, int64_t now_ms, int64_t flush_ms, char *why,
                          size_t why_size)
{
    static const char *const names[HC_METRICS_STAGE_COUNT] = {"stage1", "stage2"};
    bool any = false;
    int64_t gap = hc_metric_get(m->retention_gap_parts);
    if (gap > 0) { /* counts that cannot be rebuilt: never ready over them */
        return not_ready(why, why_size,
                         "stage2 holds back %lld partitions: their partials are past retention "
                         "(event retention_gap)",
                         (long long)gap);
    }
    if (first_stall(m, now_ms, why, why_size)) {
        return false; /* a partition standing still: its counts fall behind for good */
    }
    for (int k = 0; k < HC_METRICS_STAGE_COUNT; k++) {
        const hc_metrics_stage_t *st = &m->stage[k];
        if (hc_metric_get(st->running) <= 0) {
            continue;
        }
        any = true;
        if (stage_assigned(m, k) <= 0) {
            return not_ready(why, why_size,
                             "%s holds no partitions (joining its group, or the broker is "
                             "unreachable)",
                             names[k]);
        }
        /* Waiting input is a window that should have been flushed by now. It keeps waiting
         * while the stage is blocked (a commit that keeps failing, a store outage), so such a
         * stage turns unready even though it no longer polls; an idle stage has none. */
        int64_t since = hc_metric_get(st->input_since_ms);
        int64_t started = hc_metric_get(st->started_ms);
        if (since != 0) {
            int64_t from = since > started ? since : started;
            if (now_ms - from > 3 * flush_ms) {
                return not_ready(why, why_size,
                                 "%s has input waiting %.1f s for a flush (3 x flush.ms: %s "
                                 "keep failing)",
                                 names[k], (double)(now_ms - from) / 1000.0,
                                 k == HC_METRICS_STAGE1 ? "transactions" : "store batches");
            }
        }
    }
    return any ? true : not_ready(why, why_size, "no stage is running");
}

/* ---- consumer lag -------------------------------------------------------------------------- */

static int64_t client_max_age(const struct hc_metrics_lag *lag, int client)
{
    int64_t interval = lag->clients[client].interval_ms;
    return 3 * (interval > 0 ? interval : HC_METRICS_STATS_INTERVAL_MS);
}

static bool lag_entry_stale(const struct hc_metrics_lag *lag, const lag_entry_t *ent,
                            int64_t now_ms)
{
    return now_ms - ent->updated_ms > client_max_age(lag, ent->client);
}

/* The client slot for name, claimed if new; a full table gives up its least recently heard
 * client (and that client's entries). */
static int lag_client(struct hc_metrics_lag *lag, const char *name)
{
    int free_slot = -1;
    int oldest = 0;
    for (int c = 0; c < HC_METRICS_LAG_CLIENTS; c++) {
        lag_client_t *cl = &lag->clients[c];
        if (!cl->used) {
            if (free_slot < 0) {
                free_slot = c;
            }
            continue;
        }
        if (strncmp(cl->name, name, CLIENT_NAME_MAX) == 0) {
            return c;
        }
        if (cl->last_ms < lag->clients[oldest].last_ms || !lag->clients[oldest].used) {
            oldest = c;
        }
    }
    int c = free_slot;
    if (c < 0) {
        c = oldest;
        for (size_t i = 0; i < lag->n;) {
            if (lag->ents[i].client == c) {
                lag->ents[i] = lag->ents[--lag->n];
            } else {
                i++;
            }
        }
    }
    lag_client_t *cl = &lag->clients[c];
    memset(cl, 0, sizeof(*cl));
    cl->used = true;
    snprintf(cl->name, sizeof(cl->name), "%s", name);
    return c;
}

static void lag_record(struct hc_metrics_lag *lag, int client, const char *topic, int32_t partition,
                       int64_t value, int64_t now_ms)
{
    lag_entry_t *ent = NULL;
    for (size_t i = 0; i < lag->n; i++) {
        if (lag->ents[i].partition == partition && strcmp(lag->ents[i].topic, topic) == 0) {
            ent = &lag->ents[i];
            break;
        }
    }
    if (!ent) {
        if (lag->n == lag->cap) {
            if (lag->cap >= HC_METRICS_LAG_MAX) {
                return; /* bounded: a partition beyond the table is not shown */
            }
            size_t cap = lag->cap ? lag->cap * 2 : 64;
            if (cap > HC_METRICS_LAG_MAX) {
                cap = HC_METRICS_LAG_MAX;
            }
            lag_entry_t *grown = realloc(lag->ents, cap * sizeof(*grown));
            if (!grown) {
                return;
            }
            lag->ents = grown;
            lag->cap = cap;
        }
        ent = &lag->ents[lag->n++];
        snprintf(ent->topic, sizeof(ent->topic), "%s", topic);
        ent->partition = partition;
    }
    /* The last reporter owns the entry: during a rebalance two clients may both report a
     * partition for a moment, and the series must stay one. */
    ent->client = client;
    ent->generation = lag->clients[client].generation;
    ent->lag = value;
    ent->updated_ms = now_ms;
}

/* A partition's lag from its statistics: librdkafka's consumer_lag when it has one. hotcount
 * never commits through the consumer (stage 1 commits in its producer's transaction, stage 2 in
 * the store), so librdkafka 2.0.2 reports consumer_lag -1; then the lag is the distance from
 * this consumer's position (app_offset) to the end it reads to (the last stable offset under
 * read_committed, else the high watermark). -1: unknown (not consumed here, no offsets yet). */
static json_int_t partition_lag(json_t *pobj)
{
    json_t *jl = json_object_get(pobj, "consumer_lag");
    if (json_is_integer(jl) && json_integer_value(jl) >= 0) {
        return json_integer_value(jl);
    }
    json_t *japp = json_object_get(pobj, "app_offset");
    json_t *jls = json_object_get(pobj, "ls_offset");
    json_t *jhi = json_object_get(pobj, "hi_offset");
    json_int_t app = json_is_integer(japp) ? json_integer_value(japp) : -1;
    json_int_t end = json_is_integer(jls) && json_integer_value(jls) >= 0 ? json_integer_value(jls)
                     : json_is_integer(jhi)                               ? json_integer_value(jhi)
                                                                          : -1;
    if (app < 0 || end < 0) {
        return -1;
    }
    return end > app ? end - app : 0;
}

/* Bytes of pre-fetched messages a consumer holds (queued.max.messages.kbytes bounds them). The
 * stages read through the consumer queue, to which librdkafka forwards every partition's fetch
 * queue, and a partition's fetchq_size follows that forward (rd_kafka_q_size): each partition
 * reports the whole queue, so the queue is the largest of them, not their sum. */
static int64_t client_fetchq_bytes(json_t *topics)
{
    int64_t bytes = 0;
    const char *tkey;
    json_t *tobj;
    json_object_foreach(topics, tkey, tobj)
    {
        json_t *parts = json_object_get(tobj, "partitions");
        const char *pkey;
        json_t *pobj;
        json_object_foreach(parts, pkey, pobj)
        {
            json_t *jp = json_object_get(pobj, "partition");
            json_t *js = json_object_get(pobj, "fetchq_size");
            if (json_is_integer(jp) && json_integer_value(jp) >= 0 && json_is_integer(js) &&
                json_integer_value(js) > bytes) {
                bytes = (int64_t)json_integer_value(js);
            }
        }
    }
    return bytes;
}

/* Applies one parsed report. Called with the lag mutex held. */
static void lag_apply(struct hc_metrics_lag *lag, const char *name, json_t *topics, int64_t now_ms)
{
    int client = lag_client(lag, name);
    lag_client_t *cl = &lag->clients[client];
    if (cl->last_ms > 0 && now_ms > cl->last_ms) {
        cl->interval_ms = now_ms - cl->last_ms;
    }
    cl->last_ms = now_ms;
    cl->generation++;
    cl->fetchq_bytes = client_fetchq_bytes(topics);

    const char *tkey;
    json_t *tobj;
    json_object_foreach(topics, tkey, tobj)
    {
        json_t *parts = json_object_get(tobj, "partitions");
        const char *topic = json_string_value(json_object_get(tobj, "topic"));
        if (!topic) {
            topic = tkey;
        }
        if (!json_is_object(parts) || strlen(topic) > TOPIC_MAX) {
            continue;
        }
        const char *pkey;
        json_t *pobj;
        json_object_foreach(parts, pkey, pobj)
        {
            json_t *jp = json_object_get(pobj, "partition");
            if (!json_is_integer(jp)) {
                continue;
            }
            json_int_t p = json_integer_value(jp);
            json_int_t value = partition_lag(pobj);
            /* partition -1 is librdkafka's internal unassigned queue; lag -1 means unknown
             * (not consumed by this client, or no offsets yet) */
            if (p < 0 || p > INT32_MAX || value < 0) {
                continue;
            }
            lag_record(lag, client, topic, (int32_t)p, (int64_t)value, now_ms);
        }
    }

    /* Drop what this client no longer reports and whatever any client stopped updating. */
    for (size_t i = 0; i < lag->n;) {
        lag_entry_t *ent = &lag->ents[i];
        bool gone = ent->client == client && ent->generation != cl->generation;
        if (gone || lag_entry_stale(lag, ent, now_ms)) {
            lag->ents[i] = lag->ents[--lag->n];
        } else {
            i++;
        }
    }
    for (int c = 0; c < HC_METRICS_LAG_CLIENTS; c++) {
        lag_client_t *other = &lag->clients[c];
        if (c != client && other->used && now_ms - other->last_ms > client_max_age(lag, c)) {
            bool owns = false;
            for (size_t i = 0; i < lag->n && !owns; i++) {
                owns = lag->ents[i].client == c;
            }
            if (!owns) {
                other->used = false;
            }
        }
    }
}

hc_err_t hc_metrics_ingest_rdkafka_stats_at(hc_metrics_t *m, const char *json, size_t len,
                                            int64_t now_ms)
{
    json_error_t jerr;
    json_t *root = json_loadb(json, len, 0, &jerr);
    if (!root) {
        return HC_ERR_INVALID;
    }
    /* No "topics" at all is a client that consumes nothing now (iterating NULL is empty). */
    json_t *topics = json_object_get(root, "topics");
    const char *name = json_string_value(json_object_get(root, "name"));
    hc_err_t err = HC_ERR_INVALID;
    if (json_is_object(root) && name && (!topics || json_is_object(topics))) {
        err = HC_OK;
        if (m->lag) {
            pthread_mutex_lock(&m->lag->mu);
            lag_apply(m->lag, name, topics, now_ms);
            pthread_mutex_unlock(&m->lag->mu);
        }
    }
    json_decref(root);
    return err;
}

hc_err_t hc_metrics_ingest_rdkafka_stats(hc_metrics_t *m, const char *json, size_t len)
{
    return hc_metrics_ingest_rdkafka_stats_at(m, json, len, hc_now_ms());
}

/* ---- hot keys ------------------------------------------------------------------------------ */

static void publish_hot(struct hc_metrics_hot *hot, const char *source, const hc_hotkey_t *keys,
                        size_t n, int64_t now_ms)
{
    if (!hot) {
        return;
    }
    pthread_mutex_lock(&hot->mu);
    hot_source_t *slot = NULL;
    hot_source_t *spare = NULL;
    hot_source_t *oldest = NULL;
    for (int i = 0; i < HC_METRICS_HOT_SOURCES; i++) {
        hot_source_t *src = &hot->src[i];
        if (!src->used) {
            spare = spare ? spare : src;
        } else if (strncmp(src->name, source, SOURCE_NAME_MAX) == 0) {
            slot = src;
            break;
        } else if (!oldest || src->published_ms < oldest->published_ms) {
            oldest = src;
        }
    }
    if (n == 0) {
        if (slot) {
            slot->used = false;
        }
        pthread_mutex_unlock(&hot->mu);
        return;
    }
    if (!slot) {
        slot = spare ? spare : oldest;
        slot->used = true;
        snprintf(slot->name, sizeof(slot->name), "%s", source);
    }
    slot->published_ms = now_ms;
    slot->n = n < HC_METRICS_HOT_KEYS ? n : HC_METRICS_HOT_KEYS;
    for (size_t i = 0; i < slot->n; i++) {
        size_t len = keys[i].post_id_len <= HC_POST_ID_MAX ? keys[i].post_id_len : HC_POST_ID_MAX;
        memcpy(slot->keys[i].post_id, keys[i].post_id, len);
        slot->keys[i].len = len;
        slot->keys[i].rate = keys[i].events_per_second;
    }
    pthread_mutex_unlock(&hot->mu);
}

void hc_metrics_publish_hot_keys(hc_metrics_t *m, const char *source, const hc_hotkey_t *keys,
                                 size_t n, int64_t now_ms)
{
    publish_hot(m->hot, source, keys, n, now_ms);
}

void hc_metrics_publish_hot_set(hc_metrics_t *m, const char *source, const hc_hotkey_t *keys,
                                size_t n, int64_t now_ms)
{
    publish_hot(m->hotset, source, keys, n, now_ms);
}

/* ---- exposition ---------------------------------------------------------------------------- */

typedef struct sbuf {
    char *buf;
    size_t len;
    size_t cap;
    bool failed;
} sbuf_t;

static bool sb_reserve(sbuf_t *sb, size_t extra)
{
    if (sb->failed) {
        return false;
    }
    if (sb->len + extra + 1 <= sb->cap) {
        return true;
    }
    size_t cap = sb->cap ? sb->cap : 16384;
    while (cap < sb->len + extra + 1) {
        cap *= 2;
    }
    char *grown = realloc(sb->buf, cap);
    if (!grown) {
        sb->failed = true;
        return false;
    }
    sb->buf = grown;
    sb->cap = cap;
    return true;
}

static void sb_put(sbuf_t *sb, const char *s, size_t n)
{
    if (sb_reserve(sb, n)) {
        memcpy(sb->buf + sb->len, s, n);
        sb->len += n;
        sb->buf[sb->len] = '\0';
    }
}

static void sb_printf(sbuf_t *sb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void sb_printf(sbuf_t *sb, const char *fmt, ...)
{
    char small[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof(small), fmt, ap);
    va_end(ap);
    if (n < 0) {
        sb->failed = true;
        return;
    }
    if ((size_t)n < sizeof(small)) {
        sb_put(sb, small, (size_t)n);
        return;
    }
    if (sb_reserve(sb, (size_t)n)) {
        va_start(ap, fmt);
        vsnprintf(sb->buf + sb->len, (size_t)n + 1, fmt, ap);
        va_end(ap);
        sb->len += (size_t)n;
    }
}

/* A label value per the text format: \\, \" and \n escaped, everything else UTF-8 as is. Bytes
 * that are not UTF-8, and control characters other than tab and newline (a NUL would end the
 * scraper's string, a CR confuses line parsers), become U+FFFD. */
static void sb_label_value(sbuf_t *sb, const char *value, size_t len)
{
    const unsigned char *s = (const unsigned char *)value;
    size_t i = 0;
    while (i < len) {
        unsigned char c = s[i];
        if (c == '\\') {
            sb_put(sb, "\\\\", 2);
        } else if (c == '"') {
            sb_put(sb, "\\\"", 2);
        } else if (c == '\n') {
            sb_put(sb, "\\n", 2);
        } else if ((c < 0x20 && c != '\t') || c == 0x7f) {
            sb_put(sb, "\xef\xbf\xbd", 3);
        } else {
            size_t n = hc_utf8_char_len(s + i, len - i);
            if (n == 0) {
                sb_put(sb, "\xef\xbf\xbd", 3);
            } else {
                sb_put(sb, value + i, n);
                i += n;
                continue;
            }
        }
        i++;
    }
}

/* The shortest of %.15g..%.17g that reads back as v, so 0.1 prints as 0.1 and sums stay exact. */
static void format_double(char *buf, size_t size, double v)
{
    if (isnan(v)) {
        snprintf(buf, size, "NaN");
        return;
    }
    if (isinf(v)) {
        snprintf(buf, size, v > 0 ? "+Inf" : "-Inf");
        return;
    }
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(buf, size, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) {
            return;
        }
    }
}

/* A metric's name, from the registry (hotcount/metric_defs.h): no name is written here. */
#define NAME(id) (hc_metric_defs[id].name)

/* # HELP and # TYPE of one family, as the registry declares it. */
static void family(sbuf_t *sb, hc_metric_id_t id)
{
    const hc_metric_def_t *def = &hc_metric_defs[id];
    assert(def->page == HC_METRIC_PAGE_STAGES);
    sb_printf(sb, "# HELP %s %s\n# TYPE %s %s\n", def->name, def->help, def->name,
              hc_metric_type_str(def->type));
}

static void sample_text(sbuf_t *sb, hc_metric_id_t id, const char *value)
{
    sb_printf(sb, "%s %s\n", NAME(id), value);
}

static void sample_int(sbuf_t *sb, const char *name, int64_t value)
{
    sb_printf(sb, "%s %lld\n", name, (long long)value);
}

/* name{key="value"} value, with the label value escaped. */
static void sample_label_int(sbuf_t *sb, const char *name, const char *key, const char *value,
                             int64_t v)
{
    sb_printf(sb, "%s{%s=\"", name, key);
    sb_label_value(sb, value, strlen(value));
    sb_printf(sb, "\"} %lld\n", (long long)v);
}

static void sample_label_double(sbuf_t *sb, const char *name, const char *key, const char *value,
                                double v)
{
    char num[64];
    format_double(num, sizeof(num), v);
    sb_printf(sb, "%s{%s=\"", name, key);
    sb_label_value(sb, value, strlen(value));
    sb_printf(sb, "\"} %s\n", num);
}

/* Seconds the stage's consumed input has waited for a successful flush; 0 when none waits. */
static double unflushed_seconds(const hc_metrics_t *m, int kind, int64_t now_ms)
{
    int64_t since = hc_metric_get(m->stage[kind].input_since_ms);
    return since != 0 && now_ms > since ? (double)(now_ms - since) / 1000.0 : 0.0;
}

static void counter(sbuf_t *sb, hc_metric_id_t id, int64_t value)
{
    assert(hc_metric_defs[id].type == HC_METRIC_COUNTER);
    family(sb, id);
    sample_int(sb, NAME(id), value);
}

/* One histogram's samples; label is "" or `key="value",` (already escaped). The +Inf bucket and
 * _count are both the sum of the buckets read once, so they agree even while other threads
 * observe (the separate count field could be a step ahead or behind). */
static void histogram_samples(sbuf_t *sb, const char *name, const char *label,
                              const hc_histogram_t *h)
{
    char num[64];
    uint64_t cum = 0;
    for (size_t b = 0; b < h->bound_count; b++) {
        cum += atomic_load_explicit(&h->buckets[b], memory_order_relaxed);
        format_double(num, sizeof(num), h->bounds[b]);
        sb_printf(sb, "%s_bucket{%sle=\"%s\"} %llu\n", name, label, num, (unsigned long long)cum);
    }
    cum += atomic_load_explicit(&h->buckets[h->bound_count], memory_order_relaxed);
    sb_printf(sb, "%s_bucket{%sle=\"+Inf\"} %llu\n", name, label, (unsigned long long)cum);
    format_double(num, sizeof(num), hc_histogram_sum(h));
    size_t label_len = strlen(label);
    if (label_len > 0) {
        /* `key="value",` without its trailing comma */
        sb_printf(sb, "%s_sum{%.*s} %s\n", name, (int)(label_len - 1), label, num);
        sb_printf(sb, "%s_count{%.*s} %llu\n", name, (int)(label_len - 1), label,
                  (unsigned long long)cum);
    } else {
        sb_printf(sb, "%s_sum %s\n", name, num);
        sb_printf(sb, "%s_count %llu\n", name, (unsigned long long)cum);
    }
}

static void histogram(sbuf_t *sb, hc_metric_id_t id, const hc_histogram_t *h)
{
    assert(hc_metric_defs[id].type == HC_METRIC_HISTOGRAM);
    family(sb, id);
    histogram_samples(sb, NAME(id), "", h);
}

static int cmp_lag(const void *a, const void *b)
{
    const lag_entry_t *x = a;
    const lag_entry_t *y = b;
    int c = strcmp(x->topic, y->topic);
    if (c != 0) {
        return c;
    }
    return (x->partition > y->partition) - (x->partition < y->partition);
}

static void render_lag(sbuf_t *sb, struct hc_metrics_lag *lag, int64_t now_ms)
{
    family(sb, HC_M_CONSUMER_LAG);
    if (!lag) {
        return;
    }
    pthread_mutex_lock(&lag->mu);
    if (lag->n > 1) {
        qsort(lag->ents, lag->n, sizeof(*lag->ents), cmp_lag);
    }
    for (size_t i = 0; i < lag->n; i++) {
        const lag_entry_t *ent = &lag->ents[i];
        if (lag_entry_stale(lag, ent, now_ms)) {
            continue; /* its client went quiet; the next report removes it */
        }
        sb_printf(sb, "%s{topic=\"", NAME(HC_M_CONSUMER_LAG));
        sb_label_value(sb, ent->topic, strlen(ent->topic));
        sb_printf(sb, "\",partition=\"%d\"} %lld\n", (int)ent->partition, (long long)ent->lag);
    }
    pthread_mutex_unlock(&lag->mu);
}

static void render_stalls(sbuf_t *sb, hc_metrics_t *m)
{
    static const char *const stage_label[HC_METRICS_STAGE_COUNT] = {"1", "2"};
    struct hc_metrics_lag *lag = m->lag;
    family(sb, HC_M_PARTITION_STALLED);
    int64_t count[HC_METRICS_STAGE_COUNT] = {0};
    if (lag) {
        pthread_mutex_lock(&lag->mu);
        for (size_t i = 0; i < lag->stall_n; i++) {
            const stall_entry_t *ent = &lag->stalls[i];
            sb_printf(sb, "%s{stage=\"%s\",topic=\"", NAME(HC_M_PARTITION_STALLED),
                      stage_label[ent->kind]);
            sb_label_value(sb, ent->topic, strlen(ent->topic));
            sb_printf(sb, "\",partition=\"%d\",state=\"", (int)ent->partition);
            sb_label_value(sb, ent->state, strlen(ent->state));
            sb_printf(sb, "\"} 1\n");
            count[ent->kind]++;
        }
        pthread_mutex_unlock(&lag->mu);
    }
    family(sb, HC_M_PARTITIONS_STALLED);
    for (int k = 0; k < HC_METRICS_STAGE_COUNT; k++) {
        sb_printf(sb, "%s{stage=\"%s\"} %lld\n", NAME(HC_M_PARTITIONS_STALLED), stage_label[k],
                  (long long)count[k]);
    }
    family(sb, HC_M_PARTITION_STALLS);
    for (int k = 0; k < HC_METRICS_STAGE_COUNT; k++) {
        sb_printf(sb, "%s{stage=\"%s\"} %lld\n", NAME(HC_M_PARTITION_STALLS), stage_label[k],
                  (long long)hc_metric_get(m->partition_stalls[k]));
    }
}

/* The pre-fetch queues of the consumers heard from recently (as the lag entries age out). */
static void render_fetch_queue(sbuf_t *sb, struct hc_metrics_lag *lag, int64_t now_ms)
{
    family(sb, HC_M_CONSUMER_FETCH_QUEUE_BYTES);
    int64_t bytes = 0;
    if (lag) {
        pthread_mutex_lock(&lag->mu);
        for (int c = 0; c < HC_METRICS_LAG_CLIENTS; c++) {
            const lag_client_t *cl = &lag->clients[c];
            if (cl->used && now_ms - cl->last_ms <= client_max_age(lag, c)) {
                bytes += cl->fetchq_bytes;
            }
        }
        pthread_mutex_unlock(&lag->mu);
    }
    sample_int(sb, NAME(HC_M_CONSUMER_FETCH_QUEUE_BYTES), bytes);
}

/* The process's resident set (/proc/self/statm), whatever the allocator; -1 when unreadable. */
static int64_t rss_bytes(void)
{
    FILE *fp = fopen("/proc/self/statm", "r");
    long long size = 0;
    long long resident = -1;
    if (!fp) {
        return -1;
    }
    if (fscanf(fp, "%lld %lld", &size, &resident) != 2) {
        resident = -1;
    }
    fclose(fp);
    long page = sysconf(_SC_PAGESIZE);
    return resident >= 0 && page > 0 ? (int64_t)resident * page : -1;
}

/* One of jemalloc's size_t statistics, or -1. */
static int64_t je_stat(const char *name)
{
    size_t v = 0;
    size_t len = sizeof(v);
    return mallctl(name, &v, &len, NULL, 0) == 0 ? (int64_t)v : -1;
}

/* RSS, and with jemalloc what of it the allocator holds: allocated (live objects), resident
 * (the allocator's pages in memory: allocated, plus free pages not yet returned to the kernel,
 * plus its metadata) and retained (address space kept after its pages went back to the
 * kernel: not in RSS). resident - allocated is what the allocator retains in RSS. Refreshing
 * jemalloc's statistics (the "epoch" call) merges its per-thread counters: microseconds, once
 * per scrape. */
static void render_memory(sbuf_t *sb)
{
    family(sb, HC_M_MEMORY_RSS_BYTES);
    sample_int(sb, NAME(HC_M_MEMORY_RSS_BYTES), rss_bytes());
    if (mallctl == NULL) {
        return; /* libc's allocator: no breakdown */
    }
    uint64_t epoch = 1;
    size_t len = sizeof(epoch);
    if (mallctl("epoch", &epoch, &len, &epoch, len) != 0) {
        return;
    }
    family(sb, HC_M_MEMORY_ALLOCATED_BYTES);
    sample_int(sb, NAME(HC_M_MEMORY_ALLOCATED_BYTES), je_stat("stats.allocated"));
    family(sb, HC_M_MEMORY_RESIDENT_BYTES);
    sample_int(sb, NAME(HC_M_MEMORY_RESIDENT_BYTES), je_stat("stats.resident"));
    family(sb, HC_M_MEMORY_RETAINED_BYTES);
    sample_int(sb, NAME(HC_M_MEMORY_RETAINED_BYTES), je_stat("stats.retained"));
}

static int cmp_hot(const void *a, const void *b)
{
    const hot_key_t *x = a;
    const hot_key_t *y = b;
    return (x->rate < y->rate) - (x->rate > y->rate);
}

/* name{post_id="..."<extra>} per post: extra is more labels (",source=\"detected\"") or "". */
static void render_hot(sbuf_t *sb, struct hc_metrics_hot *hot, int64_t now_ms, int64_t flush_ms,
                       const char *name, const char *extra)
{
    if (!hot) {
        return;
    }
    hot_key_t *merged = malloc(sizeof(*merged) * HC_METRICS_HOT_SOURCES * HC_METRICS_HOT_KEYS);
    if (!merged) {
        sb->failed = true;
        return;
    }
    size_t n = 0;
    pthread_mutex_lock(&hot->mu);
    for (int s = 0; s < HC_METRICS_HOT_SOURCES; s++) {
        const hot_source_t *src = &hot->src[s];
        if (!src->used || now_ms - src->published_ms > 3 * flush_ms) {
            continue;
        }
        for (size_t i = 0; i < src->n; i++) {
            const hot_key_t *key = &src->keys[i];
            size_t j = 0;
            while (j < n && !(merged[j].len == key->len &&
                              memcmp(merged[j].post_id, key->post_id, key->len) == 0)) {
                j++;
            }
            if (j == n) {
                merged[n++] = *key;
            } else {
                merged[j].rate += key->rate;
            }
        }
    }
    pthread_mutex_unlock(&hot->mu);
    if (n > 1) {
        qsort(merged, n, sizeof(*merged), cmp_hot);
    }
    for (size_t i = 0; i < n && i < HC_METRICS_HOT_KEYS; i++) {
        char num[64];
        format_double(num, sizeof(num), merged[i].rate);
        sb_printf(sb, "%s{post_id=\"", name);
        sb_label_value(sb, merged[i].post_id, merged[i].len);
        sb_printf(sb, "\"%s} %s\n", extra, num);
    }
    free(merged);
}

size_t hc_metrics_render(hc_metrics_t *m, int64_t now_ms, int64_t flush_ms, char **out)
{
    sbuf_t sb = {0};

    family(&sb, HC_M_UP);
    sample_int(&sb, NAME(HC_M_UP), 1);
    family(&sb, HC_M_READY);
    sample_int(&sb, NAME(HC_M_READY), hc_metrics_is_ready(m, now_ms, flush_ms) ? 1 : 0);

    counter(&sb, HC_M_EVENTS_CONSUMED, hc_metric_get(m->events_consumed));
    family(&sb, HC_M_EVENTS);
    sample_label_int(&sb, NAME(HC_M_EVENTS), "result", "ok", hc_metric_get(m->events_ok));
    sample_label_int(&sb, NAME(HC_M_EVENTS), "result", "invalid", hc_metric_get(m->events_invalid));
    family(&sb, HC_M_INVALID_EVENTS);
    for (int r = HC_EVENT_OK + 1; r < HC_EVENT_REASON_COUNT; r++) {
        sample_label_int(&sb, NAME(HC_M_INVALID_EVENTS), "reason",
                         hc_event_reason_str((hc_event_reason_t)r),
                         hc_metric_get(m->invalid_by_reason[r]));
    }
    counter(&sb, HC_M_PARTIALS, hc_metric_get(m->partials));
    counter(&sb, HC_M_PARTIAL_RECORDS, hc_metric_get(m->partial_records));
    family(&sb, HC_M_TRANSACTIONS);
    sample_label_int(&sb, NAME(HC_M_TRANSACTIONS), "outcome", "commit",
                     hc_metric_get(m->txn_commit));
    sample_label_int(&sb, NAME(HC_M_TRANSACTIONS), "outcome", "abort", hc_metric_get(m->txn_abort));
    histogram(&sb, HC_M_TRANSACTION_SECONDS, &m->txn_seconds);

    counter(&sb, HC_M_PARTIALS_CONSUMED, hc_metric_get(m->partials_consumed));
    family(&sb, HC_M_PARTIALS_INVALID);
    for (int r = HC_PARTIAL_OK + 1; r < HC_PARTIAL_REASON_COUNT; r++) {
        sample_label_int(&sb, NAME(HC_M_PARTIALS_INVALID), "reason",
                         hc_partial_reason_str((hc_partial_reason_t)r),
                         hc_metric_get(m->partials_invalid[r]));
    }
    family(&sb, HC_M_STORE_BATCHES);
    sample_label_int(&sb, NAME(HC_M_STORE_BATCHES), "outcome", "commit",
                     hc_metric_get(m->store_commit));
    sample_label_int(&sb, NAME(HC_M_STORE_BATCHES), "outcome", "conflict",
                     hc_metric_get(m->store_conflict));
    sample_label_int(&sb, NAME(HC_M_STORE_BATCHES), "outcome", "error",
                     hc_metric_get(m->store_error));
    counter(&sb, HC_M_STORE_KEYS_WRITTEN, hc_metric_get(m->store_keys_written));
    counter(&sb, HC_M_EVENTS_STORED, hc_metric_get(m->events_stored));
    counter(&sb, HC_M_STORE_FORGOT, hc_metric_get(m->store_forgot));
    family(&sb, HC_M_RETENTION_GAP_PARTITIONS);
    sample_int(&sb, NAME(HC_M_RETENTION_GAP_PARTITIONS), hc_metric_get(m->retention_gap_parts));
    family(&sb, HC_M_HOT_POSTS);
    sample_int(&sb, NAME(HC_M_HOT_POSTS), hc_metric_get(m->hot_posts));
    family(&sb, HC_M_HOTKEY_TRANSITIONS);
    sample_label_int(&sb, NAME(HC_M_HOTKEY_TRANSITIONS), "to", "hot",
                     hc_metric_get(m->hotkey_to_hot));
    sample_label_int(&sb, NAME(HC_M_HOTKEY_TRANSITIONS), "to", "cool",
                     hc_metric_get(m->hotkey_to_cool));
    counter(&sb, HC_M_HOTKEY_FLAPS, hc_metric_get(m->hotkey_flaps));
    histogram(&sb, HC_M_STORE_SECONDS, &m->store_seconds);
    histogram(&sb, HC_M_BATCH_POSTS, &m->batch_posts);

    family(&sb, HC_M_FLUSH_SECONDS);
    histogram_samples(&sb, NAME(HC_M_FLUSH_SECONDS), "stage=\"1\",",
                      &m->flush_seconds[HC_METRICS_STAGE1]);
    histogram_samples(&sb, NAME(HC_M_FLUSH_SECONDS), "stage=\"2\",",
                      &m->flush_seconds[HC_METRICS_STAGE2]);
    histogram(&sb, HC_M_END_TO_END_SECONDS, &m->end_to_end_seconds);

    render_lag(&sb, m->lag, now_ms);
    render_stalls(&sb, m);
    family(&sb, HC_M_STORE_BATCH_LIMIT);
    sample_int(&sb, NAME(HC_M_STORE_BATCH_LIMIT), hc_metric_get(m->store_batch_limit));
    family(&sb, HC_M_ASSIGNED_PARTITIONS);
    sample_label_int(&sb, NAME(HC_M_ASSIGNED_PARTITIONS), "stage", "1",
                     hc_metric_get(m->stage1_assigned));
    sample_label_int(&sb, NAME(HC_M_ASSIGNED_PARTITIONS), "stage", "2",
                     hc_metric_get(m->stage2_assigned));
    family(&sb, HC_M_UNFLUSHED_INPUT_SECONDS);
    sample_label_double(&sb, NAME(HC_M_UNFLUSHED_INPUT_SECONDS), "stage", "1",
                        unflushed_seconds(m, HC_METRICS_STAGE1, now_ms));
    sample_label_double(&sb, NAME(HC_M_UNFLUSHED_INPUT_SECONDS), "stage", "2",
                        unflushed_seconds(m, HC_METRICS_STAGE2, now_ms));
    family(&sb, HC_M_STAGE_INSTANCES);
    sample_label_int(&sb, NAME(HC_M_STAGE_INSTANCES), "stage", "1",
                     hc_metric_get(m->stage[HC_METRICS_STAGE1].running));
    sample_label_int(&sb, NAME(HC_M_STAGE_INSTANCES), "stage", "2",
                     hc_metric_get(m->stage[HC_METRICS_STAGE2].running));
    family(&sb, HC_M_HOT_KEY_EVENTS_PER_SECOND);
    render_hot(&sb, m->hot, now_ms, flush_ms, NAME(HC_M_HOT_KEY_EVENTS_PER_SECOND), "");
    family(&sb, HC_M_HOT_POST_EVENTS_PER_SECOND);
    render_hot(&sb, m->hotset, now_ms, flush_ms, NAME(HC_M_HOT_POST_EVENTS_PER_SECOND),
               ",source=\"detected\"");
    /* The thresholds only where a stage-2 hot set runs: a scraper tells "no hot set" from 0. */
    if (hc_metric_get(m->hotkeys_enter_milli) > 0) {
        char num[64];
        family(&sb, HC_M_HOTKEYS_ENTER_RATE);
        format_double(num, sizeof(num), (double)hc_metric_get(m->hotkeys_enter_milli) / 1000.0);
        sample_text(&sb, HC_M_HOTKEYS_ENTER_RATE, num);
        family(&sb, HC_M_HOTKEYS_LEAVE_RATE);
        format_double(num, sizeof(num), (double)hc_metric_get(m->hotkeys_leave_milli) / 1000.0);
        sample_text(&sb, HC_M_HOTKEYS_LEAVE_RATE, num);
    }
    render_fetch_queue(&sb, m->lag, now_ms);
    render_memory(&sb);

    if (sb.failed || !sb.buf) {
        free(sb.buf);
        *out = NULL;
        return 0;
    }
    *out = sb.buf;
    return sb.len;
}
