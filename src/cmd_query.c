/* get and top: reading counts from the store. */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cmds.h"
#include "hotcount/store.h"

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
        printf("%.*s\t%" PRId64 "\n", (int)len, post_id, likes);
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
    {NULL, 0, NULL, NULL},
};

static const hc_cli_cmd_t top_cmd = {
    "top", "", "Prints the N largest counts in the store, largest first.", top_opts};

int hc_cmd_top(int argc, char **argv)
{
    hc_cli_t cli;
    int status = hc_cli_parse(&cli, &top_cmd, argc, argv);
    if (status >= 0) {
        return status;
    }
    uint64_t n;
    if (!hc_cli_u64(&cli, "count", 10, &n) || n == 0 || n > 100000) {
        if (n == 0 || n > 100000) {
            fprintf(stderr, "hotcount top: -n must be within 1..100000\n");
        }
        hc_cli_fini(&cli);
        return HC_EXIT_USAGE;
    }
    hc_store_t *st = open_store(&cli, &status);
    if (st) {
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
