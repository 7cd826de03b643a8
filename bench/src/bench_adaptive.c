/* Static against adaptive salting (issue 18, docs/FORMATS.md "Adaptive salting"). Three modes:
 *
 *   bench_adaptive [--events N] [--rate R] [--posts N] [--zipf S] [--hot K] [--flush-ms MS]
 *   bench_adaptive rekey --in FILE --out FILE [--flush-ms MS] [--enter-rate R] [--leave-rate R]
 *                        [--dwell-ms MS] [--max N] [--salts N] [--lag-ms MS] [--post P]
 *                        [--declare POST]
 *   bench_adaptive spread --brokers B --topic T [--post P] [--hot-from MS] [--hot-until MS]
 *
 * Without a mode: partials per event on librdkafka's mock cluster in this process. The whole
 * pipeline (two stage-1, one stage-2 consumer, SQLite in a temp file) counts a Zipfian stream
 * from the load generator at a fixed rate, once keyed statically (every post over `salts` ways)
 * and once adaptively (`--adaptive`'s follower): the hot set is what stage 2 detects
 * (hotkeys.enter.rate, default 1000 likes/s, published to topic.hotkeys) plus, with --hot K, the
 * top K posts declared hot before the stream starts. A partial is one (stage-1 window, post)
 * record; salting spreads a post over raw partitions and so over both stage-1 consumers' tables.
 * Prints one JSON object per mode. Counts are checked against the producer's tally; a mismatch
 * exits 1.
 *
 * rekey (bench/scenarios/adaptive): rewrites a bench_workload file ("<key>\t<value>" lines,
 * statically keyed) with the keys an adaptive producer would give the same events. The hot set
 * is computed the way stage 2 computes it, over event time instead of processing time: the
 * events are cut into windows of --flush-ms by their ts, each window's events per post go
 * through stage 2's own hot set (hotset.h, stage 2's defaults for the thresholds, dwell, size
 * and record expiry), and each change becomes a topic.hotkeys record that reaches the producer's
 * view (producer_key.h, fed the encoded record as a follower is) --lag-ms after its window ends
 * (default 1000: stage 2's window after stage 1's). --declare POST also declares POST hot from the
 * first event on, for an hour (`hotcount hotkeys declare`: a scheduled event's post). Values
 * are copied unchanged. Prints one JSON object: events, events salted, hot-set changes, and
 * --post's (the celebrity's) likes keyed hot and cold with the event times of its first and last
 * hot key (one interval: with the default 10 s dwell it does not cool within the benchmark's
 * stream).
 *
 * spread: reads a raw topic back from the broker (every partition from its start to its end
 * when it starts) and prints one JSON object with the events per partition and, per partition,
 * --post's events (by the value's post_id), split by event time into those inside
 * [--hot-from, --hot-until] and outside. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hotcount/admin.h"
#include "hotcount/clock.h"
#include "hotcount/event.h"
#include "hotcount/hotset.h"
#include "hotcount/kafka.h"
#include "hotcount/loadgen.h"
#include "hotcount/log.h"
#include "hotcount/pipeline.h"
#include "hotcount/producer_key.h"
#include "hotcount/store.h"
#include "hotcount/table.h"

typedef struct args {
    uint64_t events, posts, hot;
    double rate, zipf;
    const char *flush_ms;
} args_t;

static int set(hc_config_t *cfg, const char *key, const char *value)
{
    char errstr[512];
    if (hc_config_set(cfg, key, value, errstr, sizeof(errstr)) != HC_OK) {
        fprintf(stderr, "bench_adaptive: %s=%s: %s\n", key, value, errstr);
        return -1;
    }
    return 0;
}

static int declare_top(const hc_config_t *cfg, uint64_t hot)
{
    char errstr[512];
    rd_kafka_t *rk = hc_kafka_new(cfg, HC_KAFKA_ROLE_PRODUCER, NULL, errstr, sizeof(errstr));
    if (!rk) {
        fprintf(stderr, "bench_adaptive: %s\n", errstr);
        return -1;
    }
    for (uint64_t rank = 1; rank <= hot; rank++) {
        hc_hotkey_record_t rec = {0};
        rec.post_id_len = (size_t)snprintf(rec.post_id, sizeof(rec.post_id), "%" PRIu64, rank);
        rec.hot = true;
        rec.since_ms = hc_wall_ms() - 1000;
        rec.source = HC_HOTKEY_DECLARED;
        rec.expires_ms = hc_wall_ms() + 3600000;
        char key[HC_POST_ID_MAX + 16];
        size_t klen = hc_hotkey_record_key(&rec, key, sizeof(key));
        char *value = hc_hotkey_record_encode(&rec);
        if (!value ||
            rd_kafka_producev(rk, RD_KAFKA_V_TOPIC(cfg->topic_hotkeys), RD_KAFKA_V_KEY(key, klen),
                              RD_KAFKA_V_VALUE(value, strlen(value)),
                              RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                              RD_KAFKA_V_END) != RD_KAFKA_RESP_ERR_NO_ERROR) {
            free(value);
            rd_kafka_destroy(rk);
            return -1;
        }
        free(value);
    }
    int rc = rd_kafka_flush(rk, 30000) == RD_KAFKA_RESP_ERR_NO_ERROR ? 0 : -1;
    rd_kafka_destroy(rk);
    return rc;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

static int run(const args_t *a, bool adaptive)
{
    char errstr[512], db[64], uri[96];
    hc_config_t cfg;
    hc_mock_t mock;
    int rc = 1;
    if (hc_config_init(&cfg, hc_store_facts()) != HC_OK) {
        return 1;
    }
    snprintf(db, sizeof(db), "/tmp/hc-bench-adaptive-%d.db", (int)getpid());
    snprintf(uri, sizeof(uri), "sqlite:%s", db);
    unlink(db);
    if (set(&cfg, "store", uri) || set(&cfg, "flush.ms", a->flush_ms) ||
        set(&cfg, "instance.id", "bench-adaptive")) {
        hc_config_fini(&cfg);
        return 1;
    }
    if (hc_mock_start(&mock, &cfg, 1, errstr, sizeof(errstr)) != HC_OK ||
        set(&cfg, "brokers", mock.bootstraps)) {
        fprintf(stderr, "bench_adaptive: mock: %s\n", errstr);
        hc_config_fini(&cfg);
        return 1;
    }
    hc_metrics_t metrics = {0};
    atomic_bool stop = false;
    hc_pipeline_t *pl = NULL;
    hc_tally_t tally;
    bool tally_ok = false;
    if (hc_pipeline_start(&cfg, 2, 1, &metrics, &stop, &pl, errstr, sizeof(errstr)) != HC_OK ||
        !hc_pipeline_wait_settled(pl, 500, 60000)) {
        fprintf(stderr, "bench_adaptive: pipeline: %s\n", errstr);
        goto out;
    }
    if (adaptive && declare_top(&cfg, a->hot) != 0) {
        fprintf(stderr, "bench_adaptive: declaring the hot posts failed\n");
        goto out;
    }
    if (hc_tally_init(&tally, a->posts) != HC_OK) {
        goto out;
    }
    tally_ok = true;
    hc_loadgen_opts_t opts = {.events = a->events,
                              .rate = a->rate,
                              .posts = a->posts,
                              .zipf_s = a->zipf,
                              .seed = 1,
                              .adaptive = adaptive};
    if (hc_loadgen_run(&cfg, &opts, &tally, NULL, errstr, sizeof(errstr)) != HC_OK) {
        fprintf(stderr, "bench_adaptive: produce: %s\n", errstr);
        goto out;
    }
    int64_t valid = atomic_load(&tally.acked_valid);
    for (int i = 0;
         i < 1200 && !(hc_metric_get(metrics.events_stored) == valid &&
                       hc_metric_get(metrics.partials_consumed) == hc_metric_get(metrics.partials));
         i++) {
        if (hc_pipeline_failed(pl, errstr, sizeof(errstr))) {
            fprintf(stderr, "bench_adaptive: %s\n", errstr);
            goto out;
        }
        sleep_ms(100);
    }
    if (hc_pipeline_stop(pl, errstr, sizeof(errstr)) != HC_OK) {
        pl = NULL;
        fprintf(stderr, "bench_adaptive: stop: %s\n", errstr);
        goto out;
    }
    pl = NULL;
    hc_store_t *st = NULL;
    int64_t rows = 0, mismatches = -1;
    if (hc_store_open(&cfg, &st, errstr, sizeof(errstr)) == HC_OK) {
        hc_tally_compare(&tally, st, &rows, &mismatches, NULL, NULL, errstr, sizeof(errstr));
        hc_store_close(st);
    }
    int64_t events = hc_metric_get(metrics.events_ok);
    int64_t partials = hc_metric_get(metrics.partials);
    printf(
        "{\"mode\":\"%s\",\"events\":%" PRId64 ",\"partials\":%" PRId64
        ",\"partials_per_event\":%.4f,\"salted_events\":%" PRId64 ",\"hot_posts\":%" PRIu64
        ",\"hot_records\":%" PRId64 ",\"posts_stored\":%" PRId64 ",\"mismatches\":%" PRId64 "}\n",
        adaptive ? "adaptive" : "static", events, partials,
        events > 0 ? (double)partials / (double)events : 0.0, (int64_t)atomic_load(&tally.salted),
        adaptive ? a->hot : 0, (int64_t)atomic_load(&tally.hot_records), rows, mismatches);
    fflush(stdout);
    rc = mismatches == 0 && events == valid ? 0 : 1;
out:
    if (pl) {
        atomic_store(&stop, true);
        hc_pipeline_stop(pl, errstr, sizeof(errstr));
    }
    if (tally_ok) {
        hc_tally_fini(&tally);
    }
    hc_mock_stop(&mock);
    hc_config_fini(&cfg);
    const char *suffixes[] = {"", "-wal", "-shm"};
    for (int i = 0; i < 3; i++) {
        char path[96];
        snprintf(path, sizeof(path), "%s%s", db, suffixes[i]);
        unlink(path);
    }
    return rc;
}

/* ---- rekey ---- */

static const char *opt(int argc, char **argv, const char *name, const char *def)
{
    for (int i = 2; i + 1 < argc; i++) {
        if (strcmp(argv[i], name) == 0) {
            return argv[i + 1];
        }
    }
    return def;
}

/* stage 2's hot set reads this clock: event time, the end of the window being closed */
static int64_t event_clock(void *opaque)
{
    return *(const int64_t *)opaque;
}

/* A record on its way to the producer's view: it arrives at apply_ms of event time. */
typedef struct pending {
    int64_t apply_ms;
    char *value; /* owned */
} pending_t;

typedef struct rekey {
    hc_hotset_t *hs;
    hc_hotview_t *hv;
    hc_table_t *tbl;
    int64_t now_ms; /* the hot set's clock */
    int64_t lag_ms;
    pending_t *q; /* FIFO: windows close in event-time order and the lag is fixed */
    size_t q_head, q_len, q_cap;
    size_t hot_max;
} rekey_t;

static int rekey_push(rekey_t *rk, int64_t apply_ms, char *value)
{
    if (rk->q_len == rk->q_cap) {
        size_t cap = rk->q_cap ? 2 * rk->q_cap : 64;
        pending_t *q = realloc(rk->q, cap * sizeof(*q));
        if (!q) {
            return -1;
        }
        rk->q = q;
        rk->q_cap = cap;
    }
    rk->q[rk->q_len++] = (pending_t){apply_ms, value};
    return 0;
}

/* Closes the window ending at end_ms as stage 2 closes one: every post's events of the window
 * offered once, the changes encoded as topic.hotkeys records. */
static int rekey_close(rekey_t *rk, int64_t end_ms)
{
    rk->now_ms = end_ms;
    hc_hotset_begin(rk->hs);
    size_t n = hc_table_count(rk->tbl);
    for (size_t i = 0; i < n; i++) {
        const hc_table_entry_t *ent = hc_table_entry(rk->tbl, i);
        hc_hotset_offer(rk->hs, ent->post_id, ent->post_id_len, ent->events);
    }
    size_t nt = 0;
    const hc_hotset_transition_t *t = hc_hotset_end(rk->hs, &nt);
    for (size_t i = 0; i < nt; i++) {
        hc_hotkey_record_t rec = {.post_id_len = t[i].post_id_len,
                                  .hot = t[i].change != HC_HOTSET_TO_COOL,
                                  .rate = t[i].rate,
                                  .since_ms = t[i].since_ms,
                                  .source = HC_HOTKEY_DETECTED,
                                  .expires_ms = t[i].expires_ms};
        memcpy(rec.post_id, t[i].post_id, t[i].post_id_len);
        char *value = hc_hotkey_record_encode(&rec);
        if (!value || rekey_push(rk, end_ms + rk->lag_ms, value) != 0) {
            free(value);
            return -1;
        }
    }
    if (hc_hotset_size(rk->hs) > rk->hot_max) {
        rk->hot_max = hc_hotset_size(rk->hs);
    }
    hc_table_clear(rk->tbl);
    return 0;
}

/* Feeds the view every record that has reached the producer by now_ms. */
static int rekey_follow(rekey_t *rk, int64_t now_ms)
{
    while (rk->q_head < rk->q_len && rk->q[rk->q_head].apply_ms <= now_ms) {
        pending_t *p = &rk->q[rk->q_head++];
        char errstr[256];
        if (hc_hotview_apply_value(rk->hv, p->value, strlen(p->value), errstr, sizeof(errstr)) !=
            HC_OK) {
            fprintf(stderr, "bench_adaptive rekey: own record refused: %s\n", errstr);
            return -1;
        }
        free(p->value);
        p->value = NULL;
    }
    return 0;
}

/* `hotcount hotkeys declare POST` before the stream: hot from its first event for an hour. */
static int declare_post(hc_hotview_t *hv, const char *post, int64_t from_ms)
{
    hc_hotkey_record_t rec = {.hot = true,
                              .since_ms = from_ms,
                              .source = HC_HOTKEY_DECLARED,
                              .expires_ms = from_ms + 3600000};
    rec.post_id_len = strlen(post);
    if (rec.post_id_len == 0 || rec.post_id_len > HC_POST_ID_MAX) {
        fprintf(stderr, "bench_adaptive rekey: --declare: bad post id\n");
        return -1;
    }
    memcpy(rec.post_id, post, rec.post_id_len);
    char *value = hc_hotkey_record_encode(&rec);
    char errstr[256];
    int rc =
        value && hc_hotview_apply_value(hv, value, strlen(value), errstr, sizeof(errstr)) == HC_OK
            ? 0
            : -1;
    if (rc != 0) {
        fprintf(stderr, "bench_adaptive rekey: --declare %s refused\n", post);
    }
    free(value);
    return rc;
}

static int cmd_rekey(int argc, char **argv)
{
    const char *in = opt(argc, argv, "--in", NULL);
    const char *out = opt(argc, argv, "--out", NULL);
    int64_t flush_ms = strtoll(opt(argc, argv, "--flush-ms", "1000"), NULL, 10);
    int64_t dwell_ms = strtoll(opt(argc, argv, "--dwell-ms", "10000"), NULL, 10);
    /* stage 2's record expiry (hotkeys_pub.c): max(60 s, 6 x dwell) */
    int64_t ttl_ms = 6 * dwell_ms > 60000 ? 6 * dwell_ms : 60000;
    const char *post = opt(argc, argv, "--post", "celebrity");
    const char *declare = opt(argc, argv, "--declare", NULL);
    size_t post_len = strlen(post);
    rekey_t rk = {.lag_ms = strtoll(opt(argc, argv, "--lag-ms", "1000"), NULL, 10)};
    hc_hotset_opts_t o = {.enter_rate = strtod(opt(argc, argv, "--enter-rate", "1000"), NULL),
                          .leave_rate = strtod(opt(argc, argv, "--leave-rate", "500"), NULL),
                          .dwell_ms = dwell_ms,
                          .max = strtoull(opt(argc, argv, "--max", "1000"), NULL, 10),
                          .window_ms = flush_ms,
                          .ttl_ms = ttl_ms,
                          .flap_ms = ttl_ms,
                          .now_ms = event_clock,
                          .clock_opaque = &rk.now_ms};
    uint32_t salts = (uint32_t)strtoul(opt(argc, argv, "--salts", "16"), NULL, 10);
    if (!in || !out || flush_ms < 1 || salts < 1) {
        fprintf(stderr, "bench_adaptive rekey: --in FILE --out FILE, --flush-ms and --salts >= "
                        "1\n");
        return 2;
    }
    FILE *fin = fopen(in, "r");
    FILE *fout = fin ? fopen(out, "w") : NULL;
    if (!fin || !fout) {
        perror(fin ? out : in);
        if (fin) {
            fclose(fin);
        }
        return 1;
    }
    static char obuf[1 << 20];
    setvbuf(fout, obuf, _IOFBF, sizeof(obuf));
    int rc = 1;
    char errstr[256];
    rk.hv = hc_hotview_new(salts);
    rk.tbl = hc_table_new((size_t)1 << 22);
    if (!rk.hv || !rk.tbl) {
        fprintf(stderr, "bench_adaptive rekey: out of memory\n");
        goto out;
    }
    static char line[1 << 16];
    int64_t win_start = HC_TS_NONE, events = 0, salted = 0, kept = 0;
    int64_t post_events = 0, post_hot = 0, post_first_hot = HC_TS_NONE, post_last_hot = HC_TS_NONE;
    while (fgets(line, sizeof(line), fin)) {
        size_t len = strlen(line);
        char *tab = memchr(line, '\t', len);
        if (len == 0 || line[len - 1] != '\n' || !tab) {
            fprintf(stderr, "bench_adaptive rekey: malformed line %" PRId64 "\n", events + 1);
            goto out;
        }
        const char *value = tab + 1;
        size_t value_len = (size_t)(line + len - 1 - value);
        hc_event_t ev;
        events++;
        if (hc_event_parse(value, value_len, 65536, &ev) != HC_EVENT_OK || !ev.has_ts) {
            /* not an event a producer would key by post: the line goes out as it came */
            fwrite(line, 1, len, fout);
            kept++;
            continue;
        }
        if (win_start == HC_TS_NONE) {
            win_start = ev.ts;
            rk.now_ms = win_start;
            rk.hs = hc_hotset_new(&o, errstr, sizeof(errstr));
            if (!rk.hs) {
                fprintf(stderr, "bench_adaptive rekey: %s\n", errstr);
                goto out;
            }
            if (declare && declare_post(rk.hv, declare, ev.ts) != 0) {
                goto out;
            }
        }
        while (ev.ts >= win_start + flush_ms) {
            win_start += flush_ms;
            if (rekey_close(&rk, win_start) != 0) {
                fprintf(stderr, "bench_adaptive rekey: out of memory\n");
                goto out;
            }
        }
        if (rekey_follow(&rk, ev.ts) != 0) {
            goto out;
        }
        char key[HC_POST_ID_MAX + 16];
        size_t key_len = hc_producer_key(rk.hv, ev.post_id, ev.post_id_len, ev.user_id,
                                         ev.user_id_len, ev.ts, key, sizeof(key));
        if (key_len == 0 ||
            hc_table_add(rk.tbl, ev.post_id, ev.post_id_len, ev.delta, 1, ev.ts, ev.ts) != HC_OK) {
            fprintf(stderr, "bench_adaptive rekey: line %" PRId64 ": no key or table full\n",
                    events);
            goto out;
        }
        bool hot = hc_hotview_salts(rk.hv, ev.post_id, ev.post_id_len, ev.ts) > 0;
        salted += hot;
        if (ev.post_id_len == post_len && memcmp(ev.post_id, post, post_len) == 0) {
            post_events++;
            if (hot) {
                post_hot++;
                post_first_hot = post_first_hot == HC_TS_NONE ? ev.ts : post_first_hot;
                post_last_hot = ev.ts;
            }
        }
        fwrite(key, 1, key_len, fout);
        fputc('\t', fout);
        fwrite(value, 1, value_len + 1, fout); /* with its newline */
    }
    if (ferror(fin)) {
        perror(in);
        goto out;
    }
    hc_hotset_stats_t st = rk.hs ? hc_hotset_stats(rk.hs) : (hc_hotset_stats_t){0};
    printf("{\"events\":%" PRId64 ",\"salted_events\":%" PRId64 ",\"unparsed_kept\":%" PRId64
           ",\"to_hot\":%" PRId64 ",\"to_cool\":%" PRId64 ",\"hot_posts_max\":%zu"
           ",\"records\":%" PRId64 ",\"post\":\"%s\",\"post_events\":%" PRId64
           ",\"post_hot_events\":%" PRId64 ",\"post_first_hot_ms\":%" PRId64
           ",\"post_last_hot_ms\":%" PRId64 ",\"flush_ms\":%" PRId64 ",\"lag_ms\":%" PRId64
           ",\"enter_rate\":%g,\"leave_rate\":%g,\"dwell_ms\":%" PRId64 ",\"salts\":%u}\n",
           events, salted, kept, st.to_hot, st.to_cool, rk.hot_max, hc_hotview_records(rk.hv), post,
           post_events, post_hot, post_first_hot == HC_TS_NONE ? -1 : post_first_hot,
           post_last_hot == HC_TS_NONE ? -1 : post_last_hot, flush_ms, rk.lag_ms, o.enter_rate,
           o.leave_rate, dwell_ms, salts);
    rc = 0;
out:
    if (fclose(fout) != 0 && rc == 0) {
        perror(out);
        rc = 1;
    }
    fclose(fin);
    for (size_t i = rk.q_head; i < rk.q_len; i++) {
        free(rk.q[i].value);
    }
    free(rk.q);
    hc_hotset_destroy(rk.hs);
    hc_hotview_destroy(rk.hv);
    hc_table_destroy(rk.tbl);
    return rc;
}

/* ---- spread ---- */

static void print_counts(const char *name, const int64_t *v, int n)
{
    printf(",\"%s\":[", name);
    for (int i = 0; i < n; i++) {
        printf("%s%" PRId64, i ? "," : "", v[i]);
    }
    printf("]");
}

static int cmd_spread(int argc, char **argv)
{
    const char *brokers = opt(argc, argv, "--brokers", NULL);
    const char *topic = opt(argc, argv, "--topic", NULL);
    const char *post = opt(argc, argv, "--post", "celebrity");
    int64_t hot_from = strtoll(opt(argc, argv, "--hot-from", "-1"), NULL, 10);
    int64_t hot_until = strtoll(opt(argc, argv, "--hot-until", "-1"), NULL, 10);
    if (!brokers || !topic) {
        fprintf(stderr, "bench_adaptive spread: --brokers and --topic are required\n");
        return 2;
    }
    size_t post_len = strlen(post);
    char errstr[512], group[64];
    snprintf(group, sizeof(group), "bench-adaptive-spread-%d", (int)getpid());
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    /* nothing is committed: the group only names the reader */
    if (rd_kafka_conf_set(conf, "bootstrap.servers", brokers, errstr, sizeof(errstr)) ||
        rd_kafka_conf_set(conf, "group.id", group, errstr, sizeof(errstr)) ||
        rd_kafka_conf_set(conf, "enable.auto.commit", "false", errstr, sizeof(errstr)) ||
        rd_kafka_conf_set(conf, "enable.partition.eof", "true", errstr, sizeof(errstr))) {
        fprintf(stderr, "bench_adaptive spread: %s\n", errstr);
        rd_kafka_conf_destroy(conf);
        return 1;
    }
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof(errstr));
    if (!rk) {
        fprintf(stderr, "bench_adaptive spread: %s\n", errstr);
        rd_kafka_conf_destroy(conf);
        return 1;
    }
    int rc = 1, n = 0;
    int64_t *counts = NULL, *hi = NULL;
    bool *done = NULL;
    rd_kafka_topic_partition_list_t *parts = NULL;
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
    const rd_kafka_metadata_t *md = NULL;
    if (!rkt || rd_kafka_metadata(rk, 0, rkt, &md, 30000) != RD_KAFKA_RESP_ERR_NO_ERROR ||
        md->topic_cnt != 1 || md->topics[0].err || md->topics[0].partition_cnt < 1) {
        fprintf(stderr, "bench_adaptive spread: no metadata for %s\n", topic);
        goto out;
    }
    n = md->topics[0].partition_cnt;
    /* per partition: events, then the post's events: all, inside the hot interval, outside */
    counts = calloc((size_t)n * 4, sizeof(*counts));
    hi = calloc((size_t)n, sizeof(*hi));
    done = calloc((size_t)n, sizeof(*done));
    parts = rd_kafka_topic_partition_list_new(n);
    if (!counts || !hi || !done || !parts) {
        goto out;
    }
    int left = 0;
    for (int p = 0; p < n; p++) {
        int64_t lo;
        rd_kafka_resp_err_t err =
            rd_kafka_query_watermark_offsets(rk, topic, p, &lo, &hi[p], 30000);
        if (err) {
            fprintf(stderr, "bench_adaptive spread: watermarks of %s [%d]: %s\n", topic, p,
                    rd_kafka_err2str(err));
            goto out;
        }
        if (hi[p] > lo) {
            rd_kafka_topic_partition_list_add(parts, topic, p)->offset = lo;
            left++;
        }
    }
    if (rd_kafka_assign(rk, parts) != RD_KAFKA_RESP_ERR_NO_ERROR) {
        fprintf(stderr, "bench_adaptive spread: assign failed\n");
        goto out;
    }
    int64_t events = 0, post_events = 0;
    int64_t deadline = hc_now_ms() + 300000;
    while (left > 0) {
        if (hc_now_ms() > deadline) {
            fprintf(stderr, "bench_adaptive spread: %s not read to its end in 300 s\n", topic);
            goto out;
        }
        rd_kafka_message_t *rkm = rd_kafka_consumer_poll(rk, 1000);
        if (!rkm) {
            continue;
        }
        int p = rkm->partition;
        if (rkm->err == RD_KAFKA_RESP_ERR__PARTITION_EOF && p >= 0 && p < n) {
            /* the end (the topic is not being written): also past a last offset that no
             * message has, such as a transaction marker's */
            left -= !done[p];
            done[p] = true;
            rd_kafka_message_destroy(rkm);
            continue;
        }
        if (rkm->err || p < 0 || p >= n || rkm->offset >= hi[p]) {
            if (rkm->err) {
                fprintf(stderr, "bench_adaptive spread: %s\n", rd_kafka_message_errstr(rkm));
            }
            rd_kafka_message_destroy(rkm);
            continue;
        }
        events++;
        counts[p]++;
        hc_event_t ev;
        if (hc_event_parse(rkm->payload, rkm->len, 65536, &ev) == HC_EVENT_OK &&
            ev.post_id_len == post_len && memcmp(ev.post_id, post, post_len) == 0) {
            post_events++;
            counts[n + p]++;
            bool hot = ev.has_ts && ev.ts >= hot_from && ev.ts <= hot_until;
            counts[(hot ? 2 : 3) * n + p]++;
        }
        if (rkm->offset == hi[p] - 1) {
            left -= !done[p];
            done[p] = true;
        }
        rd_kafka_message_destroy(rkm);
    }
    printf("{\"topic\":\"%s\",\"partitions\":%d,\"events\":%" PRId64 ",\"post\":\"%s\","
           "\"post_events\":%" PRId64 ",\"hot_from_ms\":%" PRId64 ",\"hot_until_ms\":%" PRId64,
           topic, n, events, post, post_events, hot_from, hot_until);
    print_counts("events_by_partition", counts, n);
    print_counts("post_by_partition", counts + n, n);
    print_counts("post_hot_by_partition", counts + 2 * n, n);
    print_counts("post_cold_by_partition", counts + 3 * n, n);
    printf("}\n");
    rc = 0;
out:
    if (parts) {
        rd_kafka_topic_partition_list_destroy(parts);
    }
    free(counts);
    free(hi);
    free(done);
    if (md) {
        rd_kafka_metadata_destroy(md);
    }
    if (rkt) {
        rd_kafka_topic_destroy(rkt);
    }
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "rekey") == 0) {
        return cmd_rekey(argc, argv);
    }
    if (argc >= 2 && strcmp(argv[1], "spread") == 0) {
        return cmd_spread(argc, argv);
    }
    args_t a = {.events = 200000,
                .posts = 100000,
                .hot = 16,
                .rate = 20000,
                .zipf = 1.1,
                .flush_ms = "1000"};
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--events") == 0) {
            a.events = strtoull(argv[i + 1], NULL, 10);
        } else if (strcmp(argv[i], "--rate") == 0) {
            a.rate = strtod(argv[i + 1], NULL);
        } else if (strcmp(argv[i], "--posts") == 0) {
            a.posts = strtoull(argv[i + 1], NULL, 10);
        } else if (strcmp(argv[i], "--zipf") == 0) {
            a.zipf = strtod(argv[i + 1], NULL);
        } else if (strcmp(argv[i], "--hot") == 0) {
            a.hot = strtoull(argv[i + 1], NULL, 10);
        } else if (strcmp(argv[i], "--flush-ms") == 0) {
            a.flush_ms = argv[i + 1];
        } else {
            fprintf(stderr, "bench_adaptive: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    hc_log_setup(HC_LOG_ERROR, HC_LOG_TEXT);
    int rc = run(&a, false);
    return run(&a, true) | rc;
}
