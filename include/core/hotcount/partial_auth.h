/* Layer: core. Authenticated partials (issue 25; docs/FORMATS.md, "Authenticated partials";
 * docs/THREAT-MODEL.md): stage 1 signs each record it writes to topic.partials with a key
 * shared with stage 2, which dead-letters a record whose signature is missing or wrong
 * (`partial_unauthenticated`) before it touches any state.
 *
 * The signature is HMAC-SHA256 (RFC 2104, FIPS 180-4; written from the standards here, with a
 * differential test against Python's hmac module: OpenSSL is an optional dependency of this
 * build, and the core links no library) over
 *
 *   "hotcount-partial-v1" 0x00 | len(window) as 4 bytes big-endian | window | value
 *
 * where window is the record's hotcount-window header value (empty when it has none) and value
 * its bytes: the length prefix keeps a byte from moving between the two. It travels in the
 * header `hotcount-auth` as "<key id>:<64 lowercase hex digits>".
 *
 * The key file (partials.auth.key.file) holds one or two keys, a line each:
 *
 *   <key id> <secret as 64..256 hex digits (32..128 bytes)>
 *
 * with '#' comments and blank lines. The first key signs; every key listed verifies, so a key
 * is rotated by listing the new one second (stage 2 accepts it), then first (stage 1 signs
 * with it), then alone. A key id is 1..32 of [A-Za-z0-9._-]. Errors name the line, never a byte
 * of a secret.
 *
 * What it protects against: a writer of topic.partials without the key can no longer make
 * stage 2 count anything (a forged delta, a forged window claim, an events total that voids a
 * window): each is dead-lettered. What it does not: a replay of a record the attacker read
 * (the source check refuses most: an older window of its writer overlaps what was taken), a
 * writer holding the key, and reading the topic. Kafka ACLs still decide who may write and read.
 *
 * Thread-safe once built: the keyring is read only. */
#ifndef HOTCOUNT_PARTIAL_AUTH_H
#define HOTCOUNT_PARTIAL_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hotcount/err.h"

#define HC_AUTH_HEADER "hotcount-auth"
#define HC_AUTH_KEYS_MAX 2
#define HC_AUTH_KEY_ID_MAX 32
#define HC_AUTH_SECRET_MIN 32
#define HC_AUTH_SECRET_MAX 128
/* "<key id>:" and 64 hex digits */
#define HC_AUTH_VALUE_MAX (HC_AUTH_KEY_ID_MAX + 1 + 64)

/* HMAC-SHA256 of the concatenation of parts (n of them). */
void hc_hmac_sha256(const uint8_t *key, size_t key_len, const void *const *parts,
                    const size_t *part_lens, size_t n, uint8_t out[32]);

typedef struct hc_auth_key {
    char id[HC_AUTH_KEY_ID_MAX + 1];
    uint8_t secret[HC_AUTH_SECRET_MAX];
    size_t secret_len;
} hc_auth_key_t;

typedef struct hc_auth_keyring {
    hc_auth_key_t keys[HC_AUTH_KEYS_MAX]; /* [0] signs */
    size_t count;
} hc_auth_keyring_t;

/* Parses a key file's text (len bytes). HC_ERR_INVALID with errstr naming the line and what is
 * wrong (never a secret's bytes); nothing else fails. */
hc_err_t hc_auth_keyring_parse(hc_auth_keyring_t *kr, const char *text, size_t len, char *errstr,
                               size_t errstr_size);
/* Overwrites the secrets (call before freeing or leaving the keyring's storage). */
void hc_auth_keyring_wipe(hc_auth_keyring_t *kr);

/* The header value for a record: "<id>:<hex>" with the first key, NUL-terminated in
 * out (HC_AUTH_VALUE_MAX + 1 bytes). Returns its length. window may be NULL (len 0). */
size_t hc_auth_sign(const hc_auth_keyring_t *kr, const void *window, size_t window_len,
                    const void *value, size_t value_len, char out[HC_AUTH_VALUE_MAX + 1]);

/* Whether auth (the record's hotcount-auth value, NULL when it has none) is a signature of
 * (window, value) under one of kr's keys. The comparison is constant-time in the MAC. errstr
 * says what failed (missing, malformed, unknown key id, wrong MAC): the key id is named, never
 * a MAC or a secret. */
bool hc_auth_verify(const hc_auth_keyring_t *kr, const void *auth, size_t auth_len,
                    const void *window, size_t window_len, const void *value, size_t value_len,
                    char *errstr, size_t errstr_size);

/* A new key file's text: "# ...\n<id> <64 hex digits>\n" from 32 random bytes the caller
 * drew (random). out must hold 160 bytes; returns the length. */
size_t hc_auth_key_file_text(const char *id, const uint8_t random[32], char *out, size_t size);

#endif
