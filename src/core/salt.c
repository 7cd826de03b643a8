/* Producer keying: FNV-1a 32 over the user_id bytes, reduced to a salt, and the Kafka key
 * "<post_id>#<salt>". The hash must match every producer byte for byte (docs/FORMATS.md,
 * "Events"), so it is the textbook FNV-1a: no seeding, no length mixing, no word-at-a-time
 * variant. */
#include "hotcount/salt.h"

#include <string.h>

uint32_t hc_salt(const void *user_id, size_t user_id_len, uint32_t salts)
{
    /* salts == 0 is a caller bug (config validation rejects it); answer 0 rather than divide
     * by zero on the hot path. */
    if (salts <= 1) {
        return 0;
    }
    return hc_fnv1a32(user_id, user_id_len) % salts;
}

size_t hc_salt_key(char *buf, size_t buf_size, const char *post_id, size_t post_id_len,
                   uint32_t salt)
{
    char digits[10]; /* UINT32_MAX has 10 decimal digits */
    size_t ndigits = 0;
    size_t need;

    do {
        digits[ndigits++] = (char)('0' + salt % 10);
        salt /= 10;
    } while (salt != 0);

    /* Overflow-safe form of post_id_len + 1 + ndigits > buf_size. */
    if (buf == NULL || buf_size < 1 + ndigits || post_id_len > buf_size - 1 - ndigits) {
        return 0; /* on error nothing is written */
    }
    need = post_id_len + 1 + ndigits;

    if (post_id_len > 0) {
        memcpy(buf, post_id, post_id_len);
    }
    buf[post_id_len] = '#';
    for (size_t i = 0; i < ndigits; i++) {
        buf[post_id_len + 1 + i] = digits[ndigits - 1 - i];
    }
    if (need < buf_size) {
        buf[need] = '\0';
    }
    return need;
}
