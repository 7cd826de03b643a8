/* Packed partials (include/core/hotcount/partial_pack.h): round trips, the size and count
 * bounds, and one refusal per rule. The differential run against the Python reference is
 * tests/unit/test_partial_pack_diff.py. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hotcount/partial_pack.h"

static hc_pack_entry_t out[HC_PACK_MAX_POSTS];

static hc_partial_reason_t decode(const uint8_t *buf, size_t len, size_t *n)
{
    char errstr[256];
    /* a heap copy of exactly len bytes: ASan catches any read past the record */
    uint8_t *copy = malloc(len ? len : 1);
    assert_non_null(copy);
    if (len) {
        memcpy(copy, buf, len);
    }
    hc_partial_reason_t reason = hc_pack_decode(copy, len, out, n, errstr, sizeof(errstr));
    /* the entries borrow the record: compare before freeing, so keep it for the caller's
     * checks by copying back (the caller's buf holds the same bytes) */
    for (size_t i = 0; i < *n; i++) {
        out[i].post_id = (const char *)buf + (out[i].post_id - (const char *)copy);
    }
    free(copy);
    return reason;
}

static size_t encode(hc_table_entry_t *ents, size_t n, uint8_t *buf, size_t size, size_t *taken)
{
    const hc_table_entry_t **ptrs = calloc(n ? n : 1, sizeof(*ptrs));
    assert_non_null(ptrs);
    for (size_t i = 0; i < n; i++) {
        ptrs[i] = &ents[i];
    }
    hc_pack_sort(ptrs, n);
    size_t len = hc_pack_encode(ptrs, n, taken, buf, size);
    free(ptrs);
    return len;
}

static void round_trip(void **state)
{
    (void)state;
    hc_table_entry_t ents[] = {
        {.post_id = "zz",
         .post_id_len = 2,
         .delta = -3,
         .events = 5,
         .ts_min = 1764600000123,
         .ts_max = 1764600000999},
        {.post_id = "a\0b",
         .post_id_len = 3,
         .delta = 0,
         .events = 1,
         .ts_min = HC_TS_NONE,
         .ts_max = HC_TS_NONE},
        {.post_id = "b",
         .post_id_len = 1,
         .delta = INT64_MAX,
         .events = INT64_MAX,
         .ts_min = INT64_MIN + 1,
         .ts_max = INT64_MAX},
        {.post_id = "p\xc3\xa9",
         .post_id_len = 3,
         .delta = -1,
         .events = 1,
         .ts_min = -7,
         .ts_max = -7},
    };
    uint8_t buf[512];
    size_t taken;
    size_t len = encode(ents, 4, buf, sizeof(buf), &taken);
    assert_int_equal(taken, 4);
    assert_int_equal(buf[0], HC_PACK_MAGIC);
    assert_true(hc_pack_is_packed(buf, len));
    size_t n;
    /* "a\0b" carries a NUL: a control character, so the rules refuse what the format holds */
    assert_int_equal(decode(buf, len, &n), HC_PARTIAL_BAD_POST_ID);
    ents[1].post_id = "a-b";
    len = encode(ents, 4, buf, sizeof(buf), &taken);
    assert_int_equal(decode(buf, len, &n), HC_PARTIAL_OK);
    assert_int_equal(n, 4);
    /* ascending: shorter ids first, then bytewise */
    assert_memory_equal(out[0].post_id, "b", 1);
    assert_int_equal(out[0].delta, INT64_MAX);
    assert_int_equal(out[0].ts_min, INT64_MIN + 1);
    assert_int_equal(out[0].ts_max, INT64_MAX);
    assert_memory_equal(out[1].post_id, "zz", 2);
    assert_int_equal(out[1].delta, -3);
    assert_int_equal(out[1].events, 5);
    assert_int_equal(out[1].ts_min, 1764600000123);
    assert_int_equal(out[1].ts_max, 1764600000999);
    assert_memory_equal(out[2].post_id, "a-b", 3);
    assert_int_equal(out[2].ts_min, HC_TS_NONE);
    assert_int_equal(out[2].ts_max, HC_TS_NONE);
    assert_memory_equal(out[3].post_id, "p\xc3\xa9", 3);
    assert_int_equal(out[3].ts_min, -7);
}

/* The exact bytes of a small record, as docs/FORMATS.md shows them. */
static void documented_bytes(void **state)
{
    (void)state;
    hc_table_entry_t ents[] = {
        {.post_id = "p1",
         .post_id_len = 2,
         .delta = 3,
         .events = 3,
         .ts_min = 1000,
         .ts_max = 1002},
        {.post_id = "p2",
         .post_id_len = 2,
         .delta = -1,
         .events = 1,
         .ts_min = HC_TS_NONE,
         .ts_max = HC_TS_NONE},
    };
    uint8_t buf[64];
    size_t taken;
    size_t len = encode(ents, 2, buf, sizeof(buf), &taken);
    static const uint8_t want[] = {0xc1, 0x02, 0xd0, 0x0f, 0x02, 'p', '1',  0x06, 0x03,
                                   0x01, 0x00, 0x02, 0x02, 'p',  '2', 0x01, 0x01, 0x00};
    assert_int_equal(len, sizeof(want));
    assert_memory_equal(buf, want, sizeof(want));
}

static void bounds_split(void **state)
{
    (void)state;
    size_t n = 3000;
    hc_table_entry_t *ents = calloc(n, sizeof(*ents));
    char(*ids)[HC_POST_ID_MAX] = calloc(n, HC_POST_ID_MAX);
    assert_non_null(ents);
    assert_non_null(ids);
    for (size_t i = 0; i < n; i++) {
        int len = snprintf(ids[i], HC_POST_ID_MAX, "post-%06zu", i);
        ents[i] = (hc_table_entry_t){.post_id = ids[i],
                                     .post_id_len = (uint32_t)len,
                                     .delta = 1,
                                     .events = 1,
                                     .ts_min = HC_TS_NONE,
                                     .ts_max = HC_TS_NONE};
    }
    uint8_t *buf = malloc(HC_PACK_MAX_BYTES);
    assert_non_null(buf);
    size_t taken;
    size_t len = encode(ents, n, buf, HC_PACK_MAX_BYTES, &taken);
    assert_int_equal(taken, HC_PACK_MAX_POSTS); /* the count bound */
    size_t got;
    assert_int_equal(decode(buf, len, &got), HC_PARTIAL_OK);
    assert_int_equal(got, HC_PACK_MAX_POSTS);
    /* 256-byte ids: the byte bound comes first (each entry is 2 + 256 + 3 bytes) */
    for (size_t i = 0; i < n; i++) {
        memset(ids[i], 'a' + (int)(i % 26), HC_POST_ID_MAX);
        snprintf(ids[i], 8, "%07zu", i);
        ids[i][7] = 'x';
        ents[i].post_id_len = HC_POST_ID_MAX;
    }
    len = encode(ents, n, buf, HC_PACK_MAX_BYTES, &taken);
    assert_true(taken < HC_PACK_MAX_POSTS);
    assert_true(len <= HC_PACK_MAX_BYTES);
    assert_true(len + 261 > HC_PACK_MAX_BYTES - 3); /* no room for one more */
    assert_int_equal(decode(buf, len, &got), HC_PARTIAL_OK);
    assert_int_equal(got, taken);
    /* a short buffer takes what fits and never writes past it; none: 0 */
    len = encode(ents, n, buf, 600, &taken);
    assert_int_equal(taken, 2);
    assert_true(len <= 600);
    assert_int_equal(encode(ents, n, buf, 100, &taken), 0);
    assert_int_equal(taken, 0);
    assert_int_equal(encode(ents, 0, buf, 100, &taken), 0);
    free(buf);
    free(ids);
    free(ents);
}

/* One record per refusal; each must be refused with its reason, nothing decoded. */
static void refusals(void **state)
{
    (void)state;
    static const struct {
        const char *what;
        const char *bytes;
        size_t len;
        hc_partial_reason_t want;
    } cases[] = {
#define C(what, lit, want) {what, lit, sizeof(lit) - 1, want}
        C("empty", "", HC_PARTIAL_UNDECODABLE),
        C("JSON", "{\"post_id\":\"a\"}", HC_PARTIAL_UNDECODABLE),
        C("other version",
          "\xc2\x01\x00\x01"
          "a\x00\x01\x00",
          HC_PARTIAL_UNDECODABLE),
        C("magic only", "\xc1", HC_PARTIAL_UNDECODABLE),
        C("count 0", "\xc1\x00\x00", HC_PARTIAL_UNDECODABLE),
        C("count over the bound", "\xc1\x81\x08\x00", HC_PARTIAL_UNDECODABLE),
        C("count past the bytes",
          "\xc1\x02\x00\x01"
          "a\x00\x01\x00",
          HC_PARTIAL_UNDECODABLE),
        C("overlong count",
          "\xc1\x81\x00\x00\x01"
          "a\x00\x01\x00",
          HC_PARTIAL_UNDECODABLE),
        C("base past 64 bits",
          "\xc1\x01\xff\xff\xff\xff\xff\xff\xff\xff\xff\x02\x01"
          "a\x00\x01\x00",
          HC_PARTIAL_UNDECODABLE),
        C("base 11 bytes",
          "\xc1\x01\x80\x80\x80\x80\x80\x80\x80\x80\x80\x80\x00\x01"
          "a\x00\x01\x00",
          HC_PARTIAL_UNDECODABLE),
        C("id length 0",
          "\xc1\x01\x00\x00"
          "a\x00\x01\x00",
          HC_PARTIAL_UNDECODABLE),
        C("id length 257",
          "\xc1\x01\x00\x81\x02"
          "a\x00\x01\x00",
          HC_PARTIAL_UNDECODABLE),
        C("id truncated",
          "\xc1\x01\x00\x09"
          "abcd",
          HC_PARTIAL_UNDECODABLE),
        C("events 0",
          "\xc1\x01\x00\x01"
          "a\x00\x00\x00",
          HC_PARTIAL_UNDECODABLE),
        C("events 2^63",
          "\xc1\x01\x00\x01"
          "a\x00\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01\x00",
          HC_PARTIAL_UNDECODABLE),
        C("flags 2",
          "\xc1\x01\x00\x01"
          "a\x00\x01\x02",
          HC_PARTIAL_UNDECODABLE),
        C("flags missing",
          "\xc1\x01\x00\x01"
          "a\x00\x01",
          HC_PARTIAL_UNDECODABLE),
        C("ts missing",
          "\xc1\x01\x00\x01"
          "a\x00\x01\x01",
          HC_PARTIAL_UNDECODABLE),
        /* base 0, ts_min zigzag 2^64-1 = -2^63 */
        C("ts_min -2^63",
          "\xc1\x01\x00\x01"
          "a\x00\x01\x01\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01\x00",
          HC_PARTIAL_UNDECODABLE),
        /* ts_min 1 (zigzag 2), span 2^63 - 1 */
        C("ts_max past 2^63-1",
          "\xc1\x01\x00\x01"
          "a\x00\x01\x01\x02\xff\xff\xff\xff\xff\xff\xff\xff\x7f",
          HC_PARTIAL_UNDECODABLE),
        C("ids not ascending",
          "\xc1\x02\x00\x01"
          "b\x00\x01\x00\x01"
          "a\x00\x01\x00",
          HC_PARTIAL_UNDECODABLE),
        C("id twice",
          "\xc1\x02\x00\x01"
          "a\x00\x01\x00\x01"
          "a\x00\x01\x00",
          HC_PARTIAL_UNDECODABLE),
        C("longer id first",
          "\xc1\x02\x00\x02"
          "aa\x00\x01\x00\x01"
          "b\x00\x01\x00",
          HC_PARTIAL_UNDECODABLE),
        C("trailing byte",
          "\xc1\x01\x00\x01"
          "a\x00\x01\x00\x00",
          HC_PARTIAL_UNDECODABLE),
        C("bad UTF-8", "\xc1\x01\x00\x01\xff\x00\x01\x00", HC_PARTIAL_BAD_POST_ID),
        C("cut character", "\xc1\x01\x00\x01\xc3\x00\x01\x00", HC_PARTIAL_BAD_POST_ID),
        C("control character", "\xc1\x01\x00\x01\x0a\x00\x01\x00", HC_PARTIAL_BAD_POST_ID),
        C("C1 control", "\xc1\x01\x00\x02\xc2\x85\x00\x01\x00", HC_PARTIAL_BAD_POST_ID),
        C("delta 2 of 1 event",
          "\xc1\x01\x00\x01"
          "a\x04\x01\x00",
          HC_PARTIAL_DELTA_EXCEEDS_EVENTS),
        C("delta -2 of 1 event",
          "\xc1\x01\x00\x01"
          "a\x03\x01\x00",
          HC_PARTIAL_DELTA_EXCEEDS_EVENTS),
        /* undecodable anywhere wins over a rule broken earlier */
        C("bad id, then trailing", "\xc1\x01\x00\x01\xff\x00\x01\x00\x00", HC_PARTIAL_UNDECODABLE),
#undef C
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        size_t n = 99;
        hc_partial_reason_t got = decode((const uint8_t *)cases[i].bytes, cases[i].len, &n);
        if (got != cases[i].want || n != 0) {
            fail_msg("%s: got %s (%zu entries), want %s", cases[i].what, hc_partial_reason_str(got),
                     n, hc_partial_reason_str(cases[i].want));
        }
    }
    /* the smallest valid record, as a control: the cases above differ from it in one thing */
    size_t n;
    assert_int_equal(decode((const uint8_t *)"\xc1\x01\x00\x01"
                                             "a\x00\x01\x00",
                            8, &n),
                     HC_PARTIAL_OK);
    assert_int_equal(n, 1);
    /* over the size bound, however well formed its start */
    uint8_t *big = calloc(HC_PACK_MAX_BYTES + 1, 1);
    assert_non_null(big);
    memcpy(big,
           "\xc1\x01\x00\x01"
           "a\x00\x01\x00",
           8);
    assert_int_equal(decode(big, HC_PACK_MAX_BYTES + 1, &n), HC_PARTIAL_UNDECODABLE);
    free(big);
}

/* Every prefix of a valid record is refused, and never read past (ASan). */
static void truncations(void **state)
{
    (void)state;
    hc_table_entry_t ents[] = {
        {.post_id = "x",
         .post_id_len = 1,
         .delta = -300,
         .events = 400,
         .ts_min = 5,
         .ts_max = 1000000},
        {.post_id = "yy", .post_id_len = 2, .delta = 1, .events = 1, .ts_min = -5, .ts_max = 4},
    };
    uint8_t buf[128];
    size_t taken;
    size_t len = encode(ents, 2, buf, sizeof(buf), &taken);
    for (size_t cut = 0; cut < len; cut++) {
        size_t n;
        assert_int_equal(decode(buf, cut, &n), HC_PARTIAL_UNDECODABLE);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(round_trip),   cmocka_unit_test(documented_bytes),
        cmocka_unit_test(bounds_split), cmocka_unit_test(refusals),
        cmocka_unit_test(truncations),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
