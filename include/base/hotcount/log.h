/* Layer: base. Levelled logging to stderr, as text or one JSON object per line.
 *
 *   text: 2026-11-30T03:12:00.123Z INFO  [stage1] message
 *   json: {"ts":"2026-11-30T03:12:00.123Z","level":"info","area":"stage1","msg":"message"}
 *
 * hc_log() checks the level before formatting, so a disabled line costs one compare and its
 * arguments are not evaluated. Never log per message on the hot path: count it instead.
 *
 * Thread-safe without locks: each line is formatted on the stack and written with a single
 * write(2) of at most HC_LOG_LINE_MAX bytes (PIPE_BUF on Linux, so lines from several threads
 * never interleave on a pipe). A longer line is cut at a character boundary and ends in "...".
 * Trailing newlines of the message are dropped; in text output other control characters are
 * escaped (\n, \r, \xNN) so one call is always one line. JSON output escapes the message as a
 * JSON string, keeps valid UTF-8 as is and replaces invalid bytes with U+FFFD.
 *
 * Events (hc_log_event) are the lines a program may read: a fixed event name and typed fields
 * instead of a sentence, so that rewording a message breaks no script. Their names and fields
 * are part of the project's contract, listed in docs/EVENTS.md:
 *
 *   text: 2026-11-30T03:12:00.123Z WARN  [stage2] store_batch_failed backoff_ms=100 error=timeout
 *   json: {"ts":"…","level":"warn","area":"stage2","event":"store_batch_failed","backoff_ms":100,
 *          "error":"timeout"}
 *
 * An event line has "event" where a message line has "msg". In text, a string value is quoted
 * (with \" and \\ escaped) unless it is non-empty printable ASCII without space, '"', '=' or
 * '\'. An event line cut at HC_LOG_LINE_MAX stays valid JSON and says so: "truncated":true
 * after the last field that fitted (a cut string value ends in "..."). */
#ifndef HOTCOUNT_LOG_H
#define HOTCOUNT_LOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define HC_LOG_LINE_MAX 4096 /* bytes per line including the newline */

typedef enum hc_log_level {
    HC_LOG_ERROR = 0,
    HC_LOG_WARN,
    HC_LOG_INFO,
    HC_LOG_DEBUG,
} hc_log_level_t;

typedef enum hc_log_format {
    HC_LOG_TEXT = 0,
    HC_LOG_JSON,
} hc_log_format_t;

/* Process-wide log threshold and format (default: info, text); set once at start-up, before
 * threads exist. Lines at `level` or more severe are written. */
void hc_log_setup(hc_log_level_t level, hc_log_format_t format);

/* Sends log lines to fd instead of stderr; a negative fd restores stderr. The caller keeps
 * ownership of fd and must keep it open while logging. Meant for tests; like hc_log_setup,
 * call it before threads exist. */
void hc_log_set_fd(int fd);

/* Parses "error"/"warn"/"info"/"debug" and "text"/"json" (exact, lower case). Returns false on
 * an unknown name or NULL, leaving the output untouched. */
bool hc_log_level_parse(const char *name, hc_log_level_t *level);
bool hc_log_format_parse(const char *name, hc_log_format_t *format);

/* True when a line at `level` would be written. Cheap: one load and one compare. */
bool hc_log_enabled(hc_log_level_t level);

/* Formats and writes one line when `level` is enabled. Prefer the hc_log() macro, which checks
 * the level before the arguments are evaluated. area: a short component name ("stage1",
 * "store", "rdkafka"). errno is preserved, so callers may log before reporting strerror(errno). */
void hc_log_write(hc_log_level_t level, const char *area, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define hc_log(level, area, ...)                                                                   \
    do {                                                                                           \
        if (hc_log_enabled(level)) {                                                               \
            hc_log_write(level, area, __VA_ARGS__);                                                \
        }                                                                                          \
    } while (0)

/* One field of an event: a string when str is not NULL, else the integer num. key: borrowed,
 * [a-z0-9_]+ and none of ts, level, area, event, msg, truncated (a programmer error:
 * asserted; a release build writes such a name with '_' for each other byte and after a
 * reserved one). */
typedef struct hc_log_field {
    const char *key;
    const char *str; /* borrowed for the call */
    int64_t num;
} hc_log_field_t;

static inline hc_log_field_t hc_log_field_str(const char *key, const char *value)
{
    hc_log_field_t f = {key, value ? value : "", 0};
    return f;
}

static inline hc_log_field_t hc_log_field_int(const char *key, int64_t value)
{
    hc_log_field_t f = {key, NULL, value};
    return f;
}

#define HC_LOG_STR(key, value) hc_log_field_str((key), (value))
#define HC_LOG_INT(key, value) hc_log_field_int((key), (int64_t)(value))

/* Writes one event line when `level` is enabled: the event name (borrowed, [a-z0-9_]+, listed
 * in docs/EVENTS.md) and fields[0..n) in order. Prefer the hc_log_event() macro. Same
 * threading, errno and one-write guarantees as hc_log_write. */
void hc_log_event_write(hc_log_level_t level, const char *area, const char *event,
                        const hc_log_field_t *fields, size_t n);

/* hc_log_event(HC_LOG_WARN, s2->name, "store_batch_failed", HC_LOG_INT("backoff_ms", ms),
 *              HC_LOG_STR("error", errstr));
 * At least one field. The level is checked before the fields are evaluated. */
#define hc_log_event(level, area, event, ...)                                                      \
    do {                                                                                           \
        if (hc_log_enabled(level)) {                                                               \
            const hc_log_field_t hc_log_fields_[] = {__VA_ARGS__};                                 \
            hc_log_event_write(level, area, event, hc_log_fields_,                                 \
                               sizeof(hc_log_fields_) / sizeof(hc_log_fields_[0]));                \
        }                                                                                          \
    } while (0)

#endif
