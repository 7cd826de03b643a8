/* The top-N heap's one home (src/core/topn.c) against the two heaps it replaced, copied below as
 * they were: the store toolkit's hc_store_top (rows by likes, then post id) and the hot set's
 * newcomer heap (by events, ties never displacing). On random streams full of ties, the heap
 * array must be the same after every offer, and so must the sorted result, so `top` and the hot
 * set keep and drop exactly what they did. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "hotcount/topn.h"

/* ---- store rows (hc_store_row_t's shape and hc_store_row_rank) ---- */
typedef struct row {
    char post_id[8];
    size_t post_id_len;
    int64_t likes;
} row_t;

static int row_rank(const row_t *a, const row_t *b)
{
    if (a->likes != b->likes) {
        return a->likes > b->likes ? -1 : 1;
    }
    size_t n = a->post_id_len < b->post_id_len ? a->post_id_len : b->post_id_len;
    int c = memcmp(a->post_id, b->post_id, n);
    return c ? c : (a->post_id_len > b->post_id_len) - (a->post_id_len < b->post_id_len);
}

static int row_rank_qsort(const void *a, const void *b)
{
    return row_rank(a, b);
}

/* src/store/store_util.c's heap, as it was */
typedef struct old_top {
    row_t *rows;
    size_t n, count;
} old_top_t;

static void row_swap(row_t *a, row_t *b)
{
    row_t tmp = *a;
    *a = *b;
    *b = tmp;
}

static void old_top_offer(old_top_t *h, const row_t *cand)
{
    size_t i, child;
    if (h->count < h->n) {
        i = h->count++;
        h->rows[i] = *cand;
        while (i > 0 && row_rank(&h->rows[(i - 1) / 2], &h->rows[i]) < 0) {
            row_swap(&h->rows[(i - 1) / 2], &h->rows[i]);
            i = (i - 1) / 2;
        }
        return;
    }
    if (h->n == 0 || row_rank(cand, &h->rows[0]) >= 0) {
        return;
    }
    h->rows[0] = *cand;
    for (i = 0; (child = 2 * i + 1) < h->count; i = child) {
        if (child + 1 < h->count && row_rank(&h->rows[child + 1], &h->rows[child]) > 0) {
            child++;
        }
        if (row_rank(&h->rows[i], &h->rows[child]) >= 0) {
            break;
        }
        row_swap(&h->rows[i], &h->rows[child]);
    }
}

/* ---- hot-set newcomers (cand_t's shape) ---- */
typedef struct cand {
    uint32_t hash;
    uint16_t len;
    int64_t events;
    char key[200]; /* several of topn's 64-byte swap chunks */
} cand_t;

static int by_events_desc(const void *a, const void *b)
{
    const cand_t *x = a, *y = b;
    return x->events > y->events ? -1 : x->events < y->events;
}

/* src/core/hotset.c's heap, as it was */
static void heap_sift_down(cand_t *heap, size_t n, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && heap[l].events < heap[m].events) {
            m = l;
        }
        if (r < n && heap[r].events < heap[m].events) {
            m = r;
        }
        if (m == i) {
            return;
        }
        cand_t t = heap[i];
        heap[i] = heap[m];
        heap[m] = t;
        i = m;
    }
}

static void heap_sift_up(cand_t *heap, size_t i)
{
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (heap[p].events <= heap[i].events) {
            return;
        }
        cand_t t = heap[i];
        heap[i] = heap[p];
        heap[p] = t;
        i = p;
    }
}

/* returns whether the heap was full (the hot set's dropped count) */
static int old_hotset_offer(cand_t *heap, size_t *nc, size_t max, const cand_t *in)
{
    if (*nc < max) {
        heap[(*nc)++] = *in;
        heap_sift_up(heap, *nc - 1);
        return 0;
    }
    if (in->events > heap[0].events) {
        heap[0] = *in;
        heap_sift_down(heap, *nc, 0);
    }
    return 1;
}

/* mutant: ties displacing the worst (>= instead of >), the better child taken on the way down,
 * a swap that copies only its first chunk */
static void store_rows_as_before(void **state)
{
    (void)state;
    srand(28);
    for (int round = 0; round < 3000; round++) {
        size_t n = (size_t)(rand() % 12);
        row_t old_rows[12], new_rows[12];
        memset(old_rows, 0, sizeof(old_rows));
        memset(new_rows, 0, sizeof(new_rows));
        old_top_t old = {old_rows, n, 0};
        hc_topn_t t;
        hc_topn_init(&t, new_rows, sizeof(row_t), n, row_rank_qsort);
        for (int k = rand() % 60; k > 0; k--) {
            row_t r;
            memset(&r, 0, sizeof(r));
            r.likes = rand() % 6 - 1;
            r.post_id_len = 1 + (size_t)(rand() % 2);
            r.post_id[0] = (char)('a' + rand() % 3);
            r.post_id[1] = 'x';
            old_top_offer(&old, &r);
            hc_topn_offer(&t, &r);
            assert_int_equal(t.count, old.count);
            assert_memory_equal(new_rows, old_rows, sizeof(row_t) * old.count);
        }
        qsort(old_rows, old.count, sizeof(row_t), row_rank_qsort);
        assert_int_equal(hc_topn_sort(&t), old.count);
        assert_memory_equal(new_rows, old_rows, sizeof(row_t) * old.count);
    }
}

static void hotset_newcomers_as_before(void **state)
{
    (void)state;
    srand(29);
    static cand_t old_heap[16], new_heap[16];
    for (int round = 0; round < 3000; round++) {
        size_t max = 1 + (size_t)(rand() % 16);
        size_t nc = 0;
        long old_dropped = 0, new_dropped = 0;
        memset(old_heap, 0, sizeof(old_heap));
        memset(new_heap, 0, sizeof(new_heap));
        hc_topn_t t;
        hc_topn_init(&t, new_heap, sizeof(cand_t), max, by_events_desc);
        for (int k = rand() % 80; k > 0; k--) {
            cand_t c;
            memset(&c, 0, sizeof(c));
            c.events = 1 + rand() % 5;
            c.hash = (uint32_t)k;
            c.len = (uint16_t)(k % 200);
            memset(c.key, 'a' + k % 26, sizeof(c.key)); /* every chunk differs per item */
            old_dropped += old_hotset_offer(old_heap, &nc, max, &c);
            new_dropped += hc_topn_is_full(&t);
            hc_topn_offer(&t, &c);
            assert_int_equal(t.count, nc);
            assert_memory_equal(new_heap, old_heap, sizeof(cand_t) * nc);
        }
        assert_int_equal(new_dropped, old_dropped);
    }
}

/* mutant: n == 0 taking an item, or the best dropped */
static void the_best_n_are_kept(void **state)
{
    (void)state;
    int64_t none[1];
    hc_topn_t t;
    hc_topn_init(&t, none, sizeof(int64_t), 0, by_events_desc);
    assert_true(hc_topn_is_full(&t));
    cand_t c = {.events = 5};
    assert_false(hc_topn_offer(&t, &c));
    static cand_t items[3];
    hc_topn_init(&t, items, sizeof(cand_t), 3, by_events_desc);
    static const int64_t stream[] = {4, 9, 1, 7, 3, 9, 2, 8};
    for (size_t i = 0; i < sizeof(stream) / sizeof(stream[0]); i++) {
        c.events = stream[i];
        hc_topn_offer(&t, &c);
    }
    assert_int_equal(hc_topn_sort(&t), 3);
    assert_int_equal(items[0].events, 9);
    assert_int_equal(items[1].events, 9);
    assert_int_equal(items[2].events, 8);
    hc_topn_clear(&t);
    assert_int_equal(t.count, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(store_rows_as_before),
        cmocka_unit_test(hotset_newcomers_as_before),
        cmocka_unit_test(the_best_n_are_kept),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
