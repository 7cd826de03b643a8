/* See old_hash.h: a verbatim copy of the old (unkeyed) hash_key of src/core/table.c. */
#include "old_hash.h"

#include <stdio.h>
#include <string.h>

static inline uint64_t load64(const unsigned char *p)
{
    uint64_t w;
    memcpy(&w, p, sizeof(w));
    return w;
}

static inline uint32_t load32(const unsigned char *p)
{
    uint32_t w;
    memcpy(&w, p, sizeof(w));
    return w;
}

static inline uint64_t mix_word(uint64_t h, uint64_t w)
{
    h = (h ^ w) * 0xbf58476d1ce4e5b9u;
    return h ^ (h >> 31);
}

uint32_t hc_old_table_hash(const char *key, size_t len)
{
    const unsigned char *p = (const unsigned char *)key;
    uint64_t h = 0x9e3779b97f4a7c15u ^ ((uint64_t)len * 0xff51afd7ed558ccdu);
    size_t n = len;

    while (n >= 8) {
        h = mix_word(h, load64(p));
        p += 8;
        n -= 8;
    }
    if (n >= 4) {
        h = mix_word(h, (uint64_t)load32(p) | ((uint64_t)load32(p + n - 4) << 32));
    } else if (n > 0) {
        h = mix_word(h, (uint64_t)p[0] | ((uint64_t)p[n / 2] << 8) | ((uint64_t)p[n - 1] << 16));
    }
    h ^= h >> 32;
    h *= 0x94d049bb133111ebu;
    h ^= h >> 29;
    return (uint32_t)h ^ (uint32_t)(h >> 32);
}

size_t hc_old_hash_next_colliding(uint64_t *counter, unsigned bits, char *out)
{
    uint32_t mask = bits >= 32 ? UINT32_MAX : ((uint32_t)1 << bits) - 1;
    for (;;) {
        int n = snprintf(out, HC_COLLIDE_ID_MAX, "c%llx", (unsigned long long)(*counter)++);
        if ((hc_old_table_hash(out, (size_t)n) & mask) == 0) {
            return (size_t)n;
        }
    }
}
