/* status: the pipeline's health in one screen, read from Kafka (Admin API: the groups' members
 * and committed offsets; the topics' log ends), the store (stage 2's offsets, a timed round
 * trip), the stages' metrics endpoints when named, and the tail of the dead-letter topic. It
 * never joins a group and commits nothing: one HC_KAFKA_ROLE_READER client without a group id.
 *
 * The report is built as one JSON object (what --json prints) and the text screen is drawn
 * from it, so both always say the same. Exit 0 healthy, 1 degraded (every cause in "causes",
 * names below), 2 usage or configuration. */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cli_wait.h"
#include "cmds.h"
#include "escape.h"
#include "hotcount/clock.h"
#include "hotcount/group_admin.h"
#include "hotcount/hotkeys_scrape.h"
#include "hotcount/kafka.h"
#include "hotcount/log.h"
#include "hotcount/metric_defs.h"
#include "hotcount/prom_text.h"
#include "hotcount/redact.h"
#include "hotcount/store.h"
#include "hotcount/timeouts.h"
#include "hotcount/topic_read.h"

/* Causes, as they appear in "causes" (stable names: scripts and alerts match them):
 *   kafka_unreachable                the cluster did not answer
 *   stageN_no_members                group.stageN has no member: that stage is down
 *   stageN_unassigned                a partition of the stage's input has no member
 *   stageN_lag                       the stage's lag is above --max-lag
 *   stageN_metrics_unreachable       --stageN was given and its /metrics did not answer
 *   stageN_stalled                   input has waited longer than --max-age for a flush
 *   stageN_partition_stalled         the stage's metrics name a partition standing still
 *                                    (hotcount_partition_stalled: input waiting and nothing
 *                                    committed for partition.progress.ms)
 *   store_unreachable                the store could not be opened or read
 *   transaction_lingering            a partition hotcount writes transactionally has been held
 *                                    by one open transaction longer than the producers'
 *                                    transaction.timeout.ms (see transactions_json) */

/* Stage 1's committed offsets. A stage 1 holds its offsets in a transaction for the moment of
 * its commit, and the broker then answers "unstable" for them: a few tries a short while apart
 * before calling Kafka unreachable. */
static hc_err_t committed_offsets(rd_kafka_t *rk, const char *group, const char *topic, int count,
                                  int timeout_ms, int64_t *out, char *errstr, size_t errstr_size)
{
    hc_err_t err = HC_ERR_TRANSIENT;
    for (int attempt = 0; attempt < 5 && err == HC_ERR_TRANSIENT; attempt++) {
        if (attempt > 0) {
            hc_cli_wait(200, &hc_cli_stop);
        }
        err = hc_group_committed(rk, group, topic, count, timeout_ms, out, errstr, errstr_size);
    }
    return err;
}

static const hc_cli_opt_t status_opts[] = {
    {"json", 0, NULL, "print the report as one JSON object"},
    {"stage1", 0, "HOST:PORT", "stage 1's metrics endpoint (its metrics.listen)"},
    {"stage2", 0, "HOST:PORT", "stage 2's metrics endpoint"},
    {"max-lag", 0, "N", "a stage more than N messages behind is degraded (default 100000)"},
    {"max-age", 0, "SECONDS",
     "a stage whose input waited longer than this for a flush is degraded (default 30)"},
    {"dlq-scan", 0, "N", "dead letters read per DLQ partition, newest first (default 10000)"},
    {"timeout", 't', "SECONDS", "deadline of each Kafka and metrics request (default 10)"},
    {NULL, 0, NULL, NULL},
};

static const hc_cli_cmd_t status_cmd = {
    "status", "",
    "Reports both consumer groups (members, partitions, lag per partition and in total), stage "
    "2's stored offsets against the partials log end, the stages' unflushed input age from "
    "their metrics, the partitions held by open or lingering transactions, the store's "
    "reachability and round trip and the dead letters by reason. "
    "Exit 0 healthy, 1 degraded (each cause named).",
    status_opts};

typedef struct status_opts {
    int64_t max_lag;
    double max_age;
    int64_t dlq_scan;
    int timeout_ms;
} status_opts_t;

static void add_cause(json_t *causes, const char *stage, const char *what)
{
    char name[64];
    snprintf(name, sizeof(name), "%s%s%s", stage ? stage : "", stage ? "_" : "", what);
    size_t i;
    json_t *c;
    json_array_foreach(causes, i, c)
    {
        if (strcmp(json_string_value(c), name) == 0) {
            return;
        }
    }
    json_array_append_new(causes, json_string(name));
}

static json_t *members_json(const hc_group_desc_t *desc, bool *assigned, int count)
{
    json_t *arr = json_array();
    for (size_t i = 0; i < desc->member_count; i++) {
        const hc_group_member_t *m = &desc->members[i];
        json_t *parts = json_array();
        for (size_t j = 0; j < m->partition_count; j++) {
            json_array_append_new(parts, json_integer(m->partitions[j]));
            if (m->partitions[j] >= 0 && m->partitions[j] < count) {
                assigned[m->partitions[j]] = true;
            }
        }
        json_array_append_new(arr, json_pack("{s:s,s:s,s:s,s:s,s:o}", "instance_id", m->instance_id,
                                             "client_id", m->client_id, "consumer_id",
                                             m->consumer_id, "host", m->host, "partitions", parts));
    }
    return arr;
}

/* The value of the sample `name{labels}` (labels "" for none, else exactly as rendered) in a
 * Prometheus text, or -1. */
static double metric_value(const char *text, hc_metric_id_t id, const char *labels)
{
    size_t ll = strlen(labels);
    hc_prom_sample_t smp;
    for (const char *pos = text; hc_prom_next(&pos, &smp);) {
        if (hc_prom_is(&smp, hc_metric_defs[id].name) && smp.labels_len == ll &&
            memcmp(smp.labels, labels, ll) == 0) {
            return smp.value;
        }
    }
    return -1;
}

/* The stage's partitions standing still now: each hotcount_partition_stalled sample of its
 * stage label, as {topic, partition, state}. */
static json_t *stalled_partitions(const char *text, const char *label)
{
    json_t *arr = json_array();
    hc_prom_sample_t smp;
    for (const char *pos = text; hc_prom_next(&pos, &smp);) {
        if (!hc_prom_is(&smp, hc_metric_defs[HC_M_PARTITION_STALLED].name) ||
            !hc_prom_has_label(&smp, "stage", label)) {
            continue;
        }
        char topic[256] = "";
        char partition[32] = "";
        char state[128] = "";
        hc_prom_label(&smp, "topic", topic, sizeof(topic), NULL);
        hc_prom_label(&smp, "partition", partition, sizeof(partition), NULL);
        hc_prom_label(&smp, "state", state, sizeof(state), NULL);
        json_array_append_new(arr,
                              json_pack("{s:s,s:I,s:s}", "topic", topic, "partition",
                                        (json_int_t)strtol(partition, NULL, 10), "state", state));
    }
    return arr;
}

static json_t *metrics_json(const char *stage, const char *label, const char *addr,
                            const status_opts_t *o, json_t *causes)
{
    if (!addr) {
        return json_null();
    }
    char errstr[256];
    char *text = NULL;
    if (hc_metrics_scrape_text_deadline(addr, o->timeout_ms, o->timeout_ms, &text, errstr,
                                        sizeof(errstr)) != HC_OK) {
        add_cause(causes, stage, "metrics_unreachable");
        return json_pack("{s:s,s:b,s:s}", "address", addr, "reachable", 0, "error", errstr);
    }
    char lbl[32];
    snprintf(lbl, sizeof(lbl), "stage=\"%s\"", label);
    double ready = metric_value(text, HC_M_READY, "");
    double unflushed = metric_value(text, HC_M_UNFLUSHED_INPUT_SECONDS, lbl);
    double assigned = metric_value(text, HC_M_ASSIGNED_PARTITIONS, lbl);
    json_t *stalled = stalled_partitions(text, label);
    free(text);
    if (unflushed > o->max_age) {
        add_cause(causes, stage, "stalled");
    }
    if (json_array_size(stalled) > 0) {
        add_cause(causes, stage, "partition_stalled");
    }
    return json_pack("{s:s,s:b,s:b,s:f,s:I,s:o}", "address", addr, "reachable", 1, "ready",
                     ready == 1, "unflushed_input_seconds", unflushed < 0 ? 0 : unflushed,
                     "assigned_partitions", (json_int_t)(assigned < 0 ? 0 : assigned),
                     "stalled_partitions", stalled);
}

/* Per partition: log end minus the stage's next offset, and where that is small (at most
 * EXACT_LAG_MAX), the committed records in between instead: the log end also counts
 * transaction markers (about one per partition at rest behind stage 1's transactions, and in
 * topic.raw behind a replay's), which no consumer commits past. NULL when out of memory. */
#define EXACT_LAG_MAX 10000
static int64_t *exact_lags(rd_kafka_t *rk, const char *topic, const int64_t *consumed, int count,
                           const int64_t *low, const int64_t *high)
{
    int64_t *lags = calloc((size_t)count + 1, sizeof(*lags));
    hc_topic_range_t *ranges = calloc((size_t)count + 1, sizeof(*ranges));
    int64_t *counts = calloc((size_t)count + 1, sizeof(*counts));
    size_t n = 0;
    for (int p = 0; lags && ranges && counts && p < count; p++) {
        int64_t at = consumed[p] == HC_OFFSET_NONE || consumed[p] < low[p] ? low[p] : consumed[p];
        lags[p] = high[p] > at ? high[p] - at : 0;
        if (lags[p] > 0 && lags[p] <= EXACT_LAG_MAX) {
            ranges[n++] = (hc_topic_range_t){p, at, high[p]};
        }
    }
    char errstr[256];
    if (lags && ranges && counts &&
        hc_topic_count_records(rk, topic, ranges, n, counts, errstr, sizeof(errstr)) == HC_OK) {
        for (size_t r = 0; r < n; r++) {
            lags[ranges[r].partition] = counts[r];
        }
    }
    free(ranges);
    free(counts);
    return lags;
}

/* One stage's group and lag. consumed[p]: the next offset the stage will read of partition p of
 * topic (HC_OFFSET_NONE: none yet, counted from the log start). */
static json_t *stage_json(rd_kafka_t *rk, const char *stage, const char *group, const char *topic,
                          const char *offsets_from, const int64_t *consumed, int count,
                          const int64_t *low, const int64_t *high, const status_opts_t *o,
                          json_t *causes)
{
    char errstr[512];
    hc_group_desc_t desc;
    json_t *obj =
        json_pack("{s:s,s:s,s:s}", "group", group, "topic", topic, "offsets_from", offsets_from);
    bool *assigned = calloc((size_t)count + 1, sizeof(*assigned));
    if (hc_group_describe(rk, group, topic, o->timeout_ms, &desc, errstr, sizeof(errstr)) ==
        HC_OK) {
        json_object_set_new(obj, "state", json_string(desc.state));
        json_object_set_new(obj, "protocol", json_string(desc.protocol));
        json_object_set_new(obj, "members", members_json(&desc, assigned, count));
        if (desc.member_count == 0) {
            add_cause(causes, stage, "no_members");
        }
    } else {
        json_object_set_new(obj, "members", json_array());
        json_object_set_new(obj, "error", json_string(errstr));
        add_cause(causes, stage, "no_members");
        desc.member_count = 0;
    }
    json_t *parts = json_array();
    json_t *unassigned = json_array();
    int64_t total = 0;
    int64_t *lags = consumed ? exact_lags(rk, topic, consumed, count, low, high) : NULL;
    for (int p = 0; lags && p < count; p++) {
        int64_t lag = lags[p];
        total += lag;
        json_t *committed = consumed[p] == HC_OFFSET_NONE ? json_null() : json_integer(consumed[p]);
        json_array_append_new(parts,
                              json_pack("{s:i,s:o,s:I,s:I}", "partition", p, "committed", committed,
                                        "end", (json_int_t)high[p], "lag", (json_int_t)lag));
        if (!assigned[p]) {
            json_array_append_new(unassigned, json_integer(p));
        }
    }
    if (desc.member_count > 0 && json_array_size(unassigned) > 0) {
        add_cause(causes, stage, "unassigned");
    }
    free(lags);
    if (consumed && total > o->max_lag) {
        add_cause(causes, stage, "lag");
    }
    json_object_set_new(obj, "partitions", parts);
    json_object_set_new(obj, "unassigned", unassigned);
    json_object_set_new(obj, "lag", consumed ? json_integer(total) : json_null());
    hc_group_desc_fini(&desc);
    free(assigned);
    return obj;
}

typedef struct dlq_count {
    json_t *by_reason;
    int64_t replayed;
} dlq_count_t;

static hc_err_t count_dead_letter(const hc_dead_letter_t *dl, void *opaque)
{
    dlq_count_t *c = opaque;
    char reason[128];
    snprintf(reason, sizeof(reason), "%.*s", dl->reason ? (int)dl->reason_len : 7,
             dl->reason ? dl->reason : "unknown");
    json_t *n = json_object_get(c->by_reason, reason);
    json_object_set_new(c->by_reason, reason, json_integer(n ? json_integer_value(n) + 1 : 1));
    c->replayed += dl->replayed_from != NULL;
    return HC_OK;
}

static json_t *dlq_json(rd_kafka_t *rk, const hc_config_t *cfg, const status_opts_t *o)
{
    char errstr[512];
    dlq_count_t c = {json_object(), 0};
    int64_t scanned = 0;
    bool partial = false;
    hc_err_t err = hc_dead_letters_read(rk, cfg->topic_dlq, -1, -1, o->dlq_scan, count_dead_letter,
                                        &c, &scanned, &partial, errstr, sizeof(errstr));
    json_t *obj =
        json_pack("{s:s,s:I,s:b,s:o,s:I}", "topic", cfg->topic_dlq, "records", (json_int_t)scanned,
                  "partial", partial, "by_reason", c.by_reason, "replayed", (json_int_t)c.replayed);
    if (err != HC_OK) {
        hc_redact_config_secrets(errstr, sizeof(errstr), cfg);
        json_object_set_new(obj, "error", json_string(errstr));
    }
    return obj;
}

/* Open and lingering transactions of hotcount's transactional ids, as far as librdkafka can
 * see them: it has no ListTransactions or DescribeTransactions, so what is measured is what a
 * transaction holds, per partition of each topic hotcount writes inside transactions
 * (topic.partials and topic.manifest: stage 1's <group.stage1>-<instance.id>; topic.dlq: stage
 * 1's dead letters; topic.raw: `dlq replay`'s <group.stage1>-dlq-replay, and any transactional
 * producer upstream, which stalls stage 1 all the same). A partition whose last stable offset
 * lags its high watermark is held by an open transaction: normal for the moment of a commit.
 * One held by a transaction that began longer ago than transaction.timeout.ms is lingering: no
 * healthy producer of hotcount keeps one open that long (flush.ms is at most half of it), the
 * coordinator aborts such a transaction within its cleanup interval, and one it never aborts (a
 * hanging transaction) stops every read_committed reader of the partition for good. */
static json_t *transactions_json(rd_kafka_t *rk, const hc_config_t *cfg, const status_opts_t *o,
                                 json_t *causes)
{
    hc_timeouts_t scratch;
    int64_t txn_timeout_ms = hc_timeouts_of(cfg, &scratch)->txn_timeout_ms;
    const char *topics[] = {cfg->topic_partials, cfg->topic_manifest, cfg->topic_dlq,
                            cfg->topic_raw};
    json_t *held = json_array();
    json_t *errors = json_array();
    int64_t open = 0, lingering = 0;
    int64_t older_than_ms = hc_wall_ms() - txn_timeout_ms;
    for (size_t t = 0; t < sizeof(topics) / sizeof(topics[0]); t++) {
        if (!topics[t] || !*topics[t]) {
            continue; /* topic.manifest "" = off */
        }
        char errstr[512];
        hc_held_partition_t *hp = NULL;
        size_t n = 0;
        if (hc_topic_held_partitions(rk, topics[t], older_than_ms, o->timeout_ms, &hp, &n, errstr,
                                     sizeof(errstr)) != HC_OK) {
            hc_redact_config_secrets(errstr, sizeof(errstr), cfg);
            json_array_append_new(errors, json_string(errstr));
            continue;
        }
        for (size_t i = 0; i < n; i++) {
            open++;
            lingering += hp[i].lingering;
            json_array_append_new(held,
                                  json_pack("{s:s,s:i,s:I,s:I,s:I,s:b}", "topic", topics[t],
                                            "partition", (int)hp[i].partition, "stable",
                                            (json_int_t)hp[i].stable, "end", (json_int_t)hp[i].end,
                                            "held", (json_int_t)(hp[i].end - hp[i].stable),
                                            "lingering", hp[i].lingering));
        }
        free(hp);
    }
    if (lingering > 0) {
        add_cause(causes, NULL, "transaction_lingering");
    }
    json_t *obj = json_pack("{s:I,s:I,s:I,s:o}", "timeout_ms", (json_int_t)txn_timeout_ms, "open",
                            (json_int_t)open, "lingering", (json_int_t)lingering, "held", held);
    if (json_array_size(errors) > 0) {
        json_object_set_new(obj, "errors", errors);
    } else {
        json_decref(errors);
    }
    return obj;
}

static json_t *store_json(const hc_config_t *cfg, int count, int64_t *stored, bool *ok,
                          json_t *causes)
{
    char errstr[512];
    hc_store_t *st = NULL;
    int64_t t0 = hc_now_ms();
    hc_err_t err = hc_store_open(cfg, &st, errstr, sizeof(errstr));
    int64_t t1 = hc_now_ms();
    int32_t *ids = calloc((size_t)count + 1, sizeof(*ids));
    for (int p = 0; ids && p < count; p++) {
        ids[p] = p;
    }
    if (err == HC_OK) {
        err = hc_store_read_offsets(st, cfg->group_stage2, cfg->topic_partials, ids, (size_t)count,
                                    stored, errstr, sizeof(errstr));
    }
    int64_t t2 = hc_now_ms();
    free(ids);
    json_t *obj =
        json_pack("{s:s,s:b}", "kind", st ? hc_store_kind(st) : "", "reachable", err == HC_OK);
    if (err == HC_OK) {
        json_object_set_new(obj, "open_ms", json_integer(t1 - t0));
        json_object_set_new(obj, "round_trip_ms", json_integer(t2 - t1));
    } else {
        /* printed on stdout, past hc_cli_error's safety net: a store's error may quote its URI */
        hc_redact_config_secrets(errstr, sizeof(errstr), cfg);
        json_object_set_new(obj, "error", json_string(errstr));
        add_cause(causes, NULL, "store_unreachable");
    }
    hc_store_close(st);
    *ok = err == HC_OK;
    return obj;
}

/* Seconds since the newest of the last records of topic (stage 1's last committed window: its
 * partials carry the window's close time; stage 2's last store batch: its changelog records in
 * topic.counts), or null when unknown. Informational: after an idle spell it is large and
 * nothing is wrong, so the stall cause comes from the stages' own metrics. */
static json_t *last_age(rd_kafka_t *rk, const char *topic, int timeout_ms)
{
    char errstr[256];
    int64_t ts_ms = -1;
    if (hc_topic_last_timestamp(rk, topic, timeout_ms, &ts_ms, errstr, sizeof(errstr)) != HC_OK) {
        hc_log(HC_LOG_WARN, "status", "last record of %s: %s", topic, errstr);
        return json_null();
    }
    if (ts_ms < 0) {
        return json_null();
    }
    int64_t age = hc_wall_ms() - ts_ms;
    return json_real(age > 0 ? (double)age / 1000.0 : 0.0);
}

static json_t *build_report(const hc_cli_t *cli, const status_opts_t *o)
{
    const hc_config_t *cfg = &cli->cfg;
    json_t *causes = json_array();
    json_t *report = json_object();
    char errstr[512];
    int nraw = 0, npart = 0;
    int64_t *rlow = NULL, *rhigh = NULL, *plow = NULL, *phigh = NULL;
    int64_t *committed = NULL, *stored = NULL;
    rd_kafka_t *rk = hc_kafka_new(cfg, HC_KAFKA_ROLE_READER, NULL, errstr, sizeof(errstr));
    if (!rk) {
        hc_redact_config_secrets(errstr, sizeof(errstr), cfg);
        json_object_set_new(report, "kafka",
                            json_pack("{s:b,s:s}", "reachable", 0, "error", errstr));
        add_cause(causes, NULL, "kafka_unreachable");
        goto store;
    }
    if (hc_topic_watermarks(rk, cfg->topic_raw, o->timeout_ms, &nraw, &rlow, &rhigh, errstr,
                            sizeof(errstr)) != HC_OK ||
        hc_topic_watermarks(rk, cfg->topic_partials, o->timeout_ms, &npart, &plow, &phigh, errstr,
                            sizeof(errstr)) != HC_OK) {
        json_object_set_new(report, "kafka",
                            json_pack("{s:b,s:s}", "reachable", 0, "error", errstr));
        add_cause(causes, NULL, "kafka_unreachable");
        goto store;
    }
    json_object_set_new(report, "kafka", json_pack("{s:b}", "reachable", 1));
    committed = calloc((size_t)nraw + 1, sizeof(*committed));
    json_t *s1;
    if (committed && committed_offsets(rk, cfg->group_stage1, cfg->topic_raw, nraw, o->timeout_ms,
                                       committed, errstr, sizeof(errstr)) == HC_OK) {
        s1 = stage_json(rk, "stage1", cfg->group_stage1, cfg->topic_raw, "kafka", committed, nraw,
                        rlow, rhigh, o, causes);
    } else {
        s1 = stage_json(rk, "stage1", cfg->group_stage1, cfg->topic_raw, "kafka", NULL, nraw, rlow,
                        rhigh, o, causes);
        hc_redact_config_secrets(errstr, sizeof(errstr), cfg);
        json_object_set_new(s1, "offsets_error", json_string(committed ? errstr : "no memory"));
        add_cause(causes, NULL, "kafka_unreachable");
    }
    json_object_set_new(s1, "last_window_age_seconds",
                        last_age(rk, cfg->topic_partials, o->timeout_ms));
    json_object_set_new(s1, "metrics",
                        metrics_json("stage1", "1", hc_cli_str(cli, "stage1", NULL), o, causes));
    json_object_set_new(report, "stage1", s1);

store:;
    bool store_ok = false;
    stored = calloc((size_t)npart + 1, sizeof(*stored));
    json_object_set_new(report, "store", store_json(cfg, npart, stored, &store_ok, causes));
    if (rk && phigh) {
        json_t *s2 = stage_json(rk, "stage2", cfg->group_stage2, cfg->topic_partials, "store",
                                store_ok ? stored : NULL, npart, plow, phigh, o, causes);
        json_object_set_new(s2, "last_batch_age_seconds",
                            *cfg->topic_counts ? last_age(rk, cfg->topic_counts, o->timeout_ms)
                                               : json_null());
        json_object_set_new(
            s2, "metrics", metrics_json("stage2", "2", hc_cli_str(cli, "stage2", NULL), o, causes));
        json_object_set_new(report, "stage2", s2);
        json_object_set_new(report, "dlq", dlq_json(rk, cfg, o));
        json_object_set_new(report, "transactions", transactions_json(rk, cfg, o, causes));
    }
    json_object_set_new(report, "healthy", json_boolean(json_array_size(causes) == 0));
    json_object_set_new(report, "causes", causes);
    free(rlow);
    free(rhigh);
    free(plow);
    free(phigh);
    free(committed);
    free(stored);
    hc_kafka_reader_destroy(rk);
    return report;
}

static const char *jstr(const json_t *obj, const char *key)
{
    const char *s = json_string_value(json_object_get(obj, key));
    return s ? s : "";
}

static void print_stage(const char *title, const json_t *s)
{
    if (!s) {
        return;
    }
    json_t *lag = json_object_get(s, "lag");
    printf("%s  group %s  state %s  protocol %s  lag %s", title, jstr(s, "group"), jstr(s, "state"),
           jstr(s, "protocol"), json_is_integer(lag) ? "" : "unknown");
    if (json_is_integer(lag)) {
        printf("%" JSON_INTEGER_FORMAT, json_integer_value(lag));
    }
    printf("\n");
    if (json_object_get(s, "error")) {
        printf("  error: %s\n", jstr(s, "error"));
    }
    size_t i;
    json_t *m;
    json_array_foreach(json_object_get(s, "members"), i, m)
    {
        /* the ids are the clients' own: escaped like every foreign string on a terminal */
        char id[HC_CLI_ESCAPED_SIZE(256)], client[HC_CLI_ESCAPED_SIZE(256)];
        char host[HC_CLI_ESCAPED_SIZE(256)];
        const char *iid = jstr(m, "instance_id"), *cid = jstr(m, "client_id");
        const char *h = jstr(m, "host");
        printf("  member %s  client %s  host %s  partitions",
               *iid ? hc_cli_escape(iid, strlen(iid), id, sizeof(id)) : "-",
               hc_cli_escape(cid, strlen(cid), client, sizeof(client)),
               hc_cli_escape(h, strlen(h), host, sizeof(host)));
        size_t j;
        json_t *p;
        json_array_foreach(json_object_get(m, "partitions"), j, p)
        {
            printf("%s%" JSON_INTEGER_FORMAT, j ? "," : " ", json_integer_value(p));
        }
        printf("\n");
    }
    printf("  %9s %14s %14s %10s   (%s of %s: from %s)\n", "partition", "committed", "end", "lag",
           "offsets", jstr(s, "topic"), jstr(s, "offsets_from"));
    json_array_foreach(json_object_get(s, "partitions"), i, m)
    {
        json_t *c = json_object_get(m, "committed");
        char cbuf[32] = "-";
        if (json_is_integer(c)) {
            snprintf(cbuf, sizeof(cbuf), "%" JSON_INTEGER_FORMAT, json_integer_value(c));
        }
        printf("  %9" JSON_INTEGER_FORMAT " %14s %14" JSON_INTEGER_FORMAT " %10" JSON_INTEGER_FORMAT
               "\n",
               json_integer_value(json_object_get(m, "partition")), cbuf,
               json_integer_value(json_object_get(m, "end")),
               json_integer_value(json_object_get(m, "lag")));
    }
    const char *age_key = json_object_get(s, "last_window_age_seconds") ? "last_window_age_seconds"
                                                                        : "last_batch_age_seconds";
    json_t *age = json_object_get(s, age_key);
    if (json_is_real(age)) {
        printf("  last %s %.1f s ago\n",
               strcmp(age_key, "last_window_age_seconds") == 0 ? "committed window"
                                                               : "store batch (topic.counts)",
               json_real_value(age));
    }
    json_t *mt = json_object_get(s, "metrics");
    if (json_is_object(mt) && json_is_true(json_object_get(mt, "reachable"))) {
        printf("  metrics %s: ready %s, unflushed input %.1f s, %" JSON_INTEGER_FORMAT
               " partitions assigned\n",
               jstr(mt, "address"), json_is_true(json_object_get(mt, "ready")) ? "yes" : "no",
               json_real_value(json_object_get(mt, "unflushed_input_seconds")),
               json_integer_value(json_object_get(mt, "assigned_partitions")));
        size_t si;
        json_t *sp;
        json_array_foreach(json_object_get(mt, "stalled_partitions"), si, sp)
        {
            printf("  partition %s/%" JSON_INTEGER_FORMAT
                   " stands still (partition_stalled, state %s)\n",
                   jstr(sp, "topic"), json_integer_value(json_object_get(sp, "partition")),
                   jstr(sp, "state"));
        }
    } else if (json_is_object(mt)) {
        printf("  metrics %s: unreachable (%s)\n", jstr(mt, "address"), jstr(mt, "error"));
    }
}

static void print_text(const json_t *r)
{
    json_t *causes = json_object_get(r, "causes");
    printf("hotcount status: %s",
           json_is_true(json_object_get(r, "healthy")) ? "healthy" : "DEGRADED:");
    size_t i;
    json_t *c;
    json_array_foreach(causes, i, c)
    {
        printf(" %s", json_string_value(c));
    }
    printf("\n");
    json_t *k = json_object_get(r, "kafka");
    if (!json_is_true(json_object_get(k, "reachable"))) {
        printf("kafka: unreachable (%s)\n", jstr(k, "error"));
    }
    print_stage("stage 1", json_object_get(r, "stage1"));
    print_stage("stage 2", json_object_get(r, "stage2"));
    json_t *st = json_object_get(r, "store");
    if (json_is_true(json_object_get(st, "reachable"))) {
        printf("store %s: reachable, open %" JSON_INTEGER_FORMAT
               " ms, round trip %" JSON_INTEGER_FORMAT " ms\n",
               jstr(st, "kind"), json_integer_value(json_object_get(st, "open_ms")),
               json_integer_value(json_object_get(st, "round_trip_ms")));
    } else {
        printf("store: unreachable (%s)\n", jstr(st, "error"));
    }
    json_t *tx = json_object_get(r, "transactions");
    if (tx) {
        json_int_t open = json_integer_value(json_object_get(tx, "open"));
        printf("transactions: %" JSON_INTEGER_FORMAT " partition%s held open, %" JSON_INTEGER_FORMAT
               " lingering (held past transaction.timeout.ms=%" JSON_INTEGER_FORMAT ")\n",
               open, open == 1 ? "" : "s", json_integer_value(json_object_get(tx, "lingering")),
               json_integer_value(json_object_get(tx, "timeout_ms")));
        size_t j;
        json_t *h;
        json_array_foreach(json_object_get(tx, "held"), j, h)
        {
            printf("  %s/%" JSON_INTEGER_FORMAT "  stable %" JSON_INTEGER_FORMAT
                   "  end %" JSON_INTEGER_FORMAT "%s\n",
                   jstr(h, "topic"), json_integer_value(json_object_get(h, "partition")),
                   json_integer_value(json_object_get(h, "stable")),
                   json_integer_value(json_object_get(h, "end")),
                   json_is_true(json_object_get(h, "lingering")) ? "  LINGERING" : "");
        }
        json_array_foreach(json_object_get(tx, "errors"), j, h)
        {
            printf("  unknown: %s\n", json_string_value(h));
        }
    }
    json_t *d = json_object_get(r, "dlq");
    if (d) {
        printf("dead letters in %s: %" JSON_INTEGER_FORMAT "%s", jstr(d, "topic"),
               json_integer_value(json_object_get(d, "records")),
               json_is_true(json_object_get(d, "partial")) ? " (newest only)" : "");
        const char *reason;
        json_t *n;
        json_object_foreach(json_object_get(d, "by_reason"), reason, n)
        {
            printf("  %s=%" JSON_INTEGER_FORMAT, reason, json_integer_value(n));
        }
        printf("\n");
    }
}

int hc_cmd_status(int argc, char **argv)
{
    hc_cli_t cli;
    int status = hc_cli_parse(&cli, &status_cmd, argc, argv);
    if (status >= 0) {
        return status;
    }
    uint64_t max_lag, dlq_scan, timeout;
    double max_age;
    if (!hc_cli_u64(&cli, "max-lag", 100000, &max_lag) ||
        !hc_cli_u64(&cli, "dlq-scan", 10000, &dlq_scan) ||
        !hc_cli_u64(&cli, "timeout", 10, &timeout) ||
        !hc_cli_double(&cli, "max-age", 30, &max_age)) {
        hc_cli_fini(&cli);
        return HC_EXIT_USAGE;
    }
    if (timeout == 0 || timeout > 3600 || max_age < 0 || max_lag > INT64_MAX ||
        dlq_scan > INT64_MAX) {
        hc_cli_error(&cli, "--timeout must be within 1..3600 and --max-age >= 0");
        hc_cli_fini(&cli);
        return HC_EXIT_USAGE;
    }
    status_opts_t o = {(int64_t)max_lag, max_age, (int64_t)dlq_scan, (int)timeout * 1000};
    json_t *report = build_report(&cli, &o);
    if (hc_cli_has(&cli, "json")) {
        char *s = json_dumps(report, JSON_COMPACT | JSON_PRESERVE_ORDER);
        if (s) {
            printf("%s\n", s);
        }
        free(s);
    } else {
        print_text(report);
    }
    status = json_is_true(json_object_get(report, "healthy")) ? HC_EXIT_OK : HC_EXIT_FAILED;
    json_decref(report);
    hc_cli_fini(&cli);
    return status;
}
