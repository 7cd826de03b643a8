/* UTF-8 validation's one home (include/core/hotcount/utf8.h, src/core/utf8.c) against the six
 * copies it replaced, copied below as they were (the event parser's sequence length and
 * post-id check, the metrics label escaper's, the log line escaper's, the command line's
 * printable check, the PostgreSQL store's storable check): every 1-, 2- and 3-byte sequence,
 * and random 4-byte sequences and strings, must get the same answer from each caller's use of
 * the shared functions. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "hotcount/utf8.h"

/* ---- the copies as they were ---- */
static size_t old_event_seq_len(const unsigned char *p, const unsigned char *end)
{
    unsigned c = p[0];
    unsigned lo = 0x80;
    unsigned hi = 0xbf;
    size_t n;

    if (c < 0x80) {
        return 1;
    }
    if (c < 0xc2) {
        return 0; /* continuation byte, or C0/C1 (always overlong) */
    }
    if (c < 0xe0) {
        n = 2;
    } else if (c < 0xf0) {
        n = 3;
        if (c == 0xe0) {
            lo = 0xa0; /* overlong */
        } else if (c == 0xed) {
            hi = 0x9f; /* U+D800..U+DFFF */
        }
    } else if (c < 0xf5) {
        n = 4;
        if (c == 0xf0) {
            lo = 0x90; /* overlong */
        } else if (c == 0xf4) {
            hi = 0x8f; /* above U+10FFFF */
        }
    } else {
        return 0;
    }
    if ((size_t)(end - p) < n || p[1] < lo || p[1] > hi) {
        return 0;
    }
    for (size_t i = 2; i < n; i++) {
        if ((p[i] & 0xc0) != 0x80) {
            return 0;
        }
    }
    return n;
}

static bool old_event_valid(const unsigned char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        size_t k;
        unsigned min;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xe0) == 0xc0) {
            k = 1, min = 0x80, c &= 0x1f;
        } else if ((c & 0xf0) == 0xe0) {
            k = 2, min = 0x800, c &= 0x0f;
        } else if ((c & 0xf8) == 0xf0) {
            k = 3, min = 0x10000, c &= 0x07;
        } else {
            return false;
        }
        if (i + k >= n) {
            return false;
        }
        for (size_t j = 1; j <= k; j++) {
            if ((s[i + j] & 0xc0) != 0x80) {
                return false;
            }
            c = (c << 6) | (s[i + j] & 0x3f);
        }
        if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff)) {
            return false;
        }
        i += k + 1;
    }
    return true;
}

static size_t old_metrics_len(const unsigned char *s, size_t avail)
{
    unsigned char c = s[0];
    size_t n;
    unsigned char lo = 0x80;
    unsigned char hi = 0xbf;
    if (c < 0x80) {
        return 1;
    } else if (c >= 0xc2 && c <= 0xdf) {
        n = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
        n = 3;
        lo = c == 0xe0 ? 0xa0 : 0x80;
        hi = c == 0xed ? 0x9f : 0xbf;
    } else if (c >= 0xf0 && c <= 0xf4) {
        n = 4;
        lo = c == 0xf0 ? 0x90 : 0x80;
        hi = c == 0xf4 ? 0x8f : 0xbf;
    } else {
        return 0;
    }
    if (avail < n || s[1] < lo || s[1] > hi) {
        return 0;
    }
    for (size_t i = 2; i < n; i++) {
        if (s[i] < 0x80 || s[i] > 0xbf) {
            return 0;
        }
    }
    return n;
}

static size_t old_escape_printable(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t k;
    unsigned min;
    if ((c & 0xe0) == 0xc0) {
        k = 1, min = 0xa0, c &= 0x1f; /* 0x80..0x9f: C1 controls */
    } else if ((c & 0xf0) == 0xe0) {
        k = 2, min = 0x800, c &= 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
        k = 3, min = 0x10000, c &= 0x07;
    } else {
        return 0;
    }
    if (k >= n) {
        return 0;
    }
    for (size_t j = 1; j <= k; j++) {
        if ((s[j] & 0xc0) != 0x80) {
            return 0;
        }
        c = (c << 6) | (s[j] & 0x3f);
    }
    if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff)) {
        return 0;
    }
    return k + 1;
}

static size_t old_log_char_len(const unsigned char *s, size_t n)
{
    unsigned char c = s[0];
    uint32_t cp;
    size_t len;

    if (c < 0x80) {
        return 1;
    }
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
        cp = c & 0x1Fu;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        cp = c & 0x0Fu;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        cp = c & 0x07u;
    } else {
        return 0;
    }
    if (n < len) {
        return 0;
    }
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) {
            return 0;
        }
        cp = (cp << 6) | (s[i] & 0x3Fu);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
        (cp >= 0xD800 && cp <= 0xDFFF)) {
        return 0;
    }
    return len;
}

static bool old_pgsql_is_storable(const unsigned char *s, size_t len)
{
    size_t i = 0;
    size_t k;
    size_t more;
    uint32_t cp;

    while (i < len) {
        if (s[i] == 0) {
            return false;
        }
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        if (s[i] >= 0xc2 && s[i] <= 0xdf) {
            more = 1;
            cp = s[i] & 0x1fu;
        } else if (s[i] >= 0xe0 && s[i] <= 0xef) {
            more = 2;
            cp = s[i] & 0x0fu;
        } else if (s[i] >= 0xf0 && s[i] <= 0xf4) {
            more = 3;
            cp = s[i] & 0x07u;
        } else {
            return false;
        }
        if (len - i - 1 < more) {
            return false;
        }
        for (k = 1; k <= more; k++) {
            if ((s[i + k] & 0xc0) != 0x80) {
                return false;
            }
            cp = cp << 6 | (s[i + k] & 0x3fu);
        }
        if ((more == 2 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
            (more == 3 && (cp < 0x10000 || cp > 0x10ffff))) {
            return false;
        }
        i += more + 1;
    }
    return true;
}

/* ---- each caller's use of the shared functions, as the callers now write it ---- */
static size_t new_escape_printable(const unsigned char *s, size_t n)
{
    size_t k = hc_utf8_char_len(s, n);
    return k == 2 && s[0] == 0xc2 && s[1] <= 0x9f ? 0 : k;
}

static bool new_pgsql_is_storable(const unsigned char *s, size_t len)
{
    return memchr(s, 0, len) == NULL && hc_utf8_valid(s, len);
}

/* Every answer about the n bytes at s (n >= 1: every old copy reads s[0]). */
static void check(const unsigned char *s, size_t n)
{
    size_t k = hc_utf8_char_len(s, n);
    assert_int_equal(k, old_event_seq_len(s, s + n));
    assert_int_equal(k, old_metrics_len(s, n));
    assert_int_equal(k, old_log_char_len(s, n));
    if (s[0] >= 0x80) { /* the command line asks only then */
        assert_int_equal(new_escape_printable(s, n), old_escape_printable(s, n));
    }
    assert_int_equal(hc_utf8_valid(s, n), old_event_valid(s, n));
    assert_int_equal(new_pgsql_is_storable(s, n), old_pgsql_is_storable(s, n));
}

/* mutant: an overlong form, a surrogate, a code point past U+10FFFF or a cut-off tail taken;
 * a C1 control printed as is by the command line */
static void every_short_sequence(void **state)
{
    (void)state;
    unsigned char b[3];
    for (unsigned a = 0; a < 256; a++) {
        b[0] = (unsigned char)a;
        check(b, 1);
        for (unsigned c = 0; c < 256; c++) {
            b[1] = (unsigned char)c;
            check(b, 2);
            for (unsigned d = 0; d < 256; d++) {
                b[2] = (unsigned char)d;
                check(b, 3);
            }
        }
    }
}

static void four_bytes_and_strings(void **state)
{
    (void)state;
    srand(2028);
    for (int round = 0; round < 2000000; round++) {
        unsigned char b[4] = {(unsigned char)(0xe0 + rand() % 32), (unsigned char)rand(),
                              (unsigned char)rand(), (unsigned char)rand()};
        if (rand() % 2) { /* mostly continuation bytes: the interesting part */
            b[1] = (unsigned char)(0x80 + rand() % 64);
            b[2] = (unsigned char)(0x80 + rand() % 64);
            b[3] = (unsigned char)(0x70 + rand() % 96);
        }
        check(b, 4);
    }
    static const unsigned char pieces[][4] = {
        {'a'},
        {0},
        {0xc2, 0x80},
        {0xc3, 0xa9},
        {0xe2, 0x82, 0xac},
        {0xed, 0xa0, 0x80},
        {0xf0, 0x9f, 0x98, 0x80},
        {0xf4, 0x90, 0x80, 0x80},
        {0xc0, 0xaf},
        {0x80},
        {0xff},
    };
    static const size_t piece_len[] = {1, 1, 2, 2, 3, 3, 4, 4, 2, 1, 1};
    for (int round = 0; round < 200000; round++) {
        unsigned char s[64];
        size_t n = 0;
        for (int parts = rand() % 8; parts >= 0; parts--) {
            size_t p = (size_t)rand() % (sizeof(piece_len) / sizeof(piece_len[0]));
            memcpy(s + n, pieces[p], piece_len[p]);
            n += piece_len[p];
        }
        n -= (size_t)rand() % 2 && n > 1; /* sometimes cut the tail */
        check(s, n);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_short_sequence),
        cmocka_unit_test(four_bytes_and_strings),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
