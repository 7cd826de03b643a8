#include "escape.h"

#include <string.h>

/* Length of the valid UTF-8 sequence at s[0..n) that is no C1 control, or 0. */
static size_t printable_utf8(const unsigned char *s, size_t n)
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

const char *hc_cli_escape(const void *s, size_t len, char *out, size_t out_size)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *p = s;
    size_t o = 0;
    if (out_size == 0) {
        return out;
    }
    for (size_t i = 0; i < len;) {
        unsigned c = p[i];
        size_t k = c >= 0x80 ? printable_utf8(p + i, len - i) : 0;
        size_t need = k > 0 ? k : (c == '\\' ? 2 : (c < 0x20 || c >= 0x7f) ? 4 : 1);
        if (o + need >= out_size) {
            break;
        }
        if (k > 0) {
            memcpy(out + o, p + i, k);
            o += k;
            i += k;
        } else if (c == '\\') {
            out[o++] = '\\';
            out[o++] = '\\';
            i++;
        } else if (c < 0x20 || c >= 0x7f) {
            out[o++] = '\\';
            out[o++] = 'x';
            out[o++] = hex[c >> 4];
            out[o++] = hex[c & 15];
            i++;
        } else {
            out[o++] = (char)c;
            i++;
        }
    }
    out[o] = '\0';
    return out;
}
