/* Layer: stage. The key both stages use for authenticated partials (core/partial_auth.h):
 * partials.auth.key.file read once when a stage starts, through base/secret_file.h (a regular
 * file, at most 64 KiB, no NUL byte), parsed, and the file's bytes wiped. Errors name the key
 * and the path, and the line of the file, never a byte of a secret. Any thread. */
#ifndef HOTCOUNT_PARTIALS_KEY_H
#define HOTCOUNT_PARTIALS_KEY_H

#include <stdbool.h>

#include "hotcount/config.h"
#include "hotcount/err.h"
#include "hotcount/partial_auth.h"

/* Fills *kr from cfg->partials_auth_key_file and sets *on; with the key unset (""), *on is false
 * and *kr empty (HC_OK). HC_ERR_INVALID when the file cannot be read or is no key file. The
 * caller wipes kr (hc_auth_keyring_wipe) when done. */
hc_err_t hc_partials_key_load(const hc_config_t *cfg, hc_auth_keyring_t *kr, bool *on, char *errstr,
                              size_t errstr_size);

#endif
