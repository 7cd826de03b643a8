/* Provenance fencing between the stages; see hotcount/source_check.h. */
#include "hotcount/source_check.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hotcount/fnv.h"

/* Which window wrote a partial. */
typedef struct window_id {
    uint64_t producer; /* FNV-1a 64 of the transactional id */
    int64_t incarnation_ms;
    int64_t window;
} window_id_t;

/* A raw range that a window's partials on one partials partition carried. */
typedef struct span {
    int64_t first, next;
    window_id_t win;
} span_t;

/* What one partials partition remembers of one raw partition for one writer (a producer's
 * incarnation: the window id without its number): the last range the store holds (done) and
 * the last one the open batch took (pend). Free when it has neither. */
typedef struct writer_mem {
    span_t done, pend;
    uint64_t used; /* the check's tick when it last took a range here: the oldest goes first */
    bool has_done, has_pend;
} writer_mem_t;

/* Writers remembered per (partials partition, raw partition). A late write comes from the
 * writer whose window it overlaps (KAFKA-17754 appends it to the same producer's next
 * transaction), so two cover a raw partition changing hands; a third writer takes the slot of
 * the one that took a range longest ago. */
#define SLOT_WRITERS 2

typedef struct slot {
    writer_mem_t w[SLOT_WRITERS];
} slot_t;

typedef struct part {
    slot_t *slots; /* owned, indexed by raw partition */
    int32_t cap;
    bool dirty; /* some slot has pend */
    /* The value of the last partial taken here (owned), while the slots still hold what it set:
     * the window's next sibling (most partials are siblings) passes on one memcmp instead of a
     * parse. */
    char *last;
    size_t last_len, last_cap;
    bool last_valid;
} part_t;

struct hc_source_check {
    part_t *parts; /* owned, indexed by partials partition */
    int32_t cap;
    uint64_t tick; /* ranges taken so far */
};

/* A parsed version-1 value; the ranges are walked again with next_range. */
typedef struct header {
    window_id_t win;
    const char *ranges, *end;
    int32_t max_partition; /* the last range's: they ascend */
} header_t;

typedef enum parsed { PARSED_NONE, PARSED_OK, PARSED_BAD } parsed_t;

/* ---- the header's text ------------------------------------------------------------------- */

static uint64_t fnv1a64(const char *s)
{
    return hc_fnv1a64(HC_FNV1A64_BASIS, s, strlen(s));
}

size_t hc_source_encoded_max(const hc_manifest_t *win)
{
    /* "1 ", 16 hex digits, " ", two int64 of up to 20 characters with a space each and the NUL
     * (61); per range a separator, an int32 (10), ":", an int64 (19), "+" and an int64 (19) */
    return 64 + (size_t)(win->cap > 0 ? win->cap : 0) * 52;
}

size_t hc_source_encode(const char *transactional_id, int64_t incarnation_ms, int64_t window,
                        const hc_manifest_t *win, char *buf, size_t size)
{
    int n = snprintf(buf, size, "%d %016" PRIx64 " %" PRId64 " %" PRId64, HC_SOURCE_VERSION,
                     fnv1a64(transactional_id), incarnation_ms, window);
    if (n < 0 || (size_t)n >= size) {
        return 0;
    }
    size_t len = (size_t)n;
    bool any = false;
    for (int32_t p = 0; p < win->cap; p++) {
        const hc_manifest_range_t *r = hc_manifest_range(win, p);
        if (!r) {
            continue;
        }
        n = snprintf(buf + len, size - len, "%c%" PRId32 ":%" PRId64 "+%" PRId64, any ? ',' : ' ',
                     p, r->first, r->next - r->first);
        if (n < 0 || (size_t)n >= size - len) {
            return 0;
        }
        len += (size_t)n;
        any = true;
    }
    return any ? len : 0;
}

/* A decimal int64 without sign or leading zeros, at *s (< end); advances *s. */
static bool parse_int(const char **s, const char *end, int64_t *out)
{
    const char *c = *s;
    if (c >= end || *c < '0' || *c > '9' ||
        (*c == '0' && c + 1 < end && c[1] >= '0' && c[1] <= '9')) {
        return false;
    }
    int64_t v = 0;
    for (; c < end && *c >= '0' && *c <= '9'; c++) {
        int d = *c - '0';
        /* v * 10 + d <= INT64_MAX, without a division per digit */
        if (v > INT64_MAX / 10 || (v == INT64_MAX / 10 && d > INT64_MAX % 10)) {
            return false;
        }
        v = v * 10 + d;
    }
    *s = c;
    *out = v;
    return true;
}

static bool expect(const char **s, const char *end, char c)
{
    if (*s >= end || **s != c) {
        return false;
    }
    (*s)++;
    return true;
}

/* The range at *s: "<p>:<first>+<count>", advancing *s past it; false when it breaks the
 * format. */
static bool next_range(const char **s, const char *end, int32_t *p, int64_t *first, int64_t *next)
{
    int64_t part = 0, f = 0, count = 0;
    if (!parse_int(s, end, &part) || !expect(s, end, ':') || !parse_int(s, end, &f) ||
        !expect(s, end, '+') || !parse_int(s, end, &count)) {
        return false;
    }
    if (part >= HC_SOURCE_MAX_RAW_PARTITIONS || count < 1 || f > INT64_MAX - count) {
        return false;
    }
    *p = (int32_t)part;
    *first = f;
    *next = f + count;
    return true;
}

/* The next of h's ranges (parse() validated them all); false after the last. */
static bool walk(const header_t *h, const char **s, int32_t *p, int64_t *first, int64_t *next)
{
    if (*s >= h->end) {
        return false;
    }
    if (**s == ',') {
        (*s)++;
    }
    return next_range(s, h->end, p, first, next);
}

static parsed_t parse(const void *val, size_t len, header_t *h, char *errstr, size_t errstr_size)
{
    if (!val) {
        return PARSED_NONE;
    }
    const char *s = val;
    const char *end = s + len;
    int64_t version = 0;
    if (!parse_int(&s, end, &version) || version != HC_SOURCE_VERSION) {
        return PARSED_NONE; /* a format this code does not know: counted unchecked */
    }
    uint64_t producer = 0;
    bool ok = expect(&s, end, ' ') && end - s >= 16;
    for (int i = 0; ok && i < 16; i++, s++) {
        int d = *s >= '0' && *s <= '9' ? *s - '0' : *s >= 'a' && *s <= 'f' ? *s - 'a' + 10 : -1;
        ok = d >= 0;
        producer = producer << 4 | (uint64_t)(d & 0xf);
    }
    int64_t inc = 0, win = 0;
    ok = ok && expect(&s, end, ' ') && parse_int(&s, end, &inc) && expect(&s, end, ' ') &&
         parse_int(&s, end, &win) && expect(&s, end, ' ');
    if (ok) {
        h->win = (window_id_t){producer, inc, win};
        h->ranges = s;
        h->end = end;
        int32_t last = -1;
        for (bool more = true; ok && more;) {
            int32_t p = -1; /* next_range sets them only when it succeeds */
            int64_t first = 0, next = 0;
            ok = next_range(&s, end, &p, &first, &next) && p > last;
            last = p;
            h->max_partition = p;
            more = s < end;
            ok = ok && (!more || expect(&s, end, ','));
        }
    }
    if (!ok) {
        hc_errstr_set(errstr, errstr_size,
                      "partial: header " HC_SOURCE_HEADER " is malformed near byte %zu",
                      (size_t)(s - (const char *)val));
        return PARSED_BAD;
    }
    return PARSED_OK;
}

const void *hc_source_header_of(const rd_kafka_message_t *rkm, size_t *len)
{
    rd_kafka_headers_t *hdrs = NULL;
    const void *val = NULL;
    *len = 0;
    if (rd_kafka_message_headers(rkm, &hdrs) != RD_KAFKA_RESP_ERR_NO_ERROR ||
        rd_kafka_header_get_last(hdrs, HC_SOURCE_HEADER, &val, len) != RD_KAFKA_RESP_ERR_NO_ERROR) {
        *len = 0;
        return NULL;
    }
    return val;
}

/* ---- the memory -------------------------------------------------------------------------- */

hc_source_check_t *hc_source_check_new(void)
{
    return calloc(1, sizeof(hc_source_check_t));
}

void hc_source_check_destroy(hc_source_check_t *sc)
{
    if (!sc) {
        return;
    }
    for (int32_t q = 0; q < sc->cap; q++) {
        free(sc->parts[q].slots);
        free(sc->parts[q].last);
    }
    free(sc->parts);
    free(sc);
}

static bool same_window(const window_id_t *a, const window_id_t *b)
{
    return a->producer == b->producer && a->incarnation_ms == b->incarnation_ms &&
           a->window == b->window;
}

static bool same_writer(const window_id_t *a, const window_id_t *b)
{
    return a->producer == b->producer && a->incarnation_ms == b->incarnation_ms;
}

static bool mem_is_free(const writer_mem_t *m)
{
    return !m->has_done && !m->has_pend;
}

/* The last range sl holds of the writer of win: pending if the open batch took one, else the
 * stored one; NULL when sl remembers nothing of that writer. */
static const span_t *seen_of(const slot_t *sl, const window_id_t *win)
{
    for (int i = 0; sl && i < SLOT_WRITERS; i++) {
        const writer_mem_t *m = &sl->w[i];
        if (m->has_pend && same_writer(&m->pend.win, win)) {
            return &m->pend;
        }
        if (!m->has_pend && m->has_done && same_writer(&m->done.win, win)) {
            return &m->done;
        }
    }
    return NULL;
}

static const slot_t *slot_of(const hc_source_check_t *sc, int32_t q, int32_t p)
{
    if (q < 0 || q >= sc->cap || p >= sc->parts[q].cap) {
        return NULL;
    }
    return &sc->parts[q].slots[p];
}

hc_partial_reason_t hc_source_check(const hc_source_check_t *sc, int32_t partition, const void *hdr,
                                    size_t hdr_len, char *errstr, size_t errstr_size)
{
    if (hdr && partition >= 0 && partition < sc->cap) {
        const part_t *pt = &sc->parts[partition];
        if (pt->last_valid && pt->last_len == hdr_len && memcmp(pt->last, hdr, hdr_len) == 0) {
            return HC_PARTIAL_OK; /* a sibling of the last partial taken: its ranges are ours */
        }
    }
    header_t h;
    parsed_t parsed = parse(hdr, hdr_len, &h, errstr, errstr_size);
    if (parsed == PARSED_BAD) {
        return HC_PARTIAL_SOURCE_MALFORMED;
    }
#ifdef HC_MUTANT_NO_ENDTXN_DEFENCE
    /* Mutant build (tests/unit/test_source_check.c, test_stage2_source.c, test_stage1_mock.c):
     * every well-formed partial counts, whatever it overlaps. */
    parsed = PARSED_NONE;
#endif
    if (parsed == PARSED_NONE) {
        return HC_PARTIAL_OK;
    }
    const char *s = h.ranges;
    int32_t p;
    int64_t first, next;
    while (walk(&h, &s, &p, &first, &next)) {
        /* Only the partial's own writer's history is compared (issue 25, item 1): a header is
         * a claim anyone who may write the topic can make, and one forged claim of raw offsets
         * around 10^15 under another writer's name dead-lettered every later partial of the
         * partition before. */
        const span_t *seen = seen_of(slot_of(sc, partition, p), &h.win);
        if (!seen) {
            continue;
        }
        bool same = same_window(&seen->win, &h.win);
        if (same ? seen->first == first && seen->next == next : first >= seen->next) {
            continue;
        }
        hc_errstr_set(errstr, errstr_size,
                      "partial: raw partition %" PRId32 " [%" PRId64 ", %" PRId64
                      ") of window %" PRId64 "/%" PRId64 " overlaps [%" PRId64 ", %" PRId64
                      ") of %s window %" PRId64 "/%" PRId64 " taken before",
                      p, first, next, h.win.incarnation_ms, h.win.window, seen->first, seen->next,
                      same ? "the same" : "the", seen->win.incarnation_ms, seen->win.window);
        return HC_PARTIAL_SOURCE_OVERLAP;
    }
    return HC_PARTIAL_OK;
}

/* The memory for the writer of win in sl: its own, else a free one, else the one that took a
 * range longest ago (forgotten: the newcomer's history matters more than an old writer's). */
static writer_mem_t *mem_for(slot_t *sl, const window_id_t *win)
{
    writer_mem_t *free_m = NULL, *oldest = &sl->w[0];
    for (int i = 0; i < SLOT_WRITERS; i++) {
        writer_mem_t *m = &sl->w[i];
        if ((m->has_pend && same_writer(&m->pend.win, win)) ||
            (m->has_done && same_writer(&m->done.win, win))) {
            return m;
        }
        if (mem_is_free(m)) {
            free_m = free_m ? free_m : m;
        } else if (m->used < oldest->used) {
            oldest = m;
        }
    }
    if (free_m) {
        return free_m;
    }
    memset(oldest, 0, sizeof(*oldest));
    return oldest;
}

/* Grows sc to hold partials partition q and raw partition p; false when out of memory. */
static bool reserve(hc_source_check_t *sc, int32_t q, int32_t p)
{
    if (q >= sc->cap) {
        int32_t cap = sc->cap ? sc->cap : 8;
        while (cap <= q) {
            cap *= 2;
        }
        part_t *grown = realloc(sc->parts, (size_t)cap * sizeof(*grown));
        if (!grown) {
            return false;
        }
        memset(grown + sc->cap, 0, (size_t)(cap - sc->cap) * sizeof(*grown));
        sc->parts = grown;
        sc->cap = cap;
    }
    part_t *pt = &sc->parts[q];
    if (p >= pt->cap) {
        int32_t cap = pt->cap ? pt->cap : 16;
        while (cap <= p) {
            cap *= 2;
        }
        slot_t *grown = realloc(pt->slots, (size_t)cap * sizeof(*grown));
        if (!grown) {
            return false;
        }
        memset(grown + pt->cap, 0, (size_t)(cap - pt->cap) * sizeof(*grown));
        pt->slots = grown;
        pt->cap = cap;
    }
    return true;
}

hc_err_t hc_source_accept(hc_source_check_t *sc, int32_t partition, const void *hdr, size_t hdr_len)
{
    if (hdr && partition >= 0 && partition < sc->cap) {
        const part_t *pt = &sc->parts[partition];
        if (pt->last_valid && pt->last_len == hdr_len && memcmp(pt->last, hdr, hdr_len) == 0) {
            return HC_OK; /* the slots hold these ranges already */
        }
    }
    header_t h;
    if (partition < 0 || parse(hdr, hdr_len, &h, NULL, 0) != PARSED_OK) {
        return HC_OK; /* unchecked: nothing to remember */
    }
    /* room first, so that a failure changes nothing */
    if (!reserve(sc, partition, h.max_partition)) {
        return HC_ERR_FATAL;
    }
    part_t *pt = &sc->parts[partition];
    const char *s = h.ranges;
    int32_t p;
    int64_t first, next;
    sc->tick++;
    while (walk(&h, &s, &p, &first, &next)) {
        writer_mem_t *m = mem_for(&pt->slots[p], &h.win);
        m->pend = (span_t){first, next, h.win};
        m->has_pend = true;
        m->used = sc->tick;
    }
    pt->dirty = true;
    /* remember the value for its siblings; without room, they are parsed instead */
    pt->last_valid = false;
    if (hdr_len > pt->last_cap) {
        char *grown = realloc(pt->last, hdr_len);
        if (!grown) {
            return HC_OK;
        }
        pt->last = grown;
        pt->last_cap = hdr_len;
    }
    memcpy(pt->last, hdr, hdr_len);
    pt->last_len = hdr_len;
    pt->last_valid = true;
    return HC_OK;
}

void hc_source_commit(hc_source_check_t *sc)
{
    for (int32_t q = 0; q < sc->cap; q++) {
        part_t *pt = &sc->parts[q];
        for (int32_t p = 0; pt->dirty && p < pt->cap; p++) {
            for (int i = 0; i < SLOT_WRITERS; i++) {
                writer_mem_t *m = &pt->slots[p].w[i];
                if (m->has_pend) {
                    m->done = m->pend;
                    m->has_done = true;
                    m->has_pend = false;
                }
            }
        }
        pt->dirty = false;
    }
}

void hc_source_rollback(hc_source_check_t *sc)
{
    for (int32_t q = 0; q < sc->cap; q++) {
        part_t *pt = &sc->parts[q];
        for (int32_t p = 0; pt->dirty && p < pt->cap; p++) {
            for (int i = 0; i < SLOT_WRITERS; i++) {
                pt->slots[p].w[i].has_pend = false;
            }
        }
        if (pt->dirty) {
            pt->last_valid = false; /* what it set is gone */
        }
        pt->dirty = false;
    }
}

void hc_source_forget(hc_source_check_t *sc, int32_t partition)
{
    if (partition < 0 || partition >= sc->cap) {
        return;
    }
    part_t *pt = &sc->parts[partition];
    if (pt->cap > 0) { /* a partition that has seen no partial has no slots yet */
        memset(pt->slots, 0, (size_t)pt->cap * sizeof(*pt->slots));
    }
    pt->dirty = false;
    pt->last_valid = false;
}
