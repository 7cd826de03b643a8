/* Hand-run micro benchmark of what the late-write defence (hotcount/source_check.h) adds per
 * partial, against what a partial already costs, one core, no broker:
 *
 *   stage 1: the hotcount-window header built for each partial (rd_kafka_headers_new +
 *            rd_kafka_header_add, freed as the delivered message frees it), against the
 *            partial's encoding (hc_partial_encode);
 *   stage 2: hc_source_check + hc_source_accept of that header, against hc_partial_check (the
 *            jansson decode and the rules every partial already passes): for a run of one
 *            window's siblings (the common case), and for two windows alternating record by
 *            record (every header parsed: the worst case).
 *
 * The window reads 8 raw partitions (16 raw partitions over two stage-1 instances) at 9-digit
 * offsets. Usage: bench_source [partials] (default 2000000). Prints one line per measure, in
 * nanoseconds per partial. Build: cmake --build DIR --target bench_source. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <librdkafka/rdkafka.h>

#include "hotcount/manifest.h"
#include "hotcount/partial.h"
#include "hotcount/partial_check.h"
#include "hotcount/source_check.h"
#include "hotcount/table.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? strtol(argv[1], NULL, 10) : 2000000;
    if (n <= 0) {
        fprintf(stderr, "usage: bench_source [partials]\n");
        return 2;
    }
    hc_manifest_t win;
    hc_manifest_init(&win);
    for (int32_t p = 0; p < 16; p += 2) {
        for (int64_t o = 0; o < 2500; o++) {
            if (hc_manifest_record(&win, p, 123456789 + o) != HC_OK) {
                return 1;
            }
        }
    }
    char hdr[2048];
    size_t hdr_len =
        hc_source_encode("hotcount-stage1-bench", 1764600000123, 42, &win, hdr, sizeof(hdr));
    if (hdr_len == 0) {
        return 1;
    }

    /* stage 1 */
    hc_table_entry_t ent;
    memset(&ent, 0, sizeof(ent));
    char post[32];
    double t0 = now_s();
    size_t bytes = 0;
    for (long i = 0; i < n; i++) {
        char buf[HC_PARTIAL_MAX_BYTES];
        int len = snprintf(post, sizeof(post), "%ld", i % 100000);
        ent.post_id = post;
        ent.post_id_len = (uint32_t)len;
        ent.delta = 3;
        ent.events = 3;
        ent.ts_min = ent.ts_max = HC_TS_NONE;
        bytes += hc_partial_encode(&ent, buf, sizeof(buf));
    }
    double encode = now_s() - t0;
    t0 = now_s();
    for (long i = 0; i < n; i++) {
        rd_kafka_headers_t *hdrs = rd_kafka_headers_new(1);
        rd_kafka_header_add(hdrs, HC_SOURCE_HEADER, -1, hdr, (ssize_t)hdr_len);
        rd_kafka_headers_destroy(hdrs);
    }
    double header = now_s() - t0;

    /* stage 2 */
    char value[HC_PARTIAL_MAX_BYTES];
    ent.post_id = "12345";
    ent.post_id_len = 5;
    size_t vlen = hc_partial_encode(&ent, value, sizeof(value));
    hc_partial_t partial;
    char why[256];
    t0 = now_s();
    long ok = 0;
    for (long i = 0; i < n; i++) {
        ok += hc_partial_check(value, vlen, &partial, why, sizeof(why)) == HC_PARTIAL_OK;
    }
    double decode = now_s() - t0;
    hc_source_check_t *sc = hc_source_check_new();
    t0 = now_s();
    for (long i = 0; i < n; i++) {
        int32_t q = (int32_t)(i & 7);
        if (hc_source_check(sc, q, hdr, hdr_len, why, sizeof(why)) == HC_PARTIAL_OK &&
            hc_source_accept(sc, q, hdr, hdr_len) == HC_OK) {
            ok++;
        }
        if ((i & 4095) == 4095) {
            hc_source_commit(sc); /* a store batch every 4096 partials */
        }
    }
    double check = now_s() - t0;
    hc_source_check_destroy(sc);
    /* the worst case: two producers' windows (raw partitions 0, 2, ... and 1, 3, ...)
     * alternating record by record, so that every check parses */
    hc_manifest_t odd;
    hc_manifest_init(&odd);
    for (int32_t p = 1; p < 16; p += 2) {
        if (hc_manifest_record(&odd, p, 123456789) != HC_OK ||
            hc_manifest_record(&odd, p, 123459999) != HC_OK) {
            return 1;
        }
    }
    char hdr2[2048];
    size_t hdr2_len =
        hc_source_encode("hotcount-stage1-other", 1764600000456, 7, &odd, hdr2, sizeof(hdr2));
    sc = hc_source_check_new();
    t0 = now_s();
    for (long i = 0; i < n; i++) {
        const char *h = i & 1 ? hdr2 : hdr;
        size_t hl = i & 1 ? hdr2_len : hdr_len;
        if (hc_source_check(sc, 0, h, hl, why, sizeof(why)) == HC_PARTIAL_OK &&
            hc_source_accept(sc, 0, h, hl) == HC_OK) {
            ok++;
        }
    }
    double parsed = now_s() - t0;
    hc_source_check_destroy(sc);
    hc_manifest_fini(&odd);
    hc_manifest_fini(&win);
    if (ok != 3 * n || bytes == 0) {
        fprintf(stderr, "bench_source: unexpected results\n");
        return 1;
    }
    printf("header bytes: %zu (8 raw partitions)\n", hdr_len);
    printf("stage 1 partial encode: %.0f ns/partial\n", encode / (double)n * 1e9);
    printf("stage 1 header alloc+free: %.0f ns/partial\n", header / (double)n * 1e9);
    printf("stage 2 partial check (jansson): %.0f ns/partial\n", decode / (double)n * 1e9);
    printf("stage 2 source check+accept, siblings: %.0f ns/partial\n", check / (double)n * 1e9);
    printf("stage 2 source check+accept, every one parsed: %.0f ns/partial\n",
           parsed / (double)n * 1e9);
    return 0;
}
