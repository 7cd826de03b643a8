/* Read-hot promotion (serve_hot.h) in front of the serve cache, on one fake clock: a read storm
 * costs at most one store read per hot TTL, a rate around the thresholds does not flap, the
 * sampler's memory does not grow with the posts read. */
/* mallinfo2 needs _GNU_SOURCE, which the build defines */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* cmocka.h needs the four headers above first. */
#include <cmocka.h>

#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hotcount/serve_cache.h"
#include "hotcount/serve_hot.h"

typedef struct fake {
    int64_t now_us; /* the one clock: the cache reads microseconds, the sampler milliseconds */
    int loads;      /* store reads: the cache's loader calls */
    const char *topic_hot; /* the post the fake topic.hotkeys says is hot; NULL: none */
    bool all_topic_hot;
} fake_t;

static int64_t clock_us(void *opaque)
{
    return ((fake_t *)opaque)->now_us;
}

static int64_t clock_ms(void *opaque)
{
    return ((fake_t *)opaque)->now_us / 1000;
}

/* mallinfo2 counts large blocks (mmap'ed) apart */
static size_t heap_bytes(void)
{
    struct mallinfo2 mi = mallinfo2();
    return mi.uordblks + mi.hblkhd;
}

static hc_err_t counting_load(void *opaque, const char *key, size_t key_len, void **value,
                              size_t *value_len, char *errstr, size_t errstr_size)
{
    fake_t *f = opaque;
    (void)key;
    (void)key_len;
    (void)errstr;
    (void)errstr_size;
    f->loads++;
    *value = NULL;
    *value_len = 0;
    return HC_OK;
}

static bool fake_topic(void *opaque, const char *post_id, size_t post_id_len)
{
    const fake_t *f = opaque;
    return f->all_topic_hot || (f->topic_hot && strlen(f->topic_hot) == post_id_len &&
                                memcmp(f->topic_hot, post_id, post_id_len) == 0);
}

/* enter 200/s, leave 100/s, dwell 10 s, TTL 20 ms, hot TTL hot_ttl_ms: serve's defaults */
static hc_serve_hot_opts_t opts_for(fake_t *f, int64_t hot_ttl_ms, size_t max)
{
    return (hc_serve_hot_opts_t){.enter_rate = 200,
                                 .leave_rate = 100,
                                 .dwell_ms = 10000,
                                 .ttl_ms = 20,
                                 .hot_ttl_ms = hot_ttl_ms,
                                 .max = max,
                                 .window_ms = 1000,
                                 .now_ms = clock_ms,
                                 .clock_opaque = f};
}

static hc_serve_hot_t *new_hot(fake_t *f, int64_t hot_ttl_ms, size_t max)
{
    hc_serve_hot_opts_t o = opts_for(f, hot_ttl_ms, max);
    hc_serve_hot_t *hot = NULL;
    char errstr[256];
    assert_int_equal(hc_serve_hot_new(&o, &hot, errstr, sizeof(errstr)), HC_OK);
    return hot;
}

static hc_serve_cache_t *new_cache(fake_t *f)
{
    hc_serve_cache_opts_t o = {.ttl = 20000,
                               .max_entries = 16,
                               .load = counting_load,
                               .load_opaque = f,
                               .clock = clock_us,
                               .clock_opaque = f};
    hc_serve_cache_t *cache = NULL;
    char errstr[256];
    assert_int_equal(hc_serve_cache_new(&o, &cache, errstr, sizeof(errstr)), HC_OK);
    return cache;
}

/* One read as serve does it (serve_http.c get_likes): sampled first, then the cache with the
 * TTL the sampler gave. Returns that TTL. */
static int64_t read_post(hc_serve_hot_t *hot, hc_serve_cache_t *cache, const char *id)
{
    int64_t ttl_ms = hc_serve_hot_read(hot, id, strlen(id));
    void *v = NULL;
    size_t len = 0;
    int64_t at;
    char errstr[256];
    assert_int_equal(hc_serve_cache_get_ttl(cache, id, strlen(id), ttl_ms * 1000, &v, &len, &at,
                                            errstr, sizeof(errstr)),
                     HC_OK);
    free(v);
    return ttl_ms;
}

typedef struct storm {
    int loads;
    int loads_after_promotion;
    int64_t promoted_at_ms; /* -1: never */
} storm_t;

/* 10 000 reads of one post over 3 s of fake time (one every 300 us). */
static storm_t storm(int64_t hot_ttl_ms, bool topic)
{
    fake_t f = {.now_us = 1000000, .topic_hot = topic ? "viral" : NULL};
    hc_serve_hot_t *hot = new_hot(&f, hot_ttl_ms, 64);
    hc_serve_cache_t *cache = new_cache(&f);
    if (topic) {
        hc_serve_hot_set_topic(hot, fake_topic, &f);
    }
    storm_t s = {.promoted_at_ms = -1};
    for (int i = 0; i < 10000; i++) {
        int before = f.loads;
        int64_t ttl = read_post(hot, cache, "viral");
        if (ttl == 1000 && s.promoted_at_ms < 0) {
            s.promoted_at_ms = f.now_us / 1000 - 1000;
        }
        if (s.promoted_at_ms >= 0) {
            s.loads_after_promotion += f.loads - before;
        }
        f.now_us += 300;
    }
    s.loads = f.loads;
    hc_serve_cache_destroy(cache);
    hc_serve_hot_destroy(hot);
    return s;
}

static void read_storm_costs_one_store_read_per_hot_ttl(void **state)
{
    (void)state;
    /* without promotion (hot TTL = TTL): one load per 20 ms, 150 in 3 s */
    storm_t cold = storm(20, false);
    assert_true(cold.loads >= 145 && cold.loads <= 151);
    assert_int_equal(cold.promoted_at_ms, -1);
    /* promoted by its rate when the first 1 s window closes; from then on one load per 1 s:
     * 2 s left, at most 2 + 1 loads */
    storm_t hot = storm(1000, false);
    assert_true(hot.promoted_at_ms >= 1000 && hot.promoted_at_ms <= 1001);
    assert_true(hot.loads_after_promotion <= 3);
    assert_true(hot.loads <= 51 + 3);
    /* hot in topic.hotkeys: promoted from its first read, 3 s cost at most 3 + 1 loads */
    storm_t up_front = storm(1000, true);
    assert_int_equal(up_front.promoted_at_ms, 0);
    assert_true(up_front.loads <= 4);
    printf("10 000 reads in 3 s: %d loads unpromoted, %d promoted by rate (%d after), %d "
           "promoted up front\n",
           cold.loads, hot.loads, hot.loads_after_promotion, up_front.loads);
}

/* reads of id at `rate` per second for one 1 s window, evenly spaced; returns how many of them
 * got the hot TTL */
static int window_at(hc_serve_hot_t *hot, fake_t *f, const char *id, int rate)
{
    int hot_reads = 0;
    int64_t start = f->now_us;
    for (int i = 0; i < rate; i++) {
        f->now_us = start + (int64_t)i * 1000000 / rate;
        hot_reads += hc_serve_hot_read(hot, id, strlen(id)) == 1000;
    }
    f->now_us = start + 1000000;
    return hot_reads;
}

static void rate_around_the_thresholds_does_not_flap(void **state)
{
    (void)state;
    fake_t f = {.now_us = 5000000};
    hc_serve_hot_t *hot = new_hot(&f, 1000, 64);
    for (int w = 0; w < 3; w++) {
        window_at(hot, &f, "p", 300);
    }
    hc_serve_hot_stats_t st = hc_serve_hot_stats(hot);
    assert_int_equal(st.promotions[HC_SERVE_HOT_READS], 1);
    /* between leave (100/s) and enter (200/s) and over it, 40 windows: always hot, no churn */
    for (int w = 0; w < 40; w++) {
        int rate = w % 2 ? 150 : 250;
        assert_int_equal(window_at(hot, &f, "p", rate), rate);
    }
    /* dips below leave shorter than the dwell (1 s and 5 s of 10 s), between hot spells */
    for (int round = 0; round < 5; round++) {
        int dip = round % 2 ? 5 : 1;
        for (int w = 0; w < dip; w++) {
            assert_int_equal(window_at(hot, &f, "p", 50), 50);
        }
        for (int w = 0; w < 2; w++) {
            assert_int_equal(window_at(hot, &f, "p", 150), 150);
        }
    }
    st = hc_serve_hot_stats(hot);
    assert_int_equal(st.promotions[HC_SERVE_HOT_READS], 1);
    assert_int_equal(st.demotions[HC_SERVE_HOT_READS], 0);
    assert_int_equal(st.flaps, 0);
    assert_int_equal(st.posts, 1);
    hc_serve_hot_post_t p[4];
    size_t n = 0;
    assert_int_equal(hc_serve_hot_list(hot, p, 4, &n), 1);
    assert_int_equal(n, 1);
    assert_string_equal(p[0].post_id, "p");
    assert_int_equal(p[0].source, HC_SERVE_HOT_READS);
    assert_int_equal(p[0].since_ms, 6000); /* when the first window closed */
    /* quiet for longer than the dwell: demoted once, and the TTL is the short one again */
    for (int s = 0; s < 12; s++) {
        f.now_us += 1000000;
        st = hc_serve_hot_stats(hot);
    }
    assert_int_equal(st.demotions[HC_SERVE_HOT_READS], 1);
    assert_int_equal(st.posts, 0);
    assert_int_equal(hc_serve_hot_read(hot, "p", 1), 20);
    hc_serve_hot_destroy(hot);
}

static void many_distinct_posts_do_not_grow_the_sampler(void **state)
{
    (void)state;
    fake_t f = {.now_us = 1000000, .all_topic_hot = true};
    size_t before_new = heap_bytes();
    hc_serve_hot_t *hot = new_hot(&f, 1000, 64);
    size_t after_new = heap_bytes();
    hc_serve_hot_set_topic(hot, fake_topic, &f);
    char id[32];
    size_t warm = 0;
    for (int i = 0; i < 200000; i++) {
        snprintf(id, sizeof(id), "post-%d", i);
        assert_int_equal(hc_serve_hot_read(hot, id, strlen(id)), 1000); /* all topic-hot */
        f.now_us += 50;                                                 /* 20 000 reads/s */
        if (i == 1000) {
            warm = heap_bytes();
        }
    }
    assert_int_equal(heap_bytes(), warm); /* the read path never allocates */
    hc_serve_hot_stats_t st = hc_serve_hot_stats(hot);
    assert_true(st.sampled <= 64);
    assert_true(st.posts <= 2 * 64); /* hot-set members + the topic list */
    assert_int_equal(st.promotions[HC_SERVE_HOT_TOPIC], 64);
    assert_true(st.unlisted > 0);
    hc_serve_hot_post_t *p = calloc(256, sizeof(*p));
    assert_non_null(p);
    size_t n = 0;
    assert_true(hc_serve_hot_list(hot, p, 256, &n) <= 2 * 64);
    free(p);
    hc_serve_hot_destroy(hot);
    printf("serve_hot at max 64: %zu bytes\n", after_new - before_new);
    before_new = heap_bytes();
    hot = new_hot(&f, 1000, 1024);
    printf("serve_hot at max 1024: %zu bytes\n", heap_bytes() - before_new);
    hc_serve_hot_destroy(hot);
}

static void a_topic_post_is_demoted_when_the_topic_cools_it(void **state)
{
    (void)state;
    fake_t f = {.now_us = 1000000, .topic_hot = "final"};
    hc_serve_hot_t *hot = new_hot(&f, 1000, 64);
    hc_serve_hot_set_topic(hot, fake_topic, &f);
    assert_int_equal(hc_serve_hot_read(hot, "final", 5), 1000);
    assert_int_equal(hc_serve_hot_read(hot, "other", 5), 20);
    hc_serve_hot_post_t p[2];
    size_t n = 0;
    assert_int_equal(hc_serve_hot_list(hot, p, 2, &n), 1);
    assert_int_equal(p[0].source, HC_SERVE_HOT_TOPIC);
    f.topic_hot = NULL;
    f.now_us += 1000000;
    hc_serve_hot_stats_t st = hc_serve_hot_stats(hot);
    assert_int_equal(st.demotions[HC_SERVE_HOT_TOPIC], 1);
    assert_int_equal(st.posts, 0);
    assert_int_equal(hc_serve_hot_read(hot, "final", 5), 20);
    hc_serve_hot_destroy(hot);
}

static void bad_options_are_refused(void **state)
{
    (void)state;
    fake_t f = {0};
    hc_serve_hot_opts_t o = opts_for(&f, 1000, 8);
    o.leave_rate = o.enter_rate;
    hc_serve_hot_t *hot = NULL;
    char errstr[256];
    assert_int_equal(hc_serve_hot_new(&o, &hot, errstr, sizeof(errstr)), HC_ERR_INVALID);
    assert_null(hot);
    o.leave_rate = 50;
    o.hot_ttl_ms = 10;
    assert_int_equal(hc_serve_hot_new(&o, &hot, errstr, sizeof(errstr)), HC_ERR_INVALID);
    o.hot_ttl_ms = 1000;
    o.max = HC_SERVE_HOT_MAX + 1;
    assert_int_equal(hc_serve_hot_new(&o, &hot, errstr, sizeof(errstr)), HC_ERR_INVALID);
    hc_serve_hot_destroy(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(read_storm_costs_one_store_read_per_hot_ttl),
        cmocka_unit_test(rate_around_the_thresholds_does_not_flap),
        cmocka_unit_test(many_distinct_posts_do_not_grow_the_sampler),
        cmocka_unit_test(a_topic_post_is_demoted_when_the_topic_cools_it),
        cmocka_unit_test(bad_options_are_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
