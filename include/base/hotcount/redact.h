/* Layer: base. Secrets out of every message: the one place that knows what a secret looks like.
 *
 * A secret is a password in a store URI or connection string (redis://user:PW@host,
 * redis://:PW@host, postgresql://user:PW@host, ?password=PW, a libpq "key=value" string's
 * password=PW or sslpassword=PW) and the value of a secret key: kafka.sasl.*, any key ending in
 * "password" or "secret" (ssl.key.password, sasl.password, sasl.oauthbearer.client.secret ...),
 * ssl.key.pem and ssl_key (private keys). Each is shown as HC_REDACTED. Every configuration
 * error, store and Kafka error, log line or output that can quote a configured value goes
 * through these functions.
 *
 * Pure functions on caller-owned buffers; thread-safe. Output is always NUL-terminated and cut
 * to out_size (a cut never exposes more of a secret than the uncut text would). */
#ifndef HOTCOUNT_REDACT_H
#define HOTCOUNT_REDACT_H

#include <stdbool.h>
#include <stddef.h>

#define HC_REDACTED "***"

struct hc_config;

/* Whether the value of this configuration key is a secret. Takes a hotcount key
 * ("kafka.producer.sasl.password") or a bare librdkafka property name ("sasl.password"). */
bool hc_redact_is_secret_key(const char *key);

/* uri with every password in it replaced by HC_REDACTED; anything else is kept, so the result
 * still tells which host, scheme or option was meant. Works on text that is no valid URI too
 * (a mistyped scheme, a libpq key=value string). */
void hc_redact_uri(const char *uri, char *out, size_t out_size);

/* The value of key as it may be shown: HC_REDACTED for a secret key, else the value with any
 * password in it redacted (hc_redact_uri). */
void hc_redact_kv(const char *key, const char *value, char *out, size_t out_size);

/* A "key=value" text as given to -X or written in a properties file (also one without '='),
 * with its value redacted as hc_redact_kv does. */
void hc_redact_assignment(const char *kv, char *out, size_t out_size);

/* Replaces in place every occurrence of secret in text with HC_REDACTED (secrets shorter than
 * 4 bytes are left alone: they would blank out ordinary words). */
void hc_redact_secret_in(char *text, size_t text_size, const char *secret);

/* The safety net: replaces in place every secret cfg holds (the store URI's password, the
 * password read from store.password.file, the values of secret kafka.* keys, those read from
 * kafka.*.file included) wherever it appears in text, e.g. quoted back by a library. */
void hc_redact_config_secrets(char *text, size_t text_size, const struct hc_config *cfg);

#endif
