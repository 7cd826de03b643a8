/* The command line's UTC times (cli_time.h). */
#include "cli_time.h"

#include <stdio.h>
#include <stdlib.h>

/* Days since 1970-01-01 of a proleptic Gregorian date (no timegm: it is not C11). */
static int64_t days_from_civil(int64_t y, int m, int d)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

bool hc_cli_parse_time(const char *s, int64_t *ms)
{
    char *end = NULL;
    long long v = strtoll(s, &end, 10);
    if (*s && end && *end == '\0') {
        *ms = v;
        return true;
    }
    int y = 0, mo = 0, d = 0, h = 0, mi = 0, sec = 0, n = 0;
    if (sscanf(s, "%4d-%2d-%2d%n", &y, &mo, &d, &n) != 3) {
        return false;
    }
    const char *rest = s + n;
    if (*rest == 'T' || *rest == ' ') {
        int k = 0;
        if (sscanf(rest + 1, "%2d:%2d%n", &h, &mi, &k) != 2) {
            return false;
        }
        rest += 1 + k;
        if (*rest == ':') {
            if (sscanf(rest + 1, "%2d%n", &sec, &k) != 1) {
                return false;
            }
            rest += 1 + k;
        }
    }
    if (*rest == 'Z') {
        rest++;
    }
    if (*rest || mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || sec > 60) {
        return false;
    }
    *ms = ((days_from_civil(y, mo, d) * 24 + h) * 60 + mi) * 60000LL + sec * 1000LL;
    return true;
}

const char *hc_cli_format_time(int64_t ms, bool millis, char *out, size_t size)
{
    if (ms < 0) {
        snprintf(out, size, "-");
        return out;
    }
    int64_t days = ms / 86400000LL, rem = ms % 86400000LL;
    /* civil from days (the inverse of days_from_civil) */
    int64_t z = days + 719468, era = z / 146097, doe = z - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100), mp = (5 * doy + 2) / 153;
    int64_t d = doy - (153 * mp + 2) / 5 + 1, m = mp < 10 ? mp + 3 : mp - 9;
    int64_t y = yoe + era * 400 + (m <= 2);
    char frac[8] = "";
    if (millis) {
        snprintf(frac, sizeof(frac), ".%03d", (int)(rem % 1000));
    }
    snprintf(out, size, "%04d-%02d-%02dT%02d:%02d:%02d%sZ", (int)(y % 10000), (int)m, (int)d,
             (int)(rem / 3600000), (int)(rem / 60000 % 60), (int)(rem / 1000 % 60), frac);
    return out;
}
