/* Percent-decoding's one home (src/core/percent.c): a table of cases per flag, and a
 * differential test against the three decoders it replaced (serve's hc_url_decode, the store
 * toolkit's hc_store_percent_decode, redaction's lenient percent_decode), copied below as they
 * were, on random inputs: each caller's flags must give its old result. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <ctype.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "hotcount/percent.h"

/* ---- the copies as they were ---- */
static int old_hexval(char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* src/serve/serve_parse.c */
static bool old_url_decode(const char *s, size_t n, bool plus_is_space, char *out, size_t cap,
                           size_t *out_len)
{
    size_t len = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '%') {
            if (i + 2 >= n) {
                return false;
            }
            int hi = old_hexval(s[i + 1]);
            int lo = old_hexval(s[i + 2]);
            if (hi < 0 || lo < 0) {
                return false;
            }
            c = (char)(hi * 16 + lo);
            i += 2;
        } else if (c == '+' && plus_is_space) {
            c = ' ';
        }
        if (len == cap) {
            return false;
        }
        out[len++] = c;
    }
    *out_len = len;
    return true;
}

/* src/store/store_util.c, into a caller's buffer of len + 1 (it malloc'ed that) */
static bool old_store_decode(const char *p, size_t len, char *out, size_t *out_len)
{
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (p[i] != '%') {
            out[n++] = p[i];
            continue;
        }
        int hi = i + 2 < len ? old_hexval(p[i + 1]) : -1;
        int lo = i + 2 < len ? old_hexval(p[i + 2]) : -1;
        if (hi < 0 || lo < 0 || hi * 16 + lo == 0) {
            return false;
        }
        out[n++] = (char)(hi * 16 + lo);
        i += 2;
    }
    *out_len = n;
    return true;
}

/* src/base/redact.c: note `i + 2 < end + 1`, which let an escape borrow s[end], the byte after
 * the span; every span redaction decodes ends before a byte that is no hex digit (a URI's '@',
 * a blank, '&', '#', a quote, the NUL), or after a closing quote, so that never changed a
 * result, and the shared decoder stays within its span (escape_never_reads_past_the_span). */
static void old_redact_decode(const char *s, size_t begin, size_t end, char *out, size_t out_size)
{
    size_t n = 0;
    for (size_t i = begin; i < end && n + 1 < out_size; i++) {
        if (s[i] == '%' && i + 2 < end + 1 && isxdigit((unsigned char)s[i + 1]) &&
            isxdigit((unsigned char)s[i + 2])) {
            char hex[3] = {s[i + 1], s[i + 2], '\0'};
            out[n++] = (char)strtol(hex, NULL, 16);
            i += 2;
        } else {
            out[n++] = s[i];
        }
    }
    out[n] = '\0';
}

static bool decode(const char *s, unsigned flags, size_t cap, char *out, size_t *len)
{
    return hc_percent_decode(s, strlen(s), flags, out, cap, len);
}

/* mutant: '+' decoded without the flag, lower-case hex refused, an escape cut at the end taken,
 * the room check off by one, %00 let through under HC_PCT_NO_NUL */
static void table(void **state)
{
    (void)state;
    static const struct {
        const char *in;
        unsigned flags;
        size_t cap;
        bool ok;
        const char *want;
        size_t want_len;
    } rows[] = {
        {"p%40ss%2fw%3Ad", 0, 64, true, "p@ss/w:d", 8},
        {"a+b%2B", 0, 64, true, "a+b+", 4},
        {"a+b%2B", HC_PCT_PLUS_IS_SPACE, 64, true, "a b+", 4},
        {"%4", 0, 64, false, NULL, 0},
        {"ab%", 0, 64, false, NULL, 0},
        {"%zz", 0, 64, false, NULL, 0},
        {"%4", HC_PCT_LENIENT, 64, true, "%4", 2},
        {"%zz%41", HC_PCT_LENIENT, 64, true, "%zzA", 4},
        {"a%00b", 0, 64, true, "a\0b", 3},
        {"a%00b", HC_PCT_NO_NUL, 64, false, NULL, 0},
        {"abcd", 0, 4, true, "abcd", 4},
        {"abcde", 0, 4, false, NULL, 0},
        {"ab%41de", HC_PCT_TRUNCATE, 4, true, "abAd", 4},
        {"", 0, 0, true, "", 0},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        char out[64];
        size_t len = 12345;
        bool ok = decode(rows[i].in, rows[i].flags, rows[i].cap, out, &len);
        assert_int_equal(ok, rows[i].ok);
        if (ok) {
            assert_int_equal(len, rows[i].want_len);
            assert_memory_equal(out, rows[i].want, len);
        } else {
            assert_int_equal(len, 12345); /* untouched */
        }
    }
}

static void escape_never_reads_past_the_span(void **state)
{
    (void)state;
    const char *s = "ab%41"; /* the span is "ab%4" */
    char out[16];
    size_t len = 0;
    assert_false(hc_percent_decode(s, 4, 0, out, sizeof(out), &len));
    assert_true(hc_percent_decode(s, 4, HC_PCT_LENIENT, out, sizeof(out), &len));
    assert_int_equal(len, 4);
    assert_memory_equal(out, "ab%4", 4);
}

static void random_text(char *buf, size_t len)
{
    static const char alphabet[] = "%%%0aF9g+ x:/A";
    for (size_t i = 0; i < len; i++) {
        buf[i] = alphabet[rand() % (int)(sizeof(alphabet) - 1)];
    }
}

/* mutant: any of the table's, seen here as a disagreement with the copy it replaced */
static void each_caller_gets_its_old_result(void **state)
{
    (void)state;
    srand(2028);
    for (int round = 0; round < 20000; round++) {
        char in[40];
        size_t n = (size_t)(rand() % 24);
        random_text(in, n);
        size_t cap = (size_t)(rand() % 26);
        char want[64], got[64];
        size_t want_len = 0, got_len = 0;
        /* serve: paths (no '+'), queries ('+' is a space) */
        for (int plus = 0; plus < 2; plus++) {
            bool w = old_url_decode(in, n, plus, want, cap, &want_len);
            bool g = hc_percent_decode(in, n, plus ? HC_PCT_PLUS_IS_SPACE : 0, got, cap, &got_len);
            assert_int_equal(g, w);
            if (w) {
                assert_int_equal(got_len, want_len);
                assert_memory_equal(got, want, want_len);
            }
        }
        /* the store: %00 refused, room for the whole input */
        bool w = old_store_decode(in, n, want, &want_len);
        bool g = hc_percent_decode(in, n, HC_PCT_NO_NUL, got, n, &got_len);
        assert_int_equal(g, w);
        if (w) {
            assert_int_equal(got_len, want_len);
            assert_memory_equal(got, want, want_len);
        }
        /* redaction: the span within a longer text that goes on with a delimiter */
        char text[64];
        memcpy(text, "x", 1);
        memcpy(text + 1, in, n);
        text[1 + n] = "@& #'\0"[rand() % 6];
        text[2 + n] = '\0';
        size_t out_size = 1 + (size_t)(rand() % 26);
        old_redact_decode(text, 1, 1 + n, want, out_size);
        got_len = 0;
        assert_true(hc_percent_decode(text + 1, n, HC_PCT_LENIENT | HC_PCT_TRUNCATE, got,
                                      out_size - 1, &got_len));
        got[got_len] = '\0';
        assert_string_equal(got, want); /* both C strings: a %00 ends either */
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(table),
        cmocka_unit_test(escape_never_reads_past_the_span),
        cmocka_unit_test(each_caller_gets_its_old_result),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
