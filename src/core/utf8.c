/* UTF-8 validation (include/core/hotcount/utf8.h). */
#include "hotcount/utf8.h"

bool hc_utf8_valid(const void *s, size_t n)
{
    const unsigned char *p = s;
    for (size_t i = 0; i < n;) {
        size_t k = hc_utf8_char_len(p + i, n - i);
        if (k == 0) {
            return false;
        }
        i += k;
    }
    return true;
}
