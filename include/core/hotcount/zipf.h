/* Layer: core. Workload randomness for the load generator, the demo and the tests: a small fast
 * PRNG and a Zipf sampler over ranks 1..n by rejection-inversion (Hoermann & Derflinger, 1996),
 * which needs O(1) memory, so 10^7 posts cost nothing to set up. Deterministic for a given seed.
 * Not thread-safe: one generator per thread. */
#ifndef HOTCOUNT_ZIPF_H
#define HOTCOUNT_ZIPF_H

#include <stdint.h>

typedef struct hc_rng {
    uint64_t s[4];
} hc_rng_t;

void hc_rng_init(hc_rng_t *rng, uint64_t seed);
uint64_t hc_rng_next(hc_rng_t *rng);
/* Uniform in [0, 1). */
double hc_rng_double(hc_rng_t *rng);
/* Uniform in [0, bound), bound >= 1. */
uint64_t hc_rng_below(hc_rng_t *rng, uint64_t bound);

typedef struct hc_zipf {
    uint64_t n;
    double s;
    double h_integral_x1;
    double h_integral_n;
    double squeeze;
} hc_zipf_t;

/* n >= 1, s > 0. */
void hc_zipf_init(hc_zipf_t *z, uint64_t n, double s);
/* A rank in 1..n; rank 1 is the most frequent. */
uint64_t hc_zipf_sample(const hc_zipf_t *z, hc_rng_t *rng);

#endif
