/* Applies stage-2-like batches to a store through hc_store_apply, for a hand-run comparison of
 * two stores' write cost (bench/store-index-cost: the SQL stores with and without top's index,
 * issue 25). Does not create the schema (the caller prepares each store).
 *
 *   bench_store_apply URI GROUP BATCHES POSTS [ZIPF] [SEED]
 *
 * Each batch holds POSTS distinct posts of 1 000 000, drawn Zipf(ZIPF, default 0.99) by rank,
 * each with a delta of 1..5 (every eighth -1), and moves partition 0 of GROUP by one. The same
 * SEED gives the same batches. Prints one JSON line: batches, posts, wall_s, cpu_s (this
 * process: SQLite's work happens here). */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "hotcount/clock.h"
#include "hotcount/config.h"
#include "hotcount/store.h"

#define UNIVERSE 1000000

static uint64_t rng_state;

static uint64_t rng_next(void)
{
    uint64_t x = rng_state += 0x9e3779b97f4a7c15ULL; /* splitmix64 */
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static double cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: bench_store_apply URI GROUP BATCHES POSTS [ZIPF] [SEED]\n");
        return 2;
    }
    const char *uri = argv[1];
    const char *group = argv[2];
    long batches = atol(argv[3]);
    long posts = atol(argv[4]);
    double s = argc > 5 ? atof(argv[5]) : 0.99;
    rng_state = argc > 6 ? strtoull(argv[6], NULL, 10) : 1;
    if (batches < 1 || posts < 1 || posts > UNIVERSE / 2) {
        fprintf(stderr, "bench_store_apply: BATCHES >= 1 and 1 <= POSTS <= %d\n", UNIVERSE / 2);
        return 2;
    }

    /* the Zipf CDF over ranks, and a mark per rank for "already in this batch" */
    double *cdf = malloc(UNIVERSE * sizeof(*cdf));
    unsigned char *taken = calloc(UNIVERSE, 1);
    char(*ids)[16] = malloc((size_t)posts * sizeof(*ids));
    hc_store_delta_t *d = malloc((size_t)posts * sizeof(*d));
    if (!cdf || !taken || !ids || !d) {
        fprintf(stderr, "bench_store_apply: out of memory\n");
        return 1;
    }
    double sum = 0;
    for (long k = 0; k < UNIVERSE; k++) {
        sum += 1.0 / pow((double)(k + 1), s);
        cdf[k] = sum;
    }

    hc_config_t cfg;
    char errstr[512];
    hc_store_t *st = NULL;
    if (hc_config_init(&cfg, hc_store_facts()) != HC_OK ||
        hc_config_set(&cfg, "store", uri, errstr, sizeof(errstr)) != HC_OK ||
        hc_store_open(&cfg, &st, errstr, sizeof(errstr)) != HC_OK) {
        fprintf(stderr, "bench_store_apply: open: %s\n", errstr);
        return 1;
    }
    int32_t part = 0;
    int64_t expected;
    if (hc_store_read_offsets(st, group, "bench", &part, 1, &expected, errstr, sizeof(errstr)) !=
        HC_OK) {
        fprintf(stderr, "bench_store_apply: %s\n", errstr);
        return 1;
    }

    double wall = 0;
    double cpu = 0;
    for (long b = 0; b < batches; b++) {
        long n = 0;
        while (n < posts) {
            double u = (double)(rng_next() >> 11) / 9007199254740992.0 * sum;
            long lo = 0, hi = UNIVERSE - 1;
            while (lo < hi) {
                long mid = (lo + hi) / 2;
                if (cdf[mid] < u) {
                    lo = mid + 1;
                } else {
                    hi = mid;
                }
            }
            if (taken[lo]) {
                continue;
            }
            taken[lo] = 1;
            snprintf(ids[n], sizeof(ids[n]), "p%ld", lo);
            uint64_t r = rng_next();
            d[n] =
                (hc_store_delta_t){ids[n], strlen(ids[n]), r % 8 == 0 ? -1 : (int64_t)(r % 5) + 1};
            n++;
        }
        for (long i = 0; i < n; i++) {
            taken[atol(ids[i] + 1)] = 0;
        }
        int64_t next = expected == HC_OFFSET_NONE ? 1 : expected + 1;
        hc_store_offset_t off = {.partition = 0, .expected = expected, .next = next};
        hc_store_batch_t batch = {.group = group,
                                  .topic = "bench",
                                  .offsets = &off,
                                  .offset_count = 1,
                                  .deltas = d,
                                  .delta_count = (size_t)n,
                                  .now_ms = hc_wall_ms()};
        int64_t t0 = hc_now_ms();
        double c0 = cpu_s();
        hc_err_t err = hc_store_apply(st, &batch, errstr, sizeof(errstr));
        cpu += cpu_s() - c0;
        wall += (double)(hc_now_ms() - t0) / 1000.0;
        if (err != HC_OK) {
            fprintf(stderr, "bench_store_apply: apply: %s\n", errstr);
            return 1;
        }
        expected = next;
    }
    printf("{\"batches\":%ld,\"posts\":%ld,\"wall_s\":%.4f,\"cpu_s\":%.4f}\n", batches,
           batches * posts, wall, cpu);
    hc_store_close(st);
    hc_config_fini(&cfg);
    free(cdf);
    free(taken);
    free(ids);
    free(d);
    return 0;
}
