/* Unit tests for src/base/config.c: defaults, per-type parsing, ranges, kafka.* passthrough,
 * properties files, cross-key validation, and the generated help and example file. */
#if !defined(_GNU_SOURCE) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L /* mkstemp, open_memstream */
#endif

/* cmocka.h needs these first. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hotcount/config.h"
#include "store_facts_stub.h"

#define ERRSTR_SIZE 512

static const char *const all_keys[] = {
    "brokers",
    "topic.raw",
    "topic.partials",
    "topic.dlq",
    "topic.counts",
    "topic.manifest",
    "topic.hotkeys",
    "topic.raw.partitions",
    "topic.partials.partitions",
    "topic.dlq.partitions",
    "topic.counts.partitions",
    "topic.manifest.partitions",
    "topic.hotkeys.partitions",
    "topic.replication.factor",
    "group.stage1",
    "group.stage2",
    "instance.id",
    "group.protocol",
    "group.static",
    "flush.ms",
    "salts",
    "max.keys",
    "partials.format",
    "partials.auth.key.file",
    "event.max.bytes",
    "store",
    "store.redis.prefix",
    "store.password.file",
    "store.check.ms",
    "hotkeys.enter.rate",
    "hotkeys.leave.rate",
    "hotkeys.dwell.ms",
    "hotkeys.max",
    "watchdog.ms",
    "partition.progress.ms",
    "stop.timeout.ms",
    "metrics.listen",
    "log.level",
    "log.format",
    "serve.listen",
    "serve.ttl.ms",
    "serve.max.ids",
    "serve.top.max",
    "serve.top.ttl.ms",
    "serve.cache.max.keys",
    "serve.threads",
    "serve.stages",
    "serve.max.connections",
    "serve.max.connections.per.ip",
    "serve.request.timeout.ms",
    "serve.stats.expose",
    "serve.hot.enter.rate",
    "serve.hot.leave.rate",
    "serve.hot.dwell.ms",
    "serve.hot.ttl.ms",
    "serve.hot.max",
    "serve.hot.follow",
};

#define ALL_KEY_COUNT (sizeof(all_keys) / sizeof(all_keys[0]))

/* Each test gets a fresh default config; teardown frees it, so ASan also checks ownership. */
static int setup(void **state)
{
    hc_config_t *cfg = malloc(sizeof(*cfg));

    if (cfg == NULL || hc_config_init(cfg, stub_stores) != HC_OK) {
        free(cfg);
        return -1;
    }
    *state = cfg;
    return 0;
}

static int teardown(void **state)
{
    hc_config_t *cfg = *state;

    hc_config_fini(cfg);
    free(cfg);
    return 0;
}

static void assert_configs_equal(const hc_config_t *a, const hc_config_t *b)
{
    assert_string_equal(a->brokers, b->brokers);
    assert_string_equal(a->topic_raw, b->topic_raw);
    assert_string_equal(a->topic_partials, b->topic_partials);
    assert_string_equal(a->topic_dlq, b->topic_dlq);
    assert_string_equal(a->topic_counts, b->topic_counts);
    assert_int_equal(a->topic_raw_partitions, b->topic_raw_partitions);
    assert_int_equal(a->topic_partials_partitions, b->topic_partials_partitions);
    assert_int_equal(a->topic_dlq_partitions, b->topic_dlq_partitions);
    assert_int_equal(a->topic_counts_partitions, b->topic_counts_partitions);
    assert_int_equal(a->topic_replication_factor, b->topic_replication_factor);
    assert_string_equal(a->group_stage1, b->group_stage1);
    assert_string_equal(a->group_stage2, b->group_stage2);
    assert_string_equal(a->instance_id, b->instance_id);
    assert_int_equal(a->flush_ms, b->flush_ms);
    assert_int_equal(a->salts, b->salts);
    assert_int_equal(a->max_keys, b->max_keys);
    assert_int_equal(a->event_max_bytes, b->event_max_bytes);
    assert_string_equal(a->store, b->store);
    assert_string_equal(a->store_redis_prefix, b->store_redis_prefix);
    assert_string_equal(a->metrics_listen, b->metrics_listen);
    assert_string_equal(a->log_level, b->log_level);
    assert_string_equal(a->log_format, b->log_format);
    assert_int_equal(a->kafka_prop_count, b->kafka_prop_count);
    for (size_t i = 0; i < a->kafka_prop_count; i++) {
        assert_int_equal(a->kafka_props[i].scope, b->kafka_props[i].scope);
        assert_string_equal(a->kafka_props[i].name, b->kafka_props[i].name);
        assert_string_equal(a->kafka_props[i].value, b->kafka_props[i].value);
    }
}

/* Writes text to a new temporary file; the caller unlinks path. */
static void write_temp_file(char *path, size_t path_size, const char *text)
{
    FILE *fp;
    int fd;

    snprintf(path, path_size, "%s", "/tmp/hc_test_config_XXXXXX");
    fd = mkstemp(path);
    assert_true(fd >= 0);
    fp = fdopen(fd, "w");
    assert_non_null(fp);
    assert_int_equal(fputs(text, fp) >= 0, 1);
    assert_int_equal(fclose(fp), 0);
}

static hc_err_t load_text(hc_config_t *cfg, const char *text, char *path, size_t path_size,
                          char *errstr)
{
    hc_err_t err;

    write_temp_file(path, path_size, text);
    err = hc_config_load_file(cfg, path, errstr, ERRSTR_SIZE);
    unlink(path);
    return err;
}

static void assert_set_fails(hc_config_t *cfg, const char *key, const char *value,
                             const char *expected_errstr)
{
    char errstr[ERRSTR_SIZE] = "";

    assert_int_equal(hc_config_set(cfg, key, value, errstr, sizeof(errstr)), HC_ERR_INVALID);
    assert_string_equal(errstr, expected_errstr);
}

static void set_ok(hc_config_t *cfg, const char *key, const char *value)
{
    char errstr[ERRSTR_SIZE] = "";
    hc_err_t err = hc_config_set(cfg, key, value, errstr, sizeof(errstr));

    if (err != HC_OK) {
        fail_msg("%s=%s: %s", key, value, errstr);
    }
}

/* ---- defaults ---- */

static void init_sets_documented_defaults(void **state)
{
    hc_config_t *cfg = *state;

    assert_string_equal(cfg->brokers, "127.0.0.1:9092");
    assert_string_equal(cfg->topic_raw, "likes.raw");
    assert_string_equal(cfg->topic_partials, "likes.partials");
    assert_string_equal(cfg->topic_dlq, "likes.dlq");
    assert_string_equal(cfg->topic_counts, "");
    assert_int_equal(cfg->topic_raw_partitions, 16);
    assert_int_equal(cfg->topic_partials_partitions, 8);
    assert_int_equal(cfg->topic_dlq_partitions, 4);
    assert_int_equal(cfg->topic_counts_partitions, 8);
    assert_int_equal(cfg->topic_replication_factor, -1);
    assert_string_equal(cfg->group_stage1, "hotcount-stage1");
    assert_string_equal(cfg->group_stage2, "hotcount-stage2");
    assert_int_equal(cfg->flush_ms, 1000);
    assert_int_equal(cfg->salts, 16);
    assert_int_equal(cfg->max_keys, 1000000);
    assert_int_equal(cfg->event_max_bytes, 4096);
    assert_string_equal(cfg->store, "sqlite:hotcount.db");
    assert_string_equal(cfg->store_redis_prefix, "likes:");
    assert_string_equal(cfg->metrics_listen, "127.0.0.1:9464");
    assert_string_equal(cfg->log_level, "info");
    assert_string_equal(cfg->log_format, "text");
    assert_null(cfg->kafka_props);
    assert_int_equal(cfg->kafka_prop_count, 0);
}

static void init_derives_instance_id_from_host_and_pid(void **state)
{
    hc_config_t *cfg = *state;
    char suffix[32];
    size_t len = strlen(cfg->instance_id);
    size_t suffix_len;

    snprintf(suffix, sizeof(suffix), "-%ld", (long)getpid());
    suffix_len = strlen(suffix);
    assert_true(len > suffix_len);
    assert_string_equal(cfg->instance_id + len - suffix_len, suffix);
    /* The default must itself be a valid instance.id. */
    assert_int_equal(strspn(cfg->instance_id, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                              "0123456789._-"),
                     len);
}

static void fini_accepts_null_and_zeroed_config(void **state)
{
    hc_config_t zeroed;

    (void)state;
    memset(&zeroed, 0, sizeof(zeroed));
    hc_config_fini(NULL);
    hc_config_fini(&zeroed);
    hc_config_fini(&zeroed); /* fini leaves it zeroed: a second call is harmless */
}

static void defaults_pass_validation(void **state)
{
    char errstr[ERRSTR_SIZE] = "";

    assert_int_equal(hc_config_validate(*state, errstr, sizeof(errstr)), HC_OK);
}

/* ---- hc_config_set: keys and strings ---- */

static void set_rejects_unknown_key_naming_it(void **state)
{
    assert_set_fails(*state, "flush.msx", "5", "unknown configuration key \"flush.msx\"");
    assert_set_fails(*state, "kafka", "x", "unknown configuration key \"kafka\"");
    assert_set_fails(*state, "", "x", "unknown configuration key \"\"");
}

static void set_replaces_string_value(void **state)
{
    hc_config_t *cfg = *state;

    set_ok(cfg, "brokers", "k1:9092,k2:9092");
    assert_string_equal(cfg->brokers, "k1:9092,k2:9092");
    set_ok(cfg, "topic.counts", "likes.counts");
    assert_string_equal(cfg->topic_counts, "likes.counts");
    set_ok(cfg, "topic.counts", "");
    assert_string_equal(cfg->topic_counts, "");
    set_ok(cfg, "store.redis.prefix", "");
    assert_string_equal(cfg->store_redis_prefix, "");
}

static void set_rejects_empty_required_strings(void **state)
{
    assert_set_fails(*state, "brokers", "", "brokers: must not be empty");
    assert_set_fails(*state, "topic.raw", "", "topic.raw: must not be empty");
    assert_set_fails(*state, "group.stage2", "", "group.stage2: must not be empty");
}

static void set_instance_id_accepts_portable_names(void **state)
{
    hc_config_t *cfg = *state;

    set_ok(cfg, "instance.id", "web-1.eu_west");
    assert_string_equal(cfg->instance_id, "web-1.eu_west");
}

static void set_instance_id_rejects_empty_and_other_characters(void **state)
{
    char errstr[ERRSTR_SIZE];

    assert_set_fails(*state, "instance.id", "", "instance.id: must not be empty");
    assert_int_equal(hc_config_set(*state, "instance.id", "web 1", errstr, sizeof(errstr)),
                     HC_ERR_INVALID);
    assert_non_null(strstr(errstr, "instance.id: \"web 1\" may only contain"));
    assert_int_equal(hc_config_set(*state, "instance.id", "a/b", errstr, sizeof(errstr)),
                     HC_ERR_INVALID);
    assert_int_equal(hc_config_set(*state, "instance.id", "caf\xc3\xa9", errstr, sizeof(errstr)),
                     HC_ERR_INVALID);
}

static void set_store_accepts_known_schemes(void **state)
{
    static const char *const stores[] = {
        "sqlite:/var/lib/hotcount.db",
        "sqlite::memory:",
        "redis://127.0.0.1:6379/0",
        "redis://:secret@redis:6379",
        "postgresql://user@db/hotcount",
        "postgres://db",
        "postgresql://",
    };
    hc_config_t *cfg = *state;

    for (size_t i = 0; i < sizeof(stores) / sizeof(stores[0]); i++) {
        set_ok(cfg, "store", stores[i]);
        assert_string_equal(cfg->store, stores[i]);
    }
}

static void set_store_rejects_unknown_scheme_naming_key(void **state)
{
    char errstr[ERRSTR_SIZE];

    assert_int_equal(hc_config_set(*state, "store", "mysql://db", errstr, sizeof(errstr)),
                     HC_ERR_INVALID);
    assert_non_null(strstr(errstr, "store: \"mysql://db\" is not a supported store"));
    assert_int_equal(hc_config_set(*state, "store", "hotcount.db", errstr, sizeof(errstr)),
                     HC_ERR_INVALID);
    assert_int_equal(hc_config_set(*state, "store", "", errstr, sizeof(errstr)), HC_ERR_INVALID);
    assert_int_equal(hc_config_set(*state, "store", "redis:/x", errstr, sizeof(errstr)),
                     HC_ERR_INVALID);
    assert_set_fails(*state, "store",
                     "sqlite:", "store: \"sqlite:\" needs a file path (sqlite:PATH)");
}

static void set_metrics_listen_accepts_host_port_or_empty(void **state)
{
    hc_config_t *cfg = *state;

    set_ok(cfg, "metrics.listen", "0.0.0.0:1");
    set_ok(cfg, "metrics.listen", "localhost:65535");
    set_ok(cfg, "metrics.listen", "[::1]:9464");
    assert_string_equal(cfg->metrics_listen, "[::1]:9464");
    set_ok(cfg, "metrics.listen", "");
    assert_string_equal(cfg->metrics_listen, "");
    set_ok(cfg, "metrics.listen", "127.0.0.1:0"); /* a free port, for tests */
    assert_string_equal(cfg->metrics_listen, "127.0.0.1:0");
}

static void set_serve_keys_name_the_key_when_bad(void **state)
{
    hc_config_t *cfg = *state;

    assert_string_equal(cfg->serve_listen, "127.0.0.1:8080");
    assert_int_equal(cfg->serve_ttl_ms, 20);
    assert_string_equal(cfg->serve_stages, "");
    assert_set_fails(cfg, "serve.listen", "", "serve.listen: must not be empty");
    assert_set_fails(cfg, "serve.listen", "h:70000",
                     "serve.listen: \"h:70000\" is not host:port with a port in 0..65535");
    set_ok(cfg, "serve.stages", "127.0.0.1:9464,[::1]:9465,stage2:1");
    assert_string_equal(cfg->serve_stages, "127.0.0.1:9464,[::1]:9465,stage2:1");
    assert_set_fails(cfg, "serve.stages", "a:1,", "serve.stages: \"a:1,\" ends with a comma");
    assert_set_fails(cfg, "serve.stages", "a:1,,b:2",
                     "serve.stages: \"a:1,,b:2\" is not host:port[,host:port...]");
    assert_set_fails(cfg, "serve.stages", "a:1,b",
                     "serve.stages: \"b\" is not host:port with a port in 0..65535");
    char errstr[ERRSTR_SIZE] = "";
    assert_int_equal(hc_config_set(cfg, "serve.ttl.ms", "0", errstr, sizeof(errstr)),
                     HC_ERR_INVALID);
    assert_non_null(strstr(errstr, "serve.ttl.ms"));
    assert_int_equal(hc_config_set(cfg, "serve.max.ids", "10001", errstr, sizeof(errstr)),
                     HC_ERR_INVALID);
    assert_non_null(strstr(errstr, "serve.max.ids"));
}

static void validate_rejects_leave_rate_not_below_enter_rate(void **state)
{
    char errstr[ERRSTR_SIZE];

    set_ok(*state, "hotkeys.enter.rate", "100");
    set_ok(*state, "hotkeys.leave.rate", "100");
    assert_int_equal(hc_config_validate(*state, errstr, sizeof(errstr)), HC_ERR_INVALID);
    assert_non_null(strstr(errstr, "hotkeys.leave.rate"));
    set_ok(*state, "hotkeys.leave.rate", "99");
    assert_int_equal(hc_config_validate(*state, errstr, sizeof(errstr)), HC_OK);
}

static void validate_rejects_serve_hot_leave_not_below_enter_naming_both(void **state)
{
    char errstr[ERRSTR_SIZE];

    set_ok(*state, "serve.hot.enter.rate", "100");
    set_ok(*state, "serve.hot.leave.rate", "100");
    assert_int_equal(hc_config_validate(*state, errstr, sizeof(errstr)), HC_ERR_INVALID);
    assert_non_null(strstr(errstr, "serve.hot.leave.rate"));
    assert_non_null(strstr(errstr, "serve.hot.enter.rate"));
    set_ok(*state, "serve.hot.leave.rate", "99");
    assert_int_equal(hc_config_validate(*state, errstr, sizeof(errstr)), HC_OK);
}

static void validate_rejects_serve_hot_ttl_below_serve_ttl_naming_both(void **state)
{
    char errstr[ERRSTR_SIZE];

    set_ok(*state, "serve.ttl.ms", "500");
    set_ok(*state, "serve.hot.ttl.ms", "499");
    assert_int_equal(hc_config_validate(*state, errstr, sizeof(errstr)), HC_ERR_INVALID);
    assert_non_null(strstr(errstr, "serve.hot.ttl.ms"));
    assert_non_null(strstr(errstr, "serve.ttl.ms"));
    set_ok(*state, "serve.hot.ttl.ms", "500");
    assert_int_equal(hc_config_validate(*state, errstr, sizeof(errstr)), HC_OK);
    /* left at its default (1000 ms), it gives way to a longer serve.ttl.ms */
    hc_config_t *cfg = *state;
    hc_config_fini(cfg);
    assert_int_equal(hc_config_init(cfg, stub_stores), HC_OK);
    set_ok(cfg, "serve.ttl.ms", "5000");
    assert_int_equal(hc_config_validate(cfg, errstr, sizeof(errstr)), HC_OK);
    assert_true(hc_config_is_default(cfg, "serve.hot.ttl.ms"));
    assert_false(hc_config_is_default(cfg, "serve.ttl.ms"));
    assert_true(hc_config_is_default(cfg, "brokers"));
}

static void set_serve_hot_keys_checks_ranges_naming_key(void **state)
{
    char errstr[ERRSTR_SIZE];

    assert_int_equal(hc_config_set(*state, "serve.hot.max", "4097", errstr, sizeof(errstr)),
                     HC_ERR_INVALID);
    assert_non_null(strstr(errstr, "serve.hot.max"));
    assert_int_equal(hc_config_set(*state, "serve.hot.enter.rate", "0", errstr, sizeof(errstr)),
                     HC_ERR_INVALID);
    assert_non_null(strstr(errstr, "serve.hot.enter.rate"));
    assert_int_equal(hc_config_set(*state, "serve.hot.follow", "2", errstr, sizeof(errstr)),
                     HC_ERR_INVALID);
    assert_non_null(strstr(errstr, "serve.hot.follow"));
}

static void set_metrics_listen_rejects_bad_port_naming_key(void **state)
{
    static const char *const bad[] = {"9464",     ":9464",   "host:",    "host:65536",
                                      "host:94x", "host:-1", "host:+80", "host:000080"};
    char errstr[ERRSTR_SIZE];

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        errstr[0] = '\0';
        assert_int_equal(hc_config_set(*state, "metrics.listen", bad[i], errstr, sizeof(errstr)),
                         HC_ERR_INVALID);
        assert_non_null(strstr(errstr, "metrics.listen: \""));
    }
}

static void set_log_level_and_format_accept_only_known_names(void **state)
{
    hc_config_t *cfg = *state;

    set_ok(cfg, "log.level", "debug");
    assert_string_equal(cfg->log_level, "debug");
    set_ok(cfg, "log.format", "json");
    assert_string_equal(cfg->log_format, "json");
    assert_set_fails(cfg, "log.level", "verbose",
                     "log.level: \"verbose\" is not a log level (error, warn, info or debug)");
    assert_set_fails(cfg, "log.format", "xml",
                     "log.format: \"xml\" is not a log format (text or json)");
    assert_string_equal(cfg->log_level, "debug");
    assert_string_equal(cfg->log_format, "json");
}

/* ---- hc_config_set: integers ---- */

static void set_parses_integer_fields(void **state)
{
    hc_config_t *cfg = *state;

    set_ok(cfg, "flush.ms", "250");
    assert_int_equal(cfg->flush_ms, 250);
    set_ok(cfg, "salts", "64");
    assert_int_equal(cfg->salts, 64);
    set_ok(cfg, "max.keys", "100000000");
    assert_int_equal(cfg->max_keys, 100000000);
    set_ok(cfg, "event.max.bytes", "65536");
    assert_int_equal(cfg->event_max_bytes, 65536);
    set_ok(cfg, "topic.raw.partitions", "100000");
    assert_int_equal(cfg->topic_raw_partitions, 100000);
    set_ok(cfg, "topic.partials.partitions", "1");
    assert_int_equal(cfg->topic_partials_partitions, 1);
    set_ok(cfg, "topic.dlq.partitions", "2");
    assert_int_equal(cfg->topic_dlq_partitions, 2);
    set_ok(cfg, "topic.counts.partitions", "3");
    assert_int_equal(cfg->topic_counts_partitions, 3);
    set_ok(cfg, "topic.replication.factor", "3");
    assert_int_equal(cfg->topic_replication_factor, 3);
    /* Neighbouring fields were not touched by the narrower writes. */
    assert_int_equal(cfg->topic_raw_partitions, 100000);
}

static void set_rejects_non_integer_naming_key(void **state)
{
    assert_set_fails(*state, "flush.ms", "abc", "flush.ms: \"abc\" is not an integer");
    assert_set_fails(*state, "flush.ms", "", "flush.ms: \"\" is not an integer");
    assert_set_fails(*state, "flush.ms", "12x", "flush.ms: \"12x\" is not an integer");
    assert_set_fails(*state, "flush.ms", "1.5", "flush.ms: \"1.5\" is not an integer");
    assert_set_fails(*state, "flush.ms", " 100", "flush.ms: \" 100\" is not an integer");
    assert_set_fails(*state, "flush.ms", "100 ", "flush.ms: \"100 \" is not an integer");
    assert_set_fails(*state, "salts", "0x10", "salts: \"0x10\" is not an integer");
    assert_set_fails(*state, "salts", "-", "salts: \"-\" is not an integer");
}

static void set_rejects_integer_overflow_naming_key(void **state)
{
    assert_set_fails(*state, "max.keys", "99999999999999999999",
                     "max.keys: \"99999999999999999999\" is out of range (1..100000000)");
    assert_set_fails(*state, "max.keys", "-99999999999999999999",
                     "max.keys: \"-99999999999999999999\" is out of range (1..100000000)");
    /* Fits in int64_t but not in the int32_t field: the range check must catch it. */
    assert_set_fails(*state, "salts", "4294967312", "salts: 4294967312 is above the maximum 65536");
}

static void set_rejects_values_outside_range(void **state)
{
    assert_set_fails(*state, "flush.ms", "5", "flush.ms: 5 is below the minimum 10");
    assert_set_fails(*state, "flush.ms", "3600001",
                     "flush.ms: 3600001 is above the maximum 3600000");
    assert_set_fails(*state, "salts", "0", "salts: 0 is below the minimum 1");
    assert_set_fails(*state, "salts", "65537", "salts: 65537 is above the maximum 65536");
    assert_set_fails(*state, "max.keys", "0", "max.keys: 0 is below the minimum 1");
    assert_set_fails(*state, "event.max.bytes", "63",
                     "event.max.bytes: 63 is below the minimum 64");
    assert_set_fails(*state, "event.max.bytes", "1048577",
                     "event.max.bytes: 1048577 is above the maximum 1048576");
    assert_set_fails(*state, "topic.raw.partitions", "0",
                     "topic.raw.partitions: 0 is below the minimum 1");
    assert_set_fails(*state, "topic.dlq.partitions", "100001",
                     "topic.dlq.partitions: 100001 is above the maximum 100000");
}

static void set_accepts_range_bounds(void **state)
{
    hc_config_t *cfg = *state;

    set_ok(cfg, "flush.ms", "10");
    assert_int_equal(cfg->flush_ms, 10);
    set_ok(cfg, "flush.ms", "3600000");
    assert_int_equal(cfg->flush_ms, 3600000);
    set_ok(cfg, "salts", "1");
    set_ok(cfg, "salts", "65536");
    assert_int_equal(cfg->salts, 65536);
    set_ok(cfg, "event.max.bytes", "64");
    set_ok(cfg, "event.max.bytes", "1048576");
    assert_int_equal(cfg->event_max_bytes, 1048576);
}

static void set_replication_factor_accepts_minus_one_and_rejects_zero(void **state)
{
    hc_config_t *cfg = *state;

    set_ok(cfg, "topic.replication.factor", "32767");
    assert_int_equal(cfg->topic_replication_factor, 32767);
    set_ok(cfg, "topic.replication.factor", "-1");
    assert_int_equal(cfg->topic_replication_factor, -1);
    assert_set_fails(cfg, "topic.replication.factor", "0",
                     "topic.replication.factor: 0 is not a replication factor (-1 for the "
                     "broker's default, or 1..32767)");
    assert_set_fails(cfg, "topic.replication.factor", "-2",
                     "topic.replication.factor: -2 is below the minimum -1");
    assert_set_fails(cfg, "topic.replication.factor", "32768",
                     "topic.replication.factor: 32768 is above the maximum 32767");
}

static void set_leaves_config_unchanged_on_error(void **state)
{
    hc_config_t *cfg = *state;
    hc_config_t before;
    char errstr[ERRSTR_SIZE];

    set_ok(cfg, "kafka.linger.ms", "5");
    assert_int_equal(hc_config_init(&before, stub_stores), HC_OK);
    set_ok(&before, "kafka.linger.ms", "5");
    set_ok(&before, "instance.id", cfg->instance_id);

    assert_int_equal(hc_config_set(cfg, "flush.ms", "abc", errstr, sizeof(errstr)), HC_ERR_INVALID);
    assert_int_equal(hc_config_set(cfg, "flush.ms", "1", errstr, sizeof(errstr)), HC_ERR_INVALID);
    assert_int_equal(hc_config_set(cfg, "salts", "0", errstr, sizeof(errstr)), HC_ERR_INVALID);
    assert_int_equal(hc_config_set(cfg, "store", "bogus", errstr, sizeof(errstr)), HC_ERR_INVALID);
    assert_int_equal(hc_config_set(cfg, "instance.id", "a b", errstr, sizeof(errstr)),
                     HC_ERR_INVALID);
    assert_int_equal(hc_config_set(cfg, "nope", "1", errstr, sizeof(errstr)), HC_ERR_INVALID);
    assert_int_equal(hc_config_set(cfg, "kafka.", "1", errstr, sizeof(errstr)), HC_ERR_INVALID);
    assert_configs_equal(cfg, &before);
    hc_config_fini(&before);
}

static void set_tolerates_null_errstr(void **state)
{
    assert_int_equal(hc_config_set(*state, "flush.ms", "abc", NULL, 0), HC_ERR_INVALID);
    assert_int_equal(hc_config_set(*state, "nope", "1", NULL, 0), HC_ERR_INVALID);
}

/* ---- kafka.* passthrough ---- */

static void set_kafka_props_strip_prefix_and_keep_scope_in_order(void **state)
{
    hc_config_t *cfg = *state;

    set_ok(cfg, "kafka.security.protocol", "SASL_SSL");
    set_ok(cfg, "kafka.consumer.fetch.max.bytes", "52428800");
    set_ok(cfg, "kafka.producer.linger.ms", "5");
    set_ok(cfg, "kafka.sasl.password", "");

    assert_int_equal(cfg->kafka_prop_count, 4);
    assert_int_equal(cfg->kafka_props[0].scope, HC_KAFKA_ALL);
    assert_string_equal(cfg->kafka_props[0].name, "security.protocol");
    assert_string_equal(cfg->kafka_props[0].value, "SASL_SSL");
    assert_int_equal(cfg->kafka_props[1].scope, HC_KAFKA_CONSUMER);
    assert_string_equal(cfg->kafka_props[1].name, "fetch.max.bytes");
    assert_string_equal(cfg->kafka_props[1].value, "52428800");
    assert_int_equal(cfg->kafka_props[2].scope, HC_KAFKA_PRODUCER);
    assert_string_equal(cfg->kafka_props[2].name, "linger.ms");
    assert_string_equal(cfg->kafka_props[2].value, "5");
    assert_int_equal(cfg->kafka_props[3].scope, HC_KAFKA_ALL);
    assert_string_equal(cfg->kafka_props[3].name, "sasl.password");
    assert_string_equal(cfg->kafka_props[3].value, "");
}

static void set_kafka_prop_repeated_replaces_value_in_place(void **state)
{
    hc_config_t *cfg = *state;

    set_ok(cfg, "kafka.linger.ms", "5");
    set_ok(cfg, "kafka.producer.linger.ms", "7");
    set_ok(cfg, "kafka.client.id", "a");
    set_ok(cfg, "kafka.linger.ms", "10");

    /* Same prop in another scope is a separate entry; same scope+prop is replaced where it is. */
    assert_int_equal(cfg->kafka_prop_count, 3);
    assert_int_equal(cfg->kafka_props[0].scope, HC_KAFKA_ALL);
    assert_string_equal(cfg->kafka_props[0].name, "linger.ms");
    assert_string_equal(cfg->kafka_props[0].value, "10");
    assert_int_equal(cfg->kafka_props[1].scope, HC_KAFKA_PRODUCER);
    assert_string_equal(cfg->kafka_props[1].value, "7");
    assert_string_equal(cfg->kafka_props[2].name, "client.id");
}

static void set_kafka_prop_rejects_empty_name(void **state)
{
    hc_config_t *cfg = *state;

    assert_set_fails(cfg, "kafka.", "x",
                     "kafka.: the librdkafka property name is missing (kafka.<prop>)");
    assert_set_fails(cfg, "kafka.consumer.", "x",
                     "kafka.consumer.: the librdkafka property name is missing "
                     "(kafka.consumer.<prop>)");
    assert_set_fails(cfg, "kafka.producer.", "x",
                     "kafka.producer.: the librdkafka property name is missing "
                     "(kafka.producer.<prop>)");
    assert_int_equal(cfg->kafka_prop_count, 0);
}

/* ---- hc_config_set_kv ---- */

static void set_kv_splits_at_first_equals(void **state)
{
    hc_config_t *cfg = *state;
    char errstr[ERRSTR_SIZE] = "";

    assert_int_equal(hc_config_set_kv(cfg, "kafka.sasl.password=a=b", errstr, sizeof(errstr)),
                     HC_OK);
    assert_string_equal(cfg->kafka_props[0].name, "sasl.password");
    assert_string_equal(cfg->kafka_props[0].value, "a=b");
    assert_int_equal(hc_config_set_kv(cfg, "flush.ms=200", errstr, sizeof(errstr)), HC_OK);
    assert_int_equal(cfg->flush_ms, 200);
    assert_int_equal(hc_config_set_kv(cfg, "topic.counts=", errstr, sizeof(errstr)), HC_OK);
    assert_string_equal(cfg->topic_counts, "");
}

static void set_kv_rejects_missing_equals_naming_argument(void **state)
{
    char errstr[ERRSTR_SIZE] = "";

    assert_int_equal(hc_config_set_kv(*state, "flush.ms", errstr, sizeof(errstr)), HC_ERR_INVALID);
    assert_string_equal(errstr, "\"flush.ms\": expected key=value");
    assert_int_equal(hc_config_set_kv(*state, "=5", errstr, sizeof(errstr)), HC_ERR_INVALID);
    assert_string_equal(errstr, "\"=5\": missing key before '='");
}

static void set_kv_reports_key_errors(void **state)
{
    char errstr[ERRSTR_SIZE] = "";

    assert_int_equal(hc_config_set_kv(*state, "flush.ms=abc", errstr, sizeof(errstr)),
                     HC_ERR_INVALID);
    assert_string_equal(errstr, "flush.ms: \"abc\" is not an integer");
    assert_int_equal(hc_config_set_kv(*state, "flushms=1", errstr, sizeof(errstr)), HC_ERR_INVALID);
    assert_string_equal(errstr, "unknown configuration key \"flushms\"");
}

/* ---- hc_config_load_file ---- */

static void load_file_applies_keys_skipping_comments_and_blank_lines(void **state)
{
    hc_config_t *cfg = *state;
    char path[64];
    char errstr[ERRSTR_SIZE] = "";

    assert_int_equal(load_text(cfg,
                               "# a comment\n"
                               "! also a comment\n"
                               "\n"
                               "   \t\n"
                               "   # indented comment = not a key\n"
                               "flush.ms=250\n"
                               "  salts  =  32  \n"
                               "\tbrokers\t=\tk1:9092 \n"
                               "kafka.consumer.fetch.wait.max.ms = 100\n"
                               "store.redis.prefix=\n"
                               "flush.ms=300\n"
                               "log.level=debug",
                               path, sizeof(path), errstr),
                     HC_OK);
    assert_string_equal(errstr, "");
    assert_int_equal(cfg->flush_ms, 300); /* the later line wins */
    assert_int_equal(cfg->salts, 32);
    assert_string_equal(cfg->brokers, "k1:9092");
    assert_string_equal(cfg->store_redis_prefix, "");
    assert_string_equal(cfg->log_level, "debug"); /* last line without a newline */
    assert_int_equal(cfg->kafka_prop_count, 1);
    assert_int_equal(cfg->kafka_props[0].scope, HC_KAFKA_CONSUMER);
    assert_string_equal(cfg->kafka_props[0].name, "fetch.wait.max.ms");
    assert_string_equal(cfg->kafka_props[0].value, "100");
}

static void load_file_accepts_crlf_line_endings(void **state)
{
    hc_config_t *cfg = *state;
    char path[64];
    char errstr[ERRSTR_SIZE] = "";

    assert_int_equal(
        load_text(cfg, "# windows\r\nflush.ms=20\r\ntopic.raw=raw\r\n", path, sizeof(path), errstr),
        HC_OK);
    assert_int_equal(cfg->flush_ms, 20);
    assert_string_equal(cfg->topic_raw, "raw");
}

static void load_file_keeps_equals_and_hash_inside_values(void **state)
{
    hc_config_t *cfg = *state;
    char path[64];
    char errstr[ERRSTR_SIZE] = "";

    assert_int_equal(load_text(cfg,
                               "kafka.sasl.jaas.config=a=b # not a comment\n"
                               "store=postgresql://u:p#w@db/hc?sslmode=require\n",
                               path, sizeof(path), errstr),
                     HC_OK);
    assert_string_equal(cfg->kafka_props[0].value, "a=b # not a comment");
    assert_string_equal(cfg->store, "postgresql://u:p#w@db/hc?sslmode=require");
}

static void load_file_reports_file_and_line_of_line_without_equals(void **state)
{
    char path[64];
    char errstr[ERRSTR_SIZE] = "";
    char expected[ERRSTR_SIZE];

    assert_int_equal(
        load_text(*state, "# header\n\nflush.ms=100\nsalts 8\n", path, sizeof(path), errstr),
        HC_ERR_INVALID);
    snprintf(expected, sizeof(expected), "%s:4: expected key=value, got \"salts 8\"", path);
    assert_string_equal(errstr, expected);
}

static void load_file_reports_file_line_and_key_of_bad_value(void **state)
{
    char path[64];
    char errstr[ERRSTR_SIZE] = "";
    char expected[ERRSTR_SIZE];

    assert_int_equal(
        load_text(*state, "salts=8\n! comment\n  flush.ms = 5 \n", path, sizeof(path), errstr),
        HC_ERR_INVALID);
    snprintf(expected, sizeof(expected), "%s:3: flush.ms: 5 is below the minimum 10", path);
    assert_string_equal(errstr, expected);

    assert_int_equal(load_text(*state, "\n\nflush.msx=5\n", path, sizeof(path), errstr),
                     HC_ERR_INVALID);
    snprintf(expected, sizeof(expected), "%s:3: unknown configuration key \"flush.msx\"", path);
    assert_string_equal(errstr, expected);

    assert_int_equal(load_text(*state, " = 5\n", path, sizeof(path), errstr), HC_ERR_INVALID);
    snprintf(expected, sizeof(expected), "%s:1: missing key before '='", path);
    assert_string_equal(errstr, expected);
}

static void load_file_leaves_config_unchanged_on_error(void **state)
{
    hc_config_t *cfg = *state;
    hc_config_t before;
    char path[64];
    char errstr[ERRSTR_SIZE] = "";

    assert_int_equal(hc_config_init(&before, stub_stores), HC_OK);
    set_ok(&before, "instance.id", cfg->instance_id);

    /* Earlier good lines must not stick when a later line fails. */
    assert_int_equal(load_text(cfg,
                               "flush.ms=100\nkafka.linger.ms=5\nbrokers=x:1\ntopic.raw=r\n"
                               "salts=nope\n",
                               path, sizeof(path), errstr),
                     HC_ERR_INVALID);
    assert_configs_equal(cfg, &before);
    hc_config_fini(&before);
}

static void load_file_keeps_earlier_kafka_props_and_appends(void **state)
{
    hc_config_t *cfg = *state;
    char path[64];
    char errstr[ERRSTR_SIZE] = "";

    set_ok(cfg, "kafka.linger.ms", "5");
    assert_int_equal(
        load_text(cfg, "kafka.linger.ms=9\nkafka.acks=all\n", path, sizeof(path), errstr), HC_OK);
    assert_int_equal(cfg->kafka_prop_count, 2);
    assert_string_equal(cfg->kafka_props[0].value, "9");
    assert_string_equal(cfg->kafka_props[1].name, "acks");
}

static void load_file_rejects_unreadable_file_with_strerror(void **state)
{
    char errstr[ERRSTR_SIZE] = "";

    assert_int_equal(
        hc_config_load_file(*state, "/nonexistent/hotcount.properties", errstr, sizeof(errstr)),
        HC_ERR_INVALID);
    assert_string_equal(errstr, "/nonexistent/hotcount.properties: No such file or directory");

    assert_int_equal(hc_config_load_file(*state, "/tmp", errstr, sizeof(errstr)), HC_ERR_INVALID);
    assert_string_equal(errstr, "/tmp: Is a directory");
}

/* ---- hc_config_validate ---- */

static void validate_rejects_duplicate_topics_naming_both_keys(void **state)
{
    hc_config_t *cfg = *state;
    char errstr[ERRSTR_SIZE] = "";

    set_ok(cfg, "topic.dlq", "likes.raw");
    assert_int_equal(hc_config_validate(cfg, errstr, sizeof(errstr)), HC_ERR_INVALID);
    assert_string_equal(
        errstr, "topic.raw and topic.dlq are both \"likes.raw\"; every topic must be distinct");

    set_ok(cfg, "topic.dlq", "likes.dlq");
    set_ok(cfg, "topic.counts", "likes.partials");
    assert_int_equal(hc_config_validate(cfg, errstr, sizeof(errstr)), HC_ERR_INVALID);
    assert_non_null(strstr(errstr, "topic.partials and topic.counts"));

    set_ok(cfg, "topic.counts", "likes.counts");
    assert_int_equal(hc_config_validate(cfg, errstr, sizeof(errstr)), HC_OK);
}

static void validate_rejects_empty_required_topic(void **state)
{
    hc_config_t *cfg = *state;
    char errstr[ERRSTR_SIZE] = "";
    char *saved = cfg->topic_partials;

    /* hc_config_set refuses "", but validate is the cross-key check and must not trust that. */
    cfg->topic_partials = (char *)"";
    assert_int_equal(hc_config_validate(cfg, errstr, sizeof(errstr)), HC_ERR_INVALID);
    assert_string_equal(errstr, "topic.partials: must not be empty");
    cfg->topic_partials = saved;
}

static void validate_rejects_same_group_for_both_stages(void **state)
{
    hc_config_t *cfg = *state;
    char errstr[ERRSTR_SIZE] = "";

    set_ok(cfg, "group.stage2", "hotcount-stage1");
    assert_int_equal(hc_config_validate(cfg, errstr, sizeof(errstr)), HC_ERR_INVALID);
    assert_string_equal(errstr, "group.stage1 and group.stage2 are both \"hotcount-stage1\"; the "
                                "stages need separate consumer groups");
}

/* ---- secrets never quoted back (issue 16) ---- */

#define SECRET "s3cr3t-PW"

static void assert_no_secret(const char *errstr)
{
    if (strstr(errstr, SECRET) != NULL) {
        fail_msg("the password is in \"%s\"", errstr);
    }
}

/* Mutant: check_store quoting the value as given. */
static void set_store_mistyped_scheme_redacts_the_password(void **state)
{
    char errstr[ERRSTR_SIZE] = "";

    assert_int_equal(
        hc_config_set(*state, "store", "redsi://user:" SECRET "@host:1/0", errstr, sizeof(errstr)),
        HC_ERR_INVALID);
    assert_no_secret(errstr);
    assert_non_null(
        strstr(errstr, "store: \"redsi://user:***@host:1/0\" is not a supported store"));
}

/* Mutant: another key's check quoting a pasted URI as given. */
static void any_key_quoting_its_value_redacts_a_password(void **state)
{
    char errstr[ERRSTR_SIZE] = "";

    assert_int_equal(
        hc_config_set(*state, "instance.id", "redis://u:" SECRET "@h", errstr, sizeof(errstr)),
        HC_ERR_INVALID);
    assert_no_secret(errstr);
    assert_non_null(strstr(errstr, "instance.id: \"redis://u:***@h\" may only contain"));
    assert_int_equal(
        hc_config_set(*state, "metrics.listen", "u:" SECRET "@h", errstr, sizeof(errstr)),
        HC_ERR_INVALID);
    assert_no_secret(errstr);
}

/* Mutant: -X without '=' (or with an empty key) quoted as given. */
static void set_kv_without_equals_redacts_the_password(void **state)
{
    char errstr[ERRSTR_SIZE] = "";

    assert_int_equal(
        hc_config_set_kv(*state, "store:redis://u:" SECRET "@h", errstr, sizeof(errstr)),
        HC_ERR_INVALID);
    assert_no_secret(errstr);
    assert_string_equal(errstr, "\"store:redis://u:***@h\": expected key=value");
    assert_int_equal(
        hc_config_set_kv(*state, "=postgresql://u:" SECRET "@h/db", errstr, sizeof(errstr)),
        HC_ERR_INVALID);
    assert_no_secret(errstr);
    assert_int_equal(hc_config_set_kv(*state, "redis://u:" SECRET "@h=1", errstr, sizeof(errstr)),
                     HC_ERR_INVALID);
    assert_no_secret(errstr);
}

/* Mutant: apply_line quoting a bad line as given. */
static void load_file_bad_line_redacts_the_password(void **state)
{
    char path[64];
    char errstr[ERRSTR_SIZE] = "";

    assert_int_equal(load_text(*state, "flush.ms=100\nstore redis://:" SECRET "@h:1/0\n", path,
                               sizeof(path), errstr),
                     HC_ERR_INVALID);
    assert_no_secret(errstr);
    assert_non_null(strstr(errstr, ":2: expected key=value, got \"store redis://:***@h:1/0\""));
    assert_int_equal(
        load_text(*state, "kafka.sasl.password " SECRET "\n", path, sizeof(path), errstr),
        HC_ERR_INVALID);
    assert_no_secret(errstr);
    assert_non_null(strstr(errstr, ":1: expected key=value, got \"kafka.sasl.password ***\""));
}

/* ---- cross-key checks ---- */

/* Mutant: the event.max.bytes / message.max.bytes check removed, or the producer's scope not
 * winning over kafka.* . */
static void validate_rejects_event_max_bytes_the_producer_cannot_send(void **state)
{
    hc_config_t *cfg = *state;
    char errstr[ERRSTR_SIZE] = "";

    set_ok(cfg, "event.max.bytes", "1048576");
    assert_int_equal(hc_config_validate(cfg, errstr, sizeof(errstr)), HC_ERR_INVALID);
    assert_non_null(strstr(errstr, "event.max.bytes=1048576"));
    assert_non_null(strstr(errstr, "message.max.bytes=1000000"));
    set_ok(cfg, "kafka.producer.message.max.bytes", "2000000");
    set_ok(cfg, "kafka.message.max.bytes", "1000"); /* the producer's own scope wins */
    assert_int_equal(hc_config_validate(cfg, errstr, sizeof(errstr)), HC_OK);
    set_ok(cfg, "kafka.producer.message.max.bytes", "1050000");
    assert_int_equal(hc_config_validate(cfg, errstr, sizeof(errstr)), HC_ERR_INVALID);
    assert_non_null(strstr(errstr, "kafka.producer.message.max.bytes=1050000"));
}

/* The case, through hc_config_validate as every command runs it.
 * Mutant: validate not deriving the timeouts. */
static void validate_rejects_flush_past_the_transaction_timeout(void **state)
{
    hc_config_t *cfg = *state;
    char errstr[ERRSTR_SIZE] = "";

    set_ok(cfg, "flush.ms", "3600000");
    assert_int_equal(hc_config_validate(cfg, errstr, sizeof(errstr)), HC_ERR_INVALID);
    assert_non_null(strstr(errstr, "flush.ms=3600000"));
    assert_non_null(strstr(errstr, "transaction.timeout.ms=60000"));
    assert_non_null(strstr(errstr, "transaction.max.timeout.ms"));
}

/* Mutant: the watchdog check skipped by validate. */
static void validate_rejects_watchdog_below_the_longest_call(void **state)
{
    hc_config_t *cfg = *state;
    char errstr[ERRSTR_SIZE] = "";

    set_ok(cfg, "watchdog.ms", "3000");
    assert_int_equal(hc_config_validate(cfg, errstr, sizeof(errstr)), HC_ERR_INVALID);
    assert_non_null(strstr(errstr, "watchdog.ms=3000"));
    set_ok(cfg, "watchdog.ms", "0");
    assert_int_equal(hc_config_validate(cfg, errstr, sizeof(errstr)), HC_OK);
}

/* ---- help and example ---- */

/* Not inlined: at -O3, GCC 12 follows open_memstream's buffer into the callers and warns that
 * pointers into it dangle (-Wdangling-pointer), which they do not. */
static void print_help_stub(FILE *out)
{
    hc_config_print_help(out, stub_stores);
}

static void print_example_stub(FILE *out)
{
    hc_config_print_example(out, stub_stores);
}

__attribute__((noinline)) static char *capture(void (*print)(FILE *out))
{
    char *text = NULL;
    size_t size = 0;
    FILE *out = open_memstream(&text, &size);

    assert_non_null(out);
    print(out);
    assert_int_equal(fclose(out), 0);
    return text;
}

static void print_help_lists_every_key_with_default_and_kafka_scopes(void **state)
{
    char *text = capture(print_help_stub);
    char needle[128];

    (void)state;
    for (size_t i = 0; i < ALL_KEY_COUNT; i++) {
        snprintf(needle, sizeof(needle), "\n  %s ", all_keys[i]);
        if (strstr(text, needle) == NULL) {
            fail_msg("key %s missing from help", all_keys[i]);
        }
    }
    assert_non_null(strstr(text, "\n  kafka.<prop> "));
    assert_non_null(strstr(text, "\n  kafka.consumer.<prop> "));
    assert_non_null(strstr(text, "\n  kafka.producer.<prop> "));
    assert_non_null(strstr(text, "<hostname>-<pid>"));
    assert_non_null(strstr(text, "[10..3600000]"));
    free(text);
}

static void print_help_aligns_the_default_column(void **state)
{
    char *text = capture(print_help_stub);
    const char *flush = strstr(text, "\n  flush.ms ");
    const char *salts = strstr(text, "\n  salts ");
    const char *flush_default;
    const char *salts_default;

    (void)state;
    assert_non_null(flush);
    assert_non_null(salts);
    flush_default = strstr(flush, "1000");
    salts_default = strstr(salts, "16");
    assert_int_equal(flush_default - flush, salts_default - salts);
    free(text);
}

static void print_example_has_only_comments_and_assignments(void **state)
{
    char *text = capture(print_example_stub);
    char *save = NULL;
    size_t assignments = 0;

    (void)state;
    for (char *line = strtok_r(text, "\n", &save); line != NULL;
         line = strtok_r(NULL, "\n", &save)) {
        if (line[0] == '#') {
            continue;
        }
        assert_non_null(strchr(line, '='));
        assignments++;
    }
    /* Every key but instance.id, whose default is per process. */
    assert_int_equal(assignments, ALL_KEY_COUNT - 1);
    free(text);
}

static void print_example_round_trips_to_defaults(void **state)
{
    hc_config_t *defaults = *state;
    hc_config_t cfg;
    char *text = capture(print_example_stub);
    char path[64];
    char errstr[ERRSTR_SIZE] = "";

    assert_int_equal(hc_config_init(&cfg, stub_stores), HC_OK);
    /* Start far from the defaults so that the file has to set every key back. */
    set_ok(&cfg, "brokers", "x:1");
    set_ok(&cfg, "topic.counts", "c");
    set_ok(&cfg, "topic.raw.partitions", "1");
    set_ok(&cfg, "topic.replication.factor", "3");
    set_ok(&cfg, "flush.ms", "10");
    set_ok(&cfg, "salts", "2");
    set_ok(&cfg, "max.keys", "3");
    set_ok(&cfg, "store", "redis://r:6379");
    set_ok(&cfg, "metrics.listen", "");
    set_ok(&cfg, "log.format", "json");

    if (load_text(&cfg, text, path, sizeof(path), errstr) != HC_OK) {
        fail_msg("example does not parse: %s", errstr);
    }
    assert_configs_equal(&cfg, defaults);
    assert_int_equal(hc_config_validate(&cfg, errstr, sizeof(errstr)), HC_OK);
    hc_config_fini(&cfg);
    free(text);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(init_sets_documented_defaults),
        T(init_derives_instance_id_from_host_and_pid),
        T(fini_accepts_null_and_zeroed_config),
        T(defaults_pass_validation),
        T(set_rejects_unknown_key_naming_it),
        T(set_replaces_string_value),
        T(set_rejects_empty_required_strings),
        T(set_instance_id_accepts_portable_names),
        T(set_instance_id_rejects_empty_and_other_characters),
        T(set_store_accepts_known_schemes),
        T(set_store_rejects_unknown_scheme_naming_key),
        T(set_metrics_listen_accepts_host_port_or_empty),
        T(set_serve_keys_name_the_key_when_bad),
        T(validate_rejects_leave_rate_not_below_enter_rate),
        T(validate_rejects_serve_hot_leave_not_below_enter_naming_both),
        T(validate_rejects_serve_hot_ttl_below_serve_ttl_naming_both),
        T(set_serve_hot_keys_checks_ranges_naming_key),
        T(set_metrics_listen_rejects_bad_port_naming_key),
        T(set_log_level_and_format_accept_only_known_names),
        T(set_parses_integer_fields),
        T(set_rejects_non_integer_naming_key),
        T(set_rejects_integer_overflow_naming_key),
        T(set_rejects_values_outside_range),
        T(set_accepts_range_bounds),
        T(set_replication_factor_accepts_minus_one_and_rejects_zero),
        T(set_leaves_config_unchanged_on_error),
        T(set_tolerates_null_errstr),
        T(set_kafka_props_strip_prefix_and_keep_scope_in_order),
        T(set_kafka_prop_repeated_replaces_value_in_place),
        T(set_kafka_prop_rejects_empty_name),
        T(set_kv_splits_at_first_equals),
        T(set_kv_rejects_missing_equals_naming_argument),
        T(set_kv_reports_key_errors),
        T(load_file_applies_keys_skipping_comments_and_blank_lines),
        T(load_file_accepts_crlf_line_endings),
        T(load_file_keeps_equals_and_hash_inside_values),
        T(load_file_reports_file_and_line_of_line_without_equals),
        T(load_file_reports_file_line_and_key_of_bad_value),
        T(load_file_leaves_config_unchanged_on_error),
        T(load_file_keeps_earlier_kafka_props_and_appends),
        T(load_file_rejects_unreadable_file_with_strerror),
        T(validate_rejects_duplicate_topics_naming_both_keys),
        T(validate_rejects_empty_required_topic),
        T(validate_rejects_same_group_for_both_stages),
        T(set_store_mistyped_scheme_redacts_the_password),
        T(set_kv_without_equals_redacts_the_password),
        T(any_key_quoting_its_value_redacts_a_password),
        T(load_file_bad_line_redacts_the_password),
        T(validate_rejects_event_max_bytes_the_producer_cannot_send),
        T(validate_rejects_flush_past_the_transaction_timeout),
        T(validate_rejects_watchdog_below_the_longest_call),
        T(print_help_lists_every_key_with_default_and_kafka_scopes),
        T(print_help_aligns_the_default_column),
        T(print_example_has_only_comments_and_assignments),
        T(print_example_round_trips_to_defaults),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
