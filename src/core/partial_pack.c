/* Packed partials (contract and format in include/core/hotcount/partial_pack.h). The encoder runs
 * in stage 1 once per window and partials partition; the decoder in stage 2 on untrusted bytes,
 * so it reads through one bounded cursor whose every step checks what is left. */
#include "hotcount/partial_pack.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "hotcount/event.h"

/* The smallest entry: a 1-byte length, a 1-byte id, delta, events and flags one byte each. A
 * count that the remaining bytes cannot hold is refused before anything is read, so a forged
 * count costs nothing. */
#define ENTRY_MIN_BYTES 5u
#define VARINT_MAX_BYTES 10u

static uint64_t zigzag(int64_t v)
{
    return ((uint64_t)v << 1) ^ (uint64_t)(-(int64_t)((uint64_t)v >> 63));
}

static int64_t unzigzag(uint64_t u)
{
    return (int64_t)((u >> 1) ^ (0u - (u & 1u)));
}

static size_t varint_len(uint64_t u)
{
    size_t n = 1;
    while (u >= 0x80u) {
        u >>= 7;
        n++;
    }
    return n;
}

static uint8_t *put_varint(uint8_t *p, uint64_t u)
{
    while (u >= 0x80u) {
        *p++ = (uint8_t)(u | 0x80u);
        u >>= 7;
    }
    *p++ = (uint8_t)u;
    return p;
}

static int compare_ids(const char *a, uint32_t alen, const char *b, uint32_t blen)
{
    if (alen != blen) {
        return alen < blen ? -1 : 1;
    }
    return memcmp(a, b, alen);
}

static int compare_entries(const void *x, const void *y)
{
    const hc_table_entry_t *a = *(const hc_table_entry_t *const *)x;
    const hc_table_entry_t *b = *(const hc_table_entry_t *const *)y;
    return compare_ids(a->post_id, a->post_id_len, b->post_id, b->post_id_len);
}

int32_t hc_pack_partition(const char *post_id, size_t post_id_len, int32_t partitions)
{
    /* bitwise: post ids are short and each is hashed once per window, not per event */
    uint32_t crc = 0xFFFFFFFFu;
    for (size_t i = 0; i < post_id_len; i++) {
        crc ^= (unsigned char)post_id[i];
        for (int k = 0; k < 8; k++) {
            crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
        }
    }
    crc ^= 0xFFFFFFFFu;
    return (int32_t)(crc % (uint32_t)partitions);
}

void hc_pack_sort(const hc_table_entry_t **ents, size_t n)
{
    if (n > 1) {
        qsort(ents, n, sizeof(*ents), compare_entries);
    }
}

static size_t entry_len(const hc_table_entry_t *ent, int64_t base)
{
    size_t n = varint_len(ent->post_id_len) + ent->post_id_len + varint_len(zigzag(ent->delta)) +
               varint_len((uint64_t)ent->events) + 1;
    if (ent->ts_min != HC_TS_NONE) {
        n += varint_len(zigzag((int64_t)((uint64_t)ent->ts_min - (uint64_t)base))) +
             varint_len((uint64_t)ent->ts_max - (uint64_t)ent->ts_min);
    }
    return n;
}

size_t hc_pack_encode(const hc_table_entry_t *const *ents, size_t n, size_t *taken, uint8_t *buf,
                      size_t buf_size)
{
    *taken = 0;
    if (n == 0 || buf == NULL) {
        return 0;
    }
    size_t limit = buf_size < HC_PACK_MAX_BYTES ? buf_size : HC_PACK_MAX_BYTES;
    size_t most = n < HC_PACK_MAX_POSTS ? n : HC_PACK_MAX_POSTS;
    /* The base is the first timestamped entry's ts_min: a window's timestamps sit close
     * together, so the others' differences to it are short. */
    int64_t base = 0;
    for (size_t i = 0; i < most; i++) {
        if (ents[i]->ts_min != HC_TS_NONE) {
            base = ents[i]->ts_min;
            break;
        }
    }
    /* room for the count's varint at its largest (HC_PACK_MAX_POSTS takes 2 bytes) */
    size_t len = 1 + varint_len(HC_PACK_MAX_POSTS) + varint_len(zigzag(base));
    size_t k = 0;
    while (k < most) {
        size_t e = entry_len(ents[k], base);
        if (len + e > limit) {
            break;
        }
        len += e;
        k++;
    }
    if (k == 0) {
        return 0;
    }
    uint8_t *p = buf;
    *p++ = (uint8_t)HC_PACK_MAGIC;
    p = put_varint(p, k);
    p = put_varint(p, zigzag(base));
    for (size_t i = 0; i < k; i++) {
        const hc_table_entry_t *ent = ents[i];
        p = put_varint(p, ent->post_id_len);
        memcpy(p, ent->post_id, ent->post_id_len);
        p += ent->post_id_len;
        p = put_varint(p, zigzag(ent->delta));
        p = put_varint(p, (uint64_t)ent->events);
        if (ent->ts_min == HC_TS_NONE) {
            *p++ = 0;
        } else {
            *p++ = 1;
            p = put_varint(p, zigzag((int64_t)((uint64_t)ent->ts_min - (uint64_t)base)));
            p = put_varint(p, (uint64_t)ent->ts_max - (uint64_t)ent->ts_min);
        }
    }
    *taken = k;
    return (size_t)(p - buf);
}

/* ---- decoding ---- */

typedef struct cursor {
    const uint8_t *p;
    const uint8_t *end;
} cursor_t;

/* A minimal LEB128 varint of at most 64 bits; false (nothing consumed that matters: the record
 * is refused) when truncated, longer than 10 bytes, past 64 bits or not minimal. */
static bool get_varint(cursor_t *c, uint64_t *out, const char **why)
{
    uint64_t u = 0;
    for (unsigned i = 0; i < VARINT_MAX_BYTES; i++) {
        if (c->p == c->end) {
            *why = "truncated varint";
            return false;
        }
        uint8_t b = *c->p++;
        if (i == VARINT_MAX_BYTES - 1 && b > 1) {
            *why = "varint past 64 bits";
            return false;
        }
        u |= (uint64_t)(b & 0x7fu) << (7 * i);
        if (!(b & 0x80u)) {
            if (b == 0 && i > 0) {
                *why = "overlong varint";
                return false;
            }
            *out = u;
            return true;
        }
    }
    *why = "varint longer than 10 bytes";
    return false;
}

static bool get_entry(cursor_t *c, int64_t base, hc_pack_entry_t *e, const char **why)
{
    uint64_t u;
    if (!get_varint(c, &u, why)) {
        return false;
    }
    if (u < 1 || u > HC_POST_ID_MAX) {
        *why = "post id length out of 1..256";
        return false;
    }
    if ((size_t)(c->end - c->p) < u) {
        *why = "truncated post id";
        return false;
    }
    e->post_id = (const char *)c->p;
    e->post_id_len = (uint32_t)u;
    c->p += u;
    if (!get_varint(c, &u, why)) {
        return false;
    }
    e->delta = unzigzag(u);
    if (!get_varint(c, &u, why)) {
        return false;
    }
    if (u < 1 || u > (uint64_t)INT64_MAX) {
        *why = "events out of 1..2^63-1";
        return false;
    }
    e->events = (int64_t)u;
    if (c->p == c->end) {
        *why = "truncated flags";
        return false;
    }
    uint8_t flags = *c->p++;
    if (flags == 0) {
        e->ts_min = e->ts_max = HC_TS_NONE;
        return true;
    }
    if (flags != 1) {
        *why = "flags not 0 or 1";
        return false;
    }
    if (!get_varint(c, &u, why)) {
        return false;
    }
    int64_t ts_min = (int64_t)((uint64_t)base + (uint64_t)unzigzag(u));
    if (ts_min == HC_TS_NONE) {
        *why = "ts_min is -2^63";
        return false;
    }
    if (!get_varint(c, &u, why)) {
        return false;
    }
    /* ts_min >= -2^63 + 1, so INT64_MAX - ts_min fits uint64 */
    if (u > (uint64_t)INT64_MAX - (uint64_t)ts_min) {
        *why = "ts_max past 2^63-1";
        return false;
    }
    e->ts_min = ts_min;
    e->ts_max = (int64_t)((uint64_t)ts_min + u);
    return true;
}

hc_partial_reason_t hc_pack_decode(const void *buf, size_t len, hc_pack_entry_t *out, size_t *count,
                                   char *errstr, size_t errstr_size)
{
    *count = 0;
    if (!hc_pack_is_packed(buf, len)) {
        hc_errstr_set(errstr, errstr_size, "packed partial: not version 1 (first byte)");
        return HC_PARTIAL_UNDECODABLE;
    }
    if (len > HC_PACK_MAX_BYTES) {
        hc_errstr_set(errstr, errstr_size, "packed partial: %zu bytes, over the bound", len);
        return HC_PARTIAL_UNDECODABLE;
    }
    cursor_t c = {(const uint8_t *)buf + 1, (const uint8_t *)buf + len};
    const char *why = NULL;
    uint64_t n = 0;
    uint64_t zbase = 0;
    size_t i = 0;
    if (!get_varint(&c, &n, &why)) {
        goto undecodable;
    }
    if (n < 1 || n > HC_PACK_MAX_POSTS || n > (uint64_t)(c.end - c.p) / ENTRY_MIN_BYTES) {
        why = "count out of range or beyond the record's bytes";
        goto undecodable;
    }
    if (!get_varint(&c, &zbase, &why)) {
        goto undecodable;
    }
    for (; i < n; i++) {
        if (!get_entry(&c, unzigzag(zbase), &out[i], &why)) {
            goto undecodable;
        }
        if (i > 0 && compare_ids(out[i - 1].post_id, out[i - 1].post_id_len, out[i].post_id,
                                 out[i].post_id_len) >= 0) {
            why = "post ids not strictly ascending";
            goto undecodable;
        }
    }
    if (c.p != c.end) {
        why = "bytes after the last entry";
        i = (size_t)n;
        goto undecodable;
    }
    for (i = 0; i < n; i++) {
        const hc_pack_entry_t *e = &out[i];
        if (!hc_post_id_valid(e->post_id, e->post_id_len)) {
            hc_errstr_set(errstr, errstr_size,
                          "packed partial: entry %zu: post id breaks the event rules (control "
                          "character or bad UTF-8)",
                          i);
            return HC_PARTIAL_BAD_POST_ID;
        }
        /* events >= 1, so -events cannot overflow; delta may be INT64_MIN */
        if (e->delta > e->events || e->delta < -e->events) {
            hc_errstr_set(errstr, errstr_size,
                          "packed partial: entry %zu: delta %" PRId64 " exceeds events %" PRId64, i,
                          e->delta, e->events);
            return HC_PARTIAL_DELTA_EXCEEDS_EVENTS;
        }
    }
    *count = (size_t)n;
    return HC_PARTIAL_OK;
undecodable:
    hc_errstr_set(errstr, errstr_size, "packed partial: entry %zu: %s", i, why);
    return HC_PARTIAL_UNDECODABLE;
}
