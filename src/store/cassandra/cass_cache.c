/* The Cassandra store's count cache (docs/CASSANDRA.md, "One apply"): per post this handle wrote
 * since it last learned its claims, the absolute count and the write timestamp it used. Valid
 * exactly as long as the handle's known claims are (cass_known_clear empties it): while this
 * handle's claims keep landing, no one else wrote those posts (a post lives on one partials
 * partition, and another writer would have had to claim it first), so R1 can skip their reads.
 * Open addressing over hc_store_id_hash (keyed: post ids are untrusted), ids in one arena;
 * bounded by CASS_CACHE_MAX posts, emptied whole when full (the next batch reads again). */
#include <stdlib.h>
#include <string.h>

#include "cassandra_impl.h"
#include "store_util.h"

#define CASS_CACHE_MAX (1u << 20)

void cass_cache_clear(cass_cache_t *c)
{
    free(c->slots);
    free(c->arena);
    memset(c, 0, sizeof(*c));
}

static cass_cache_slot_t *find(const cass_cache_t *c, uint64_t h, const char *id, size_t len)
{
    size_t mask = c->cap - 1;

    for (size_t i = (size_t)h & mask;; i = (i + 1) & mask) {
        cass_cache_slot_t *s = &c->slots[i];

        if (s->hash == 0 ||
            (s->hash == h && s->len == len && memcmp(c->arena + s->off, id, len) == 0)) {
            return s;
        }
    }
}

const cass_cache_slot_t *cass_cache_get(const cass_cache_t *c, const char *id, size_t len)
{
    const cass_cache_slot_t *s;

    if (c->count == 0) {
        return NULL;
    }
    s = find(c, hc_store_id_hash(id, len), id, len);
    return s->hash != 0 ? s : NULL;
}

static bool grow(cass_cache_t *c)
{
    size_t cap = c->cap == 0 ? 1024 : c->cap * 2;
    cass_cache_slot_t *slots = calloc(cap, sizeof(*slots));
    cass_cache_t bigger = {.slots = slots,
                           .cap = cap,
                           .count = c->count,
                           .arena = c->arena,
                           .used = c->used,
                           .size = c->size};

    if (slots == NULL) {
        return false;
    }
    for (size_t i = 0; i < c->cap; i++) {
        if (c->slots[i].hash != 0) {
            *find(&bigger, c->slots[i].hash, c->arena + c->slots[i].off, c->slots[i].len) =
                c->slots[i];
        }
    }
    free(c->slots);
    *c = bigger;
    return true;
}

void cass_cache_put(cass_cache_t *c, const char *id, size_t len, int64_t count, int64_t ts)
{
    uint64_t h = hc_store_id_hash(id, len);
    cass_cache_slot_t *s;

    if (c->count >= CASS_CACHE_MAX) {
        cass_cache_clear(c); /* full: start over; the next batch reads its posts again */
    }
    if ((c->count + 1) * 2 > c->cap && !grow(c)) {
        cass_cache_clear(c); /* out of memory: a cache is optional */
        return;
    }
    s = find(c, h, id, len);
    if (s->hash == 0) {
        if (c->used + len > c->size) {
            size_t size = c->size == 0 ? 65536 : c->size * 2;
            char *arena;

            while (size < c->used + len) {
                size *= 2;
            }
            arena = realloc(c->arena, size);
            if (arena == NULL) {
                cass_cache_clear(c);
                return;
            }
            c->arena = arena;
            c->size = size;
        }
        memcpy(c->arena + c->used, id, len);
        *s = (cass_cache_slot_t){.hash = h, .off = c->used, .len = len};
        c->used += len;
        c->count++;
    }
    s->count = count;
    s->ts = ts;
}
