/* config: the example configuration file, or the configuration reference. */
#include <stdio.h>

#include "cli.h"
#include "cmds.h"
#include "hotcount/store.h"

static const hc_cli_opt_t config_opts[] = {
    {"markdown", 0, NULL,
     "print the configuration reference instead: a Markdown table of every key (default, "
     "range, meaning), as docs/CONFIGURATION.md holds it"},
    {NULL, 0, NULL, NULL},
};

static const hc_cli_cmd_t config_cmd = {
    "config", "",
    "Prints a configuration file with every key at its default and its description; "
    "with -c/-X it first checks them (exit 2 naming a bad key).",
    config_opts};

int hc_cmd_config(int argc, char **argv)
{
    hc_cli_t cli;
    int status = hc_cli_parse(&cli, &config_cmd, argc, argv);
    if (status >= 0) {
        return status;
    }
    if (hc_cli_has(&cli, "markdown")) {
        hc_config_print_markdown(stdout, hc_store_facts());
    } else {
        hc_config_print_example(stdout, hc_store_facts());
    }
    hc_cli_fini(&cli);
    return HC_EXIT_OK;
}
