/* Hand-run micro benchmark for the aggregation table's hot path (hc_table_add).
 *
 * Adds N events (default 10M) over K distinct 16-byte post ids (default 100k) drawn from a
 * Zipf(s) distribution (default s = 1.0, like the demo's hot posts), then reports ns per add.
 * Keys and the draw sequence are precomputed, so the timed loop is the table alone (plus one
 * sequential read of the index array). Uses the public header only.
 *
 *   gcc -std=c11 -D_GNU_SOURCE -O2 -Iinclude/core bench/bench_table.c src/core/table.c -lm \
 *       -o /tmp/bench_table && /tmp/bench_table [events] [distinct] [zipf_s] */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "hotcount/table.h"

#define KEY_LEN 16
#define REPS 5

static double now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545f4914f6cdd1du;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a;
    double y = *(const double *)b;

    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    size_t events = argc > 1 ? strtoull(argv[1], NULL, 10) : 10000000;
    size_t distinct = argc > 2 ? strtoull(argv[2], NULL, 10) : 100000;
    double s = argc > 3 ? strtod(argv[3], NULL) : 1.0;
    char *keys = malloc(distinct * KEY_LEN + 1);
    double *cdf = malloc(distinct * sizeof(*cdf));
    uint32_t *draw = malloc(events * sizeof(*draw));
    double times[REPS];
    uint64_t seed = 0x1234567u;
    hc_table_t *tbl;
    double sum = 0;
    int64_t check = 0;

    if (events == 0 || distinct == 0 || keys == NULL || cdf == NULL || draw == NULL) {
        fprintf(stderr, "usage: bench_table [events] [distinct] [zipf_s] (or out of memory)\n");
        return 2;
    }
    for (size_t k = 0; k < distinct; k++) {
        /* "post:" + 11 digits: a typical 16-byte id; snprintf's NUL lands on the next key */
        snprintf(keys + k * KEY_LEN, KEY_LEN + 1, "post:%011zu", k * 7919 % 100000000000u);
        sum += 1.0 / pow((double)(k + 1), s);
        cdf[k] = sum;
    }
    for (size_t i = 0; i < events; i++) {
        double u = (double)(rng_next(&seed) >> 11) / 9007199254740992.0 * sum;
        size_t lo = 0;
        size_t hi = distinct - 1;

        while (lo < hi) {
            size_t mid = (lo + hi) / 2;

            if (cdf[mid] < u) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        draw[i] = (uint32_t)lo;
    }

    tbl = hc_table_new(1000000);
    if (tbl == NULL) {
        fprintf(stderr, "hc_table_new failed\n");
        return 1;
    }
    for (int rep = 0; rep < REPS; rep++) {
        double t0;

        /* The first rep also pays for growing the table; later reps run on a cleared table of
         * the same capacity, like every window after the first. */
        hc_table_clear(tbl);
        t0 = now_ns();
        for (size_t i = 0; i < events; i++) {
            int64_t ts = 1700000000000 + (int64_t)(i >> 10);

            if (hc_table_add(tbl, keys + (size_t)draw[i] * KEY_LEN, KEY_LEN, 1, 1, ts, ts) !=
                HC_OK) {
                fprintf(stderr, "hc_table_add failed\n");
                return 1;
            }
        }
        times[rep] = (now_ns() - t0) / (double)events;
        check += hc_table_events(tbl);
    }
    printf("events %zu, distinct posts %zu (touched %zu), zipf s %.2f\n", events, distinct,
           hc_table_count(tbl), s);
    printf("first rep (includes growth): %.1f ns/add\n", times[0]);
    qsort(times + 1, REPS - 1, sizeof(times[0]), cmp_double);
    printf("warm reps: best %.1f ns/add, median %.1f ns/add (%.1f M adds/s)\n", times[1],
           times[REPS / 2], 1e3 / times[REPS / 2]);
    printf("memory %zu bytes, %.1f bytes per live key (check %lld)\n", hc_table_memory(tbl),
           (double)hc_table_memory(tbl) / (double)hc_table_count(tbl), (long long)check);
    hc_table_destroy(tbl);
    free(draw);
    free(cdf);
    free(keys);
    return 0;
}
