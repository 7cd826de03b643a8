/* Layer: tools. The load generator behind `hotcount produce` and the demo: Zipfian like/unlike
 * events over a set of posts, keyed "<post_id>#<salt>" as producers must key them
 * (docs/FORMATS.md, "Events"), optionally mixed with malformed events, at a bounded rate.
 *
 * It keeps its own tally of what the broker acknowledged (per post, from the delivery
 * reports), which is the demo's independent oracle: the mock cluster cannot be re-read in full.
 *
 * Post ids are the decimal ranks "1".."posts" (rank 1 is the hottest). Even-numbered events
 * write post_id as a JSON string and odd ones as a JSON integer, so both spellings meet in
 * every count. Runs on the calling thread. */
#ifndef HOTCOUNT_LOADGEN_H
#define HOTCOUNT_LOADGEN_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "hotcount/config.h"
#include "hotcount/err.h"
#include "hotcount/store.h"

typedef struct hc_loadgen_opts {
    uint64_t events;      /* how many to send (valid + malformed) */
    double rate;          /* events per second; 0 = as fast as the broker takes them */
    uint64_t posts;       /* >= 1 */
    double zipf_s;        /* > 0 */
    double unlike_ratio;  /* 0..1 of valid events */
    double invalid_ratio; /* 0..1 of all events */
    uint64_t seed;
    /* Optional back-pressure: wait while more than max_ahead events were sent beyond
     * *consumed (the demo keeps the mock cluster's bounded partitions from overflowing). */
    const atomic_int_fast64_t *consumed;
    int64_t max_ahead;
    /* Adaptive salting (core/producer_key.h): follow topic.hotkeys and salt a post over N ways
     * only while it is hot, else key it "<post>#0". Off: every post over `salts` ways. */
    bool adaptive;
} hc_loadgen_opts_t;

typedef struct hc_tally {
    int64_t *likes; /* owned: [posts + 1], acknowledged like - unlike per rank */
    uint64_t posts;
    atomic_int_fast64_t sent;          /* handed to the producer */
    atomic_int_fast64_t acked_valid;   /* acknowledged valid events */
    atomic_int_fast64_t acked_invalid; /* acknowledged malformed events */
    atomic_int_fast64_t failed;        /* delivery failed (not in the log) */
    atomic_int_fast64_t salted;        /* valid events sent with a salt other than 0 */
    atomic_int_fast64_t hot_records;   /* adaptive: topic.hotkeys records followed */
} hc_tally_t;

hc_err_t hc_tally_init(hc_tally_t *tally, uint64_t posts);
void hc_tally_fini(hc_tally_t *tally);

/* Produces opts->events events to cfg->topic_raw and waits until every one is acknowledged or
 * failed. tally may be NULL. Stops early (still waiting for outstanding deliveries) when *stop
 * becomes true. HC_ERR_INVALID for bad options or client config, HC_ERR_FATAL on a producer
 * fatal error. */
hc_err_t hc_loadgen_run(const hc_config_t *cfg, const hc_loadgen_opts_t *opts, hc_tally_t *tally,
                        const atomic_bool *stop, char *errstr, size_t errstr_size);

/* Compares every stored count with the tally: a stored post the generator never named, or whose
 * count differs, and a post the tally moved that has no row, are mismatches; report (may be
 * NULL) is called for each. rows counts the stored posts. The demo's and the in-process tests'
 * oracle: it does not depend on hotcount's parser. */
typedef void (*hc_tally_report_fn)(const char *post_id, size_t post_id_len, int64_t acked,
                                   int64_t stored, void *opaque);
hc_err_t hc_tally_compare(const hc_tally_t *tally, hc_store_t *st, int64_t *rows,
                          int64_t *mismatches, hc_tally_report_fn report, void *opaque,
                          char *errstr, size_t errstr_size);

/* Number of distinct malformed event shapes the generator cycles through. */
#define HC_LOADGEN_INVALID_KINDS 12

#endif
