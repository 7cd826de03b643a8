/* Layer: cli. The command line's UTC times: what --since, --until and --from accept, and how the
 * commands print a time. Pure (no clock, no locale, no timezone): the same text means the same
 * instant on every machine. */
#ifndef HOTCOUNT_CLI_TIME_H
#define HOTCOUNT_CLI_TIME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Milliseconds since the epoch, or UTC "YYYY-MM-DD[THH:MM[:SS]][Z]" ('T' or a space). False on
 * anything else, *ms untouched. */
bool hc_cli_parse_time(const char *s, int64_t *ms);

/* "YYYY-MM-DDTHH:MM:SS[.mmm]Z" of ms into out (40 bytes are enough; years past 9999 wrap); "-"
 * for a negative ms (none). Returns out. */
const char *hc_cli_format_time(int64_t ms, bool millis, char *out, size_t size);

#endif
