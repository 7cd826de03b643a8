/* Layer: base. Secrets read from files: the `*.file` configuration keys.
 *
 * A password given as `-X kafka.sasl.password=PW` shows in `ps` and lands in shell histories
 * and configuration repositories; `kafka.sasl.password.file=/run/secrets/kafka` and
 * `store.password.file=/run/secrets/store` name a file instead (a Kubernetes or Docker secret,
 * a file only the service user reads). The configuration (src/base/config.c) reads the file
 * when the key is set and keeps its content as the secret value, which base/redact.h then
 * redacts like any other secret (hc_redact_config_secrets).
 *
 * The content is the whole file less trailing line ends ("\n", "\r\n": `echo pw > file` writes
 * one). It must be non-empty, at most HC_SECRET_FILE_MAX bytes and hold no NUL byte. Errors
 * name the key and the path, never a byte of the content.
 *
 * Thread-safe (no state). */
#ifndef HOTCOUNT_SECRET_FILE_H
#define HOTCOUNT_SECRET_FILE_H

#include <stddef.h>

#include "hotcount/err.h"

/* Enough for a PEM private key with its certificate chain; a password is a few dozen bytes. */
#define HC_SECRET_FILE_MAX 65536

/* Reads the secret in path for configuration key `key` (named in errors). On HC_OK *secret_out
 * is a NUL-terminated heap copy the caller owns and frees (wiping it first is the caller's
 * choice). HC_ERR_INVALID: unreadable, not a regular file, empty, too large, or holding a NUL
 * byte (errstr says which); HC_ERR_FATAL: out of memory. On error *secret_out is NULL. */
hc_err_t hc_secret_file_read(const char *key, const char *path, char **secret_out, char *errstr,
                             size_t errstr_size);

#endif
