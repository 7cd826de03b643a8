#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdlib.h>

#include "hotcount/zipf.h"

static void rng_is_deterministic_per_seed(void **state)
{
    (void)state;
    hc_rng_t a, b, c;
    hc_rng_init(&a, 42);
    hc_rng_init(&b, 42);
    hc_rng_init(&c, 43);
    int same_c = 0;
    for (int i = 0; i < 1000; i++) {
        uint64_t x = hc_rng_next(&a);
        assert_int_equal(x, hc_rng_next(&b));
        same_c += x == hc_rng_next(&c);
    }
    assert_int_equal(same_c, 0);
}

static void rng_below_and_double_stay_in_range(void **state)
{
    (void)state;
    hc_rng_t rng;
    hc_rng_init(&rng, 7);
    for (int i = 0; i < 100000; i++) {
        assert_true(hc_rng_below(&rng, 10) < 10);
        double d = hc_rng_double(&rng);
        assert_true(d >= 0.0 && d < 1.0);
    }
}

/* Compares the sampled frequency of the top ranks with p(k) = k^-s / H(n,s). */
static void check_distribution(uint64_t n, double s)
{
    enum { SAMPLES = 400000, TOP = 10 };
    hc_zipf_t z;
    hc_zipf_init(&z, n, s);
    hc_rng_t rng;
    hc_rng_init(&rng, 1234);
    uint64_t counts[TOP + 1] = {0};
    for (int i = 0; i < SAMPLES; i++) {
        uint64_t k = hc_zipf_sample(&z, &rng);
        assert_true(k >= 1 && k <= n);
        if (k <= TOP) {
            counts[k]++;
        }
    }
    double norm = 0;
    for (uint64_t k = 1; k <= n; k++) {
        norm += pow((double)k, -s);
    }
    for (uint64_t k = 1; k <= TOP && k <= n; k++) {
        double expected = SAMPLES * pow((double)k, -s) / norm;
        /* 5 standard deviations of a binomial count */
        double sd = sqrt(expected * (1.0 - expected / SAMPLES));
        assert_true(fabs((double)counts[k] - expected) <= 5.0 * sd + 1.0);
    }
}

static void zipf_matches_theory_at_s_099(void **state)
{
    (void)state;
    check_distribution(100000, 0.99);
}

static void zipf_matches_theory_at_s_1(void **state)
{
    (void)state;
    check_distribution(1000, 1.0);
}

static void zipf_matches_theory_at_s_12(void **state)
{
    (void)state;
    check_distribution(1000000, 1.2);
}

static void zipf_with_one_post_always_gives_rank_1(void **state)
{
    (void)state;
    hc_zipf_t z;
    hc_zipf_init(&z, 1, 1.1);
    hc_rng_t rng;
    hc_rng_init(&rng, 9);
    for (int i = 0; i < 1000; i++) {
        assert_int_equal(hc_zipf_sample(&z, &rng), 1);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(rng_is_deterministic_per_seed),
        cmocka_unit_test(rng_below_and_double_stay_in_range),
        cmocka_unit_test(zipf_matches_theory_at_s_099),
        cmocka_unit_test(zipf_matches_theory_at_s_1),
        cmocka_unit_test(zipf_matches_theory_at_s_12),
        cmocka_unit_test(zipf_with_one_post_always_gives_rank_1),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
