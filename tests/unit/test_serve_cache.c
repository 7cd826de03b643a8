/* The serve cache: TTL expiry on a fake clock, coalescing with real threads, bounded size. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* cmocka.h needs the four headers above first. */
#include <cmocka.h>

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hotcount/serve_cache.h"

typedef struct fake {
    atomic_int_fast64_t now_ms; /* the clock */
    atomic_int loads;           /* loader calls */
    atomic_int fail;            /* next loads fail */
    hc_serve_cache_t *cache;    /* for the blocking loader */
    size_t wait_for;            /* blocking loader: until this many callers wait */
    int flood;                  /* blocking loader: then loads this many other keys */
    atomic_int timed_out;
} fake_t;

static int64_t fake_clock(void *opaque)
{
    return atomic_load(&((fake_t *)opaque)->now_ms);
}

/* The value is "<key>#<load number>", so a test can tell which load a reader got. */
static hc_err_t counting_load(void *opaque, const char *key, size_t key_len, void **value,
                              size_t *value_len, char *errstr, size_t errstr_size)
{
    fake_t *f = opaque;
    int n = atomic_fetch_add(&f->loads, 1) + 1;
    if (atomic_load(&f->fail)) {
        hc_errstr_set(errstr, errstr_size, "store down");
        return HC_ERR_TRANSIENT;
    }
    char *s = malloc(key_len + 16);
    memcpy(s, key, key_len); /* not %.*s: a key may hold NUL bytes */
    int len = snprintf(s + key_len, 16, "#%d", n);
    *value = s;
    *value_len = key_len + (size_t)len;
    return HC_OK;
}

static int64_t real_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static char *get(hc_serve_cache_t *c, const char *key, int64_t *at);

/* Holds the load of "hot" open until every other reader is waiting for it, so the test sees them
 * coalesce rather than hoping the threads overlap (bounded by 10 s of real time); then, with
 * flood set, fills the cache with other keys while they still wait. Other keys load at once. */
static hc_err_t blocking_load(void *opaque, const char *key, size_t key_len, void **value,
                              size_t *value_len, char *errstr, size_t errstr_size)
{
    fake_t *f = opaque;
    if (key_len != 3 || memcmp(key, "hot", 3) != 0) {
        return counting_load(opaque, key, key_len, value, value_len, errstr, errstr_size);
    }
    int64_t deadline = real_ms() + 10000;
    hc_serve_cache_stats_t st;
    for (;;) {
        hc_serve_cache_get_stats(f->cache, &st);
        if (st.waiting >= f->wait_for) {
            break;
        }
        if (real_ms() > deadline) {
            atomic_store(&f->timed_out, 1);
            break;
        }
        sched_yield();
    }
    for (int i = 0; i < f->flood; i++) {
        char other[16];
        snprintf(other, sizeof(other), "k%d", i);
        free(get(f->cache, other, NULL));
    }
    return counting_load(opaque, key, key_len, value, value_len, errstr, errstr_size);
}

static hc_serve_cache_t *make(fake_t *f, int64_t ttl, size_t max, hc_serve_load_fn load)
{
    hc_serve_cache_opts_t o = {.ttl = ttl,
                               .max_entries = max,
                               .load = load,
                               .load_opaque = f,
                               .clock = fake_clock,
                               .clock_opaque = f};
    char errstr[128];
    hc_serve_cache_t *c = NULL;
    assert_int_equal(hc_serve_cache_new(&o, &c, errstr, sizeof(errstr)), HC_OK);
    f->cache = c;
    return c;
}

static char *get(hc_serve_cache_t *c, const char *key, int64_t *at)
{
    void *v = NULL;
    size_t len = 0;
    int64_t at_ms = -1;
    char errstr[128];
    hc_err_t err =
        hc_serve_cache_get(c, key, strlen(key), &v, &len, &at_ms, errstr, sizeof(errstr));
    assert_int_equal(err, HC_OK);
    assert_int_equal(strnlen(v, len), len);
    if (at) {
        *at = at_ms;
    }
    return v;
}

static void assert_get(hc_serve_cache_t *c, const char *key, const char *want)
{
    char *v = get(c, key, NULL);
    assert_string_equal(v, want);
    free(v);
}

static void value_is_served_until_ttl_then_reloaded(void **state)
{
    (void)state;
    fake_t f = {0};
    atomic_store(&f.now_ms, 1000);
    hc_serve_cache_t *c = make(&f, 20, 100, counting_load);
    int64_t at = 0;
    free(get(c, "p", &at));
    assert_int_equal(at, 1000);
    assert_int_equal(atomic_load(&f.loads), 1);
    atomic_store(&f.now_ms, 1019); /* 19 ms old: fresh */
    assert_get(c, "p", "p#1");
    assert_int_equal(atomic_load(&f.loads), 1);
    atomic_store(&f.now_ms, 1020); /* 20 ms old: expired */
    char *v = get(c, "p", &at);
    assert_string_equal(v, "p#2");
    assert_int_equal(at, 1020);
    free(v);
    atomic_store(&f.now_ms, 1039);
    assert_get(c, "p", "p#2");
    assert_int_equal(atomic_load(&f.loads), 2);
    hc_serve_cache_stats_t st;
    hc_serve_cache_get_stats(c, &st);
    assert_int_equal(st.gets, 4);
    assert_int_equal(st.hits, 2);
    assert_int_equal(st.loads, 2);
    hc_serve_cache_destroy(c);
}

/* The per-call TTL (read-hot promotion): a long one keeps an entry a short one would reload,
 * and back on the short TTL an entry older than it is reloaded at once. */
static void a_call_s_ttl_decides_freshness(void **state)
{
    (void)state;
    fake_t f = {0};
    hc_serve_cache_t *c = make(&f, 20, 100, counting_load);
    void *v = NULL;
    size_t len = 0;
    int64_t at = 0;
    char errstr[128];
    assert_get(c, "p", "p#1");
    atomic_store(&f.now_ms, 999); /* 999 ms old: fresh under a 1000 ms TTL */
    assert_int_equal(hc_serve_cache_get_ttl(c, "p", 1, 1000, &v, &len, &at, errstr, sizeof(errstr)),
                     HC_OK);
    assert_string_equal(v, "p#1");
    free(v);
    assert_int_equal(atomic_load(&f.loads), 1);
    assert_get(c, "p", "p#2"); /* the cache's own 20 ms: reloaded */
    hc_serve_cache_destroy(c);
}

static void keys_expire_independently(void **state)
{
    (void)state;
    fake_t f = {0};
    hc_serve_cache_t *c = make(&f, 20, 100, counting_load);
    assert_get(c, "a", "a#1");
    atomic_store(&f.now_ms, 10);
    assert_get(c, "b", "b#2");
    atomic_store(&f.now_ms, 25); /* a expired, b not */
    assert_get(c, "a", "a#3");
    assert_get(c, "b", "b#2");
    hc_serve_cache_destroy(c);
}

static void failed_load_is_cached_for_ttl(void **state)
{
    (void)state;
    fake_t f = {0};
    hc_serve_cache_t *c = make(&f, 20, 100, counting_load);
    atomic_store(&f.fail, 1);
    void *v = NULL;
    size_t len;
    int64_t at;
    char errstr[128] = "";
    for (int i = 0; i < 3; i++) {
        assert_int_equal(hc_serve_cache_get(c, "p", 1, &v, &len, &at, errstr, sizeof(errstr)),
                         HC_ERR_TRANSIENT);
        assert_null(v);
        assert_string_equal(errstr, "store down");
    }
    assert_int_equal(atomic_load(&f.loads), 1);
    atomic_store(&f.fail, 0);
    atomic_store(&f.now_ms, 20);
    assert_get(c, "p", "p#2");
    hc_serve_cache_destroy(c);
}

static void size_is_bounded_by_lru_eviction(void **state)
{
    (void)state;
    fake_t f = {0};
    hc_serve_cache_t *c = make(&f, 1000, 4, counting_load);
    char key[16];
    for (int i = 0; i < 100; i++) {
        snprintf(key, sizeof(key), "k%d", i);
        free(get(c, key, NULL));
        if (i == 50) {
            assert_get(c, "k47", "k47#48"); /* recently used survives the next insert */
        }
    }
    hc_serve_cache_stats_t st;
    hc_serve_cache_get_stats(c, &st);
    assert_int_equal(st.entries, 4);
    assert_int_equal(st.evictions, 96);
    assert_get(c, "k99", "k99#100"); /* still cached */
    assert_get(c, "k0", "k0#101");   /* evicted long ago: loaded again */
    hc_serve_cache_destroy(c);
}

static void empty_value_and_binary_key(void **state)
{
    (void)state;
    fake_t f = {0};
    hc_serve_cache_t *c = make(&f, 20, 10, counting_load);
    void *v = NULL;
    size_t len = 99;
    int64_t at;
    char errstr[64];
    const char key[] = {'a', '\0', 'b'};
    assert_int_equal(hc_serve_cache_get(c, key, 3, &v, &len, &at, errstr, sizeof(errstr)), HC_OK);
    assert_int_equal(len, 5); /* "a\0b#1" */
    assert_memory_equal(v, "a\0b#1", 5);
    free(v);
    assert_int_equal(hc_serve_cache_get(c, "a", 1, &v, &len, &at, errstr, sizeof(errstr)), HC_OK);
    assert_string_equal(v, "a#2"); /* a different key from "a\0b" */
    free(v);
    hc_serve_cache_destroy(c);
}

#define READERS 32

typedef struct reader {
    hc_serve_cache_t *cache;
    const char *key;
    char *got;
} reader_t;

static void *read_one(void *arg)
{
    reader_t *r = arg;
    void *v = NULL;
    size_t len;
    int64_t at;
    char errstr[64];
    if (hc_serve_cache_get(r->cache, r->key, strlen(r->key), &v, &len, &at, errstr,
                           sizeof(errstr)) == HC_OK) {
        r->got = v;
    }
    return NULL;
}

static void concurrent_readers_of_one_key_cause_one_load(void **state)
{
    (void)state;
    fake_t f = {0};
    hc_serve_cache_t *c = make(&f, 20, 100, blocking_load);
    f.wait_for = READERS - 1;
    pthread_t th[READERS];
    reader_t r[READERS];
    for (int i = 0; i < READERS; i++) {
        r[i] = (reader_t){c, "hot", NULL};
        assert_int_equal(pthread_create(&th[i], NULL, read_one, &r[i]), 0);
    }
    for (int i = 0; i < READERS; i++) {
        pthread_join(th[i], NULL);
    }
    assert_int_equal(atomic_load(&f.timed_out), 0);
    assert_int_equal(atomic_load(&f.loads), 1);
    for (int i = 0; i < READERS; i++) {
        assert_non_null(r[i].got);
        assert_string_equal(r[i].got, "hot#1");
        free(r[i].got);
    }
    hc_serve_cache_stats_t st;
    hc_serve_cache_get_stats(c, &st);
    assert_int_equal(st.loads, 1);
    assert_int_equal(st.coalesced, READERS - 1);
    assert_int_equal(st.waiting, 0);
    hc_serve_cache_destroy(c);
}

/* Waiters pin their entry: a flood of other keys while they wait must not evict it under them
 * (ASan would see the use after free), and the cache still shrinks back to its bound. */
static void waiting_entry_survives_eviction_pressure(void **state)
{
    (void)state;
    fake_t f = {0};
    hc_serve_cache_t *c = make(&f, 20, 2, blocking_load);
    f.wait_for = 3;
    f.flood = 10;
    pthread_t th[4];
    reader_t r[4];
    for (int i = 0; i < 4; i++) {
        r[i] = (reader_t){c, "hot", NULL};
        assert_int_equal(pthread_create(&th[i], NULL, read_one, &r[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
    }
    assert_int_equal(atomic_load(&f.timed_out), 0);
    for (int i = 0; i < 4; i++) {
        assert_string_equal(r[i].got, "hot#11"); /* loaded after k0..k9 */
        free(r[i].got);
    }
    hc_serve_cache_stats_t st;
    hc_serve_cache_get_stats(c, &st);
    assert_int_equal(st.loads, 11);
    assert_true(st.entries <= 2);
    assert_true(st.evictions >= 9);
    assert_get(c, "hot", "hot#11"); /* still cached: it was never evicted while pinned */
    hc_serve_cache_destroy(c);
}

static void rejects_bad_options(void **state)
{
    (void)state;
    fake_t f = {0};
    hc_serve_cache_opts_t o = {
        .ttl = 0, .max_entries = 1, .load = counting_load, .clock = fake_clock, .clock_opaque = &f};
    hc_serve_cache_t *c = (hc_serve_cache_t *)&f;
    char errstr[128];
    assert_int_equal(hc_serve_cache_new(&o, &c, errstr, sizeof(errstr)), HC_ERR_INVALID);
    assert_null(c);
    o.ttl = 1;
    o.max_entries = 0;
    assert_int_equal(hc_serve_cache_new(&o, &c, errstr, sizeof(errstr)), HC_ERR_INVALID);
    hc_serve_cache_destroy(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(value_is_served_until_ttl_then_reloaded),
        cmocka_unit_test(a_call_s_ttl_decides_freshness),
        cmocka_unit_test(keys_expire_independently),
        cmocka_unit_test(failed_load_is_cached_for_ttl),
        cmocka_unit_test(size_is_bounded_by_lru_eviction),
        cmocka_unit_test(empty_value_and_binary_key),
        cmocka_unit_test(concurrent_readers_of_one_key_cause_one_load),
        cmocka_unit_test(waiting_entry_survives_eviction_pressure),
        cmocka_unit_test(rejects_bad_options),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
