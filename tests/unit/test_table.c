/* Unit tests for the per-window aggregation table (src/core/table.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* cmocka.h needs the four headers above first. */
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hotcount/siphash.h"
#include "hotcount/table.h"
#include "old_hash.h"

#define NONE HC_TS_NONE

static hc_err_t add_str(hc_table_t *tbl, const char *id, int64_t delta, int64_t events,
                        int64_t ts_min, int64_t ts_max)
{
    return hc_table_add(tbl, id, strlen(id), delta, events, ts_min, ts_max);
}

/* The entry for a key, found by a linear scan through the public API (NULL when absent). */
static const hc_table_entry_t *find(const hc_table_t *tbl, const char *id, size_t len)
{
    for (size_t i = 0; i < hc_table_count(tbl); i++) {
        const hc_table_entry_t *ent = hc_table_entry(tbl, i);

        if (ent->post_id_len == len && memcmp(ent->post_id, id, len) == 0) {
            return ent;
        }
    }
    return NULL;
}

static const hc_table_entry_t *find_str(const hc_table_t *tbl, const char *id)
{
    return find(tbl, id, strlen(id));
}

static void find_agrees_with_a_scan(void **state)
{
    (void)state;
    hc_table_t *tbl = hc_table_new(5000);
    char id[32];
    assert_non_null(tbl);
    for (int i = 0; i < 5000; i += 2) {
        snprintf(id, sizeof(id), "post-%d", i);
        assert_int_equal(add_str(tbl, id, i, 1, HC_TS_NONE, HC_TS_NONE), HC_OK);
    }
    for (int i = 0; i < 5000; i++) {
        snprintf(id, sizeof(id), "post-%d", i);
        const hc_table_entry_t *want = find_str(tbl, id);
        assert_ptr_equal(hc_table_find(tbl, id, strlen(id)), want);
        assert_true((want != NULL) == (i % 2 == 0));
    }
    hc_table_clear(tbl);
    assert_null(hc_table_find(tbl, "post-0", 6));
    hc_table_destroy(tbl);
}

static void new_rejects_zero_max_keys(void **state)
{
    (void)state;
    assert_null(hc_table_new(0));
    hc_table_destroy(NULL); /* destructors accept NULL */
}

static void add_sums_delta_and_events_per_post(void **state)
{
    hc_table_t *tbl = hc_table_new(16);
    const hc_table_entry_t *ent;

    (void)state;
    assert_non_null(tbl);
    assert_true(hc_table_is_empty(tbl));
    assert_int_equal(add_str(tbl, "a", 1, 1, NONE, NONE), HC_OK);
    assert_int_equal(add_str(tbl, "b", -1, 1, NONE, NONE), HC_OK);
    assert_int_equal(add_str(tbl, "a", 1, 1, NONE, NONE), HC_OK);
    assert_int_equal(add_str(tbl, "a", -1, 1, NONE, NONE), HC_OK);
    /* stage 2 adds whole partials */
    assert_int_equal(add_str(tbl, "b", 40, 50, NONE, NONE), HC_OK);

    assert_false(hc_table_is_empty(tbl));
    assert_int_equal(hc_table_count(tbl), 2);
    assert_int_equal(hc_table_events(tbl), 54);
    assert_int_equal(hc_table_max_keys(tbl), 16);

    /* insertion order */
    ent = hc_table_entry(tbl, 0);
    assert_int_equal(ent->post_id_len, 1);
    assert_memory_equal(ent->post_id, "a", 1);
    assert_int_equal(ent->delta, 1);
    assert_int_equal(ent->events, 3);
    ent = hc_table_entry(tbl, 1);
    assert_memory_equal(ent->post_id, "b", 1);
    assert_int_equal(ent->delta, 39);
    assert_int_equal(ent->events, 51);
    hc_table_destroy(tbl);
}

static void add_merges_ts_ignoring_none(void **state)
{
    hc_table_t *tbl = hc_table_new(16);
    const hc_table_entry_t *ent;

    (void)state;
    assert_int_equal(add_str(tbl, "p", 1, 1, NONE, NONE), HC_OK);
    ent = find_str(tbl, "p");
    assert_true(ent->ts_min == NONE);
    assert_true(ent->ts_max == NONE);

    assert_int_equal(add_str(tbl, "p", 1, 1, 500, 500), HC_OK);
    ent = find_str(tbl, "p");
    assert_int_equal(ent->ts_min, 500);
    assert_int_equal(ent->ts_max, 500);

    assert_int_equal(add_str(tbl, "p", 1, 1, NONE, NONE), HC_OK);
    assert_int_equal(add_str(tbl, "p", 1, 1, 300, 300), HC_OK);
    assert_int_equal(add_str(tbl, "p", 1, 1, 900, 900), HC_OK);
    assert_int_equal(add_str(tbl, "p", 1, 1, 400, 600), HC_OK);
    ent = find_str(tbl, "p");
    assert_int_equal(ent->ts_min, 300);
    assert_int_equal(ent->ts_max, 900);

    /* a partial's pair widens both ends; negative times are ordinary values */
    assert_int_equal(add_str(tbl, "p", 1, 2, -7, 1000), HC_OK);
    ent = find_str(tbl, "p");
    assert_int_equal(ent->ts_min, -7);
    assert_int_equal(ent->ts_max, 1000);

    /* each end merges independently over the values that are not NONE */
    assert_int_equal(add_str(tbl, "q", 1, 1, NONE, 5), HC_OK);
    assert_int_equal(add_str(tbl, "q", 1, 1, 9, NONE), HC_OK);
    ent = find_str(tbl, "q");
    assert_int_equal(ent->ts_min, 9);
    assert_int_equal(ent->ts_max, 5);

    /* extremes next to the NONE sentinel */
    assert_int_equal(add_str(tbl, "r", 1, 1, INT64_MIN + 1, INT64_MAX), HC_OK);
    assert_int_equal(add_str(tbl, "r", 1, 1, 0, 0), HC_OK);
    ent = find_str(tbl, "r");
    assert_int_equal(ent->ts_min, INT64_MIN + 1);
    assert_int_equal(ent->ts_max, INT64_MAX);
    hc_table_destroy(tbl);
}

static void add_accepts_existing_key_when_full(void **state)
{
    hc_table_t *tbl = hc_table_new(3);

    (void)state;
    assert_int_equal(add_str(tbl, "a", 1, 1, NONE, NONE), HC_OK);
    assert_int_equal(add_str(tbl, "b", 1, 1, NONE, NONE), HC_OK);
    assert_false(hc_table_is_full(tbl));
    assert_int_equal(add_str(tbl, "c", 1, 1, NONE, NONE), HC_OK);
    assert_true(hc_table_is_full(tbl));
    for (int i = 0; i < 100; i++) {
        assert_int_equal(add_str(tbl, "b", 1, 1, 10, 10), HC_OK);
    }
    assert_int_equal(find_str(tbl, "b")->delta, 101);
    assert_int_equal(hc_table_events(tbl), 103);
    hc_table_destroy(tbl);
}

static void add_rejects_new_key_when_full(void **state)
{
    hc_table_t *tbl = hc_table_new(2);
    hc_table_entry_t before[2];
    size_t mem;

    (void)state;
    assert_int_equal(add_str(tbl, "a", 1, 1, 5, 5), HC_OK);
    assert_int_equal(add_str(tbl, "b", -1, 1, NONE, NONE), HC_OK);
    before[0] = *hc_table_entry(tbl, 0);
    before[1] = *hc_table_entry(tbl, 1);
    mem = hc_table_memory(tbl);

    assert_int_equal(add_str(tbl, "c", 1, 1, 1, 1), HC_ERR_FULL);
    assert_int_equal(hc_table_add(tbl, "a\0", 2, 1, 1, 1, 1), HC_ERR_FULL); /* not "a" */

    assert_int_equal(hc_table_count(tbl), 2);
    assert_int_equal(hc_table_events(tbl), 2);
    assert_int_equal(hc_table_memory(tbl), mem);
    assert_null(find_str(tbl, "c"));
    assert_memory_equal(hc_table_entry(tbl, 0), &before[0], sizeof(before[0]));
    assert_memory_equal(hc_table_entry(tbl, 1), &before[1], sizeof(before[1]));

    /* the existing key still goes in */
    assert_int_equal(add_str(tbl, "a", 1, 1, 1, 1), HC_OK);
    assert_int_equal(hc_table_entry(tbl, 0)->delta, 2);
    assert_int_equal(hc_table_entry(tbl, 0)->ts_min, 1);
    assert_int_equal(hc_table_entry(tbl, 0)->ts_max, 5);
    hc_table_destroy(tbl);
}

static void add_rejects_overflow_and_changes_nothing(void **state)
{
    hc_table_t *tbl = hc_table_new(4);
    const hc_table_entry_t *ent;

    (void)state;
    assert_int_equal(add_str(tbl, "a", INT64_MAX, 1, NONE, NONE), HC_OK);
    assert_int_equal(add_str(tbl, "a", 1, 1, 7, 7), HC_ERR_INVALID);
    assert_int_equal(add_str(tbl, "b", INT64_MIN, 1, NONE, NONE), HC_OK);
    assert_int_equal(add_str(tbl, "b", -1, 1, 7, 7), HC_ERR_INVALID);
    assert_int_equal(hc_table_events(tbl), 2);

    /* the table's event total is checked too, even for a new key */
    assert_int_equal(add_str(tbl, "c", 0, INT64_MAX, NONE, NONE), HC_ERR_INVALID);
    assert_int_equal(hc_table_count(tbl), 2);
    assert_int_equal(hc_table_events(tbl), 2);

    ent = find_str(tbl, "a");
    assert_int_equal(ent->delta, INT64_MAX);
    assert_int_equal(ent->events, 1);
    assert_true(ent->ts_min == NONE);
    ent = find_str(tbl, "b");
    assert_int_equal(ent->delta, INT64_MIN);
    assert_int_equal(ent->events, 1);
    hc_table_destroy(tbl);
}

/* Ages of event timestamps (stage 2's latency): any int64 ts, never an overflow.
 * Mutant caught: hc_ts_age_ms as a plain now - ts (UBSan aborts; wrapped, the ages go negative). */
static void ts_age_saturates_for_any_ts(void **state)
{
    (void)state;
    assert_int_equal(hc_ts_age_ms(1000, 250), 750);
    assert_int_equal(hc_ts_age_ms(250, 1000), -750);
    assert_int_equal(hc_ts_age_ms(1764590000000LL, INT64_MIN + 1), INT64_MAX);
    assert_int_equal(hc_ts_age_ms(0, INT64_MIN + 1), INT64_MAX);
    assert_int_equal(hc_ts_age_ms(-1, INT64_MIN + 1), INT64_MAX - 1);
    assert_int_equal(hc_ts_age_ms(1764590000000LL, INT64_MAX), 1764590000000LL - INT64_MAX);
    assert_int_equal(hc_ts_age_ms(-2, INT64_MAX), INT64_MIN);
}

static void keys_with_nul_bytes_are_distinct(void **state)
{
    static const struct {
        const char *id;
        size_t len;
    } keys[] = {
        {"a", 1}, {"a\0", 2}, {"a\0b", 3}, {"a\0c", 3}, {"\0", 1}, {"\0\0", 2}, {"\0a", 2},
    };
    size_t n = sizeof(keys) / sizeof(keys[0]);
    hc_table_t *tbl = hc_table_new(16);

    (void)state;
    for (int round = 0; round < 3; round++) {
        for (size_t i = 0; i < n; i++) {
            assert_int_equal(hc_table_add(tbl, keys[i].id, keys[i].len, (int64_t)i, 1, NONE, NONE),
                             HC_OK);
        }
    }
    assert_int_equal(hc_table_count(tbl), n);
    for (size_t i = 0; i < n; i++) {
        const hc_table_entry_t *ent = hc_table_entry(tbl, i);

        assert_int_equal(ent->post_id_len, keys[i].len);
        assert_memory_equal(ent->post_id, keys[i].id, keys[i].len);
        assert_int_equal(ent->delta, 3 * (int64_t)i);
        assert_int_equal(ent->events, 3);
    }
    hc_table_destroy(tbl);
}

static void keys_of_256_bytes_are_kept_whole(void **state)
{
    char a[256];
    char b[256];
    hc_table_t *tbl = hc_table_new(4);
    const hc_table_entry_t *ent;

    (void)state;
    memset(a, 'x', sizeof(a));
    memcpy(b, a, sizeof(b));
    b[255] = 'y'; /* differ only in the last byte */
    assert_int_equal(hc_table_add(tbl, a, sizeof(a), 1, 1, NONE, NONE), HC_OK);
    assert_int_equal(hc_table_add(tbl, b, sizeof(b), 2, 1, NONE, NONE), HC_OK);
    assert_int_equal(hc_table_add(tbl, a, 255, 4, 1, NONE, NONE), HC_OK); /* a prefix */
    assert_int_equal(hc_table_add(tbl, a, sizeof(a), 8, 1, NONE, NONE), HC_OK);
    assert_int_equal(hc_table_count(tbl), 3);
    ent = find(tbl, a, sizeof(a));
    assert_non_null(ent);
    assert_int_equal(ent->delta, 9);
    ent = find(tbl, b, sizeof(b));
    assert_non_null(ent);
    assert_int_equal(ent->delta, 2);
    assert_memory_equal(ent->post_id, b, sizeof(b));
    hc_table_destroy(tbl);
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a;
    uint32_t y = *(const uint32_t *)b;

    return (x > y) - (x < y);
}

/* Slots hold a 32-bit hash, so the key comparison only decides anything when two distinct keys
 * share a full hash. 250k keys give ~7 such pairs by the birthday bound; each family varies the
 * bytes in one region only (first word, middle word, last word, short tails), so colliding
 * pairs differ exactly there and a comparison that skipped those bytes would merge them. */
static void colliding_hashes_keep_keys_apart(void **state)
{
    static const struct {
        size_t len;
        size_t at;
        size_t n;
    } fam[] = {
        {3, 0, 3},  {6, 1, 4},  {7, 0, 3},   {7, 4, 3},   {13, 8, 5},
        {24, 0, 8}, {24, 8, 8}, {24, 16, 8}, {40, 20, 4},
    };
    enum { KEYS = 250000 };
    uint32_t *hashes = malloc(KEYS * sizeof(*hashes));
    char key[40];

    (void)state;
    assert_non_null(hashes);
    for (size_t f = 0; f < sizeof(fam) / sizeof(fam[0]); f++) {
        hc_table_t *tbl = hc_table_new(KEYS);
        size_t collisions = 0;

        memset(key, 'k', sizeof(key));
        for (uint32_t i = 0; i < KEYS; i++) {
            for (size_t b = 0; b < fam[f].n; b++) {
                key[fam[f].at + b] = (char)(b < 4 ? i >> (8 * b) : 0x5a);
            }
            assert_int_equal(hc_table_add(tbl, key, fam[f].len, 1, 1, NONE, NONE), HC_OK);
        }
        assert_int_equal(hc_table_count(tbl), KEYS); /* no two keys merged */
        for (size_t i = 0; i < KEYS; i++) {
            hashes[i] = hc_table_entry(tbl, i)->hash;
        }
        qsort(hashes, KEYS, sizeof(*hashes), cmp_u32);
        for (size_t i = 1; i < KEYS; i++) {
            collisions += hashes[i] == hashes[i - 1];
        }
        /* the family did test something (if a new hash makes this fail, change the family) */
        assert_true(collisions > 0);
        hc_table_destroy(tbl);
    }
    free(hashes);
}

static void make_long_key(char *buf, size_t len, unsigned i)
{
    for (size_t j = 0; j < len; j++) {
        buf[j] = (char)('a' + (i * 7 + j * 13) % 26);
    }
    snprintf(buf, len, "%u", i); /* unique prefix; its NUL stays inside the key */
}

static void arena_growth_keeps_post_ids_valid(void **state)
{
    enum { KEYS = 300, LEN = 256 };
    char key[LEN];
    hc_table_t *tbl = hc_table_new(KEYS);
    size_t mem0 = hc_table_memory(tbl);

    (void)state;
    for (unsigned i = 0; i < KEYS; i++) {
        make_long_key(key, LEN, i);
        assert_int_equal(hc_table_add(tbl, key, LEN, 1, 1, NONE, NONE), HC_OK);
        /* every earlier pointer must still read its key after the arena moved */
        for (unsigned k = 0; k <= i; k++) {
            const hc_table_entry_t *ent = hc_table_entry(tbl, k);

            make_long_key(key, LEN, k);
            assert_int_equal(ent->post_id_len, LEN);
            assert_memory_equal(ent->post_id, key, LEN);
        }
    }
    assert_true(mem0 < KEYS * LEN / 2);
    assert_true(hc_table_memory(tbl) > KEYS * LEN); /* the arena did grow */
    /* lookups still find the moved keys */
    for (unsigned i = 0; i < KEYS; i++) {
        make_long_key(key, LEN, i);
        assert_int_equal(hc_table_add(tbl, key, LEN, 1, 1, NONE, NONE), HC_OK);
    }
    assert_int_equal(hc_table_count(tbl), KEYS);
    for (unsigned i = 0; i < KEYS; i++) {
        assert_int_equal(hc_table_entry(tbl, i)->delta, 2);
    }
    hc_table_destroy(tbl);
}

static void clear_keeps_capacity_and_forgets_keys(void **state)
{
    hc_table_t *tbl = hc_table_new(8);
    size_t mem;

    (void)state;
    assert_int_equal(add_str(tbl, "a", 1, 1, 1, 1), HC_OK);
    assert_int_equal(add_str(tbl, "b", 1, 1, 2, 2), HC_OK);
    mem = hc_table_memory(tbl);
    hc_table_clear(tbl);
    assert_true(hc_table_is_empty(tbl));
    assert_int_equal(hc_table_count(tbl), 0);
    assert_int_equal(hc_table_events(tbl), 0);
    assert_int_equal(hc_table_memory(tbl), mem);

    /* a fresh entry, in a fresh order */
    assert_int_equal(add_str(tbl, "b", -1, 1, NONE, NONE), HC_OK);
    assert_int_equal(hc_table_count(tbl), 1);
    assert_memory_equal(hc_table_entry(tbl, 0)->post_id, "b", 1);
    assert_int_equal(hc_table_entry(tbl, 0)->delta, -1);
    assert_int_equal(hc_table_entry(tbl, 0)->events, 1);
    assert_true(hc_table_entry(tbl, 0)->ts_min == NONE);
    assert_true(hc_table_entry(tbl, 0)->ts_max == NONE);
    hc_table_destroy(tbl);
}

/* After a sparse clear (the per-slot path), a key added at a different position must not find
 * its old slot: its stale entry still holds the same bytes beyond the new count. */
static void clear_forgets_keys_when_few_were_used(void **state)
{
    hc_table_t *tbl = hc_table_new(1000);
    char key[16];

    (void)state;
    for (int i = 0; i < 10; i++) {
        snprintf(key, sizeof(key), "k%d", i);
        assert_int_equal(add_str(tbl, key, 1, 1, NONE, NONE), HC_OK);
    }
    hc_table_clear(tbl);
    for (int i = 9; i >= 0; i--) {
        snprintf(key, sizeof(key), "k%d", i);
        assert_int_equal(add_str(tbl, key, 5, 1, NONE, NONE), HC_OK);
        assert_int_equal(hc_table_count(tbl), (size_t)(10 - i));
    }
    for (int i = 0; i < 10; i++) {
        const hc_table_entry_t *ent = hc_table_entry(tbl, (size_t)i);

        snprintf(key, sizeof(key), "k%d", 9 - i);
        assert_int_equal(ent->post_id_len, strlen(key));
        assert_memory_equal(ent->post_id, key, strlen(key));
        assert_int_equal(ent->delta, 5);
    }
    hc_table_destroy(tbl);
}

/* Many sparse windows in a row: a clear that left any stale slot behind would let them pile up
 * until lookups found stale entries or probes never ended. */
static void sparse_clears_leave_no_stale_slots(void **state)
{
    enum { WINDOWS = 20000, PER_WINDOW = 50 };
    hc_table_t *tbl = hc_table_new(1000); /* 2048 slots: 50 keys take the per-slot clear */
    uint64_t x = 88172645463325252u;
    char key[24];

    (void)state;
    for (int w = 0; w < WINDOWS; w++) {
        int64_t sum = 0;

        for (int i = 0; i < PER_WINDOW; i++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            snprintf(key, sizeof(key), "%llu", (unsigned long long)(x % 5000));
            /* keys may repeat within a window: count them in both places */
            assert_int_equal(add_str(tbl, key, 1, 1, NONE, NONE), HC_OK);
        }
        assert_true(hc_table_count(tbl) <= PER_WINDOW);
        assert_int_equal(hc_table_events(tbl), PER_WINDOW);
        for (size_t i = 0; i < hc_table_count(tbl); i++) {
            sum += hc_table_entry(tbl, i)->delta;
        }
        assert_int_equal(sum, PER_WINDOW);
        hc_table_clear(tbl);
    }
    hc_table_destroy(tbl);
}

/* Fills a grown table, clears it (the memset path), reuses it lightly, clears again (the
 * per-slot path, which must not leave stale slots behind). */
static void clear_then_reuse_after_full_and_sparse_windows(void **state)
{
    enum { KEYS = 20000 };
    char key[32];
    hc_table_t *tbl = hc_table_new(KEYS);
    size_t mem;

    (void)state;
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < KEYS; i++) {
            snprintf(key, sizeof(key), "post-%d-%d", round, i);
            assert_int_equal(add_str(tbl, key, 1, 1, NONE, NONE), HC_OK);
        }
        assert_true(hc_table_is_full(tbl));
        mem = hc_table_memory(tbl);
        hc_table_clear(tbl);
        assert_int_equal(hc_table_memory(tbl), mem);

        /* few keys: the clear below walks entries instead of wiping every slot; the order
         * changes each window so that a stale slot would point at a different entry */
        for (int w = 0; w < 5; w++) {
            for (int i = 0; i < 50; i++) {
                snprintf(key, sizeof(key), "post-%d-%d", round, (i * 7 + w * 13) % 50);
                assert_int_equal(add_str(tbl, key, 1, 1, NONE, NONE), HC_OK);
                assert_int_equal(add_str(tbl, key, 1, 1, NONE, NONE), HC_OK);
            }
            assert_int_equal(hc_table_count(tbl), 50);
            for (int i = 0; i < 50; i++) {
                assert_int_equal(hc_table_entry(tbl, (size_t)i)->delta, 2);
            }
            hc_table_clear(tbl);
            assert_int_equal(hc_table_count(tbl), 0);
        }
        assert_int_equal(hc_table_memory(tbl), mem);
    }
    hc_table_destroy(tbl);
}

static void grows_up_to_max_keys_and_no_further(void **state)
{
    enum { KEYS = 5000 }; /* not a power of two */
    char key[32];
    hc_table_t *tbl = hc_table_new(KEYS);
    size_t mem0 = hc_table_memory(tbl);
    size_t mem_full;

    (void)state;
    for (int i = 0; i < KEYS; i++) {
        snprintf(key, sizeof(key), "k%d", i);
        assert_int_equal(add_str(tbl, key, i, 1, NONE, NONE), HC_OK);
    }
    mem_full = hc_table_memory(tbl);
    assert_true(mem_full > mem0);
    assert_true(hc_table_is_full(tbl));
    assert_int_equal(add_str(tbl, "one-more", 1, 1, NONE, NONE), HC_ERR_FULL);
    /* every key survived the rehashes, in insertion order */
    for (int i = 0; i < KEYS; i++) {
        snprintf(key, sizeof(key), "k%d", i);
        assert_int_equal(add_str(tbl, key, 1, 1, NONE, NONE), HC_OK);
        assert_memory_equal(hc_table_entry(tbl, (size_t)i)->post_id, key, strlen(key));
        assert_int_equal(hc_table_entry(tbl, (size_t)i)->delta, i + 1);
    }
    assert_int_equal(hc_table_count(tbl), KEYS);
    assert_int_equal(hc_table_events(tbl), 2 * KEYS);
    assert_int_equal(hc_table_memory(tbl), mem_full);
    hc_table_destroy(tbl);
}

static void huge_max_keys_allocates_lazily(void **state)
{
    hc_table_t *tbl = hc_table_new(100000000);

    (void)state;
    assert_non_null(tbl);
    assert_int_equal(hc_table_max_keys(tbl), 100000000);
    assert_true(hc_table_memory(tbl) < 256 * 1024);
    assert_int_equal(add_str(tbl, "x", 1, 1, NONE, NONE), HC_OK);
    hc_table_destroy(tbl);
}

/* Memory per live key stays within the documented 200 bytes for 16-byte keys at any fill, and
 * hits and clears do not allocate. */
static void memory_per_key_is_bounded(void **state)
{
    enum { KEYS = 300000 };
    char key[17];
    hc_table_t *tbl = hc_table_new(1000000);
    size_t base = hc_table_memory(tbl);
    size_t mem;

    (void)state;
    for (int i = 0; i < KEYS; i++) {
        snprintf(key, sizeof(key), "post:%011d", i);
        assert_int_equal(hc_table_add(tbl, key, 16, 1, 1, NONE, NONE), HC_OK);
        if (i >= 2048 && i % 997 == 0) {
            size_t per_key = (hc_table_memory(tbl) - base) / (size_t)(i + 1);

            assert_true(per_key <= 200);
        }
    }
    mem = hc_table_memory(tbl);
    for (int i = 0; i < KEYS; i += 3) {
        snprintf(key, sizeof(key), "post:%011d", i);
        assert_int_equal(hc_table_add(tbl, key, 16, 1, 1, NONE, NONE), HC_OK);
    }
    assert_int_equal(hc_table_memory(tbl), mem);
    hc_table_clear(tbl);
    assert_int_equal(hc_table_memory(tbl), mem);
    hc_table_destroy(tbl);
}

/* ---- differential test against a naive reference ---- */

typedef struct ref_entry {
    char id[40];
    size_t len;
    int64_t delta;
    int64_t events;
    int64_t ts_min;
    int64_t ts_max;
} ref_entry_t;

typedef struct ref_table {
    ref_entry_t *ents; /* insertion order, linear search */
    size_t count;
    size_t max_keys;
    int64_t events;
} ref_table_t;

static hc_err_t ref_add(ref_table_t *ref, const char *id, size_t len, int64_t delta, int64_t events,
                        int64_t ts_min, int64_t ts_max)
{
    ref_entry_t *e = NULL;

    for (size_t i = 0; i < ref->count; i++) {
        if (ref->ents[i].len == len && memcmp(ref->ents[i].id, id, len) == 0) {
            e = &ref->ents[i];
            break;
        }
    }
    if (e == NULL) {
        if (ref->count == ref->max_keys) {
            return HC_ERR_FULL;
        }
        e = &ref->ents[ref->count++];
        memcpy(e->id, id, len);
        e->len = len;
        e->delta = 0;
        e->events = 0;
        e->ts_min = NONE;
        e->ts_max = NONE;
    }
    e->delta += delta;
    e->events += events;
    if (ts_min != NONE && (e->ts_min == NONE || ts_min < e->ts_min)) {
        e->ts_min = ts_min;
    }
    if (ts_max != NONE && (e->ts_max == NONE || ts_max > e->ts_max)) {
        e->ts_max = ts_max;
    }
    ref->events += events;
    return HC_OK;
}

static uint64_t rng_next(uint64_t *s)
{
    /* xorshift64*: deterministic across platforms, so a failure replays exactly */
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545f4914f6cdd1du;
}

/* Pool key i: varied lengths (1..40, across the 4/8-byte word boundaries of the hash), some
 * with NUL bytes, many sharing long prefixes. Two i may give the same bytes (short keys); both
 * tables then see one key, which is fine. */
static size_t pool_key(unsigned i, char *buf)
{
    size_t len = 1 + (i * 2654435761u >> 7) % 40;

    for (size_t j = 0; j < len; j++) {
        buf[j] = (char)('A' + j % 7);
    }
    for (size_t j = 0; j < len && j < 4; j++) {
        buf[len - 1 - j] = (char)((i >> (8 * j)) & 0xff); /* may be NUL */
    }
    if (len < 4) {
        buf[0] = (char)(i % 251); /* short keys: i distinguishes them within a length */
    }
    return len;
}

static void check_same(const hc_table_t *tbl, const ref_table_t *ref)
{
    assert_int_equal(hc_table_count(tbl), ref->count);
    assert_int_equal(hc_table_events(tbl), ref->events);
    assert_int_equal(hc_table_is_full(tbl), ref->count == ref->max_keys);
    for (size_t i = 0; i < ref->count; i++) {
        const hc_table_entry_t *ent = hc_table_entry(tbl, i);
        const ref_entry_t *r = &ref->ents[i];

        assert_int_equal(ent->post_id_len, r->len);
        assert_memory_equal(ent->post_id, r->id, r->len);
        assert_int_equal(ent->delta, r->delta);
        assert_int_equal(ent->events, r->events);
        assert_true(ent->ts_min == r->ts_min);
        assert_true(ent->ts_max == r->ts_max);
    }
}

static void matches_naive_reference_over_random_ops(void **state)
{
    enum { OPS = 100000, POOL = 6000, MAX_KEYS = 2500 };
    uint64_t seed = 0x9d2c5680u;
    ref_table_t ref = {calloc(MAX_KEYS, sizeof(ref_entry_t)), 0, MAX_KEYS, 0};
    hc_table_t *tbl = hc_table_new(MAX_KEYS);
    int next_clear = 0;
    int clears = 0;
    int fulls = 0;
    char key[40];

    (void)state;
    assert_non_null(ref.ents);
    assert_non_null(tbl);
    for (int op = 0; op < OPS; op++) {
        uint64_t r = rng_next(&seed);
        size_t len;
        int64_t delta;
        int64_t events;
        int64_t ts_min = NONE;
        int64_t ts_max = NONE;
        hc_err_t err;

        if (op == next_clear) {
            /* Windows of random length: short ones leave few keys (the per-slot clear), long
             * ones fill the table (HC_ERR_FULL, then the memset clear). */
            uint64_t w = rng_next(&seed);

            next_clear = op + 1 + (int)(w % 2 ? (w >> 1) % 400 : (w >> 1) % 15000);
            hc_table_clear(tbl);
            ref.count = 0;
            ref.events = 0;
            clears++;
            check_same(tbl, &ref);
        }
        /* skewed: half the ops hit 300 hot keys, the rest spread over the pool */
        len = pool_key((r >> 8) % 2 ? (unsigned)((r >> 16) % 300) : (unsigned)((r >> 16) % POOL),
                       key);
        if ((r >> 40) % 2 == 0) {
            delta = (r >> 41) % 2 ? 1 : -1;
            events = 1;
        } else {
            events = 1 + (int64_t)((r >> 42) % 1000);
            delta = (int64_t)((r >> 52) % 2001) - 1000;
        }
        if ((r >> 63) == 0) {
            ts_min = (int64_t)(rng_next(&seed) % 100000) - 50000;
            ts_max = ts_min + (int64_t)((r >> 30) % 500);
        }
        err = hc_table_add(tbl, key, len, delta, events, ts_min, ts_max);
        assert_int_equal(err, ref_add(&ref, key, len, delta, events, ts_min, ts_max));
        fulls += err == HC_ERR_FULL;
        if (op % 500 == 0) {
            check_same(tbl, &ref);
        }
    }
    check_same(tbl, &ref);
    /* the run did exercise both clear paths and the full table */
    assert_true(clears > 10);
    assert_true(fulls > 100);
    hc_table_destroy(tbl);
    free(ref.ents);
}

/* Hash flooding: ids computed to share one home slot under the table's OLD unkeyed hash (what an
 * attacker can do offline) must cost about what random ids cost. Measured in probes
 * (hc_table_probes), not time, so the verdict does not depend on the machine's load. With the old
 * hash the colliding ids cost ~N/2 probes each (N = 3000: ~1500x random); the bound is 3x. */
#define FLOOD_IDS 3000
#define FLOOD_BITS 13 /* 3000 keys -> 4096 entries -> 8192 slots at most: one home slot */

static void table_resists_old_hash_collisions(void **state)
{
    (void)state;
    static char ids[FLOOD_IDS][HC_COLLIDE_ID_MAX];
    static size_t lens[FLOOD_IDS];
    uint64_t counter = 0;
    for (size_t i = 0; i < FLOOD_IDS; i++) {
        lens[i] = hc_old_hash_next_colliding(&counter, FLOOD_BITS, ids[i]);
        /* the generator's claim, checked: one home slot under the old hash */
        assert_int_equal(hc_old_table_hash(ids[i], lens[i]) & ((1u << FLOOD_BITS) - 1), 0);
    }
    /* The old hash's cost on these ids, simulated with linear probing over 2^FLOOD_BITS slots. */
    static unsigned char used[1u << FLOOD_BITS];
    memset(used, 0, sizeof(used));
    uint64_t old_probes = 0;
    for (size_t i = 0; i < FLOOD_IDS; i++) {
        size_t pos = hc_old_table_hash(ids[i], lens[i]) & ((1u << FLOOD_BITS) - 1);
        old_probes++;
        while (used[pos]) {
            pos = (pos + 1) & ((1u << FLOOD_BITS) - 1);
            old_probes++;
        }
        used[pos] = 1;
    }

    hc_table_t *flood = hc_table_new(FLOOD_IDS);
    hc_table_t *random = hc_table_new(FLOOD_IDS);
    assert_non_null(flood);
    assert_non_null(random);
    for (size_t i = 0; i < FLOOD_IDS; i++) {
        char id[32];
        int n =
            snprintf(id, sizeof(id), "r%08lx", (unsigned long)((i * 2654435761u) ^ 0x5bd1e995u));
        assert_int_equal(hc_table_add(flood, ids[i], lens[i], 1, 1, NONE, NONE), HC_OK);
        assert_int_equal(hc_table_add(random, id, (size_t)n, 1, 1, NONE, NONE), HC_OK);
    }
    assert_int_equal(hc_table_count(flood), FLOOD_IDS);
    uint64_t fp = hc_table_probes(flood), rp = hc_table_probes(random);
    print_message("flood: %llu probes keyed, %llu under the old hash; random ids: %llu\n",
                  (unsigned long long)fp, (unsigned long long)old_probes, (unsigned long long)rp);
    assert_true(old_probes > 100 * rp); /* the stream really is a flood for the old hash */
    assert_true(fp <= 3 * rp);
    hc_table_destroy(flood);
    hc_table_destroy(random);
}

/* SipHash-2-4's test vector from the paper (Appendix A): key 00..0f, message 00..0e. */
static void siphash_matches_the_paper(void **state)
{
    (void)state;
    hc_hash_key_t key = {0x0706050403020100ull, 0x0f0e0d0c0b0a0908ull};
    unsigned char msg[15];
    for (size_t i = 0; i < sizeof(msg); i++) {
        msg[i] = (unsigned char)i;
    }
    assert_true(hc_siphash24(&key, msg, sizeof(msg)) == 0xa129ca6149be45e5ull);
    /* one key for the whole process, and the keyed hash depends on it */
    hc_hash_key_t a = hc_hash_process_key(), b = hc_hash_process_key();
    assert_true(a.k0 == b.k0 && a.k1 == b.k1);
    hc_hash_key_t other = {a.k0 ^ 1, a.k1};
    assert_true(hc_siphash13(&a, "post", 4) != hc_siphash13(&other, "post", 4));
}

/* The byte stream (JSON keys decoded from their escapes) gives what the one-shot hash gives,
 * for every tail length and across several words. */
static void siphash_stream_matches_one_shot(void **state)
{
    (void)state;
    hc_hash_key_t key = hc_hash_process_key();
    unsigned char msg[70];
    for (size_t i = 0; i < sizeof(msg); i++) {
        msg[i] = (unsigned char)(i * 37 + 11);
    }
    for (size_t len = 0; len <= sizeof(msg); len++) {
        hc_siphash13_stream_t st;
        hc_siphash13_init(&st, &key);
        for (size_t i = 0; i < len; i++) {
            hc_siphash13_byte(&st, msg[i]);
        }
        assert_true(hc_siphash13_final(&st) == hc_siphash13(&key, msg, len));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(new_rejects_zero_max_keys),
        cmocka_unit_test(find_agrees_with_a_scan),
        cmocka_unit_test(add_sums_delta_and_events_per_post),
        cmocka_unit_test(add_merges_ts_ignoring_none),
        cmocka_unit_test(add_accepts_existing_key_when_full),
        cmocka_unit_test(add_rejects_new_key_when_full),
        cmocka_unit_test(add_rejects_overflow_and_changes_nothing),
        cmocka_unit_test(ts_age_saturates_for_any_ts),
        cmocka_unit_test(keys_with_nul_bytes_are_distinct),
        cmocka_unit_test(keys_of_256_bytes_are_kept_whole),
        cmocka_unit_test(colliding_hashes_keep_keys_apart),
        cmocka_unit_test(arena_growth_keeps_post_ids_valid),
        cmocka_unit_test(clear_keeps_capacity_and_forgets_keys),
        cmocka_unit_test(clear_forgets_keys_when_few_were_used),
        cmocka_unit_test(sparse_clears_leave_no_stale_slots),
        cmocka_unit_test(clear_then_reuse_after_full_and_sparse_windows),
        cmocka_unit_test(grows_up_to_max_keys_and_no_further),
        cmocka_unit_test(huge_max_keys_allocates_lazily),
        cmocka_unit_test(memory_per_key_is_bounded),
        cmocka_unit_test(matches_naive_reference_over_random_ops),
        cmocka_unit_test(table_resists_old_hash_collisions),
        cmocka_unit_test(siphash_matches_the_paper),
        cmocka_unit_test(siphash_stream_matches_one_shot),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
