/* Authenticated partials; see include/core/hotcount/partial_auth.h.
 *
 * SHA-256 from FIPS 180-4 (section 6.2: the message schedule, 64 rounds, the padding of
 * section 5.1.1), HMAC from RFC 2104 (keys longer than the block hashed first, ipad 0x36,
 * opad 0x5c). Checked against RFC 4231's vectors (tests/unit/test_partial_auth.c) and Python's
 * hmac on random inputs (tests/unit/test_partial_auth.py). */
#include "hotcount/partial_auth.h"

#include <stdio.h>
#include <string.h>

/* ---- SHA-256 ------------------------------------------------------------------------------ */

typedef struct sha256 {
    uint32_t h[8];
    uint8_t block[64];
    size_t used;    /* bytes in block */
    uint64_t total; /* bytes hashed */
} sha256_t;

static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static inline uint32_t ror(uint32_t x, int n)
{
    return (x >> n) | (x << (32 - n));
}

static void sha256_init(sha256_t *s)
{
    static const uint32_t h0[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memcpy(s->h, h0, sizeof(h0));
    s->used = 0;
    s->total = 0;
}

static void sha256_block(sha256_t *s, const uint8_t *p)
{
    uint32_t w[64];
    for (int t = 0; t < 16; t++) {
        w[t] = (uint32_t)p[4 * t] << 24 | (uint32_t)p[4 * t + 1] << 16 |
               (uint32_t)p[4 * t + 2] << 8 | (uint32_t)p[4 * t + 3];
    }
    for (int t = 16; t < 64; t++) {
        uint32_t s0 = ror(w[t - 15], 7) ^ ror(w[t - 15], 18) ^ (w[t - 15] >> 3);
        uint32_t s1 = ror(w[t - 2], 17) ^ ror(w[t - 2], 19) ^ (w[t - 2] >> 10);
        w[t] = w[t - 16] + s0 + w[t - 7] + s1;
    }
    uint32_t a = s->h[0], b = s->h[1], c = s->h[2], d = s->h[3];
    uint32_t e = s->h[4], f = s->h[5], g = s->h[6], h = s->h[7];
    for (int t = 0; t < 64; t++) {
        uint32_t t1 =
            h + (ror(e, 6) ^ ror(e, 11) ^ ror(e, 25)) + ((e & f) ^ (~e & g)) + K[t] + w[t];
        uint32_t t2 = (ror(a, 2) ^ ror(a, 13) ^ ror(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        h = g;
        g = f;
        f = e;
        e = d + t1;
        d = c;
        c = b;
        b = a;
        a = t1 + t2;
    }
    s->h[0] += a;
    s->h[1] += b;
    s->h[2] += c;
    s->h[3] += d;
    s->h[4] += e;
    s->h[5] += f;
    s->h[6] += g;
    s->h[7] += h;
}

static void sha256_update(sha256_t *s, const void *data, size_t len)
{
    const uint8_t *p = data;
    s->total += len;
    if (s->used > 0) {
        size_t take = 64 - s->used < len ? 64 - s->used : len;
        memcpy(s->block + s->used, p, take);
        s->used += take;
        p += take;
        len -= take;
        if (s->used < 64) {
            return;
        }
        sha256_block(s, s->block);
        s->used = 0;
    }
    for (; len >= 64; p += 64, len -= 64) {
        sha256_block(s, p);
    }
    memcpy(s->block, p, len);
    s->used = len;
}

static void sha256_final(sha256_t *s, uint8_t out[32])
{
    uint64_t bits = s->total * 8;
    uint8_t pad[72] = {0x80};
    size_t padlen = s->used < 56 ? 56 - s->used : 120 - s->used;
    for (int i = 0; i < 8; i++) {
        pad[padlen + (size_t)i] = (uint8_t)(bits >> (56 - 8 * i));
    }
    sha256_update(s, pad, padlen + 8);
    for (int i = 0; i < 8; i++) {
        out[4 * i] = (uint8_t)(s->h[i] >> 24);
        out[4 * i + 1] = (uint8_t)(s->h[i] >> 16);
        out[4 * i + 2] = (uint8_t)(s->h[i] >> 8);
        out[4 * i + 3] = (uint8_t)s->h[i];
    }
}

/* ---- HMAC --------------------------------------------------------------------------------- */

void hc_hmac_sha256(const uint8_t *key, size_t key_len, const void *const *parts,
                    const size_t *part_lens, size_t n, uint8_t out[32])
{
    uint8_t k[64] = {0}, pad[64], inner[32];
    sha256_t s;
    if (key_len > 64) {
        sha256_init(&s);
        sha256_update(&s, key, key_len);
        sha256_final(&s, k);
    } else if (key_len > 0) {
        memcpy(k, key, key_len);
    }
    for (int i = 0; i < 64; i++) {
        pad[i] = k[i] ^ 0x36;
    }
    sha256_init(&s);
    sha256_update(&s, pad, 64);
    for (size_t i = 0; i < n; i++) {
        if (part_lens[i] > 0) {
            sha256_update(&s, parts[i], part_lens[i]);
        }
    }
    sha256_final(&s, inner);
    for (int i = 0; i < 64; i++) {
        pad[i] = k[i] ^ 0x5c;
    }
    sha256_init(&s);
    sha256_update(&s, pad, 64);
    sha256_update(&s, inner, 32);
    sha256_final(&s, out);
    memset(k, 0, sizeof(k)); /* no copy of the key left on the stack */
    memset(pad, 0, sizeof(pad));
}

/* ---- the key file ------------------------------------------------------------------------- */

static int hexval(char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

static bool is_id_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
}

hc_err_t hc_auth_keyring_parse(hc_auth_keyring_t *kr, const char *text, size_t len, char *errstr,
                               size_t errstr_size)
{
    hc_auth_keyring_t out;
    memset(&out, 0, sizeof(out));
    const char *p = text, *end = text + len;
    hc_err_t err = HC_OK;
    for (int line = 1; p < end && err == HC_OK; line++) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        const char *le = eol ? eol : end;
        const char *q = p;
        p = eol ? eol + 1 : end;
        while (q < le && (*q == ' ' || *q == '\t')) {
            q++;
        }
        while (le > q && (le[-1] == ' ' || le[-1] == '\t' || le[-1] == '\r')) {
            le--;
        }
        if (q == le || *q == '#') {
            continue;
        }
        if (out.count == HC_AUTH_KEYS_MAX) {
            hc_errstr_set(errstr, errstr_size,
                          "line %d: more than %d keys (one signs, one more during a rotation)",
                          line, HC_AUTH_KEYS_MAX);
            err = HC_ERR_INVALID;
            break;
        }
        hc_auth_key_t *k = &out.keys[out.count];
        size_t idlen = 0;
        while (q < le && is_id_char(*q) && idlen < HC_AUTH_KEY_ID_MAX) {
            k->id[idlen++] = *q++;
        }
        k->id[idlen] = '\0';
        if (idlen == 0 || q == le || (*q != ' ' && *q != '\t')) {
            hc_errstr_set(errstr, errstr_size,
                          "line %d: want \"<key id> <secret in hex>\" with a key id of 1..%d "
                          "letters, digits, '.', '_' or '-'",
                          line, HC_AUTH_KEY_ID_MAX);
            err = HC_ERR_INVALID;
            break;
        }
        for (size_t i = 0; i < out.count; i++) {
            if (strcmp(out.keys[i].id, k->id) == 0) {
                hc_errstr_set(errstr, errstr_size, "line %d: key id %s listed twice", line, k->id);
                err = HC_ERR_INVALID;
            }
        }
        while (q < le && (*q == ' ' || *q == '\t')) {
            q++;
        }
        size_t hex = (size_t)(le - q);
        bool ok = err == HC_OK && hex % 2 == 0 && hex >= 2 * HC_AUTH_SECRET_MIN &&
                  hex <= 2 * HC_AUTH_SECRET_MAX;
        for (size_t i = 0; ok && i < hex; i += 2) {
            int hi = hexval(q[i]), lo = hexval(q[i + 1]);
            ok = hi >= 0 && lo >= 0;
            k->secret[i / 2] = (uint8_t)(ok ? hi << 4 | lo : 0);
        }
        if (err == HC_OK && !ok) {
            hc_errstr_set(errstr, errstr_size,
                          "line %d: the secret of key %s must be %d..%d hex digits (%d..%d "
                          "bytes), an even count",
                          line, k->id, 2 * HC_AUTH_SECRET_MIN, 2 * HC_AUTH_SECRET_MAX,
                          HC_AUTH_SECRET_MIN, HC_AUTH_SECRET_MAX);
            err = HC_ERR_INVALID;
        }
        k->secret_len = hex / 2;
        out.count++;
    }
    if (err == HC_OK && out.count == 0) {
        hc_errstr_set(errstr, errstr_size, "no key in the file");
        err = HC_ERR_INVALID;
    }
    if (err == HC_OK) {
        *kr = out;
    }
    hc_auth_keyring_wipe(&out);
    return err;
}

void hc_auth_keyring_wipe(hc_auth_keyring_t *kr)
{
    /* volatile: the compiler may not drop a store to memory about to be freed */
    volatile uint8_t *p = (volatile uint8_t *)kr;
    for (size_t i = 0; i < sizeof(*kr); i++) {
        p[i] = 0;
    }
}

/* ---- sign and verify ---------------------------------------------------------------------- */

static const char DOMAIN[] = "hotcount-partial-v1"; /* and its NUL */

static void mac_of(const hc_auth_key_t *k, const void *window, size_t window_len, const void *value,
                   size_t value_len, uint8_t out[32])
{
    uint8_t len_be[4] = {(uint8_t)(window_len >> 24), (uint8_t)(window_len >> 16),
                         (uint8_t)(window_len >> 8), (uint8_t)window_len};
    const void *parts[4] = {DOMAIN, len_be, window, value};
    size_t lens[4] = {sizeof(DOMAIN), 4, window ? window_len : 0, value ? value_len : 0};
    hc_hmac_sha256(k->secret, k->secret_len, parts, lens, 4, out);
}

size_t hc_auth_sign(const hc_auth_keyring_t *kr, const void *window, size_t window_len,
                    const void *value, size_t value_len, char out[HC_AUTH_VALUE_MAX + 1])
{
    static const char digits[] = "0123456789abcdef";
    uint8_t mac[32];
    mac_of(&kr->keys[0], window, window_len, value, value_len, mac);
    size_t n = strlen(kr->keys[0].id);
    memcpy(out, kr->keys[0].id, n);
    out[n++] = ':';
    for (int i = 0; i < 32; i++) {
        out[n++] = digits[mac[i] >> 4];
        out[n++] = digits[mac[i] & 15];
    }
    out[n] = '\0';
    return n;
}

bool hc_auth_verify(const hc_auth_keyring_t *kr, const void *auth, size_t auth_len,
                    const void *window, size_t window_len, const void *value, size_t value_len,
                    char *errstr, size_t errstr_size)
{
    if (!auth) {
        hc_errstr_set(errstr, errstr_size, "partial: no " HC_AUTH_HEADER " header");
        return false;
    }
    const char *a = auth;
    const char *colon = memchr(a, ':', auth_len);
    size_t idlen = colon ? (size_t)(colon - a) : 0;
    uint8_t given[32];
    bool ok = colon && idlen >= 1 && idlen <= HC_AUTH_KEY_ID_MAX && auth_len == idlen + 1 + 64;
    for (size_t i = 0; ok && i < 32; i++) {
        int hi = hexval(colon[1 + 2 * i]), lo = hexval(colon[2 + 2 * i]);
        ok = hi >= 0 && lo >= 0 && !(colon[1 + 2 * i] >= 'A' && colon[1 + 2 * i] <= 'F') &&
             !(colon[2 + 2 * i] >= 'A' && colon[2 + 2 * i] <= 'F');
        given[i] = (uint8_t)(ok ? hi << 4 | lo : 0);
    }
    for (size_t i = 0; ok && i < idlen; i++) {
        ok = is_id_char(a[i]);
    }
    if (!ok) {
        hc_errstr_set(errstr, errstr_size,
                      "partial: header " HC_AUTH_HEADER " is not <key id>:<64 hex digits>");
        return false;
    }
    for (size_t k = 0; k < kr->count; k++) {
        if (strlen(kr->keys[k].id) != idlen || memcmp(kr->keys[k].id, a, idlen) != 0) {
            continue;
        }
        uint8_t mac[32], diff = 0;
        mac_of(&kr->keys[k], window, window_len, value, value_len, mac);
        for (int i = 0; i < 32; i++) {
            diff |= (uint8_t)(mac[i] ^ given[i]);
        }
        if (diff == 0) {
            return true;
        }
        hc_errstr_set(errstr, errstr_size, "partial: the signature under key %s does not match",
                      kr->keys[k].id);
        return false;
    }
    hc_errstr_set(errstr, errstr_size, "partial: signed with a key id this stage does not hold");
    return false;
}

size_t hc_auth_key_file_text(const char *id, const uint8_t random[32], char *out, size_t size)
{
    char hex[65];
    for (int i = 0; i < 32; i++) {
        snprintf(hex + 2 * i, 3, "%02x", random[i]);
    }
    int n = snprintf(out, size,
                     "# hotcount partials.auth.key.file: <key id> <secret in hex>; the first "
                     "line signs\n%s %s\n",
                     id, hex);
    memset(hex, 0, sizeof(hex));
    return n < 0 || (size_t)n >= size ? 0 : (size_t)n;
}
