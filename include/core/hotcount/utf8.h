/* Layer: core. UTF-8 validation, the one copy: well-formed per RFC 3629 (table 3.7 of Unicode):
 * no overlong forms, no surrogates (U+D800..U+DFFF), nothing above U+10FFFF, no cut-off tail.
 * The event parser, the post-id rule, log lines, metric labels, the command line's escaping and
 * the PostgreSQL store's text check all ask these two. Pure, any thread. */
#ifndef HOTCOUNT_UTF8_H
#define HOTCOUNT_UTF8_H

#include <stdbool.h>
#include <stddef.h>

/* Length (1..4) of the well-formed character at s[0..n), or 0 when the bytes there are not one
 * (or n is 0). Inline: the event parser asks it for every non-ASCII byte of every event. */
static inline size_t hc_utf8_char_len(const void *s, size_t n)
{
    const unsigned char *p = s;
    unsigned lo = 0x80, hi = 0xbf; /* the second byte's range */
    size_t len;

    if (n == 0) {
        return 0;
    }
    if (p[0] < 0x80) {
        return 1;
    }
    if (p[0] < 0xc2) {
        return 0; /* a continuation byte, or C0/C1 (always overlong) */
    }
    if (p[0] < 0xe0) {
        len = 2;
    } else if (p[0] < 0xf0) {
        len = 3;
        lo = p[0] == 0xe0 ? 0xa0 : lo; /* overlong */
        hi = p[0] == 0xed ? 0x9f : hi; /* surrogates */
    } else if (p[0] < 0xf5) {
        len = 4;
        lo = p[0] == 0xf0 ? 0x90 : lo; /* overlong */
        hi = p[0] == 0xf4 ? 0x8f : hi; /* above U+10FFFF */
    } else {
        return 0;
    }
    if (n < len || p[1] < lo || p[1] > hi) {
        return 0;
    }
    for (size_t i = 2; i < len; i++) {
        if ((p[i] & 0xc0) != 0x80) {
            return 0;
        }
    }
    return len;
}

/* Whether all of s[0..n) is well-formed UTF-8. */
bool hc_utf8_valid(const void *s, size_t n);

#endif
