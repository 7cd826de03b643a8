/* SipHash-c-d (see include/core/hotcount/siphash.h), from the paper's section 2:
 *
 *   initialisation  v0 = k0 ^ "somepseu", v1 = k1 ^ "dorandom", v2 = k0 ^ "lygenera",
 *                   v3 = k1 ^ "tedbytes" (the ASCII constants, as 64-bit words);
 *   compression     per 8-byte little-endian word m: v3 ^= m, c SipRounds, v0 ^= m; the last
 *                   word holds the 0..7 remaining bytes and, in its top byte, len mod 256;
 *   finalisation    v2 ^= 0xff, d SipRounds, the result v0 ^ v1 ^ v2 ^ v3.
 *
 * The process key comes from getrandom(2) once (pthread_once). Should the kernel refuse (no
 * entropy source at all, which Linux >= 3.17 never does after boot), /dev/urandom is read; a
 * process that gets neither aborts rather than run with a guessable key. */
#include "hotcount/siphash.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

static inline uint64_t rotl(uint64_t x, int b)
{
    return (x << b) | (x >> (64 - b));
}

static inline uint64_t load_le64(const unsigned char *p)
{
    return (uint64_t)p[0] | (uint64_t)p[1] << 8 | (uint64_t)p[2] << 16 | (uint64_t)p[3] << 24 |
           (uint64_t)p[4] << 32 | (uint64_t)p[5] << 40 | (uint64_t)p[6] << 48 |
           (uint64_t)p[7] << 56;
}

#define SIPROUND                                                                                   \
    do {                                                                                           \
        v0 += v1;                                                                                  \
        v1 = rotl(v1, 13);                                                                         \
        v1 ^= v0;                                                                                  \
        v0 = rotl(v0, 32);                                                                         \
        v2 += v3;                                                                                  \
        v3 = rotl(v3, 16);                                                                         \
        v3 ^= v2;                                                                                  \
        v0 += v3;                                                                                  \
        v3 = rotl(v3, 21);                                                                         \
        v3 ^= v0;                                                                                  \
        v2 += v1;                                                                                  \
        v1 = rotl(v1, 17);                                                                         \
        v1 ^= v2;                                                                                  \
        v2 = rotl(v2, 32);                                                                         \
    } while (0)

static inline uint64_t siphash(const hc_hash_key_t *key, const void *data, size_t len, int c, int d)
{
    const unsigned char *p = data;
    uint64_t v0 = key->k0 ^ 0x736f6d6570736575ull;
    uint64_t v1 = key->k1 ^ 0x646f72616e646f6dull;
    uint64_t v2 = key->k0 ^ 0x6c7967656e657261ull;
    uint64_t v3 = key->k1 ^ 0x7465646279746573ull;
    size_t n = len;

    for (; n >= 8; n -= 8, p += 8) {
        uint64_t m = load_le64(p);
        v3 ^= m;
        for (int i = 0; i < c; i++) {
            SIPROUND;
        }
        v0 ^= m;
    }
    uint64_t b = (uint64_t)len << 56;
    /* The 0..7 remaining bytes, little-endian; a switch rather than a loop: post ids are short,
     * so this tail is most of the input. */
    switch (n) {
    case 7:
        b |= (uint64_t)p[6] << 48;
        __attribute__((fallthrough));
    case 6:
        b |= (uint64_t)p[5] << 40;
        __attribute__((fallthrough));
    case 5:
        b |= (uint64_t)p[4] << 32;
        __attribute__((fallthrough));
    case 4:
        b |= (uint64_t)p[3] << 24;
        __attribute__((fallthrough));
    case 3:
        b |= (uint64_t)p[2] << 16;
        __attribute__((fallthrough));
    case 2:
        b |= (uint64_t)p[1] << 8;
        __attribute__((fallthrough));
    case 1:
        b |= (uint64_t)p[0];
        break;
    default:
        break;
    }
    v3 ^= b;
    for (int i = 0; i < c; i++) {
        SIPROUND;
    }
    v0 ^= b;
    v2 ^= 0xff;
    for (int i = 0; i < d; i++) {
        SIPROUND;
    }
    return v0 ^ v1 ^ v2 ^ v3;
}

uint64_t hc_siphash13(const hc_hash_key_t *key, const void *data, size_t len)
{
    return siphash(key, data, len, 1, 3);
}

uint64_t hc_siphash24(const hc_hash_key_t *key, const void *data, size_t len)
{
    return siphash(key, data, len, 2, 4);
}

void hc_siphash13_init(hc_siphash13_stream_t *st, const hc_hash_key_t *key)
{
    st->v0 = key->k0 ^ 0x736f6d6570736575ull;
    st->v1 = key->k1 ^ 0x646f72616e646f6dull;
    st->v2 = key->k0 ^ 0x6c7967656e657261ull;
    st->v3 = key->k1 ^ 0x7465646279746573ull;
    st->m = 0;
    st->len = 0;
}

void hc_siphash13_byte(hc_siphash13_stream_t *st, unsigned char byte)
{
    st->m |= (uint64_t)byte << (8 * (st->len & 7));
    st->len++;
    if ((st->len & 7) == 0) {
        uint64_t v0 = st->v0, v1 = st->v1, v2 = st->v2, v3 = st->v3;
        v3 ^= st->m;
        SIPROUND;
        v0 ^= st->m;
        st->v0 = v0, st->v1 = v1, st->v2 = v2, st->v3 = v3;
        st->m = 0;
    }
}

uint64_t hc_siphash13_final(hc_siphash13_stream_t *st)
{
    uint64_t v0 = st->v0, v1 = st->v1, v2 = st->v2, v3 = st->v3;
    uint64_t b = st->m | (uint64_t)st->len << 56; /* the 0..7 bytes left, and len mod 256 */
    v3 ^= b;
    SIPROUND;
    v0 ^= b;
    v2 ^= 0xff;
    for (int i = 0; i < 3; i++) {
        SIPROUND;
    }
    return v0 ^ v1 ^ v2 ^ v3;
}

static hc_hash_key_t process_key;
static pthread_once_t process_key_once = PTHREAD_ONCE_INIT;

static void init_process_key(void)
{
    unsigned char buf[16];
    size_t got = 0;
    while (got < sizeof(buf)) {
        ssize_t r = getrandom(buf + got, sizeof(buf) - got, 0);
        if (r <= 0) {
            break;
        }
        got += (size_t)r;
    }
    if (got < sizeof(buf)) {
        int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
        got = 0;
        while (fd >= 0 && got < sizeof(buf)) {
            ssize_t r = read(fd, buf + got, sizeof(buf) - got);
            if (r <= 0) {
                break;
            }
            got += (size_t)r;
        }
        if (fd >= 0) {
            close(fd);
        }
    }
    if (got < sizeof(buf)) {
        fputs("hotcount: no random bytes for the hash key (getrandom and /dev/urandom failed)\n",
              stderr);
        abort();
    }
    process_key.k0 = load_le64(buf);
    process_key.k1 = load_le64(buf + 8);
}

hc_hash_key_t hc_hash_process_key(void)
{
    pthread_once(&process_key_once, init_process_key);
    return process_key;
}
