/* config: the example configuration file. */
#include <stdio.h>

#include "cli.h"
#include "cmds.h"
#include "hotcount/store.h"

static const hc_cli_cmd_t config_cmd = {
    "config", "",
    "Prints a configuration file with every key at its default and its description; "
    "with -c/-X it first checks them (exit 2 naming a bad key).",
    NULL};

int hc_cmd_config(int argc, char **argv)
{
    hc_cli_t cli;
    int status = hc_cli_parse(&cli, &config_cmd, argc, argv);
    if (status >= 0) {
        return status;
    }
    hc_config_print_example(stdout, hc_store_facts());
    hc_cli_fini(&cli);
    return HC_EXIT_OK;
}
