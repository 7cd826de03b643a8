/* verify: waits for both stages to catch up, recounts likes.raw and compares every post. */
#include <inttypes.h>
#include <stdio.h>
#include <time.h>

#include "cli.h"
#include "cli_wait.h"
#include "cmds.h"
#include "escape.h"
#include "hotcount/clock.h"
#include "hotcount/log.h"
#include "hotcount/recount.h"
#include "hotcount/store.h"

static const hc_cli_opt_t verify_opts[] = {
    {"timeout", 't', "SECONDS", "how long to wait for both stages to catch up (default 120)"},
    {"no-wait", 0, NULL, "compare at once, without waiting for the stages"},
    {"max-posts", 0, "N", "most distinct posts the recount holds (default 50000000)"},
    {NULL, 0, NULL, NULL},
};

static const hc_cli_cmd_t verify_cmd = {
    "verify", "",
    "Waits until stage 1 has committed every raw offset and stage 2 has stored every committed "
    "partial, then recounts topic.raw from its first offset with the contract's rules and "
    "compares every post with the store. Prints each mismatch; exit 0 only when all match.",
    verify_opts};

static void report(const char *post_id, size_t len, int64_t expected, int64_t stored, void *opaque)
{
    int64_t *shown = opaque;
    if ((*shown)++ < 50) {
        char shown_id[HC_CLI_ESCAPED_SIZE(HC_POST_ID_MAX)];
        printf("mismatch: post %s: recount %" PRId64 ", store %" PRId64 "\n",
               hc_cli_escape(post_id, len, shown_id, sizeof(shown_id)), expected, stored);
    }
}

int hc_cmd_verify(int argc, char **argv)
{
    hc_cli_t cli;
    int status = hc_cli_parse(&cli, &verify_cmd, argc, argv);
    if (status >= 0) {
        return status;
    }
    uint64_t timeout, max_posts;
    if (!hc_cli_u64(&cli, "timeout", 120, &timeout) ||
        !hc_cli_u64(&cli, "max-posts", 50000000, &max_posts) || max_posts == 0) {
        hc_cli_fini(&cli);
        return HC_EXIT_USAGE;
    }
    hc_cli_install_signals();
    char errstr[512];
    hc_store_t *st = NULL;
    hc_table_t *counts = NULL;
    hc_err_t err = hc_store_open(&cli.cfg, &st, errstr, sizeof(errstr));
    if (err != HC_OK) {
        goto fail;
    }
    if (!hc_cli_has(&cli, "no-wait")) {
        int64_t deadline = hc_now_ms() + (int64_t)timeout * 1000;
        for (;;) {
            bool caught_up = false;
            int64_t lag = 0;
            err = hc_recount_caught_up(&cli.cfg, st, &caught_up, &lag, errstr, sizeof(errstr));
            if (err == HC_OK && caught_up) {
                break;
            }
            if (err != HC_OK && err != HC_ERR_TRANSIENT) {
                goto fail;
            }
            if (hc_now_ms() > deadline || atomic_load(&hc_cli_stop)) {
                fprintf(stderr,
                        "hotcount verify: stages not caught up after %" PRIu64 " s (%" PRId64
                        " messages behind)%s%s\n",
                        timeout, lag, err ? ": " : "", err ? errstr : "");
                status = HC_EXIT_FAILED;
                goto done;
            }
            hc_log(HC_LOG_INFO, "verify", "waiting: %" PRId64 " messages behind", lag);
            hc_cli_wait(1000, &hc_cli_stop); /* a stop is looked at above */
        }
    }
    counts = hc_table_new((size_t)max_posts);
    if (!counts) {
        fprintf(stderr, "hotcount verify: out of memory\n");
        status = HC_EXIT_FAILED;
        goto done;
    }
    int64_t valid = 0, invalid = 0;
    if ((err = hc_recount_raw(&cli.cfg, counts, &valid, &invalid, errstr, sizeof(errstr)))) {
        goto fail;
    }
    hc_recount_diff_t diff;
    int64_t shown = 0;
    if ((err = hc_recount_compare(st, counts, &diff, report, &shown, errstr, sizeof(errstr)))) {
        goto fail;
    }
    printf("recounted %" PRId64 " valid and %" PRId64 " malformed events in %s\n", valid, invalid,
           cli.cfg.topic_raw);
    if (diff.mismatches == 0) {
        printf("verify: exact (%" PRId64 " posts, 0 mismatches)\n", diff.posts);
        status = HC_EXIT_OK;
    } else {
        printf("verify: FAILED (%" PRId64 " posts, %" PRId64 " mismatches)\n", diff.posts,
               diff.mismatches);
        status = HC_EXIT_FAILED;
    }
    goto done;
fail:
    fprintf(stderr, "hotcount verify: %s\n", errstr);
    status = err == HC_ERR_INVALID ? HC_EXIT_USAGE : HC_EXIT_FAILED;
done:
    hc_table_destroy(counts);
    hc_store_close(st);
    hc_cli_fini(&cli);
    return status;
}
