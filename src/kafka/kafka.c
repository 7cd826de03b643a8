#include "hotcount/kafka.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hotcount/clock.h"
#include "hotcount/log.h"
#include "hotcount/redact.h"

/* librdkafka's defaults, so that a default (sasl.mechanisms=GSSAPI) is not mistaken for a
 * secret the user set and blanked out of every line. */
static const char **default_dump;
static size_t default_dump_count;
static pthread_once_t default_dump_once = PTHREAD_ONCE_INIT;

static void load_default_dump(void)
{
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    default_dump = rd_kafka_conf_dump(conf, &default_dump_count);
    rd_kafka_conf_destroy(conf);
}

static bool is_default(const char *name, const char *value)
{
    pthread_once(&default_dump_once, load_default_dump);
    for (size_t i = 0; i + 1 < default_dump_count; i += 2) {
        if (strcmp(default_dump[i], name) == 0) {
            return strcmp(default_dump[i + 1], value) == 0;
        }
    }
    return false;
}

/* librdkafka quotes property values in its log lines and errors ("`sasl.mechanism` set to
 * `...`"): every secret value the client was built with (hotcount/redact.h) is blanked out. The
 * client's own configuration is the list, so this holds for any client on any thread. */
static void scrub_conf_secrets(const rd_kafka_conf_t *conf, char *text, size_t text_size)
{
    size_t count = 0;
    const char **dump = rd_kafka_conf_dump((rd_kafka_conf_t *)conf, &count);
    for (size_t i = 0; dump && i + 1 < count; i += 2) {
        if (dump[i + 1][0] != '\0' && hc_redact_is_secret_key(dump[i]) &&
            !is_default(dump[i], dump[i + 1])) {
            hc_redact_secret_in(text, text_size, dump[i + 1]);
        }
    }
    if (dump) {
        rd_kafka_conf_dump_free(dump, count);
    }
}

static void scrub_client_secrets(const rd_kafka_t *rk, char *text, size_t text_size)
{
    scrub_conf_secrets(rd_kafka_conf((rd_kafka_t *)rk), text, text_size);
}

static void record_auth_failure(int err, const char *reason);

/* The kind of a broker failure ("FAIL") that is an authentication or TLS handshake failure,
 * from librdkafka's own sentences (rd_kafka_broker_fail's callers in rdkafka_broker.c,
 * rdkafka_request.c, rdkafka_ssl.c, rdkafka_transport.c of 2.14.2), or 0. The same failure
 * reaches error_cb with its code, but only in a client whose main queue is polled: a command's
 * admin client or reader is not, so the log line is the one place every client reports it.
 * Should librdkafka reword them, the commands lose the sentence (tests/integration/tls.sh
 * fails), the stages keep it through error_cb. */
static int auth_failure_kind(const char *fac, const char *buf)
{
    const char *msg = strcmp(fac, "FAIL") == 0 ? strstr(buf, ": ") : NULL;
    if (!msg) {
        return 0;
    }
    if (strstr(msg, "SSL handshake failed") || strstr(msg, "verify broker certificate") ||
        strstr(msg, "did not provide a certificate")) {
        return RD_KAFKA_RESP_ERR__SSL;
    }
    return strstr(msg, "SASL ") ? RD_KAFKA_RESP_ERR__AUTHENTICATION : 0;
}

static void log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
    int auth = level <= 3 ? auth_failure_kind(fac, buf) : 0;
    if (auth) {
        /* "[thrd:<broker>]: <broker>: <failure>": the reason as error_cb has it */
        const char *from = strncmp(buf, "[thrd:", 6) == 0 ? strstr(buf, "]: ") : NULL;
        char reason[HC_LOG_LINE_MAX];
        snprintf(reason, sizeof(reason), "%s", from ? from + 3 : buf);
        scrub_client_secrets(rk, reason, sizeof(reason));
        record_auth_failure(auth, reason);
    }
    /* syslog levels: 0-3 error, 4 warning, 5-6 notice/info, 7 debug */
    hc_log_level_t lvl = level <= 3   ? HC_LOG_ERROR
                         : level == 4 ? HC_LOG_WARN
                         : level <= 6 ? HC_LOG_INFO
                                      : HC_LOG_DEBUG;
    if (!hc_log_enabled(lvl)) {
        return;
    }
    char line[HC_LOG_LINE_MAX];
    snprintf(line, sizeof(line), "%s: %s", fac, buf);
    scrub_client_secrets(rk, line, sizeof(line));
    hc_log(lvl, "rdkafka", "%s", line);
}

/* The last authentication or TLS handshake failure any client of this process reported, and
 * how many so far (hc_kafka_auth_failures). One record per process: its clients share one
 * configuration, hence one set of brokers, credentials and CA. */
static pthread_mutex_t auth_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t auth_count;
static char auth_text[HC_LOG_LINE_MAX];

/* "sasl_ssl://127.0.0.1:9093/1: SASL authentication error: ..." -> the broker and the rest. */
static void record_auth_failure(int err, const char *reason)
{
    const char *sep = strstr(reason, ": ");
    int broker_len = sep ? (int)(sep - reason) : (int)strlen(reason);
    const char *detail = sep ? sep + 2 : "";
    const char *cause =
        err == RD_KAFKA_RESP_ERR__SSL ? "TLS handshake failed" : "authentication failed";
    pthread_mutex_lock(&auth_lock);
    snprintf(auth_text, sizeof(auth_text), "Kafka broker %.*s: %s: %s", broker_len, reason, cause,
             detail);
    auth_count++;
    pthread_mutex_unlock(&auth_lock);
}

uint64_t hc_kafka_auth_failures(char *errstr, size_t errstr_size)
{
    pthread_mutex_lock(&auth_lock);
    uint64_t n = auth_count;
    if (n > 0) {
        hc_errstr_set(errstr, errstr_size, "%s", auth_text);
    }
    pthread_mutex_unlock(&auth_lock);
    return n;
}

/* Errors arriving through error_cb are mostly transient (broker down, transport): librdkafka
 * retries them itself. Fatal ones are picked up by hc_kafka_fatal_check in the stage loops.
 * Authentication and TLS handshake failures are retried too (a broker's certificate can be
 * renewed, a SCRAM credential can reach a broker late), but they are recorded for the commands
 * and stages to name (hc_kafka_auth_failures), the secrets blanked out as on every line. */
static void error_cb(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
    (void)opaque;
    char line[HC_LOG_LINE_MAX];
    bool auth = err == RD_KAFKA_RESP_ERR__AUTHENTICATION || err == RD_KAFKA_RESP_ERR__SSL;
    if (auth) {
        snprintf(line, sizeof(line), "%s", reason);
        scrub_client_secrets(rk, line, sizeof(line));
        record_auth_failure(err, line);
    }
    snprintf(line, sizeof(line), "%s: %s: %s", rd_kafka_name(rk),
             rd_kafka_err2name((rd_kafka_resp_err_t)err), reason);
    scrub_client_secrets(rk, line, sizeof(line));
    hc_log(err == RD_KAFKA_RESP_ERR__FATAL || auth ? HC_LOG_ERROR : HC_LOG_WARN, "rdkafka", "%s",
           line);
}

typedef struct prop {
    const char *name;
    const char *value;
} prop_t;

static bool conf_set(rd_kafka_conf_t *conf, const char *shown, const char *name, const char *value,
                     char *errstr, size_t errstr_size)
{
    char rderr[512];
    if (rd_kafka_conf_set(conf, name, value, rderr, sizeof(rderr)) != RD_KAFKA_CONF_OK) {
        /* librdkafka quotes the value it refuses */
        if (hc_redact_is_secret_key(name)) {
            hc_redact_secret_in(rderr, sizeof(rderr), value);
        }
        hc_errstr_set(errstr, errstr_size, "%s: %s", shown, rderr);
        return false;
    }
    return true;
}

/* hotcount's settings per role; the user's kafka.* props are applied after them. */
static const prop_t stage1_consumer_props[] = {
    /* offsets travel inside stage 1's transaction, never through the consumer */
    {"enable.auto.commit", "false"},
    {"enable.auto.offset.store", "false"},
    {"auto.offset.reset", "earliest"},
    /* Eager under the classic protocol. Chosen on 2.0.2, where cooperative-sticky could resume
     * from stale positions (#4636, fixed 2.4.0) and lose an assignment to a commit during a
     * rebalance (#4059, fixed 2.10.0). On 2.14 that reason is gone; range stays because it is
     * the classic configuration the fault suite covers, and incremental rebalancing is
     * group.protocol=consumer's (KIP-848), where the broker assigns and this is not set
     * (docs/RELIABILITY.md, "The librdkafka 2.0.2 workarounds on 2.14.2"). */
    {"partition.assignment.strategy", "range"},
    {"isolation.level", "read_committed"},
    /* consumer lag per partition for the metrics endpoint */
    {"statistics.interval.ms", "5000"},
    /* the fetch reaching a partition's end is what the progress check calls caught up
     * (hotcount/progress.h; the stage loop takes the EOF events, the stages never see them) */
    {"enable.partition.eof", "true"},
    /* The pre-fetch queue is bounded by bytes (queued.max.messages.kbytes, 64 MiB), not by
     * count: the count is of the whole assignment's queue (each partition's fetch queue is
     * forwarded to the consumer's, and rd_kafka_q_len follows the forward), and crossing it
     * stops fetching for fetch.queue.backoff.ms, 1000 by default: a fixed second in 2.0.2, the
     * same default in 2.14.2. Stage 1 lets the queue fill while it commits a window, so at the
     * default (100 000) it fetched about 200 000 events a second whatever its speed; still
     * needed on 2.14.2 (docs/RELIABILITY.md has the A/B). Stage 2 keeps the default: a third as
     * many messages, and its memory is per live key. */
    {"queued.min.messages", "10000000"}, /* librdkafka's maximum */
    /* The byte bound, 16 MiB instead of librdkafka's 64: queued messages cost about 4 times
     * their bytes in RSS (an op and a message header each, 130-byte events), so 64 MiB was
     * 200-250 MB of stage 1's peak whatever max.keys said. Crossing it backs a partition off
     * for fetch.queue.backoff.ms, 10 ms here instead of 1000, so a queue that stage 1 drained
     * is refilled at once (at 16 MiB and 1000 ms it lost 40 % of its sustained rate in 2
     * pairs). 6 interleaved pairs against 64 MiB on a loaded machine (2026-12-01): stage 1's
     * peak RSS 0.52-0.71x, sustained rate 0.56-3.6x (median 0.94), CPU per event 0.71-1.15x
     * (median 1.0): within that machine's noise (docs/OPERATIONS.md "Memory"). */
    {"queued.max.messages.kbytes", "16384"},
    {"fetch.queue.backoff.ms", "10"},
    {NULL, NULL},
};

#ifdef HC_MUTANT_READ_UNCOMMITTED
#define STAGE2_ISOLATION "read_uncommitted" /* mutant build (tests/faults/mutants.sh) */
#else
#define STAGE2_ISOLATION "read_committed"
#endif

static const prop_t stage2_consumer_props[] = {
    /* offsets live in the store, in the same atomic step as the counts */
    {"enable.auto.commit", "false"},
    {"enable.auto.offset.store", "false"},
    {"auto.offset.reset", "earliest"},
    {"partition.assignment.strategy", "range"},
    /* only committed stage-1 transactions: an aborted window's partials are never counted */
    {"isolation.level", STAGE2_ISOLATION},
    {"statistics.interval.ms", "5000"},
    {"enable.partition.eof", "true"}, /* as stage 1's: the progress check */
    {NULL, NULL},
};

static const prop_t reader_props[] = {
    {"enable.auto.commit", "false"},
    {"enable.auto.offset.store", "false"},
    {"isolation.level", "read_committed"},
    {"enable.partition.eof", "true"},
    {NULL, NULL},
};

/* transaction.timeout.ms and message.timeout.ms come from cfg->timeouts (kafka_new), where
 * they are derived and checked against flush.ms and the watchdog. */
static const prop_t txn_producer_props[] = {
    {"linger.ms", "5"},
    {NULL, NULL},
};

static const prop_t producer_props[] = {
    {"enable.idempotence", "true"},
    {"linger.ms", "5"},
    {"batch.num.messages", "10000"},
    {"queue.buffering.max.messages", "1000000"},
    {NULL, NULL},
};

static const prop_t *role_props(hc_kafka_role_t role)
{
    switch (role) {
    case HC_KAFKA_ROLE_STAGE1_CONSUMER:
        return stage1_consumer_props;
    case HC_KAFKA_ROLE_STAGE2_CONSUMER:
        return stage2_consumer_props;
    case HC_KAFKA_ROLE_TXN_PRODUCER:
        return txn_producer_props;
    case HC_KAFKA_ROLE_PRODUCER:
        return producer_props;
    case HC_KAFKA_ROLE_READER:
        return reader_props;
    case HC_KAFKA_ROLE_ADMIN:
        break;
    }
    static const prop_t none[] = {{NULL, NULL}};
    return none;
}

static bool role_is_consumer(hc_kafka_role_t role)
{
    return role == HC_KAFKA_ROLE_STAGE1_CONSUMER || role == HC_KAFKA_ROLE_STAGE2_CONSUMER ||
           role == HC_KAFKA_ROLE_READER;
}

/* ---- which kind of client reads a property: librdkafka's own table ---- */

typedef struct prop_kind {
    char *name; /* owned */
    char kind;  /* 'C' consumer, 'P' producer, '*' both */
} prop_kind_t;

static prop_kind_t *prop_kinds; /* loaded once, kept for the process */
static size_t prop_kind_count;
static pthread_once_t prop_kinds_once = PTHREAD_ONCE_INIT;

/* Parses rd_kafka_conf_properties_show's tables ("name | C/P | range | ..."), so that the kind
 * of every property, aliases included, is librdkafka's and not a copy of it. */
static void load_prop_kinds(void)
{
    char *text = NULL;
    size_t len = 0;
    FILE *fp = open_memstream(&text, &len);
    if (!fp) {
        return;
    }
    rd_kafka_conf_properties_show(fp);
    fclose(fp);
    size_t lines = 1;
    for (size_t i = 0; i < len; i++) {
        lines += text[i] == '\n';
    }
    prop_kinds = calloc(lines, sizeof(*prop_kinds));
    for (char *line = text, *next; prop_kinds && line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) {
            *next++ = '\0';
        }
        size_t name_len = strcspn(line, " |");
        char *bar = strchr(line, '|');
        if (name_len == 0 || !bar) {
            continue;
        }
        char *kind = bar + 1 + strspn(bar + 1, " ");
        if ((kind[0] != 'C' && kind[0] != 'P' && kind[0] != '*') ||
            (kind[1] != ' ' && kind[1] != '|')) {
            continue;
        }
        char *name = strndup(line, name_len);
        if (!name) {
            break;
        }
        prop_kinds[prop_kind_count].name = name;
        prop_kinds[prop_kind_count].kind = kind[0];
        prop_kind_count++;
    }
    free(text);
}

/* 'C', 'P', '*', or '?' for a name librdkafka does not know (it says so when the client is
 * created). */
static char prop_kind(const char *name)
{
    pthread_once(&prop_kinds_once, load_prop_kinds);
    for (size_t i = 0; i < prop_kind_count; i++) {
        if (strcmp(prop_kinds[i].name, name) == 0) {
            return prop_kinds[i].kind;
        }
    }
    return '?';
}

/* ---- settings exactly-once depends on: hotcount's, never the user's ---- */

typedef struct owned_prop {
    const char *name;
    const char *same[4]; /* values that say what hotcount sets anyway (accepted), NULL-ended */
    const char *why;
} owned_prop_t;

/* A kafka.* override of any of these exits 2 (hc_kafka_check_overrides). Everything else is
 * tuning (timeouts, batching, fetch sizes, security) and stays the operator's; the timeouts
 * are checked together in hc_timeouts_derive. Left tunable on purpose: bootstrap.servers and
 * client.id (names, not semantics), group.instance.id (static membership keeps a restarted
 * replica's partitions; fencing stays the transactional id's), session.timeout.ms and
 * max.poll.interval.ms (the latter checked against the longest blocking call),
 * statistics.interval.ms (0 only stops the lag metrics), queued.min.messages, partitioner (a
 * post split over partials partitions is still counted once per partial). */
static const owned_prop_t owned_props[] = {
    {"isolation.level",
     {"read_committed", NULL},
     "stage 2 must never count the partials of an aborted stage-1 window, and stage 1 must not "
     "count raw events of aborted transactions"},
    {"enable.auto.commit",
     {"false", NULL},
     "stage 1's offsets commit inside its transaction and stage 2's live in the store; an "
     "automatic commit would move the group past windows not yet counted"},
    {"auto.commit.enable", /* librdkafka's legacy alias of enable.auto.commit */
     {"false", NULL},
     "stage 1's offsets commit inside its transaction and stage 2's live in the store; an "
     "automatic commit would move the group past windows not yet counted"},
    {"enable.auto.offset.store",
     {"false", NULL},
     "offsets are stored only with the window that counted them"},
    {"offset.store.method",
     {"broker", NULL},
     "stage 1's transaction commits its offsets to the group on the broker, where its rewind "
     "reads them"},
    {"auto.offset.reset",
     {"earliest", "smallest", "beginning", NULL},
     "a partition with no committed offset (a new group, offsets past retention) must be read "
     "from its first record, or the records before are never counted"},
    {"transactional.id",
     {NULL},
     "stage 1's transactional id is <group.stage1>-<instance.id>, which fences the previous "
     "incarnation of the same replica; set instance.id instead"},
    {"enable.idempotence",
     {"true", NULL},
     "the transactional producer requires it, and producers keep retries out of the log with "
     "it (exactly once is once per record in the log)"},
    {"acks", {"all", "-1", NULL}, "idempotent and transactional producers need acks=all"},
    {"request.required.acks",
     {"all", "-1", NULL},
     "idempotent and transactional producers need "
     "acks=all"},
    {"partition.assignment.strategy",
     {"range", "roundrobin", NULL},
     "under group.protocol=classic the stages use an eager assignor (cooperative-sticky is not "
     "tested with them); for incremental rebalancing set group.protocol=consumer"},
    {"group.id",
     {NULL},
     "the stages' groups are group.stage1 and group.stage2 (stage 2's stored offsets are keyed "
     "by its group); set those instead"},
    {"group.protocol.type", {"consumer", NULL}, "the stages are members of a consumer group"},
    {"enable.partition.eof",
     {NULL},
     "hotcount's topic reads (verify, the changelog repair) end at the end of each partition, "
     "and the stage loops' progress check takes the end-of-partition events as the sign that "
     "a partition is caught up"},
    {"delivery.report.only.error",
     {"false", NULL},
     "the changelog and the load generator count delivered records from their delivery "
     "reports"},
    /* What every idempotent producer (stage 1's transactional one, and stage 2's dead-letter
     * producer, which is idempotent but not transactional) needs. librdkafka refuses all but
     * gapless only when it builds the client, and stage 2 builds its dead-letter producer at
     * its first bad partial: the stage would stop on that record, past --check-config. */
    {"max.in.flight.requests.per.connection",
     {NULL},
     "an idempotent producer keeps its order and its no-duplicates guarantee with at most 5 "
     "requests in flight (stage 2's dead letters, stage 1's transactions)"},
    {"max.in.flight", /* librdkafka's alias of max.in.flight.requests.per.connection */
     {NULL},
     "an idempotent producer keeps its order and its no-duplicates guarantee with at most 5 "
     "requests in flight (stage 2's dead letters, stage 1's transactions)"},
    {"retries",
     {NULL},
     "an idempotent producer needs retries >= 1: stage 2's dead letters and stage 1's "
     "transactions ride out a broker outage by retrying"},
    {"message.send.max.retries", /* librdkafka's alias of retries */
     {NULL},
     "an idempotent producer needs retries >= 1: stage 2's dead letters and stage 1's "
     "transactions ride out a broker outage by retrying"},
    {"queuing.strategy",
     {"fifo", NULL},
     "an idempotent producer sends in order (fifo); records out of order break its sequence "
     "numbers"},
    {"enable.gapless.guarantee",
     {"false", NULL},
     "with it, a delivery an idempotent producer fails during a broker outage is a fatal "
     "error that stops the producer for good; stage 2 sends a dead letter again until it lands "
     "(at least once, never lost)"},
};

#define OWNED_PROP_COUNT (sizeof(owned_props) / sizeof(owned_props[0]))

/* Owned properties whose safe values are a range of integers, accepted beside owned_props'
 * same values. */
static const struct {
    const char *name;
    long long lo, hi;
} owned_ranges[] = {
    {"max.in.flight.requests.per.connection", 1, 5},
    {"max.in.flight", 1, 5},
    {"retries", 1, INT32_MAX},
    {"message.send.max.retries", 1, INT32_MAX},
};

static bool in_owned_range(const char *name, const char *value)
{
    for (size_t r = 0; r < sizeof(owned_ranges) / sizeof(owned_ranges[0]); r++) {
        if (strcmp(owned_ranges[r].name, name) == 0) {
            char *end = NULL;
            errno = 0;
            long long n = strtoll(value, &end, 10);
            return errno == 0 && end != value && *end == '\0' && n >= owned_ranges[r].lo &&
                   n <= owned_ranges[r].hi;
        }
    }
    return false;
}

static const char *const scope_prefix[] = {"kafka.", "kafka.consumer.", "kafka.producer."};

bool hc_kafka_group_protocol_is_consumer(const hc_config_t *cfg)
{
    return cfg->group_protocol && strcmp(cfg->group_protocol, "consumer") == 0;
}

/* The group settings that group.protocol and group.static decide. Under the consumer protocol
 * (KIP-848) the broker assigns and times sessions out (group.consumer.* on the broker), and
 * librdkafka refuses the classic protocol's own settings when it builds the consumer: refused
 * here first, with the key named, so --check-config says it too. */
static hc_err_t check_group_overrides(const hc_config_t *cfg, char *errstr, size_t errstr_size)
{
    static const char *const classic_only[] = {"session.timeout.ms", "heartbeat.interval.ms",
                                               "partition.assignment.strategy",
                                               "group.protocol.type"};
    bool consumer = hc_kafka_group_protocol_is_consumer(cfg);
    for (size_t i = 0; i < cfg->kafka_prop_count; i++) {
        const hc_kafka_prop_t *kp = &cfg->kafka_props[i];
        const char *prefix = scope_prefix[kp->scope];
        if (strcmp(kp->name, "group.protocol") == 0) {
            hc_errstr_set(errstr, errstr_size,
                          "%sgroup.protocol: set the key group.protocol (classic or consumer) "
                          "instead; hotcount's rebalance code follows it",
                          prefix);
            return HC_ERR_INVALID;
        }
        if (cfg->group_static && strcmp(kp->name, "group.instance.id") == 0) {
            hc_errstr_set(errstr, errstr_size,
                          "%sgroup.instance.id: group.static=1 sets it to each stage's "
                          "instance.id; set one or the other",
                          prefix);
            return HC_ERR_INVALID;
        }
        for (size_t c = 0; consumer && c < sizeof(classic_only) / sizeof(classic_only[0]); c++) {
            if (strcmp(kp->name, classic_only[c]) == 0) {
                hc_errstr_set(errstr, errstr_size,
                              "%s%s: not with group.protocol=consumer, where the broker's "
                              "group.consumer.* settings rule (librdkafka refuses it)",
                              prefix, kp->name);
                return HC_ERR_INVALID;
            }
        }
    }
    return HC_OK;
}

hc_err_t hc_kafka_check_overrides(const hc_config_t *cfg, char *errstr, size_t errstr_size)
{
    if (check_group_overrides(cfg, errstr, errstr_size) != HC_OK) {
        return HC_ERR_INVALID;
    }
    for (size_t i = 0; i < cfg->kafka_prop_count; i++) {
        const hc_kafka_prop_t *kp = &cfg->kafka_props[i];
        const char *prefix = scope_prefix[kp->scope];
        for (size_t o = 0; o < OWNED_PROP_COUNT; o++) {
            const owned_prop_t *op = &owned_props[o];
            if (strcmp(op->name, kp->name) != 0) {
                continue;
            }
            bool same = false;
            for (size_t v = 0; op->same[v]; v++) {
                same = same || strcmp(op->same[v], kp->value) == 0;
            }
            same = same || in_owned_range(kp->name, kp->value);
            if (!same) {
                char shown[128];
                hc_redact_kv(kp->name, kp->value, shown, sizeof(shown));
                hc_errstr_set(errstr, errstr_size,
                              "%s%s=%s: hotcount sets %s itself and exactly-once depends on it: "
                              "%s",
                              prefix, kp->name, shown, kp->name, op->why);
                return HC_ERR_INVALID;
            }
        }
        /* A property given to the one kind of client that ignores it does nothing but make
         * librdkafka warn at every start: a mistake, not a setting. */
        char kind = prop_kind(kp->name);
        if ((kp->scope == HC_KAFKA_CONSUMER && kind == 'P') ||
            (kp->scope == HC_KAFKA_PRODUCER && kind == 'C')) {
            hc_errstr_set(errstr, errstr_size,
                          "%s%s: %s is a %s property; set it as kafka.%s%s (or kafka.%s, which "
                          "goes to the clients that read it)",
                          prefix, kp->name, kp->name, kind == 'P' ? "producer" : "consumer",
                          kind == 'P' ? "producer." : "consumer.", kp->name, kp->name);
            return HC_ERR_INVALID;
        }
    }
    return HC_OK;
}

/* kafka.<prop> goes to the clients that read <prop> only, so librdkafka has no reason to warn
 * (CONFWARN) about a consumer property handed to a producer or the reverse. */
static bool apply_user_props(rd_kafka_conf_t *conf, const hc_config_t *cfg, hc_kafka_scope_t scope,
                             bool consumer, char *errstr, size_t errstr_size)
{
    for (size_t i = 0; i < cfg->kafka_prop_count; i++) {
        const hc_kafka_prop_t *kp = &cfg->kafka_props[i];
        if (kp->scope != scope) {
            continue;
        }
        if (scope == HC_KAFKA_ALL) {
            char kind = prop_kind(kp->name);
            if ((consumer && kind == 'P') || (!consumer && kind == 'C')) {
                continue;
            }
        }
        char shown[300];
        snprintf(shown, sizeof(shown), "%s%s", scope_prefix[scope], kp->name);
        if (!conf_set(conf, shown, kp->name, kp->value, errstr, errstr_size)) {
            return false;
        }
    }
    return true;
}

/* offline: no bootstrap servers, so the client is built and checked but never connects. */
static rd_kafka_t *kafka_new(const hc_config_t *cfg, hc_kafka_role_t role,
                             const hc_kafka_opts_t *opts, bool offline, char *errstr,
                             size_t errstr_size)
{
    static const hc_kafka_opts_t no_opts = {0};
    if (!opts) {
        opts = &no_opts;
    }
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_conf_set_log_cb(conf, log_cb);
    rd_kafka_conf_set_error_cb(conf, error_cb);
    if (!conf_set(conf, "brokers", "bootstrap.servers", cfg->brokers, errstr, errstr_size)) {
        goto fail_conf;
    }
    char client_id[256];
    snprintf(client_id, sizeof(client_id), "hotcount-%s", cfg->instance_id);
    if (!conf_set(conf, "instance.id", "client.id", client_id, errstr, errstr_size)) {
        goto fail_conf;
    }
    bool stage_consumer =
        role == HC_KAFKA_ROLE_STAGE1_CONSUMER || role == HC_KAFKA_ROLE_STAGE2_CONSUMER;
    bool next_gen = stage_consumer && hc_kafka_group_protocol_is_consumer(cfg);
    for (const prop_t *p = role_props(role); p->name; p++) {
        /* the broker assigns under KIP-848, and librdkafka refuses an assignor set at all */
        if (next_gen && strcmp(p->name, "partition.assignment.strategy") == 0) {
            continue;
        }
        /* librdkafka before 2.2.0 (Debian 12's 2.0.2, HC_DEPS=system) has no such property and
         * backs off a fixed second */
        if (strcmp(p->name, "fetch.queue.backoff.ms") == 0 && prop_kind(p->name) == '?') {
            continue;
        }
        if (!conf_set(conf, p->name, p->name, p->value, errstr, errstr_size)) {
            goto fail_conf;
        }
    }
    if (next_gen &&
        !conf_set(conf, "group.protocol", "group.protocol", "consumer", errstr, errstr_size)) {
        goto fail_conf;
    }
    if (stage_consumer && opts->group_instance_id &&
        !conf_set(conf, "group.static", "group.instance.id", opts->group_instance_id, errstr,
                  errstr_size)) {
        goto fail_conf;
    }
    if (role == HC_KAFKA_ROLE_TXN_PRODUCER) {
        /* derived once (hotcount/timeouts.h): a user's kafka.producer.* values are in them */
        hc_timeouts_t scratch;
        const hc_timeouts_t *t = hc_timeouts_of(cfg, &scratch);
        char txn_ms[32];
        char msg_ms[32];
        snprintf(txn_ms, sizeof(txn_ms), "%" PRId64, t->txn_timeout_ms);
        snprintf(msg_ms, sizeof(msg_ms), "%" PRId64, t->message_timeout_ms);
        if (!conf_set(conf, "transaction.timeout.ms", "transaction.timeout.ms", txn_ms, errstr,
                      errstr_size) ||
            !conf_set(conf, "message.timeout.ms", "message.timeout.ms", msg_ms, errstr,
                      errstr_size)) {
            goto fail_conf;
        }
    }
    /* librdkafka's consumer API (assign, poll) needs a group id even when it never joins or
     * commits, as a reader doesn't. */
    char reader_group[300];
    const char *group_id = opts->group_id;
    if (!group_id && role == HC_KAFKA_ROLE_READER) {
        snprintf(reader_group, sizeof(reader_group), "hotcount-reader-%s", cfg->instance_id);
        group_id = reader_group;
    }
    if (group_id && !conf_set(conf, "group.id", "group.id", group_id, errstr, errstr_size)) {
        goto fail_conf;
    }
    if (opts->transactional_id && !conf_set(conf, "instance.id", "transactional.id",
                                            opts->transactional_id, errstr, errstr_size)) {
        goto fail_conf;
    }
    bool consumer = role_is_consumer(role);
    if (hc_kafka_check_overrides(cfg, errstr, errstr_size) != HC_OK ||
        !apply_user_props(conf, cfg, HC_KAFKA_ALL, consumer, errstr, errstr_size) ||
        !apply_user_props(conf, cfg, consumer ? HC_KAFKA_CONSUMER : HC_KAFKA_PRODUCER, consumer,
                          errstr, errstr_size)) {
        goto fail_conf;
    }
    if (opts->rebalance_cb) {
        rd_kafka_conf_set_rebalance_cb(conf, opts->rebalance_cb);
    }
    if (opts->dr_msg_cb) {
        rd_kafka_conf_set_dr_msg_cb(conf, opts->dr_msg_cb);
    }
    if (opts->stats_cb) {
        rd_kafka_conf_set_stats_cb(conf, opts->stats_cb);
    }
    rd_kafka_conf_set_opaque(conf, opts->opaque);
    if (offline && !conf_set(conf, "brokers", "bootstrap.servers", "", errstr, errstr_size)) {
        goto fail_conf;
    }

    char rderr[512];
    rd_kafka_t *rk =
        rd_kafka_new(consumer ? RD_KAFKA_CONSUMER : RD_KAFKA_PRODUCER, conf, rderr, sizeof(rderr));
    if (!rk) {
        scrub_conf_secrets(conf, rderr, sizeof(rderr));
        hc_errstr_set(errstr, errstr_size, "kafka client: %s", rderr);
        goto fail_conf;
    }
    if (consumer && !opts->own_main_queue) {
        rd_kafka_poll_set_consumer(rk);
    }
    return rk;

fail_conf:
    rd_kafka_conf_destroy(conf);
    return NULL;
}

rd_kafka_t *hc_kafka_new(const hc_config_t *cfg, hc_kafka_role_t role, const hc_kafka_opts_t *opts,
                         char *errstr, size_t errstr_size)
{
    return kafka_new(cfg, role, opts, false, errstr, errstr_size);
}

hc_err_t hc_kafka_check(const hc_config_t *cfg, const hc_kafka_role_t *roles, size_t count,
                        char *errstr, size_t errstr_size)
{
    for (size_t i = 0; i < count; i++) {
        /* ids as the stages set them, so transactional checks run too; a group id only for the
         * consumers (a producer would warn that it ignores it) */
        char txn_id[600];
        snprintf(txn_id, sizeof(txn_id), "%s-%s", cfg->group_stage1, cfg->instance_id);
        hc_kafka_opts_t opts = {
            .group_id = roles[i] == HC_KAFKA_ROLE_STAGE2_CONSUMER   ? cfg->group_stage2
                        : roles[i] == HC_KAFKA_ROLE_STAGE1_CONSUMER ? cfg->group_stage1
                                                                    : NULL,
            .transactional_id = roles[i] == HC_KAFKA_ROLE_TXN_PRODUCER ? txn_id : NULL,
            .group_instance_id = cfg->group_static ? cfg->instance_id : NULL};
        rd_kafka_t *rk = kafka_new(cfg, roles[i], &opts, true, errstr, errstr_size);
        if (!rk) {
            return HC_ERR_INVALID;
        }
        rd_kafka_destroy(rk);
    }
    return HC_OK;
}

hc_err_t hc_kafka_error_take(rd_kafka_error_t *error, char *errstr, size_t errstr_size)
{
    if (!error) {
        return HC_OK;
    }
    hc_err_t err;
    if (rd_kafka_error_is_fatal(error)) {
        err = HC_ERR_FATAL;
    } else if (rd_kafka_error_txn_requires_abort(error)) {
        err = HC_ERR_ABORT;
    } else if (rd_kafka_error_is_retriable(error)) {
        err = HC_ERR_TRANSIENT;
    } else {
        /* librdkafka's transaction docs: an error with none of the flags is to be treated
         * as fatal */
        err = HC_ERR_FATAL;
    }
    hc_errstr_set(errstr, errstr_size, "%s: %s", rd_kafka_error_name(error),
                  rd_kafka_error_string(error));
    rd_kafka_error_destroy(error);
    return err;
}

int64_t hc_kafka_max_message_bytes(rd_kafka_t *rk)
{
    char buf[32];
    size_t size = sizeof(buf);
    char *end;
    long long v;

    if (rd_kafka_conf_get(rd_kafka_conf(rk), "message.max.bytes", buf, &size) != RD_KAFKA_CONF_OK) {
        return 1000000; /* librdkafka's default; the property always exists */
    }
    v = strtoll(buf, &end, 10);
    return end == buf || v <= 0 ? 1000000 : (int64_t)v;
}

hc_err_t hc_kafka_txn_error_take(rd_kafka_t *producer, rd_kafka_error_t *error, char *errstr,
                                 size_t errstr_size)
{
    hc_err_t err = hc_kafka_error_take(error, errstr, errstr_size);
    if (err == HC_ERR_ABORT && hc_kafka_fatal_check(producer, errstr, errstr_size) != HC_OK) {
        return HC_ERR_FATAL;
    }
    return err;
}

bool hc_kafka_may_reassign(rd_kafka_t *rk)
{
    return !rd_kafka_assignment_lost(rk);
}

bool hc_kafka_fatal_renewable(rd_kafka_t *rk)
{
    switch (rd_kafka_fatal_error(rk, NULL, 0)) {
    case RD_KAFKA_RESP_ERR_INVALID_TXN_STATE:
    case RD_KAFKA_RESP_ERR_UNKNOWN_PRODUCER_ID:
    case RD_KAFKA_RESP_ERR_INVALID_PRODUCER_ID_MAPPING:
        return true;
    default: /* __FENCED, PRODUCER_FENCED, INVALID_PRODUCER_EPOCH, *_AUTHORIZATION_FAILED, ... */
        return false;
    }
}

hc_err_t hc_kafka_fatal_check(rd_kafka_t *rk, char *errstr, size_t errstr_size)
{
    char reason[512];
    rd_kafka_resp_err_t err = rd_kafka_fatal_error(rk, reason, sizeof(reason));
    if (err == RD_KAFKA_RESP_ERR_NO_ERROR) {
        return HC_OK;
    }
    scrub_client_secrets(rk, reason, sizeof(reason));
    hc_errstr_set(errstr, errstr_size, "%s: %s", rd_kafka_err2name(err), reason);
    return HC_ERR_FATAL;
}

void hc_kafka_reader_destroy(rd_kafka_t *rk)
{
    if (rk != NULL) {
        rd_kafka_destroy_flags(rk, RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE);
    }
}

bool hc_kafka_is_incremental(rd_kafka_t *rk)
{
    const char *proto = rd_kafka_rebalance_protocol(rk);
    return proto && strcmp(proto, "COOPERATIVE") == 0;
}

static hc_err_t take_assign_error(const char *what, rd_kafka_error_t *error, char *errstr,
                                  size_t errstr_size)
{
    if (!error) {
        return HC_OK;
    }
    hc_errstr_set(errstr, errstr_size, "%s: %s", what, rd_kafka_error_string(error));
    rd_kafka_error_destroy(error);
    return HC_ERR_FATAL;
}

hc_err_t hc_kafka_assign_add(rd_kafka_t *rk, const rd_kafka_topic_partition_list_t *partitions,
                             char *errstr, size_t errstr_size)
{
    if (hc_kafka_is_incremental(rk)) {
        return take_assign_error("incremental assign", rd_kafka_incremental_assign(rk, partitions),
                                 errstr, errstr_size);
    }
    rd_kafka_resp_err_t rerr = rd_kafka_assign(rk, partitions);
    if (rerr) {
        hc_errstr_set(errstr, errstr_size, "assign: %s", rd_kafka_err2str(rerr));
        return HC_ERR_FATAL;
    }
    return HC_OK;
}

hc_err_t hc_kafka_assign_remove(rd_kafka_t *rk, const rd_kafka_topic_partition_list_t *partitions,
                                char *errstr, size_t errstr_size)
{
    if (hc_kafka_is_incremental(rk)) {
        return take_assign_error("incremental unassign",
                                 rd_kafka_incremental_unassign(rk, partitions), errstr,
                                 errstr_size);
    }
    rd_kafka_resp_err_t rerr = rd_kafka_assign(rk, NULL);
    if (rerr) {
        hc_errstr_set(errstr, errstr_size, "unassign: %s", rd_kafka_err2str(rerr));
        return HC_ERR_FATAL;
    }
    return HC_OK;
}

hc_err_t hc_kafka_reposition(rd_kafka_t *rk, rd_kafka_topic_partition_list_t *partitions,
                             int timeout_ms, char *errstr, size_t errstr_size)
{
    /* A seek under either protocol. Under incremental rebalancing rd_kafka_assign is refused,
     * and an unassign outside the group's rebalance would tell the group nothing. The eager
     * path re-assigned instead while librdkafka 2.0.2's seek timeout was 1000 times too short
     * (fixed in 2.1.0); on 2.14 the seek does for both (docs/RELIABILITY.md, "The librdkafka
     * 2.0.2 workarounds on 2.14.2"), and it stops and restarts no fetcher, which the re-assign
     * did. A seek discards what was fetched before it (librdkafka's op version), as a re-assign
     * does. "No offset" means the first one here, as auto.offset.reset=earliest would. */
    for (int i = 0; i < partitions->cnt; i++) {
        if (partitions->elems[i].offset < 0 &&
            partitions->elems[i].offset != RD_KAFKA_OFFSET_BEGINNING) {
            partitions->elems[i].offset = RD_KAFKA_OFFSET_BEGINNING;
        }
    }
    hc_err_t err = take_assign_error("seek", rd_kafka_seek_partitions(rk, partitions, timeout_ms),
                                     errstr, errstr_size);
    for (int i = 0; err == HC_OK && i < partitions->cnt; i++) {
        /* Not fetched (its fetcher stopped or stopping: revoked, or unassigned while the seek
         * was on its way, as a revoke during an abort's rewind does): nothing to move. Its next
         * assignment, here or elsewhere, starts from the committed offsets. A stage 1 exited on
         * this in a combined-fault run (tests/unit/test_kafka_reposition.c). */
        rd_kafka_resp_err_t perr = partitions->elems[i].err;
        if (perr == RD_KAFKA_RESP_ERR__STATE || perr == RD_KAFKA_RESP_ERR__PREV_IN_PROGRESS) {
            continue;
        }
        if (perr) {
            hc_errstr_set(errstr, errstr_size, "seek %s/%" PRId32 ": %s",
                          partitions->elems[i].topic, partitions->elems[i].partition,
                          rd_kafka_err2str(partitions->elems[i].err));
            err = HC_ERR_FATAL;
        }
    }
    return err;
}

bool hc_kafka_consumer_close_bounded(rd_kafka_t *rk, int64_t timeout_ms,
                                     hc_kafka_rebalance_fn rebalance, void *opaque)
{
    rd_kafka_queue_t *rkqu = rd_kafka_queue_new(rk);
    rd_kafka_error_t *error = rd_kafka_consumer_close_queue(rk, rkqu);
    bool closed = false;
    if (error) {
        hc_log(HC_LOG_WARN, rd_kafka_name(rk), "consumer close: %s", rd_kafka_error_string(error));
        rd_kafka_error_destroy(error);
    } else {
        int64_t until = hc_now_ms() + timeout_ms;
        for (;;) {
            closed = rd_kafka_consumer_closed(rk);
            int64_t left = until - hc_now_ms();
            if (closed || left <= 0) {
                break;
            }
            /* The close's revoke comes as an event on this queue, not through the configured
             * callback: the close waits until it has been served like one. */
            rd_kafka_event_t *ev = rd_kafka_queue_poll(rkqu, left < 100 ? (int)left : 100);
            if (ev && rd_kafka_event_type(ev) == RD_KAFKA_EVENT_REBALANCE) {
                rebalance(rk, rd_kafka_event_error(ev), rd_kafka_event_topic_partition_list(ev),
                          opaque);
            }
            if (ev) {
                rd_kafka_event_destroy(ev);
            }
        }
    }
    rd_kafka_queue_destroy(rkqu);
    return closed;
}

void hc_kafka_consumer_destroy(rd_kafka_t *rk, bool abandoned)
{
    if (rk == NULL) {
        return;
    }
    if (abandoned) {
        /* rd_kafka_destroy, even with RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE, waits for a close
         * that has begun (seen hanging for good on a revoke left unserved on the close's
         * queue): the process is stopping, and its exit frees what this leaves. */
        hc_log(HC_LOG_WARN, rd_kafka_name(rk), "consumer left to the process exit");
        return;
    }
    rd_kafka_destroy(rk);
}

rd_kafka_headers_t *hc_kafka_dead_letter_headers(const char *reason, const char *source,
                                                 const void *mark, size_t mark_len,
                                                 size_t value_len, size_t sent_value,
                                                 size_t key_len, size_t sent_key)
{
    hc_dead_letter_headers_t h;
    hc_dead_letter_headers(&h, reason, source, mark, mark_len, value_len, sent_value, key_len,
                           sent_key);
    rd_kafka_headers_t *hdrs = rd_kafka_headers_new(h.count);
    for (size_t i = 0; i < h.count; i++) {
        rd_kafka_header_add(hdrs, h.hdr[i].name, -1, h.hdr[i].value, (ssize_t)h.hdr[i].len);
    }
    return hdrs;
}
