/* Layer: cli. The commands' one wait: every pause of a command (a refresh interval, a retry, a
 * process that runs until SIGINT/SIGTERM, the stop bound) goes through hc_cli_wait, so each ends
 * as soon as its stop flag is set. Any thread. */
#ifndef HOTCOUNT_CLI_WAIT_H
#define HOTCOUNT_CLI_WAIT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* How often a wait looks at its stop flag: a stop is seen within this. */
#define HC_CLI_WAIT_SLICE_MS 50

/* Sleeps ms milliseconds (ms < 0: until *stop is set), looking at *stop (NULL: never set)
 * every HC_CLI_WAIT_SLICE_MS. Returns true as soon as *stop is set (at once when it already
 * is), false when the time ran out. */
bool hc_cli_wait(int64_t ms, const atomic_bool *stop);

#endif
