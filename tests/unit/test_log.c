/* Unit tests for src/base/log.c: level parsing and filtering, the text and JSON line formats, JSON
 * escaping, and truncation. Output goes to a temporary file through hc_log_set_fd(). */
#if !defined(_GNU_SOURCE) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L /* fileno */
#endif

/* cmocka.h needs these first. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include "hotcount/log.h"

#define TS_LEN 24 /* 2026-11-30T03:12:00.123Z */

typedef struct capture {
    FILE *file;
    char *text; /* what was written, NUL-terminated, after read_capture() */
    size_t len;
} capture_t;

static int setup(void **state)
{
    capture_t *cap = calloc(1, sizeof(*cap));

    if (cap == NULL) {
        return -1;
    }
    cap->file = tmpfile();
    if (cap->file == NULL) {
        free(cap);
        return -1;
    }
    hc_log_set_fd(fileno(cap->file));
    hc_log_setup(HC_LOG_INFO, HC_LOG_TEXT);
    *state = cap;
    return 0;
}

static int teardown(void **state)
{
    capture_t *cap = *state;

    hc_log_set_fd(-1);
    hc_log_setup(HC_LOG_INFO, HC_LOG_TEXT);
    fclose(cap->file);
    free(cap->text);
    free(cap);
    return 0;
}

/* Everything written so far; the log writes with write(2), so read back with pread. */
static const char *read_capture(capture_t *cap)
{
    int fd = fileno(cap->file);
    off_t size = lseek(fd, 0, SEEK_END);
    ssize_t n;

    assert_true(size >= 0);
    free(cap->text);
    cap->text = malloc((size_t)size + 1);
    assert_non_null(cap->text);
    n = pread(fd, cap->text, (size_t)size, 0);
    assert_int_equal(n, size);
    cap->text[n] = '\0';
    cap->len = (size_t)n;
    return cap->text;
}

static size_t count_char(const char *s, char c)
{
    size_t n = 0;

    for (; *s != '\0'; s++) {
        n += *s == c;
    }
    return n;
}

/* Strict UTF-8 check, written independently of the code under test. */
static bool is_valid_utf8(const unsigned char *s, size_t n)
{
    size_t i = 0;

    while (i < n) {
        unsigned char c = s[i];
        size_t len;
        uint32_t min;
        uint32_t cp;

        if (c < 0x80) {
            i++;
            continue;
        }
        if ((c & 0xE0) == 0xC0) {
            len = 2;
            min = 0x80;
            cp = c & 0x1F;
        } else if ((c & 0xF0) == 0xE0) {
            len = 3;
            min = 0x800;
            cp = c & 0x0F;
        } else if ((c & 0xF8) == 0xF0) {
            len = 4;
            min = 0x10000;
            cp = c & 0x07;
        } else {
            return false;
        }
        if (i + len > n) {
            return false;
        }
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80) {
                return false;
            }
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
            return false;
        }
        i += len;
    }
    return true;
}

static void assert_timestamp(const char *ts)
{
    static const char shape[] = "dddd-dd-ddTdd:dd:dd.dddZ";

    for (size_t i = 0; i < TS_LEN; i++) {
        if (shape[i] == 'd') {
            assert_in_range(ts[i], '0', '9');
        } else {
            assert_int_equal(ts[i], shape[i]);
        }
    }
}

/* The value of "msg" in a JSON line, still escaped. */
static const char *json_msg(const char *line)
{
    const char *msg = strstr(line, ",\"msg\":\"");

    assert_non_null(msg);
    return msg + strlen(",\"msg\":\"");
}

/* ---- parsing and filtering ---- */

static void level_parse_accepts_known_names(void **state)
{
    hc_log_level_t level = HC_LOG_INFO;

    (void)state;
    assert_true(hc_log_level_parse("error", &level));
    assert_int_equal(level, HC_LOG_ERROR);
    assert_true(hc_log_level_parse("warn", &level));
    assert_int_equal(level, HC_LOG_WARN);
    assert_true(hc_log_level_parse("info", &level));
    assert_int_equal(level, HC_LOG_INFO);
    assert_true(hc_log_level_parse("debug", &level));
    assert_int_equal(level, HC_LOG_DEBUG);
}

static void level_parse_rejects_unknown_names_leaving_output(void **state)
{
    hc_log_level_t level = HC_LOG_WARN;

    (void)state;
    assert_false(hc_log_level_parse("verbose", &level));
    assert_false(hc_log_level_parse("", &level));
    assert_false(hc_log_level_parse("INFO", &level));
    assert_false(hc_log_level_parse("info ", &level));
    assert_false(hc_log_level_parse(NULL, &level));
    assert_int_equal(level, HC_LOG_WARN);
}

static void format_parse_accepts_text_and_json_only(void **state)
{
    hc_log_format_t format = HC_LOG_TEXT;

    (void)state;
    assert_true(hc_log_format_parse("json", &format));
    assert_int_equal(format, HC_LOG_JSON);
    assert_true(hc_log_format_parse("text", &format));
    assert_int_equal(format, HC_LOG_TEXT);
    assert_false(hc_log_format_parse("xml", &format));
    assert_false(hc_log_format_parse(NULL, &format));
    assert_int_equal(format, HC_LOG_TEXT);
}

static void enabled_follows_threshold(void **state)
{
    (void)state;
    hc_log_setup(HC_LOG_WARN, HC_LOG_TEXT);
    assert_true(hc_log_enabled(HC_LOG_ERROR));
    assert_true(hc_log_enabled(HC_LOG_WARN));
    assert_false(hc_log_enabled(HC_LOG_INFO));
    assert_false(hc_log_enabled(HC_LOG_DEBUG));
    hc_log_setup(HC_LOG_DEBUG, HC_LOG_TEXT);
    assert_true(hc_log_enabled(HC_LOG_DEBUG));
    hc_log_setup(HC_LOG_ERROR, HC_LOG_TEXT);
    assert_false(hc_log_enabled(HC_LOG_WARN));
}

static void log_writes_only_lines_at_or_above_threshold(void **state)
{
    capture_t *cap = *state;
    const char *text;

    hc_log_setup(HC_LOG_WARN, HC_LOG_TEXT);
    hc_log(HC_LOG_ERROR, "t", "one");
    hc_log(HC_LOG_WARN, "t", "two");
    hc_log(HC_LOG_INFO, "t", "three");
    hc_log(HC_LOG_DEBUG, "t", "four");
    hc_log_write(HC_LOG_DEBUG, "t", "five"); /* direct calls are filtered too */
    text = read_capture(cap);
    assert_int_equal(count_char(text, '\n'), 2);
    assert_non_null(strstr(text, " ERROR [t] one\n"));
    assert_non_null(strstr(text, " WARN  [t] two\n"));
    assert_null(strstr(text, "three"));
    assert_null(strstr(text, "four"));
    assert_null(strstr(text, "five"));
}

static void log_macro_skips_argument_evaluation_when_disabled(void **state)
{
    int calls = 0;

    (void)state;
    hc_log_setup(HC_LOG_INFO, HC_LOG_TEXT);
    hc_log(HC_LOG_DEBUG, "t", "%d", ++calls);
    assert_int_equal(calls, 0);
    hc_log(HC_LOG_INFO, "t", "%d", ++calls);
    assert_int_equal(calls, 1);
}

/* ---- text format ---- */

static void text_line_has_timestamp_level_area_and_message(void **state)
{
    capture_t *cap = *state;
    const char *text;

    hc_log_write(HC_LOG_INFO, "stage1", "flushed %d posts", 42);
    text = read_capture(cap);
    assert_timestamp(text);
    assert_string_equal(text + TS_LEN, " INFO  [stage1] flushed 42 posts\n");
}

static void text_pads_every_level_label_to_one_width(void **state)
{
    capture_t *cap = *state;
    const char *text;

    hc_log_setup(HC_LOG_DEBUG, HC_LOG_TEXT);
    hc_log_write(HC_LOG_ERROR, "a", "e");
    hc_log_write(HC_LOG_DEBUG, "a", "d");
    text = read_capture(cap);
    assert_int_equal(strncmp(text + TS_LEN, " ERROR [a] e\n", 13), 0);
    assert_string_equal(strchr(text, '\n') + 1 + TS_LEN, " DEBUG [a] d\n");
}

static void text_escapes_control_characters_to_stay_one_line(void **state)
{
    capture_t *cap = *state;
    const char *text;

    hc_log_write(HC_LOG_INFO, "store", "line1\nline2\r\x01\x7f tab\there caf\xc3\xa9 bad\xff end");
    text = read_capture(cap);
    assert_int_equal(count_char(text, '\n'), 1);
    assert_string_equal(text + TS_LEN, " INFO  [store] line1\\nline2\\r\\x01\\x7f tab\there "
                                       "caf\xc3\xa9 bad\\xff end\n");
}

static void trailing_newlines_of_message_are_dropped(void **state)
{
    capture_t *cap = *state;
    const char *text;

    hc_log_write(HC_LOG_INFO, "store", "%s", "connection refused\n\r\n");
    text = read_capture(cap);
    assert_string_equal(text + TS_LEN, " INFO  [store] connection refused\n");
}

static void write_preserves_errno(void **state)
{
    (void)state;
    errno = ECONNREFUSED;
    hc_log_write(HC_LOG_INFO, "t", "x");
    assert_int_equal(errno, ECONNREFUSED);
}

/* ---- JSON format ---- */

static void json_line_has_all_fields_in_order(void **state)
{
    capture_t *cap = *state;
    const char *text;

    hc_log_setup(HC_LOG_INFO, HC_LOG_JSON);
    hc_log_write(HC_LOG_WARN, "stage2", "batch %s", "conflict");
    text = read_capture(cap);
    assert_int_equal(strncmp(text, "{\"ts\":\"", 7), 0);
    assert_timestamp(text + 7);
    assert_string_equal(text + 7 + TS_LEN,
                        "\",\"level\":\"warn\",\"area\":\"stage2\",\"msg\":\"batch conflict\"}\n");
}

static void json_escapes_quotes_backslashes_and_control_characters(void **state)
{
    capture_t *cap = *state;
    const char *text;

    hc_log_setup(HC_LOG_INFO, HC_LOG_JSON);
    hc_log_write(HC_LOG_INFO, "t", "say \"hi\" C:\\dir\n\r\t\x01\x1f\x7f/end");
    text = read_capture(cap);
    assert_string_equal(json_msg(text),
                        "say \\\"hi\\\" C:\\\\dir\\n\\r\\t\\u0001\\u001f\\u007f/end\"}\n");
}

static void json_escapes_area_too(void **state)
{
    capture_t *cap = *state;
    const char *text;

    hc_log_setup(HC_LOG_INFO, HC_LOG_JSON);
    hc_log_write(HC_LOG_INFO, "a\"b", "m");
    text = read_capture(cap);
    assert_non_null(strstr(text, "\"area\":\"a\\\"b\",\"msg\":\"m\"}\n"));
}

static void json_keeps_valid_utf8_and_replaces_invalid_bytes(void **state)
{
    capture_t *cap = *state;
    const char *text;

    hc_log_setup(HC_LOG_INFO, HC_LOG_JSON);
    /* é, €, 😀, then a stray continuation byte, an overlong '/', a surrogate, a cut-off € */
    hc_log_write(HC_LOG_INFO, "t",
                 "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80|\x80|\xc0\xaf|\xed\xa0\x80|"
                 "\xe2\x82");
    text = read_capture(cap);
    assert_true(is_valid_utf8((const unsigned char *)text, cap->len));
    assert_string_equal(json_msg(text), "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80|\\ufffd|"
                                        "\\ufffd\\ufffd|\\ufffd\\ufffd\\ufffd|\\ufffd\\ufffd\"}\n");
}

/* ---- truncation ---- */

static void long_message_is_truncated_to_one_marked_line(void **state)
{
    capture_t *cap = *state;
    static char msg[3 * HC_LOG_LINE_MAX + 1];
    const char *text;

    memset(msg, 'x', sizeof(msg) - 1);
    hc_log_write(HC_LOG_INFO, "t", "%s", msg);
    text = read_capture(cap);
    assert_true(cap->len <= HC_LOG_LINE_MAX);
    assert_true(cap->len > HC_LOG_LINE_MAX - 32); /* cut near the limit, not far before it */
    assert_int_equal(count_char(text, '\n'), 1);
    assert_string_equal(text + cap->len - 6, "xx...\n");
}

static void json_truncation_keeps_valid_json_and_utf8(void **state)
{
    capture_t *cap = *state;
    enum { count = HC_LOG_LINE_MAX }; /* 2 bytes each in UTF-8, 6 escaped: both overflow */
    static char msg[2 * count + 1];
    const char *text;

    for (size_t i = 0; i < count; i++) {
        msg[2 * i] = '\xc3';
        msg[2 * i + 1] = '\xa9';
    }
    msg[2 * count] = '\0';

    hc_log_setup(HC_LOG_INFO, HC_LOG_JSON);
    for (size_t shift = 0; shift < 2; shift++) {
        /* Shifting by one byte moves where the cut falls relative to character boundaries. */
        hc_log_write(HC_LOG_INFO, shift ? "tt" : "t", "%s", msg);
    }
    text = read_capture(cap);
    assert_int_equal(count_char(text, '\n'), 2);
    assert_true(is_valid_utf8((const unsigned char *)text, cap->len));
    for (const char *line = text; *line != '\0'; line = strchr(line, '\n') + 1) {
        size_t len = (size_t)(strchr(line, '\n') - line) + 1;

        assert_true(len <= HC_LOG_LINE_MAX);
        assert_int_equal(strncmp(line + len - 6, "...\"}\n", 6), 0);
    }

    /* Control characters escape to six bytes each; the cut must not split an escape. */
    memset(msg, '\x01', 2 * count);
    assert_int_equal(ftruncate(fileno(cap->file), 0), 0);
    assert_int_equal(lseek(fileno(cap->file), 0, SEEK_SET), 0);
    hc_log_write(HC_LOG_INFO, "t", "%s", msg);
    text = read_capture(cap);
    assert_true(cap->len <= HC_LOG_LINE_MAX);
    assert_string_equal(text + cap->len - 12, "\\u0001...\"}\n");
}

/* ---- events ---- */

/* The fault scripts select lines by "event" and read their fields (docs/EVENTS.md): a field
 * dropped, reordered into "msg" or written as a string instead of a number breaks them. */
static void event_json_has_name_and_typed_fields_in_order(void **state)
{
    capture_t *cap = *state;
    const char *text;

    hc_log_setup(HC_LOG_INFO, HC_LOG_JSON);
    hc_log_event(HC_LOG_WARN, "stage2", "store_batch_failed", HC_LOG_INT("backoff_ms", 400),
                 HC_LOG_STR("error", "say \"no\"\n"), HC_LOG_INT("n", -7));
    text = read_capture(cap);
    assert_int_equal(strncmp(text, "{\"ts\":\"", 7), 0);
    assert_timestamp(text + 7);
    assert_string_equal(
        text + 7 + TS_LEN,
        "\",\"level\":\"warn\",\"area\":\"stage2\",\"event\":\"store_batch_failed\","
        "\"backoff_ms\":400,\"error\":\"say \\\"no\\\"\\n\",\"n\":-7}\n");
}

static void event_text_is_name_then_key_value_pairs(void **state)
{
    capture_t *cap = *state;
    const char *text;

    hc_log_event(HC_LOG_INFO, "changelog", "changelog_repaired", HC_LOG_INT("partitions", 4),
                 HC_LOG_STR("bare", "a-b/c:1"), HC_LOG_STR("spaced", "x y"),
                 HC_LOG_STR("quoted", "q\"\\=\n"), HC_LOG_STR("empty", NULL));
    text = read_capture(cap);
    assert_timestamp(text);
    assert_string_equal(text + TS_LEN,
                        " INFO  [changelog] changelog_repaired partitions=4 bare=a-b/c:1 "
                        "spaced=\"x y\" quoted=\"q\\\"\\\\=\\n\" empty=\"\"\n");
}

static void event_macro_skips_field_evaluation_when_disabled(void **state)
{
    capture_t *cap = *state;
    int calls = 0;

    hc_log_setup(HC_LOG_WARN, HC_LOG_JSON);
    hc_log_event(HC_LOG_INFO, "t", "e", HC_LOG_INT("n", ++calls));
    assert_int_equal(calls, 0);
    hc_log_event(HC_LOG_WARN, "t", "e", HC_LOG_INT("n", ++calls));
    assert_int_equal(calls, 1);
    assert_non_null(strstr(read_capture(cap), "\"event\":\"e\",\"n\":1}\n"));
}

static void event_write_preserves_errno(void **state)
{
    (void)state;
    hc_log_field_t f = HC_LOG_INT("n", 1);

    errno = ETIMEDOUT;
    hc_log_event_write(HC_LOG_ERROR, "t", "e", &f, 1);
    assert_int_equal(errno, ETIMEDOUT);
}

/* Cut anywhere (inside a string value, or before a number), an event line is still one line of
 * valid JSON that ends in "truncated":true; a number is never cut. */
static void event_truncation_keeps_valid_json_and_marks_it(void **state)
{
    capture_t *cap = *state;
    static char big[2 * HC_LOG_LINE_MAX];
    const char *text;

    memset(big, 'x', sizeof(big) - 1);
    hc_log_setup(HC_LOG_INFO, HC_LOG_JSON);
    /* a string value cut */
    hc_log_event(HC_LOG_INFO, "t", "e", HC_LOG_INT("first", 12345), HC_LOG_STR("s", big),
                 HC_LOG_INT("never", 9));
    text = read_capture(cap);
    assert_true(cap->len <= HC_LOG_LINE_MAX);
    assert_true(cap->len > HC_LOG_LINE_MAX - 40);
    assert_int_equal(count_char(text, '\n'), 1);
    assert_non_null(strstr(text, "\"first\":12345,\"s\":\"xxx"));
    assert_null(strstr(text, "never"));
    assert_string_equal(text + cap->len - 26, "xxx...\",\"truncated\":true}\n");

    /* cut between fields: the string fits, with room left for less than the number */
    size_t whole = 0;
    size_t cut = 0;
    for (size_t fill = HC_LOG_LINE_MAX - 140; fill < HC_LOG_LINE_MAX - 40; fill++) {
        assert_int_equal(ftruncate(fileno(cap->file), 0), 0);
        assert_int_equal(lseek(fileno(cap->file), 0, SEEK_SET), 0);
        big[fill] = '\0';
        hc_log_event(HC_LOG_INFO, "t", "e", HC_LOG_STR("s", big), HC_LOG_INT("number", INT64_MIN));
        big[fill] = 'x';
        text = read_capture(cap);
        assert_true(cap->len <= HC_LOG_LINE_MAX);
        assert_int_equal(count_char(text, '\n'), 1);
        const char *num = strstr(text, "\"number\":");
        if (num != NULL) {
            assert_string_equal(num, "\"number\":-9223372036854775808}\n");
            whole++;
        } else {
            cut++;
            const char *tail = strstr(text, "\"truncated\":true}\n");
            assert_non_null(tail);
            assert_int_equal(tail + strlen("\"truncated\":true}\n"), text + cap->len);
            assert_true(tail[-1] == ',' && (tail[-2] == '"'));
        }
    }
    assert_true(whole > 0 && cut > 0); /* both sides of the limit were tried */
}

/* A field name outside [a-z0-9_] cannot break the syntax, nor (in a release build, where the
 * assertion is off) a reserved name shadow "event". */
static void event_sanitises_field_names(void **state)
{
    capture_t *cap = *state;
    hc_log_field_t bad = HC_LOG_INT("a\"b c", 1);

    hc_log_setup(HC_LOG_INFO, HC_LOG_JSON);
    hc_log_event_write(HC_LOG_INFO, "t", "e", &bad, 1);
    assert_non_null(strstr(read_capture(cap), "\"event\":\"e\",\"a_b_c\":1}\n"));
#ifdef NDEBUG
    hc_log_field_t reserved = HC_LOG_INT("event", 2);

    hc_log_event_write(HC_LOG_INFO, "t", "e", &reserved, 1);
    assert_non_null(strstr(read_capture(cap), "\"event\":\"e\",\"event_\":2}\n"));
#endif
}

static void set_fd_negative_restores_stderr(void **state)
{
    capture_t *cap = *state;
    int saved = dup(STDERR_FILENO);
    const char *text;

    /* Point stderr itself at the capture file, then check that -1 selects fd 2 again. */
    assert_true(saved >= 0);
    assert_true(dup2(fileno(cap->file), STDERR_FILENO) >= 0);
    hc_log_set_fd(-1);
    hc_log_write(HC_LOG_INFO, "t", "to stderr");
    assert_true(dup2(saved, STDERR_FILENO) >= 0);
    close(saved);
    text = read_capture(cap);
    assert_non_null(strstr(text, "[t] to stderr\n"));
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(level_parse_accepts_known_names),
        T(level_parse_rejects_unknown_names_leaving_output),
        T(format_parse_accepts_text_and_json_only),
        T(enabled_follows_threshold),
        T(log_writes_only_lines_at_or_above_threshold),
        T(log_macro_skips_argument_evaluation_when_disabled),
        T(text_line_has_timestamp_level_area_and_message),
        T(text_pads_every_level_label_to_one_width),
        T(text_escapes_control_characters_to_stay_one_line),
        T(trailing_newlines_of_message_are_dropped),
        T(write_preserves_errno),
        T(json_line_has_all_fields_in_order),
        T(json_escapes_quotes_backslashes_and_control_characters),
        T(json_escapes_area_too),
        T(json_keeps_valid_utf8_and_replaces_invalid_bytes),
        T(long_message_is_truncated_to_one_marked_line),
        T(json_truncation_keeps_valid_json_and_utf8),
        T(event_json_has_name_and_typed_fields_in_order),
        T(event_text_is_name_then_key_value_pairs),
        T(event_macro_skips_field_evaluation_when_disabled),
        T(event_write_preserves_errno),
        T(event_truncation_keeps_valid_json_and_marks_it),
        T(event_sanitises_field_names),
        T(set_fd_negative_restores_stderr),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
