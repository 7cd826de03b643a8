/* Per-post sums for one window (contract in include/core/hotcount/table.h).
 *
 * Layout, chosen for the per-event hot path:
 *   entries  dense array of hc_table_entry_t in insertion order (what flush walks);
 *   slots    power-of-two open-addressing index, 8 bytes each: {hash, entry index + 1}, so a
 *            probe touches one small cache line and compares the hash before any key bytes;
 *   arena    one char buffer holding every key back to back in insertion order.
 *
 * Capacity grows by doubling up to max_keys, and the slot array always has at least twice as
 * many slots as the entry array has room for, so the load factor never exceeds 50% and a probe
 * always reaches an empty slot. Nothing ever shrinks: hc_table_clear keeps the capacity the
 * previous window needed, so steady-state windows do not allocate at all.
 *
 * The three arrays are whole pages from the kernel (mmap) on Linux, grown with mremap, which
 * moves pages instead of copying them, and given back with munmap. Through malloc a growth
 * step copied the array and left the old one free inside the allocator, whose free pages stay
 * resident for a while (jemalloc's decay): by the arrays' sizes, a table that grew to 10^6
 * keys left about as much memory again behind it (docs/OPERATIONS.md "Memory"). Under the address
 * sanitizer they come from malloc, whose overflows it checks. */
#include "hotcount/table.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#if defined(__linux__) && !defined(__SANITIZE_ADDRESS__)
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TABLE_MALLOC 1
#endif
#endif
#else
#define TABLE_MALLOC 1
#endif
#ifndef TABLE_MALLOC
#include <sys/mman.h>
#endif

#include "hotcount/siphash.h"

/* The first allocation covers this many keys (or max_keys if smaller): a quiet window never
 * grows, and a max_keys of 1e8 does not reserve gigabytes up front. */
#define INITIAL_KEYS 1024

/* Slot indexes are stored as uint32 (entry index + 1), and the slot count (2 * max_keys rounded
 * up to a power of two) must stay representable; 2^31 keys is far past any real window. */
#define MAX_KEYS_LIMIT ((size_t)1 << 31)

/* Initial arena bytes per key: post ids are typically 8..24 bytes. */
#define ARENA_BYTES_PER_KEY 16

/* The arena starts at least this large so one maximum-length post id (256 bytes) always fits
 * without growing. */
#define ARENA_MIN_BYTES 512

/* ---- the arrays' memory: zeroed on creation; growth keeps the contents and zeroes the tail */

#ifndef TABLE_MALLOC
static void *mem_new(size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

/* NULL on failure, and p is still valid. The new pages of an anonymous mapping are zero. */
static void *mem_grow(void *p, size_t old_bytes, size_t new_bytes)
{
    void *q = mremap(p, old_bytes, new_bytes, MREMAP_MAYMOVE);
    return q == MAP_FAILED ? NULL : q;
}

static void mem_free(void *p, size_t bytes)
{
    if (p != NULL) {
        munmap(p, bytes);
    }
}
#else
static void *mem_new(size_t bytes)
{
    return calloc(1, bytes);
}

static void *mem_grow(void *p, size_t old_bytes, size_t new_bytes)
{
    char *q = realloc(p, new_bytes);
    if (q != NULL) {
        memset(q + old_bytes, 0, new_bytes - old_bytes);
    }
    return q;
}

static void mem_free(void *p, size_t bytes)
{
    (void)bytes;
    free(p);
}
#endif

typedef struct slot {
    uint32_t hash;
    uint32_t idx; /* entry index + 1; 0 marks an empty slot */
} slot_t;

struct hc_table {
    hc_table_entry_t *entries; /* owned; entries_alloc allocated, count used */
    size_t count;
    size_t entries_cap;   /* what the slot index was built for: entries_cap <= entries_alloc */
    size_t entries_alloc; /* larger than entries_cap only after a failed growth */
    slot_t *slots;        /* owned; slots_mask + 1 of them */
    size_t slots_mask;
    char *arena; /* owned; arena_cap allocated, arena_used used */
    size_t arena_used;
    size_t arena_cap;
    size_t max_keys;
    int64_t events;
    hc_hash_key_t key; /* the process key, copied so the hot path reads no global */
    uint64_t probes;   /* slots examined by hc_table_add's lookups (hc_table_probes) */
};

/* Keys live in memory we do not control the alignment of, so words are loaded with memcpy,
 * which compiles to a single unaligned load. */
static inline uint64_t load64(const unsigned char *p)
{
    uint64_t w;

    memcpy(&w, p, sizeof(w));
    return w;
}

static inline uint32_t load32(const unsigned char *p)
{
    uint32_t w;

    memcpy(&w, p, sizeof(w));
    return w;
}

/* The slot hash: SipHash-1-3 under the process's random key (hotcount/siphash.h), folded to
 * 32 bits. Post ids come from producers we do not control: with an unkeyed hash a hostile
 * producer could compute ids that share one probe run and make each insert cost O(run) (the
 * old hash of this table: 48 870 such ids took 640x the time of random ones); under a secret
 * key it cannot. Keys are still compared in full, so a collision costs time, never
 * correctness. Per process: never persist hc_table_entry_t.hash or send it anywhere. */
static inline uint32_t hash_key(const hc_table_t *tbl, const char *key, size_t len)
{
    uint64_t h = hc_siphash13(&tbl->key, key, len);
    return (uint32_t)h ^ (uint32_t)(h >> 32);
}

/* Key equality for the probe loop. Post ids are short (typically 8..24 bytes), where a libc
 * memcmp call costs more than the comparison itself; this inlines as a few word compares, with
 * the same overlapping-tail trick as hash_key. Callers check lengths first. */
static inline bool keys_equal(const char *a, const char *b, size_t len)
{
    const unsigned char *p = (const unsigned char *)a;
    const unsigned char *q = (const unsigned char *)b;

    if (len >= 8) {
        for (size_t i = 0; i + 8 < len; i += 8) {
            if (load64(p + i) != load64(q + i)) {
                return false;
            }
        }
        return load64(p + len - 8) == load64(q + len - 8);
    }
    if (len >= 4) {
        return load32(p) == load32(q) && load32(p + len - 4) == load32(q + len - 4);
    }
    for (size_t i = 0; i < len; i++) {
        if (p[i] != q[i]) {
            return false;
        }
    }
    return true;
}

static size_t slots_for(size_t keys)
{
    size_t n = 2;

    /* <= 50% full: at least 2 slots per key, rounded up to a power of two for masking. */
    while (n < keys * 2) {
        n *= 2;
    }
    return n;
}

static inline size_t min_size(size_t a, size_t b)
{
    return a < b ? a : b;
}

hc_table_t *hc_table_new(size_t max_keys)
{
    hc_table_t *tbl;
    size_t cap;
    size_t nslots;

    if (max_keys == 0 || max_keys > MAX_KEYS_LIMIT) {
        return NULL;
    }
    cap = min_size(max_keys, INITIAL_KEYS);
    nslots = slots_for(cap);

    tbl = calloc(1, sizeof(*tbl));
    if (tbl == NULL) {
        goto fail;
    }
    tbl->entries = mem_new(cap * sizeof(*tbl->entries));
    if (tbl->entries == NULL) {
        goto fail_tbl;
    }
    tbl->slots = mem_new(nslots * sizeof(*tbl->slots));
    if (tbl->slots == NULL) {
        goto fail_entries;
    }
    tbl->arena_cap = cap * ARENA_BYTES_PER_KEY;
    if (tbl->arena_cap < ARENA_MIN_BYTES) {
        tbl->arena_cap = ARENA_MIN_BYTES;
    }
    tbl->arena = mem_new(tbl->arena_cap);
    if (tbl->arena == NULL) {
        goto fail_slots;
    }
    tbl->entries_cap = cap;
    tbl->entries_alloc = cap;
    tbl->slots_mask = nslots - 1;
    tbl->max_keys = max_keys;
    tbl->key = hc_hash_process_key();
    return tbl;

fail_slots:
    mem_free(tbl->slots, nslots * sizeof(*tbl->slots));
fail_entries:
    mem_free(tbl->entries, cap * sizeof(*tbl->entries));
fail_tbl:
    free(tbl);
fail:
    return NULL;
}

void hc_table_destroy(hc_table_t *tbl)
{
    if (tbl == NULL) {
        return;
    }
    mem_free(tbl->arena, tbl->arena_cap);
    mem_free(tbl->slots, (tbl->slots_mask + 1) * sizeof(*tbl->slots));
    mem_free(tbl->entries, tbl->entries_alloc * sizeof(*tbl->entries));
    free(tbl);
}

/* Doubles the entry capacity (up to max_keys) and rebuilds the slot index for it. On failure
 * the table is unchanged apart from possibly a larger entries allocation, which is invisible. */
static hc_err_t grow_index(hc_table_t *tbl)
{
    size_t old_cap = tbl->entries_cap;
    size_t cap = min_size(old_cap * 2, tbl->max_keys);
    size_t nslots = slots_for(cap);
    size_t mask = nslots - 1;
    hc_table_entry_t *entries;
    slot_t *slots;

    if (tbl->entries_alloc < cap) {
        entries =
            mem_grow(tbl->entries, tbl->entries_alloc * sizeof(*entries), cap * sizeof(*entries));
        if (entries == NULL) {
            return HC_ERR_FATAL;
        }
        tbl->entries = entries;
        tbl->entries_alloc = cap;
    }
    entries = tbl->entries;
    tbl->entries_cap = cap;

    if (nslots != tbl->slots_mask + 1) {
        size_t old_bytes = (tbl->slots_mask + 1) * sizeof(*slots);

        /* The index grows where it is and is rebuilt from the entries, never beside a copy of
         * itself: the old and the new array are never both resident. */
        slots = mem_grow(tbl->slots, old_bytes, nslots * sizeof(*slots));
        if (slots == NULL) {
            /* Keep the old (still valid) index, and the capacity it was built for; the larger
             * entries array (entries_alloc) is invisible, and the next growth reuses it. */
            tbl->entries_cap = old_cap;
            return HC_ERR_FATAL;
        }
        memset(slots, 0, old_bytes);
        /* Entries keep their hash, so a rehash never re-reads key bytes. */
        for (size_t i = 0; i < tbl->count; i++) {
            size_t pos = entries[i].hash & mask;

            while (slots[pos].idx != 0) {
                pos = (pos + 1) & mask;
            }
            slots[pos].hash = entries[i].hash;
            slots[pos].idx = (uint32_t)(i + 1);
        }
        tbl->slots = slots;
        tbl->slots_mask = mask;
    }
    return HC_OK;
}

/* Makes room for len more key bytes. realloc may move the arena, so every entry's post_id is
 * recomputed: keys sit back to back in insertion order, so entry i starts at the sum of the
 * lengths before it, and no old (now dangling) pointer is ever read. */
static hc_err_t reserve_arena(hc_table_t *tbl, size_t len)
{
    size_t cap = tbl->arena_cap;
    size_t off = 0;
    char *arena;

    if (tbl->arena_cap - tbl->arena_used >= len) {
        return HC_OK;
    }
    while (cap - tbl->arena_used < len) {
        cap *= 2;
    }
    arena = mem_grow(tbl->arena, tbl->arena_cap, cap);
    if (arena == NULL) {
        return HC_ERR_FATAL;
    }
    for (size_t i = 0; i < tbl->count; i++) {
        tbl->entries[i].post_id = arena + off;
        off += tbl->entries[i].post_id_len;
    }
    tbl->arena = arena;
    tbl->arena_cap = cap;
    return HC_OK;
}

/* Probes for key; returns its entry, or NULL with *pos at the free slot that ends the probe. */
/* Probes for key; returns its entry, or NULL with *pos at the free slot that ends the probe.
 * *steps: slots examined. */
static hc_table_entry_t *lookup(const hc_table_t *tbl, const char *key, size_t len, uint32_t h,
                                size_t *pos, uint64_t *steps)
{
    size_t p = h & tbl->slots_mask;
    uint64_t n = 1;

    for (;; n++) {
        slot_t s = tbl->slots[p];

        if (s.idx == 0) {
            *pos = p;
            *steps = n;
            return NULL;
        }
        hc_table_entry_t *ent = &tbl->entries[s.idx - 1];
        if (s.hash == h && ent->post_id_len == len && keys_equal(ent->post_id, key, len)) {
            *pos = p;
            *steps = n;
            return ent;
        }
        p = (p + 1) & tbl->slots_mask;
    }
}

const hc_table_entry_t *hc_table_find(const hc_table_t *tbl, const char *post_id,
                                      size_t post_id_len)
{
    size_t pos;
    uint64_t steps;

    if (post_id_len > UINT32_MAX) {
        return NULL;
    }
    return lookup(tbl, post_id, post_id_len, hash_key(tbl, post_id, post_id_len), &pos, &steps);
}

hc_err_t hc_table_add(hc_table_t *tbl, const char *post_id, size_t post_id_len, int64_t delta,
                      int64_t events, int64_t ts_min, int64_t ts_max)
{
    uint32_t h;
    size_t pos;
    int64_t total;
    hc_table_entry_t *ent;
    hc_err_t err;

    if (post_id_len > UINT32_MAX) {
        return HC_ERR_INVALID;
    }
    /* Sums must stay exact (every like counted once), so an overflow is refused rather than
     * wrapped; checked before anything is written so that nothing changes. */
    if (__builtin_add_overflow(tbl->events, events, &total)) {
        return HC_ERR_INVALID;
    }

    uint64_t steps;
    h = hash_key(tbl, post_id, post_id_len);
    ent = lookup(tbl, post_id, post_id_len, h, &pos, &steps);
    tbl->probes += steps;
    if (ent != NULL) {
        int64_t d;
        int64_t e;

        if (__builtin_add_overflow(ent->delta, delta, &d) ||
            __builtin_add_overflow(ent->events, events, &e)) {
            return HC_ERR_INVALID;
        }
        ent->delta = d;
        ent->events = e;
        /* HC_TS_NONE is INT64_MIN, so it never wins a max, but it must never win a min. */
        if (ts_min != HC_TS_NONE && (ent->ts_min == HC_TS_NONE || ts_min < ent->ts_min)) {
            ent->ts_min = ts_min;
        }
        if (ts_max > ent->ts_max) {
            ent->ts_max = ts_max;
        }
        tbl->events = total;
        return HC_OK;
    }

    /* A new post. */
    if (tbl->count >= tbl->max_keys) {
        return HC_ERR_FULL;
    }
    if (tbl->count == tbl->entries_cap) {
        err = grow_index(tbl);
        if (err != HC_OK) {
            return err;
        }
        pos = h & tbl->slots_mask;
        while (tbl->slots[pos].idx != 0) {
            pos = (pos + 1) & tbl->slots_mask;
        }
    }
    err = reserve_arena(tbl, post_id_len);
    if (err != HC_OK) {
        return err;
    }

    ent = &tbl->entries[tbl->count];
    ent->post_id = tbl->arena + tbl->arena_used;
    if (post_id_len > 0) {
        memcpy(tbl->arena + tbl->arena_used, post_id, post_id_len);
    }
    ent->post_id_len = (uint32_t)post_id_len;
    ent->hash = h;
    ent->delta = delta;
    ent->events = events;
    ent->ts_min = ts_min;
    ent->ts_max = ts_max;
    tbl->arena_used += post_id_len;
    tbl->count++;
    tbl->slots[pos].hash = h;
    tbl->slots[pos].idx = (uint32_t)tbl->count;
    tbl->events = total;
    return HC_OK;
}

bool hc_table_is_full(const hc_table_t *tbl)
{
    return tbl->count >= tbl->max_keys;
}

bool hc_table_is_empty(const hc_table_t *tbl)
{
    return tbl->count == 0;
}

size_t hc_table_count(const hc_table_t *tbl)
{
    return tbl->count;
}

int64_t hc_table_events(const hc_table_t *tbl)
{
    return tbl->events;
}

size_t hc_table_max_keys(const hc_table_t *tbl)
{
    return tbl->max_keys;
}

const hc_table_entry_t *hc_table_entry(const hc_table_t *tbl, size_t i)
{
    assert(i < tbl->count);
    return &tbl->entries[i];
}

void hc_table_clear(hc_table_t *tbl)
{
    size_t nslots = tbl->slots_mask + 1;

    /* A table sized for a busy window may be cleared after a quiet one: then finding and zeroing
     * each used slot is cheaper than wiping the whole array. A slot lookup is a random access
     * (a likely cache miss on a big table) while memset streams ~8 slots per cache line, so
     * walking only wins when few slots are used; 1/32 keeps both paths well below the cost of
     * the window that filled them. */
    if (tbl->count * 32 < nslots) {
        for (size_t i = 0; i < tbl->count; i++) {
            size_t pos = tbl->entries[i].hash & tbl->slots_mask;

            /* Slots freed earlier in this loop may sit in this entry's probe run, so an empty slot
             * does not end the search; the entry's own slot is certainly ahead. */
            while (tbl->slots[pos].idx != i + 1) {
                pos = (pos + 1) & tbl->slots_mask;
            }
            tbl->slots[pos].hash = 0;
            tbl->slots[pos].idx = 0;
        }
    } else {
        memset(tbl->slots, 0, nslots * sizeof(*tbl->slots));
    }
    tbl->count = 0;
    tbl->arena_used = 0;
    tbl->events = 0;
}

uint64_t hc_table_probes(const hc_table_t *tbl)
{
    return tbl->probes;
}

size_t hc_table_memory(const hc_table_t *tbl)
{
    return sizeof(*tbl) + tbl->entries_alloc * sizeof(*tbl->entries) +
           (tbl->slots_mask + 1) * sizeof(*tbl->slots) + tbl->arena_cap;
}
