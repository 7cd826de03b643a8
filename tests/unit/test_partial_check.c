/* hc_partial_check (include/core/hotcount/partial_check.h): stage 2's rules for an untrusted
 * partial, one reason per rule, the first broken rule winning. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "hotcount/partial_check.h"

static hc_partial_reason_t check(const char *json)
{
    hc_partial_t pt;
    char errstr[256];
    return hc_partial_check(json, strlen(json), &pt, errstr, sizeof(errstr));
}

/* A partial with the given post id (raw JSON string content) and delta/events. */
static hc_partial_reason_t check_fields(const char *post_json, const char *delta,
                                        const char *events)
{
    char json[512];
    snprintf(json, sizeof(json),
             "{\"post_id\":\"%s\",\"delta\":%s,\"events\":%s,\"ts_min\":null,\"ts_max\":null}",
             post_json, delta, events);
    return check(json);
}

static void stage1_records_pass(void **state)
{
    (void)state;
    hc_table_entry_t ent = {.post_id = "p\xc3\xa9",
                            .post_id_len = 3,
                            .delta = -3,
                            .events = 5,
                            .ts_min = -9,
                            .ts_max = 7};
    char buf[HC_PARTIAL_MAX_BYTES];
    size_t len = hc_partial_encode(&ent, buf, sizeof(buf));
    hc_partial_t pt;
    char errstr[256];
    assert_int_equal(hc_partial_check(buf, len, &pt, errstr, sizeof(errstr)), HC_PARTIAL_OK);
    assert_int_equal(pt.delta, -3);
    assert_int_equal(check_fields("x", "0", "1"), HC_PARTIAL_OK);
    assert_int_equal(check_fields("x", "-1", "1"), HC_PARTIAL_OK);
}

static void undecodable_records(void **state)
{
    (void)state;
    hc_partial_t pt;
    char errstr[256];
    assert_int_equal(hc_partial_check(NULL, 0, &pt, errstr, sizeof(errstr)),
                     HC_PARTIAL_UNDECODABLE);
    assert_int_equal(check("not json"), HC_PARTIAL_UNDECODABLE);
    assert_int_equal(check("[1]"), HC_PARTIAL_UNDECODABLE);
    assert_int_equal(check_fields("x", "1", "0"), HC_PARTIAL_UNDECODABLE);
    assert_int_equal(check("{\"post_id\":\"x\",\"delta\":1,\"events\":1}"), HC_PARTIAL_UNDECODABLE);
}

static void timestamps_out_of_order_or_half_null(void **state)
{
    (void)state;
    assert_int_equal(
        check("{\"post_id\":\"t\",\"delta\":1,\"events\":1,\"ts_min\":5,\"ts_max\":4}"),
        HC_PARTIAL_BAD_TS);
    assert_int_equal(
        check("{\"post_id\":\"t\",\"delta\":1,\"events\":1,\"ts_min\":null,\"ts_max\":4}"),
        HC_PARTIAL_BAD_TS);
    assert_int_equal(
        check("{\"post_id\":\"t\",\"delta\":1,\"events\":1,\"ts_min\":4,\"ts_max\":null}"),
        HC_PARTIAL_BAD_TS);
}

/* The event rules for a post id: C0 (escaped, as stage 1's encoder would never write it for a
 * valid event), DEL, C1 (raw UTF-8 and escaped), invalid UTF-8 bytes. */
static void post_ids_no_event_may_carry(void **state)
{
    (void)state;
    assert_int_equal(check_fields("a\\u0000b", "1", "1"), HC_PARTIAL_BAD_POST_ID);
    assert_int_equal(check_fields("a\\u0001", "1", "1"), HC_PARTIAL_BAD_POST_ID);
    assert_int_equal(check_fields("a\\u007f", "1", "1"), HC_PARTIAL_BAD_POST_ID);
    assert_int_equal(check_fields("a\xc2\x80", "1", "1"), HC_PARTIAL_BAD_POST_ID);
    assert_int_equal(check_fields("a\\u009f", "1", "1"), HC_PARTIAL_BAD_POST_ID);
    assert_int_equal(check_fields("a\xc2\xa0", "1", "1"), HC_PARTIAL_OK); /* U+00A0: not C1 */
}

static void delta_beyond_events(void **state)
{
    (void)state;
    assert_int_equal(check_fields("x", "1000000000", "1"), HC_PARTIAL_DELTA_EXCEEDS_EVENTS);
    assert_int_equal(check_fields("x", "-2", "1"), HC_PARTIAL_DELTA_EXCEEDS_EVENTS);
    assert_int_equal(check_fields("x", "-9223372036854775808", "9223372036854775807"),
                     HC_PARTIAL_DELTA_EXCEEDS_EVENTS);
    assert_int_equal(check_fields("x", "-9223372036854775807", "9223372036854775807"),
                     HC_PARTIAL_OK);
}

static void reason_strings_are_stable(void **state)
{
    (void)state;
    assert_string_equal(hc_partial_reason_str(HC_PARTIAL_OK), "ok");
    assert_string_equal(hc_partial_reason_str(HC_PARTIAL_UNDECODABLE), "partial_undecodable");
    assert_string_equal(hc_partial_reason_str(HC_PARTIAL_BAD_TS), "partial_bad_ts");
    assert_string_equal(hc_partial_reason_str(HC_PARTIAL_BAD_POST_ID), "partial_bad_post_id");
    assert_string_equal(hc_partial_reason_str(HC_PARTIAL_DELTA_EXCEEDS_EVENTS),
                        "partial_delta_exceeds_events");
    assert_string_equal(hc_partial_reason_str(HC_PARTIAL_OVERFLOW), "partial_overflow");
    assert_string_equal(hc_partial_reason_str(HC_PARTIAL_STORE_REFUSED), "store_refused");
    assert_string_equal(hc_partial_reason_str(HC_PARTIAL_REASON_COUNT), "unknown");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(stage1_records_pass),
        cmocka_unit_test(undecodable_records),
        cmocka_unit_test(timestamps_out_of_order_or_half_null),
        cmocka_unit_test(post_ids_no_event_may_carry),
        cmocka_unit_test(delta_beyond_events),
        cmocka_unit_test(reason_strings_are_stable),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
