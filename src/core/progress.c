/* Per-partition progress (hotcount/progress.h). */
#include "hotcount/progress.h"

#include <stdlib.h>
#include <string.h>

/* A STALLED partition is judged again this often (within the bound), so that one that moves
 * again without a commit (caught up) is reported moving soon. */
#define RECHECK_MIN_MS 250
#define RECHECK_MAX_MS 5000

void hc_progress_init(hc_progress_t *pg, int64_t bound_ms)
{
    memset(pg, 0, sizeof(*pg));
    pg->bound_ms = bound_ms > 0 ? bound_ms : 1;
    int64_t recheck = pg->bound_ms / 4;
    pg->recheck_ms = recheck < RECHECK_MIN_MS   ? RECHECK_MIN_MS
                     : recheck > RECHECK_MAX_MS ? RECHECK_MAX_MS
                                                : recheck;
}

void hc_progress_fini(hc_progress_t *pg)
{
    free(pg->parts);
    pg->parts = NULL;
    pg->cap = 0;
}

hc_progress_state_t hc_progress_next(hc_progress_state_t state, hc_progress_event_t ev,
                                     bool outcome)
{
    if (ev == HC_PROGRESS_EV_ASSIGN) {
        return HC_PROGRESS_MOVING; /* a new owner's clock; also a re-assign of the same one */
    }
    if (ev == HC_PROGRESS_EV_REVOKE || state == HC_PROGRESS_UNASSIGNED) {
        return HC_PROGRESS_UNASSIGNED; /* nothing is watched on a partition that is not ours */
    }
    switch (ev) {
    case HC_PROGRESS_EV_MOVED:
        return HC_PROGRESS_MOVING;
    case HC_PROGRESS_EV_LAGGING:
        return state == HC_PROGRESS_MOVING ? HC_PROGRESS_STALLED : state;
    case HC_PROGRESS_EV_RECOVERY_DUE:
        /* an exit cures what the stage itself got wrong, not an outage outside it */
        return state == HC_PROGRESS_STALLED && outcome ? HC_PROGRESS_GIVEN_UP : state;
    default:
        return state;
    }
}

const char *hc_progress_state_name(hc_progress_state_t state)
{
    static const char *const names[] = {"unassigned", "moving", "stalled", "given_up"};
    return (unsigned)state < sizeof(names) / sizeof(names[0]) ? names[state] : "?";
}

static hc_progress_part_t *get(hc_progress_t *pg, int32_t partition)
{
    if (partition < 0) {
        return NULL;
    }
    if (partition >= pg->cap) {
        int32_t cap = pg->cap ? pg->cap : 16;
        while (cap <= partition) {
            cap *= 2;
        }
        hc_progress_part_t *grown = realloc(pg->parts, (size_t)cap * sizeof(*grown));
        if (!grown) {
            return NULL;
        }
        memset(grown + pg->cap, 0, (size_t)(cap - pg->cap) * sizeof(*grown));
        pg->parts = grown;
        pg->cap = cap;
    }
    return &pg->parts[partition];
}

const hc_progress_part_t *hc_progress_part(const hc_progress_t *pg, int32_t partition)
{
    return partition >= 0 && partition < pg->cap ? &pg->parts[partition] : NULL;
}

hc_err_t hc_progress_assign(hc_progress_t *pg, int32_t partition, int64_t now_ms)
{
    hc_progress_part_t *pp = get(pg, partition);
    if (!pp) {
        return HC_ERR_FATAL;
    }
    *pp = (hc_progress_part_t){.state = hc_progress_next(pp->state, HC_PROGRESS_EV_ASSIGN, false),
                               .since_ms = now_ms,
                               .committed = HC_PROGRESS_UNKNOWN,
                               .delivered = HC_PROGRESS_UNKNOWN,
                               .fetched_end = HC_PROGRESS_UNKNOWN,
                               .log_end = HC_PROGRESS_UNKNOWN};
    return HC_OK;
}

void hc_progress_revoke(hc_progress_t *pg, int32_t partition)
{
    if (partition >= 0 && partition < pg->cap) {
        pg->parts[partition].state =
            hc_progress_next(pg->parts[partition].state, HC_PROGRESS_EV_REVOKE, false);
    }
}

/* The MOVED event: the clock restarts; REPORT_MOVING when it ended a stall. */
static hc_progress_action_t moved(hc_progress_part_t *pp, int64_t now_ms)
{
    hc_progress_state_t was = pp->state;
    pp->state = hc_progress_next(was, HC_PROGRESS_EV_MOVED, false);
    pp->since_ms = now_ms;
    pp->recovery_acted = false;
    return was == HC_PROGRESS_STALLED || was == HC_PROGRESS_GIVEN_UP ? HC_PROGRESS_REPORT_MOVING
                                                                     : HC_PROGRESS_NONE;
}

hc_progress_action_t hc_progress_committed(hc_progress_t *pg, int32_t partition, int64_t next,
                                           int64_t now_ms)
{
    hc_progress_part_t *pp = partition < pg->cap && partition >= 0 ? &pg->parts[partition] : NULL;
    if (!pp || pp->state == HC_PROGRESS_UNASSIGNED || next == pp->committed) {
        return HC_PROGRESS_NONE;
    }
    pp->committed = next;
    return moved(pp, now_ms);
}

void hc_progress_delivered(hc_progress_t *pg, int32_t partition, int64_t offset)
{
    if (partition >= 0 && partition < pg->cap) {
        pg->parts[partition].delivered = offset + 1;
    }
}

void hc_progress_eof(hc_progress_t *pg, int32_t partition, int64_t end)
{
    if (partition >= 0 && partition < pg->cap) {
        pg->parts[partition].fetched_end = end;
    }
}

void hc_progress_repositioned(hc_progress_t *pg, int32_t partition)
{
    if (partition >= 0 && partition < pg->cap) {
        pg->parts[partition].delivered = HC_PROGRESS_UNKNOWN;
        pg->parts[partition].fetched_end = HC_PROGRESS_UNKNOWN;
    }
}

size_t hc_progress_due(const hc_progress_t *pg, int64_t now_ms, int32_t *out, size_t max)
{
    size_t n = 0;
    for (int32_t p = 0; p < pg->cap && n < max; p++) {
        const hc_progress_part_t *pp = &pg->parts[p];
        bool due = pp->state == HC_PROGRESS_MOVING    ? now_ms - pp->since_ms >= pg->bound_ms
                   : pp->state == HC_PROGRESS_STALLED ? now_ms - pp->judged_ms >= pg->recheck_ms
                                                      : false;
        if (due) {
            out[n++] = p;
        }
    }
    return n;
}

/* Whether nothing waits on the partition, given the broker's end for it. */
static bool caught_up(const hc_progress_part_t *pp, int64_t log_end)
{
    if (pp->committed != HC_PROGRESS_UNKNOWN && log_end <= pp->committed) {
        return true; /* nothing past what was committed */
    }
    /* The fetch reached that end, past transaction markers and aborted records that the stage
     * never sees as messages (librdkafka's EOF is at the last stable offset under
     * read_committed), and everything it delivered is committed. No slack of one offset for a
     * trailing marker instead: a partition with exactly one record waiting would hide behind
     * it. */
    bool pending = pp->delivered != HC_PROGRESS_UNKNOWN &&
                   (pp->committed == HC_PROGRESS_UNKNOWN || pp->delivered > pp->committed);
    return pp->fetched_end != HC_PROGRESS_UNKNOWN && pp->fetched_end >= log_end && !pending;
}

hc_progress_action_t hc_progress_judge(hc_progress_t *pg, int32_t partition, int64_t log_end,
                                       int64_t now_ms)
{
    hc_progress_part_t *pp = partition < pg->cap && partition >= 0 ? &pg->parts[partition] : NULL;
    if (!pp || pp->state == HC_PROGRESS_UNASSIGNED || pp->state == HC_PROGRESS_GIVEN_UP) {
        return HC_PROGRESS_NONE;
    }
    pp->log_end = log_end;
    pp->judged_ms = now_ms;
    if (caught_up(pp, log_end)) {
        return moved(pp, now_ms);
    }
    if (now_ms - pp->since_ms < pg->bound_ms) {
        return HC_PROGRESS_NONE;
    }
    if (pp->state == HC_PROGRESS_MOVING) {
        pp->state = hc_progress_next(pp->state, HC_PROGRESS_EV_LAGGING, false);
        pp->stalled_ms = now_ms;
        pp->recovered_ms = now_ms;
        pp->recovery_acted = false;
        return HC_PROGRESS_REPORT_STALL;
    }
    if (now_ms - pp->recovered_ms < pg->bound_ms) {
        return HC_PROGRESS_NONE; /* the last recovery gets its bound to show */
    }
    return HC_PROGRESS_RECOVER;
}

hc_progress_action_t hc_progress_recovered(hc_progress_t *pg, int32_t partition, bool acted,
                                           int64_t now_ms)
{
    hc_progress_part_t *pp = partition < pg->cap && partition >= 0 ? &pg->parts[partition] : NULL;
    if (!pp || pp->state != HC_PROGRESS_STALLED) {
        return HC_PROGRESS_NONE;
    }
    /* given up only when a recovery of the stage's own acted a bound ago, nothing moved since,
     * and this one would act again: not while it waits on an outside cause */
    pp->state =
        hc_progress_next(pp->state, HC_PROGRESS_EV_RECOVERY_DUE, pp->recovery_acted && acted);
    pp->recovered_ms = now_ms;
    pp->recovery_acted = acted;
    return pp->state == HC_PROGRESS_GIVEN_UP ? HC_PROGRESS_GIVE_UP : HC_PROGRESS_NONE;
}

size_t hc_progress_stalled_count(const hc_progress_t *pg)
{
    size_t n = 0;
    for (int32_t p = 0; p < pg->cap; p++) {
        n +=
            pg->parts[p].state == HC_PROGRESS_STALLED || pg->parts[p].state == HC_PROGRESS_GIVEN_UP;
    }
    return n;
}
