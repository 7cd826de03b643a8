/* FNV-1a (include/core/hotcount/fnv.h). */
#include "hotcount/fnv.h"

uint32_t hc_fnv1a32(const void *data, size_t len)
{
    const unsigned char *p = data;
    uint32_t h = HC_FNV1A32_OFFSET_BASIS;

    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= HC_FNV1A32_PRIME; /* uint32_t arithmetic wraps mod 2^32, which FNV relies on */
    }
    return h;
}

uint64_t hc_fnv1a64(uint64_t h, const void *data, size_t len)
{
    const unsigned char *p = data;

    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= HC_FNV1A64_PRIME; /* wraps mod 2^64 */
    }
    return h;
}
