/* The best n of a stream (include/core/hotcount/topn.h). The heap keeps every parent no better
 * than its children (cmp(parent, child) >= 0), so the root is the worst item held. */
#include "hotcount/topn.h"

#include <stdlib.h>
#include <string.h>

static void *at(const hc_topn_t *t, size_t i)
{
    return (char *)t->items + i * t->size;
}

/* Swaps two items through a small buffer (no VLA: items may be a few hundred bytes). */
static void swap(const hc_topn_t *t, size_t i, size_t j)
{
    unsigned char buf[64];
    unsigned char *a = at(t, i), *b = at(t, j);
    for (size_t off = 0; off < t->size; off += sizeof(buf)) {
        size_t k = t->size - off < sizeof(buf) ? t->size - off : sizeof(buf);
        memcpy(buf, a + off, k);
        memcpy(a + off, b + off, k);
        memcpy(b + off, buf, k);
    }
}

void hc_topn_init(hc_topn_t *t, void *items, size_t size, size_t n, hc_topn_cmp_fn cmp)
{
    *t = (hc_topn_t){.items = items, .size = size, .n = n, .count = 0, .cmp = cmp};
}

void hc_topn_clear(hc_topn_t *t)
{
    t->count = 0;
}

bool hc_topn_is_full(const hc_topn_t *t)
{
    return t->count == t->n;
}

bool hc_topn_offer(hc_topn_t *t, const void *item)
{
    size_t i;
    size_t child;

    if (t->count < t->n) {
        i = t->count++;
        memcpy(at(t, i), item, t->size);
        while (i > 0 && t->cmp(at(t, (i - 1) / 2), at(t, i)) < 0) { /* parent better: up */
            swap(t, (i - 1) / 2, i);
            i = (i - 1) / 2;
        }
        return true;
    }
    if (t->n == 0 || t->cmp(item, at(t, 0)) >= 0) {
        return false; /* no better than the worst held */
    }
    memcpy(at(t, 0), item, t->size);
    for (i = 0; (child = 2 * i + 1) < t->count; i = child) {
        if (child + 1 < t->count && t->cmp(at(t, child + 1), at(t, child)) > 0) {
            child++; /* the worse child */
        }
        if (t->cmp(at(t, i), at(t, child)) >= 0) {
            break;
        }
        swap(t, i, child);
    }
    return true;
}

size_t hc_topn_sort(hc_topn_t *t)
{
    qsort(t->items, t->count, t->size, t->cmp);
    return t->count;
}
