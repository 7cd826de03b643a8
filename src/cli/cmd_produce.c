/* produce: the load generator. */
#include <inttypes.h>
#include <stdio.h>

#include "cli.h"
#include "cmds.h"
#include "hotcount/clock.h"
#include "hotcount/loadgen.h"

static const hc_cli_opt_t produce_opts[] = {
    {"events", 'n', "N", "events to send (default 1000000)"},
    {"rate", 'r', "R", "events per second, 0 = unlimited (default 0)"},
    {"posts", 'p', "N", "distinct posts, ids \"1\"..\"N\" (default 100000)"},
    {"zipf", 's', "S", "Zipf exponent of post popularity (default 1.1)"},
    {"unlike-ratio", 'u', "F", "share of unlike events, 0..1 (default 0.05)"},
    {"invalid-ratio", 'i', "F", "share of malformed events, 0..1 (default 0)"},
    {"seed", 0, "N", "random seed (default 1)"},
    {"adaptive", 0, NULL,
     "adaptive salting: follow topic.hotkeys, salt a post over its salts only while it is hot, "
     "else key it <post_id>#0"},
    {NULL, 0, NULL, NULL},
};

static const hc_cli_cmd_t produce_cmd = {
    "produce", "",
    "Produces Zipfian like events to topic.raw, keyed <post_id>#<salt> with salt = "
    "fnv1a32(user_id) % salts, and prints how many the broker acknowledged.",
    produce_opts};

int hc_cmd_produce(int argc, char **argv)
{
    hc_cli_t cli;
    int status = hc_cli_parse(&cli, &produce_cmd, argc, argv);
    if (status >= 0) {
        return status;
    }
    hc_loadgen_opts_t opts = {0};
    if (!hc_cli_u64(&cli, "events", 1000000, &opts.events) ||
        !hc_cli_double(&cli, "rate", 0, &opts.rate) ||
        !hc_cli_u64(&cli, "posts", 100000, &opts.posts) ||
        !hc_cli_double(&cli, "zipf", 1.1, &opts.zipf_s) ||
        !hc_cli_double(&cli, "unlike-ratio", 0.05, &opts.unlike_ratio) ||
        !hc_cli_double(&cli, "invalid-ratio", 0, &opts.invalid_ratio) ||
        !hc_cli_u64(&cli, "seed", 1, &opts.seed)) {
        hc_cli_fini(&cli);
        return HC_EXIT_USAGE;
    }
    opts.adaptive = hc_cli_has(&cli, "adaptive");
    hc_cli_install_signals();
    hc_tally_t tally;
    if (hc_tally_init(&tally, opts.posts) != HC_OK) {
        fprintf(stderr, "hotcount produce: out of memory for %" PRIu64 " posts\n", opts.posts);
        hc_cli_fini(&cli);
        return HC_EXIT_FAILED;
    }
    char errstr[512];
    int64_t t0 = hc_now_ms();
    hc_err_t err = hc_loadgen_run(&cli.cfg, &opts, &tally, &hc_cli_stop, errstr, sizeof(errstr));
    double secs = (double)(hc_now_ms() - t0) / 1000.0;
    int64_t acked = atomic_load(&tally.acked_valid) + atomic_load(&tally.acked_invalid);
    printf("produced %" PRId64 " events (%" PRId64 " valid, %" PRId64 " malformed) in %.1f s, "
           "%.0f events/s; %" PRId64 " failed\n",
           acked, (int64_t)atomic_load(&tally.acked_valid),
           (int64_t)atomic_load(&tally.acked_invalid), secs, secs > 0 ? (double)acked / secs : 0,
           (int64_t)atomic_load(&tally.failed));
    if (opts.adaptive) {
        printf("adaptive: %" PRId64 " valid events salted, %" PRId64 " hotkeys records followed\n",
               (int64_t)atomic_load(&tally.salted), (int64_t)atomic_load(&tally.hot_records));
    }
    if (err != HC_OK) {
        fprintf(stderr, "hotcount produce: %s\n", errstr);
        status = err == HC_ERR_INVALID ? HC_EXIT_USAGE : HC_EXIT_FAILED;
    } else {
        status = atomic_load(&tally.failed) ? HC_EXIT_FAILED : HC_EXIT_OK;
    }
    hc_tally_fini(&tally);
    hc_cli_fini(&cli);
    return status;
}
