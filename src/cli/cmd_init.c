/* init: topics and store schema, both safe to repeat; and, when asked, a new partials key. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "cmds.h"
#include "hotcount/admin.h"
#include "hotcount/partial_auth.h"
#include "hotcount/redact.h"
#include "hotcount/store.h"

static const hc_cli_opt_t init_opts[] = {
    {"timeout", 't', "MS", "how long to wait for the cluster (default 30000)"},
    {"no-topics", 0, NULL, "only create the store schema"},
    {"new-auth-key", 0, NULL,
     "also write a new key to partials.auth.key.file (which must be set and must not exist; "
     "mode 0600)"},
    {NULL, 0, NULL, NULL},
};

static const hc_cli_cmd_t init_cmd = {
    "init", "",
    "Creates topic.raw, topic.partials, topic.dlq, topic.counts (if set; compacted), "
    "topic.manifest (if set) and topic.hotkeys (if set; compacted) with "
    "topic.<name>.partitions partitions and topic.replication.factor, and the store schema. "
    "Existing topics and tables are left as they are.",
    init_opts};

/* Writes a new key file at path: never over an existing file (O_EXCL), readable by its owner
 * only. The secret is never printed. */
static hc_err_t write_auth_key(const char *path, char *id, size_t id_size, char *errstr,
                               size_t errstr_size)
{
    uint8_t rnd[32];
    size_t got = 0;
    while (got < sizeof(rnd)) {
        ssize_t r = getrandom(rnd + got, sizeof(rnd) - got, 0);
        if (r <= 0) {
            hc_errstr_set(errstr, errstr_size, "no random bytes for a key");
            return HC_ERR_FATAL;
        }
        got += (size_t)r;
    }
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(id, id_size, "k%Y%m%d%H%M%S", &tm);
    char text[200];
    size_t len = hc_auth_key_file_text(id, rnd, text, sizeof(text));
    memset(rnd, 0, sizeof(rnd));
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    hc_err_t err = HC_OK;
    if (fd < 0) {
        hc_errstr_set(errstr, errstr_size, "partials.auth.key.file %s: %s", path,
                      errno == EEXIST ? "exists already (a key is never overwritten)"
                                      : strerror(errno));
        err = HC_ERR_INVALID;
    } else if (write(fd, text, len) != (ssize_t)len || fsync(fd) != 0) {
        hc_errstr_set(errstr, errstr_size, "partials.auth.key.file %s: %s", path, strerror(errno));
        err = HC_ERR_FATAL;
    }
    if (fd >= 0) {
        close(fd);
        if (err != HC_OK) {
            unlink(path);
        }
    }
    memset(text, 0, sizeof(text));
    return err;
}

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
    char key_id[40] = "";
    if (hc_cli_has(&cli, "new-auth-key")) {
        if (!cli.cfg.partials_auth_key_file[0]) {
            hc_errstr_set(errstr, sizeof(errstr),
                          "--new-auth-key: set partials.auth.key.file to the path to write");
            err = HC_ERR_INVALID;
        } else {
            err = write_auth_key(cli.cfg.partials_auth_key_file, key_id, sizeof(key_id), errstr,
                                 sizeof(errstr));
        }
    }
    if (err == HC_OK && !hc_cli_has(&cli, "no-topics")) {
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
        if (key_id[0]) {
            printf("wrote a new partials key (id %s) to %s\n", key_id,
                   cli.cfg.partials_auth_key_file);
        }
        status = HC_EXIT_OK;
    }
    hc_cli_fini(&cli);
    return status;
}
