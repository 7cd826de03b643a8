/* metrics: the metrics hotcount exposes, from the registry (hotcount/metric_defs.h). */
#include <stdio.h>

#include "cli.h"
#include "cmds.h"
#include "hotcount/metric_defs.h"

static const hc_cli_opt_t metrics_opts[] = {
    {"markdown", 0, NULL,
     "a Markdown table (metric, type, labels, meaning), as docs/OPERATIONS.md and "
     "docs/FORMATS.md hold it"},
    {"serve", 0, NULL, "the metrics of `hotcount serve`'s /metrics instead of the stages'"},
    {NULL, 0, NULL, NULL},
};

static const hc_cli_cmd_t metrics_cmd = {
    "metrics", "",
    "Lists the metrics the stages serve on metrics.listen (--serve: `hotcount serve` on "
    "serve.listen), one per line: name, type, labels, help, tab-separated.",
    metrics_opts};

int hc_cmd_metrics(int argc, char **argv)
{
    hc_cli_t cli;
    int status = hc_cli_parse(&cli, &metrics_cmd, argc, argv);
    if (status >= 0) {
        return status;
    }
    hc_metric_page_t page =
        hc_cli_has(&cli, "serve") ? HC_METRIC_PAGE_SERVE : HC_METRIC_PAGE_STAGES;
    if (hc_cli_has(&cli, "markdown")) {
        hc_metric_defs_print_markdown(stdout, page);
    } else {
        hc_metric_defs_print(stdout, page);
    }
    hc_cli_fini(&cli);
    return HC_EXIT_OK;
}
