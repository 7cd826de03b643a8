/* Layer: core. Packed partials: one likes.partials record carrying the partials of many posts
 * of one stage-1 window (docs/FORMATS.md, "Packed partials", byte by byte). Version 1:
 *
 *   0xC1                      magic and version; never the first byte of a JSON text (0xC1 is
 *                             not even UTF-8), so stage 2 tells it from the one-post record
 *   varint  count             1..HC_PACK_MAX_POSTS entries
 *   zigzag  base              the record's timestamp base (any int64)
 *   count x entry, post ids strictly ascending (shorter first, then bytewise):
 *     varint  post_id_len     1..HC_POST_ID_MAX
 *     bytes   post_id
 *     zigzag  delta
 *     varint  events          1..INT64_MAX
 *     byte    flags           0: no timestamp (ts_min = ts_max = null); 1: the two below
 *     zigzag  ts_min - base   (modulo 2^64); ts_min is never INT64_MIN (HC_TS_NONE)
 *     varint  ts_max - ts_min ts_max at most INT64_MAX
 *
 * varint: unsigned LEB128, at most 10 bytes, minimal (no redundant 0x80.. 0x00 tail); zigzag:
 * (v << 1) ^ (v >> 63) as a varint. Nothing may follow the last entry.
 *
 * The decoder treats its input as untrusted (stage 2 reads what anyone with write access put
 * on the topic): every length is checked before it is used, it never reads past len, and each
 * entry is held to the rules of hc_partial_decode + hc_partial_check. Pure functions, any
 * thread. The Python reference is tools/partials_pack.py. */
#ifndef HOTCOUNT_PARTIAL_PACK_H
#define HOTCOUNT_PARTIAL_PACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hotcount/partial_check.h"
#include "hotcount/table.h"

#define HC_PACK_MAGIC 0xC1u
/* A record is at most this long and holds at most this many posts: stage 1 writes a window's
 * posts of one partials partition in as many such records as they need, and stage 2 sizes its
 * table for max.keys plus one record. */
#define HC_PACK_MAX_BYTES (256u * 1024u)
#define HC_PACK_MAX_POSTS 1024u

/* One decoded entry. post_id is borrowed: it points into the record's bytes (not
 * NUL-terminated) and lives as long as they do. */
typedef struct hc_pack_entry {
    const char *post_id;
    uint32_t post_id_len;
    int64_t delta;
    int64_t events;
    int64_t ts_min; /* HC_TS_NONE when the record says none */
    int64_t ts_max;
} hc_pack_entry_t;

/* Whether a likes.partials value is a packed record (its first byte is the magic); any other
 * value is read as the one-post JSON record (hotcount/partial.h). */
static inline bool hc_pack_is_packed(const void *buf, size_t len)
{
    return buf != NULL && len > 0 && *(const unsigned char *)buf == HC_PACK_MAGIC;
}

/* The likes.partials partition of a post, 0..partitions-1 (partitions >= 1): CRC-32 (IEEE
 * 802.3, reflected polynomial 0xEDB88320, initial value and final xor 0xFFFFFFFF; zlib's
 * crc32) of the post id's bytes, modulo partitions. It is what librdkafka's default
 * partitioner (consistent_random) gives the one-post records keyed by the post id, so a post
 * keeps its partials partition when stage 1 changes format. */
int32_t hc_pack_partition(const char *post_id, size_t post_id_len, int32_t partitions);

/* Orders ents as the format wants them (post ids ascending: shorter first, then bytewise). */
void hc_pack_sort(const hc_table_entry_t **ents, size_t n);

/* Encodes the longest prefix of ents[0..n) (already ordered by hc_pack_sort, no post id twice)
 * that fits in min(buf_size, HC_PACK_MAX_BYTES) bytes and HC_PACK_MAX_POSTS entries. Returns the
 * record's length and sets *taken to how many entries it holds; returns 0 (and *taken = 0)
 * when n is 0 or not even the first entry fits. Never writes past buf_size. A buffer of
 * HC_PACK_MAX_BYTES always takes at least one entry. */
size_t hc_pack_encode(const hc_table_entry_t *const *ents, size_t n, size_t *taken, uint8_t *buf,
                      size_t buf_size);

/* Decodes and checks a whole packed record into out[0..*count) (out has room for
 * HC_PACK_MAX_POSTS). HC_PARTIAL_OK, or the first rule broken, with detail in errstr and
 * *count = 0:
 *   HC_PARTIAL_UNDECODABLE  anything that breaks the format above (wrong magic, longer than
 *                           HC_PACK_MAX_BYTES, truncated,
 *                           a varint overlong or past 64 bits, a count of 0, over the bound
 *                           or beyond what the bytes can hold, a length out of range, events
 *                           < 1, flags not 0/1, ts_min INT64_MIN, ts_max past INT64_MAX, post
 *                           ids not strictly ascending, trailing bytes); checked over the
 *                           whole record before any rule below
 *   HC_PARTIAL_BAD_POST_ID / HC_PARTIAL_DELTA_EXCEEDS_EVENTS
 *                           the first entry, in record order, that breaks hc_partial_check's
 *                           post id rule or then its delta rule. */
hc_partial_reason_t hc_pack_decode(const void *buf, size_t len, hc_pack_entry_t *out, size_t *count,
                                   char *errstr, size_t errstr_size);

#endif
