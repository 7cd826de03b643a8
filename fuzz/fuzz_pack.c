/* libFuzzer target for the packed partials decoder (src/core/partial_pack.c), which stage 2 runs
 * on whatever anyone with write access put on likes.partials; fuzz/pack.sh builds and runs it.
 *
 * Every input is decoded twice (the verdict must not change), and then
 *   - refused: no entry may be handed out (*count 0);
 *   - accepted: partial_pack.h's promises hold for every entry (1..HC_PACK_MAX_POSTS entries,
 *     post ids of 1..HC_POST_ID_MAX bytes in the format's strict order, events >= 1,
 *     |delta| <= events, both timestamps absent or ts_min <= ts_max with ts_min not
 *     HC_TS_NONE), and the entries survive a round trip: hc_pack_encode takes them all in one
 *     record within HC_PACK_MAX_BYTES, and that record decodes to the same entries (the
 *     timestamp base is the encoder's choice, so the bytes may differ).
 * The corpus this grows is then held to the Python reference (tools/partials_pack.py) by
 * tests/unit/test_partial_pack_diff.py --corpus (fuzz/pack.sh does it after each run).
 * Any failure prints the input and calls abort(), which libFuzzer saves as an artifact. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hotcount/event.h"
#include "hotcount/partial_pack.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static hc_pack_entry_t first[HC_PACK_MAX_POSTS];
static hc_pack_entry_t again[HC_PACK_MAX_POSTS];
static hc_pack_entry_t back[HC_PACK_MAX_POSTS];
static hc_table_entry_t rows[HC_PACK_MAX_POSTS];
static const hc_table_entry_t *ordered[HC_PACK_MAX_POSTS];
static uint8_t record[HC_PACK_MAX_BYTES];

static void fail(const char *why, const uint8_t *data, size_t size, size_t entry)
{
    fprintf(stderr, "==== fuzz_pack: %s (entry %zu)\ninput (%zu bytes, hex):", why, entry, size);
    for (size_t i = 0; i < size && i < 4096; i++) {
        fprintf(stderr, "%s%02x", i % 32 ? "" : "\n  ", data[i]);
    }
    fputc('\n', stderr);
    abort();
}

/* The format's order: shorter post ids first, then bytewise (partial_pack.h). */
static bool before(const hc_pack_entry_t *a, const hc_pack_entry_t *b)
{
    if (a->post_id_len != b->post_id_len) {
        return a->post_id_len < b->post_id_len;
    }
    return memcmp(a->post_id, b->post_id, a->post_id_len) < 0;
}

static bool same(const hc_pack_entry_t *a, const hc_pack_entry_t *b)
{
    return a->post_id_len == b->post_id_len &&
           memcmp(a->post_id, b->post_id, a->post_id_len) == 0 && a->delta == b->delta &&
           a->events == b->events && a->ts_min == b->ts_min && a->ts_max == b->ts_max;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char errstr[256];
    size_t n = 0;
    size_t n2 = 0;
    hc_partial_reason_t r = hc_pack_decode(data, size, first, &n, errstr, sizeof(errstr));
    hc_partial_reason_t r2 = hc_pack_decode(data, size, again, &n2, errstr, sizeof(errstr));
    if (r != r2 || n != n2) {
        fail("two decodes of the same bytes differ", data, size, 0);
    }
    if (r != HC_PARTIAL_OK) {
        if (n != 0) {
            fail("a refused record handed out entries", data, size, n);
        }
        return 0;
    }
    if (n < 1 || n > HC_PACK_MAX_POSTS) {
        fail("entry count out of range", data, size, n);
    }
    for (size_t i = 0; i < n; i++) {
        const hc_pack_entry_t *e = &first[i];
        if (!same(e, &again[i])) {
            fail("two decodes of the same bytes differ", data, size, i);
        }
        if (e->post_id_len < 1 || e->post_id_len > HC_POST_ID_MAX) {
            fail("post id length out of range", data, size, i);
        }
        if (i > 0 && !before(&first[i - 1], e)) {
            fail("post ids not strictly ascending", data, size, i);
        }
        if (e->events < 1 || e->delta > e->events || e->delta < -e->events) {
            fail("delta or events out of range", data, size, i);
        }
        if ((e->ts_min == HC_TS_NONE) != (e->ts_max == HC_TS_NONE) ||
            (e->ts_min != HC_TS_NONE && e->ts_min > e->ts_max)) {
            fail("timestamps out of order", data, size, i);
        }
        rows[i] = (hc_table_entry_t){.post_id = e->post_id,
                                     .post_id_len = e->post_id_len,
                                     .delta = e->delta,
                                     .events = e->events,
                                     .ts_min = e->ts_min,
                                     .ts_max = e->ts_max};
        ordered[i] = &rows[i];
    }
    size_t taken = 0;
    size_t len = hc_pack_encode(ordered, n, &taken, record, sizeof(record));
    if (len == 0 || taken != n) {
        fail("the accepted entries do not encode into one record", data, size, taken);
    }
    size_t n3 = 0;
    if (hc_pack_decode(record, len, back, &n3, errstr, sizeof(errstr)) != HC_PARTIAL_OK ||
        n3 != n) {
        fail("the re-encoded record is refused", data, size, n3);
    }
    for (size_t i = 0; i < n; i++) {
        if (!same(&first[i], &back[i])) {
            fail("the re-encoded record decodes to other entries", data, size, i);
        }
    }
    return 0;
}
