/* Layer: serve. A read-through cache with a TTL and request coalescing, for `hotcount serve`.
 *
 * Maps a key (bytes) to a value (bytes) produced by an injected loader. Guarantees, per key:
 *   - at most one load in flight: a get that finds a load in flight waits for it (condition
 *     variable) and returns that load's result instead of issuing its own;
 *   - loads start at least ttl apart (by the injected clock): a value is served while
 *     now - (when its load started) < ttl, so any number of readers of one hot key cause at
 *     most one load per TTL. Counting the age from the load's start keeps it conservative: a
 *     value is never older than the TTL plus one load's duration.
 * A failed load is cached for the TTL as well (its waiters and later readers get the same
 * error), so a struggling store is not hit harder by every reader.
 *
 * Bounded: at most max_entries keys; a new key evicts the least recently used entry that nobody
 * is loading or waiting for. Entries pinned that way may push the count above max_entries by at
 * most the number of threads inside hc_serve_cache_get at once.
 *
 * Threads: every call may come from any thread, concurrently; the loader runs on the calling
 * thread without the cache's lock held, and may run concurrently for different keys (a loader
 * that shares a connection must serialise itself). The clock is called with the lock held, so
 * it must not call back into the cache. */
#ifndef HOTCOUNT_SERVE_CACHE_H
#define HOTCOUNT_SERVE_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "hotcount/err.h"

typedef struct hc_serve_cache hc_serve_cache_t;

/* A monotonic clock in any unit (the TTL is in the same unit). Serve uses microseconds: with
 * whole milliseconds, two loads 20 ticks apart could be 19.001 ms apart in real time. */
typedef int64_t (*hc_serve_clock_fn)(void *opaque);

/* Loads key. On HC_OK *value is malloc'ed (may be NULL when *value_len is 0) and the cache takes
 * ownership of it. On an error *value is ignored and errstr says why. */
typedef hc_err_t (*hc_serve_load_fn)(void *opaque, const char *key, size_t key_len, void **value,
                                     size_t *value_len, char *errstr, size_t errstr_size);

typedef struct hc_serve_cache_opts {
    int64_t ttl;        /* in clock units, >= 1 */
    size_t max_entries; /* >= 1 */
    hc_serve_load_fn load;
    void *load_opaque;
    hc_serve_clock_fn clock;
    void *clock_opaque;
} hc_serve_cache_opts_t;

typedef struct hc_serve_cache_stats {
    uint64_t gets;
    uint64_t hits;      /* answered from a fresh entry */
    uint64_t coalesced; /* waited for another caller's load */
    uint64_t loads;     /* loader calls */
    uint64_t load_errors;
    uint64_t evictions;
    size_t entries;
    size_t waiting; /* callers waiting for a load right now */
} hc_serve_cache_stats_t;

/* HC_ERR_INVALID for bad options, HC_ERR_FATAL when out of memory; *out NULL then. */
hc_err_t hc_serve_cache_new(const hc_serve_cache_opts_t *opts, hc_serve_cache_t **out, char *errstr,
                            size_t errstr_size);
/* After every caller has returned. Accepts NULL. */
void hc_serve_cache_destroy(hc_serve_cache_t *cache);

/* The value of key: fresh from the cache, from a load in flight, or loaded now. On HC_OK *value
 * is a malloc'ed copy the caller frees (with one extra NUL byte after *value_len, for
 * convenience) and *loaded_at the clock when its load started. Otherwise the loader's error
 * (possibly cached) with its errstr, or HC_ERR_FATAL when out of memory. */
hc_err_t hc_serve_cache_get(hc_serve_cache_t *cache, const char *key, size_t key_len, void **value,
                            size_t *value_len, int64_t *loaded_at, char *errstr,
                            size_t errstr_size);

/* The same with this call's TTL (clock units, >= 1) instead of opts.ttl: an entry is fresh
 * for this reader while now - (its load's start) < ttl. `hotcount serve` passes a read-hot
 * post's longer TTL (serve_hot.h); a post demoted again gets the short one from its next read,
 * so an entry loaded under the long TTL is reloaded at once when it is older than that. */
hc_err_t hc_serve_cache_get_ttl(hc_serve_cache_t *cache, const char *key, size_t key_len,
                                int64_t ttl, void **value, size_t *value_len, int64_t *loaded_at,
                                char *errstr, size_t errstr_size);

void hc_serve_cache_get_stats(hc_serve_cache_t *cache, hc_serve_cache_stats_t *stats);

#endif
