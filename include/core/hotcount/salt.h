/* Layer: core. Producer keying: Kafka key "<post_id>#<salt>" with
 * salt = fnv1a32(user_id bytes) % salts (docs/FORMATS.md, "Events"). Pure functions, any
 * thread. */
#ifndef HOTCOUNT_SALT_H
#define HOTCOUNT_SALT_H

#include <stddef.h>
#include <stdint.h>

#include "hotcount/fnv.h" /* hc_fnv1a32 */

/* salts must be >= 1 (config validation guarantees it); 0 gives 0 rather than a division by
 * zero. */
uint32_t hc_salt(const void *user_id, size_t user_id_len, uint32_t salts);

/* Writes "<post_id>#<salt>" (salt in decimal) into buf, NUL-terminated when there is room for
 * it, not when the key exactly fills buf. Returns the key length, or 0 when buf is too small (or
 * NULL), in which case nothing is written. */
size_t hc_salt_key(char *buf, size_t buf_size, const char *post_id, size_t post_id_len,
                   uint32_t salt);

#endif
