/* Layer: base. hotcount's configuration: one table of keys (src/base/config.c) drives parsing,
 * validation, the --help text and the example file. Resolved once, then passed down as
 * `const hc_config_t *`; there is no global configuration.
 *
 * Sources, applied in order: defaults (hc_config_init), a properties file (key=value, '#' or '!'
 * comments, blank lines), then -X key=value overrides. An unknown key is an error that names the
 * key. `kafka.<prop>` passes <prop> to every librdkafka client, `kafka.consumer.<prop>` and
 * `kafka.producer.<prop>` to one kind only; their values are checked by librdkafka when a client
 * is created.
 *
 * Not thread-safe while being built; read-only (any thread) afterwards. */
#ifndef HOTCOUNT_CONFIG_H
#define HOTCOUNT_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "hotcount/err.h"
#include "hotcount/store_facts.h"
#include "hotcount/timeouts.h"

typedef enum hc_kafka_scope {
    HC_KAFKA_ALL = 0,  /* kafka.<prop> */
    HC_KAFKA_CONSUMER, /* kafka.consumer.<prop> */
    HC_KAFKA_PRODUCER, /* kafka.producer.<prop> */
} hc_kafka_scope_t;

typedef struct hc_kafka_prop {
    hc_kafka_scope_t scope;
    char *name;  /* owned: the librdkafka property name, prefix removed */
    char *value; /* owned */
} hc_kafka_prop_t;

typedef struct hc_config {
    /* every char * is owned and never NULL after hc_config_init ("" when empty) */
    char *brokers;
    char *topic_raw;
    char *topic_partials;
    char *topic_dlq;
    char *topic_counts;   /* "" = off */
    char *topic_manifest; /* "" = off: stage 1's per-transaction offset ranges */
    char *topic_hotkeys;  /* "" = off: stage 2's hot-set changes and declared hot posts */
    int32_t topic_raw_partitions;
    int32_t topic_partials_partitions;
    int32_t topic_dlq_partitions;
    int32_t topic_counts_partitions;
    int32_t topic_manifest_partitions;
    int32_t topic_hotkeys_partitions;
    int32_t topic_replication_factor; /* -1: the broker's default */
    char *group_stage1;
    char *group_stage2;
    char *instance_id;
    char *group_protocol; /* "classic" or "consumer" (KIP-848) */
    int32_t group_static; /* 1: group.instance.id = the stage's instance id */
    int64_t flush_ms;
    int32_t salts;
    int64_t max_keys;
    char *partials_format; /* "packed" (default) or "single" (docs/FORMATS.md, "Partials") */
    /* "" = off: partials are not signed nor checked (docs/FORMATS.md, "Authenticated
     * partials"); else the key file's path (core/partial_auth.h), read when a stage starts */
    char *partials_auth_key_file;
    int64_t event_max_bytes;
    char *store;
    char *store_redis_prefix;
    /* "" = none: the store's password is in `store`, or there is none */
    char *store_password_file;
    /* Not a key: the content of store_password_file (hotcount/secret_file.h), read when that
     * key is set; "" when none. A secret: hc_redact_config_secrets hides it. */
    char *store_password;
    int64_t store_check_ms;     /* 0 = off: stage 2's check that the store did not forget */
    int64_t hotkeys_enter_rate; /* likes/s */
    int64_t hotkeys_leave_rate;
    int64_t hotkeys_dwell_ms;      /* stage 2's hot set: time below the leave rate before leaving */
    int64_t hotkeys_max;           /* stage 2's hot set: most members */
    int64_t watchdog_ms;           /* 0 = off */
    int64_t partition_progress_ms; /* 0 = derived (timeouts.partition_progress_ms) */
    int64_t stop_timeout_ms;       /* a stop's whole bound (src/cli/cmd_stage.c) */
    char *metrics_listen;          /* "" = off */
    char *log_level;
    char *log_format;
    /* hotcount serve */
    char *serve_listen;
    int64_t serve_ttl_ms;
    int64_t serve_max_ids;
    int64_t serve_top_max;
    int64_t serve_top_ttl_ms; /* /v1/top's own TTL: one store top query per TTL at most */
    int64_t serve_cache_max_keys;
    int32_t serve_threads;
    char *serve_stages; /* "" = none */
    int32_t serve_max_connections;
    int32_t serve_max_connections_per_ip;
    int64_t serve_request_timeout_ms;
    int32_t serve_stats_expose;   /* 1: /v1/stats names stage addresses and errors */
    int64_t serve_hot_enter_rate; /* reads/s: read-hot promotion (serve_hot.h) */
    int64_t serve_hot_leave_rate;
    int64_t serve_hot_dwell_ms;
    int64_t serve_hot_ttl_ms; /* >= serve_ttl_ms */
    int64_t serve_hot_max;
    int32_t serve_hot_follow;     /* -1: when brokers is not its default; 0 off; 1 on */
    hc_kafka_prop_t *kafka_props; /* owned array, in the order given */
    size_t kafka_prop_count;
    /* Not a key: the store backends this program has (hotcount/store_facts.h), borrowed,
     * NULL-terminated, as given to hc_config_init: the `store` check, the store.password.file
     * rule and the store's timeouts read them. */
    const hc_store_facts_t *const *stores;
    /* Not a key: every timeout derived from the keys above (hotcount/timeouts.h). Filled with
     * the defaults' values by hc_config_init, re-derived by hc_config_set and
     * hc_config_load_file, and checked as a whole by hc_config_validate. */
    hc_timeouts_t timeouts;
} hc_config_t;

/* Fills defaults (instance.id = "<hostname>-<pid>"). stores: the store backends' facts, handed
 * in by the layer that knows them (hc_store_facts() of hotcount/store.h; a base-only test its own
 * list), NULL-terminated, borrowed for cfg's life; `store` accepts exactly their schemes.
 * Returns HC_ERR_FATAL only when out of memory. */
hc_err_t hc_config_init(hc_config_t *cfg, const hc_store_facts_t *const *stores);
void hc_config_fini(hc_config_t *cfg); /* accepts a zeroed or NULL cfg */

/* Sets one key. HC_ERR_INVALID with errstr naming the key when the key is unknown or the value
 * does not parse or is out of range (integers: the whole string in base 10, within the key's
 * range); HC_ERR_FATAL when out of memory. On error cfg is unchanged. The value is copied.
 * A kafka.* key with the same scope and property as an earlier one replaces its value in place;
 * an empty property name ("kafka.", "kafka.consumer.") is an error. */
hc_err_t hc_config_set(hc_config_t *cfg, const char *key, const char *value, char *errstr,
                       size_t errstr_size);

/* "key=value" as given to -X: split at the first '=', nothing trimmed. A missing '=' or an
 * empty key is an error naming the argument. */
hc_err_t hc_config_set_kv(hc_config_t *cfg, const char *kv, char *errstr, size_t errstr_size);

/* Reads a properties file: `key=value` lines (blanks around key and value trimmed, the value
 * may contain '=' and '#'), comment lines starting with '#' or '!', blank lines; a later line
 * wins. Errors read "FILE:LINE: ..." and name the key. HC_ERR_INVALID also for an unreadable
 * file ("FILE: strerror"). All or nothing: on error cfg is unchanged. */
hc_err_t hc_config_load_file(hc_config_t *cfg, const char *path, char *errstr, size_t errstr_size);

/* Cross-key checks after all sources are applied: topic.raw, topic.partials, topic.dlq (and
 * topic.counts and topic.manifest when set) non-empty and distinct; group.stage1 !=
 * group.stage2; hotkeys.leave.rate < hotkeys.enter.rate; serve.hot.leave.rate <
 * serve.hot.enter.rate and serve.hot.ttl.ms >= serve.ttl.ms; and cfg->timeouts re-derived and
 * checked (hc_timeouts_derive: flush.ms against the transaction timeout, the watchdog against
 * the longest blocking call ...). HC_ERR_INVALID with errstr naming the keys and the reason. */
hc_err_t hc_config_validate(hc_config_t *cfg, char *errstr, size_t errstr_size);

/* Whether key holds its default value (false for an unknown key or one whose default is
 * computed): `hotcount serve` follows topic.hotkeys by default only when brokers was set. */
bool hc_config_is_default(const hc_config_t *cfg, const char *key);

/* An aligned table, one line per key: name, default, description [range]; then the kafka.*
 * prefixes (for --help). The store keys' descriptions list stores' URI forms and schemes. */
void hc_config_print_help(FILE *out, const hc_store_facts_t *const *stores);

/* A commented properties file with every key at its default (for `hotcount config`); loading
 * it gives the defaults. instance.id is left commented out, as its default is per process. */
void hc_config_print_example(FILE *out, const hc_store_facts_t *const *stores);

/* The configuration reference, docs/CONFIGURATION.md (`hotcount config --markdown`): a Markdown
 * table of every key (name, default, range, meaning) and the kafka.* prefixes, from the same
 * table as --help and the example file. */
void hc_config_print_markdown(FILE *out, const hc_store_facts_t *const *stores);

#endif
