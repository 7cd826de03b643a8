/* See include/core/hotcount/window.h. */
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

int64_t hc_window_stage2_linger_ms(int64_t flush_ms)
{
    return flush_ms / 10;
}

int64_t hc_window_stage2_due_ms(int64_t now_mono_ms, int64_t now_wall_ms, int64_t flush_ms,
                                int64_t last_flush_wall_ms)
{
    int64_t next =
        hc_window_due_ms(now_mono_ms, now_wall_ms, flush_ms, hc_window_stage2_phase_ms(flush_ms));
    int64_t last_phase_wall = now_wall_ms + (next - now_mono_ms) - flush_ms; /* <= now */
    if (last_flush_wall_ms >= last_phase_wall) {
        return next; /* this phase point had its flush: one per flush.ms */
    }
    int64_t late = now_mono_ms + hc_window_stage2_linger_ms(flush_ms);
    return late < next ? late : next;
}
