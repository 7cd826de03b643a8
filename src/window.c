/* See include/hotcount/window.h. */
#include "hotcount/window.h"

int64_t hc_window_due_ms(int64_t now_mono_ms, int64_t now_wall_ms, int64_t flush_ms,
                         int64_t phase_ms)
{
    /* floor division: the wall clock may be set before 1970 in a test, never in production */
    int64_t shifted = now_wall_ms - phase_ms;
    int64_t k = shifted / flush_ms - (shifted % flush_ms < 0);
    int64_t boundary = (k + 1) * flush_ms + phase_ms;
    return now_mono_ms + (boundary - now_wall_ms);
}

int64_t hc_window_stage2_phase_ms(int64_t flush_ms)
{
    return flush_ms / 2;
}
