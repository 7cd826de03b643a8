/* mock-broker: librdkafka's mock cluster as a stand-alone process, for trying hotcount and kcat
 * without a real Kafka. Not durable, not for production. */
#include <stdio.h>
#include <time.h>

#include "cli.h"
#include "cli_wait.h"
#include "cmds.h"
#include "hotcount/admin.h"

static const hc_cli_opt_t mock_opts[] = {
    {"brokers", 'b', "N", "number of mock brokers (default 1)"},
    {NULL, 0, NULL, NULL},
};

static const hc_cli_cmd_t mock_cmd = {
    "mock-broker", "",
    "Starts an in-process Kafka (librdkafka's mock cluster) on 127.0.0.1 with hotcount's topics, "
    "prints its bootstrap address on the first line of stdout, and serves until SIGINT/SIGTERM. "
    "It keeps about 5 MiB per partition and does not store transactional offsets.",
    mock_opts};

int hc_cmd_mock_broker(int argc, char **argv)
{
    hc_cli_t cli;
    int status = hc_cli_parse(&cli, &mock_cmd, argc, argv);
    if (status >= 0) {
        return status;
    }
    uint64_t brokers;
    if (!hc_cli_u64(&cli, "brokers", 1, &brokers) || brokers < 1 || brokers > 16) {
        fprintf(stderr, "hotcount mock-broker: --brokers must be within 1..16\n");
        hc_cli_fini(&cli);
        return HC_EXIT_USAGE;
    }
    hc_cli_install_signals();
    hc_mock_t mock;
    char errstr[512];
    if (hc_mock_start(&mock, &cli.cfg, (int)brokers, errstr, sizeof(errstr)) != HC_OK) {
        fprintf(stderr, "hotcount mock-broker: %s\n", errstr);
        hc_cli_fini(&cli);
        return HC_EXIT_FAILED;
    }
    printf("%s\n", mock.bootstraps);
    fflush(stdout);
    hc_cli_wait(-1, &hc_cli_stop);
    hc_mock_stop(&mock);
    hc_cli_fini(&cli);
    return HC_EXIT_OK;
}
