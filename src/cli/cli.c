#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hotcount/kafka.h"
#include "hotcount/log.h"
#include "hotcount/redact.h"
#include "hotcount/store.h"

atomic_bool hc_cli_stop;

static void on_signal(int sig)
{
    (void)sig;
    atomic_store(&hc_cli_stop, true);
}

void hc_cli_install_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

static void print_help(const hc_cli_cmd_t *cmd)
{
    printf("usage: hotcount %s [-c FILE] [-X key=value]...%s%s%s\n\n%s\n\noptions:\n", cmd->name,
           cmd->opts ? " [options]" : "", cmd->args[0] ? " " : "", cmd->args, cmd->summary);
    printf("  -c, --config FILE        properties file (key=value lines)\n");
    printf("  -X key=value             set one configuration key (after the file, in order)\n");
    printf("  -h, --help               this help\n");
    for (const hc_cli_opt_t *o = cmd->opts; o && o->name; o++) {
        char left[64];
        if (o->short_name) {
            snprintf(left, sizeof(left), "-%c, --%s%s%s", o->short_name, o->name, o->arg ? " " : "",
                     o->arg ? o->arg : "");
        } else {
            snprintf(left, sizeof(left), "    --%s%s%s", o->name, o->arg ? " " : "",
                     o->arg ? o->arg : "");
        }
        printf("  %-24s %s\n", left, o->doc);
    }
    printf("\nconfiguration keys (-X key=value or in the file):\n");
    hc_config_print_help(stdout, hc_store_facts());
}

int hc_cli_parse(hc_cli_t *cli, const hc_cli_cmd_t *cmd, int argc, char **argv)
{
    memset(cli, 0, sizeof(*cli));
    cli->cmd = cmd;
    char errstr[512];
    if (hc_config_init(&cli->cfg, hc_store_facts()) != HC_OK) {
        fprintf(stderr, "hotcount: out of memory\n");
        return HC_EXIT_FAILED;
    }
    struct option longopts[HC_CLI_MAX_OPTS + 4];
    char shortopts[2 * HC_CLI_MAX_OPTS + 8] = "c:X:h";
    int n = 0;
    longopts[n++] = (struct option){"config", required_argument, NULL, 'c'};
    longopts[n++] = (struct option){"help", no_argument, NULL, 'h'};
    int nopts = 0;
    for (const hc_cli_opt_t *o = cmd->opts; o && o->name; o++, nopts++) {
        longopts[n++] =
            (struct option){o->name, o->arg ? required_argument : no_argument, NULL, 256 + nopts};
        if (o->short_name) {
            size_t l = strlen(shortopts);
            shortopts[l] = o->short_name;
            shortopts[l + 1] = o->arg ? ':' : '\0';
            shortopts[l + 2] = '\0';
        }
    }
    longopts[n] = (struct option){NULL, 0, NULL, 0};

    const char *file = NULL;
    const char **overrides = calloc((size_t)argc + 1, sizeof(*overrides));
    int noverrides = 0;
    int status = -1;
    optind = 1;
    opterr = 0;
    int c;
    /* argv[0] is the command name */
    while (status < 0 && (c = getopt_long(argc, argv, shortopts, longopts, NULL)) != -1) {
        if (c == 'c') {
            file = optarg;
        } else if (c == 'X') {
            overrides[noverrides++] = optarg;
        } else if (c == 'h') {
            print_help(cmd);
            status = HC_EXIT_OK;
        } else if (c >= 256) {
            cli->values[c - 256] = optarg ? optarg : "";
        } else if (c == '?') {
            fprintf(stderr, "hotcount %s: unknown or incomplete option \"%s\" (see --help)\n",
                    cmd->name, argv[optind - 1]);
            status = HC_EXIT_USAGE;
        } else {
            int i = 0;
            for (const hc_cli_opt_t *o = cmd->opts; o && o->name; o++, i++) {
                if (o->short_name == c) {
                    cli->values[i] = optarg ? optarg : "";
                }
            }
        }
    }
    if (status < 0 && file && hc_config_load_file(&cli->cfg, file, errstr, sizeof(errstr))) {
        hc_cli_error(cli, "%s", errstr);
        status = HC_EXIT_USAGE;
    }
    for (int i = 0; status < 0 && i < noverrides; i++) {
        if (hc_config_set_kv(&cli->cfg, overrides[i], errstr, sizeof(errstr)) != HC_OK) {
            hc_cli_error(cli, "-X %s", errstr);
            status = HC_EXIT_USAGE;
        }
    }
    free(overrides);
    /* every check, for every command: the keys together, then the kafka.* settings that
     * exactly-once depends on */
    if (status < 0 && (hc_config_validate(&cli->cfg, errstr, sizeof(errstr)) != HC_OK ||
                       hc_kafka_check_overrides(&cli->cfg, errstr, sizeof(errstr)) != HC_OK)) {
        hc_cli_error(cli, "%s", errstr);
        status = HC_EXIT_USAGE;
    }
    if (status >= 0) {
        hc_config_fini(&cli->cfg); /* the command returns at once: nothing left to free */
        return status;
    }
    hc_log_level_t level = HC_LOG_INFO;
    hc_log_format_t format = HC_LOG_TEXT;
    hc_log_level_parse(cli->cfg.log_level, &level);
    hc_log_format_parse(cli->cfg.log_format, &format);
    hc_log_setup(level, format);
    cli->npos = argc - optind;
    cli->pos = argv + optind;
    return -1;
}

void hc_cli_error(const hc_cli_t *cli, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    /* the safety net behind every message's own redaction: no configured secret is printed,
     * whoever quoted it */
    hc_redact_config_secrets(msg, sizeof(msg), &cli->cfg);
    fprintf(stderr, "hotcount %s: %s\n", cli->cmd->name, msg);
}

void hc_cli_fini(hc_cli_t *cli)
{
    hc_config_fini(&cli->cfg);
}

static int opt_index(const hc_cli_t *cli, const char *name)
{
    int i = 0;
    for (const hc_cli_opt_t *o = cli->cmd->opts; o && o->name; o++, i++) {
        if (strcmp(o->name, name) == 0) {
            return i;
        }
    }
    return -1;
}

bool hc_cli_has(const hc_cli_t *cli, const char *name)
{
    int i = opt_index(cli, name);
    return i >= 0 && cli->values[i] != NULL;
}

const char *hc_cli_str(const hc_cli_t *cli, const char *name, const char *dflt)
{
    int i = opt_index(cli, name);
    return i >= 0 && cli->values[i] ? cli->values[i] : dflt;
}

bool hc_cli_u64(const hc_cli_t *cli, const char *name, uint64_t dflt, uint64_t *out)
{
    const char *s = hc_cli_str(cli, name, NULL);
    if (!s) {
        *out = dflt;
        return true;
    }
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-') {
        fprintf(stderr, "hotcount %s: --%s: \"%s\" is not a non-negative integer\n", cli->cmd->name,
                name, s);
        return false;
    }
    *out = v;
    return true;
}

bool hc_cli_double(const hc_cli_t *cli, const char *name, double dflt, double *out)
{
    const char *s = hc_cli_str(cli, name, NULL);
    if (!s) {
        *out = dflt;
        return true;
    }
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v)) {
        fprintf(stderr, "hotcount %s: --%s: \"%s\" is not a number\n", cli->cmd->name, name, s);
        return false;
    }
    *out = v;
    return true;
}
