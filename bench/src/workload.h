/* The benchmark workload: like events shaped like producer output (about 130 bytes of JSON),
 * Zipfian over posts "1".."posts", a share of unlikes, and one celebrity post whose likes ramp
 * up to a burst rate in the middle of the stream.
 *
 * Events carry a virtual timestamp: the stream runs at base_rate events/s plus the celebrity's
 * rate, which ramps 0 -> celeb_rate over the first quarter of the burst window (the middle
 * fifth of the stream's duration), holds, and ramps down. So "one post bursting to 50 000
 * likes/s" is a property of the event times, whatever speed the file is later replayed at.
 *
 * With uniform set, every post is visited in turn instead (the memory scenario: every post is
 * live in the window) and there is no celebrity. Deterministic for a given seed.
 * Not thread-safe: one generator per thread. */
#ifndef HOTCOUNT_BENCH_WORKLOAD_H
#define HOTCOUNT_BENCH_WORKLOAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hotcount/zipf.h"

#define BENCH_CELEB_POST "celebrity"
#define BENCH_KEY_MAX 300
#define BENCH_VALUE_MAX 400

typedef struct bench_workload_opts {
    uint64_t events;
    uint64_t posts;
    double zipf_s;
    double unlike_ratio;
    double base_rate;  /* virtual events/s of the Zipfian traffic */
    double celeb_rate; /* peak virtual likes/s of the celebrity post; 0 = none */
    bool uniform;      /* posts drawn uniformly (every post live), no celebrity */
    uint64_t seed;
    uint32_t salts;
    int64_t start_ms; /* ts of the first event */
} bench_workload_opts_t;

typedef struct bench_workload {
    bench_workload_opts_t o;
    hc_rng_t rng;
    hc_zipf_t zipf;
    uint64_t seq;
    double t;          /* virtual seconds since start */
    double burst_from; /* virtual seconds */
    double burst_len;
    uint64_t celeb_events;
} bench_workload_t;

void bench_workload_init(bench_workload_t *w, const bench_workload_opts_t *opts);

/* Writes the next event's Kafka key and JSON value (neither NUL-terminated; no tab, no
 * newline). Returns false once opts.events events were made. *celeb tells whether it is one of
 * the celebrity's likes. */
bool bench_workload_next(bench_workload_t *w, char *key, size_t *key_len, char *value,
                         size_t *value_len, bool *celeb);

#endif
