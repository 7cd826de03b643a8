/* The backends' shared toolkit (store_util.h). */
#include "store_util.h"

#include <stdlib.h>
#include <string.h>

#include "hotcount/percent.h"
#include "hotcount/siphash.h"

int hc_store_post_id_cmp(const char *a, size_t a_len, const char *b, size_t b_len)
{
    int c = memcmp(a, b, a_len < b_len ? a_len : b_len);

    if (c != 0) {
        return c;
    }
    return (a_len > b_len) - (a_len < b_len);
}

int hc_store_delta_cmp(const void *a, const void *b)
{
    const hc_store_delta_t *x = a;
    const hc_store_delta_t *y = b;

    return hc_store_post_id_cmp(x->post_id, x->post_id_len, y->post_id, y->post_id_len);
}

int hc_store_offset_cmp(const void *a, const void *b)
{
    const hc_store_offset_t *x = a;
    const hc_store_offset_t *y = b;

    return (x->partition > y->partition) - (x->partition < y->partition);
}

bool hc_store_deltas_merge(hc_store_delta_t *d, size_t count, size_t *count_out, size_t *bad_out)
{
    size_t n = 0;

    *count_out = 0;
    if (count == 0) {
        return true;
    }
    qsort(d, count, sizeof(*d), hc_store_delta_cmp);
    for (size_t i = 0; i < count; i++) {
        if (n > 0 && hc_store_delta_cmp(&d[n - 1], &d[i]) == 0) {
            if (__builtin_add_overflow(d[n - 1].delta, d[i].delta, &d[n - 1].delta)) {
                *bad_out = i;
                return false;
            }
            continue;
        }
        d[n++] = d[i];
    }
    *count_out = n;
    return true;
}

int hc_store_row_rank(const hc_store_row_t *a, const hc_store_row_t *b)
{
    if (a->likes != b->likes) {
        return a->likes > b->likes ? -1 : 1;
    }
    return hc_store_post_id_cmp(a->post_id, a->post_id_len, b->post_id, b->post_id_len);
}

static int row_rank_qsort(const void *a, const void *b)
{
    return hc_store_row_rank(a, b);
}

void hc_store_top_init(hc_store_top_t *top, hc_store_row_t *rows, size_t n)
{
    hc_topn_init(&top->heap, rows, sizeof(*rows), n, row_rank_qsort);
}

bool hc_store_top_offer(const char *post_id, size_t post_id_len, int64_t likes, void *opaque)
{
    hc_store_top_t *h = opaque;
    hc_store_row_t cand;

    cand.likes = likes;
    cand.post_id_len = post_id_len;
    memcpy(cand.post_id, post_id, post_id_len);
    cand.post_id[post_id_len] = '\0';
    hc_topn_offer(&h->heap, &cand); /* a row ranking after the current top n is let go */
    return true;
}

size_t hc_store_top_finish(hc_store_top_t *top)
{
    return hc_topn_sort(&top->heap);
}

uint64_t hc_store_id_hash(const char *id, size_t len)
{
    hc_hash_key_t key = hc_hash_process_key();
    uint64_t hash = hc_siphash13(&key, id, len);

    return hash == 0 ? 1 : hash;
}

static void seen_place(hc_store_seen_slot_t *slots, size_t cap, const hc_store_seen_slot_t *slot)
{
    size_t i = (size_t)slot->hash & (cap - 1);

    while (slots[i].hash != 0) {
        i = (i + 1) & (cap - 1);
    }
    slots[i] = *slot;
}

bool hc_store_seen_add(hc_store_seen_t *s, const char *id, size_t len, bool *fresh)
{
    /* Keyed: the ids are whatever producers and writers to likes.partials chose, and with an
     * unkeyed hash (FNV-1a 64 before issue 25, item 6) ids sharing their low bits are computed
     * offline and make every add probe the whole run: quadratic, under serve's store lock. */
    uint64_t hash = hc_store_id_hash(id, len);
    size_t i;

    /* At most half full, so that probes stay short. */
    if ((s->count + 1) * 2 > s->cap) {
        size_t cap = s->cap == 0 ? 1024 : s->cap * 2;
        hc_store_seen_slot_t *slots = calloc(cap, sizeof(*slots));

        if (slots == NULL) {
            return false;
        }
        for (i = 0; i < s->cap; i++) {
            if (s->slots[i].hash != 0) {
                seen_place(slots, cap, &s->slots[i]);
            }
        }
        free(s->slots);
        s->slots = slots;
        s->cap = cap;
    }
    for (i = (size_t)hash & (s->cap - 1); s->slots[i].hash != 0; i = (i + 1) & (s->cap - 1)) {
        s->probes++;
        if (s->slots[i].hash == hash && s->slots[i].len == len &&
            memcmp(s->arena + s->slots[i].off, id, len) == 0) {
            *fresh = false;
            return true;
        }
    }
    if (s->size - s->used < len) {
        size_t size = s->size == 0 ? 65536 : s->size;
        char *arena;

        while (size - s->used < len) {
            size *= 2;
        }
        arena = realloc(s->arena, size);
        if (arena == NULL) {
            return false;
        }
        s->arena = arena;
        s->size = size;
    }
    memcpy(s->arena + s->used, id, len);
    s->slots[i] = (hc_store_seen_slot_t){.hash = hash, .off = s->used, .len = len};
    s->used += len;
    s->count++;
    *fresh = true;
    return true;
}

void hc_store_seen_fini(hc_store_seen_t *s)
{
    free(s->slots);
    free(s->arena);
    memset(s, 0, sizeof(*s));
}

char *hc_store_percent_decode(const char *p, size_t len, bool *bad)
{
    char *out = malloc(len + 1);
    size_t n = 0;

    if (out == NULL) {
        return NULL;
    }
    /* %00 would cut the C string short; the result is never longer than p */
    if (!hc_percent_decode(p, len, HC_PCT_NO_NUL, out, len, &n)) {
        *bad = true;
        free(out);
        return NULL;
    }
    out[n] = '\0';
    return out;
}
