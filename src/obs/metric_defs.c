/* The metric registry's table (hotcount/metric_defs.h) and its Markdown. */
#include "hotcount/metric_defs.h"

#include <string.h>

const hc_metric_def_t hc_metric_defs[HC_METRIC_COUNT] = {
#define HC_METRIC_DEF_(id, page, name, type, labels, help, doc)                                    \
    [HC_M_##id] = {HC_METRIC_PAGE_##page, name, HC_METRIC_##type, labels, help, doc},
    HC_METRIC_TABLE(HC_METRIC_DEF_)
#undef HC_METRIC_DEF_
};

const char *hc_metric_type_str(hc_metric_type_t type)
{
    switch (type) {
    case HC_METRIC_COUNTER:
        return "counter";
    case HC_METRIC_GAUGE:
        return "gauge";
    case HC_METRIC_HISTOGRAM:
        return "histogram";
    }
    return "untyped";
}

/* Text for a table cell: a pipe escaped, as GitHub's tables need it even inside code spans. */
static void put_cell(FILE *out, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '|') {
            fputc('\\', out);
        }
        fputc(s[i], out);
    }
}

/* `a`, `b="x"|"y"`: each comma-separated label in a code span. */
static void put_labels(FILE *out, const char *labels)
{
    const char *p = labels;
    while (*p) {
        size_t n = strcspn(p, ",");
        fputc('`', out);
        put_cell(out, p, n);
        fputc('`', out);
        p += n;
        if (*p == ',') {
            fputs(", ", out);
            p++;
            p += strspn(p, " ");
        }
    }
}

void hc_metric_defs_print_markdown(FILE *out, hc_metric_page_t page)
{
    fputs("| metric | type | labels | meaning |\n|---|---|---|---|\n", out);
    for (size_t i = 0; i < HC_METRIC_COUNT; i++) {
        const hc_metric_def_t *def = &hc_metric_defs[i];
        if (def->page != page) {
            continue;
        }
        fprintf(out, "| `%s` | %s | ", def->name, hc_metric_type_str(def->type));
        put_labels(out, def->labels);
        fputs(def->labels[0] ? " | " : "| ", out);
        put_cell(out, def->doc, strlen(def->doc));
        fputs(" |\n", out);
    }
}

void hc_metric_defs_print(FILE *out, hc_metric_page_t page)
{
    for (size_t i = 0; i < HC_METRIC_COUNT; i++) {
        const hc_metric_def_t *def = &hc_metric_defs[i];
        if (def->page == page) {
            fprintf(out, "%s\t%s\t%s\t%s\n", def->name, hc_metric_type_str(def->type), def->labels,
                    def->help);
        }
    }
}
