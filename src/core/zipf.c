#include "hotcount/zipf.h"

#include <math.h>

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void hc_rng_init(hc_rng_t *rng, uint64_t seed)
{
    for (int i = 0; i < 4; i++) {
        rng->s[i] = splitmix64(&seed);
    }
}

/* xoshiro256** */
uint64_t hc_rng_next(hc_rng_t *rng)
{
    uint64_t *s = rng->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double hc_rng_double(hc_rng_t *rng)
{
    return (double)(hc_rng_next(rng) >> 11) * 0x1.0p-53;
}

uint64_t hc_rng_below(hc_rng_t *rng, uint64_t bound)
{
    /* Lemire's multiply-shift; the tiny bias is irrelevant for workloads */
    __extension__ typedef unsigned __int128 u128;
    return (uint64_t)(((u128)hc_rng_next(rng) * bound) >> 64);
}

/* log1p(x)/x and expm1(x)/x, with their Taylor series near 0 where the quotient loses
 * precision. */
static double log1p_over_x(double x)
{
    if (fabs(x) > 1e-8) {
        return log1p(x) / x;
    }
    return 1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x));
}

static double expm1_over_x(double x)
{
    if (fabs(x) > 1e-8) {
        return expm1(x) / x;
    }
    return 1.0 + x * 0.5 * (1.0 + x / 3.0 * (1.0 + 0.25 * x));
}

/* h(x) = x^-s and H, an antiderivative of h shifted so that it is smooth at s == 1. */
static double h(const hc_zipf_t *z, double x)
{
    return exp(-z->s * log(x));
}

static double h_integral(const hc_zipf_t *z, double x)
{
    double lx = log(x);
    return expm1_over_x((1.0 - z->s) * lx) * lx;
}

static double h_integral_inverse(const hc_zipf_t *z, double x)
{
    double t = x * (1.0 - z->s);
    if (t < -1.0) {
        t = -1.0; /* rounding can push t just below the domain */
    }
    return exp(log1p_over_x(t) * x);
}

void hc_zipf_init(hc_zipf_t *z, uint64_t n, double s)
{
    z->n = n;
    z->s = s;
    z->h_integral_x1 = h_integral(z, 1.5) - 1.0;
    z->h_integral_n = h_integral(z, (double)n + 0.5);
    z->squeeze = 2.0 - h_integral_inverse(z, h_integral(z, 2.5) - h(z, 2.0));
}

uint64_t hc_zipf_sample(const hc_zipf_t *z, hc_rng_t *rng)
{
    for (;;) {
        double u = z->h_integral_n + hc_rng_double(rng) * (z->h_integral_x1 - z->h_integral_n);
        double x = h_integral_inverse(z, u);
        double kd = floor(x + 0.5);
        if (kd < 1.0) {
            kd = 1.0;
        } else if (kd > (double)z->n) {
            kd = (double)z->n;
        }
        /* accept at once inside the squeeze, else compare against the exact area */
        if (kd - x <= z->squeeze || u >= h_integral(z, kd + 0.5) - h(z, kd)) {
            return (uint64_t)kd;
        }
    }
}
