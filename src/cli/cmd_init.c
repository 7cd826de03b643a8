/* init: topics and store schema, both safe to repeat. */
#include <stdio.h>

#include "cli.h"
#include "cmds.h"
#include "hotcount/admin.h"
#include "hotcount/redact.h"
#include "hotcount/store.h"

static const hc_cli_opt_t init_opts[] = {
    {"timeout", 't', "MS", "how long to wait for the cluster (default 30000)"},
    {"no-topics", 0, NULL, "only create the store schema"},
    {NULL, 0, NULL, NULL},
};

static const hc_cli_cmd_t init_cmd = {
    "init", "",
    "Creates topic.raw, topic.partials, topic.dlq, topic.counts (if set; compacted), "
    "topic.manifest (if set) and topic.hotkeys (if set; compacted) with "
    "topic.<name>.partitions partitions and topic.replication.factor, and the store schema. "
    "Existing topics and tables are left as they are.",
    init_opts};

int hc_cmd_init(int argc, char **argv)
{
    hc_cli_t cli;
    int status = hc_cli_parse(&cli, &init_cmd, argc, argv);
    if (status >= 0) {
        return status;
    }
    uint64_t timeout;
    if (!hc_cli_u64(&cli, "timeout", 30000, &timeout)) {
        hc_cli_fini(&cli);
        return HC_EXIT_USAGE;
    }
    char errstr[512];
    hc_err_t err = HC_OK;
    if (!hc_cli_has(&cli, "no-topics")) {
        err = hc_admin_create_topics(&cli.cfg, (int)timeout, errstr, sizeof(errstr));
    }
    hc_store_t *st = NULL;
    if (err == HC_OK) {
        err = hc_store_open(&cli.cfg, &st, errstr, sizeof(errstr));
    }
    if (err == HC_OK) {
        err = hc_store_init_schema(st, errstr, sizeof(errstr));
    }
    hc_store_close(st);
    if (err != HC_OK) {
        fprintf(stderr, "hotcount init: %s\n", errstr);
        status = err == HC_ERR_INVALID ? HC_EXIT_USAGE : HC_EXIT_FAILED;
    } else {
        /* the store URI may carry a password: shown redacted, as everywhere */
        char store[1024];
        hc_redact_uri(cli.cfg.store, store, sizeof(store));
        if (hc_cli_has(&cli, "no-topics")) {
            printf("initialised the %s store\n", store);
        } else {
            printf("initialised topics on %s and the %s store\n", cli.cfg.brokers, store);
        }
        status = HC_EXIT_OK;
    }
    hc_cli_fini(&cli);
    return status;
}
