/* Hand-run micro-benchmark: hc_event_parse (the hot path) against the jansson reference on
 * typical likes.raw events of about 100-130 bytes.
 *
 *   bench_parse [events [rounds]]        defaults 1000000 and 5
 *
 * Prints ns/event and events/s for each parser on one core: the best round (least disturbed
 * by other work on the machine) and the median. Both parsers must accept every event and
 * their checksums must match, or the run fails: a fast wrong answer is no result. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "event_ref.h"
#include "hotcount/event.h"

#define DISTINCT 4096 /* more than fit one branch-predictor history, fewer than L2 evicts */
#define EVENT_CAP 160

typedef hc_event_reason_t (*parse_fn)(const char *buf, size_t len, size_t max_bytes,
                                      hc_event_t *ev);

static char events[DISTINCT][EVENT_CAP];
static size_t lens[DISTINCT];

static uint64_t next_rand(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Shaped like producer output: short ids, a millisecond ts, a UUID event_id, mostly likes. */
static size_t make_events(void)
{
    uint64_t s = 0x2545f4914f6cdd1du;
    size_t total = 0;

    for (int i = 0; i < DISTINCT; i++) {
        uint64_t a = next_rand(&s);
        uint64_t b = next_rand(&s);
        int n = snprintf(events[i], EVENT_CAP,
                         "{\"post_id\":\"p%06u\",\"user_id\":\"u%u\",\"op\":\"%s\","
                         "\"ts\":%" PRIu64 ",\"event_id\":\"%08x-%04x-%04x-%04x-%012" PRIx64 "\"}",
                         (unsigned)(a % 1000000), (unsigned)(b % 10000000),
                         a % 10 == 0 ? "unlike" : "like", 1732950000000u + (a >> 40) % 86400000u,
                         (unsigned)(b >> 32), (unsigned)(b >> 16) & 0xffffu, (unsigned)b & 0xffffu,
                         (unsigned)(a >> 48), (a >> 4) & 0xffffffffffffu);
        if (n < 0 || n >= EVENT_CAP) {
            fprintf(stderr, "event %d does not fit\n", i);
            exit(1);
        }
        lens[i] = (size_t)n;
        total += (size_t)n;
    }
    return total / DISTINCT;
}

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* Returns ns/event; *sum folds every field so the work cannot be optimised away. */
static double run(parse_fn parse, long count, uint64_t *sum)
{
    hc_event_t ev;
    double t0 = now_ns();

    *sum = 0;
    for (long i = 0; i < count; i++) {
        size_t k = (size_t)i % DISTINCT;
        if (parse(events[k], lens[k], 4096, &ev) != HC_EVENT_OK) {
            fprintf(stderr, "event %zu rejected: %s\n", k, events[k]);
            exit(1);
        }
        *sum += ev.post_id_len + (uint64_t)ev.post_id[1] + (uint64_t)ev.ts +
                (uint64_t)(int64_t)ev.delta + ev.user_id_len + (uint64_t)ev.user_id[1];
    }
    return (now_ns() - t0) / (double)count;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a;
    double y = *(const double *)b;
    return (x > y) - (x < y);
}

#define MAX_ROUNDS 64

static void report(const char *name, double *ns, int rounds)
{
    qsort(ns, (size_t)rounds, sizeof(ns[0]), cmp_double);
    printf("%-18s best %7.1f ns/event (%5.2f M events/s)   median %7.1f ns/event\n", name, ns[0],
           1e3 / ns[0], ns[rounds / 2]);
}

int main(int argc, char **argv)
{
    long count = argc > 1 ? strtol(argv[1], NULL, 10) : 1000000;
    int rounds = argc > 2 ? atoi(argv[2]) : 5;
    double fast_ns[MAX_ROUNDS];
    double ref_ns[MAX_ROUNDS];
    uint64_t fast_sum;
    uint64_t ref_sum;
    size_t avg;

    if (count <= 0 || rounds <= 0 || rounds > MAX_ROUNDS) {
        fprintf(stderr, "usage: %s [events [rounds (1..%d)]]\n", argv[0], MAX_ROUNDS);
        return 2;
    }
    avg = make_events();
    run(hc_event_parse, DISTINCT * 16, &fast_sum); /* warm caches and the allocator */
    run(hc_event_parse_ref, DISTINCT, &ref_sum);
    for (int i = 0; i < rounds; i++) {
        fast_ns[i] = run(hc_event_parse, count, &fast_sum);
        ref_ns[i] = run(hc_event_parse_ref, count, &ref_sum);
        if (fast_sum != ref_sum) {
            fprintf(stderr, "checksums differ: fast %" PRIu64 " ref %" PRIu64 "\n", fast_sum,
                    ref_sum);
            return 1;
        }
    }
    printf("%ld events per round, %d rounds (%d distinct events, %zu bytes on average)\n", count,
           rounds, DISTINCT, avg);
    report("hc_event_parse", fast_ns, rounds);
    report("hc_event_parse_ref", ref_ns, rounds);
    qsort(fast_ns, (size_t)rounds, sizeof(fast_ns[0]), cmp_double);
    qsort(ref_ns, (size_t)rounds, sizeof(ref_ns[0]), cmp_double);
    printf("speedup            best %.1fx   median %.1fx\n", ref_ns[0] / fast_ns[0],
           ref_ns[rounds / 2] / fast_ns[rounds / 2]);
    return 0;
}
