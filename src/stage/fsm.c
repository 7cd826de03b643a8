/* The lookup both stages' window state machines share (fsm.h). */
#include "fsm.h"

static bool matches(int want, int have)
{
    return want == HC_FSM_ANY || want == have;
}

bool hc_fsm_takes(const hc_fsm_t *fsm, int from, int event)
{
    for (size_t i = 0; i < fsm->edge_count; i++) {
        const hc_fsm_edge_t *e = &fsm->edges[i];
        if (e->event == event && matches(e->from, from)) {
            return true;
        }
    }
    return false;
}

int hc_fsm_next(const hc_fsm_t *fsm, int from, int event, hc_err_t outcome, char *errstr,
                size_t errstr_size)
{
    for (size_t i = 0; i < fsm->edge_count; i++) {
        const hc_fsm_edge_t *e = &fsm->edges[i];
        if (e->event == event && matches(e->from, from) && matches(e->outcome, (int)outcome)) {
            return e->to;
        }
    }
    if (errstr && from != fsm->failed && !hc_fsm_takes(fsm, from, event)) {
        hc_errstr_set(errstr, errstr_size,
                      "%s: event \"%s\" is not allowed in state \"%s\" (a bug)", fsm->name,
                      hc_fsm_event_name(fsm, event), hc_fsm_state_name(fsm, from));
    }
    return fsm->failed;
}

const char *hc_fsm_state_name(const hc_fsm_t *fsm, int state)
{
    return state >= 0 && state < fsm->state_count ? fsm->state_names[state] : "?";
}

const char *hc_fsm_event_name(const hc_fsm_t *fsm, int event)
{
    return event >= 0 && event < fsm->event_count ? fsm->event_names[event] : "?";
}
