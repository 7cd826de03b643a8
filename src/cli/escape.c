#include "escape.h"

#include <string.h>

#include "hotcount/utf8.h"

/* Length of the valid UTF-8 sequence at s[0..n) that is no C1 control (U+0080..U+009F: the two
 * bytes C2 80..C2 9F), or 0. */
static size_t printable_utf8(const unsigned char *s, size_t n)
{
    size_t k = hc_utf8_char_len(s, n);
    return k == 2 && s[0] == 0xc2 && s[1] <= 0x9f ? 0 : k;
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
