/* Layer: core. Percent-decoding (RFC 3986, section 2.1), the one copy: serve's paths and query
 * strings, the store URIs' credentials and options (hc_store_percent_decode), and the decoded
 * form of a URI's password that redaction also hides. Pure, any thread. */
#ifndef HOTCOUNT_PERCENT_H
#define HOTCOUNT_PERCENT_H

#include <stdbool.h>
#include <stddef.h>

enum {
    HC_PCT_PLUS_IS_SPACE = 1, /* '+' is a space (application/x-www-form-urlencoded queries) */
    HC_PCT_NO_NUL = 2,        /* "%00" is refused: the result goes into a C string */
    HC_PCT_LENIENT = 4,       /* a '%' without two hex digits is kept as it is, never refused */
    HC_PCT_TRUNCATE = 8,      /* decode what fits in cap and stop there, never refused for room */
};

/* Decodes s[0..n) into out (cap bytes; not NUL-terminated) under flags (HC_PCT_*), the hex
 * digits in either case. True with *out_len set; false, *out_len untouched and out's content
 * undefined, for a '%' not followed by two hex digits within s (unless HC_PCT_LENIENT), for
 * "%00" under HC_PCT_NO_NUL, or for a result longer than cap (unless HC_PCT_TRUNCATE). */
bool hc_percent_decode(const char *s, size_t n, unsigned flags, char *out, size_t cap,
                       size_t *out_len);

#endif
