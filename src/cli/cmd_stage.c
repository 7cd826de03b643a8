/* stage1, stage2 and run: the long-running consumers. Each stage runs on its own thread until
 * SIGINT/SIGTERM; a stage that fails stops the others, and the process exits 1 with its
 * reason (2 for a configuration error found when the clients are created). */
#include <pthread.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "cli_wait.h"
#include "cmds.h"
#include "hotcount/clock.h"
#include "hotcount/kafka.h"
#include "hotcount/log.h"
#include "hotcount/metrics_http.h"
#include "hotcount/pipeline.h"

static const hc_cli_opt_t stage_opts[] = {
    {"check-config", 0, NULL,
     "check the configuration (including every kafka.* property, by building the clients "
     "without connecting) and exit 0, or 2 naming the bad key"},
    {NULL, 0, NULL, NULL},
};

/* --check-config: hc_cli_parse already ran every check on the keys (hc_config_validate: the
 * keys together and the derived timeouts; hc_kafka_check_overrides: the settings exactly-once
 * depends on); here the clients the stages would build are built offline, so librdkafka checks
 * every kafka.* property too. */
static int check_config(const hc_cli_t *cli, int n1, int n2)
{
    hc_kafka_role_t roles[3];
    size_t n = 0;
    if (n1) {
        roles[n++] = HC_KAFKA_ROLE_STAGE1_CONSUMER;
        roles[n++] = HC_KAFKA_ROLE_TXN_PRODUCER;
    }
    if (n2) {
        roles[n++] = HC_KAFKA_ROLE_STAGE2_CONSUMER;
    }
    char errstr[512];
    if (hc_kafka_check(&cli->cfg, roles, n, errstr, sizeof(errstr)) != HC_OK) {
        hc_cli_error(cli, "%s", errstr);
        return HC_EXIT_USAGE;
    }
    printf("configuration ok\n");
    return HC_EXIT_OK;
}

/* A stage stuck in one call cannot be stopped cleanly: its open window is left to Kafka's
 * transaction timeout and the store's compare-and-set, and the supervisor restarts us. Every
 * call a stage makes is bounded below watchdog.ms (cfg->timeouts.longest_call_ms, checked by
 * hc_config_validate), so a stage past it is stuck beyond any bound, not waiting on one. */
static void watchdog(const hc_timeouts_t *t, const hc_pipeline_t *pl)
{
    const char *name = "stage";
    int64_t stalled = hc_pipeline_stalled_ms(pl, hc_now_ms(), &name);
    if (t->watchdog_ms > 0 && stalled > t->watchdog_ms) {
        hc_log_event(HC_LOG_ERROR, name, "watchdog_expired", HC_LOG_INT("stalled_ms", stalled),
                     HC_LOG_INT("watchdog_ms", t->watchdog_ms),
                     HC_LOG_INT("longest_call_ms", t->longest_call_ms),
                     HC_LOG_INT("exit_status", HC_EXIT_WATCHDOG));
        _exit(HC_EXIT_WATCHDOG);
    }
}

/* The stop's bound. A stop closes the open window (a commit, a store batch), drains, leaves the
 * group and frees the clients; each step has its own bound, but together, with the store and
 * the broker out of reach, they add up to minutes (a store batch's retries, a transactional
 * call's 60 s, a drain's 10 s, the close's 5 s). A stage that is asked to stop must be gone
 * within stop.timeout.ms whatever it waits on: past it, the process leaves the rest to the
 * exactly-once machinery (the open transaction aborts at its timeout or is fenced by the next
 * incarnation; a store batch that did not land left the offsets where they were) and exits with
 * HC_EXIT_STOP_TIMEOUT. Detached, from the start (a stop can come while the stages are built):
 * it waits for the stop flag, then for the bound; a clean stop within it exits first. */
static int64_t stop_timeout_ms;

static void *stop_timer(void *arg)
{
    (void)arg;
    hc_cli_wait(-1, &hc_cli_stop); /* a stop may come while the stages are being built */
    hc_cli_wait(stop_timeout_ms, NULL);
    hc_log_event(HC_LOG_ERROR, "stop", "stop_timeout",
                 HC_LOG_INT("stop_timeout_ms", stop_timeout_ms),
                 HC_LOG_INT("exit_status", HC_EXIT_STOP_TIMEOUT));
    _exit(HC_EXIT_STOP_TIMEOUT);
    return NULL;
}

static void start_stop_timer(int64_t ms)
{
    pthread_t tid;
    stop_timeout_ms = ms;
    if (pthread_create(&tid, NULL, stop_timer, NULL) == 0) {
        pthread_detach(tid);
    }
}

static int run_stages(int argc, char **argv, const hc_cli_cmd_t *cmd, int n1, int n2)
{
    hc_cli_t cli;
    int status = hc_cli_parse(&cli, cmd, argc, argv);
    if (status >= 0) {
        return status;
    }
    if (hc_cli_has(&cli, "check-config")) {
        status = check_config(&cli, n1, n2);
        hc_cli_fini(&cli);
        return status;
    }
    hc_cli_install_signals();
    start_stop_timer(cli.cfg.stop_timeout_ms);
    hc_metrics_t metrics;
    hc_metrics_http_t *http = NULL;
    hc_pipeline_t *pl = NULL;
    char errstr[512];
    hc_err_t err = hc_metrics_init(&metrics);
    if (err != HC_OK) {
        hc_errstr_set(errstr, sizeof(errstr), "out of memory");
    } else {
        err = hc_metrics_http_start(cli.cfg.metrics_listen, &metrics, cli.cfg.flush_ms, &http,
                                    errstr, sizeof(errstr));
    }
    if (err == HC_OK && http) {
        hc_log(HC_LOG_INFO, cmd->name, "metrics on http://%s/metrics (port %d)",
               cli.cfg.metrics_listen, hc_metrics_http_port(http));
    }
    if (err == HC_OK) {
        err = hc_pipeline_start(&cli.cfg, n1, n2, &metrics, &hc_cli_stop, &pl, errstr,
                                sizeof(errstr));
    }
    if (err == HC_OK) {
        /* the stages stop on SIGINT/SIGTERM, or all of them when one fails */
        while (!hc_cli_wait(100, &hc_cli_stop)) {
            watchdog(&cli.cfg.timeouts, pl);
        }
        err = hc_pipeline_stop(pl, errstr, sizeof(errstr));
    }
    hc_metrics_http_stop(http);
    hc_metrics_fini(&metrics);
    if (err != HC_OK) {
        hc_cli_error(&cli, "%s", errstr);
        status = err == HC_ERR_INVALID   ? HC_EXIT_USAGE
                 : err == HC_ERR_STALLED ? HC_EXIT_STALLED
                                         : HC_EXIT_FAILED;
    } else {
        status = HC_EXIT_OK;
    }
    hc_cli_fini(&cli);
    return status;
}

int hc_cmd_stage1(int argc, char **argv)
{
    static const hc_cli_cmd_t cmd = {
        "stage1", "",
        "Runs stage 1: consumes likes.raw, sums likes per post for flush.ms, and commits each "
        "window's partials, dead-letter records and offsets in one Kafka transaction. Stops "
        "cleanly on SIGINT/SIGTERM (commits or aborts the open window, exit 0) within "
        "stop.timeout.ms, else exits 5. Exit 3: the watchdog ended a stuck call; 4: a partition "
        "stood still past its own recovery (partition_stalled_exit).",
        stage_opts};
    return run_stages(argc, argv, &cmd, 1, 0);
}

int hc_cmd_stage2(int argc, char **argv)
{
    static const hc_cli_cmd_t cmd = {
        "stage2", "",
        "Runs stage 2: consumes likes.partials (read_committed), merges them per post and "
        "applies one atomic store batch per flush.ms: the deltas plus the consumed offsets, "
        "conditional on the offsets it started from. Stops cleanly on SIGINT/SIGTERM within "
        "stop.timeout.ms, else exits 5. Exit 3: the watchdog ended a stuck call; 4: a partition "
        "stood still past its own recovery (partition_stalled_exit).",
        stage_opts};
    return run_stages(argc, argv, &cmd, 0, 1);
}

int hc_cmd_run(int argc, char **argv)
{
    static const hc_cli_cmd_t cmd = {
        "run", "", "Runs stage 1 and stage 2 in one process until SIGINT/SIGTERM.", stage_opts};
    return run_stages(argc, argv, &cmd, 1, 1);
}
