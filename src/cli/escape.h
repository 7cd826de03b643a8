/* Printing bytes hotcount did not make (post ids, dead letters' keys and values) as text: a
 * backslash is written \\ and each byte of a C0 control (< 0x20), DEL (0x7f), a C1 control
 * (U+0080..U+009F, bytes C2 80..C2 9F) or invalid UTF-8 as \xNN (two lowercase hex digits); every
 * other byte as is. So no TAB or newline can forge a TSV row and no ESC or CSI drive the
 * terminal. Only cmd_*.c use it. */
#ifndef HOTCOUNT_CLI_ESCAPE_H
#define HOTCOUNT_CLI_ESCAPE_H

#include <stddef.h>

/* Room hc_cli_escape needs for len input bytes: each becomes at most 4, plus the NUL. */
#define HC_CLI_ESCAPED_SIZE(len) (4 * (len) + 1)

/* s[0..len) escaped into out (out_size bytes, NUL-terminated); input that would not fit whole is
 * cut at a character boundary. Returns out. */
const char *hc_cli_escape(const void *s, size_t len, char *out, size_t out_size);

#endif
