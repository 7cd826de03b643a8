/* The commands' one wait (cli_wait.h). */
#include "cli_wait.h"

#include "hotcount/clock.h"

bool hc_cli_wait(int64_t ms, const atomic_bool *stop)
{
    int64_t deadline = ms >= 0 ? hc_now_ms() + ms : INT64_MAX;
    for (;;) {
        if (stop && atomic_load(stop)) {
            return true;
        }
        int64_t left = deadline == INT64_MAX ? HC_CLI_WAIT_SLICE_MS : deadline - hc_now_ms();
        if (left <= 0) {
            return false;
        }
        hc_sleep_ms(left < HC_CLI_WAIT_SLICE_MS ? left : HC_CLI_WAIT_SLICE_MS);
    }
}
