/* Layer: core. The best n of a stream of items, holding only n: a heap over the caller's array
 * with the worst item held at its root, so an item that does not beat the worst costs one
 * comparison. The store's `top` over a scan of every count (hc_store_top_offer) and the hot
 * set's newcomers of a window (hotset.c) use it. Items are copied in (size bytes each); ties
 * never displace: an item is kept only when it ranks strictly before the worst held.
 *
 * Pure; one owner thread. */
#ifndef HOTCOUNT_TOPN_H
#define HOTCOUNT_TOPN_H

#include <stdbool.h>
#include <stddef.h>

/* < 0 when a ranks before (is better than) b, 0 when they tie, > 0 after: qsort's contract,
 * best first. */
typedef int (*hc_topn_cmp_fn)(const void *a, const void *b);

typedef struct hc_topn {
    void *items; /* borrowed: room for n items of size bytes; [0, count) held, in heap order */
    size_t size;
    size_t n;
    size_t count;
    hc_topn_cmp_fn cmp;
} hc_topn_t;

void hc_topn_init(hc_topn_t *t, void *items, size_t size, size_t n, hc_topn_cmp_fn cmp);

/* Forgets every item held (the array stays the caller's). */
void hc_topn_clear(hc_topn_t *t);

/* Whether n items are held (an offer must then beat the worst of them). */
bool hc_topn_is_full(const hc_topn_t *t);

/* Offers item: copied in when fewer than n are held, or in place of the worst held when it
 * ranks strictly before that one. Returns whether it was kept. */
bool hc_topn_offer(hc_topn_t *t, const void *item);

/* Sorts the held items best first (qsort with cmp: ties in no particular order) and returns how
 * many there are. The heap order is gone: hc_topn_clear before offering again. */
size_t hc_topn_sort(hc_topn_t *t);

#endif
