/* Layer: core. hotcount error classes.
 *
 * Every action returns an hc_err_t. The class tells the caller what to do next, so callers
 * switch on the class, never on a message. Detail goes into a caller-owned
 * `char *errstr, size_t errstr_size` buffer; no function allocates to report an error. */
#ifndef HOTCOUNT_ERR_H
#define HOTCOUNT_ERR_H

#include <stddef.h>

typedef enum hc_err {
    HC_OK = 0,
    HC_ERR_INVALID,   /* bad input (event, config value, usage): never retried */
    HC_ERR_TRANSIENT, /* outage or timeout: back off and retry the same call */
    HC_ERR_ABORT,     /* transaction must be aborted: abort, rewind, drop the window */
    HC_ERR_CONFLICT,  /* store compare-and-set lost: re-read offsets, seek, drop the window */
    HC_ERR_FULL,      /* a bounded container is full: flush, then retry */
    HC_ERR_FATAL,     /* cannot continue: exit non-zero */
    /* One record (an event, a partial, one post of a store batch) is bad and always will be,
     * while everything else is fine: set that record aside (dead-letter it with its reason) and
     * go on with the rest. Unlike HC_ERR_INVALID (the caller's own arguments or configuration)
     * it names data that came from outside; unlike HC_ERR_TRANSIENT ("the store is down") a
     * retry of the same call fails the same way. Example: a store batch whose delta would take a
     * post's count past int64 (hotcount/store.h says which post). */
    HC_ERR_RECORD,
    /* A partition stood still past its progress bound and the stage's own recovery (re-read,
     * re-seek) did not move it: end the process so that its supervisor starts a fresh one
     * (exit status 4; hotcount/progress.h). */
    HC_ERR_STALLED,
} hc_err_t;

/* Static name of an error class ("ok", "invalid", ...). */
const char *hc_err_name(hc_err_t err);

/* snprintf into errstr that never overflows and accepts a NULL/0 buffer. */
void hc_errstr_set(char *errstr, size_t errstr_size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
