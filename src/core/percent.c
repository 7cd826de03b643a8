/* Percent-decoding (include/core/hotcount/percent.h). */
#include "hotcount/percent.h"

static int hex_value(char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

bool hc_percent_decode(const char *s, size_t n, unsigned flags, char *out, size_t cap,
                       size_t *out_len)
{
    size_t len = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '%') {
            int hi = i + 2 < n ? hex_value(s[i + 1]) : -1;
            int lo = i + 2 < n ? hex_value(s[i + 2]) : -1;
            if (hi >= 0 && lo >= 0) {
                c = (char)(hi * 16 + lo);
                if (c == '\0' && (flags & HC_PCT_NO_NUL)) {
                    return false;
                }
                i += 2;
            } else if (!(flags & HC_PCT_LENIENT)) {
                return false;
            }
        } else if (c == '+' && (flags & HC_PCT_PLUS_IS_SPACE)) {
            c = ' ';
        }
        if (len == cap) {
            if (flags & HC_PCT_TRUNCATE) {
                break;
            }
            return false;
        }
        out[len++] = c;
    }
    *out_len = len;
    return true;
}
