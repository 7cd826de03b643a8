/* /v1/stats: the stages' metrics summed, the store's top, and rates between two calls. */
#include "hotcount/serve_stats.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "hotcount/hotkeys_scrape.h"
#include "hotcount/metrics.h"
#include "hotcount/table.h"

#define MAX_STAGES 64
#define HOT_PER_STAGE HC_METRICS_HOT_KEYS
#define PREV_TOP_MAX 100000

typedef struct sample {
    bool valid;
    int64_t mono_ms;
    double events_in;
    double store_writes;
} sample_t;

struct hc_serve_stats {
    char **stages; /* owned, each owned */
    size_t stage_count;
    int timeout_ms;
    sample_t prev;
    hc_table_t *prev_top; /* owned: post -> likes at the previous call */
    int64_t prev_top_ms;
};

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
                if (end != value + 1) {
                    sum += v;
                    *found = 1;
                }
            }
        }
    next:
        line = eol ? eol + 1 : NULL;
    }
    return sum;
}

hc_err_t hc_serve_stats_new(const char *stages, int scrape_timeout_ms, hc_serve_stats_t **out,
                            char *errstr, size_t errstr_size)
{
    *out = NULL;
    hc_serve_stats_t *s = calloc(1, sizeof(*s));
    if (!s) {
        goto oom;
    }
    s->timeout_ms = scrape_timeout_ms;
    s->stages = calloc(MAX_STAGES, sizeof(*s->stages));
    s->prev_top = hc_table_new(PREV_TOP_MAX);
    if (!s->stages || !s->prev_top) {
        goto free_stats;
    }
    for (const char *p = stages; *p && s->stage_count < MAX_STAGES;) {
        size_t n = strcspn(p, ",");
        if (n > 0) {
            s->stages[s->stage_count] = strndup(p, n);
            if (!s->stages[s->stage_count]) {
                goto free_stats;
            }
            s->stage_count++;
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

void hc_serve_stats_destroy(hc_serve_stats_t *s)
{
    if (!s) {
        return;
    }
    for (size_t i = 0; s->stages && i < s->stage_count; i++) {
        free(s->stages[i]);
    }
    free(s->stages);
    hc_table_destroy(s->prev_top);
    free(s);
}

static json_t *number_or_null(bool have, double v)
{
    return have ? json_real(v) : json_null();
}

static json_t *integer_or_null(bool have, double v)
{
    return have ? json_integer((json_int_t)v) : json_null();
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

char *hc_serve_stats_render(hc_serve_stats_t *s, const hc_store_row_t *top, size_t top_count,
                            int64_t mono_ms, int64_t wall_ms)
{
    json_t *root = json_object();
    json_t *stages = json_array();
    json_t *hot_json = json_array();
    json_t *top_json = json_array();
    hc_scraped_hotkey_t *hot = calloc(s->stage_count * HOT_PER_STAGE + 1, sizeof(*hot));
    hc_scraped_hotkey_t *keys = calloc(HOT_PER_STAGE, sizeof(*keys));
    char *out = NULL;
    if (!root || !stages || !hot_json || !top_json || !hot || !keys) {
        goto done;
    }
    double events_in = 0, store_writes = 0, events_stored = 0, lag = 0;
    int have_events = 0, have_writes = 0, have_stored = 0, have_lag = 0;
    size_t hot_n = 0;
    for (size_t i = 0; i < s->stage_count; i++) {
        char errstr[256];
        char *text = NULL;
        json_t *st = json_pack("{s:s}", "addr", s->stages[i]);
        if (hc_metrics_scrape_text(s->stages[i], s->timeout_ms, &text, errstr, sizeof(errstr)) !=
            HC_OK) {
            json_object_set_new(st, "up", json_false());
            json_object_set_new(st, "error", json_string(errstr));
        } else {
            int f;
            json_object_set_new(st, "up", json_true());
            events_in += hc_serve_stats_sum(text, "hotcount_events_total", NULL, &f);
            have_events |= f;
            store_writes += hc_serve_stats_sum(text, "hotcount_store_keys_written_total", NULL, &f);
            have_writes |= f;
            events_stored += hc_serve_stats_sum(text, "hotcount_events_stored_total", NULL, &f);
            have_stored |= f;
            lag += hc_serve_stats_sum(text, "hotcount_consumer_lag", NULL, &f);
            have_lag |= f;
            size_t n = hc_hotkeys_parse(text, keys, HOT_PER_STAGE);
            merge_hot(hot, &hot_n, keys, n);
            free(text);
        }
        json_array_append_new(stages, st);
    }
    /* The stage that counts events may be up while the one that writes is not yet: a family
     * absent everywhere is null, not 0, so the page can tell "unknown" from "none". */
    double dt = s->prev.valid ? (double)(mono_ms - s->prev.mono_ms) / 1000.0 : 0;
    bool rate_ok = s->prev.valid && dt > 0;
    json_object_set_new(root, "as_of", json_integer(wall_ms));
    json_object_set_new(root, "stages", stages);
    stages = NULL;
    json_object_set_new(root, "events_in", integer_or_null(have_events, events_in));
    json_object_set_new(root, "events_in_per_second",
                        number_or_null(have_events && rate_ok,
                                       (events_in - s->prev.events_in) / (dt > 0 ? dt : 1)));
    json_object_set_new(root, "store_writes", integer_or_null(have_writes, store_writes));
    json_object_set_new(root, "store_writes_per_second",
                        number_or_null(have_writes && rate_ok,
                                       (store_writes - s->prev.store_writes) / (dt > 0 ? dt : 1)));
    json_object_set_new(root, "events_stored", integer_or_null(have_stored, events_stored));
    json_object_set_new(root, "events_per_store_write",
                        number_or_null(have_stored && have_writes && store_writes > 0,
                                       events_stored / (store_writes > 0 ? store_writes : 1)));
    json_object_set_new(root, "consumer_lag", integer_or_null(have_lag, lag));
    s->prev = (sample_t){true, mono_ms, events_in, store_writes};

    qsort(hot, hot_n, sizeof(*hot), by_rate_desc);
    for (size_t i = 0; i < hot_n && i < HOT_PER_STAGE; i++) {
        json_array_append_new(hot_json,
                              json_pack("{s:s%,s:f}", "post_id", hot[i].post_id, hot[i].post_id_len,
                                        "likes_per_second", hot[i].events_per_second));
    }
    json_object_set_new(root, "hot_keys", hot_json);
    hot_json = NULL;

    double top_dt = s->prev_top_ms ? (double)(mono_ms - s->prev_top_ms) / 1000.0 : 0;
    for (size_t i = 0; i < top_count; i++) {
        const hc_table_entry_t *was =
            hc_table_find(s->prev_top, top[i].post_id, top[i].post_id_len);
        json_t *row = json_pack("{s:s%,s:I}", "post_id", top[i].post_id, top[i].post_id_len,
                                "likes", (json_int_t)top[i].likes);
        json_object_set_new(
            row, "likes_per_second",
            number_or_null(was && top_dt > 0, (double)(top[i].likes - (was ? was->delta : 0)) /
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
    free(keys);
    return out;
}
