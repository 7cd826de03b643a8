/* Unit tests for the space-saving top-K and its hysteresis (src/core/hotkeys.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* cmocka.h needs the four headers above first. */
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hotcount/hotkeys.h"
#include "hotcount/zipf.h"

static void offer_str(hc_hotkeys_t *hk, const char *id, int times)
{
    for (int i = 0; i < times; i++) {
        hc_hotkeys_offer(hk, id, strlen(id));
    }
}

/* The reported entry for id, or NULL. */
static const hc_hotkey_t *find(const hc_hotkey_t *out, size_t n, const char *id, size_t len)
{
    for (size_t i = 0; i < n; i++) {
        if (out[i].post_id_len == len && memcmp(out[i].post_id, id, len) == 0) {
            return &out[i];
        }
    }
    return NULL;
}

static const hc_hotkey_t *find_str(const hc_hotkey_t *out, size_t n, const char *id)
{
    return find(out, n, id, strlen(id));
}

static const hc_hotkey_transition_t *find_transition(const hc_hotkeys_t *hk, const char *id)
{
    size_t n;
    const hc_hotkey_transition_t *tr = hc_hotkeys_transitions(hk, &n);
    for (size_t i = 0; i < n; i++) {
        if (tr[i].post_id_len == strlen(id) && memcmp(tr[i].post_id, id, tr[i].post_id_len) == 0) {
            return &tr[i];
        }
    }
    return NULL;
}

static size_t transition_count(const hc_hotkeys_t *hk)
{
    size_t n;
    hc_hotkeys_transitions(hk, &n);
    return n;
}

static void new_rejects_bad_arguments(void **state)
{
    (void)state;
    assert_null(hc_hotkeys_new(0, 100, 50));
    assert_null(hc_hotkeys_new(HC_HOTKEYS_MAX_K + 1, 100, 50));
    assert_null(hc_hotkeys_new(64, 100, 100)); /* leave must be below enter */
    assert_null(hc_hotkeys_new(64, 100, 150));
    assert_null(hc_hotkeys_new(64, 100, -1));
    hc_hotkeys_t *hk = hc_hotkeys_new(HC_HOTKEYS_MAX_K, 0, 0); /* hysteresis off */
    assert_non_null(hk);
    hc_hotkeys_destroy(hk);
    hc_hotkeys_destroy(NULL);
}

static void few_posts_are_counted_exactly_largest_first(void **state)
{
    (void)state;
    hc_hotkeys_t *hk = hc_hotkeys_new(8, 0, 0);
    hc_hotkey_t out[8];
    size_t n;
    assert_non_null(hk);
    /* interleaved, so sorting is the module's work */
    for (int round = 0; round < 50; round++) {
        offer_str(hk, "a", 1);
        if (round < 30) {
            offer_str(hk, "b", 1);
        }
        if (round < 40) {
            offer_str(hk, "c", 1);
        }
        if (round < 5) {
            offer_str(hk, "d", 1);
        }
    }
    assert_int_equal(hc_hotkeys_events(hk), 50 + 30 + 40 + 5);
    hc_hotkeys_window_end(hk, 500, out, 8, &n);
    assert_int_equal(n, 4);
    const char *order[] = {"a", "c", "b", "d"};
    const int64_t counts[] = {50, 40, 30, 5};
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(out[i].post_id_len, 1);
        assert_string_equal(out[i].post_id, order[i]);
        assert_int_equal(out[i].count, counts[i]);
        assert_int_equal(out[i].error, 0);
        assert_true(out[i].events_per_second == (double)counts[i] * 2); /* 500 ms window */
        assert_true(out[i].error_per_second == 0);
        assert_false(out[i].hot);
    }
    hc_hotkeys_destroy(hk);
}

static void window_end_respects_max_and_resets(void **state)
{
    (void)state;
    hc_hotkeys_t *hk = hc_hotkeys_new(16, 0, 0);
    hc_hotkey_t out[16];
    size_t n;
    char id[16];
    for (int i = 1; i <= 10; i++) {
        snprintf(id, sizeof(id), "post-%d", i);
        offer_str(hk, id, i);
    }
    hc_hotkeys_window_end(hk, 1000, out, 3, &n);
    assert_int_equal(n, 3);
    assert_string_equal(out[0].post_id, "post-10");
    assert_string_equal(out[1].post_id, "post-9");
    assert_string_equal(out[2].post_id, "post-8");
    assert_int_equal(hc_hotkeys_events(hk), 0);

    /* the next window starts empty */
    offer_str(hk, "post-1", 2);
    hc_hotkeys_window_end(hk, 1000, out, 16, &n);
    assert_int_equal(n, 1);
    assert_string_equal(out[0].post_id, "post-1");
    assert_int_equal(out[0].count, 2);

    hc_hotkeys_window_end(hk, 1000, NULL, 0, &n);
    assert_int_equal(n, 0);
    hc_hotkeys_destroy(hk);
}

static void zero_window_counts_as_one_ms(void **state)
{
    (void)state;
    hc_hotkeys_t *hk = hc_hotkeys_new(4, 0, 0);
    hc_hotkey_t out[4];
    size_t n;
    offer_str(hk, "x", 3);
    hc_hotkeys_window_end(hk, 0, out, 4, &n);
    assert_int_equal(n, 1);
    assert_true(out[0].events_per_second == 3000.0);
    hc_hotkeys_destroy(hk);
}

/* Space-saving's guarantees on a stream built to churn the counters: unique one-off posts
 * interleaved with a post whose frequency is just above N / k. */
static void post_above_n_over_k_is_always_reported(void **state)
{
    (void)state;
    const size_t k = 16;
    hc_hotkeys_t *hk = hc_hotkeys_new(k, 0, 0);
    hc_hotkey_t out[16];
    size_t n;
    char id[32];
    const int total = 16000;
    const int heavy = total / (int)k + 1; /* > N / k */
    int sent_heavy = 0;
    for (int i = 0; i < total; i++) {
        /* the heavy post at evenly spread positions, last occurrence near the start */
        if (sent_heavy < heavy && i % (total / heavy) == 0) {
            offer_str(hk, "heavy", 1);
            sent_heavy++;
        } else {
            snprintf(id, sizeof(id), "one-off-%d", i);
            offer_str(hk, id, 1);
        }
    }
    assert_int_equal(sent_heavy, heavy);
    hc_hotkeys_window_end(hk, 1000, out, k, &n);
    const hc_hotkey_t *h = find_str(out, n, "heavy");
    assert_non_null(h);
    assert_true(h->count >= heavy);
    assert_true(h->count - h->error <= heavy);
    hc_hotkeys_destroy(hk);
}

/* Differential check against exact counts on seeded Zipf streams: counts never underestimate,
 * count - error never overestimates, every post above N / k is reported, the counts sum to N
 * and the smallest counter is at most N / k. weighted: the stream is first summed per post,
 * the way stage 1's table does, and each post offered once with hc_hotkeys_offer_n, in order
 * of first appearance. */
static void check_zipf_streams(bool weighted)
{
    const size_t ks[] = {1, 8, 64, 256};
    const double skews[] = {0.8, 1.1, 1.5};
    const uint64_t posts = 20000;
    const int events = 200000;
    int64_t *exact = calloc(posts + 1, sizeof(*exact));
    uint64_t *order = calloc(posts, sizeof(*order));
    hc_hotkey_t *out = calloc(256, sizeof(*out));
    assert_non_null(exact);
    assert_non_null(order);
    assert_non_null(out);
    for (size_t ki = 0; ki < sizeof(ks) / sizeof(ks[0]); ki++) {
        for (size_t si = 0; si < sizeof(skews) / sizeof(skews[0]); si++) {
            size_t k = ks[ki];
            hc_hotkeys_t *hk = hc_hotkeys_new(k, 0, 0);
            hc_rng_t rng;
            hc_zipf_t zipf;
            char id[32];
            size_t n;
            assert_non_null(hk);
            hc_rng_init(&rng, 1000 + ki * 10 + si);
            hc_zipf_init(&zipf, posts, skews[si]);
            memset(exact, 0, (posts + 1) * sizeof(*exact));
            size_t order_n = 0;
            for (int i = 0; i < events; i++) {
                uint64_t rank = hc_zipf_sample(&zipf, &rng);
                int len = snprintf(id, sizeof(id), "%llu", (unsigned long long)rank);
                if (exact[rank]++ == 0) {
                    order[order_n++] = rank;
                }
                if (!weighted) {
                    hc_hotkeys_offer(hk, id, (size_t)len);
                }
            }
            for (size_t i = 0; weighted && i < order_n; i++) {
                int len = snprintf(id, sizeof(id), "%llu", (unsigned long long)order[i]);
                hc_hotkeys_offer_n(hk, id, (size_t)len, exact[order[i]]);
            }
            assert_int_equal(hc_hotkeys_events(hk), events);
            hc_hotkeys_window_end(hk, 1000, out, k, &n);
            assert_true(n <= k);
            int64_t sum = 0;
            for (size_t i = 0; i < n; i++) {
                uint64_t rank = strtoull(out[i].post_id, NULL, 10);
                assert_true(rank >= 1 && rank <= posts);
                assert_true(out[i].count >= exact[rank]);
                assert_true(out[i].count - out[i].error <= exact[rank]);
                assert_true(out[i].error >= 0);
                if (i > 0) {
                    assert_true(out[i - 1].count >= out[i].count);
                }
                /* the index never loses a post: no post holds two counters */
                for (size_t j = 0; j < i; j++) {
                    assert_false(out[j].post_id_len == out[i].post_id_len &&
                                 memcmp(out[j].post_id, out[i].post_id, out[i].post_id_len) == 0);
                }
                sum += out[i].count;
            }
            assert_int_equal(sum, events);
            if (n == k) {
                assert_true(out[n - 1].count * (int64_t)k <= events);
            }
            for (uint64_t r = 1; r <= posts; r++) {
                if (exact[r] * (int64_t)k > events) {
                    snprintf(id, sizeof(id), "%llu", (unsigned long long)r);
                    assert_non_null(find_str(out, n, id));
                }
            }
            /* with a skewed stream and k >= 8 the very top is exact enough to rank first */
            if (k >= 8 && skews[si] >= 1.1) {
                assert_string_equal(out[0].post_id, "1");
            }
            hc_hotkeys_destroy(hk);
        }
    }
    free(out);
    free(order);
    free(exact);
}

static void matches_exact_counts_on_zipf_streams(void **state)
{
    (void)state;
    check_zipf_streams(false);
}

static void weighted_offers_keep_the_bounds(void **state)
{
    (void)state;
    check_zipf_streams(true);
}

/* A weighted offer is the same as as many offers in a row: here the counts are exact (fewer
 * posts than counters) and every jump through the runs must keep them sorted. */
static void offer_n_equals_repeated_offers(void **state)
{
    (void)state;
    hc_hotkeys_t *a = hc_hotkeys_new(8, 0, 0);
    hc_hotkeys_t *b = hc_hotkeys_new(8, 0, 0);
    hc_hotkey_t oa[8], ob[8];
    size_t na, nb;
    const char *ids[] = {"p1", "p2", "p3", "p4", "p5"};
    const int64_t w[] = {3, 1, 7, 3, 2, 40, 1, 5, 9, 2};
    assert_non_null(a);
    assert_non_null(b);
    for (size_t i = 0; i < sizeof(w) / sizeof(w[0]); i++) {
        const char *id = ids[(i * 3) % 5];
        hc_hotkeys_offer_n(a, id, strlen(id), w[i]);
        offer_str(b, id, (int)w[i]);
    }
    hc_hotkeys_offer_n(a, "p1", 2, 0); /* ignored */
    hc_hotkeys_window_end(a, 1000, oa, 8, &na);
    hc_hotkeys_window_end(b, 1000, ob, 8, &nb);
    assert_int_equal(na, nb);
    for (size_t i = 0; i < na; i++) {
        assert_int_equal(oa[i].count, ob[i].count);
        assert_int_equal(oa[i].error, 0);
        assert_non_null(find_str(ob, nb, oa[i].post_id));
        assert_int_equal(find_str(ob, nb, oa[i].post_id)->count, oa[i].count);
    }
    hc_hotkeys_destroy(a);
    hc_hotkeys_destroy(b);
}

static void keys_are_compared_as_bytes(void **state)
{
    (void)state;
    hc_hotkeys_t *hk = hc_hotkeys_new(8, 0, 0);
    hc_hotkey_t out[8];
    size_t n;
    char long_a[HC_POST_ID_MAX];
    char long_b[HC_POST_ID_MAX];
    char too_long[HC_POST_ID_MAX + 1];
    memset(long_a, 'x', sizeof(long_a));
    memcpy(long_b, long_a, sizeof(long_b));
    long_b[HC_POST_ID_MAX - 1] = 'y'; /* differs only in the last byte */
    memset(too_long, 'z', sizeof(too_long));

    hc_hotkeys_offer(hk, "a\0b", 3);
    hc_hotkeys_offer(hk, "a\0c", 3);
    hc_hotkeys_offer(hk, "a", 1);
    hc_hotkeys_offer(hk, long_a, sizeof(long_a));
    hc_hotkeys_offer(hk, long_a, sizeof(long_a));
    hc_hotkeys_offer(hk, long_b, sizeof(long_b));
    hc_hotkeys_offer(hk, too_long, sizeof(too_long)); /* ignored */
    hc_hotkeys_offer(hk, "", 0);
    assert_int_equal(hc_hotkeys_events(hk), 7);
    hc_hotkeys_window_end(hk, 1000, out, 8, &n);
    assert_int_equal(n, 6);
    assert_int_equal(find(out, n, "a\0b", 3)->count, 1);
    assert_int_equal(find(out, n, "a\0c", 3)->count, 1);
    assert_int_equal(find(out, n, "a", 1)->count, 1);
    assert_int_equal(find(out, n, long_a, sizeof(long_a))->count, 2);
    assert_int_equal(find(out, n, long_b, sizeof(long_b))->count, 1);
    assert_int_equal(find(out, n, "", 0)->count, 1);
    hc_hotkeys_destroy(hk);
}

/* Enter at >= enter_rate, stay hot between the thresholds, leave below leave_rate, and need
 * enter_rate again to come back. */
static void hysteresis_enters_stays_and_leaves(void **state)
{
    (void)state;
    hc_hotkeys_t *hk = hc_hotkeys_new(16, 100, 50);
    hc_hotkey_t out[16];
    size_t n;
    const hc_hotkey_transition_t *tr;

    offer_str(hk, "viral", 150);
    offer_str(hk, "calm", 20);
    hc_hotkeys_window_end(hk, 1000, out, 16, &n);
    assert_int_equal(transition_count(hk), 1);
    tr = find_transition(hk, "viral");
    assert_non_null(tr);
    assert_int_equal(tr->change, HC_HOTKEY_ENTER);
    assert_true(tr->events_per_second == 150);
    assert_true(find_str(out, n, "viral")->hot);
    assert_false(find_str(out, n, "calm")->hot);
    assert_true(hc_hotkeys_is_hot(hk, "viral", 5));

    offer_str(hk, "viral", 80); /* between leave and enter: stays hot, no line */
    hc_hotkeys_window_end(hk, 1000, out, 16, &n);
    assert_int_equal(transition_count(hk), 0);
    assert_true(find_str(out, n, "viral")->hot);

    offer_str(hk, "viral", 50); /* exactly leave_rate: not below it */
    hc_hotkeys_window_end(hk, 1000, out, 16, &n);
    assert_int_equal(transition_count(hk), 0);

    offer_str(hk, "viral", 49);
    hc_hotkeys_window_end(hk, 1000, out, 16, &n);
    assert_int_equal(transition_count(hk), 1);
    tr = find_transition(hk, "viral");
    assert_int_equal(tr->change, HC_HOTKEY_LEAVE);
    assert_true(tr->events_per_second == 49);
    assert_false(tr->not_monitored);
    assert_false(hc_hotkeys_is_hot(hk, "viral", 5));

    offer_str(hk, "viral", 99); /* below enter: not back yet */
    hc_hotkeys_window_end(hk, 1000, out, 16, &n);
    assert_int_equal(transition_count(hk), 0);

    offer_str(hk, "viral", 100); /* exactly enter_rate */
    hc_hotkeys_window_end(hk, 1000, out, 16, &n);
    assert_int_equal(transition_count(hk), 1);
    assert_int_equal(find_transition(hk, "viral")->change, HC_HOTKEY_ENTER);
    hc_hotkeys_destroy(hk);
}

static void rates_scale_with_the_window_length(void **state)
{
    (void)state;
    hc_hotkeys_t *hk = hc_hotkeys_new(16, 100, 50);
    hc_hotkey_t out[16];
    size_t n;
    offer_str(hk, "p", 60); /* 60 in 500 ms = 120/s */
    hc_hotkeys_window_end(hk, 500, out, 16, &n);
    assert_int_equal(transition_count(hk), 1);
    assert_true(find_transition(hk, "p")->events_per_second == 120);
    offer_str(hk, "p", 60); /* 60 in 2 s = 30/s */
    hc_hotkeys_window_end(hk, 2000, out, 16, &n);
    assert_int_equal(find_transition(hk, "p")->change, HC_HOTKEY_LEAVE);
    assert_true(find_transition(hk, "p")->events_per_second == 30);
    hc_hotkeys_destroy(hk);
}

static void hot_post_that_vanishes_leaves_as_not_monitored(void **state)
{
    (void)state;
    hc_hotkeys_t *hk = hc_hotkeys_new(4, 100, 50);
    hc_hotkey_t out[4];
    size_t n;
    offer_str(hk, "a", 200);
    offer_str(hk, "b", 300);
    hc_hotkeys_window_end(hk, 1000, out, 4, &n);
    assert_int_equal(transition_count(hk), 2);
    /* enters come largest first */
    size_t nt;
    const hc_hotkey_transition_t *tr = hc_hotkeys_transitions(hk, &nt);
    assert_string_equal(tr[0].post_id, "b");
    assert_string_equal(tr[1].post_id, "a");

    offer_str(hk, "b", 300); /* a is silent */
    hc_hotkeys_window_end(hk, 1000, out, 4, &n);
    assert_int_equal(transition_count(hk), 1);
    const hc_hotkey_transition_t *left = find_transition(hk, "a");
    assert_non_null(left);
    assert_int_equal(left->change, HC_HOTKEY_LEAVE);
    assert_true(left->not_monitored);
    assert_true(left->events_per_second == 0); /* the summary was not full: the bound is 0 */
    assert_true(hc_hotkeys_is_hot(hk, "b", 1));
    assert_false(hc_hotkeys_is_hot(hk, "a", 1));
    hc_hotkeys_destroy(hk);
}

/* A post that takes over a large counter inherits its count as error: its estimate may pass
 * enter_rate, but it enters only when its guaranteed count does. */
static void entering_needs_the_guaranteed_rate(void **state)
{
    (void)state;
    hc_hotkeys_t *hk = hc_hotkeys_new(2, 100, 50);
    hc_hotkey_t out[2];
    size_t n;
    offer_str(hk, "x", 100);
    offer_str(hk, "y", 120);
    offer_str(hk, "z", 1); /* evicts x: count 101, error 100 */
    hc_hotkeys_window_end(hk, 1000, out, 2, &n);
    assert_int_equal(n, 2);
    const hc_hotkey_t *z = find_str(out, n, "z");
    assert_non_null(z);
    assert_int_equal(z->count, 101);
    assert_int_equal(z->error, 100);
    assert_false(z->hot);
    assert_null(find_transition(hk, "z"));
    assert_non_null(find_transition(hk, "y"));
    assert_int_equal(transition_count(hk), 1);
    hc_hotkeys_destroy(hk);
}

static void reset_drops_the_window_and_keeps_the_hot_set(void **state)
{
    (void)state;
    hc_hotkeys_t *hk = hc_hotkeys_new(8, 100, 50);
    hc_hotkey_t out[8];
    size_t n;
    offer_str(hk, "p", 150);
    hc_hotkeys_window_end(hk, 1000, out, 8, &n);
    assert_true(hc_hotkeys_is_hot(hk, "p", 1));

    offer_str(hk, "q", 500); /* an aborted window: its events come again */
    hc_hotkeys_reset(hk);
    assert_int_equal(hc_hotkeys_events(hk), 0);
    assert_int_equal(transition_count(hk), 0);
    assert_true(hc_hotkeys_is_hot(hk, "p", 1));

    offer_str(hk, "p", 120);
    hc_hotkeys_window_end(hk, 1000, out, 8, &n);
    assert_int_equal(n, 1);
    assert_int_equal(out[0].count, 120);
    assert_int_equal(transition_count(hk), 0);
    hc_hotkeys_destroy(hk);
}

static void hysteresis_off_reports_no_transitions(void **state)
{
    (void)state;
    hc_hotkeys_t *hk = hc_hotkeys_new(8, 0, 0);
    hc_hotkey_t out[8];
    size_t n;
    offer_str(hk, "p", 100000);
    hc_hotkeys_window_end(hk, 1000, out, 8, &n);
    assert_int_equal(transition_count(hk), 0);
    assert_false(out[0].hot);
    assert_false(hc_hotkeys_is_hot(hk, "p", 1));
    hc_hotkeys_destroy(hk);
}

/* Many windows of churn through one instance: the index and run structure stay consistent
 * (exact counts while distinct posts <= k, whatever came before). */
static void survives_many_windows_of_churn(void **state)
{
    (void)state;
    hc_hotkeys_t *hk = hc_hotkeys_new(32, 1000, 500);
    hc_hotkey_t out[32];
    hc_rng_t rng;
    char id[32];
    size_t n;
    hc_rng_init(&rng, 7);
    for (int w = 0; w < 50; w++) {
        for (int i = 0; i < 5000; i++) {
            snprintf(id, sizeof(id), "c%llu", (unsigned long long)hc_rng_below(&rng, 1000));
            offer_str(hk, id, 1);
        }
        hc_hotkeys_window_end(hk, 1000, out, 32, &n);
        assert_int_equal(n, 32);
        /* then a window with few posts: must be exact */
        for (int p = 0; p < 10; p++) {
            snprintf(id, sizeof(id), "few%d", p);
            offer_str(hk, id, p + 1 + w);
        }
        hc_hotkeys_window_end(hk, 1000, out, 32, &n);
        assert_int_equal(n, 10);
        for (int p = 0; p < 10; p++) {
            snprintf(id, sizeof(id), "few%d", p);
            const hc_hotkey_t *ent = find_str(out, n, id);
            assert_non_null(ent);
            assert_int_equal(ent->count, p + 1 + w);
            assert_int_equal(ent->error, 0);
        }
    }
    hc_hotkeys_destroy(hk);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(new_rejects_bad_arguments),
        cmocka_unit_test(few_posts_are_counted_exactly_largest_first),
        cmocka_unit_test(window_end_respects_max_and_resets),
        cmocka_unit_test(zero_window_counts_as_one_ms),
        cmocka_unit_test(post_above_n_over_k_is_always_reported),
        cmocka_unit_test(matches_exact_counts_on_zipf_streams),
        cmocka_unit_test(weighted_offers_keep_the_bounds),
        cmocka_unit_test(offer_n_equals_repeated_offers),
        cmocka_unit_test(keys_are_compared_as_bytes),
        cmocka_unit_test(hysteresis_enters_stays_and_leaves),
        cmocka_unit_test(rates_scale_with_the_window_length),
        cmocka_unit_test(hot_post_that_vanishes_leaves_as_not_monitored),
        cmocka_unit_test(entering_needs_the_guaranteed_rate),
        cmocka_unit_test(reset_drops_the_window_and_keeps_the_hot_set),
        cmocka_unit_test(hysteresis_off_reports_no_transitions),
        cmocka_unit_test(survives_many_windows_of_churn),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
