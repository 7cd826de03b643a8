/* serve: the HTTP read API, the live page and serve's own metrics, until SIGINT/SIGTERM. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "cmds.h"
#include "hotcount/serve.h"

static const hc_cli_cmd_t serve_cmd = {
    "serve", "",
    "Serves the counts over HTTP on serve.listen until SIGINT/SIGTERM: GET /v1/likes/POST, "
    "/v1/likes?ids=a,b,c, /v1/top?n=N, /v1/stats, the live page at /, and /metrics. Each post "
    "is read from the store at most once per serve.ttl.ms, however many clients ask. Prints "
    "the base URL (with the bound port) on the first line of stdout.",
    NULL};

int hc_cmd_serve(int argc, char **argv)
{
    hc_cli_t cli;
    int status = hc_cli_parse(&cli, &serve_cmd, argc, argv);
    if (status >= 0) {
        return status;
    }
    hc_cli_install_signals();
    hc_serve_t *srv = NULL;
    char errstr[512];
    hc_err_t err = hc_serve_start(&cli.cfg, &srv, errstr, sizeof(errstr));
    if (err != HC_OK) {
        fprintf(stderr, "hotcount serve: %s\n", errstr);
        hc_cli_fini(&cli);
        return err == HC_ERR_INVALID ? HC_EXIT_USAGE : HC_EXIT_FAILED;
    }
    const char *listen = cli.cfg.serve_listen;
    const char *colon = strrchr(listen, ':');
    printf("http://%.*s:%d/\n", (int)(colon - listen), listen, hc_serve_port(srv));
    fflush(stdout);
    while (!atomic_load(&hc_cli_stop)) {
        struct timespec ts = {0, 100 * 1000000};
        nanosleep(&ts, NULL);
    }
    hc_serve_stop(srv);
    hc_cli_fini(&cli);
    return HC_EXIT_OK;
}
