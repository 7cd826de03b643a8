/* The command line shared by every command: `hotcount <command> [-c FILE] [-X key=value]...
 * [options] [args]`. Builds the configuration (defaults, then the file, then each -X in order),
 * sets up logging, and parses the command's own options from a small table that also writes
 * its --help. Only main.c and cmd_*.c use it; exit statuses are the contract's (0 ok, 1 failed
 * check, 2 usage or configuration). */
#ifndef HOTCOUNT_CLI_H
#define HOTCOUNT_CLI_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "hotcount/config.h"

#define HC_EXIT_OK 0
#define HC_EXIT_FAILED 1
#define HC_EXIT_USAGE 2
#define HC_EXIT_WATCHDOG 3     /* a stage hung in a call: restart the process */
#define HC_EXIT_STALLED 4      /* a partition stood still past its recovery: restart the process */
#define HC_EXIT_STOP_TIMEOUT 5 /* a stop took longer than stop.timeout.ms: left unfinished */
#define HC_CLI_MAX_OPTS 24

typedef struct hc_cli_opt {
    const char *name; /* long name without "--" */
    char short_name;  /* 0: none */
    const char *arg;  /* metavariable, NULL for a flag */
    const char *doc;
} hc_cli_opt_t;

typedef struct hc_cli_cmd {
    const char *name;
    const char *args;         /* positional arguments for the usage line, "" for none */
    const char *summary;      /* one line */
    const hc_cli_opt_t *opts; /* NULL-name terminated, may be NULL */
} hc_cli_cmd_t;

typedef struct hc_cli {
    hc_config_t cfg; /* owned */
    const hc_cli_cmd_t *cmd;
    const char *values[HC_CLI_MAX_OPTS]; /* per cmd->opts entry: the argument, or "" for a flag */
    int npos;
    char **pos; /* positional arguments, borrowed from argv */
} hc_cli_t;

/* Returns -1 when the command should run (then hc_cli_fini frees cli), else the exit status to
 * return at once (0 after --help, 2 after a usage or configuration error, already reported on
 * stderr), with nothing left to free. */
int hc_cli_parse(hc_cli_t *cli, const hc_cli_cmd_t *cmd, int argc, char **argv);
void hc_cli_fini(hc_cli_t *cli);

/* "hotcount <command>: <message>" on stderr, with every secret cli->cfg holds redacted
 * (hotcount/redact.h). Every command reports its errors through it. */
void hc_cli_error(const hc_cli_t *cli, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

bool hc_cli_has(const hc_cli_t *cli, const char *name);
const char *hc_cli_str(const hc_cli_t *cli, const char *name, const char *dflt);
/* Parse an option's value; on a bad value print an error naming the option and return false. */
bool hc_cli_u64(const hc_cli_t *cli, const char *name, uint64_t dflt, uint64_t *out);
bool hc_cli_double(const hc_cli_t *cli, const char *name, double dflt, double *out);

/* Set by SIGINT/SIGTERM once hc_cli_install_signals() ran. */
extern atomic_bool hc_cli_stop;
void hc_cli_install_signals(void);

#endif
