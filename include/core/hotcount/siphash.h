/* Layer: core. A keyed hash for every table keyed by untrusted input (post ids from producers,
 * URLs from HTTP clients): SipHash (J.-P. Aumasson and D. J. Bernstein, "SipHash: a fast
 * short-input PRF", INDOCRYPT 2012, https://131002.net/siphash/siphash.pdf), written from the
 * paper's description.
 *
 * With a key the attacker does not know, colliding inputs cannot be computed offline, so
 * hash flooding (ids chosen to land in one probe run) costs the attacker as much as random ids
 * cost us. The tables use SipHash-1-3 (one compression round, three finalisation rounds: the
 * variant Rust's and Python's hash tables settled on for speed at this use); SipHash-2-4 (the
 * paper's recommendation) is here too, for the paper's test vector.
 *
 * The key is per process: 16 bytes from getrandom(2) on first use (hc_hash_process_key), so
 * hash values differ from run to run and must never be persisted or sent anywhere. Any thread. */
#ifndef HOTCOUNT_SIPHASH_H
#define HOTCOUNT_SIPHASH_H

#include <stddef.h>
#include <stdint.h>

typedef struct hc_hash_key {
    uint64_t k0, k1; /* the 128-bit key, as two little-endian words */
} hc_hash_key_t;

/* The process-wide random key (the same for every call in one process). */
hc_hash_key_t hc_hash_process_key(void);

uint64_t hc_siphash13(const hc_hash_key_t *key, const void *data, size_t len);
uint64_t hc_siphash24(const hc_hash_key_t *key, const void *data, size_t len);

/* SipHash-1-3 fed a byte at a time, for input that only exists as a stream (a JSON key decoded
 * from its escapes): init, any number of _byte calls, then _final, which gives what
 * hc_siphash13 gives for the same bytes. Caller's storage; no allocation. */
typedef struct hc_siphash13_stream {
    uint64_t v0, v1, v2, v3;
    uint64_t m; /* the word being filled, little-endian */
    size_t len; /* bytes fed so far */
} hc_siphash13_stream_t;

void hc_siphash13_init(hc_siphash13_stream_t *st, const hc_hash_key_t *key);
void hc_siphash13_byte(hc_siphash13_stream_t *st, unsigned char byte);
uint64_t hc_siphash13_final(hc_siphash13_stream_t *st);

#endif
