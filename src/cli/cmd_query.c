/* get and top: reading counts from the store.
 *
 * Text and TSV output escape what hotcount did not make: a post id comes from any producer, and
 * printed raw its bytes could forge TSV rows (a TAB or newline) or drive the terminal (ESC, CSI
 * U+009B). In a post id printed as text, a backslash is written \\ and each byte of a C0 control
 * (< 0x20), DEL (0x7f), a C1 control (U+0080..U+009F, bytes C2 80..C2 9F) or invalid UTF-8 as
 * \xNN (two lowercase hex digits); every other byte as is. --json output is escaped by JSON. */
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "cli_wait.h"
#include "cmds.h"
#include "escape.h"
#include "hotcount/clock.h"
#include "hotcount/hotkeys_scrape.h"
#include "hotcount/store.h"
#include "hotcount/table.h"

static hc_store_t *open_store(const hc_cli_t *cli, int *status)
{
    char errstr[512];
    hc_store_t *st = NULL;
    hc_err_t err = hc_store_open(&cli->cfg, &st, errstr, sizeof(errstr));
    if (err != HC_OK) {
        fprintf(stderr, "hotcount %s: %s\n", cli->cmd->name, errstr);
        *status = err == HC_ERR_INVALID ? HC_EXIT_USAGE : HC_EXIT_FAILED;
    }
    return st;
}

#define ESCAPED_MAX (4 * HC_POST_ID_MAX + 1)

/* s[0..len) escaped (escape.h) into out (ESCAPED_MAX bytes); a post id longer than
 * HC_POST_ID_MAX is cut there. */
static const char *escaped(const char *s, size_t len, char *out)
{
    return hc_cli_escape(s, len > HC_POST_ID_MAX ? HC_POST_ID_MAX : len, out, ESCAPED_MAX);
}

static void print_json_row(const char *post_id, size_t len, int64_t likes)
{
    json_t *obj = json_pack("{s:s%,s:I}", "post_id", post_id, len, "likes", (json_int_t)likes);
    char *s = obj ? json_dumps(obj, JSON_COMPACT) : NULL;
    if (s) {
        printf("%s\n", s);
    }
    free(s);
    json_decref(obj);
}

static const hc_cli_opt_t get_opts[] = {
    {"json", 0, NULL, "one JSON object per post: {\"post_id\":...,\"likes\":N}"},
    {"all", 'a', NULL, "every stored count, in no particular order"},
    {NULL, 0, NULL, NULL},
};

static const hc_cli_cmd_t get_cmd = {
    "get", "POST...",
    "Prints post_id<TAB>count for each POST from the store (0 for an unknown post), or for "
    "every stored post with --all.",
    get_opts};

static bool print_row(const char *post_id, size_t len, int64_t likes, void *opaque)
{
    if (*(const bool *)opaque) {
        print_json_row(post_id, len, likes);
    } else {
        char esc[ESCAPED_MAX];
        printf("%s\t%" PRId64 "\n", escaped(post_id, len, esc), likes);
    }
    return true;
}

static int get_all(hc_store_t *st, bool json)
{
    char errstr[512];
    if (hc_store_foreach(st, print_row, &json, errstr, sizeof(errstr)) != HC_OK) {
        fprintf(stderr, "hotcount get: %s\n", errstr);
        return HC_EXIT_FAILED;
    }
    return HC_EXIT_OK;
}

int hc_cmd_get(int argc, char **argv)
{
    hc_cli_t cli;
    int status = hc_cli_parse(&cli, &get_cmd, argc, argv);
    if (status >= 0) {
        return status;
    }
    bool all = hc_cli_has(&cli, "all");
    if ((cli.npos == 0) != all) {
        fprintf(stderr, "hotcount get: name at least one post, or --all (see --help)\n");
        hc_cli_fini(&cli);
        return HC_EXIT_USAGE;
    }
    hc_store_t *st = open_store(&cli, &status);
    if (st && all) {
        status = get_all(st, hc_cli_has(&cli, "json"));
        hc_store_close(st);
    } else if (st) {
        size_t n = (size_t)cli.npos;
        size_t *lens = calloc(n, sizeof(*lens));
        int64_t *likes = calloc(n, sizeof(*likes));
        for (size_t i = 0; i < n; i++) {
            lens[i] = strlen(cli.pos[i]);
        }
        char errstr[512];
        hc_err_t err =
            hc_store_get(st, (const char *const *)cli.pos, lens, n, likes, errstr, sizeof(errstr));
        if (err != HC_OK) {
            fprintf(stderr, "hotcount get: %s\n", errstr);
            status = err == HC_ERR_INVALID ? HC_EXIT_USAGE : HC_EXIT_FAILED;
        } else {
            bool json = hc_cli_has(&cli, "json");
            for (size_t i = 0; i < n; i++) {
                print_row(cli.pos[i], lens[i], likes[i], &json);
            }
            status = HC_EXIT_OK;
        }
        free(lens);
        free(likes);
        hc_store_close(st);
    }
    hc_cli_fini(&cli);
    return status;
}

static const hc_cli_opt_t top_opts[] = {
    {"count", 'n', "N", "how many posts (default 10)"},
    {"json", 0, NULL, "one JSON object per post"},
    {"live", 'l', NULL, "refresh in the terminal with each post's likes per second"},
    {"interval", 0, "SECONDS", "--live refresh interval (default 1)"},
    {"iterations", 0, "N", "--live: stop after N refreshes (default 0: until Ctrl-C)"},
    {"from", 0, "HOST:PORT",
     "--live: show stage 1's hot-key detector from its metrics endpoint instead of the store"},
    {NULL, 0, NULL, NULL},
};

/* --live --from: stage 1's hot keys (space-saving top-K over its last window) as its metrics
 * endpoint serves them. */
static int hot_keys_live(const char *from, size_t n, double interval, uint64_t iterations)
{
    hc_scraped_hotkey_t *keys = calloc(n, sizeof(*keys));
    if (!keys) {
        fprintf(stderr, "hotcount top: out of memory\n");
        return HC_EXIT_FAILED;
    }
    int status = HC_EXIT_OK;
    hc_cli_install_signals();
    for (uint64_t it = 0; !atomic_load(&hc_cli_stop) && (iterations == 0 || it < iterations);
         it++) {
        if (it > 0 && hc_cli_wait(llround(interval * 1000), &hc_cli_stop)) {
            break;
        }
        size_t count = 0;
        char errstr[512];
        if (hc_hotkeys_scrape(from, 5000, keys, n, &count, errstr, sizeof(errstr)) != HC_OK) {
            fprintf(stderr, "hotcount top: %s\n", errstr);
            status = HC_EXIT_FAILED;
            break;
        }
        printf("\033[H\033[2Jhotcount top --live --from %s: stage 1's hottest posts over its "
               "last window, every %.1f s\n\n%4s  %-24s %12s\n",
               from, interval, "#", "post", "likes/s");
        for (size_t i = 0; i < count; i++) {
            char esc[ESCAPED_MAX];
            printf("%4zu  %-24s %12.0f\n", i + 1,
                   escaped(keys[i].post_id, keys[i].post_id_len, esc), keys[i].events_per_second);
        }
        fflush(stdout);
    }
    free(keys);
    return status;
}

/* --live: the store's top posts every interval, each post's rate from the change of its count
 * since the previous refresh (so it shows what is hot now, whichever process counted it). */
static int top_live(hc_store_t *st, size_t n, double interval, uint64_t iterations)
{
    hc_store_row_t *rows = calloc(n, sizeof(*rows));
    hc_table_t *prev = hc_table_new(n);
    hc_table_t *next = hc_table_new(n);
    int status = HC_EXIT_OK;
    if (!rows || !prev || !next) {
        fprintf(stderr, "hotcount top: out of memory\n");
        status = HC_EXIT_FAILED;
        goto done;
    }
    hc_cli_install_signals();
    int64_t prev_ms = 0;
    for (uint64_t it = 0; !atomic_load(&hc_cli_stop) && (iterations == 0 || it < iterations);
         it++) {
        if (it > 0 && hc_cli_wait(llround(interval * 1000), &hc_cli_stop)) {
            break;
        }
        size_t count = 0;
        char errstr[512];
        if (hc_store_top(st, n, rows, &count, errstr, sizeof(errstr)) != HC_OK) {
            fprintf(stderr, "hotcount top: %s\n", errstr);
            status = HC_EXIT_FAILED;
            break;
        }
        int64_t now_ms = hc_now_ms();
        double dt = prev_ms ? (double)(now_ms - prev_ms) / 1000.0 : 0;
        printf("\033[H\033[2Jhotcount top --live: %zu posts, every %.1f s (Ctrl-C stops)\n\n"
               "%4s  %-24s %12s %12s\n",
               count, interval, "#", "post", "likes", "likes/s");
        hc_table_clear(next);
        for (size_t i = 0; i < count; i++) {
            const hc_table_entry_t *was = hc_table_find(prev, rows[i].post_id, rows[i].post_id_len);
            char rate[32] = "-";
            if (was && dt > 0) {
                snprintf(rate, sizeof(rate), "%.0f",
                         ((double)rows[i].likes - (double)was->delta) / dt);
            }
            char esc[ESCAPED_MAX];
            printf("%4zu  %-24s %12" PRId64 " %12s\n", i + 1,
                   escaped(rows[i].post_id, rows[i].post_id_len, esc), rows[i].likes, rate);
            hc_table_add(next, rows[i].post_id, rows[i].post_id_len, rows[i].likes, 1, HC_TS_NONE,
                         HC_TS_NONE);
        }
        fflush(stdout);
        hc_table_t *swap = prev;
        prev = next;
        next = swap;
        prev_ms = now_ms;
    }
done:
    hc_table_destroy(prev);
    hc_table_destroy(next);
    free(rows);
    return status;
}

static const hc_cli_cmd_t top_cmd = {
    "top", "", "Prints the N largest counts in the store, largest first.", top_opts};

int hc_cmd_top(int argc, char **argv)
{
    hc_cli_t cli;
    int status = hc_cli_parse(&cli, &top_cmd, argc, argv);
    if (status >= 0) {
        return status;
    }
    uint64_t n = 0, iterations = 0;
    double interval = 1;
    if (!hc_cli_u64(&cli, "count", 10, &n) || !hc_cli_u64(&cli, "iterations", 0, &iterations) ||
        !hc_cli_double(&cli, "interval", 1, &interval)) {
        hc_cli_fini(&cli);
        return HC_EXIT_USAGE;
    }
    if (n == 0 || n > 100000 || interval < 0.1 || interval > 3600) {
        fprintf(stderr, "hotcount top: -n must be within 1..100000 and --interval within "
                        "0.1..3600\n");
        hc_cli_fini(&cli);
        return HC_EXIT_USAGE;
    }
    /* The store's top stops where serve's does (issue 25): the Redis index keeps a multiple of
     * serve.top.max posts, and no path asks a store for more. */
    if (!hc_cli_has(&cli, "from") && (int64_t)n > cli.cfg.serve_top_max) {
        fprintf(stderr,
                "hotcount top: -n %" PRIu64 " is past serve.top.max (%" PRId64 "); raise it with "
                "-X serve.top.max=N (at most %d)\n",
                n, cli.cfg.serve_top_max, HC_STORE_TOP_MAX);
        hc_cli_fini(&cli);
        return HC_EXIT_USAGE;
    }
    if (hc_cli_has(&cli, "from")) {
        status = hc_cli_has(&cli, "live")
                     ? hot_keys_live(hc_cli_str(&cli, "from", ""), n, interval, iterations)
                     : (fprintf(stderr, "hotcount top: --from goes with --live\n"), HC_EXIT_USAGE);
        hc_cli_fini(&cli);
        return status;
    }
    hc_store_t *st = open_store(&cli, &status);
    if (st && hc_cli_has(&cli, "live")) {
        status = top_live(st, n, interval, iterations);
        hc_store_close(st);
    } else if (st) {
        hc_store_row_t *rows = calloc(n, sizeof(*rows));
        size_t count = 0;
        char errstr[512];
        hc_err_t err = hc_store_top(st, n, rows, &count, errstr, sizeof(errstr));
        if (err != HC_OK) {
            fprintf(stderr, "hotcount top: %s\n", errstr);
            status = HC_EXIT_FAILED;
        } else {
            for (size_t i = 0; i < count; i++) {
                bool json = hc_cli_has(&cli, "json");
                print_row(rows[i].post_id, rows[i].post_id_len, rows[i].likes, &json);
            }
            status = HC_EXIT_OK;
        }
        free(rows);
        hc_store_close(st);
    }
    hc_cli_fini(&cli);
    return status;
}
