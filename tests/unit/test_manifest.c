/* Unit tests for a stage-1 window's offset ranges and manifest record (src/core/manifest.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* cmocka.h needs the four headers above first. */
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "hotcount/manifest.h"

static const hc_manifest_meta_t meta = {
    .transactional_id = "hotcount-stage1-s1-a",
    .instance_id = "s1-a",
    .incarnation_ms = 1732950000123,
    .window = 7,
    .topic = "likes.raw",
    .events = 4,
    .invalid = 1,
    .partials = 3,
    .likes = -2,
};

static void assert_encodes_to(const hc_manifest_t *man, const hc_manifest_meta_t *m,
                              const char *want)
{
    char *buf = NULL;
    size_t len = 0;

    assert_int_equal(hc_manifest_encode(man, m, &buf, &len), HC_OK);
    assert_non_null(buf);
    assert_string_equal(buf, want);
    assert_int_equal(len, strlen(want));
    free(buf);
}

static void record_tracks_first_next_and_messages_per_partition(void **state)
{
    hc_manifest_t man;

    (void)state;
    hc_manifest_init(&man);
    assert_null(hc_manifest_range(&man, 0));
    assert_int_equal(hc_manifest_record(&man, 3, 100), HC_OK);
    assert_int_equal(hc_manifest_record(&man, 3, 101), HC_OK);
    /* a skipped offset (a control record, a compacted message) leaves messages < next - first */
    assert_int_equal(hc_manifest_record(&man, 3, 103), HC_OK);
    assert_int_equal(hc_manifest_record(&man, 0, 0), HC_OK);

    const hc_manifest_range_t *r = hc_manifest_range(&man, 3);
    assert_non_null(r);
    assert_int_equal(r->first, 100);
    assert_int_equal(r->next, 104);
    assert_int_equal(r->messages, 3);
    r = hc_manifest_range(&man, 0);
    assert_non_null(r);
    assert_int_equal(r->first, 0);
    assert_int_equal(r->next, 1);
    assert_int_equal(r->messages, 1);
    assert_null(hc_manifest_range(&man, 1));
    assert_null(hc_manifest_range(&man, -1));
    assert_null(hc_manifest_range(&man, man.cap));
    hc_manifest_fini(&man);
}

static void record_grows_past_the_initial_partitions(void **state)
{
    hc_manifest_t man;

    (void)state;
    hc_manifest_init(&man);
    assert_int_equal(hc_manifest_record(&man, 1000, 5), HC_OK);
    assert_true(man.cap > 1000);
    assert_int_equal(hc_manifest_range(&man, 1000)->first, 5);
    for (int32_t p = 0; p < 1000; p++) {
        assert_null(hc_manifest_range(&man, p));
    }
    hc_manifest_fini(&man);
}

static void record_rejects_backwards_and_negative_without_change(void **state)
{
    hc_manifest_t man;

    (void)state;
    hc_manifest_init(&man);
    assert_int_equal(hc_manifest_record(&man, 2, 50), HC_OK);
    assert_int_equal(hc_manifest_record(&man, 2, 50), HC_ERR_INVALID);
    assert_int_equal(hc_manifest_record(&man, 2, 49), HC_ERR_INVALID);
    assert_int_equal(hc_manifest_record(&man, -1, 0), HC_ERR_INVALID);
    assert_int_equal(hc_manifest_record(&man, 2, -1), HC_ERR_INVALID);
    const hc_manifest_range_t *r = hc_manifest_range(&man, 2);
    assert_int_equal(r->first, 50);
    assert_int_equal(r->next, 51);
    assert_int_equal(r->messages, 1);
    hc_manifest_fini(&man);
}

static void clear_forgets_every_range(void **state)
{
    hc_manifest_t man;

    (void)state;
    hc_manifest_init(&man);
    assert_int_equal(hc_manifest_record(&man, 4, 9), HC_OK);
    hc_manifest_clear(&man);
    assert_null(hc_manifest_range(&man, 4));
    /* the next window starts a fresh range, even at a lower offset (after a rewind) */
    assert_int_equal(hc_manifest_record(&man, 4, 2), HC_OK);
    assert_int_equal(hc_manifest_range(&man, 4)->first, 2);
    assert_int_equal(hc_manifest_range(&man, 4)->messages, 1);
    hc_manifest_fini(&man);
    hc_manifest_fini(NULL);
}

static void encode_writes_exact_format_in_partition_order(void **state)
{
    hc_manifest_t man;

    (void)state;
    hc_manifest_init(&man);
    assert_int_equal(hc_manifest_record(&man, 15, 7), HC_OK);
    assert_int_equal(hc_manifest_record(&man, 2, 40), HC_OK);
    assert_int_equal(hc_manifest_record(&man, 2, 41), HC_OK);
    assert_encodes_to(&man, &meta,
                      "{\"transactional_id\":\"hotcount-stage1-s1-a\",\"instance_id\":\"s1-a\","
                      "\"incarnation_ms\":1732950000123,\"window\":7,\"topic\":\"likes.raw\","
                      "\"events\":4,\"invalid\":1,\"partials\":3,\"likes\":-2,\"ranges\":["
                      "{\"partition\":2,\"first\":40,\"next\":42,\"messages\":2},"
                      "{\"partition\":15,\"first\":7,\"next\":8,\"messages\":1}]}");
    hc_manifest_fini(&man);
}

static void encode_writes_empty_ranges(void **state)
{
    hc_manifest_t man;

    (void)state;
    hc_manifest_init(&man);
    assert_encodes_to(&man, &meta,
                      "{\"transactional_id\":\"hotcount-stage1-s1-a\",\"instance_id\":\"s1-a\","
                      "\"incarnation_ms\":1732950000123,\"window\":7,\"topic\":\"likes.raw\","
                      "\"events\":4,\"invalid\":1,\"partials\":3,\"likes\":-2,\"ranges\":[]}");
    hc_manifest_fini(&man);
}

static void encode_escapes_strings_into_valid_json(void **state)
{
    hc_manifest_t man;
    hc_manifest_meta_t m = meta;
    char *buf = NULL;
    size_t len = 0;
    json_error_t jerr;

    (void)state;
    m.transactional_id = "g\"roup\\\n-s1";
    m.topic = "raw\x01\x7f";
    hc_manifest_init(&man);
    assert_int_equal(hc_manifest_record(&man, 0, INT64_MAX - 1), HC_OK);
    assert_int_equal(hc_manifest_encode(&man, &m, &buf, &len), HC_OK);
    json_t *root = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        fail_msg("not JSON: %s: %s", buf, jerr.text);
    }
    assert_string_equal(json_string_value(json_object_get(root, "transactional_id")),
                        m.transactional_id);
    assert_string_equal(json_string_value(json_object_get(root, "topic")), m.topic);
    json_t *r = json_array_get(json_object_get(root, "ranges"), 0);
    assert_true(json_integer_value(json_object_get(r, "next")) == INT64_MAX);
    json_decref(root);
    free(buf);
    hc_manifest_fini(&man);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(record_tracks_first_next_and_messages_per_partition),
        cmocka_unit_test(record_grows_past_the_initial_partitions),
        cmocka_unit_test(record_rejects_backwards_and_negative_without_change),
        cmocka_unit_test(clear_forgets_every_range),
        cmocka_unit_test(encode_writes_exact_format_in_partition_order),
        cmocka_unit_test(encode_writes_empty_ranges),
        cmocka_unit_test(encode_escapes_strings_into_valid_json),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
