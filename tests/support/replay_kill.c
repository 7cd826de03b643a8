/* `hotcount dlq replay` killed at its worst moment, for tests/integration/dlq_replay.sh: the
 * replay of hc_dlq_replay with a before_commit hook that SIGKILLs the process after batch K's
 * records are written, before that transaction commits. The hook lives here, in a test program,
 * so that the shipped binary carries no test switch.
 *
 *   replay_kill K REASON BATCH [-c FILE] [-X key=value]...
 *
 * Exits 137 (killed) when it reached batch K, 0 when the replay completed first, 2 on bad
 * usage or configuration, 1 when the replay failed. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hotcount/config.h"
#include "hotcount/dlq_replay.h"
#include "hotcount/log.h"
#include "hotcount/store.h"

static void kill_at(int64_t batch, void *opaque)
{
    if (batch == *(const int64_t *)opaque) {
        raise(SIGKILL);
    }
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: replay_kill K REASON BATCH [-c FILE] [-X key=value]...\n");
        return 2;
    }
    int64_t at = strtoll(argv[1], NULL, 10);
    int64_t batch = strtoll(argv[3], NULL, 10);
    char errstr[512];
    hc_config_t cfg;
    hc_log_setup(HC_LOG_WARN, HC_LOG_TEXT);
    if (hc_config_init(&cfg, hc_store_facts()) != HC_OK) {
        return 1;
    }
    hc_err_t err = HC_OK;
    for (int i = 4; i + 1 < argc && err == HC_OK; i += 2) {
        if (strcmp(argv[i], "-c") == 0) {
            err = hc_config_load_file(&cfg, argv[i + 1], errstr, sizeof(errstr));
        } else if (strcmp(argv[i], "-X") == 0) {
            err = hc_config_set_kv(&cfg, argv[i + 1], errstr, sizeof(errstr));
        } else {
            snprintf(errstr, sizeof(errstr), "unknown option %s", argv[i]);
            err = HC_ERR_INVALID;
        }
    }
    if (err == HC_OK) {
        err = hc_config_validate(&cfg, errstr, sizeof(errstr));
    }
    if (err != HC_OK) {
        fprintf(stderr, "replay_kill: %s\n", errstr);
        hc_config_fini(&cfg);
        return 2;
    }
    char group[512];
    snprintf(group, sizeof(group), "%s-dlq-replay", cfg.group_stage1);
    hc_replay_opts_t o = {.reason = argv[2],
                          .since_ms = HC_REPLAY_TIME_NONE,
                          .until_ms = HC_REPLAY_TIME_NONE,
                          .group = group,
                          .transactional_id = group,
                          .batch = batch,
                          .before_commit = kill_at,
                          .opaque = &at};
    hc_replay_stats_t st;
    err = hc_dlq_replay(&cfg, &o, &st, errstr, sizeof(errstr));
    if (err != HC_OK) {
        fprintf(stderr, "replay_kill: %s\n", errstr);
    }
    hc_config_fini(&cfg);
    return err == HC_OK ? 0 : 1;
}
