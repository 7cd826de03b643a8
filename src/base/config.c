/* hotcount configuration: one table of keys drives defaults, parsing, validation, --help and the
 * example file, so a key cannot be documented in one place and behave differently in another. */
#if !defined(_GNU_SOURCE) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L /* strdup, strndup, getline, gethostname */
#endif

#include "hotcount/config.h"

#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hotcount/log.h"
#include "hotcount/redact.h"
#include "hotcount/secret_file.h"

typedef enum key_type {
    KEY_STR, /* char *, owned */
    KEY_I32, /* int32_t */
    KEY_I64, /* int64_t */
} key_type_t;

typedef struct key_def key_def_t;

/* A rule beyond type and range. Gets the value text and, for integers, the parsed number;
 * on failure writes the whole message (naming the key) and returns false. */
typedef bool (*key_check_fn)(const key_def_t *def, const char *value, int64_t num, char *errstr,
                             size_t errstr_size);

struct key_def {
    const char *name;
    key_type_t type;
    size_t offset;      /* offsetof(hc_config_t, field) */
    size_t size;        /* sizeof the field, checked against type at init */
    const char *def;    /* default as written in a file; NULL: computed by hc_config_init */
    int64_t min, max;   /* integers only, inclusive */
    key_check_fn check; /* NULL: type and range are the only rules */
    const char *doc;
};

#define FIELD_SIZE(field) sizeof(((hc_config_t *)0)->field)
#define KEY_S(name, field, def, check, doc)                                                        \
    {                                                                                              \
        name, KEY_STR, offsetof(hc_config_t, field), FIELD_SIZE(field), def, 0, 0, check, doc      \
    }
#define KEY_I32(name, field, def, min, max, check, doc)                                            \
    {                                                                                              \
        name, KEY_I32, offsetof(hc_config_t, field), FIELD_SIZE(field), def, min, max, check, doc  \
    }
#define KEY_I64(name, field, def, min, max, check, doc)                                            \
    {                                                                                              \
        name, KEY_I64, offsetof(hc_config_t, field), FIELD_SIZE(field), def, min, max, check, doc  \
    }

/* Shown for instance.id, whose default depends on the machine. */
#define INSTANCE_ID_DEFAULT_TEXT "<hostname>-<pid>"

static bool check_nonempty(const key_def_t *def, const char *value, int64_t num, char *errstr,
                           size_t errstr_size);
static bool check_replication(const key_def_t *def, const char *value, int64_t num, char *errstr,
                              size_t errstr_size);
static bool check_instance_id(const key_def_t *def, const char *value, int64_t num, char *errstr,
                              size_t errstr_size);
static bool check_store(const hc_config_t *cfg, const key_def_t *def, const char *value,
                        char *errstr, size_t errstr_size);
static bool check_listen(const key_def_t *def, const char *value, int64_t num, char *errstr,
                         size_t errstr_size);
static bool check_log_level(const key_def_t *def, const char *value, int64_t num, char *errstr,
                            size_t errstr_size);
static bool check_serve_listen(const key_def_t *def, const char *value, int64_t num, char *errstr,
                               size_t errstr_size);
static bool check_serve_stages(const key_def_t *def, const char *value, int64_t num, char *errstr,
                               size_t errstr_size);
static bool check_log_format(const key_def_t *def, const char *value, int64_t num, char *errstr,
                             size_t errstr_size);
static bool check_group_protocol(const key_def_t *def, const char *value, int64_t num, char *errstr,
                                 size_t errstr_size);
static bool check_partials_format(const key_def_t *def, const char *value, int64_t num,
                                  char *errstr, size_t errstr_size);

/* librdkafka's default message.max.bytes, and the room a dead-letter record's headers (reason,
 * source, truncated-from) and a short key need beside its value. */
#define PRODUCER_MESSAGE_MAX_BYTES 1000000
#define DLQ_HEADER_ROOM 4096

/* Partition counts: Kafka itself allows more, but past 100000 a typo is likelier than intent. */
#define MAX_PARTITIONS 100000

static const key_def_t keys[] = {
    KEY_S("brokers", brokers, "127.0.0.1:9092", check_nonempty,
          "Kafka bootstrap servers, host:port[,host:port...]"),
    KEY_S("topic.raw", topic_raw, "likes.raw", check_nonempty,
          "topic of raw like events, read by stage 1"),
    KEY_S("topic.partials", topic_partials, "likes.partials", check_nonempty,
          "topic of windowed partial sums, stage 1 -> stage 2"),
    KEY_S("topic.dlq", topic_dlq, "likes.dlq", check_nonempty,
          "dead-letter topic for invalid events"),
    KEY_S("topic.counts", topic_counts, "", NULL,
          "compacted topic of final counts from stage 2; empty: off"),
    KEY_S("topic.hotkeys", topic_hotkeys, "likes.hotkeys", NULL,
          "compacted topic of hot-set changes from stage 2 and declared hot posts; empty: off"),
    KEY_S("topic.manifest", topic_manifest, "", NULL,
          "stage 1's offset ranges, one record per transaction (for audits); empty: off"),
    KEY_I32("topic.raw.partitions", topic_raw_partitions, "16", 1, MAX_PARTITIONS, NULL,
            "`hotcount init` partitions of topic.raw"),
    KEY_I32("topic.partials.partitions", topic_partials_partitions, "8", 1, MAX_PARTITIONS, NULL,
            "`hotcount init` partitions of topic.partials"),
    KEY_I32("topic.dlq.partitions", topic_dlq_partitions, "4", 1, MAX_PARTITIONS, NULL,
            "`hotcount init` partitions of topic.dlq"),
    KEY_I32("topic.counts.partitions", topic_counts_partitions, "8", 1, MAX_PARTITIONS, NULL,
            "`hotcount init` partitions of topic.counts"),
    KEY_I32("topic.hotkeys.partitions", topic_hotkeys_partitions, "1", 1, MAX_PARTITIONS, NULL,
            "`hotcount init` partitions of topic.hotkeys"),
    KEY_I32("topic.manifest.partitions", topic_manifest_partitions, "1", 1, MAX_PARTITIONS, NULL,
            "`hotcount init` partitions of topic.manifest"),
    /* 32767: Kafka's replication factor is an int16 on the wire. */
    KEY_I32("topic.replication.factor", topic_replication_factor, "-1", -1, 32767,
            check_replication, "`hotcount init` replication; -1: the broker's default"),
    KEY_S("group.stage1", group_stage1, "hotcount-stage1", check_nonempty,
          "consumer group of stage 1"),
    KEY_S("group.stage2", group_stage2, "hotcount-stage2", check_nonempty,
          "consumer group of stage 2"),
    KEY_S("instance.id", instance_id, NULL, check_instance_id,
          "names the transactional id: stable per replica, [A-Za-z0-9._-]"),
    /* KIP-848 needs a 4.x broker, so classic stays the default (docs/OPERATIONS.md,
     * "Consumer groups"). */
    KEY_S("group.protocol", group_protocol, "classic", check_group_protocol,
          "the stages' consumer group protocol: classic, or consumer (KIP-848, Kafka 4.x)"),
    KEY_I32("group.static", group_static, "0", 0, 1, NULL,
            "1: static membership, group.instance.id = instance.id (a restart within the "
            "session timeout keeps its partitions; a stop hands them over only then)"),
    /* Below 10 ms a window holds too few likes to save store writes; above an hour the counts
     * are no longer live. */
    KEY_I64("flush.ms", flush_ms, "1000", 10, 3600000, NULL,
            "window length: stage 1 commits its sums this often"),
    KEY_I32("salts", salts, "16", 1, 65536, NULL,
            "raw key post_id#salt, salt = fnv1a32(user_id) % salts"),
    KEY_I64("max.keys", max_keys, "1000000", 1, 100000000, NULL,
            "posts per window before an early flush (bounds memory)"),
    /* Stage 2 reads both formats; `single` is for upgrading from a stage 2 that reads only it
     * (docs/FORMATS.md, "Packed partials"). */
    KEY_S("partials.format", partials_format, "packed", check_partials_format,
          "stage 1's likes.partials records: packed (many posts a record) or single (one post "
          "a record, JSON)"),
    KEY_S("partials.auth.key.file", partials_auth_key_file, "", NULL,
          "file of the keys that sign partials (HMAC-SHA256; stage 1 signs, stage 2 dead-letters "
          "an unsigned or mis-signed partial); empty: off"),
    /* 1 MiB is about Kafka's default message.max.bytes; a like event is a few hundred bytes. */
    KEY_I64("event.max.bytes", event_max_bytes, "4096", 64, 1048576, NULL,
            "larger raw messages go to the dead-letter topic"),
    /* The two store keys' descriptions are completed from the backends' facts (doc_of). */
    KEY_S("store", store, "sqlite:hotcount.db", NULL, "the store's URI"),
    KEY_S("store.redis.prefix", store_redis_prefix, "likes:", NULL,
          "the Redis key of post P is <prefix>P"),
    KEY_S("store.password.file", store_password_file, "", NULL,
          "file holding the store's password"),
    /* A few seconds: a store that restarted empty serves zeros at most this long; one offsets
     * read per check is nothing beside a batch a window. */
    KEY_I64("store.check.ms", store_check_ms, "2000", 0, 3600000, NULL,
            "stage 2 checks this often that the store still holds the offsets it wrote (and is "
            "the same server), and rebuilds the counts from likes.partials if not; 0: off"),
    /* Hysteresis, so a post near the threshold logs one line per crossing, not one a window. */
    KEY_I64("hotkeys.enter.rate", hotkeys_enter_rate, "1000", 1, 1000000000, NULL,
            "likes/s at which a post is hot (stage 1: its local share; stage 2: its whole rate)"),
    KEY_I64("hotkeys.leave.rate", hotkeys_leave_rate, "500", 0, 1000000000, NULL,
            "likes/s below which a hot post cools again (< hotkeys.enter.rate)"),
    /* A dip below the leave rate shorter than this is not announced: long enough to ride out a
     * window or two of a post whose rate hovers at the threshold. */
    KEY_I64("hotkeys.dwell.ms", hotkeys_dwell_ms, "10000", 0, 86400000, NULL,
            "stage 2: a hot post leaves the hot set after this long below hotkeys.leave.rate"),
    /* Bounds stage 2's hot set (about 1.3 KB per post, hotset.h) whatever the number of posts. */
    KEY_I64("hotkeys.max", hotkeys_max, "1000", 1, 100000, NULL,
            "stage 2: most posts in its hot set; hotter newcomers evict the coldest"),
    /* Below the supervisors' own grace before SIGKILL (deploy/: 60 s in the k8s manifests and
     * the systemd units), so that the process ends itself, logging why. */
    KEY_I64("stop.timeout.ms", stop_timeout_ms, "15000", 1000, 3600000, NULL,
            "a stage asked to stop (SIGTERM) that has not finished this long after exits with "
            "status 5, leaving its open window to be read again"),
    /* 0 derives it (hotcount/timeouts.h): a few windows plus the store's batch bound, so a
     * partition is called stalled only once no bounded call could still be on its way. */
    KEY_I64("partition.progress.ms", partition_progress_ms, "0", 0, 86400000, NULL,
            "an assigned partition with input waiting that commits nothing this long is "
            "reported stalled (partition_stalled) and recovered; 0: 5 x flush.ms plus the "
            "store's batch bound plus twice the back-off cap, plus a changelog transaction "
            "with topic.counts"),
    /* Above the transaction timeout (60 s) and the stores' statement bounds (~45 s), which
     * bound every call that does not return to the loop. */
    KEY_I64("watchdog.ms", watchdog_ms, "180000", 0, 86400000, NULL,
            "a stage stuck this long in one librdkafka or store call exits with status 3; 0: off"),
    KEY_S("metrics.listen", metrics_listen, "127.0.0.1:9464", check_listen,
          "host:port of the Prometheus /metrics endpoint; empty: off"),
    KEY_S("log.level", log_level, "info", check_log_level, "error, warn, info or debug"),
    KEY_S("log.format", log_format, "text", check_log_format,
          "text, or json for one JSON object per line"),
    KEY_S("serve.listen", serve_listen, "127.0.0.1:8080", check_serve_listen,
          "`hotcount serve`: host:port of the HTTP read API, its live page and /metrics"),
    /* HTTP caching speaks whole seconds; below 1 ms a cache saves nothing. */
    KEY_I64("serve.ttl.ms", serve_ttl_ms, "20", 1, 3600000, NULL,
            "`hotcount serve`: a count is read from the store at most once per TTL per post"),
    KEY_I64("serve.max.ids", serve_max_ids, "100", 1, 10000, NULL,
            "`hotcount serve`: most post ids in one GET /v1/likes?ids=..."),
    KEY_I64("serve.top.max", serve_top_max, "100", 1, 10000, NULL,
            "`hotcount serve`: largest n of GET /v1/top?n=N"),
    /* A top query reads an index (SQLite, PostgreSQL) or scans every key (Redis): far dearer
     * than a point read, and the ranking moves once per stage-2 window (flush.ms, 1 s) anyway. */
    KEY_I64("serve.top.ttl.ms", serve_top_ttl_ms, "1000", 1, 3600000, NULL,
            "`hotcount serve`: the top is read from the store at most once per this TTL, "
            "whatever the query"),
    KEY_I64("serve.cache.max.keys", serve_cache_max_keys, "100000", 1, 100000000, NULL,
            "`hotcount serve`: posts held in the cache (least recently used evicted)"),
    KEY_I32("serve.threads", serve_threads, "4", 1, 256, NULL,
            "`hotcount serve`: HTTP worker threads"),
    KEY_S("serve.stages", serve_stages, "", check_serve_stages,
          "`hotcount serve`: host:port[,host:port...] of stage metrics endpoints for /v1/stats"),
    KEY_I32("serve.max.connections", serve_max_connections, "1000", 8, 100000, NULL,
            "`hotcount serve`: open HTTP connections at once (plus a few reserved for probes)"),
    KEY_I32("serve.max.connections.per.ip", serve_max_connections_per_ip, "64", 1, 100000, NULL,
            "`hotcount serve`: open HTTP connections from one client address"),
    KEY_I64("serve.request.timeout.ms", serve_request_timeout_ms, "10000", 100, 600000, NULL,
            "`hotcount serve`: a whole request (headers in, answer out) must finish within this"),
    KEY_I32("serve.stats.expose", serve_stats_expose, "0", 0, 1, NULL,
            "`hotcount serve`: 1 shows the stages' addresses and errors in /v1/stats"),
    /* Read-hot promotion (docs/READERS.md "Read-hot promotion"). At 200 reads/s the 20 ms
     * TTL already serves 3 of 4 reads from the cache; promoted to 1 s, such a post costs 1 store
     * read a second instead of 50, and its count is no staler than stage 1's 1 s window makes it.
     */
    KEY_I64("serve.hot.enter.rate", serve_hot_enter_rate, "200", 1, 1000000000, NULL,
            "`hotcount serve`: reads/s at which a post is read-hot (gets serve.hot.ttl.ms)"),
    KEY_I64("serve.hot.leave.rate", serve_hot_leave_rate, "100", 0, 1000000000, NULL,
            "`hotcount serve`: reads/s below which a read-hot post starts cooling (< "
            "serve.hot.enter.rate)"),
    KEY_I64("serve.hot.dwell.ms", serve_hot_dwell_ms, "10000", 0, 86400000, NULL,
            "`hotcount serve`: a read-hot post is demoted after this long below "
            "serve.hot.leave.rate"),
    KEY_I64("serve.hot.ttl.ms", serve_hot_ttl_ms, "1000", 1, 3600000, NULL,
            "`hotcount serve`: the TTL of a read-hot post's count (>= serve.ttl.ms; equal: "
            "promotion off)"),
    /* The sketch's ceiling (HC_HOTKEYS_MAX_K); about 3 KB each (docs/READERS.md). */
    KEY_I64("serve.hot.max", serve_hot_max, "1024", 1, 4096, NULL,
            "`hotcount serve`: posts whose reads are sampled at once, and most read-hot posts"),
    KEY_I32("serve.hot.follow", serve_hot_follow, "-1", -1, 1, NULL,
            "`hotcount serve`: 1 promotes posts hot in topic.hotkeys up front, 0 does not, -1 "
            "does when brokers is set (not its default)"),
};

#define KEY_COUNT (sizeof(keys) / sizeof(keys[0]))

static const struct {
    const char *prefix;
    hc_kafka_scope_t scope;
    const char *doc;
} kafka_prefixes[] = {
    {"kafka.", HC_KAFKA_ALL, "librdkafka property <prop> for every client"},
    {"kafka.consumer.", HC_KAFKA_CONSUMER, "librdkafka property <prop> for consumers only"},
    {"kafka.producer.", HC_KAFKA_PRODUCER, "librdkafka property <prop> for producers only"},
};

#define KAFKA_PREFIX_COUNT (sizeof(kafka_prefixes) / sizeof(kafka_prefixes[0]))

static char **str_slot(hc_config_t *cfg, const key_def_t *def)
{
    return (char **)(void *)((char *)cfg + def->offset);
}

static const char *const *str_slot_const(const hc_config_t *cfg, const key_def_t *def)
{
    return (const char *const *)(const void *)((const char *)cfg + def->offset);
}

static const key_def_t *find_key(const char *name)
{
    for (size_t i = 0; i < KEY_COUNT; i++) {
        if (strcmp(keys[i].name, name) == 0) {
            return &keys[i];
        }
    }
    return NULL;
}

static bool check_nonempty(const key_def_t *def, const char *value, int64_t num, char *errstr,
                           size_t errstr_size)
{
    (void)num;
    if (value[0] == '\0') {
        hc_errstr_set(errstr, errstr_size, "%s: must not be empty", def->name);
        return false;
    }
    return true;
}

static bool check_replication(const key_def_t *def, const char *value, int64_t num, char *errstr,
                              size_t errstr_size)
{
    (void)value;
    if (num == 0) {
        hc_errstr_set(errstr, errstr_size,
                      "%s: 0 is not a replication factor (-1 for the broker's default, or "
                      "1..32767)",
                      def->name);
        return false;
    }
    return true;
}

static bool check_instance_id(const key_def_t *def, const char *value, int64_t num, char *errstr,
                              size_t errstr_size)
{
    (void)num;
    if (!check_nonempty(def, value, num, errstr, errstr_size)) {
        return false;
    }
    /* It becomes part of a Kafka transactional id and of log lines: keep it to a portable
     * character set. */
    if (value[strspn(value, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")] !=
        '\0') {
        hc_errstr_set(errstr, errstr_size,
                      "%s: \"%s\" may only contain A-Z a-z 0-9 '.' '_' '-' (it names the Kafka "
                      "transactional id)",
                      def->name, value);
        return false;
    }
    return true;
}

/* The store URI: one of the backends' schemes (cfg->stores), with what that backend needs after
 * it. Not in the key table's check column: it needs the backends handed to hc_config_init. */
static bool check_store(const hc_config_t *cfg, const key_def_t *def, const char *value,
                        char *errstr, size_t errstr_size)
{
    const hc_store_facts_t *f = hc_store_facts_find(cfg->stores, value);
    char shown[512];
    char forms[512];

    if (f != NULL) {
        for (const char *const *s = f->schemes; *s != NULL; s++) {
            if (strncmp(value, *s, strlen(*s)) == 0 && value[strlen(*s)] == '\0' &&
                f->after_scheme != NULL) {
                hc_errstr_set(errstr, errstr_size, "%s: \"%s\" needs %s (%s)", def->name, value,
                              f->after_scheme, f->uri_form);
                return false;
            }
        }
        return true;
    }
    hc_redact_uri(value, shown, sizeof(shown)); /* a mistyped scheme may still carry a password */
    hc_store_facts_list(cfg->stores, HC_STORE_LIST_FORMS, forms, sizeof(forms));
    hc_errstr_set(errstr, errstr_size, "%s: \"%s\" is not a supported store (use %s)", def->name,
                  shown, forms);
    return false;
}

static bool check_listen(const key_def_t *def, const char *value, int64_t num, char *errstr,
                         size_t errstr_size)
{
    const char *colon;
    const char *port;
    size_t digits;
    long port_num;

    (void)num;
    if (value[0] == '\0') {
        return true; /* metrics off */
    }
    /* The last colon, so that a bracketed IPv6 host ("[::1]:9464") works. */
    colon = strrchr(value, ':');
    if (colon == NULL || colon == value) {
        hc_errstr_set(errstr, errstr_size,
                      "%s: \"%s\" is not host:port (0.0.0.0:PORT listens on every interface; "
                      "empty turns metrics off)",
                      def->name, value);
        return false;
    }
    port = colon + 1;
    digits = strspn(port, "0123456789");
    port_num = digits > 0 && digits <= 5 && port[digits] == '\0' ? strtol(port, NULL, 10) : -1;
    /* port 0: the system picks a free port, which the log line names (tests use it) */
    if (port_num < 0 || port_num > 65535) {
        hc_errstr_set(errstr, errstr_size, "%s: \"%s\" has no valid port (0..65535)", def->name,
                      value);
        return false;
    }
    return true;
}

static bool check_serve_listen(const key_def_t *def, const char *value, int64_t num, char *errstr,
                               size_t errstr_size)
{
    if (value[0] == '\0') {
        hc_errstr_set(errstr, errstr_size, "%s: must not be empty", def->name);
        return false;
    }
    if (!check_listen(def, value, num, errstr, errstr_size)) {
        /* check_listen's hints are about metrics.listen */
        hc_errstr_set(errstr, errstr_size, "%s: \"%s\" is not host:port with a port in 0..65535",
                      def->name, value);
        return false;
    }
    return true;
}

/* A comma-separated list of host:port, each checked like a listen address (empty: none). */
static bool check_serve_stages(const key_def_t *def, const char *value, int64_t num, char *errstr,
                               size_t errstr_size)
{
    char item[300];
    for (const char *p = value; *p;) {
        size_t n = strcspn(p, ",");
        if (n == 0 || n >= sizeof(item)) {
            hc_errstr_set(errstr, errstr_size, "%s: \"%s\" is not host:port[,host:port...]",
                          def->name, value);
            return false;
        }
        memcpy(item, p, n);
        item[n] = '\0';
        if (!check_serve_listen(def, item, num, errstr, errstr_size)) {
            return false;
        }
        p += n;
        if (*p == ',') {
            p++;
            if (*p == '\0') {
                hc_errstr_set(errstr, errstr_size, "%s: \"%s\" ends with a comma", def->name,
                              value);
                return false;
            }
        }
    }
    return true;
}

static bool check_log_level(const key_def_t *def, const char *value, int64_t num, char *errstr,
                            size_t errstr_size)
{
    hc_log_level_t level;

    (void)num;
    if (!hc_log_level_parse(value, &level)) {
        hc_errstr_set(errstr, errstr_size,
                      "%s: \"%s\" is not a log level (error, warn, info or debug)", def->name,
                      value);
        return false;
    }
    return true;
}

static bool check_log_format(const key_def_t *def, const char *value, int64_t num, char *errstr,
                             size_t errstr_size)
{
    hc_log_format_t format;

    (void)num;
    if (!hc_log_format_parse(value, &format)) {
        hc_errstr_set(errstr, errstr_size, "%s: \"%s\" is not a log format (text or json)",
                      def->name, value);
        return false;
    }
    return true;
}

static bool check_partials_format(const key_def_t *def, const char *value, int64_t num,
                                  char *errstr, size_t errstr_size)
{
    (void)num;
    if (strcmp(value, "packed") != 0 && strcmp(value, "single") != 0) {
        hc_errstr_set(errstr, errstr_size, "%s: \"%s\" is not packed or single", def->name, value);
        return false;
    }
    return true;
}

static bool check_group_protocol(const key_def_t *def, const char *value, int64_t num, char *errstr,
                                 size_t errstr_size)
{
    (void)num;
    if (strcmp(value, "classic") != 0 && strcmp(value, "consumer") != 0) {
        hc_errstr_set(errstr, errstr_size,
                      "%s: \"%s\" is not a group protocol (classic or consumer)", def->name, value);
        return false;
    }
    return true;
}

/* Whole string, base 10, within [min, max]: "", " 5", "12x", "1.5" and overflow are errors. */
static hc_err_t parse_int(const key_def_t *def, const char *value, int64_t *out, char *errstr,
                          size_t errstr_size)
{
    char *end;
    long long num;

    /* strtoll would skip leading blanks; a strict parser should not. */
    if (value[0] == '\0' || isspace((unsigned char)value[0])) {
        hc_errstr_set(errstr, errstr_size, "%s: \"%s\" is not an integer", def->name, value);
        return HC_ERR_INVALID;
    }
    errno = 0;
    num = strtoll(value, &end, 10);
    if (end == value || *end != '\0') {
        hc_errstr_set(errstr, errstr_size, "%s: \"%s\" is not an integer", def->name, value);
        return HC_ERR_INVALID;
    }
    if (errno == ERANGE) {
        hc_errstr_set(errstr, errstr_size, "%s: \"%s\" is out of range (%" PRId64 "..%" PRId64 ")",
                      def->name, value, def->min, def->max);
        return HC_ERR_INVALID;
    }
    if (num < def->min) {
        hc_errstr_set(errstr, errstr_size, "%s: %lld is below the minimum %" PRId64, def->name, num,
                      def->min);
        return HC_ERR_INVALID;
    }
    if (num > def->max) {
        hc_errstr_set(errstr, errstr_size, "%s: %lld is above the maximum %" PRId64, def->name, num,
                      def->max);
        return HC_ERR_INVALID;
    }
    *out = (int64_t)num;
    return HC_OK;
}

/* Validates first and assigns last, so that on any error cfg is unchanged. */
static hc_err_t set_value(hc_config_t *cfg, const key_def_t *def, const char *value, char *errstr,
                          size_t errstr_size)
{
    int64_t num = 0;
    hc_err_t err;

    if (def->type != KEY_STR) {
        err = parse_int(def, value, &num, errstr, errstr_size);
        if (err != HC_OK) {
            return err;
        }
    }
    if (def->check != NULL && !def->check(def, value, num, errstr, errstr_size)) {
        return HC_ERR_INVALID;
    }
    if (def->offset == offsetof(hc_config_t, store) &&
        !check_store(cfg, def, value, errstr, errstr_size)) {
        return HC_ERR_INVALID;
    }
    switch (def->type) {
    case KEY_STR: {
        char **slot = str_slot(cfg, def);
        char *copy = strdup(value);

        if (copy == NULL) {
            hc_errstr_set(errstr, errstr_size, "%s: out of memory", def->name);
            return HC_ERR_FATAL;
        }
        free(*slot);
        *slot = copy;
        break;
    }
    case KEY_I32: {
        int32_t num32 = (int32_t)num; /* the range check kept it within int32_t */

        memcpy((char *)cfg + def->offset, &num32, sizeof(num32));
        break;
    }
    case KEY_I64:
        memcpy((char *)cfg + def->offset, &num, sizeof(num));
        break;
    }
    return HC_OK;
}

/* kafka.<prop>, kafka.consumer.<prop>, kafka.producer.<prop>: librdkafka checks the name and
 * value when a client is created; here only the shape is checked. A repeated scope+prop
 * replaces the earlier value where it stands, so the last source wins, as for every key. */
static hc_err_t set_kafka_prop(hc_config_t *cfg, const char *key, const char *value, char *errstr,
                               size_t errstr_size)
{
    hc_kafka_scope_t scope = HC_KAFKA_ALL;
    const char *prop = NULL;
    size_t prefix_len = 0;
    hc_kafka_prop_t *props;
    char *name_copy;
    char *value_copy;

    /* The longest prefix wins: kafka.consumer.x is x for consumers, not consumer.x for all. */
    for (size_t i = 0; i < KAFKA_PREFIX_COUNT; i++) {
        size_t len = strlen(kafka_prefixes[i].prefix);

        if (len > prefix_len && strncmp(key, kafka_prefixes[i].prefix, len) == 0) {
            scope = kafka_prefixes[i].scope;
            prop = key + len;
            prefix_len = len;
        }
    }
    assert(prop != NULL); /* only called for keys starting with "kafka." */
    if (prop[0] == '\0') {
        hc_errstr_set(errstr, errstr_size, "%s: the librdkafka property name is missing (%s<prop>)",
                      key, key);
        return HC_ERR_INVALID;
    }

    value_copy = strdup(value);
    if (value_copy == NULL) {
        goto oom;
    }
    for (size_t i = 0; i < cfg->kafka_prop_count; i++) {
        hc_kafka_prop_t *kp = &cfg->kafka_props[i];

        if (kp->scope == scope && strcmp(kp->name, prop) == 0) {
            free(kp->value);
            kp->value = value_copy;
            return HC_OK;
        }
    }

    name_copy = strdup(prop);
    if (name_copy == NULL) {
        goto free_value;
    }
    props = realloc(cfg->kafka_props, (cfg->kafka_prop_count + 1) * sizeof(*props));
    if (props == NULL) {
        goto free_name;
    }
    cfg->kafka_props = props;
    props[cfg->kafka_prop_count].scope = scope;
    props[cfg->kafka_prop_count].name = name_copy;
    props[cfg->kafka_prop_count].value = value_copy;
    cfg->kafka_prop_count++;
    return HC_OK;

free_name:
    free(name_copy);
free_value:
    free(value_copy);
oom:
    hc_errstr_set(errstr, errstr_size, "%s: out of memory", key);
    return HC_ERR_FATAL;
}

/* "<hostname>-<pid>", with any character that instance.id forbids replaced by '_'. */
static void default_instance_id(char *out, size_t size)
{
    char host[256];

    if (gethostname(host, sizeof(host)) != 0 || host[0] == '\0') {
        snprintf(host, sizeof(host), "%s", "hotcount");
    }
    host[sizeof(host) - 1] = '\0'; /* gethostname need not terminate a truncated name */
    for (char *p = host; *p != '\0'; p++) {
        if (!isalnum((unsigned char)*p) && *p != '.' && *p != '_' && *p != '-') {
            *p = '_';
        }
    }
    snprintf(out, size, "%s-%ld", host, (long)getpid());
}

hc_err_t hc_config_init(hc_config_t *cfg, const hc_store_facts_t *const *stores)
{
    char errstr[256];
    char instance_id[300];
    hc_err_t err;

    assert(stores != NULL);
    memset(cfg, 0, sizeof(*cfg));
    cfg->stores = stores;
    for (size_t i = 0; i < KEY_COUNT; i++) {
        const key_def_t *def = &keys[i];

        /* A table row whose type does not match its field would write past it. */
        assert(def->size == (def->type == KEY_STR   ? sizeof(char *)
                             : def->type == KEY_I32 ? sizeof(int32_t)
                                                    : sizeof(int64_t)));
        if (def->def == NULL) {
            continue;
        }
        err = set_value(cfg, def, def->def, errstr, sizeof(errstr));
        /* Defaults go through the same parser as user input; only memory can fail. */
        assert(err != HC_ERR_INVALID);
        if (err != HC_OK) {
            goto fail;
        }
    }
    default_instance_id(instance_id, sizeof(instance_id));
    err = set_value(cfg, find_key("instance.id"), instance_id, errstr, sizeof(errstr));
    if (err != HC_OK) {
        goto fail;
    }
    cfg->store_password = strdup("");
    if (cfg->store_password == NULL) {
        goto fail;
    }
    err = hc_timeouts_derive(cfg, &cfg->timeouts, errstr, sizeof(errstr));
    assert(err == HC_OK); /* the defaults keep every relation */
    return HC_OK;

fail:
    hc_config_fini(cfg);
    return HC_ERR_FATAL;
}

void hc_config_fini(hc_config_t *cfg)
{
    if (cfg == NULL) {
        return;
    }
    for (size_t i = 0; i < KEY_COUNT; i++) {
        if (keys[i].type == KEY_STR) {
            free(*str_slot(cfg, &keys[i]));
        }
    }
    for (size_t i = 0; i < cfg->kafka_prop_count; i++) {
        free(cfg->kafka_props[i].name);
        free(cfg->kafka_props[i].value);
    }
    free(cfg->kafka_props);
    free(cfg->store_password);
    memset(cfg, 0, sizeof(*cfg));
}

/* Deep copy, so that a file can be applied to a copy and swapped in only when every line
 * parsed. */
static hc_err_t config_copy(hc_config_t *dst, const hc_config_t *src)
{
    *dst = *src;
    for (size_t i = 0; i < KEY_COUNT; i++) {
        if (keys[i].type == KEY_STR) {
            *str_slot(dst, &keys[i]) = NULL;
        }
    }
    dst->kafka_props = NULL;
    dst->kafka_prop_count = 0;
    dst->store_password = NULL;
    if (src->store_password != NULL &&
        (dst->store_password = strdup(src->store_password)) == NULL) {
        goto fail;
    }

    for (size_t i = 0; i < KEY_COUNT; i++) {
        if (keys[i].type == KEY_STR) {
            const char *value = *str_slot_const(src, &keys[i]);

            if (value != NULL && (*str_slot(dst, &keys[i]) = strdup(value)) == NULL) {
                goto fail;
            }
        }
    }
    if (src->kafka_prop_count > 0) {
        dst->kafka_props = calloc(src->kafka_prop_count, sizeof(*dst->kafka_props));
        if (dst->kafka_props == NULL) {
            goto fail;
        }
        for (size_t i = 0; i < src->kafka_prop_count; i++) {
            hc_kafka_prop_t *kp = &dst->kafka_props[i];

            dst->kafka_prop_count = i + 1; /* so that fini frees this entry too */
            kp->scope = src->kafka_props[i].scope;
            kp->name = strdup(src->kafka_props[i].name);
            kp->value = strdup(src->kafka_props[i].value);
            if (kp->name == NULL || kp->value == NULL) {
                goto fail;
            }
        }
    }
    return HC_OK;

fail:
    hc_config_fini(dst);
    return HC_ERR_FATAL;
}

/* A check that quotes the value it refuses gets it with any password redacted, whichever key
 * it was given to (a store URI pasted into instance.id is still a secret). */
static void redact_quoted_value(char *errstr, size_t errstr_size, const char *value)
{
    char shown[512];
    size_t vlen = strlen(value);
    char *at;

    hc_redact_uri(value, shown, sizeof(shown));
    if (errstr == NULL || vlen == 0 || strcmp(shown, value) == 0) {
        return;
    }
    /* hc_redact_uri only shortens (a password of 4+ bytes becomes "***") or keeps its text */
    while ((at = strstr(errstr, value)) != NULL) {
        size_t slen = strlen(shown);
        size_t tail = strlen(at + vlen);

        if (slen > vlen || (size_t)(at - errstr) + slen + tail + 1 > errstr_size) {
            snprintf(errstr, errstr_size, "%s",
                     "a value was refused (not shown: it holds a "
                     "password)");
            return;
        }
        memmove(at + slen, at + vlen, tail + 1);
        memcpy(at, shown, slen);
    }
}

/* Keeps cfg->timeouts in step with the keys between sources; whether they fit together is
 * hc_config_validate's to say, once every source is applied. */
static void rederive(hc_config_t *cfg)
{
    char ignored[8];

    (void)hc_timeouts_derive(cfg, &cfg->timeouts, ignored, sizeof(ignored));
}

/* librdkafka's own properties whose names end in ".file" (librdkafka 2.14.2): it reads those
 * files itself, so they pass through like any other property. */
static const char *const rdkafka_file_props[] = {
    "sasl.oauthbearer.assertion.file",
    "sasl.oauthbearer.assertion.jwt.template.file",
    "sasl.oauthbearer.assertion.private.key.file",
};

/* kafka.[consumer.|producer.]<prop>.file=PATH (hotcount/secret_file.h), unless librdkafka has
 * such a property itself. */
static bool is_kafka_secret_file_key(const char *key)
{
    const char *prop = key + strlen("kafka.");
    size_t len;

    if (strncmp(prop, "consumer.", 9) == 0 || strncmp(prop, "producer.", 9) == 0) {
        prop += 9;
    }
    len = strlen(prop);
    if (len <= 5 || strcmp(prop + len - 5, ".file") != 0) {
        return false;
    }
    for (size_t i = 0; i < sizeof(rdkafka_file_props) / sizeof(rdkafka_file_props[0]); i++) {
        if (strcmp(prop, rdkafka_file_props[i]) == 0) {
            return false;
        }
    }
    return true;
}

/* Reads PATH and sets the key without ".file" to its content. Only a secret property may come
 * from a file: its value is then redacted wherever it could show (hotcount/redact.h), and a
 * file is pointless for anything else. */
static hc_err_t set_kafka_secret_file(hc_config_t *cfg, const char *key, const char *path,
                                      char *errstr, size_t errstr_size)
{
    char *target = strndup(key, strlen(key) - strlen(".file"));
    char *secret = NULL;
    hc_err_t err;

    if (target == NULL) {
        hc_errstr_set(errstr, errstr_size, "%s: out of memory", key);
        return HC_ERR_FATAL;
    }
    if (!hc_redact_is_secret_key(target)) {
        hc_errstr_set(errstr, errstr_size,
                      "%s: only a secret property (sasl.*, *password, *secret, ssl.key.pem) can "
                      "be read from a file; set %s directly",
                      key, target);
        err = HC_ERR_INVALID;
        goto out_free;
    }
    err = hc_secret_file_read(key, path, &secret, errstr, errstr_size);
    if (err == HC_OK) {
        err = set_kafka_prop(cfg, target, secret, errstr, errstr_size);
        hc_redact_secret_in(errstr, errstr_size, secret); /* messages never quote it; belt */
    }
out_free:
    free(secret);
    free(target);
    return err;
}

/* store.password.file: the file is read first, so that on any error nothing changed. */
static hc_err_t set_store_password_file(hc_config_t *cfg, const key_def_t *def, const char *path,
                                        char *errstr, size_t errstr_size)
{
    char *secret = NULL;
    hc_err_t err;

    if (path[0] == '\0') {
        secret = strdup("");
        err = secret != NULL ? HC_OK : HC_ERR_FATAL;
        if (err != HC_OK) {
            hc_errstr_set(errstr, errstr_size, "%s: out of memory", def->name);
        }
    } else {
        err = hc_secret_file_read(def->name, path, &secret, errstr, errstr_size);
    }
    if (err != HC_OK) {
        return err;
    }
    err = set_value(cfg, def, path, errstr, errstr_size);
    if (err != HC_OK) {
        free(secret);
        return err;
    }
    free(cfg->store_password);
    cfg->store_password = secret;
    return HC_OK;
}

hc_err_t hc_config_set(hc_config_t *cfg, const char *key, const char *value, char *errstr,
                       size_t errstr_size)
{
    const key_def_t *def;
    hc_err_t err;

    assert(cfg != NULL && key != NULL && value != NULL);
    if (strncmp(key, "kafka.", 6) == 0) {
        err = is_kafka_secret_file_key(key)
                  ? set_kafka_secret_file(cfg, key, value, errstr, errstr_size)
                  : set_kafka_prop(cfg, key, value, errstr, errstr_size);
        if (err == HC_OK) {
            rederive(cfg);
        }
        return err;
    }
    def = find_key(key);
    if (def == NULL) {
        char shown[512];
        hc_redact_uri(key, shown, sizeof(shown)); /* a value pasted where the key goes */
        hc_errstr_set(errstr, errstr_size, "unknown configuration key \"%s\"", shown);
        return HC_ERR_INVALID;
    }
    err = def->offset == offsetof(hc_config_t, store_password_file)
              ? set_store_password_file(cfg, def, value, errstr, errstr_size)
              : set_value(cfg, def, value, errstr, errstr_size);
    if (err == HC_OK) {
        rederive(cfg);
    } else {
        redact_quoted_value(errstr, errstr_size, value);
    }
    return err;
}

hc_err_t hc_config_set_kv(hc_config_t *cfg, const char *kv, char *errstr, size_t errstr_size)
{
    const char *eq = strchr(kv, '=');
    char shown[512];
    char *key;
    hc_err_t err;

    /* the argument is quoted back only redacted: it may be "store:redis://u:PW@h" */
    hc_redact_assignment(kv, shown, sizeof(shown));
    if (eq == NULL) {
        hc_errstr_set(errstr, errstr_size, "\"%s\": expected key=value", shown);
        return HC_ERR_INVALID;
    }
    key = strndup(kv, (size_t)(eq - kv));
    if (key == NULL) {
        hc_errstr_set(errstr, errstr_size, "\"%s\": out of memory", shown);
        return HC_ERR_FATAL;
    }
    if (key[0] == '\0') {
        hc_errstr_set(errstr, errstr_size, "\"%s\": missing key before '='", shown);
        err = HC_ERR_INVALID;
    } else {
        err = hc_config_set(cfg, key, eq + 1, errstr, errstr_size);
    }
    free(key);
    return err;
}

static char *trim(char *s)
{
    char *end;

    while (isspace((unsigned char)*s)) {
        s++;
    }
    end = s + strlen(s);
    while (end > s && isspace((unsigned char)end[-1])) {
        end--;
    }
    *end = '\0';
    return s;
}

/* Applies one line; *msg gets the reason (without file and line) on error. */
static hc_err_t apply_line(hc_config_t *cfg, char *line, char *msg, size_t msg_size)
{
    char *text = trim(line);
    char *eq;
    char *key;

    if (text[0] == '\0' || text[0] == '#' || text[0] == '!') {
        return HC_OK;
    }
    eq = strchr(text, '=');
    if (eq == NULL) {
        char shown[512];
        hc_redact_assignment(text, shown, sizeof(shown)); /* "store redis://u:PW@h" */
        hc_errstr_set(msg, msg_size, "expected key=value, got \"%s\"", shown);
        return HC_ERR_INVALID;
    }
    *eq = '\0';
    key = trim(text);
    if (key[0] == '\0') {
        hc_errstr_set(msg, msg_size, "missing key before '='");
        return HC_ERR_INVALID;
    }
    return hc_config_set(cfg, key, trim(eq + 1), msg, msg_size);
}

hc_err_t hc_config_load_file(hc_config_t *cfg, const char *path, char *errstr, size_t errstr_size)
{
    hc_config_t work;
    char msg[512];
    char *line = NULL;
    size_t line_cap = 0;
    size_t line_no = 0;
    ssize_t len;
    hc_err_t err;
    FILE *fp;

    fp = fopen(path, "r");
    if (fp == NULL) {
        hc_errstr_set(errstr, errstr_size, "%s: %s", path, strerror(errno));
        return HC_ERR_INVALID;
    }
    err = config_copy(&work, cfg);
    if (err != HC_OK) {
        hc_errstr_set(errstr, errstr_size, "%s: out of memory", path);
        goto close_file;
    }
    for (;;) {
        errno = 0;
        len = getline(&line, &line_cap, fp);
        if (len < 0) {
            break;
        }
        line_no++;
        if (strlen(line) != (size_t)len) {
            hc_errstr_set(errstr, errstr_size, "%s:%zu: contains a NUL byte", path, line_no);
            err = HC_ERR_INVALID;
            goto discard_work;
        }
        err = apply_line(&work, line, msg, sizeof(msg));
        if (err != HC_OK) {
            hc_errstr_set(errstr, errstr_size, "%s:%zu: %s", path, line_no, msg);
            goto discard_work;
        }
    }
    if (!feof(fp)) {
        /* A read error, e.g. EISDIR: fopen("r") succeeds on a directory, reading fails. */
        int read_errno = errno != 0 ? errno : EIO;

        hc_errstr_set(errstr, errstr_size, "%s: %s", path, strerror(read_errno));
        err = read_errno == ENOMEM ? HC_ERR_FATAL : HC_ERR_INVALID;
        goto discard_work;
    }
    free(line);
    fclose(fp);
    hc_config_fini(cfg);
    *cfg = work;
    return HC_OK;

discard_work:
    hc_config_fini(&work);
close_file:
    free(line);
    fclose(fp);
    return err;
}

hc_err_t hc_config_validate(hc_config_t *cfg, char *errstr, size_t errstr_size)
{
    typedef struct {
        const char *key;
        const char *value;
        bool optional; /* empty: off */
    } topic_key_t;
    const topic_key_t all[] = {
        {"topic.raw", cfg->topic_raw, false},
        {"topic.partials", cfg->topic_partials, false},
        {"topic.dlq", cfg->topic_dlq, false},
        {"topic.counts", cfg->topic_counts, true},
        {"topic.manifest", cfg->topic_manifest, true},
        {"topic.hotkeys", cfg->topic_hotkeys, true},
    };
    topic_key_t topics[sizeof(all) / sizeof(all[0])];
    size_t count = 0;

    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
        if (all[i].value == NULL || all[i].value[0] == '\0') {
            if (all[i].optional) {
                continue;
            }
            hc_errstr_set(errstr, errstr_size, "%s: must not be empty", all[i].key);
            return HC_ERR_INVALID;
        }
        topics[count++] = all[i];
    }
    /* A static member killed without leaving holds its instance id until its session times
     * out, and under the consumer protocol librdkafka raises the broker's refusal of the
     * restarted member (UNRELEASED_INSTANCE_ID) as a fatal error: the stage would stop instead
     * of waiting (docs/RELIABILITY.md, "Consumer group protocols and bounded stops"). */
    if (cfg->group_static && strcmp(cfg->group_protocol, "consumer") == 0) {
        hc_errstr_set(errstr, errstr_size,
                      "group.static=1 with group.protocol=consumer: a stage restarted after a "
                      "crash would stop on UNRELEASED_INSTANCE_ID until its old session times "
                      "out; use group.static with group.protocol=classic");
        return HC_ERR_INVALID;
    }
    if (cfg->hotkeys_leave_rate >= cfg->hotkeys_enter_rate) {
        hc_errstr_set(errstr, errstr_size,
                      "hotkeys.leave.rate (%lld) must be below hotkeys.enter.rate (%lld)",
                      (long long)cfg->hotkeys_leave_rate, (long long)cfg->hotkeys_enter_rate);
        return HC_ERR_INVALID;
    }
    if (cfg->serve_hot_leave_rate >= cfg->serve_hot_enter_rate) {
        hc_errstr_set(errstr, errstr_size,
                      "serve.hot.leave.rate (%lld) must be below serve.hot.enter.rate (%lld)",
                      (long long)cfg->serve_hot_leave_rate, (long long)cfg->serve_hot_enter_rate);
        return HC_ERR_INVALID;
    }
    /* A shorter TTL for the posts read most would read the store more for them, not less.
     * Left at its default, it gives way to a longer serve.ttl.ms (promotion then changes
     * nothing), so that a serve.ttl.ms set before this key existed still starts. */
    if (cfg->serve_hot_ttl_ms < cfg->serve_ttl_ms &&
        !hc_config_is_default(cfg, "serve.hot.ttl.ms")) {
        hc_errstr_set(errstr, errstr_size,
                      "serve.hot.ttl.ms (%lld) must be at least serve.ttl.ms (%lld)",
                      (long long)cfg->serve_hot_ttl_ms, (long long)cfg->serve_ttl_ms);
        return HC_ERR_INVALID;
    }
    /* Stage 1 would read its own output, or partials would land in the DLQ. */
    for (size_t i = 0; i < count; i++) {
        for (size_t j = 0; j < i; j++) {
            if (strcmp(topics[i].value, topics[j].value) == 0) {
                hc_errstr_set(errstr, errstr_size,
                              "%s and %s are both \"%s\"; every topic must be distinct",
                              topics[j].key, topics[i].key, topics[i].value);
                return HC_ERR_INVALID;
            }
        }
    }
    if (cfg->group_stage1 == NULL || cfg->group_stage1[0] == '\0' || cfg->group_stage2 == NULL ||
        cfg->group_stage2[0] == '\0') {
        hc_errstr_set(errstr, errstr_size, "%s: must not be empty",
                      cfg->group_stage1 == NULL || cfg->group_stage1[0] == '\0' ? "group.stage1"
                                                                                : "group.stage2");
        return HC_ERR_INVALID;
    }
    /* One group for both stages would split partitions of two topics between unrelated loops
     * and mix their committed offsets. */
    if (strcmp(cfg->group_stage1, cfg->group_stage2) == 0) {
        hc_errstr_set(errstr, errstr_size,
                      "group.stage1 and group.stage2 are both \"%s\"; the stages need separate "
                      "consumer groups",
                      cfg->group_stage1);
        return HC_ERR_INVALID;
    }
    /* Stage 1 dead-letters an oversized event cut to event.max.bytes: that record, with its
     * headers, must fit in what the producer may send, or both sends fail and the stage stops. */
    const char *mmb_key = "message.max.bytes";
    int64_t mmb = PRODUCER_MESSAGE_MAX_BYTES;
    bool from_producer = false; /* kafka.producer.* is applied after kafka.*, so it wins */
    for (size_t i = 0; i < cfg->kafka_prop_count; i++) {
        const hc_kafka_prop_t *kp = &cfg->kafka_props[i];
        char *end;
        long long v;

        if (kp->scope == HC_KAFKA_CONSUMER || strcmp(kp->name, "message.max.bytes") != 0 ||
            (from_producer && kp->scope == HC_KAFKA_ALL)) {
            continue;
        }
        errno = 0;
        v = strtoll(kp->value, &end, 10);
        if (errno != 0 || end == kp->value || *end != '\0') {
            continue; /* librdkafka names it when the client is built */
        }
        mmb = (int64_t)v;
        from_producer = kp->scope == HC_KAFKA_PRODUCER;
        mmb_key = from_producer ? "kafka.producer.message.max.bytes" : "kafka.message.max.bytes";
    }
    if (cfg->event_max_bytes + DLQ_HEADER_ROOM > mmb) {
        hc_errstr_set(errstr, errstr_size,
                      "event.max.bytes=%" PRId64 " must stay %d bytes below %s=%" PRId64
                      " (the producer's limit%s): stage 1 dead-letters an oversized event cut to "
                      "event.max.bytes, with its headers, and a record the producer cannot send "
                      "stops it",
                      cfg->event_max_bytes, DLQ_HEADER_ROOM, mmb_key, mmb,
                      mmb_key[0] == 'k' ? "" : ", librdkafka's default");
        return HC_ERR_INVALID;
    }
    if (cfg->store_password != NULL && cfg->store_password[0] != '\0') {
        char shown[512];

        const hc_store_facts_t *f = hc_store_facts_find(cfg->stores, cfg->store);

        if (f == NULL || !f->takes_password_file) {
            char schemes[256];

            hc_store_facts_list(cfg->stores, HC_STORE_LIST_PASSWORD_SCHEMES, schemes,
                                sizeof(schemes));
            hc_errstr_set(errstr, errstr_size,
                          "store.password.file is for a %s store; this `store` takes no password",
                          schemes);
            return HC_ERR_INVALID;
        }
        /* Two passwords: which one wins would be a surprise either way. The URI holds one when
         * redacting it changes it. */
        hc_redact_uri(cfg->store, shown, sizeof(shown));
        if (strcmp(shown, cfg->store) != 0) {
            hc_errstr_set(errstr, errstr_size,
                          "store.password.file and a password in `store` (%s): give only one",
                          shown);
            return HC_ERR_INVALID;
        }
    }
    return hc_timeouts_derive(cfg, &cfg->timeouts, errstr, errstr_size);
}

bool hc_config_is_default(const hc_config_t *cfg, const char *key)
{
    const key_def_t *def = find_key(key);
    if (!def || !def->def) {
        return false;
    }
    if (def->type == KEY_STR) {
        const char *v = *str_slot_const(cfg, def);
        return v && strcmp(v, def->def) == 0;
    }
    const char *field = (const char *)cfg + def->offset;
    int64_t v = 0;
    if (def->type == KEY_I32) {
        int32_t v32;
        memcpy(&v32, field, sizeof(v32));
        v = v32;
    } else {
        memcpy(&v, field, sizeof(v));
    }
    return v == strtoll(def->def, NULL, 10);
}

/* The default as a user would write it, for --help. */
static const char *default_text(const key_def_t *def)
{
    if (def->def == NULL) {
        return INSTANCE_ID_DEFAULT_TEXT;
    }
    return def->def[0] == '\0' ? "\"\"" : def->def;
}

/* A key's description; the store keys' from the backends' facts, into buf. */
static const char *doc_of(const key_def_t *def, const hc_store_facts_t *const *stores, char *buf,
                          size_t size)
{
    char list[512];

    if (def->offset == offsetof(hc_config_t, store)) {
        hc_store_facts_list(stores, HC_STORE_LIST_FORMS, list, sizeof(list));
        snprintf(buf, size, "%s: %s", def->doc, list);
        return buf;
    }
    if (def->offset == offsetof(hc_config_t, store_password_file)) {
        hc_store_facts_list(stores, HC_STORE_LIST_PASSWORD_SCHEMES, list, sizeof(list));
        snprintf(buf, size, "%s (a %s store; then none in `store`); empty: none", def->doc, list);
        return buf;
    }
    return def->doc;
}

/* What --help and the reference say after the table. */
static const char rules_text[] =
    "Unknown keys are errors. kafka.* values go to librdkafka unchanged, e.g. "
    "-X kafka.security.protocol=SASL_SSL, except the settings exactly-once depends "
    "on (isolation.level, enable.auto.commit, enable.auto.offset.store, "
    "auto.offset.reset, transactional.id, enable.idempotence, acks, "
    "partition.assignment.strategy, group.id, ...), which hotcount sets itself and "
    "refuses to let a kafka.* key change. Keys that depend on each other (flush.ms and "
    "transaction.timeout.ms, watchdog.ms and the longest blocking call, ...) are "
    "checked together.";

void hc_config_print_help(FILE *out, const hc_store_facts_t *const *stores)
{
    char doc[1024];

    int name_width = (int)strlen("kafka.consumer.<prop>");
    int def_width = (int)strlen("default");

    for (size_t i = 0; i < KEY_COUNT; i++) {
        int n = (int)strlen(keys[i].name);
        int d = (int)strlen(default_text(&keys[i]));

        name_width = n > name_width ? n : name_width;
        def_width = d > def_width ? d : def_width;
    }

    fprintf(out, "Configuration (-c FILE with key=value lines, then -X key=value in order):\n");
    fprintf(out, "  %-*s  %-*s  %s\n", name_width, "key", def_width, "default", "description");
    for (size_t i = 0; i < KEY_COUNT; i++) {
        const key_def_t *def = &keys[i];

        fprintf(out, "  %-*s  %-*s  %s", name_width, def->name, def_width, default_text(def),
                doc_of(def, stores, doc, sizeof(doc)));
        if (def->type != KEY_STR) {
            fprintf(out, " [%" PRId64 "..%" PRId64 "]", def->min, def->max);
        }
        fputc('\n', out);
    }
    for (size_t i = 0; i < KAFKA_PREFIX_COUNT; i++) {
        char name[64];

        snprintf(name, sizeof(name), "%s<prop>", kafka_prefixes[i].prefix);
        fprintf(out, "  %-*s  %-*s  %s\n", name_width, name, def_width, "", kafka_prefixes[i].doc);
    }
    fprintf(out, "%s\n", rules_text);
}

void hc_config_print_example(FILE *out, const hc_store_facts_t *const *stores)
{
    char doc[1024];

    fprintf(out, "# hotcount configuration: key=value lines; '#' or '!' starts a comment.\n"
                 "# Every key is shown at its default. -X key=value on the command line overrides "
                 "this file.\n");
    for (size_t i = 0; i < KEY_COUNT; i++) {
        const key_def_t *def = &keys[i];

        fprintf(out, "\n# %s", doc_of(def, stores, doc, sizeof(doc)));
        if (def->type != KEY_STR) {
            fprintf(out, " [%" PRId64 "..%" PRId64 "]", def->min, def->max);
        }
        fputc('\n', out);
        if (def->def == NULL) {
            /* Computed per process: shown, but left commented so the file stays portable. */
            fprintf(out, "# default: %s\n#%s=\n", INSTANCE_ID_DEFAULT_TEXT, def->name);
        } else {
            fprintf(out, "%s=%s\n", def->name, def->def);
        }
    }
    fprintf(out, "\n# librdkafka properties, passed through unchanged (but for the settings "
                 "exactly-once\n# depends on, which hotcount sets itself and refuses to let "
                 "kafka.* change):\n");
    for (size_t i = 0; i < KAFKA_PREFIX_COUNT; i++) {
        char name[64];

        snprintf(name, sizeof(name), "%s<prop>=VALUE", kafka_prefixes[i].prefix);
        fprintf(out, "#   %-28s %s\n", name, kafka_prefixes[i].doc);
    }
    fprintf(out, "#kafka.security.protocol=SASL_SSL\n"
                 "#kafka.producer.linger.ms=5\n"
                 "#kafka.consumer.fetch.max.bytes=52428800\n");
}

/* Text for a Markdown table cell: `|` escaped everywhere (GitHub's tables need it even in code
 * spans), and a `<` that would open an HTML tag outside code spans (`<prefix>`). */
static void md_cell(FILE *out, const char *s)
{
    bool code = false;
    for (; *s; s++) {
        if (*s == '`') {
            code = !code;
        }
        if (*s == '|' || (*s == '<' && !code && (isalpha((unsigned char)s[1]) || s[1] == '/'))) {
            fputc('\\', out);
        }
        fputc(*s, out);
    }
}

void hc_config_print_markdown(FILE *out, const hc_store_facts_t *const *stores)
{
    char doc[1024];

    fprintf(out,
            "# Configuration reference\n\n"
            "<!-- Generated by `hotcount config --markdown` from the key table in "
            "src/base/config.c: edit the\n"
            "     table there, then run tools/gen-docs. The docs_generated test fails when this "
            "file differs. -->\n\n"
            "hotcount reads a properties file (`-c FILE`: `key=value` lines, `#` or `!` starts "
            "a comment), then\n"
            "each `-X key=value` in order; `hotcount config` prints a file with every key at "
            "its default.\n"
            "Numbers are decimal integers within the range shown (inclusive).\n\n"
            "| key | default | range | meaning |\n|---|---|---|---|\n");
    for (size_t i = 0; i < KEY_COUNT; i++) {
        const key_def_t *def = &keys[i];

        fprintf(out, "| `%s` | ", def->name);
        if (def->def == NULL) {
            fprintf(out, "`%s`", INSTANCE_ID_DEFAULT_TEXT);
        } else if (def->def[0] == '\0') {
            fputs("empty", out);
        } else {
            fprintf(out, "`%s`", def->def);
        }
        fputs(" | ", out);
        if (def->type != KEY_STR) {
            fprintf(out, "%" PRId64 "..%" PRId64 " ", def->min, def->max);
        }
        fputs("| ", out);
        md_cell(out, doc_of(def, stores, doc, sizeof(doc)));
        fputs(" |\n", out);
    }
    for (size_t i = 0; i < KAFKA_PREFIX_COUNT; i++) {
        fprintf(out, "| `%s<prop>` | | | ", kafka_prefixes[i].prefix);
        md_cell(out, kafka_prefixes[i].doc);
        fputs(" |\n", out);
    }
    fputc('\n', out);
    md_cell(out, rules_text);
    fputc('\n', out);
}
