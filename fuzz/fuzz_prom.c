/* libFuzzer target for the one reader of Prometheus text (src/obs/prom_text.c), which
 * `hotcount status`, serve's /v1/stats and the hot-keys scrape run on whatever answers at the
 * address a user gave them; fuzz/run.sh prom builds and runs it.
 *
 * The input is a page (NUL-terminated in a buffer of exactly its size, so ASan sees a read past
 * it). For every sample the reader returns: the name and the label set lie within the sample's
 * own line, the name is a metric name, the position only moves forward; and every label lookup
 * (a few keys, a buffer too small and a large one) writes a terminated value within its buffer
 * whose length it reports. Any failure prints the input and calls abort(), which libFuzzer saves
 * as an artifact. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hotcount/prom_text.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *why, const char *page, size_t size)
{
    fprintf(stderr, "==== fuzz_prom: %s\ninput (%zu bytes): %.*s\n", why, size,
            (int)(size < 4096 ? size : 4096), page);
    abort();
}

static void check_label(const hc_prom_sample_t *s, const char *key, size_t out_size,
                        const char *page, size_t size)
{
    char out[300];
    size_t len = 12345;
    memset(out, 'x', sizeof(out));
    if (hc_prom_label(s, key, out, out_size, &len)) {
        if (len >= out_size || out[len] != '\0' || strlen(out) > len) {
            fail("a label value is not terminated within its buffer", page, size);
        }
        if (out[out_size] != 'x') {
            fail("a label lookup wrote past its buffer", page, size);
        }
    } else if (len != 12345) {
        fail("a label that is absent reported a length", page, size);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *page = malloc(size + 1);
    if (!page) {
        return 0;
    }
    memcpy(page, data, size);
    page[size] = '\0';
    size_t len = strlen(page); /* the reader sees the page up to its first NUL */
    const char *pos = page;
    const char *last = page;
    hc_prom_sample_t s;
    static const char *const keys[] = {"post_id", "stage", "topic", "source", "le", ""};
    while (hc_prom_next(&pos, &s)) {
        if (pos <= last || pos > page + len) {
            fail("the position did not move forward within the page", page, size);
        }
        const char *line_end = memchr(s.name, '\n', (size_t)(page + len - s.name));
        const char *end = line_end ? line_end : page + len;
        if (s.name < last || s.name_len == 0 || s.name + s.name_len > end ||
            s.labels < s.name + s.name_len || s.labels + s.labels_len > end) {
            fail("a sample reaches out of its line", page, size);
        }
        for (size_t i = 0; i < s.name_len; i++) {
            char c = s.name[i];
            bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' ||
                      (i > 0 && c >= '0' && c <= '9');
            if (!ok) {
                fail("a name that is no metric name", page, size);
            }
        }
        for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++) {
            check_label(&s, keys[k], 1, page, size);
            check_label(&s, keys[k], 4, page, size);
            check_label(&s, keys[k], 299, page, size);
            (void)hc_prom_has_label(&s, keys[k], "1");
        }
        (void)hc_prom_is(&s, "hotcount_events_total");
        last = pos;
    }
    free(page);
    return 0;
}
