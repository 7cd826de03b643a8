/* See include/core/hotcount/window_log.h. */
#include "hotcount/window_log.h"

#include <stdlib.h>
#include <string.h>

/* A record is at most 7 varints of at most 10 bytes each. */
#define REC_MAX 70

static uint64_t zigzag(int64_t v)
{
    return ((uint64_t)v << 1) ^ (v < 0 ? UINT64_MAX : 0);
}

static int64_t unzigzag(uint64_t u)
{
    return (int64_t)((u >> 1) ^ (0 - (u & 1)));
}

/* The difference a - b, and its inverse b + d, both wrapping: exact for every int64 pair. */
static int64_t wrap_sub(int64_t a, int64_t b)
{
    return (int64_t)((uint64_t)a - (uint64_t)b);
}

static int64_t wrap_add(int64_t b, int64_t d)
{
    return (int64_t)((uint64_t)b + (uint64_t)d);
}

static size_t put_varint(uint8_t *p, uint64_t u)
{
    size_t n = 0;
    while (u >= 0x80) {
        p[n++] = (uint8_t)(u | 0x80);
        u >>= 7;
    }
    p[n++] = (uint8_t)u;
    return n;
}

/* false on a truncated or over-long varint (cannot happen for what append wrote) */
static bool get_varint(const uint8_t *p, size_t len, size_t *at, uint64_t *out)
{
    uint64_t u = 0;
    for (unsigned shift = 0; shift < 70 && *at < len; shift += 7) {
        uint8_t b = p[(*at)++];
        u |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *out = u;
            return true;
        }
    }
    return false;
}

void hc_window_log_init(hc_window_log_t *log)
{
    memset(log, 0, sizeof(*log));
}

void hc_window_log_fini(hc_window_log_t *log)
{
    free(log->buf);
    hc_window_log_init(log);
}

void hc_window_log_clear(hc_window_log_t *log)
{
    log->len = 0;
    log->count = 0;
    log->last_offset = 0;
    log->last_ts_min = 0;
}

hc_err_t hc_window_log_append(hc_window_log_t *log, const hc_window_log_rec_t *rec)
{
    if (log->cap - log->len < REC_MAX) {
        size_t cap = log->cap ? log->cap * 2 : 16384;
        uint8_t *grown = realloc(log->buf, cap);
        if (!grown) {
            return HC_ERR_FATAL;
        }
        log->buf = grown;
        log->cap = cap;
    }
    uint8_t *p = log->buf + log->len;
    size_t n = 0;
    n += put_varint(p + n, zigzag(rec->partition));
    n += put_varint(p + n, rec->entry);
    n += put_varint(p + n, zigzag(wrap_sub(rec->offset, log->last_offset)));
    n += put_varint(p + n, zigzag(rec->delta));
    n += put_varint(p + n, zigzag(rec->events));
    n += put_varint(p + n, zigzag(wrap_sub(rec->ts_min, log->last_ts_min)));
    n += put_varint(p + n, zigzag(wrap_sub(rec->ts_max, rec->ts_min)));
    log->len += n;
    log->count++;
    log->last_offset = rec->offset;
    log->last_ts_min = rec->ts_min;
    return HC_OK;
}

bool hc_window_log_next(const hc_window_log_t *log, hc_window_log_pos_t *pos,
                        hc_window_log_rec_t *out)
{
    uint64_t f[7];
    size_t at = pos->at;
    for (int i = 0; i < 7; i++) {
        if (!get_varint(log->buf, log->len, &at, &f[i])) {
            return false;
        }
    }
    out->partition = (int32_t)unzigzag(f[0]);
    out->entry = (uint32_t)f[1];
    out->offset = wrap_add(pos->last_offset, unzigzag(f[2]));
    out->delta = unzigzag(f[3]);
    out->events = unzigzag(f[4]);
    out->ts_min = wrap_add(pos->last_ts_min, unzigzag(f[5]));
    out->ts_max = wrap_add(out->ts_min, unzigzag(f[6]));
    pos->at = at;
    pos->last_offset = out->offset;
    pos->last_ts_min = out->ts_min;
    return true;
}
