/* Scenario 1, the hot path without Kafka: parse + validate + aggregate, replayed from memory.
 *
 *   bench_hotpath [--file WORKLOAD] [--events N] [--posts N] [--zipf S] [--window N]
 *                 [--only VARIANT]
 *
 * The events come from a workload file (bench_workload gen) or are generated in memory with
 * the same generator. Each variant replays all of them once, on this thread, and closes a
 * "window" every --window events (default 200000: about one flush of a busy stage 1) the way
 * stage 1 does: the table is cleared and the hot-key sketch ends its window. Variants:
 *   hotcount            hc_event_parse + hc_table_add, and at each window's end every post of
 *                       the table offered once to the hot-key sketch (hc_hotkeys_offer_n), as
 *                       stage 1 does
 *   hotcount_no_hotkeys hc_event_parse + hc_table_add (what the sketch costs)
 *   hotcount_parse      hc_event_parse alone
 *   jansson_ref         hc_event_parse_ref (tests/support/event_ref.c) + the same table and sketch
 *   jansson_ref_parse   hc_event_parse_ref alone
 * The variants run in an interleaved order, one JSON line each. Every variant that aggregates
 * must end with the same per-post sums (a checksum over the table at each window's end), or
 * the run fails: a fast wrong answer is no result. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "event_ref.h"
#include "hotcount/event.h"
#include "hotcount/hotkeys.h"
#include "hotcount/table.h"
#include "workload.h"

typedef hc_event_reason_t (*parse_fn)(const char *buf, size_t len, size_t max_bytes,
                                      hc_event_t *ev);

typedef struct variant {
    const char *name;
    parse_fn parse;
    bool table;
    bool hotkeys;
} variant_t;

static const variant_t variants[] = {
    {"hotcount", hc_event_parse, true, true},
    {"jansson_ref", hc_event_parse_ref, true, true},
    {"hotcount_no_hotkeys", hc_event_parse, true, false},
    {"hotcount_parse", hc_event_parse, false, false},
    {"jansson_ref_parse", hc_event_parse_ref, false, false},
};
#define VARIANTS (sizeof(variants) / sizeof(variants[0]))

typedef struct replay {
    char *buf;   /* owned: every value back to back */
    size_t *off; /* owned: events + 1 offsets */
    size_t events;
    size_t bytes;
} replay_t;

static const char *arg(int argc, char **argv, const char *name, const char *def)
{
    for (int i = 1; i + 1 < argc; i++) {
        if (strcmp(argv[i], name) == 0) {
            return argv[i + 1];
        }
    }
    return def;
}

static bool replay_push(replay_t *r, size_t *cap, const char *value, size_t len)
{
    if (r->bytes + len > *cap) {
        size_t ncap = (*cap ? *cap * 2 : 1 << 20) + len;
        char *nb = realloc(r->buf, ncap);
        if (!nb) {
            return false;
        }
        r->buf = nb;
        *cap = ncap;
    }
    memcpy(r->buf + r->bytes, value, len);
    r->bytes += len;
    return true;
}

static int load_file(replay_t *r, const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        perror(path);
        return -1;
    }
    size_t cap = 0, off_cap = 1024;
    char *line = NULL;
    size_t line_cap = 0;
    ssize_t n;
    r->off = malloc(off_cap * sizeof(*r->off));
    r->off[0] = 0;
    while (r->off && (n = getline(&line, &line_cap, f)) > 0) {
        char *tab = memchr(line, '\t', (size_t)n);
        if (!tab) {
            continue;
        }
        size_t len = (size_t)(line + n - tab - 1) - (line[n - 1] == '\n');
        if (r->events + 2 > off_cap) {
            off_cap *= 2;
            size_t *no = realloc(r->off, off_cap * sizeof(*r->off));
            if (!no) {
                break;
            }
            r->off = no;
        }
        if (!replay_push(r, &cap, tab + 1, len)) {
            break;
        }
        r->off[++r->events] = r->bytes;
    }
    free(line);
    fclose(f);
    return r->events > 0 ? 0 : -1;
}

static int generate(replay_t *r, const bench_workload_opts_t *o)
{
    bench_workload_t w;
    char key[BENCH_KEY_MAX], value[BENCH_VALUE_MAX];
    size_t key_len, value_len, cap = 0;
    bool celeb;
    bench_workload_init(&w, o);
    r->off = malloc((o->events + 1) * sizeof(*r->off));
    if (!r->off) {
        return -1;
    }
    r->off[0] = 0;
    while (bench_workload_next(&w, key, &key_len, value, &value_len, &celeb)) {
        if (!replay_push(r, &cap, value, value_len)) {
            return -1;
        }
        r->off[++r->events] = r->bytes;
    }
    return 0;
}

static double clock_s(clockid_t clk)
{
    struct timespec ts;
    clock_gettime(clk, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Folds a window's sums into the checksum in an order-independent way. */
static uint64_t table_sum(const hc_table_t *tbl)
{
    uint64_t sum = 0;
    for (size_t i = 0; i < hc_table_count(tbl); i++) {
        const hc_table_entry_t *ent = hc_table_entry(tbl, i);
        uint64_t h = 1469598103934665603u;
        for (uint32_t k = 0; k < ent->post_id_len; k++) {
            h = (h ^ (unsigned char)ent->post_id[k]) * 1099511628211u;
        }
        sum += h * (uint64_t)(ent->delta * 31 + ent->events) + (uint64_t)ent->ts_max;
    }
    return sum;
}

/* noinline: bench/lib/profile.py collects callgrind costs inside this function only */
__attribute__((noinline)) static int run(const variant_t *v, const replay_t *r, size_t window,
                                         uint64_t *checksum)
{
    hc_table_t *tbl = hc_table_new(1000000);
    hc_hotkeys_t *hk = hc_hotkeys_new(HC_HOTKEYS_DEFAULT_K, 1000, 500);
    hc_hotkey_t top[20];
    size_t ntop;
    hc_event_t ev;
    uint64_t fold = 0;
    if (!tbl || !hk) {
        fprintf(stderr, "bench_hotpath: out of memory\n");
        return -1;
    }
    double w0 = clock_s(CLOCK_MONOTONIC);
    double c0 = clock_s(CLOCK_THREAD_CPUTIME_ID);
    for (size_t i = 0; i < r->events; i++) {
        const char *p = r->buf + r->off[i];
        hc_event_reason_t reason = v->parse(p, r->off[i + 1] - r->off[i], 4096, &ev);
        if (reason != HC_EVENT_OK) {
            fprintf(stderr, "bench_hotpath: %s rejected event %zu: %s\n", v->name, i,
                    hc_event_reason_str(reason));
            return -1;
        }
        if (v->table) {
            int64_t ts = ev.has_ts ? ev.ts : HC_TS_NONE;
            if (hc_table_add(tbl, ev.post_id, ev.post_id_len, ev.delta, 1, ts, ts) != HC_OK) {
                fprintf(stderr, "bench_hotpath: table add failed\n");
                return -1;
            }
            if ((i + 1) % window == 0 || i + 1 == r->events) {
                fold += table_sum(tbl);
                if (v->hotkeys) {
                    for (size_t e = 0; e < hc_table_count(tbl); e++) {
                        const hc_table_entry_t *ent = hc_table_entry(tbl, e);
                        hc_hotkeys_offer_n(hk, ent->post_id, ent->post_id_len, ent->events);
                    }
                    hc_hotkeys_window_end(hk, 1000, top, 20, &ntop);
                }
                hc_table_clear(tbl);
            }
        } else {
            fold += ev.post_id_len + (uint64_t)ev.delta + (uint64_t)ev.ts;
        }
    }
    double cpu = clock_s(CLOCK_THREAD_CPUTIME_ID) - c0;
    double wall = clock_s(CLOCK_MONOTONIC) - w0;
    *checksum = fold;
    printf("{\"scenario\":\"hotpath\",\"variant\":\"%s\",\"events\":%zu,\"wall_s\":%.6f,"
           "\"cpu_s\":%.6f,\"events_per_s\":%.1f,\"events_per_cpu_s\":%.1f,"
           "\"ns_per_event\":%.2f,\"avg_event_bytes\":%.1f,\"checksum\":\"%016" PRIx64 "\"}\n",
           v->name, r->events, wall, cpu, (double)r->events / wall, (double)r->events / cpu,
           cpu * 1e9 / (double)r->events, (double)r->bytes / (double)r->events, fold);
    fflush(stdout);
    hc_hotkeys_destroy(hk);
    hc_table_destroy(tbl);
    return 0;
}

int main(int argc, char **argv)
{
    const char *file = arg(argc, argv, "--file", NULL);
    const char *only = arg(argc, argv, "--only", NULL);
    size_t window = strtoull(arg(argc, argv, "--window", "200000"), NULL, 10);
    bench_workload_opts_t o = {
        .events = strtoull(arg(argc, argv, "--events", "1000000"), NULL, 10),
        .posts = strtoull(arg(argc, argv, "--posts", "1000000"), NULL, 10),
        .zipf_s = strtod(arg(argc, argv, "--zipf", "0.99"), NULL),
        .unlike_ratio = 0.05,
        .base_rate = 100000,
        .celeb_rate = 50000,
        .seed = 1,
        .salts = 16,
        .start_ms = 1764460800000,
    };
    replay_t r = {0};
    if (window == 0 || (file ? load_file(&r, file) : generate(&r, &o)) != 0) {
        fprintf(stderr, "bench_hotpath: no events (bad --file, --events or --window)\n");
        return 2;
    }
    uint64_t agg_sum = 0;
    bool have_agg = false;
    for (size_t i = 0; i < VARIANTS; i++) {
        const variant_t *v = &variants[i];
        uint64_t sum;
        if (only && strcmp(only, v->name) != 0) {
            continue;
        }
        if (run(v, &r, window, &sum) != 0) {
            return 1;
        }
        if (v->table) {
            if (have_agg && sum != agg_sum) {
                fprintf(stderr, "bench_hotpath: %s's sums differ from the other variants'\n",
                        v->name);
                return 1;
            }
            agg_sum = sum;
            have_agg = true;
        }
    }
    free(r.buf);
    free(r.off);
    return 0;
}
