/* Unit tests for the likes.partials record (src/core/partial.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* cmocka.h needs the four headers above first. */
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hotcount/partial.h"

static hc_table_entry_t entry(const char *id, size_t len, int64_t delta, int64_t events,
                              int64_t ts_min, int64_t ts_max)
{
    hc_table_entry_t ent = {id, (uint32_t)len, 0, delta, events, ts_min, ts_max};

    return ent;
}

static void assert_encodes_to(const hc_table_entry_t *ent, const char *want)
{
    char buf[HC_PARTIAL_MAX_BYTES];
    size_t len = hc_partial_encode(ent, buf, sizeof(buf));

    assert_int_equal(len, strlen(want));
    assert_string_equal(buf, want);
}

/* Encodes, decodes and checks every field came back. */
static void assert_round_trips(const hc_table_entry_t *ent)
{
    char buf[HC_PARTIAL_MAX_BYTES];
    char errstr[256] = "";
    hc_partial_t partial;
    size_t len = hc_partial_encode(ent, buf, sizeof(buf));

    assert_true(len > 0);
    if (hc_partial_decode(buf, len, &partial, errstr, sizeof(errstr)) != HC_OK) {
        fail_msg("decode of %s failed: %s", buf, errstr);
    }
    assert_int_equal(partial.post_id_len, ent->post_id_len);
    assert_memory_equal(partial.post_id, ent->post_id, ent->post_id_len);
    assert_int_equal(partial.post_id[partial.post_id_len], '\0');
    assert_true(partial.delta == ent->delta);
    assert_true(partial.events == ent->events);
    assert_true(partial.ts_min == ent->ts_min);
    assert_true(partial.ts_max == ent->ts_max);
}

static void encode_writes_exact_format(void **state)
{
    hc_table_entry_t ent = entry("post-42", 7, -3, 17, 1700000000000, 1700000000999);

    (void)state;
    assert_encodes_to(&ent, "{\"post_id\":\"post-42\",\"delta\":-3,\"events\":17,"
                            "\"ts_min\":1700000000000,\"ts_max\":1700000000999}");
    ent = entry("0", 1, 0, 1, 0, 0);
    assert_encodes_to(&ent,
                      "{\"post_id\":\"0\",\"delta\":0,\"events\":1,\"ts_min\":0,\"ts_max\":0}");
}

static void encode_writes_null_ts_when_none(void **state)
{
    hc_table_entry_t ent = entry("p", 1, 1, 1, HC_TS_NONE, HC_TS_NONE);

    (void)state;
    assert_encodes_to(
        &ent, "{\"post_id\":\"p\",\"delta\":1,\"events\":1,\"ts_min\":null,\"ts_max\":null}");
}

static void encode_writes_int64_extremes(void **state)
{
    hc_table_entry_t ent = entry("p", 1, INT64_MIN, INT64_MAX, INT64_MIN + 1, INT64_MAX);

    (void)state;
    assert_encodes_to(&ent, "{\"post_id\":\"p\",\"delta\":-9223372036854775808,"
                            "\"events\":9223372036854775807,\"ts_min\":-9223372036854775807,"
                            "\"ts_max\":9223372036854775807}");
}

static void encode_escapes_quote_backslash_and_control_chars(void **state)
{
    static const char id[] = "a\"b\\c\n\x01\x1f\x7f\0z \xc3\xa9/";
    hc_table_entry_t ent = entry(id, sizeof(id) - 1, 1, 1, HC_TS_NONE, HC_TS_NONE);

    (void)state;
    assert_encodes_to(&ent,
                      "{\"post_id\":\"a\\\"b\\\\c\\u000a\\u0001\\u001f\\u007f\\u0000z "
                      "\xc3\xa9/\",\"delta\":1,\"events\":1,\"ts_min\":null,\"ts_max\":null}");
}

/* The largest record: a 256-byte id of bytes that each need \u00XX, and 20-character ints. */
static void encode_fits_max_bytes_in_worst_case(void **state)
{
    char id[HC_POST_ID_MAX];
    char buf[HC_PARTIAL_MAX_BYTES];
    hc_table_entry_t ent;

    (void)state;
    memset(id, 0x01, sizeof(id));
    ent = entry(id, sizeof(id), INT64_MIN, INT64_MIN, INT64_MIN + 1, INT64_MIN + 1);
    assert_true(hc_partial_encode(&ent, buf, sizeof(buf)) > 6 * HC_POST_ID_MAX);
    assert_true(hc_partial_encode(&ent, buf, sizeof(buf)) < sizeof(buf));
}

/* Every buffer size from 0 up: 0 until the record fits, no NUL at exactly its length, a NUL
 * after that. Each buffer is its own heap block, so AddressSanitizer sees any overrun. */
static void check_every_size(const hc_table_entry_t *ent)
{
    char full[HC_PARTIAL_MAX_BYTES];
    size_t need = hc_partial_encode(ent, full, sizeof(full));

    assert_true(need > 0);
    for (size_t size = 0; size <= need + 1; size++) {
        char *buf = malloc(size > 0 ? size : 1);
        size_t len;

        assert_non_null(buf);
        memset(buf, '#', size);
        len = hc_partial_encode(ent, size > 0 ? buf : NULL, size);
        if (size < need) {
            assert_int_equal(len, 0);
        } else {
            assert_int_equal(len, need);
            assert_memory_equal(buf, full, need);
            if (size > need) {
                assert_int_equal(buf[need], '\0');
            }
        }
        free(buf);
    }
}

static void encode_returns_zero_when_buffer_too_small(void **state)
{
    char id[HC_POST_ID_MAX];
    hc_table_entry_t ent;

    (void)state;
    ent = entry("p\"q", 3, -1, 1, HC_TS_NONE, HC_TS_NONE);
    check_every_size(&ent);
    for (size_t i = 0; i < sizeof(id); i++) {
        id[i] = (char)(i % 3 == 0 ? 0x02 : i % 3 == 1 ? '\\' : 'x'); /* escapes across the id */
    }
    ent = entry(id, sizeof(id), INT64_MIN, INT64_MAX, INT64_MIN + 1, INT64_MAX);
    check_every_size(&ent);
}

static void round_trip_keeps_every_field(void **state)
{
    static const char escapes[] = "q\"b\\s/\n\r\t\x01\x1f\x7f\0end";
    static const char utf8[] = "caf\xc3\xa9-\xe2\x82\xac-\xf0\x9f\x91\x8d";
    char id[HC_POST_ID_MAX];
    hc_table_entry_t ent;

    (void)state;
    ent = entry("post-1", 6, 1, 1, 1700000000000, 1700000000000);
    assert_round_trips(&ent);
    ent = entry("7", 1, -5, 9, HC_TS_NONE, HC_TS_NONE);
    assert_round_trips(&ent);
    ent = entry(escapes, sizeof(escapes) - 1, 0, 2, -1, 1);
    assert_round_trips(&ent);
    ent = entry(utf8, sizeof(utf8) - 1, 3, 3, 5, 5);
    assert_round_trips(&ent);
    ent = entry("x", 1, INT64_MIN, INT64_MAX, INT64_MIN + 1, INT64_MAX);
    assert_round_trips(&ent);
    ent = entry("x", 1, INT64_MAX, 1, INT64_MAX, INT64_MAX);
    assert_round_trips(&ent);

    memset(id, 'z', sizeof(id));
    ent = entry(id, sizeof(id), 1, 1, HC_TS_NONE, HC_TS_NONE);
    assert_round_trips(&ent);
    for (size_t i = 0; i < sizeof(id); i++) {
        id[i] = (char)(i % 0x80); /* every ASCII byte, control characters included */
    }
    ent = entry(id, sizeof(id), 1, 1, HC_TS_NONE, HC_TS_NONE);
    assert_round_trips(&ent);
}

static void decode_accepts_other_spacing_and_unknown_fields(void **state)
{
    static const char doc[] = " { \"ts_max\" : 9 , \"future\" : [1, {\"a\": null}],\n"
                              "\"events\" : 2, \"post_id\" : \"p\\u00e9\", \"delta\" : -2,"
                              " \"ts_min\" : 8 } ";
    char errstr[256] = "";
    hc_partial_t partial;

    (void)state;
    assert_int_equal(hc_partial_decode(doc, sizeof(doc) - 1, &partial, errstr, sizeof(errstr)),
                     HC_OK);
    assert_int_equal(partial.post_id_len, 3);
    assert_string_equal(partial.post_id, "p\xc3\xa9");
    assert_int_equal(partial.delta, -2);
    assert_int_equal(partial.events, 2);
    assert_int_equal(partial.ts_min, 8);
    assert_int_equal(partial.ts_max, 9);
}

/* Decoding doc must fail with HC_ERR_INVALID, an errstr containing want, and *partial left
 * untouched. */
static void assert_rejects_len(const char *doc, size_t len, const char *want)
{
    char errstr[256] = "";
    hc_partial_t partial;
    hc_partial_t before;

    memset(&partial, 0xa5, sizeof(partial));
    before = partial;
    if (hc_partial_decode(doc, len, &partial, errstr, sizeof(errstr)) != HC_ERR_INVALID) {
        fail_msg("accepted: %.*s", (int)len, doc);
    }
    if (strstr(errstr, want) == NULL) {
        fail_msg("for %.*s: errstr \"%s\" lacks \"%s\"", (int)len, doc, errstr, want);
    }
    assert_memory_equal(&partial, &before, sizeof(partial));
    /* a NULL/0 errstr is legal too */
    assert_int_equal(hc_partial_decode(doc, len, &partial, NULL, 0), HC_ERR_INVALID);
}

static void assert_rejects(const char *doc, const char *want)
{
    assert_rejects_len(doc, strlen(doc), want);
}

static void decode_rejects_missing_fields(void **state)
{
    (void)state;
    assert_rejects("{\"delta\":1,\"events\":1,\"ts_min\":null,\"ts_max\":null}",
                   "missing \"post_id\"");
    assert_rejects("{\"post_id\":\"p\",\"events\":1,\"ts_min\":null,\"ts_max\":null}",
                   "missing \"delta\"");
    assert_rejects("{\"post_id\":\"p\",\"delta\":1,\"ts_min\":null,\"ts_max\":null}",
                   "missing \"events\"");
    assert_rejects("{\"post_id\":\"p\",\"delta\":1,\"events\":1,\"ts_max\":null}",
                   "missing \"ts_min\"");
    assert_rejects("{\"post_id\":\"p\",\"delta\":1,\"events\":1,\"ts_min\":null}",
                   "missing \"ts_max\"");
    assert_rejects("{}", "missing \"post_id\"");
}

static void decode_rejects_wrong_types(void **state)
{
    (void)state;
    assert_rejects("{\"post_id\":42,\"delta\":1,\"events\":1,\"ts_min\":null,\"ts_max\":null}",
                   "\"post_id\" must be a string, not an integer");
    assert_rejects("{\"post_id\":null,\"delta\":1,\"events\":1,\"ts_min\":null,\"ts_max\":null}",
                   "\"post_id\" must be a string, not null");
    assert_rejects("{\"post_id\":\"p\",\"delta\":\"1\",\"events\":1,\"ts_min\":null,"
                   "\"ts_max\":null}",
                   "\"delta\" must be an integer, not a string");
    assert_rejects("{\"post_id\":\"p\",\"delta\":1.0,\"events\":1,\"ts_min\":null,\"ts_max\":null}",
                   "\"delta\" must be an integer, not a real number");
    assert_rejects("{\"post_id\":\"p\",\"delta\":null,\"events\":1,\"ts_min\":null,"
                   "\"ts_max\":null}",
                   "\"delta\" must be an integer, not null");
    assert_rejects("{\"post_id\":\"p\",\"delta\":1,\"events\":true,\"ts_min\":null,"
                   "\"ts_max\":null}",
                   "\"events\" must be an integer, not a boolean");
    assert_rejects("{\"post_id\":\"p\",\"delta\":1,\"events\":1,\"ts_min\":\"5\",\"ts_max\":5}",
                   "\"ts_min\" must be an integer or null, not a string");
    assert_rejects("{\"post_id\":\"p\",\"delta\":1,\"events\":1,\"ts_min\":5,\"ts_max\":[5]}",
                   "\"ts_max\" must be an integer or null, not an array");
    assert_rejects("[1,2]", "must be a JSON object, not an array");
    assert_rejects("\"p\"", "must be a JSON object, not a string");
    assert_rejects("17", "must be a JSON object, not an integer");
}

static void decode_rejects_bad_post_id_length(void **state)
{
    char doc[600];
    char id[HC_POST_ID_MAX + 2];
    char errstr[256];
    hc_partial_t partial;

    (void)state;
    assert_rejects("{\"post_id\":\"\",\"delta\":1,\"events\":1,\"ts_min\":null,\"ts_max\":null}",
                   "\"post_id\" is empty");

    memset(id, 'a', sizeof(id));
    id[HC_POST_ID_MAX + 1] = '\0';
    snprintf(doc, sizeof(doc),
             "{\"post_id\":\"%s\",\"delta\":1,\"events\":1,\"ts_min\":null,\"ts_max\":null}", id);
    assert_rejects(doc, "\"post_id\" is 257 bytes, over 256");

    /* 256 bytes after unescaping is fine even though the JSON text is longer */
    snprintf(doc, sizeof(doc),
             "{\"post_id\":\"\\u00e9%s\",\"delta\":1,\"events\":1,\"ts_min\":null,"
             "\"ts_max\":null}",
             id + 3);
    assert_int_equal(hc_partial_decode(doc, strlen(doc), &partial, errstr, sizeof(errstr)), HC_OK);
    assert_int_equal(partial.post_id_len, HC_POST_ID_MAX);
}

static void decode_rejects_duplicate_keys(void **state)
{
    (void)state;
    assert_rejects("{\"post_id\":\"p\",\"delta\":1,\"delta\":1,\"events\":1,\"ts_min\":null,"
                   "\"ts_max\":null}",
                   "duplicate");
    assert_rejects("{\"post_id\":\"p\",\"post_id\":\"q\",\"delta\":1,\"events\":1,"
                   "\"ts_min\":null,\"ts_max\":null}",
                   "duplicate");
}

static void decode_rejects_events_below_one(void **state)
{
    (void)state;
    assert_rejects("{\"post_id\":\"p\",\"delta\":0,\"events\":0,\"ts_min\":null,\"ts_max\":null}",
                   "\"events\" is 0, must be >= 1");
    assert_rejects("{\"post_id\":\"p\",\"delta\":1,\"events\":-3,\"ts_min\":null,\"ts_max\":null}",
                   "\"events\" is -3, must be >= 1");
}

static void decode_rejects_inconsistent_ts(void **state)
{
    (void)state;
    assert_rejects("{\"post_id\":\"p\",\"delta\":1,\"events\":1,\"ts_min\":5,\"ts_max\":null}",
                   "both null or both integers");
    assert_rejects("{\"post_id\":\"p\",\"delta\":1,\"events\":1,\"ts_min\":null,\"ts_max\":5}",
                   "both null or both integers");
    assert_rejects("{\"post_id\":\"p\",\"delta\":1,\"events\":1,\"ts_min\":6,\"ts_max\":5}",
                   "\"ts_min\" 6 is after \"ts_max\" 5");
    /* INT64_MIN is the in-memory "no timestamp": as a number it would silently become null */
    assert_rejects("{\"post_id\":\"p\",\"delta\":1,\"events\":1,"
                   "\"ts_min\":-9223372036854775808,\"ts_max\":5}",
                   "\"ts_min\" -9223372036854775808 is out of range");
}

static void decode_rejects_garbage(void **state)
{
    static const char nul_inside[] = "{\"post_id\":\"p\"\0,\"delta\":1}";
    static const char good[] =
        "{\"post_id\":\"p\",\"delta\":1,\"events\":1,\"ts_min\":null,\"ts_max\":null}";

    (void)state;
    assert_rejects_len("", 0, "empty message");
    assert_rejects_len(NULL, 0, "empty message");
    assert_rejects("garbage", "bad JSON");
    assert_rejects("{", "bad JSON");
    assert_rejects("{\"post_id\":\"p\",\"delta\":1,\"events\":1,\"ts_min\":null,\"ts_max\":null}x",
                   "bad JSON");
    assert_rejects("{\"post_id\":\"p\",\"delta\":1,\"events\":1,\"ts_min\":null,\"ts_max\":null}{}",
                   "bad JSON");
    assert_rejects_len(nul_inside, sizeof(nul_inside) - 1, "bad JSON");
    assert_rejects("{\"post_id\":\"\xff\",\"delta\":1,\"events\":1,\"ts_min\":null,"
                   "\"ts_max\":null}",
                   "bad JSON");
    /* beyond int64 */
    assert_rejects("{\"post_id\":\"p\",\"delta\":9223372036854775808,\"events\":1,"
                   "\"ts_min\":null,\"ts_max\":null}",
                   "bad JSON");
    /* a truncated copy of a good record never decodes */
    for (size_t len = 1; len < sizeof(good) - 1; len++) {
        assert_rejects_len(good, len, "bad JSON");
    }
}

static void count_encode_writes_the_changelog_format(void **state)
{
    char buf[HC_PARTIAL_MAX_BYTES];
    size_t len = hc_count_encode("p\"1\n", 4, -3, 1732950000123, buf, sizeof(buf));

    (void)state;
    assert_string_equal(buf,
                        "{\"post_id\":\"p\\\"1\\u000a\",\"likes\":-3,\"as_of\":1732950000123}");
    assert_int_equal(len, strlen(buf));
    /* a buffer one byte short is refused, never overrun */
    assert_int_equal(hc_count_encode("p\"1\n", 4, -3, 1732950000123, buf, len - 1), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(encode_writes_exact_format),
        cmocka_unit_test(count_encode_writes_the_changelog_format),
        cmocka_unit_test(encode_writes_null_ts_when_none),
        cmocka_unit_test(encode_writes_int64_extremes),
        cmocka_unit_test(encode_escapes_quote_backslash_and_control_chars),
        cmocka_unit_test(encode_fits_max_bytes_in_worst_case),
        cmocka_unit_test(encode_returns_zero_when_buffer_too_small),
        cmocka_unit_test(round_trip_keeps_every_field),
        cmocka_unit_test(decode_accepts_other_spacing_and_unknown_fields),
        cmocka_unit_test(decode_rejects_missing_fields),
        cmocka_unit_test(decode_rejects_wrong_types),
        cmocka_unit_test(decode_rejects_bad_post_id_length),
        cmocka_unit_test(decode_rejects_duplicate_keys),
        cmocka_unit_test(decode_rejects_events_below_one),
        cmocka_unit_test(decode_rejects_inconsistent_ts),
        cmocka_unit_test(decode_rejects_garbage),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
