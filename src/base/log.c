/* Levelled logging: one stack buffer, one write(2) per line, no locks. */
#if !defined(_GNU_SOURCE) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L /* clock_gettime, gmtime_r */
#endif

#include "hotcount/log.h"

#include <assert.h>
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hotcount/utf8.h"

/* Written once at start-up (before threads), read by every thread afterwards. */
static hc_log_level_t log_level = HC_LOG_INFO;
static hc_log_format_t log_format = HC_LOG_TEXT;
static int log_fd = STDERR_FILENO;

/* Bytes kept free at the end of a line for "...", the JSON closing `"}` and the newline, so a
 * truncated line is still one well-formed line. */
#define LINE_RESERVE 16
/* An event line's end when cut: `..."` (inside a string value), `,"truncated":true}`, newline. */
#define EVENT_RESERVE 24
#define EVENT_KEY_MAX 64 /* bytes of a field name kept */

typedef struct line {
    char buf[HC_LOG_LINE_MAX];
    size_t len;
    size_t reserve; /* bytes kept free for the line's end */
    bool full;      /* content did not fit: the line ends in "..." */
} line_t;

static const char *const level_names[] = {"error", "warn", "info", "debug"};
static const char *const level_labels[] = {"ERROR", "WARN", "INFO", "DEBUG"};
static const char *const format_names[] = {"text", "json"};

void hc_log_setup(hc_log_level_t level, hc_log_format_t format)
{
    log_level = level;
    log_format = format;
}

void hc_log_set_fd(int fd)
{
    log_fd = fd < 0 ? STDERR_FILENO : fd;
}

bool hc_log_level_parse(const char *name, hc_log_level_t *level)
{
    if (name == NULL) {
        return false;
    }
    for (size_t i = 0; i < sizeof(level_names) / sizeof(level_names[0]); i++) {
        if (strcmp(name, level_names[i]) == 0) {
            *level = (hc_log_level_t)i;
            return true;
        }
    }
    return false;
}

bool hc_log_format_parse(const char *name, hc_log_format_t *format)
{
    if (name == NULL) {
        return false;
    }
    for (size_t i = 0; i < sizeof(format_names) / sizeof(format_names[0]); i++) {
        if (strcmp(name, format_names[i]) == 0) {
            *format = (hc_log_format_t)i;
            return true;
        }
    }
    return false;
}

bool hc_log_enabled(hc_log_level_t level)
{
    return level <= log_level;
}

/* Appends n bytes, all or nothing, so an escape sequence or a UTF-8 character is never cut. */
static bool put(line_t *ln, const char *s, size_t n)
{
    if (ln->full || n > HC_LOG_LINE_MAX - ln->reserve - ln->len) {
        ln->full = true;
        return false;
    }
    memcpy(ln->buf + ln->len, s, n);
    ln->len += n;
    return true;
}

static bool put_str(line_t *ln, const char *s)
{
    return put(ln, s, strlen(s));
}

/* Appends into the reserved tail; only the fixed line endings use this. */
static void put_tail(line_t *ln, const char *s)
{
    size_t n = strlen(s);

    if (n <= HC_LOG_LINE_MAX - ln->len) {
        memcpy(ln->buf + ln->len, s, n);
        ln->len += n;
    }
}

/* Appends s so that it cannot break the line: in JSON as the inside of a string literal, in
 * text with control characters escaped. Stops (and marks the line full) at the first unit that
 * does not fit. */
static void put_escaped(line_t *ln, const char *s, size_t n, hc_log_format_t format)
{
    const unsigned char *u = (const unsigned char *)s;
    bool json = format == HC_LOG_JSON;
    size_t i = 0;

    while (i < n) {
        unsigned char c = u[i];
        char esc[8];
        const char *out = esc;
        size_t out_len;
        size_t step = 1;

        if (json && (c == '"' || c == '\\')) {
            esc[0] = '\\';
            esc[1] = (char)c;
            out_len = 2;
        } else if (c == '\n' || c == '\r' || (json && c == '\t')) {
            esc[0] = '\\';
            esc[1] = c == '\n' ? 'n' : c == '\r' ? 'r' : 't';
            out_len = 2;
        } else if ((c < 0x20 && c != '\t') || c == 0x7f) {
            out_len = (size_t)snprintf(esc, sizeof(esc), json ? "\\u%04x" : "\\x%02x", c);
        } else if (c >= 0x80) {
            step = hc_utf8_char_len(u + i, n - i);
            if (step > 0) {
                out = s + i;
                out_len = step;
            } else if (json) {
                /* JSON must be valid UTF-8; the replacement character marks the bad byte. */
                out = "\\ufffd";
                out_len = 6;
                step = 1;
            } else {
                out_len = (size_t)snprintf(esc, sizeof(esc), "\\x%02x", c);
                step = 1;
            }
        } else {
            out = s + i;
            out_len = 1;
        }
        if (!put(ln, out, out_len)) {
            return;
        }
        i += step;
    }
}

static void format_timestamp(char *out, size_t size)
{
    struct timespec ts;
    struct tm tm;
    size_t n;

    if (clock_gettime(CLOCK_REALTIME, &ts) != 0 || gmtime_r(&ts.tv_sec, &tm) == NULL) {
        snprintf(out, size, "%s", "1970-01-01T00:00:00.000Z");
        return;
    }
    n = strftime(out, size, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out + n, size - n, ".%03dZ", (int)(ts.tv_nsec / 1000000));
}

/* Writes the whole line; retries only what a signal or a short write interrupted. */
static void write_all(int fd, const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, buf, len);

        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            return; /* nowhere left to report a logging failure */
        }
        buf += n;
        len -= (size_t)n;
    }
}

/* A level outside the table is logged as an error; a line without an area gets "-". */
static void normalize(hc_log_level_t *level, const char **area)
{
    if ((unsigned)*level >= sizeof(level_names) / sizeof(level_names[0])) {
        *level = HC_LOG_ERROR;
    }
    if (*area == NULL) {
        *area = "-";
    }
}

void hc_log_write(hc_log_level_t level, const char *area, const char *fmt, ...)
{
    int saved_errno = errno;
    char msg[HC_LOG_LINE_MAX];
    hc_log_format_t format = log_format;
    char ts[32];
    line_t ln;
    size_t msg_len;
    va_list ap;
    int n;

    if (!hc_log_enabled(level)) {
        return;
    }
    normalize(&level, &area);

    va_start(ap, fmt);
    n = vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (n < 0) {
        snprintf(msg, sizeof(msg), "%s", "(unformattable log message)");
        n = (int)strlen(msg);
    }
    msg_len = (size_t)n < sizeof(msg) ? (size_t)n : sizeof(msg) - 1;
    /* Error texts from libraries (libpq, strerror-style) often end in a newline; the line
     * already has one. */
    while (msg_len > 0 && (msg[msg_len - 1] == '\n' || msg[msg_len - 1] == '\r')) {
        msg_len--;
    }

    format_timestamp(ts, sizeof(ts));
    ln.len = 0;
    ln.reserve = LINE_RESERVE;
    ln.full = false;
    if (format == HC_LOG_JSON) {
        put_str(&ln, "{\"ts\":\"");
        put_str(&ln, ts);
        put_str(&ln, "\",\"level\":\"");
        put_str(&ln, level_names[level]);
        put_str(&ln, "\",\"area\":\"");
        put_escaped(&ln, area, strlen(area), HC_LOG_JSON);
        put_str(&ln, "\",\"msg\":\"");
        put_escaped(&ln, msg, msg_len, HC_LOG_JSON);
    } else {
        char head[64];

        put_str(&ln, ts);
        snprintf(head, sizeof(head), " %-5s [", level_labels[level]);
        put_str(&ln, head);
        put_escaped(&ln, area, strlen(area), HC_LOG_TEXT);
        put_str(&ln, "] ");
        put_escaped(&ln, msg, msg_len, HC_LOG_TEXT);
    }
    if ((size_t)n >= sizeof(msg)) {
        ln.full = true; /* vsnprintf already cut the message */
    }
    if (ln.full) {
        put_tail(&ln, "...");
    }
    put_tail(&ln, format == HC_LOG_JSON ? "\"}\n" : "\n");
    write_all(log_fd, ln.buf, ln.len);
    errno = saved_errno;
}

/* ---- events -------------------------------------------------------------------------------- */

static bool is_reserved_key(const char *key)
{
    return strcmp(key, "ts") == 0 || strcmp(key, "level") == 0 || strcmp(key, "area") == 0 ||
           strcmp(key, "event") == 0 || strcmp(key, "msg") == 0 || strcmp(key, "truncated") == 0;
}

/* A field name as given when it keeps the contract ([a-z0-9_]+, not reserved), else with every
 * other byte made '_' and a reserved name suffixed with '_', so that a wrong name can break
 * neither the line's syntax nor its fixed keys. out: EVENT_KEY_MAX + 2 bytes. */
static void event_key(char *out, const char *key)
{
    size_t i = 0;

    assert(key[0] != '\0' && !is_reserved_key(key));
    for (; key[i] != '\0' && i < EVENT_KEY_MAX; i++) {
        char c = key[i];
        out[i] = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ? c : '_';
    }
    if (i == 0 || is_reserved_key(key)) {
        out[i++] = '_';
    }
    out[i] = '\0';
}

/* A text value needs no quotes when it is non-empty printable ASCII without space, '"', '='
 * and '\\'. */
static bool is_bare(const char *s)
{
    const unsigned char *u = (const unsigned char *)s;

    if (*u == '\0') {
        return false;
    }
    for (; *u != '\0'; u++) {
        if (*u <= 0x20 || *u >= 0x7f || *u == '"' || *u == '=' || *u == '\\') {
            return false;
        }
    }
    return true;
}

/* The inside of a quoted text value: '"' and '\\' escaped, the rest as put_escaped does. */
static void put_text_quoted(line_t *ln, const char *s, size_t n)
{
    size_t i = 0;

    while (i < n && !ln->full) {
        size_t run = i;

        while (run < n && s[run] != '"' && s[run] != '\\') {
            run++;
        }
        put_escaped(ln, s + i, run - i, HC_LOG_TEXT);
        if (run < n) {
            char esc[2] = {'\\', s[run]};

            put(ln, esc, 2);
            run++;
        }
        i = run;
    }
}

void hc_log_event_write(hc_log_level_t level, const char *area, const char *event,
                        const hc_log_field_t *fields, size_t n)
{
    int saved_errno = errno;
    hc_log_format_t format = log_format;
    bool json = format == HC_LOG_JSON;
    bool in_string = false; /* JSON: a cut here lands inside a string literal */
    char ts[32];
    line_t ln;

    if (!hc_log_enabled(level)) {
        return;
    }
    normalize(&level, &area);
    if (event == NULL) {
        event = "-";
    }

    format_timestamp(ts, sizeof(ts));
    ln.len = 0;
    ln.reserve = EVENT_RESERVE;
    ln.full = false;
    if (json) {
        put_str(&ln, "{\"ts\":\"");
        put_str(&ln, ts);
        put_str(&ln, "\",\"level\":\"");
        put_str(&ln, level_names[level]);
        in_string = put_str(&ln, "\",\"area\":\"");
        put_escaped(&ln, area, strlen(area), HC_LOG_JSON);
        put_str(&ln, "\",\"event\":\"");
        put_escaped(&ln, event, strlen(event), HC_LOG_JSON);
        if (put_str(&ln, "\"")) {
            in_string = false;
        }
    } else {
        char head[64];

        put_str(&ln, ts);
        snprintf(head, sizeof(head), " %-5s [", level_labels[level]);
        put_str(&ln, head);
        put_escaped(&ln, area, strlen(area), HC_LOG_TEXT);
        put_str(&ln, "] ");
        put_escaped(&ln, event, strlen(event), HC_LOG_TEXT);
    }

    for (size_t i = 0; i < n && !ln.full; i++) {
        const hc_log_field_t *f = &fields[i];
        char key[EVENT_KEY_MAX + 2];
        char tok[EVENT_KEY_MAX + 40];

        assert(f->key != NULL);
        event_key(key, f->key != NULL ? f->key : "");
        if (f->str == NULL) {
            snprintf(tok, sizeof(tok), json ? ",\"%s\":%lld" : " %s=%lld", key, (long long)f->num);
            put_str(&ln, tok); /* all or nothing: a number is never cut */
        } else if (json) {
            snprintf(tok, sizeof(tok), ",\"%s\":\"", key);
            if (put_str(&ln, tok)) {
                in_string = true;
                put_escaped(&ln, f->str, strlen(f->str), HC_LOG_JSON);
                if (put_str(&ln, "\"")) {
                    in_string = false;
                }
            }
        } else {
            snprintf(tok, sizeof(tok), " %s=", key);
            if (put_str(&ln, tok)) {
                if (is_bare(f->str)) {
                    put_str(&ln, f->str);
                } else if (put_str(&ln, "\"")) {
                    put_text_quoted(&ln, f->str, strlen(f->str));
                    put_str(&ln, "\"");
                }
            }
        }
    }

    if (json) {
        if (ln.full) {
            put_tail(&ln, in_string ? "...\"" : "");
            put_tail(&ln, ",\"truncated\":true");
        }
        put_tail(&ln, "}\n");
    } else {
        if (ln.full) {
            put_tail(&ln, "...");
        }
        put_tail(&ln, "\n");
    }
    write_all(log_fd, ln.buf, ln.len);
    errno = saved_errno;
}
