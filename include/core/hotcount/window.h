/* Layer: core. When a window closes: on wall-clock boundaries shared by every process, so that
 * the windows of all stage-1 instances end together and stage 2 can close its own just after
 * their partials arrive. Unaligned windows (first event + flush.ms) let stage 2 wait up to a
 * further flush.ms for each stage-1 burst: about a second of extra latency per like, and a hot
 * post's partials from two stage-1 instances split over two store writes. Pure; any thread. */
#ifndef HOTCOUNT_WINDOW_H
#define HOTCOUNT_WINDOW_H

#include <stdint.h>

/* The monotonic time (same clock as now_mono_ms) of the first wall-clock instant after
 * now_wall_ms that is phase_ms past a multiple of flush_ms (0 <= phase_ms < flush_ms,
 * flush_ms >= 1). A window opened now closes then: after at most flush_ms. */
int64_t hc_window_due_ms(int64_t now_mono_ms, int64_t now_wall_ms, int64_t flush_ms,
                         int64_t phase_ms);

/* Stage 2's phase: how long after stage 1's boundary it closes its window, time for stage 1 to
 * commit its transaction and for the partials to arrive; half a window, so that a late stage-1
 * commit still lands in the same stage-2 window. */
int64_t hc_window_stage2_phase_ms(int64_t flush_ms);

/* Stage 2's close time for a window opened now. On time: the next phase point. A window that
 * opens after a phase point at which stage 2 flushed nothing holds the partials of a stage-1
 * commit that ran past the phase (a slow transaction on a busy machine): it closes
 * hc_window_stage2_linger_ms after it opened, not at the next phase point a whole flush.ms
 * later, which was the tail of the end-to-end latency. last_flush_wall_ms: the wall time of
 * stage 2's last flush (INT64_MIN before the first). So stage 2 flushes at most twice per
 * flush.ms, and once per flush.ms while stage 1 commits within the phase. */
int64_t hc_window_stage2_due_ms(int64_t now_mono_ms, int64_t now_wall_ms, int64_t flush_ms,
                                int64_t last_flush_wall_ms);

/* How long a late stage-2 window waits for the rest of the late commits' partials (those of one
 * transaction arrive together; other stage-1 instances commit within tens of milliseconds). */
int64_t hc_window_stage2_linger_ms(int64_t flush_ms);

#endif
