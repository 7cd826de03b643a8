/* hc_event_parse: the contract's event rules, reason precedence, RFC 8259 corner cases, and a
 * differential test against the jansson reference (tests/support/event_ref.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* cmocka.h needs the four headers above; keep it in its own include block */
#include <cmocka.h>

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "event_divergence.h"
#include "event_ref.h"
#include "hotcount/event.h"

#define MAX_BYTES 4096

static void print_escaped(const char *s, size_t n)
{
    for (size_t i = 0; i < n && i < 400; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c < 0x7f && c != '\\') {
            print_message("%c", c);
        } else {
            print_message("\\x%02x", c);
        }
    }
    print_message("%s\n", n > 400 ? "..." : "");
}

static hc_event_reason_t parse_n(const char *s, size_t n, hc_event_t *ev)
{
    return hc_event_parse(s, n, MAX_BYTES, ev);
}

/* A heap copy of exactly n bytes, so AddressSanitizer sees any read past the message. */
static char *exact_copy(const char *s, size_t n)
{
    char *copy = malloc(n > 0 ? n : 1);
    assert_non_null(copy);
    memcpy(copy, s, n);
    return copy;
}

static void check_reason(hc_event_reason_t want, const char *s, size_t n, size_t max_bytes,
                         const char *file, int line)
{
    hc_event_t ev;
    char *copy = exact_copy(s, n);
    hc_event_reason_t got = hc_event_parse(copy, n, max_bytes, &ev);

    free(copy);
    if (got != want) {
        print_message("%s:%d: want %s, got %s for: ", file, line, hc_event_reason_str(want),
                      hc_event_reason_str(got));
        print_escaped(s, n);
        _fail(file, line);
    }
}

/* EXPECT works on string literals (sizeof keeps embedded NUL bytes); EXPECT_N on buffers. */
#define EXPECT(want, lit)                                                                          \
    check_reason((want), (lit), sizeof(lit) - 1, MAX_BYTES, __FILE__, __LINE__)
#define EXPECT_N(want, buf, n) check_reason((want), (buf), (n), MAX_BYTES, __FILE__, __LINE__)
#define EXPECT_N_MAX(want, buf, n, max) check_reason((want), (buf), (n), (max), __FILE__, __LINE__)
#define EXPECT_MAX(want, lit, max)                                                                 \
    check_reason((want), (lit), sizeof(lit) - 1, (max), __FILE__, __LINE__)

static hc_event_t parse_ok(const char *s, size_t n, const char *file, int line)
{
    hc_event_t ev;
    check_reason(HC_EVENT_OK, s, n, MAX_BYTES, file, line);
    assert_int_equal(parse_n(s, n, &ev), HC_EVENT_OK);
    return ev;
}
#define PARSE_OK(lit) parse_ok((lit), sizeof(lit) - 1, __FILE__, __LINE__)

#define assert_post_id(ev, lit)                                                                    \
    do {                                                                                           \
        assert_int_equal((ev).post_id_len, sizeof(lit) - 1);                                       \
        assert_memory_equal((ev).post_id, (lit), sizeof(lit) - 1);                                 \
        assert_int_equal((ev).post_id[(ev).post_id_len], '\0');                                    \
    } while (0)

#define assert_user_id(ev, lit)                                                                    \
    do {                                                                                           \
        assert_true((ev).has_user_id);                                                             \
        assert_int_equal((ev).user_id_len, sizeof(lit) - 1);                                       \
        assert_memory_equal((ev).user_id, (lit), sizeof(lit) - 1);                                 \
    } while (0)

/* ---- valid events ---------------------------------------------------------------------- */

static void parse_accepts_typical_event(void **state)
{
    (void)state;
    hc_event_t ev = PARSE_OK("{\"post_id\":\"p123456\",\"user_id\":\"u98765\",\"op\":\"like\","
                             "\"ts\":1732950000000,\"event_id\":\"e-abc\"}");
    assert_post_id(ev, "p123456");
    assert_user_id(ev, "u98765");
    assert_int_equal(ev.delta, 1);
    assert_true(ev.has_ts);
    assert_true(ev.ts == 1732950000000);
}

static void parse_gives_unlike_delta_minus_one(void **state)
{
    (void)state;
    hc_event_t ev = PARSE_OK("{\"op\":\"unlike\",\"post_id\":\"p1\"}");
    assert_int_equal(ev.delta, -1);
    assert_post_id(ev, "p1");
}

static void parse_defaults_missing_op_to_like(void **state)
{
    (void)state;
    hc_event_t ev = PARSE_OK("{\"post_id\":\"p1\"}");
    assert_int_equal(ev.delta, 1);
    assert_false(ev.has_ts);
    assert_false(ev.has_user_id);
    assert_int_equal(ev.user_id_len, 0);
}

static void parse_accepts_escaped_op(void **state)
{
    (void)state;
    hc_event_t ev = PARSE_OK("{\"post_id\":\"p\",\"op\":\"\\u0075nlik\\u0065\"}");
    assert_int_equal(ev.delta, -1);
}

static void parse_counts_integer_post_id_as_its_decimal_string(void **state)
{
    (void)state;
    hc_event_t a = PARSE_OK("{\"post_id\":42}");
    hc_event_t b = PARSE_OK("{\"post_id\":\"42\"}");
    hc_event_t z = PARSE_OK("{\"post_id\":0}");
    assert_post_id(a, "42");
    assert_int_equal(a.post_id_len, b.post_id_len);
    assert_memory_equal(a.post_id, b.post_id, a.post_id_len + 1);
    assert_post_id(z, "0");
}

static void parse_accepts_256_digit_integer_post_id_and_rejects_257(void **state)
{
    char buf[600];
    char digits[300];
    hc_event_t ev;
    (void)state;

    memset(digits, '7', sizeof(digits));
    digits[0] = '1';
    snprintf(buf, sizeof(buf), "{\"post_id\":%.256s}", digits);
    assert_int_equal(parse_n(buf, strlen(buf), &ev), HC_EVENT_OK);
    assert_int_equal(ev.post_id_len, 256);
    assert_memory_equal(ev.post_id, digits, 256);
    snprintf(buf, sizeof(buf), "{\"post_id\":%.257s}", digits);
    EXPECT_N(HC_EVENT_POST_ID_TOO_LONG, buf, strlen(buf));
    /* a 300-digit number elsewhere is just a number */
    snprintf(buf, sizeof(buf), "{\"post_id\":1,\"n\":%.300s}", digits);
    EXPECT_N(HC_EVENT_OK, buf, strlen(buf));
}

static void parse_decodes_escapes_in_post_id(void **state)
{
    (void)state;
    hc_event_t ev =
        PARSE_OK("{\"post_id\":\"p\\u0031\\\"x\\\\y\\/z\\u00e9\\u20AC\\ud83d\\ude00\"}");
    assert_post_id(ev, "p1\"x\\y/z\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80");
    ev = PARSE_OK("{\"post_id\":\"caf\xc3\xa9 \xf0\x9f\x91\x8d\"}");
    assert_post_id(ev, "caf\xc3\xa9 \xf0\x9f\x91\x8d");
}

static void make_post_id_event(char *buf, size_t size, size_t n, const char *unit)
{
    size_t off = (size_t)snprintf(buf, size, "{\"post_id\":\"");
    for (size_t i = 0; i < n; i++) {
        off += (size_t)snprintf(buf + off, size - off, "%s", unit);
    }
    snprintf(buf + off, size - off, "\",\"op\":\"like\"}");
}

static void parse_accepts_256_byte_post_id_and_rejects_257(void **state)
{
    char buf[4096];
    hc_event_t ev;
    (void)state;

    make_post_id_event(buf, sizeof(buf), 256, "a");
    assert_int_equal(parse_n(buf, strlen(buf), &ev), HC_EVENT_OK);
    assert_int_equal(ev.post_id_len, 256);
    assert_int_equal(ev.post_id[256], '\0');
    make_post_id_event(buf, sizeof(buf), 257, "a");
    EXPECT_N(HC_EVENT_POST_ID_TOO_LONG, buf, strlen(buf));
}

static void parse_measures_post_id_after_unescaping(void **state)
{
    char buf[4096];
    hc_event_t ev;
    (void)state;

    /* 256 decoded bytes from 1536 raw bytes */
    make_post_id_event(buf, sizeof(buf), 256, "\\u0041");
    assert_int_equal(parse_n(buf, strlen(buf), &ev), HC_EVENT_OK);
    assert_int_equal(ev.post_id_len, 256);
    assert_int_equal(ev.post_id[255], 'A');
    make_post_id_event(buf, sizeof(buf), 257, "\\u0041");
    EXPECT_N(HC_EVENT_POST_ID_TOO_LONG, buf, strlen(buf));
    /* 128 two-byte characters are 256 bytes; 86 three-byte ones are 258 */
    make_post_id_event(buf, sizeof(buf), 128, "\xc3\xa9");
    EXPECT_N(HC_EVENT_OK, buf, strlen(buf));
    make_post_id_event(buf, sizeof(buf), 86, "\\u20ac");
    EXPECT_N(HC_EVENT_POST_ID_TOO_LONG, buf, strlen(buf));
}

static void parse_accepts_user_id_string_or_integer_as_written(void **state)
{
    (void)state;
    hc_event_t ev = PARSE_OK("{\"post_id\":\"p\",\"user_id\":-12345}");
    assert_user_id(ev, "-12345");
    ev = PARSE_OK("{\"post_id\":\"p\",\"user_id\":0}");
    assert_user_id(ev, "0");
    ev = PARSE_OK("{\"post_id\":\"p\",\"user_id\":-0}");
    assert_user_id(ev, "-0");
    ev = PARSE_OK("{\"post_id\":\"p\",\"user_id\":123456789012345678901234567890}");
    assert_user_id(ev, "123456789012345678901234567890");
    ev = PARSE_OK("{\"post_id\":\"p\",\"user_id\":\"\"}");
    assert_user_id(ev, "");
    ev = PARSE_OK("{\"post_id\":\"p\",\"user_id\":\"a\\u0000b\\n\"}");
    assert_user_id(ev, "a\0b\n");
}

static void parse_keeps_first_256_bytes_of_long_user_id(void **state)
{
    char buf[2048];
    char uid[600];
    hc_event_t ev;
    (void)state;

    for (size_t i = 0; i < 500; i++) {
        uid[i] = (char)('a' + i % 26);
    }
    snprintf(buf, sizeof(buf), "{\"post_id\":\"p\",\"user_id\":\"%.500s\"}", uid);
    assert_int_equal(parse_n(buf, strlen(buf), &ev), HC_EVENT_OK);
    assert_true(ev.has_user_id);
    assert_int_equal(ev.user_id_len, HC_USER_ID_MAX);
    assert_memory_equal(ev.user_id, uid, HC_USER_ID_MAX);
    assert_int_equal(ev.user_id[HC_USER_ID_MAX], '\0');
}

static void parse_reads_ts_over_the_whole_int64_range(void **state)
{
    (void)state;
    hc_event_t ev = PARSE_OK("{\"post_id\":\"p\",\"ts\":9223372036854775807}");
    assert_true(ev.has_ts && ev.ts == INT64_MAX);
    ev = PARSE_OK("{\"post_id\":\"p\",\"ts\":-9223372036854775808}");
    assert_true(ev.has_ts && ev.ts == INT64_MIN);
    ev = PARSE_OK("{\"post_id\":\"p\",\"ts\":0}");
    assert_true(ev.has_ts && ev.ts == 0);
    ev = PARSE_OK("{\"post_id\":\"p\",\"ts\":-1}");
    assert_true(ev.has_ts && ev.ts == -1);
}

static void parse_reads_ts_of_every_digit_count(void **state)
{
    char buf[128];
    char digits[24];
    hc_event_t ev;
    (void)state;

    /* 1..19 digits, both signs, so both the 8-digit steps and the tail loop are exercised */
    for (int n = 1; n <= 19; n++) {
        for (int neg = 0; neg <= 1; neg++) {
            for (int i = 0; i < n; i++) {
                digits[i] = (char)('1' + (i * 7 + n) % 9);
            }
            digits[n] = '\0';
            snprintf(buf, sizeof(buf), "{\"post_id\":\"p\",\"ts\":%s%s}", neg ? "-" : "", digits);
            assert_int_equal(parse_n(buf, strlen(buf), &ev), HC_EVENT_OK);
            assert_true(ev.has_ts);
            assert_true(ev.ts == (neg ? -1 : 1) * strtoll(digits, NULL, 10));
        }
    }
    ev = PARSE_OK("{\"post_id\":\"p\",\"ts\":10000000000000000}");
    assert_true(ev.ts == 10000000000000000);
    ev = PARSE_OK("{\"post_id\":\"p\",\"ts\":99999999}");
    assert_true(ev.ts == 99999999);
    ev = PARSE_OK("{\"post_id\":\"p\",\"ts\":1234567890123456789}");
    assert_true(ev.ts == 1234567890123456789);
    EXPECT(HC_EVENT_BAD_TS, "{\"post_id\":\"p\",\"ts\":12345678901234567890}");
    EXPECT(HC_EVENT_BAD_TS, "{\"post_id\":\"p\",\"ts\":12345678.9}");
    EXPECT(HC_EVENT_BAD_TS, "{\"post_id\":\"p\",\"ts\":12345678e1}");
    EXPECT(HC_EVENT_NOT_JSON, "{\"post_id\":\"p\",\"ts\":1234567:}");
    EXPECT(HC_EVENT_NOT_JSON, "{\"post_id\":\"p\",\"ts\":12345678/}");
}

static void parse_ignores_unknown_fields_of_any_shape(void **state)
{
    (void)state;
    hc_event_t ev = PARSE_OK(
        "{\"meta\":{\"a\":[1,2.5,-3e-7,true,false,null,{\"post_id\":\"inner\"},[]],\"b\":{}},"
        "\"post_id\":\"p9\",\"tags\":[\"x\",\"y\"],\"n\":null,\"op\":\"unlike\",\"f\":-0.0E+0,"
        "\"\":\"\",\"k\\u00e9y\":\"\\ud83d\\ude00\",\"event_id\":\"e\"}");
    assert_post_id(ev, "p9");
    assert_int_equal(ev.delta, -1);
}

static void parse_accepts_json_whitespace_around_every_token(void **state)
{
    (void)state;
    hc_event_t ev =
        PARSE_OK(" \t\r\n{ \"post_id\" :\t\"p\" ,\r\n\"op\"\n:\"unlike\" , \"x\" : [ 1 , "
                 "{ } , [ ] ] }\r\n\t ");
    assert_post_id(ev, "p");
    assert_int_equal(ev.delta, -1);
}

static void parse_accepts_empty_key_and_empty_values(void **state)
{
    (void)state;
    PARSE_OK("{\"\":\"\",\"post_id\":\"p\",\"a\":{},\"b\":[],\"c\":{\"\":{}}}");
    EXPECT(HC_EVENT_MISSING_POST_ID, "{}");
    EXPECT(HC_EVENT_MISSING_POST_ID, "{\"\":1}");
}

static void parse_accepts_escaped_nul_in_unknown_fields_and_keys(void **state)
{
    (void)state;
    PARSE_OK("{\"post_id\":\"p\",\"x\":\"\\u0000\",\"\\u0000\":1}");
}

static void parse_accepts_huge_numbers_in_unknown_fields(void **state)
{
    char buf[1200];
    char digits[1001];
    (void)state;

    memset(digits, '9', 1000);
    digits[1000] = '\0';
    snprintf(buf, sizeof(buf), "{\"post_id\":\"p\",\"n\":-%s.%se-99999999999999999999}", digits,
             digits + 900);
    EXPECT_N(HC_EVENT_OK, buf, strlen(buf));
    EXPECT(HC_EVENT_OK, "{\"post_id\":\"p\",\"a\":1e999,\"b\":-1E-999,\"c\":18446744073709551616}");
}

static void parse_accepts_valid_utf8_boundaries(void **state)
{
    (void)state;
    /* U+00A0 (the first 2-byte character past the C1 controls), U+07FF, U+0800, U+D7FF,
     * U+E000, U+FFFF, U+10000, U+10FFFF */
    PARSE_OK("{\"post_id\":\"\xc2\xa0\xdf\xbf\xe0\xa0\x80\xed\x9f\xbf\xee\x80\x80\xef\xbf\xbf"
             "\xf0\x90\x80\x80\xf4\x8f\xbf\xbf\"}");
    PARSE_OK("{\"post_id\":\"p\",\"\xe2\x82\xac\":\"\\uDBFF\\uDFFF\"}");
}

static void parse_accepts_nesting_up_to_max_depth(void **state)
{
    char buf[512];
    size_t off = 0;
    (void)state;

    /* the event object is level 1, so 63 more containers reach HC_EVENT_MAX_DEPTH */
    off += (size_t)sprintf(buf + off, "{\"post_id\":\"p\",\"x\":");
    for (int i = 0; i < HC_EVENT_MAX_DEPTH - 1; i++) {
        buf[off++] = (i % 2) ? '[' : '{';
        if (!(i % 2)) {
            off += (size_t)sprintf(buf + off, "\"k\":");
        }
    }
    off += (size_t)sprintf(buf + off, "1");
    for (int i = HC_EVENT_MAX_DEPTH - 2; i >= 0; i--) {
        buf[off++] = (i % 2) ? ']' : '}';
    }
    buf[off++] = '}';
    EXPECT_N(HC_EVENT_OK, buf, off);
}

static void parse_handles_one_megabyte_value_when_allowed(void **state)
{
    const size_t big = 1u << 20;
    char *buf = malloc(big + 100);
    hc_event_t ev;
    size_t off;
    (void)state;

    assert_non_null(buf);
    off = (size_t)sprintf(buf, "{\"post_id\":\"p\",\"blob\":\"");
    for (size_t i = 0; i < big; i++) {
        buf[off + i] = (char)('a' + i % 26);
    }
    off += big;
    off += (size_t)sprintf(buf + off, "\"}");
    assert_int_equal(hc_event_parse(buf, off, 2 * big, &ev), HC_EVENT_OK);
    assert_int_equal(hc_event_parse(buf, off, MAX_BYTES, &ev), HC_EVENT_TOO_LARGE);
    assert_int_equal(hc_event_parse(buf, off, off, &ev), HC_EVENT_OK);
    assert_int_equal(hc_event_parse(buf, off, off - 1, &ev), HC_EVENT_TOO_LARGE);

    /* the same megabyte as the post_id, and as escapes and UTF-8 */
    off = (size_t)sprintf(buf, "{\"post_id\":\"");
    memset(buf + off, 'x', big);
    off += big;
    off += (size_t)sprintf(buf + off, "\"}");
    assert_int_equal(hc_event_parse(buf, off, 2 * big, &ev), HC_EVENT_POST_ID_TOO_LONG);
    off = (size_t)sprintf(buf, "{\"post_id\":\"p\",\"b\":\"");
    for (size_t i = 0; i + 6 <= big; i += 6) {
        memcpy(buf + off, (i / 6) % 2 ? "\\u00e9" : "\xe2\x82\xac\\n\\\"", 6);
        off += 6;
    }
    off += (size_t)sprintf(buf + off, "\"}");
    assert_int_equal(hc_event_parse(buf, off, 2 * big, &ev), HC_EVENT_OK);
    free(buf);
}

static void parse_enforces_max_bytes_exactly(void **state)
{
    static const char msg[] = "{\"post_id\":\"p1\"}";
    const size_t n = sizeof(msg) - 1;
    hc_event_t ev;
    (void)state;

    assert_int_equal(hc_event_parse(msg, n, n, &ev), HC_EVENT_OK);
    assert_int_equal(hc_event_parse(msg, n, n - 1, &ev), HC_EVENT_TOO_LARGE);
    assert_int_equal(hc_event_parse(msg, n, 0, &ev), HC_EVENT_TOO_LARGE);
}

/* ---- invalid events, one class at a time ------------------------------------------------ */

static void parse_rejects_empty_and_null_input(void **state)
{
    hc_event_t ev;
    (void)state;

    assert_int_equal(hc_event_parse("", 0, MAX_BYTES, &ev), HC_EVENT_EMPTY);
    assert_int_equal(hc_event_parse(NULL, 0, MAX_BYTES, &ev), HC_EVENT_EMPTY);
    assert_int_equal(hc_event_parse(NULL, 10, MAX_BYTES, &ev), HC_EVENT_EMPTY);
    assert_int_equal(hc_event_parse("", 0, 0, &ev), HC_EVENT_EMPTY);
}

static void parse_rejects_missing_post_id(void **state)
{
    (void)state;
    EXPECT(HC_EVENT_MISSING_POST_ID, "{\"user_id\":\"u\",\"op\":\"like\"}");
    EXPECT(HC_EVENT_MISSING_POST_ID, "{\"Post_id\":\"p\"}");
    EXPECT(HC_EVENT_MISSING_POST_ID, "{\"post_id \":\"p\"}");
    EXPECT(HC_EVENT_MISSING_POST_ID, "{\"x\":{\"post_id\":\"p\"}}");
}

static void parse_rejects_empty_post_id(void **state)
{
    (void)state;
    EXPECT(HC_EVENT_EMPTY_POST_ID, "{\"post_id\":\"\"}");
}

static void parse_rejects_post_id_with_control_bytes(void **state)
{
    (void)state;
    EXPECT(HC_EVENT_POST_ID_CONTROL, "{\"post_id\":\"a\\u0000\"}");
    EXPECT(HC_EVENT_POST_ID_CONTROL, "{\"post_id\":\"a\\nb\"}");
    EXPECT(HC_EVENT_POST_ID_CONTROL, "{\"post_id\":\"\\t\"}");
    EXPECT(HC_EVENT_POST_ID_CONTROL, "{\"post_id\":\"\\u001F\"}");
    EXPECT(HC_EVENT_POST_ID_CONTROL, "{\"post_id\":\"\\u007f\"}");
    EXPECT(HC_EVENT_POST_ID_CONTROL, "{\"post_id\":\"a\x7f\"}");
    EXPECT(HC_EVENT_OK, "{\"post_id\":\"\\u0020~\"}");
}

/* C1 controls U+0080..U+009F (UTF-8 C2 80..C2 9F) are control characters too: raw or escaped,
 * alone or after other text; the neighbours U+007E and U+00A0 are not. */
static void parse_rejects_post_id_with_c1_controls(void **state)
{
    (void)state;
    EXPECT(HC_EVENT_POST_ID_CONTROL, "{\"post_id\":\"\xc2\x80\"}");
    EXPECT(HC_EVENT_POST_ID_CONTROL, "{\"post_id\":\"ab\xc2\x9f\"}");
    EXPECT(HC_EVENT_POST_ID_CONTROL, "{\"post_id\":\"x\xc2\x85y\"}");
    EXPECT(HC_EVENT_POST_ID_CONTROL, "{\"post_id\":\"\\u0080\"}");
    EXPECT(HC_EVENT_POST_ID_CONTROL, "{\"post_id\":\"a\\u009F\"}");
    EXPECT(HC_EVENT_POST_ID_CONTROL, "{\"post_id\":\"\xc3\xa9\xc2\x9b[0m\"}");
    EXPECT(HC_EVENT_OK, "{\"post_id\":\"\xc2\xa0\"}");
    EXPECT(HC_EVENT_OK, "{\"post_id\":\"\\u00a0\xc2\xa9\"}");
    EXPECT(HC_EVENT_OK, "{\"post_id\":\"\xc3\x80\"}"); /* U+00C0: C3 80, not C2 80 */
    assert_false(hc_post_id_valid("\xc2\x80", 2));
    assert_false(hc_post_id_valid("a\xc2\x9f", 3));
    assert_false(hc_post_id_valid("a\x1b", 2));
    assert_false(hc_post_id_valid("\xc2", 1)); /* truncated UTF-8 */
    assert_false(hc_post_id_valid("", 0));
    assert_true(hc_post_id_valid("\xc2\xa0", 2));
    assert_true(hc_post_id_valid("post-1", 6));
}

static void parse_rejects_post_id_of_wrong_type(void **state)
{
    (void)state;
    EXPECT(HC_EVENT_BAD_POST_ID_TYPE, "{\"post_id\":-1}");
    EXPECT(HC_EVENT_BAD_POST_ID_TYPE, "{\"post_id\":-0}");
    EXPECT(HC_EVENT_BAD_POST_ID_TYPE, "{\"post_id\":1.0}");
    EXPECT(HC_EVENT_BAD_POST_ID_TYPE, "{\"post_id\":1e3}");
    EXPECT(HC_EVENT_BAD_POST_ID_TYPE, "{\"post_id\":true}");
    EXPECT(HC_EVENT_BAD_POST_ID_TYPE, "{\"post_id\":false}");
    EXPECT(HC_EVENT_BAD_POST_ID_TYPE, "{\"post_id\":null}");
    EXPECT(HC_EVENT_BAD_POST_ID_TYPE, "{\"post_id\":[\"p\"]}");
    EXPECT(HC_EVENT_BAD_POST_ID_TYPE, "{\"post_id\":{\"id\":\"p\"}}");
}

static void parse_rejects_user_id_of_wrong_type(void **state)
{
    (void)state;
    EXPECT(HC_EVENT_BAD_USER_ID_TYPE, "{\"post_id\":\"p\",\"user_id\":1.5}");
    EXPECT(HC_EVENT_BAD_USER_ID_TYPE, "{\"post_id\":\"p\",\"user_id\":1E2}");
    EXPECT(HC_EVENT_BAD_USER_ID_TYPE, "{\"post_id\":\"p\",\"user_id\":null}");
    EXPECT(HC_EVENT_BAD_USER_ID_TYPE, "{\"post_id\":\"p\",\"user_id\":true}");
    EXPECT(HC_EVENT_BAD_USER_ID_TYPE, "{\"post_id\":\"p\",\"user_id\":[1]}");
    EXPECT(HC_EVENT_BAD_USER_ID_TYPE, "{\"post_id\":\"p\",\"user_id\":{}}");
}

static void parse_rejects_op_that_is_not_a_string(void **state)
{
    (void)state;
    EXPECT(HC_EVENT_BAD_OP_TYPE, "{\"post_id\":\"p\",\"op\":1}");
    EXPECT(HC_EVENT_BAD_OP_TYPE, "{\"post_id\":\"p\",\"op\":null}");
    EXPECT(HC_EVENT_BAD_OP_TYPE, "{\"post_id\":\"p\",\"op\":[\"like\"]}");
    EXPECT(HC_EVENT_BAD_OP_TYPE, "{\"post_id\":\"p\",\"op\":true}");
}

static void parse_rejects_unknown_op(void **state)
{
    (void)state;
    EXPECT(HC_EVENT_UNKNOWN_OP, "{\"post_id\":\"p\",\"op\":\"Like\"}");
    EXPECT(HC_EVENT_UNKNOWN_OP, "{\"post_id\":\"p\",\"op\":\"like \"}");
    EXPECT(HC_EVENT_UNKNOWN_OP, "{\"post_id\":\"p\",\"op\":\"\"}");
    EXPECT(HC_EVENT_UNKNOWN_OP, "{\"post_id\":\"p\",\"op\":\"like\\u0000\"}");
    EXPECT(HC_EVENT_UNKNOWN_OP, "{\"post_id\":\"p\",\"op\":\"unlikes\"}");
    EXPECT(HC_EVENT_UNKNOWN_OP, "{\"post_id\":\"p\",\"op\":\"dislike\"}");
}

static void parse_rejects_ts_that_is_not_an_int64(void **state)
{
    (void)state;
    EXPECT(HC_EVENT_BAD_TS, "{\"post_id\":\"p\",\"ts\":1.5}");
    EXPECT(HC_EVENT_BAD_TS, "{\"post_id\":\"p\",\"ts\":1.0}");
    EXPECT(HC_EVENT_BAD_TS, "{\"post_id\":\"p\",\"ts\":1e12}");
    EXPECT(HC_EVENT_BAD_TS, "{\"post_id\":\"p\",\"ts\":9223372036854775808}");
    EXPECT(HC_EVENT_BAD_TS, "{\"post_id\":\"p\",\"ts\":-9223372036854775809}");
    EXPECT(HC_EVENT_BAD_TS, "{\"post_id\":\"p\",\"ts\":99999999999999999999999}");
    EXPECT(HC_EVENT_BAD_TS, "{\"post_id\":\"p\",\"ts\":\"1732950000000\"}");
    EXPECT(HC_EVENT_BAD_TS, "{\"post_id\":\"p\",\"ts\":null}");
    EXPECT(HC_EVENT_BAD_TS, "{\"post_id\":\"p\",\"ts\":{}}");
}

static void parse_rejects_event_id_that_is_not_a_string(void **state)
{
    (void)state;
    EXPECT(HC_EVENT_OK, "{\"post_id\":\"p\",\"event_id\":\"\"}");
    EXPECT(HC_EVENT_BAD_EVENT_ID, "{\"post_id\":\"p\",\"event_id\":1}");
    EXPECT(HC_EVENT_BAD_EVENT_ID, "{\"post_id\":\"p\",\"event_id\":null}");
    EXPECT(HC_EVENT_BAD_EVENT_ID, "{\"post_id\":\"p\",\"event_id\":[]}");
}

static void parse_rejects_syntax_errors_as_not_json(void **state)
{
    (void)state;
    EXPECT(HC_EVENT_NOT_JSON, "{");
    EXPECT(HC_EVENT_NOT_JSON, "{\"post_id\"");
    EXPECT(HC_EVENT_NOT_JSON, "{\"post_id\":");
    EXPECT(HC_EVENT_NOT_JSON, "{\"post_id\":\"p\"");
    EXPECT(HC_EVENT_NOT_JSON, "{\"post_id\":\"p\",}");
    EXPECT(HC_EVENT_NOT_JSON, "{\"post_id\":\"p\" \"op\":\"like\"}");
    EXPECT(HC_EVENT_NOT_JSON, "{\"post_id\"=\"p\"}");
    EXPECT(HC_EVENT_NOT_JSON, "{post_id:\"p\"}");
    EXPECT(HC_EVENT_NOT_JSON, "{'post_id':'p'}");
    EXPECT(HC_EVENT_NOT_JSON, "{\"post_id\":\"p\",\"a\":[1,]}");
    EXPECT(HC_EVENT_NOT_JSON, "{\"post_id\":\"p\",\"a\":[1 2]}");
    EXPECT(HC_EVENT_NOT_JSON, "{\"post_id\":\"p\",\"a\":{\"b\"}}");
    EXPECT(HC_EVENT_NOT_JSON, "{\"post_id\":\"p\",\"a\":[}");
    EXPECT(HC_EVENT_NOT_JSON, "{\"post_id\":\"p\",\"a\":tru}");
    EXPECT(HC_EVENT_NOT_JSON, "{\"post_id\":\"p\",\"a\":True}");
    EXPECT(HC_EVENT_NOT_JSON, "{\"post_id\":\"p\",\"a\":nul}");
    EXPECT(HC_EVENT_NOT_JSON, "{\"post_id\":\"p\",\"a\":undefined}");
    EXPECT(HC_EVENT_NOT_JSON, "{\"post_id\":\"p\" // comment\n}");
    EXPECT(HC_EVENT_NOT_JSON, "   ");
    EXPECT(HC_EVENT_NOT_JSON, "\"p");
    EXPECT(HC_EVENT_NOT_JSON, "}");
}

static void parse_rejects_malformed_numbers(void **state)
{
    (void)state;
    EXPECT(HC_EVENT_NOT_JSON, "{\"post_id\":01}");
    EXPECT(HC_EVENT_NOT_JSON, "{\"post_id\":\"p\",\"n\":00}");
    EXPECT(HC_EVENT_NOT_JSON, "{\"post_id\":\"p\",\"n\":-01}");
    EXPECT(HC_EVENT_NOT_JSON, "{\"post_id\":\"p\",\"n\":1.}");
    EXPECT(HC_EVENT_NOT_JSON, "{\"post_id\":\"p\",\"n\":.5}");
    EXPECT(HC_EVENT_NOT_JSON, "{\"post_id\":\"p\",\"n\":-}");
    EXPECT(HC_EVENT_NOT_JSON, "{\"post_id\":\"p\",\"n\":+1}");
    EXPECT(HC_EVENT_NOT_JSON, "{\"post_id\":\"p\",\"n\":1e}");
    EXPECT(HC_EVENT_NOT_JSON, "{\"post_id\":\"p\",\"n\":1e+}");
    EXPECT(HC_EVENT_NOT_JSON, "{\"post_id\":\"p\",\"n\":1.e5}");
    EXPECT(HC_EVENT_NOT_JSON, "{\"post_id\":\"p\",\"n\":--1}");
    EXPECT(HC_EVENT_NOT_JSON, "{\"post_id\":\"p\",\"n\":0x10}");
    EXPECT(HC_EVENT_NOT_JSON, "{\"post_id\":\"p\",\"n\":NaN}");
    EXPECT(HC_EVENT_NOT_JSON, "{\"post_id\":\"p\",\"n\":Infinity}");
    EXPECT(HC_EVENT_NOT_JSON, "{\"post_id\":\"p\",\"n\":-Infinity}");
    EXPECT(HC_EVENT_NOT_JSON, "{\"post_id\":\"p\",\"n\":1.5.3}");
    EXPECT(HC_EVENT_NOT_JSON, "{\"post_id\":\"p\",\"ts\":1");
}

static void parse_rejects_invalid_escapes(void **state)
{
    (void)state;
    EXPECT(HC_EVENT_NOT_JSON, "{\"post_id\":\"\\x41\"}");
    EXPECT(HC_EVENT_NOT_JSON, "{\"post_id\":\"\\a\"}");
    EXPECT(HC_EVENT_NOT_JSON, "{\"post_id\":\"\\'\"}");
    EXPECT(HC_EVENT_NOT_JSON, "{\"post_id\":\"\\U0041\"}");
    EXPECT(HC_EVENT_NOT_JSON, "{\"post_id\":\"\\u12\"}");
    EXPECT(HC_EVENT_NOT_JSON, "{\"post_id\":\"\\u12G4\"}");
    EXPECT(HC_EVENT_NOT_JSON, "{\"post_id\":\"p\\");
    EXPECT(HC_EVENT_NOT_JSON, "{\"post_id\":\"\\u00");
    EXPECT(HC_EVENT_NOT_JSON, "{\"post_id\":\"\\ud800\\u12x4\"}");
}

static void parse_rejects_raw_control_bytes_in_strings(void **state)
{
    (void)state;
    EXPECT(HC_EVENT_NOT_JSON, "{\"post_id\":\"a\nb\"}");
    EXPECT(HC_EVENT_NOT_JSON, "{\"post_id\":\"a\tb\"}");
    EXPECT(HC_EVENT_NOT_JSON, "{\"post_id\":\"p\",\"x\":\"\x01\"}");
    EXPECT(HC_EVENT_NOT_JSON, "{\"post_id\":\"p\",\"x\x1f\":1}");
}

static void parse_rejects_nul_bytes_anywhere(void **state)
{
    (void)state;
    EXPECT(HC_EVENT_NOT_JSON, "{\"post_id\":\"a\0b\"}");
    EXPECT(HC_EVENT_NOT_JSON, "{\"post_id\":\"p\",\0\"op\":\"like\"}");
    EXPECT(HC_EVENT_NOT_JSON, "{\"post_id\":\"p\",\"n\":1\0}");
    EXPECT(HC_EVENT_NOT_JSON, "{\"post_id\":\"p\",\"n\":true\0}");
    EXPECT(HC_EVENT_NOT_JSON, "\0{\"post_id\":\"p\"}");
    EXPECT(HC_EVENT_TRAILING_GARBAGE, "{\"post_id\":\"p\"}\0");
    EXPECT(HC_EVENT_NOT_JSON, "\0");
}

static void parse_rejects_other_whitespace(void **state)
{
    (void)state;
    EXPECT(HC_EVENT_NOT_JSON, "\f{\"post_id\":\"p\"}");
    EXPECT(HC_EVENT_NOT_JSON, "{\v\"post_id\":\"p\"}");
    EXPECT(HC_EVENT_NOT_JSON, "{\"post_id\":\xc2\xa0\"p\"}");
    EXPECT(HC_EVENT_TRAILING_GARBAGE, "{\"post_id\":\"p\"}\f");
}

static void parse_treats_utf8_bom_as_not_json(void **state)
{
    (void)state;
    EXPECT(HC_EVENT_NOT_JSON, "\xef\xbb\xbf{\"post_id\":\"p\"}");
}

static void parse_rejects_non_object_top_level(void **state)
{
    (void)state;
    EXPECT(HC_EVENT_NOT_OBJECT, "[]");
    EXPECT(HC_EVENT_NOT_OBJECT, "[{\"post_id\":\"p\"}]");
    EXPECT(HC_EVENT_NOT_OBJECT, "\"post_id\"");
    EXPECT(HC_EVENT_NOT_OBJECT, "42");
    EXPECT(HC_EVENT_NOT_OBJECT, " -1.5e3 ");
    EXPECT(HC_EVENT_NOT_OBJECT, "true");
    EXPECT(HC_EVENT_NOT_OBJECT, "null");
}

static void parse_rejects_trailing_garbage(void **state)
{
    (void)state;
    EXPECT(HC_EVENT_TRAILING_GARBAGE, "{\"post_id\":\"p\"}x");
    EXPECT(HC_EVENT_TRAILING_GARBAGE, "{\"post_id\":\"p\"} {}");
    EXPECT(HC_EVENT_TRAILING_GARBAGE, "{\"post_id\":\"p\"}}");
    EXPECT(HC_EVENT_TRAILING_GARBAGE, "{\"post_id\":\"p\"}\n{\"post_id\":\"q\"}\n");
    EXPECT(HC_EVENT_TRAILING_GARBAGE, "{\"post_id\":\"p\"},");
    EXPECT(HC_EVENT_TRAILING_GARBAGE, "[] []");
    EXPECT(HC_EVENT_TRAILING_GARBAGE, "0123");
    EXPECT(HC_EVENT_TRAILING_GARBAGE, "truex");
}

static void parse_rejects_duplicate_post_id(void **state)
{
    (void)state;
    EXPECT(HC_EVENT_DUPLICATE_KEY, "{\"post_id\":\"a\",\"post_id\":\"b\"}");
    EXPECT(HC_EVENT_DUPLICATE_KEY, "{\"post_id\":\"a\",\"post_id\":\"a\"}");
    EXPECT(HC_EVENT_DUPLICATE_KEY, "{\"post_id\":\"a\",\"post\\u005fid\":\"b\"}");
    EXPECT(HC_EVENT_DUPLICATE_KEY, "{\"\\u0070ost_id\":1,\"post_id\":1}");
}

static void parse_rejects_duplicate_known_and_unknown_keys(void **state)
{
    (void)state;
    EXPECT(HC_EVENT_DUPLICATE_KEY, "{\"post_id\":\"a\",\"op\":\"like\",\"op\":\"like\"}");
    EXPECT(HC_EVENT_DUPLICATE_KEY, "{\"ts\":1,\"post_id\":\"a\",\"ts\":1}");
    EXPECT(HC_EVENT_DUPLICATE_KEY, "{\"user_id\":1,\"post_id\":\"a\",\"user_id\":1}");
    EXPECT(HC_EVENT_DUPLICATE_KEY, "{\"event_id\":\"\",\"post_id\":\"a\",\"event_id\":\"\"}");
    EXPECT(HC_EVENT_DUPLICATE_KEY, "{\"x\":1,\"post_id\":\"a\",\"x\":2}");
    EXPECT(HC_EVENT_DUPLICATE_KEY, "{\"\":1,\"post_id\":\"a\",\"\":2}");
    EXPECT(HC_EVENT_DUPLICATE_KEY, "{\"\xc3\xa9\":1,\"post_id\":\"a\",\"\\u00e9\":2}");
    EXPECT(HC_EVENT_DUPLICATE_KEY,
           "{\"\\ud83d\\ude00\":1,\"post_id\":\"a\",\"\xf0\x9f\x98\x80\":2}");
    EXPECT(HC_EVENT_DUPLICATE_KEY, "{\"\\u0000\":1,\"post_id\":\"a\",\"\\u0000\":2}");
    EXPECT(HC_EVENT_OK, "{\"x\":1,\"post_id\":\"a\",\"X\":2,\"x \":3,\"\\u0000x\":4}");
}

static void parse_rejects_duplicate_keys_in_nested_objects(void **state)
{
    (void)state;
    EXPECT(HC_EVENT_DUPLICATE_KEY, "{\"post_id\":\"a\",\"m\":{\"k\":1,\"k\":2}}");
    EXPECT(HC_EVENT_DUPLICATE_KEY,
           "{\"post_id\":\"a\",\"m\":[[{\"a\":{},\"b\":1,\"\\u0061\":[]}]]}");
    EXPECT(HC_EVENT_DUPLICATE_KEY, "{\"post_id\":{\"a\":1,\"a\":1}}");
    EXPECT(HC_EVENT_DUPLICATE_KEY, "{\"m\":{\"x\":{\"y\":1},\"x\":2},\"post_id\":\"a\"}");
    /* the same key in different objects is fine */
    EXPECT(HC_EVENT_OK,
           "{\"post_id\":\"a\",\"m\":{\"k\":1},\"n\":{\"k\":1},\"k\":{\"k\":{\"k\":1}}}");
    EXPECT(HC_EVENT_OK, "{\"post_id\":\"a\",\"a\":{\"b\":1},\"b\":[{\"a\":1},{\"a\":2}]}");
    EXPECT(HC_EVENT_OK, "{\"post_id\":\"a\",\"m\":{\"post_id\":1,\"op\":2}}");
}

/* Builds {"post_id":"p","o":{ k0..k(n-1) }} with values of every shape, so the deferred
 * duplicate check (objects with more keys than the scanner checks inline) has to skip
 * strings, escapes and nesting, across several of its batches when n is large. */
static size_t make_many_keys(char *buf, size_t size, int n, const char *extra, bool nested)
{
    size_t off = (size_t)snprintf(buf, size, "{\"post_id\":\"p\",%s", nested ? "\"o\":{" : "");
    static const char *const values[] = {"1",          "\"s\\\"}]\"", "[1,{\"a\":\"]\"}]",
                                         "{\"k0\":1}", "-1.5e3",      "true",
                                         "null",       " \"x\" ",     "\"\\\\\""};

    for (int i = 0; i < n; i++) {
        off += (size_t)snprintf(buf + off, size - off, "%s\"k%d\" : %s", i ? "," : "", i,
                                values[i % 9]);
        if (!nested && i == n / 2) {
            off += (size_t)snprintf(buf + off, size - off, ",\"op\":\"like\"");
        }
    }
    off += (size_t)snprintf(buf + off, size - off, "%s%s}", extra, nested ? "}" : "");
    return off;
}

#define MANY_CAP 131072

static void expect_many(hc_event_reason_t want, const char *buf, size_t n, const char *file,
                        int line)
{
    hc_event_t ev;

    check_reason(want, buf, n, MANY_CAP, file, line);
    /* none of these touch a documented divergence, so jansson must give the same verdict */
    if (hc_event_parse_ref(buf, n, MANY_CAP, &ev) != want) {
        print_message("reference disagrees\n");
        _fail(file, line);
    }
}
#define EXPECT_MANY(want, keys, extra, nested)                                                     \
    do {                                                                                           \
        size_t n_ = make_many_keys(buf, sizeof(buf), (keys), (extra), (nested));                   \
        expect_many((want), buf, n_, __FILE__, __LINE__);                                          \
    } while (0)

static void parse_finds_duplicates_among_many_keys(void **state)
{
    static char buf[MANY_CAP];
    (void)state;

    for (int nested = 0; nested <= 1; nested++) {
        EXPECT_MANY(HC_EVENT_OK, 400, "", nested);
        EXPECT_MANY(HC_EVENT_DUPLICATE_KEY, 400, ",\"k5\":1", nested);
        EXPECT_MANY(HC_EVENT_DUPLICATE_KEY, 400, ",\"k39\\u0039\":1", nested);
        EXPECT_MANY(HC_EVENT_DUPLICATE_KEY, 400, ",\"k200\":1", nested);
        EXPECT_MANY(HC_EVENT_DUPLICATE_KEY, 400, ",\"k399\":1", nested);
        EXPECT_MANY(HC_EVENT_DUPLICATE_KEY, 400, ",\"k400\":1,\"k400\":2", nested);
        EXPECT_MANY(HC_EVENT_DUPLICATE_KEY, 400, ",\"k400\":{\"k1\":1,\"k1\":2}", nested);
        EXPECT_MANY(HC_EVENT_OK, 400, ",\"k400\":{\"k1\":1,\"k2\":2}", nested);
        EXPECT_MANY(HC_EVENT_OK, 400, ",\"k400\":1,\"K5\":1,\"k5 \":1", nested);
        /* 3000 keys: six batches; duplicates of a recorded key, within a late batch, across
         * batches, and of the very last key */
        EXPECT_MANY(HC_EVENT_OK, 3000, "", nested);
        EXPECT_MANY(HC_EVENT_DUPLICATE_KEY, 3000, ",\"k3\":1", nested);
        EXPECT_MANY(HC_EVENT_DUPLICATE_KEY, 3000, ",\"k40\":1", nested);
        EXPECT_MANY(HC_EVENT_DUPLICATE_KEY, 3000, ",\"k1500\":1", nested);
        EXPECT_MANY(HC_EVENT_DUPLICATE_KEY, 3000, ",\"k2999\":1", nested);
        EXPECT_MANY(HC_EVENT_DUPLICATE_KEY, 3000, ",\"x\":1,\"\\u0078\":1", nested);
        EXPECT_MANY(HC_EVENT_OK, 3000, ",\"k3000\":{\"k1\":1,\"k2\":2}", nested);
    }
    /* a repeated known field after the inline limit is still a duplicate */
    EXPECT_MANY(HC_EVENT_DUPLICATE_KEY, 400, ",\"op\":\"like\"", false);
    EXPECT_MANY(HC_EVENT_DUPLICATE_KEY, 400, ",\"post_id\":\"q\"", false);
}

static void parse_rejects_invalid_utf8(void **state)
{
    (void)state;
    EXPECT(HC_EVENT_BAD_UTF8, "{\"post_id\":\"\x80\"}");             /* lone continuation */
    EXPECT(HC_EVENT_BAD_UTF8, "{\"post_id\":\"\xc0\xaf\"}");         /* overlong '/' */
    EXPECT(HC_EVENT_BAD_UTF8, "{\"post_id\":\"\xc1\xbf\"}");         /* overlong */
    EXPECT(HC_EVENT_BAD_UTF8, "{\"post_id\":\"\xe0\x80\xaf\"}");     /* overlong 3-byte */
    EXPECT(HC_EVENT_BAD_UTF8, "{\"post_id\":\"\xe0\x9f\xbf\"}");     /* overlong 3-byte */
    EXPECT(HC_EVENT_BAD_UTF8, "{\"post_id\":\"\xf0\x80\x80\xaf\"}"); /* overlong 4-byte */
    EXPECT(HC_EVENT_BAD_UTF8, "{\"post_id\":\"\xf0\x8f\xbf\xbf\"}"); /* overlong 4-byte */
    EXPECT(HC_EVENT_BAD_UTF8, "{\"post_id\":\"\xed\xa0\x80\"}");     /* U+D800 encoded */
    EXPECT(HC_EVENT_BAD_UTF8, "{\"post_id\":\"\xed\xbf\xbf\"}");     /* U+DFFF encoded */
    EXPECT(HC_EVENT_BAD_UTF8, "{\"post_id\":\"\xf4\x90\x80\x80\"}"); /* U+110000 */
    EXPECT(HC_EVENT_BAD_UTF8, "{\"post_id\":\"\xf5\x80\x80\x80\"}");
    EXPECT(HC_EVENT_BAD_UTF8, "{\"post_id\":\"\xf8\x88\x80\x80\x80\"}");
    EXPECT(HC_EVENT_BAD_UTF8, "{\"post_id\":\"\xfe\xff\"}");
    EXPECT(HC_EVENT_BAD_UTF8, "{\"post_id\":\"\xc3\"}"); /* truncated by the quote */
    EXPECT(HC_EVENT_BAD_UTF8, "{\"post_id\":\"\xe2\x82\"}");
    EXPECT(HC_EVENT_BAD_UTF8, "{\"post_id\":\"\xf0\x9f\x98\"}");
    EXPECT(HC_EVENT_BAD_UTF8, "{\"post_id\":\"\xc3");            /* truncated by the end */
    EXPECT(HC_EVENT_BAD_UTF8, "{\"post_id\":\"p\",\"\xff\":1}"); /* in a key */
    EXPECT(HC_EVENT_BAD_UTF8, "{\"post_id\":\"p\",\"x\":[\"\xc3\x28\"]}");
    EXPECT(HC_EVENT_BAD_UTF8, "{\xff\"post_id\":\"p\"}"); /* outside strings */
    EXPECT(HC_EVENT_BAD_UTF8, "\xff");
    EXPECT(HC_EVENT_BAD_UTF8, "{\"post_id\":\"p\"}\xc3");
}

static void parse_rejects_lone_surrogate_escapes_as_bad_utf8(void **state)
{
    (void)state;
    EXPECT(HC_EVENT_BAD_UTF8, "{\"post_id\":\"\\ud800\"}");
    EXPECT(HC_EVENT_BAD_UTF8, "{\"post_id\":\"\\uDBFFx\"}");
    EXPECT(HC_EVENT_BAD_UTF8, "{\"post_id\":\"\\udc00\"}");
    EXPECT(HC_EVENT_BAD_UTF8, "{\"post_id\":\"\\udc00\\ud800\"}"); /* mis-ordered */
    EXPECT(HC_EVENT_BAD_UTF8, "{\"post_id\":\"\\ud800\\ud800\"}");
    EXPECT(HC_EVENT_BAD_UTF8, "{\"post_id\":\"\\ud800\\u0041\"}");
    EXPECT(HC_EVENT_BAD_UTF8, "{\"post_id\":\"\\ud800\\n\"}");
    EXPECT(HC_EVENT_BAD_UTF8, "{\"post_id\":\"p\",\"\\ud83d\":1}");
    EXPECT(HC_EVENT_OK, "{\"post_id\":\"\\ud800\\udc00\"}");
    EXPECT(HC_EVENT_NOT_JSON, "{\"post_id\":\"\\ud800"); /* truncated, not lone */
}

static void make_deep(char *buf, size_t *n, int containers, bool top_array)
{
    size_t off = 0;

    if (!top_array) {
        off += (size_t)sprintf(buf, "{\"post_id\":\"p\",\"x\":");
        containers--;
    }
    for (int i = 0; i < containers; i++) {
        buf[off++] = '[';
    }
    for (int i = 0; i < containers; i++) {
        buf[off++] = ']';
    }
    if (!top_array) {
        buf[off++] = '}';
    }
    *n = off;
}

static void parse_rejects_nesting_deeper_than_max_depth(void **state)
{
    char buf[8192];
    size_t n;
    (void)state;

    make_deep(buf, &n, HC_EVENT_MAX_DEPTH, false);
    EXPECT_N(HC_EVENT_OK, buf, n);
    make_deep(buf, &n, HC_EVENT_MAX_DEPTH + 1, false);
    EXPECT_N(HC_EVENT_TOO_DEEP, buf, n);
    make_deep(buf, &n, 3000, false);
    EXPECT_N_MAX(HC_EVENT_TOO_DEEP, buf, n, sizeof(buf));
    make_deep(buf, &n, HC_EVENT_MAX_DEPTH, true);
    EXPECT_N(HC_EVENT_NOT_OBJECT, buf, n);
    make_deep(buf, &n, HC_EVENT_MAX_DEPTH + 1, true);
    EXPECT_N(HC_EVENT_TOO_DEEP, buf, n);
    /* unterminated deep nesting is too_deep once level 65 opens, before the truncation */
    EXPECT_N(HC_EVENT_TOO_DEEP, buf, HC_EVENT_MAX_DEPTH + 1);
    EXPECT_N(HC_EVENT_NOT_JSON, buf, HC_EVENT_MAX_DEPTH);
}

static void parse_rejects_binary_garbage(void **state)
{
    uint64_t x = 0x9e3779b97f4a7c15u;
    char buf[512];
    hc_event_t ev;
    (void)state;

    for (int i = 0; i < 20000; i++) {
        size_t n = 1 + (size_t)(i % 500);
        for (size_t j = 0; j < n; j++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            buf[j] = (char)(x >> 24);
        }
        if (i % 3 == 0) {
            buf[0] = '{'; /* get past the first byte now and then */
        }
        char *copy = exact_copy(buf, n);
        hc_event_reason_t r = hc_event_parse(copy, n, sizeof(buf), &ev);
        free(copy);
        assert_true(r > HC_EVENT_OK && r < HC_EVENT_REASON_COUNT);
    }
}

/* ---- reason precedence ------------------------------------------------------------------ */

static void parse_checks_size_before_reading_any_byte(void **state)
{
    (void)state;
    EXPECT_MAX(HC_EVENT_TOO_LARGE, "\xff\xfe not json at all", 5);
    EXPECT_MAX(HC_EVENT_TOO_LARGE, "{\"post_id\":\"a\",\"post_id\":\"a\"}", 10);
}

static void parse_reports_the_first_wellformedness_error_in_document_order(void **state)
{
    (void)state;
    EXPECT(HC_EVENT_BAD_UTF8, "{\"post_id\":\"\xff\",]");
    EXPECT(HC_EVENT_NOT_JSON, "{\"post_id\":\"p\",] \"\xff\"");
    EXPECT(HC_EVENT_BAD_UTF8, "{\"a\":\"\\ud800\",]");
    EXPECT(HC_EVENT_NOT_JSON, "{\"a\":\"\\q\\ud800\"}");
    EXPECT(HC_EVENT_TOO_DEEP,
           "{\"a\":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[ \xff");
    EXPECT(HC_EVENT_BAD_UTF8, "{\"post_id\":\"p\"}\xff");
    EXPECT(HC_EVENT_TRAILING_GARBAGE, "{\"post_id\":\"p\"} x\xff");
    /* an unexpected byte that is also invalid UTF-8 is bad_utf8 */
    EXPECT(HC_EVENT_BAD_UTF8, "{\"post_id\":\"p\",\"n\":1\xff}");
    EXPECT(HC_EVENT_NOT_JSON, "{\"post_id\":\"p\",\"n\":1\xc3\xa9}");
}

static void parse_reports_syntax_errors_before_not_object(void **state)
{
    (void)state;
    EXPECT(HC_EVENT_NOT_JSON, "[1,]");
    EXPECT(HC_EVENT_TRAILING_GARBAGE, "[1] x");
    EXPECT(HC_EVENT_BAD_UTF8, "[\"\xc0\x80\"]");
    EXPECT(HC_EVENT_NOT_OBJECT, "[1]");
}

static void parse_reports_not_object_before_duplicate_key(void **state)
{
    (void)state;
    EXPECT(HC_EVENT_NOT_OBJECT, "[{\"a\":1,\"a\":2}]");
}

static void parse_reports_wellformedness_errors_before_duplicate_key(void **state)
{
    (void)state;
    EXPECT(HC_EVENT_NOT_JSON, "{\"post_id\":\"a\",\"post_id\":\"b\",}");
    EXPECT(HC_EVENT_BAD_UTF8, "{\"x\":1,\"x\":2,\"y\":\"\xc0\"}");
    EXPECT(HC_EVENT_TRAILING_GARBAGE, "{\"x\":1,\"x\":2} x");
    EXPECT(HC_EVENT_TOO_DEEP, "{\"x\":1,\"x\":2,\"d\":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["
                              "[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]"
                              "]]]]]]]]]]]]]]]]]]]]]]]]]}");
}

static void parse_reports_duplicate_key_before_field_errors(void **state)
{
    (void)state;
    EXPECT(HC_EVENT_DUPLICATE_KEY, "{\"post_id\":1.5,\"x\":1,\"x\":2}");
    EXPECT(HC_EVENT_DUPLICATE_KEY, "{\"op\":\"?\",\"op\":\"?\"}");
    EXPECT(HC_EVENT_DUPLICATE_KEY, "{\"ts\":\"x\",\"m\":{\"a\":1,\"a\":1}}");
}

static void parse_reports_field_errors_in_field_order(void **state)
{
    (void)state;
    EXPECT(HC_EVENT_MISSING_POST_ID, "{\"op\":1,\"ts\":\"x\",\"user_id\":[],\"event_id\":2}");
    EXPECT(HC_EVENT_BAD_POST_ID_TYPE, "{\"user_id\":true,\"post_id\":null}");
    EXPECT(HC_EVENT_BAD_USER_ID_TYPE, "{\"event_id\":1,\"ts\":1.5,\"op\":1,\"user_id\":[],"
                                      "\"post_id\":\"a\"}");
    EXPECT(HC_EVENT_BAD_OP_TYPE, "{\"event_id\":1,\"ts\":1.5,\"op\":1,\"post_id\":\"a\"}");
    EXPECT(HC_EVENT_UNKNOWN_OP, "{\"event_id\":1,\"ts\":\"x\",\"op\":\"x\",\"post_id\":\"a\"}");
    EXPECT(HC_EVENT_BAD_TS, "{\"event_id\":1,\"ts\":1.5,\"post_id\":\"a\"}");
    EXPECT(HC_EVENT_BAD_EVENT_ID, "{\"event_id\":1,\"post_id\":\"a\"}");
}

static void parse_checks_post_id_length_before_control_bytes(void **state)
{
    char buf[1024];
    hc_event_t ev;
    (void)state;

    make_post_id_event(buf, sizeof(buf), 300, "\\n");
    assert_int_equal(parse_n(buf, strlen(buf), &ev), HC_EVENT_POST_ID_TOO_LONG);
}

/* ---- reason strings ---------------------------------------------------------------------- */

static void reason_str_names_every_reason(void **state)
{
    static const char *const want[HC_EVENT_REASON_COUNT] = {
        "ok",
        "too_large",
        "empty",
        "not_json",
        "not_object",
        "bad_utf8",
        "duplicate_key",
        "trailing_garbage",
        "too_deep",
        "missing_post_id",
        "empty_post_id",
        "post_id_too_long",
        "post_id_control_char",
        "bad_post_id_type",
        "bad_user_id_type",
        "bad_op_type",
        "unknown_op",
        "bad_ts",
        "bad_event_id_type",
    };
    (void)state;

    for (int r = 0; r < HC_EVENT_REASON_COUNT; r++) {
        assert_string_equal(hc_event_reason_str((hc_event_reason_t)r), want[r]);
    }
    assert_non_null(hc_event_reason_str(HC_EVENT_REASON_COUNT));
    assert_non_null(hc_event_reason_str((hc_event_reason_t)-1));
}

/* ---- the reference parser on hand-picked cases -------------------------------------------- */

static void reference_agrees_on_hand_picked_cases(void **state)
{
    static const struct {
        const char *json;
        hc_event_reason_t want;
    } cases[] = {
        {"{\"post_id\":\"p123456\",\"user_id\":\"u1\",\"op\":\"unlike\",\"ts\":17}", HC_EVENT_OK},
        {"{\"post_id\":42,\"user_id\":-7}", HC_EVENT_OK},
        {"{\"post_id\":\"a\",\"post\\u005fid\":\"b\"}", HC_EVENT_DUPLICATE_KEY},
        {"{\"post_id\":\"\\ud800\"}", HC_EVENT_NOT_JSON}, /* jansson: "invalid Unicode" */
        {"{\"post_id\":\"\xed\xa0\x80\"}", HC_EVENT_BAD_UTF8},
        {"{\"post_id\":\"p\"} x", HC_EVENT_TRAILING_GARBAGE},
        {"[1]", HC_EVENT_NOT_OBJECT},
        {"{}", HC_EVENT_MISSING_POST_ID},
        {"{\"post_id\":\"\"}", HC_EVENT_EMPTY_POST_ID},
        {"{\"post_id\":\"\\n\"}", HC_EVENT_POST_ID_CONTROL},
        {"{\"post_id\":-1}", HC_EVENT_BAD_POST_ID_TYPE},
        {"{\"post_id\":\"p\",\"user_id\":1.5}", HC_EVENT_BAD_USER_ID_TYPE},
        {"{\"post_id\":\"p\",\"op\":1}", HC_EVENT_BAD_OP_TYPE},
        {"{\"post_id\":\"p\",\"op\":\"x\"}", HC_EVENT_UNKNOWN_OP},
        {"{\"post_id\":\"p\",\"ts\":1.5}", HC_EVENT_BAD_TS},
        {"{\"post_id\":\"p\",\"event_id\":1}", HC_EVENT_BAD_EVENT_ID},
    };
    hc_event_t ev;
    (void)state;

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        hc_event_reason_t got =
            hc_event_parse_ref(cases[i].json, strlen(cases[i].json), MAX_BYTES, &ev);
        if (got != cases[i].want) {
            print_message("ref: %s: want %s got %s\n", cases[i].json,
                          hc_event_reason_str(cases[i].want), hc_event_reason_str(got));
            fail();
        }
    }
}

/* Pins the jansson behaviours that event_ref.h lists as divergences, so a jansson upgrade
 * that changes one shows up here rather than as a puzzling differential failure. */
static void reference_divergences_are_as_documented(void **state)
{
    static const char big[] = "{\"post_id\":\"p\",\"n\":18446744073709551616}";
    static const char huge[] = "{\"post_id\":\"p\",\"n\":1e400}";
    static const char nul_key[] = "{\"post_id\":\"p\",\"\\u0000\":1}";
    static const char nul_tok[] = "{\"post_id\":\"p\",\"n\":1\0}";
    static const char mzero[] = "{\"post_id\":-0,\"user_id\":-0}";
    char deep[256];
    size_t n;
    hc_event_t a;
    hc_event_t b;
    (void)state;

    /* D1 */
    assert_int_equal(hc_event_parse(big, sizeof(big) - 1, MAX_BYTES, &a), HC_EVENT_OK);
    assert_int_equal(hc_event_parse_ref(big, sizeof(big) - 1, MAX_BYTES, &b), HC_EVENT_NOT_JSON);
    assert_int_equal(hc_event_parse(huge, sizeof(huge) - 1, MAX_BYTES, &a), HC_EVENT_OK);
    assert_int_equal(hc_event_parse_ref(huge, sizeof(huge) - 1, MAX_BYTES, &b), HC_EVENT_NOT_JSON);
    /* D2 */
    make_deep(deep, &n, HC_EVENT_MAX_DEPTH + 1, false);
    assert_int_equal(hc_event_parse(deep, n, MAX_BYTES, &a), HC_EVENT_TOO_DEEP);
    assert_int_equal(hc_event_parse_ref(deep, n, MAX_BYTES, &b), HC_EVENT_OK);
    /* D3 */
    assert_int_equal(hc_event_parse(mzero, sizeof(mzero) - 1, MAX_BYTES, &a),
                     HC_EVENT_BAD_POST_ID_TYPE);
    assert_int_equal(hc_event_parse_ref(mzero, sizeof(mzero) - 1, MAX_BYTES, &b), HC_EVENT_OK);
    assert_post_id(b, "0");
    assert_user_id(b, "0");
    /* D4 */
    assert_int_equal(hc_event_parse(nul_key, sizeof(nul_key) - 1, MAX_BYTES, &a), HC_EVENT_OK);
    assert_int_equal(hc_event_parse_ref(nul_key, sizeof(nul_key) - 1, MAX_BYTES, &b),
                     HC_EVENT_NOT_JSON);
    /* D5 */
    assert_int_equal(hc_event_parse(nul_tok, sizeof(nul_tok) - 1, MAX_BYTES, &a),
                     HC_EVENT_NOT_JSON);
    assert_int_equal(hc_event_parse_ref(nul_tok, sizeof(nul_tok) - 1, MAX_BYTES, &b), HC_EVENT_OK);
}

/* ---- differential test ------------------------------------------------------------------- */

struct rng {
    uint64_t s;
};

static uint64_t rng_next(struct rng *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

static unsigned below(struct rng *r, unsigned n)
{
    return (unsigned)(rng_next(r) % n);
}

static bool chance(struct rng *r, unsigned percent)
{
    return below(r, 100) < percent;
}

#define GEN_CAP 8192

struct out {
    char d[GEN_CAP];
    size_t n;
};

static void put(struct out *o, const char *s)
{
    size_t k = strlen(s);
    if (o->n + k < GEN_CAP) {
        memcpy(o->d + o->n, s, k);
        o->n += k;
    }
}

static void putch(struct out *o, char c)
{
    if (o->n + 1 < GEN_CAP) {
        o->d[o->n++] = c;
    }
}

static void put_ws(struct rng *r, struct out *o)
{
    static const char ws[] = " \t\r\n";
    if (chance(r, 12)) {
        for (unsigned k = 1 + below(r, 3); k > 0; k--) {
            putch(o, ws[below(r, 4)]);
        }
    }
}

static void put_utf8(struct out *o, uint32_t cp)
{
    char b[5] = {0};
    if (cp < 0x80) {
        b[0] = (char)cp;
    } else if (cp < 0x800) {
        b[0] = (char)(0xc0 | cp >> 6);
        b[1] = (char)(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
        b[0] = (char)(0xe0 | cp >> 12);
        b[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        b[2] = (char)(0x80 | (cp & 0x3f));
    } else {
        b[0] = (char)(0xf0 | cp >> 18);
        b[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
        b[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
        b[3] = (char)(0x80 | (cp & 0x3f));
    }
    put(o, b);
}

static uint32_t random_scalar(struct rng *r)
{
    switch (below(r, 4)) {
    case 0:
        return 0x80 + below(r, 0x780);
    case 1:
        return 0x800 + below(r, 0xd800 - 0x800);
    case 2:
        return 0xe000 + below(r, 0x2000);
    default:
        return 0x10000 + below(r, 0x100000);
    }
}

/* String body characters: mostly plain, sometimes every kind of escape and UTF-8. */
static void put_string_char(struct rng *r, struct out *o)
{
    static const char alnum[] =
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:";
    static const char *const simple[] = {"\\\"", "\\\\", "\\/", "\\b", "\\f", "\\n", "\\r", "\\t"};
    char tmp[16];
    unsigned k = below(r, 100);

    if (k < 75) {
        putch(o, alnum[below(r, sizeof(alnum) - 1)]);
    } else if (k < 80) {
        put(o, simple[below(r, 8)]);
    } else if (k < 85) {
        snprintf(tmp, sizeof(tmp), chance(r, 50) ? "\\u%04x" : "\\u%04X",
                 below(r, 3) ? below(r, 0x80) : random_scalar(r) & 0xffff);
        if ((tmp[2] | 0x20) == 'd' && tmp[3] >= '8') {
            snprintf(tmp, sizeof(tmp), "\\u00e9"); /* keep surrogates to the pair branch */
        }
        put(o, tmp);
    } else if (k < 88) {
        uint32_t cp = 0x10000 + below(r, 0x100000);
        snprintf(tmp, sizeof(tmp), "\\u%04x\\u%04x", 0xd800 + ((cp - 0x10000) >> 10),
                 0xdc00 + ((cp - 0x10000) & 0x3ff));
        put(o, tmp);
    } else if (k < 98) {
        put_utf8(o, random_scalar(r));
    } else {
        putch(o, 0x7f);
    }
}

static void put_string(struct rng *r, struct out *o, unsigned maxlen)
{
    putch(o, '"');
    for (unsigned n = below(r, maxlen + 1); n > 0; n--) {
        put_string_char(r, o);
    }
    putch(o, '"');
}

static void put_integer(struct rng *r, struct out *o, bool allow_negative)
{
    static const char *const special[] = {
        "0",
        "9223372036854775807",
        "9223372036854775808",
        "-9223372036854775808",
        "-9223372036854775809",
        "123456789012345678901234567890",
        "-0",
    };
    char tmp[32];
    unsigned k = below(r, 100);

    if (k < 3) {
        const char *s = special[below(r, 7)];
        if (allow_negative || s[0] != '-') {
            put(o, s);
            return;
        }
    }
    snprintf(tmp, sizeof(tmp), "%s%llu", allow_negative && chance(r, 20) ? "-" : "",
             (unsigned long long)(rng_next(r) % (k < 50 ? 1000000u : 2000000000000000u)));
    put(o, tmp);
}

static void put_real(struct rng *r, struct out *o)
{
    static const char *const reals[] = {"1.5",  "-0.25",  "1e10",  "2E-3",    "1.0e+2",  "0.0",
                                        "-0.0", "3.25e0", "1e400", "-1e-400", "6.02e23", "1E+0"};
    put(o, reals[below(r, 12)]);
}

static void put_key(struct rng *r, struct out *o)
{
    static const char *const keys[] = {"\"a\"",        "\"b\"",       "\"\\u0061\"", "\"post_id\"",
                                       "\"op\"",       "\"\"",        "\"x\"",       "\"k1\"",
                                       "\"\xc3\xa9\"", "\"\\u00e9\"", "\"ts\"",      "\"user_id\""};
    if (chance(r, 20)) {
        put_string(r, o, 6);
    } else {
        put(o, keys[below(r, 12)]);
    }
}

static void put_value(struct rng *r, struct out *o, int depth)
{
    unsigned k = below(r, depth < 4 ? 100 : 75);

    if (k < 30) {
        put_string(r, o, 10);
    } else if (k < 50) {
        put_integer(r, o, true);
    } else if (k < 58) {
        put_real(r, o);
    } else if (k < 75) {
        static const char *const lits[] = {"true", "false", "null"};
        put(o, lits[below(r, 3)]);
    } else if (k < 88) {
        putch(o, '[');
        for (unsigned n = below(r, 4), i = 0; i < n; i++) {
            if (i) {
                putch(o, ',');
            }
            put_ws(r, o);
            put_value(r, o, depth + 1);
            put_ws(r, o);
        }
        putch(o, ']');
    } else {
        putch(o, '{');
        for (unsigned n = below(r, 4), i = 0; i < n; i++) {
            if (i) {
                putch(o, ',');
            }
            put_ws(r, o);
            put_key(r, o);
            put_ws(r, o);
            putch(o, ':');
            put_ws(r, o);
            put_value(r, o, depth + 1);
        }
        putch(o, '}');
    }
}

/* A field's value: the right type most of the time, any value otherwise (type swaps). */
static void put_field_value(struct rng *r, struct out *o, int field)
{
    static const char *const ops[] = {"\"like\"", "\"unlike\"", "\"\\u006cike\"",
                                      "\"Like\"", "\"\"",       "\"unlike\\u0000\""};
    char tmp[600];

    if (chance(r, 10)) {
        put_value(r, o, 1);
        return;
    }
    switch (field) {
    case 0: /* post_id */
        if (chance(r, 15)) {
            put_integer(r, o, false);
        } else if (chance(r, 3)) {
            unsigned n = 250 + below(r, 12); /* around the 256-byte limit */
            memset(tmp, 'p', n);
            tmp[n] = '\0';
            putch(o, '"');
            put(o, tmp);
            putch(o, '"');
        } else if (chance(r, 80)) {
            snprintf(tmp, sizeof(tmp), "\"p%u\"", below(r, 1000000));
            put(o, tmp);
        } else {
            put_string(r, o, 12);
        }
        break;
    case 1: /* user_id */
        if (chance(r, 3)) {
            unsigned n = 250 + below(r, 12); /* around the 256 bytes kept */
            for (unsigned i = 0; i < n; i++) {
                tmp[i] = (char)('a' + i % 26);
            }
            tmp[n] = '\0';
            putch(o, '"');
            put(o, tmp);
            putch(o, '"');
        } else if (chance(r, 40)) {
            put_integer(r, o, true);
        } else {
            put_string(r, o, 12);
        }
        break;
    case 2: /* op */
        put(o, ops[chance(r, 85) ? below(r, 2) : below(r, 6)]);
        break;
    case 3: /* ts */
        if (chance(r, 90)) {
            snprintf(tmp, sizeof(tmp), "%llu",
                     1700000000000ull + (unsigned long long)below(r, 100000000));
            put(o, tmp);
        } else {
            put_integer(r, o, true);
        }
        break;
    default: /* event_id */
        put_string(r, o, 12);
        break;
    }
}

/* An object member list with enough keys to outrun the inline duplicate check, drawn from a
 * range that makes a repeat about as likely as not. */
static void put_many_members(struct rng *r, struct out *o, bool leading_comma)
{
    unsigned n = 30 + below(r, 60);
    char key[40];

    for (unsigned i = 0; i < n; i++) {
        unsigned k = below(r, n * n);
        snprintf(key, sizeof(key),
                 chance(r, 20) ? "%s\"\\u006b%u\":" : "%s\"k%u\":", i || leading_comma ? "," : "",
                 k);
        put(o, key);
        put_value(r, o, 3);
    }
}

static void generate_event(struct rng *r, struct out *o)
{
    static const char *const names[] = {"\"post_id\"", "\"user_id\"", "\"op\"", "\"ts\"",
                                        "\"event_id\""};
    static const char *const escaped_names[] = {"\"post\\u005fid\"", "\"\\u0075ser_id\"",
                                                "\"o\\u0070\"", "\"\\u0074s\"",
                                                "\"event\\u005Fid\""};
    static struct out members[12];
    unsigned order[12];
    unsigned nm = 0;

    for (int f = 0; f < 5; f++) {
        static const unsigned presence[] = {97, 70, 60, 70, 50};
        if (!chance(r, presence[f])) {
            continue;
        }
        members[nm].n = 0;
        put(&members[nm], chance(r, 3) ? escaped_names[f] : names[f]);
        put_ws(r, &members[nm]);
        putch(&members[nm], ':');
        put_ws(r, &members[nm]);
        put_field_value(r, &members[nm], f);
        nm++;
    }
    for (unsigned n = below(r, 4); n > 0 && nm < 10; n--) {
        members[nm].n = 0;
        if (chance(r, 80)) {
            char key[16];
            snprintf(key, sizeof(key), "\"u%u\"", nm);
            put(&members[nm], key);
        } else {
            put_key(r, &members[nm]);
        }
        putch(&members[nm], ':');
        if (chance(r, 1)) {
            putch(&members[nm], '{');
            put_many_members(r, &members[nm], false);
            putch(&members[nm], '}');
        } else if (chance(r, 1)) {
            /* deeper than HC_EVENT_MAX_DEPTH, well within jansson's limit */
            unsigned depth = 60 + below(r, 20);
            for (unsigned i = 0; i < depth; i++) {
                putch(&members[nm], '[');
            }
            for (unsigned i = 0; i < depth; i++) {
                putch(&members[nm], ']');
            }
        } else {
            put_value(r, &members[nm], 1);
        }
        nm++;
    }
    if (nm > 0 && chance(r, 5)) {
        members[nm] = members[below(r, nm)]; /* a duplicated field */
        nm++;
    }
    for (unsigned i = 0; i < nm; i++) {
        order[i] = i;
    }
    for (unsigned i = nm; i > 1; i--) {
        unsigned j = below(r, i);
        unsigned t = order[i - 1];
        order[i - 1] = order[j];
        order[j] = t;
    }
    o->n = 0;
    put_ws(r, o);
    putch(o, '{');
    for (unsigned i = 0; i < nm; i++) {
        if (i) {
            putch(o, ',');
        }
        put_ws(r, o);
        if (o->n + members[order[i]].n < GEN_CAP) {
            memcpy(o->d + o->n, members[order[i]].d, members[order[i]].n);
            o->n += members[order[i]].n;
        }
        put_ws(r, o);
    }
    if (chance(r, 1)) {
        put_many_members(r, o, nm > 0);
    }
    putch(o, '}');
    put_ws(r, o);
}

static void mutate(struct rng *r, struct out *o)
{
    static const char *const tokens[] = {
        "\"",
        "\\",
        "\\u",
        "\\ud800",
        "\\udc00",
        "{",
        "}",
        "[",
        "]",
        ",",
        ":",
        "-",
        "0",
        "-0",
        "1e999",
        ".5",
        "true",
        "nul",
        "\"post_id\":1",
        ",\"op\":\"unlike\"",
        ",\"post_id\":\"x\"",
        "\xc0\xaf",
        "\xe0\x9f\xbf",
        "\xf0\x8f\xbf\xbf",
        "\xed\xa0\x80",
        "\xf4\x90\x80\x80",
        "\xef\xbb\xbf",
        " ",
        "\t",
        "\x0c",
        "\xc3\xa9",
        "\\u0000",
        "{\"a\":1,\"a\":2}",
        "99999999999999999999",
    };
    static const char interesting[] = "\"{}[],:\\ 0-e.\x00\x80\xc0\xed\xf4\xff";
    const size_t ntok = sizeof(tokens) / sizeof(tokens[0]);

    for (unsigned m = 1 + below(r, 3); m > 0; m--) {
        size_t pos = o->n ? below(r, (unsigned)o->n) : 0;
        switch (below(r, 6)) {
        case 0: /* byte flip */
            if (o->n) {
                o->d[pos] = chance(r, 50) ? (char)(o->d[pos] ^ (1u << below(r, 8)))
                                          : interesting[below(r, sizeof(interesting) - 1)];
            }
            break;
        case 1:   /* random byte inserted */
        case 2: { /* token inserted */
            char one[2] = {(char)below(r, 256), 0};
            const char *s = one;
            size_t k = 1;
            if (below(r, 2)) {
                s = tokens[below(r, (unsigned)ntok)];
                k = strlen(s);
            }
            if (o->n + k < GEN_CAP) {
                memmove(o->d + pos + k, o->d + pos, o->n - pos);
                memcpy(o->d + pos, s, k);
                o->n += k;
            }
            break;
        }
        case 3: { /* deletion */
            size_t k = 1 + below(r, 4);
            if (pos + k > o->n) {
                k = o->n - pos;
            }
            memmove(o->d + pos, o->d + pos + k, o->n - pos - k);
            o->n -= k;
            break;
        }
        case 4: /* truncation */
            o->n = pos;
            break;
        default: { /* a copy of a slice elsewhere (duplicates whole members now and then) */
            size_t from = o->n ? below(r, (unsigned)o->n) : 0;
            size_t k = 1 + below(r, 24);
            if (from + k > o->n) {
                k = o->n - from;
            }
            if (o->n + k < GEN_CAP) {
                char tmp[32];
                memcpy(tmp, o->d + from, k);
                memmove(o->d + pos + k, o->d + pos, o->n - pos);
                memcpy(o->d + pos, tmp, k);
                o->n += k;
            }
            break;
        }
        }
    }
}

static void parse_agrees_with_jansson_reference_on_mutated_events(void **state)
{
    enum { CASES = 300000 };
    static struct out o;
    struct rng r = {20241130};
    unsigned long fast_count[HC_EVENT_REASON_COUNT] = {0};
    unsigned long forgiven[HC_DIV_KINDS] = {0};
    unsigned long mutated = 0;
    unsigned long failures = 0;
    unsigned long total_forgiven = 0;
    (void)state;

    for (int i = 0; i < CASES; i++) {
        static hc_event_both_t b;
        size_t max_bytes = 1u << 20;

        generate_event(&r, &o);
        if (chance(&r, 60)) {
            mutate(&r, &o);
            mutated++;
        }
        if (chance(&r, 3)) {
            max_bytes = o.n - (o.n > 0 && chance(&r, 50)); /* exactly at, or one under */
        }
        char *copy = exact_copy(o.d, o.n);
        bool agreed = hc_event_run_both(copy, o.n, max_bytes, &b);
        free(copy);
        if (agreed) {
            fast_count[b.fast_r]++;
            continue;
        }
        int why = hc_event_divergence_explain(o.d, o.n, &b);
        if (why >= 0) {
            forgiven[why]++;
            total_forgiven++;
            fast_count[b.fast_r]++;
            continue;
        }
        if (failures++ < 20) {
            print_message("case %d: fast=%s ref=%s: ", i, hc_event_reason_str(b.fast_r),
                          hc_event_reason_str(b.ref_r));
            print_escaped(o.d, o.n);
        }
    }
    print_message("differential: %d cases (%lu mutated), %lu forgiven (big numbers %lu, depth "
                  "%lu, -0 %lu, NUL key %lu, NUL after token %lu), %lu failures\n",
                  CASES, mutated, total_forgiven, forgiven[0], forgiven[1], forgiven[2],
                  forgiven[3], forgiven[4], failures);
    for (int k = 0; k < HC_EVENT_REASON_COUNT; k++) {
        print_message("  %-22s %lu\n", hc_event_reason_str((hc_event_reason_t)k), fast_count[k]);
    }
    assert_int_equal(failures, 0);
    /* the generator must keep reaching every verdict, and forgiveness must stay rare */
    for (int k = 0; k < HC_EVENT_REASON_COUNT; k++) {
        if (fast_count[k] == 0) {
            print_message("no case produced %s\n", hc_event_reason_str((hc_event_reason_t)k));
            fail();
        }
    }
    assert_true(fast_count[HC_EVENT_OK] > CASES / 5);
    assert_true(total_forgiven < CASES / 25);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(parse_accepts_typical_event),
        cmocka_unit_test(parse_gives_unlike_delta_minus_one),
        cmocka_unit_test(parse_defaults_missing_op_to_like),
        cmocka_unit_test(parse_accepts_escaped_op),
        cmocka_unit_test(parse_counts_integer_post_id_as_its_decimal_string),
        cmocka_unit_test(parse_accepts_256_digit_integer_post_id_and_rejects_257),
        cmocka_unit_test(parse_decodes_escapes_in_post_id),
        cmocka_unit_test(parse_accepts_256_byte_post_id_and_rejects_257),
        cmocka_unit_test(parse_measures_post_id_after_unescaping),
        cmocka_unit_test(parse_accepts_user_id_string_or_integer_as_written),
        cmocka_unit_test(parse_keeps_first_256_bytes_of_long_user_id),
        cmocka_unit_test(parse_reads_ts_over_the_whole_int64_range),
        cmocka_unit_test(parse_reads_ts_of_every_digit_count),
        cmocka_unit_test(parse_ignores_unknown_fields_of_any_shape),
        cmocka_unit_test(parse_accepts_json_whitespace_around_every_token),
        cmocka_unit_test(parse_accepts_empty_key_and_empty_values),
        cmocka_unit_test(parse_accepts_escaped_nul_in_unknown_fields_and_keys),
        cmocka_unit_test(parse_accepts_huge_numbers_in_unknown_fields),
        cmocka_unit_test(parse_accepts_valid_utf8_boundaries),
        cmocka_unit_test(parse_accepts_nesting_up_to_max_depth),
        cmocka_unit_test(parse_handles_one_megabyte_value_when_allowed),
        cmocka_unit_test(parse_enforces_max_bytes_exactly),
        cmocka_unit_test(parse_rejects_empty_and_null_input),
        cmocka_unit_test(parse_rejects_missing_post_id),
        cmocka_unit_test(parse_rejects_empty_post_id),
        cmocka_unit_test(parse_rejects_post_id_with_control_bytes),
        cmocka_unit_test(parse_rejects_post_id_with_c1_controls),
        cmocka_unit_test(parse_rejects_post_id_of_wrong_type),
        cmocka_unit_test(parse_rejects_user_id_of_wrong_type),
        cmocka_unit_test(parse_rejects_op_that_is_not_a_string),
        cmocka_unit_test(parse_rejects_unknown_op),
        cmocka_unit_test(parse_rejects_ts_that_is_not_an_int64),
        cmocka_unit_test(parse_rejects_event_id_that_is_not_a_string),
        cmocka_unit_test(parse_rejects_syntax_errors_as_not_json),
        cmocka_unit_test(parse_rejects_malformed_numbers),
        cmocka_unit_test(parse_rejects_invalid_escapes),
        cmocka_unit_test(parse_rejects_raw_control_bytes_in_strings),
        cmocka_unit_test(parse_rejects_nul_bytes_anywhere),
        cmocka_unit_test(parse_rejects_other_whitespace),
        cmocka_unit_test(parse_treats_utf8_bom_as_not_json),
        cmocka_unit_test(parse_rejects_non_object_top_level),
        cmocka_unit_test(parse_rejects_trailing_garbage),
        cmocka_unit_test(parse_rejects_duplicate_post_id),
        cmocka_unit_test(parse_rejects_duplicate_known_and_unknown_keys),
        cmocka_unit_test(parse_rejects_duplicate_keys_in_nested_objects),
        cmocka_unit_test(parse_finds_duplicates_among_many_keys),
        cmocka_unit_test(parse_rejects_invalid_utf8),
        cmocka_unit_test(parse_rejects_lone_surrogate_escapes_as_bad_utf8),
        cmocka_unit_test(parse_rejects_nesting_deeper_than_max_depth),
        cmocka_unit_test(parse_rejects_binary_garbage),
        cmocka_unit_test(parse_checks_size_before_reading_any_byte),
        cmocka_unit_test(parse_reports_the_first_wellformedness_error_in_document_order),
        cmocka_unit_test(parse_reports_syntax_errors_before_not_object),
        cmocka_unit_test(parse_reports_not_object_before_duplicate_key),
        cmocka_unit_test(parse_reports_wellformedness_errors_before_duplicate_key),
        cmocka_unit_test(parse_reports_duplicate_key_before_field_errors),
        cmocka_unit_test(parse_reports_field_errors_in_field_order),
        cmocka_unit_test(parse_checks_post_id_length_before_control_bytes),
        cmocka_unit_test(reason_str_names_every_reason),
        cmocka_unit_test(reference_agrees_on_hand_picked_cases),
        cmocka_unit_test(reference_divergences_are_as_documented),
        cmocka_unit_test(parse_agrees_with_jansson_reference_on_mutated_events),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
