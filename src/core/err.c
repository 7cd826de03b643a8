/* hotcount error classes: names and the errstr helper every module reports through. */
#include "hotcount/err.h"

#include <stdarg.h>
#include <stdio.h>

const char *hc_err_name(hc_err_t err)
{
    switch (err) {
    case HC_OK:
        return "ok";
    case HC_ERR_INVALID:
        return "invalid";
    case HC_ERR_TRANSIENT:
        return "transient";
    case HC_ERR_ABORT:
        return "abort";
    case HC_ERR_CONFLICT:
        return "conflict";
    case HC_ERR_FULL:
        return "full";
    case HC_ERR_FATAL:
        return "fatal";
    case HC_ERR_RECORD:
        return "record";
    case HC_ERR_STALLED:
        return "stalled";
    }
    /* Not a member of the enum: a caller bug, but a name is still better than a crash in an
     * error path. */
    return "unknown";
}

void hc_errstr_set(char *errstr, size_t errstr_size, const char *fmt, ...)
{
    va_list ap;

    /* Callers that do not care about detail pass NULL/0; that must stay legal everywhere. */
    if (errstr == NULL || errstr_size == 0) {
        return;
    }
    va_start(ap, fmt);
    if (vsnprintf(errstr, errstr_size, fmt, ap) < 0) {
        errstr[0] = '\0';
    }
    va_end(ap);
}
