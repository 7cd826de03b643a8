/* A store for tests, behind store.h's function table (hc_store_open_ops): counts and stage 2's
 * offsets in memory, with the same compare-and-set as the real backends, every batch recorded,
 * and the outcome of the next batches scripted.
 *
 * One hc_fake_store_t is one "server": hc_fake_store_new registers it under a URI
 * ("fake:N", written to uri) that cfg->store names, and every handle opened on that URI with
 * hc_store_open_ops(hc_fake_store_ops(), cfg, ...) reaches it; closing a handle leaves the
 * server. The test owns the server and destroys it after every handle is closed.
 *
 * Thread-safe: a stage writes from its thread while the test scripts and reads from another. */
#ifndef HOTCOUNT_FAKE_STORE_H
#define HOTCOUNT_FAKE_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hotcount/store.h"

typedef struct hc_fake_store hc_fake_store_t;

/* What the next hc_store_apply does (one script entry per batch, in order; then HC_FAKE_PASS). */
typedef enum hc_fake_script {
    HC_FAKE_PASS,           /* the real semantics: compare-and-set, then apply */
    HC_FAKE_TRANSIENT,      /* an outage: nothing changes, HC_ERR_TRANSIENT */
    HC_FAKE_LOSE_CAS,       /* another writer's batch lands first (hc_fake_store_lose_cas) */
    HC_FAKE_APPLY_TRANSIENT /* an ambiguous commit that landed: applied, yet HC_ERR_TRANSIENT */
} hc_fake_script_t;

/* One batch as the fake received it (deep copy), with what it answered. */
typedef struct hc_fake_batch {
    hc_store_offset_t *offsets; /* owned */
    size_t offset_count;
    hc_store_delta_t *deltas; /* owned, post ids included */
    size_t delta_count;
    hc_fake_script_t script; /* the entry it met */
    hc_err_t returned;       /* what hc_store_apply returned */
    bool applied;            /* whether its deltas and offsets landed */
} hc_fake_batch_t;

/* NULL when out of memory or when too many fakes are alive. uri gets "fake:N". */
hc_fake_store_t *hc_fake_store_new(char *uri, size_t uri_size);
void hc_fake_store_destroy(hc_fake_store_t *fake); /* accepts NULL */

/* The function table to pass to hc_store_open_ops. */
const struct hc_store_ops *hc_fake_store_ops(void);

/* Appends one entry to the script. */
void hc_fake_store_script(hc_fake_store_t *fake, hc_fake_script_t what);
/* Appends an HC_FAKE_LOSE_CAS entry: when the next batch arrives, `other` (copied now) is applied
 * first, as a second owner of the partitions would have done, and the batch then meets the
 * real compare-and-set against what `other` left. */
void hc_fake_store_lose_cas(hc_fake_store_t *fake, const hc_store_batch_t *other);

/* From now on every batch holding this post is refused with HC_ERR_RECORD (its index in
 * refused_out), as PostgreSQL refuses an id with a NUL byte; and like every real backend the fake
 * refuses a post whose count would leave int64. A refused batch changes nothing. */
void hc_fake_store_refuse_post(hc_fake_store_t *fake, const char *post_id, size_t post_id_len);

/* While down, every hc_store_apply fails with HC_ERR_TRANSIENT and changes nothing (the script
 * waits); reads still answer: a store whose writes time out, or that throttles every write. */
void hc_fake_store_set_down(hc_fake_store_t *fake, bool down);

/* From now on a batch with more than max_deltas deltas fails with HC_ERR_TRANSIENT and changes
 * nothing, as a store throttles what exceeds its capacity or times a batch out (0: none). */
void hc_fake_store_throttle_above(hc_fake_store_t *fake, size_t max_deltas);
/* From now on an apply takes us_per_delta microseconds per delta before it answers. */
void hc_fake_store_slow(hc_fake_store_t *fake, int64_t us_per_delta);

/* The next n hc_store_read_offsets calls fail with HC_ERR_TRANSIENT (a store that is down). */
void hc_fake_store_fail_reads(hc_fake_store_t *fake, int n);
/* The next n hc_store_get calls fail with HC_ERR_TRANSIENT (0 ends a run of failures). */
void hc_fake_store_fail_gets(hc_fake_store_t *fake, int n);
/* Waits (up to timeout_ms) until at least n hc_store_get calls have failed; false on timeout. */
bool hc_fake_store_wait_failed_gets(hc_fake_store_t *fake, int n, int64_t timeout_ms);
/* The next n opens of a handle on this fake fail with HC_ERR_TRANSIENT (a server not up yet). */
void hc_fake_store_fail_opens(hc_fake_store_t *fake, int n);
/* Waits (up to timeout_ms) until hc_store_read_offsets was called at least n times, failed calls
 * included; false on timeout. */
bool hc_fake_store_wait_reads(hc_fake_store_t *fake, int n, int64_t timeout_ms);

/* The server loses every count and offset, as Redis without persistence does on a restart;
 * new_identity: and its identity (hc_store_identity, "fake-epoch-N") changes, as the restart's
 * run_id would. */
void hc_fake_store_forget(hc_fake_store_t *fake, bool new_identity);

/* Batches received so far, and one of them (valid until destroy). */
size_t hc_fake_store_batch_count(hc_fake_store_t *fake);
const hc_fake_batch_t *hc_fake_store_batch(hc_fake_store_t *fake, size_t i);
/* Waits (up to timeout_ms) until at least n batches were received; false on timeout. */
bool hc_fake_store_wait_batches(hc_fake_store_t *fake, size_t n, int64_t timeout_ms);
/* Waits (up to timeout_ms) until the stored next_offset of every partition 0..count-1 of
 * (group, topic) equals want[i]; false on timeout. */
bool hc_fake_store_wait_offsets(hc_fake_store_t *fake, const char *group, const char *topic,
                                const int64_t *want, size_t count, int64_t timeout_ms);

/* The stored count of a post (0 when absent), the stored offset (HC_OFFSET_NONE when absent),
 * and the number of posts stored. */
int64_t hc_fake_store_likes(hc_fake_store_t *fake, const char *post_id, size_t post_id_len);
int64_t hc_fake_store_offset(hc_fake_store_t *fake, const char *group, const char *topic,
                             int32_t partition);
size_t hc_fake_store_posts(hc_fake_store_t *fake);

#endif
