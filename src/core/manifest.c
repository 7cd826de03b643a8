/* A stage-1 window's consumed offset ranges and its manifest record (contract in
 * include/core/hotcount/manifest.h).
 *
 * Encoding runs once per window, not per event, so it writes through a memory stream. */
#include "hotcount/manifest.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

void hc_manifest_init(hc_manifest_t *man)
{
    man->ranges = NULL;
    man->cap = 0;
}

void hc_manifest_fini(hc_manifest_t *man)
{
    if (!man) {
        return;
    }
    free(man->ranges);
    hc_manifest_init(man);
}

static void range_reset(hc_manifest_range_t *r)
{
    r->first = HC_MANIFEST_NONE;
    r->next = HC_MANIFEST_NONE;
    r->messages = 0;
}

void hc_manifest_clear(hc_manifest_t *man)
{
    for (int32_t p = 0; p < man->cap; p++) {
        range_reset(&man->ranges[p]);
    }
}

hc_err_t hc_manifest_record(hc_manifest_t *man, int32_t partition, int64_t offset)
{
    if (partition < 0 || offset < 0) {
        return HC_ERR_INVALID;
    }
    if (partition >= man->cap) {
        /* Partition numbers are dense and small (a topic's count); doubling keeps a window
         * from reallocating per partition. */
        int32_t cap = man->cap ? man->cap : 16;
        while (cap <= partition) {
            if (cap > INT32_MAX / 2) {
                return HC_ERR_INVALID;
            }
            cap *= 2;
        }
        hc_manifest_range_t *grown = realloc(man->ranges, (size_t)cap * sizeof(*grown));
        if (!grown) {
            return HC_ERR_FATAL;
        }
        for (int32_t p = man->cap; p < cap; p++) {
            range_reset(&grown[p]);
        }
        man->ranges = grown;
        man->cap = cap;
    }
    hc_manifest_range_t *r = &man->ranges[partition];
    if (r->next != HC_MANIFEST_NONE && offset < r->next) {
        return HC_ERR_INVALID; /* the same message twice in one window would count twice */
    }
    if (r->first == HC_MANIFEST_NONE) {
        r->first = offset;
    }
    r->next = offset + 1;
    r->messages++;
    return HC_OK;
}

const hc_manifest_range_t *hc_manifest_range(const hc_manifest_t *man, int32_t partition)
{
    if (partition < 0 || partition >= man->cap || man->ranges[partition].next == HC_MANIFEST_NONE) {
        return NULL;
    }
    return &man->ranges[partition];
}

/* A JSON string: quote, backslash and control characters escaped; other bytes as they are
 * (instance ids, group and topic names are ASCII in practice, and validated upstream). */
static void put_string(FILE *fp, const char *s)
{
    fputc('"', fp);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            fputc('\\', fp);
            fputc(c, fp);
        } else if (c < 0x20 || c == 0x7f) {
            fprintf(fp, "\\u%04x", c);
        } else {
            fputc(c, fp);
        }
    }
    fputc('"', fp);
}

hc_err_t hc_manifest_encode(const hc_manifest_t *man, const hc_manifest_meta_t *meta, char **out,
                            size_t *out_len)
{
    char *buf = NULL;
    size_t len = 0;
    *out = NULL;
    *out_len = 0;
    FILE *fp = open_memstream(&buf, &len);
    if (!fp) {
        return HC_ERR_FATAL;
    }
    fputs("{\"transactional_id\":", fp);
    put_string(fp, meta->transactional_id);
    fputs(",\"instance_id\":", fp);
    put_string(fp, meta->instance_id);
    fprintf(fp, ",\"incarnation_ms\":%" PRId64 ",\"window\":%" PRId64 ",\"topic\":",
            meta->incarnation_ms, meta->window);
    put_string(fp, meta->topic);
    fprintf(fp,
            ",\"events\":%" PRId64 ",\"invalid\":%" PRId64 ",\"partials\":%" PRId64
            ",\"likes\":%" PRId64 ",\"ranges\":[",
            meta->events, meta->invalid, meta->partials, meta->likes);
    const char *sep = "";
    for (int32_t p = 0; p < man->cap; p++) {
        const hc_manifest_range_t *r = hc_manifest_range(man, p);
        if (r) {
            fprintf(fp,
                    "%s{\"partition\":%" PRId32 ",\"first\":%" PRId64 ",\"next\":%" PRId64
                    ",\"messages\":%" PRId64 "}",
                    sep, p, r->first, r->next, r->messages);
            sep = ",";
        }
    }
    fputs("]}", fp);
    bool failed = ferror(fp) != 0;
    if (fclose(fp) != 0 || failed) {
        free(buf);
        return HC_ERR_FATAL;
    }
    *out = buf;
    *out_len = len;
    return HC_OK;
}
