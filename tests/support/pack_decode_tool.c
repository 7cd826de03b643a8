/* The C side of the packed-partials differential test (tests/unit/test_partial_pack_diff.py):
 * reads records from stdin, each a 4-byte little-endian length and that many bytes, and prints
 * one line per record: hc_pack_decode's reason, and for an accepted record its entries (post id
 * in hex, delta, events, ts_min, ts_max, "null" for none) and hc_pack_encode's re-encoding of
 * them in hex, so that both the decoder and the encoder are held to the Python reference. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "hotcount/partial_pack.h"

static void print_hex(const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        printf("%02x", b[i]);
    }
}

static void print_ts(int64_t ts)
{
    if (ts == HC_TS_NONE) {
        printf(" null");
    } else {
        printf(" %" PRId64, ts);
    }
}

int main(void)
{
    static hc_pack_entry_t out[HC_PACK_MAX_POSTS];
    static hc_table_entry_t ents[HC_PACK_MAX_POSTS];
    static const hc_table_entry_t *ptrs[HC_PACK_MAX_POSTS];
    static uint8_t enc[HC_PACK_MAX_BYTES];
    unsigned char hdr[4];
    while (fread(hdr, 1, 4, stdin) == 4) {
        size_t len =
            (size_t)hdr[0] | (size_t)hdr[1] << 8 | (size_t)hdr[2] << 16 | (size_t)hdr[3] << 24;
        /* exactly len bytes on the heap, so ASan sees any read past the record */
        unsigned char *buf = malloc(len ? len : 1);
        if (!buf || fread(buf, 1, len, stdin) != len) {
            fprintf(stderr, "pack_decode_tool: short input\n");
            return 2;
        }
        size_t n = 0;
        char why[256];
        hc_partial_reason_t reason = hc_pack_decode(buf, len, out, &n, why, sizeof(why));
        printf("%s %zu", hc_partial_reason_str(reason), n);
        for (size_t i = 0; i < n; i++) {
            printf(" ");
            print_hex(out[i].post_id, out[i].post_id_len);
            printf(" %" PRId64 " %" PRId64, out[i].delta, out[i].events);
            print_ts(out[i].ts_min);
            print_ts(out[i].ts_max);
            ents[i] = (hc_table_entry_t){.post_id = out[i].post_id,
                                         .post_id_len = out[i].post_id_len,
                                         .delta = out[i].delta,
                                         .events = out[i].events,
                                         .ts_min = out[i].ts_min,
                                         .ts_max = out[i].ts_max};
            ptrs[i] = &ents[i];
        }
        if (n > 0) {
            size_t taken = 0;
            size_t elen = hc_pack_encode(ptrs, n, &taken, enc, sizeof(enc));
            printf(" enc %zu ", taken);
            print_hex(enc, elen);
        }
        printf("\n");
        free(buf);
    }
    return 0;
}
