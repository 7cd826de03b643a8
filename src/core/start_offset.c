#include "hotcount/start_offset.h"

#include "hotcount/offset.h"

hc_start_decision_t hc_start_decide(int64_t committed, int64_t low, int64_t high, int answers,
                                    int confirm)
{
    if (committed != HC_OFFSET_NONE) {
        if (committed < low) {
            return HC_START_FIRST_RETENTION;
        }
        return committed > high ? HC_START_FIRST_TRUNCATED : HC_START_COMMITTED;
    }
    if (high <= low) {
        return HC_START_FIRST; /* nothing to read twice: the first offset is the end */
    }
    return answers < confirm ? HC_START_ASK_AGAIN : HC_START_FIRST;
}

const char *hc_start_decision_name(hc_start_decision_t d)
{
    static const char *const names[HC_START_DECISION_COUNT] = {
        "committed", "first", "first (retention)", "first (truncated)", "ask again"};
    return d < HC_START_DECISION_COUNT ? names[d] : "?";
}
