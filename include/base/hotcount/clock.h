/* Layer: base. The process's two clocks, in milliseconds, and a sleep. Any thread. */
#ifndef HOTCOUNT_CLOCK_H
#define HOTCOUNT_CLOCK_H

#include <stdint.h>

/* Now in milliseconds, monotonic (windows, backoffs, deadlines). */
int64_t hc_now_ms(void);
/* Wall clock, milliseconds since the epoch (timestamps in records and rows). */
int64_t hc_wall_ms(void);
/* Sleeps ms milliseconds (<= 0: returns at once), resuming after signals. */
void hc_sleep_ms(int64_t ms);

#endif
