#include "hotcount/hotkeys_scrape.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netdb.h>
#include <poll.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "hotcount/clock.h"

#define METRIC "hotcount_hot_key_events_per_second"
#define MAX_BODY (4 << 20) /* a metrics page is tens of KiB; refuse anything absurd */
/* A rate is a count per second: anything past this (or NaN, or negative) is a broken or hostile
 * endpoint, not a hot key. */
#define MAX_RATE 1e15

/* Unescapes a label value (\\, \", \n) up to its closing quote; returns the byte after it,
 * or NULL when the line ends first. Never past the line: the page is untrusted, and a page of
 * lines that open a label and never close it cost a scan to the end of the text from every
 * line before (issue 25, item 8). */
static const char *parse_label(const char *p, hc_scraped_hotkey_t *k)
{
    k->post_id_len = 0;
    while (*p && *p != '"' && *p != '\n') {
        char c = *p++;
        if (c == '\\' && *p && *p != '\n') {
            c = *p == 'n' ? '\n' : *p;
            p++;
        }
        if (k->post_id_len < HC_POST_ID_MAX) {
            k->post_id[k->post_id_len++] = c;
        }
    }
    k->post_id[k->post_id_len] = '\0';
    return *p == '"' ? p + 1 : NULL;
}

/* ,source="..." after the post id, if there: copied (cut to fit), returns the byte after it. */
static const char *parse_source(const char *p, hc_scraped_hotkey_t *k)
{
    static const char lab[] = ",source=\"";
    k->source[0] = '\0';
    if (!p || strncmp(p, lab, sizeof(lab) - 1) != 0) {
        return p;
    }
    p += sizeof(lab) - 1;
    size_t n = 0;
    while (*p && *p != '"' && *p != '\\' && *p != '\n') {
        if (n + 1 < sizeof(k->source)) {
            k->source[n++] = *p;
        }
        p++;
    }
    k->source[n] = '\0';
    return *p == '"' ? p + 1 : NULL;
}

size_t hc_hotkeys_parse_family(const char *text, const char *family, hc_scraped_hotkey_t *out,
                               size_t max)
{
    size_t n = 0, flen = strlen(family);
    for (const char *line = text; line && *line && n < max;) {
        const char *eol = strchr(line, '\n');
        if (strncmp(line, family, flen) == 0 && strncmp(line + flen, "{post_id=\"", 10) == 0) {
            const char *p = parse_source(parse_label(line + flen + 10, &out[n]), &out[n]);
            if (p && *p == '}' && p[1] == ' ') {
                char *end;
                double v = strtod(p + 2, &end);
                if (end != p + 2 && isfinite(v) && v >= 0) {
                    out[n].events_per_second = v < MAX_RATE ? v : MAX_RATE;
                    n++;
                }
            }
        }
        line = eol ? eol + 1 : NULL;
    }
    return n;
}

size_t hc_hotkeys_parse(const char *text, hc_scraped_hotkey_t *out, size_t max)
{
    return hc_hotkeys_parse_family(text, METRIC, out, max);
}

static int remaining_ms(int64_t deadline)
{
    int64_t left = deadline - hc_now_ms();
    return left <= 0 ? 0 : left > 60000 ? 60000 : (int)left;
}

/* A connected socket within connect_deadline (a non-blocking connect and poll), or -1. */
static int connect_to(const char *addr, int64_t connect_deadline, int connect_ms, char *errstr,
                      size_t errstr_size)
{
    char host[256];
    const char *colon = strrchr(addr, ':');
    if (!colon || colon == addr || (size_t)(colon - addr) >= sizeof(host)) {
        hc_errstr_set(errstr, errstr_size, "\"%s\" is not host:port", addr);
        return -1;
    }
    memcpy(host, addr, (size_t)(colon - addr));
    host[colon - addr] = '\0';
    if (host[0] == '[' && host[strlen(host) - 1] == ']') { /* [::1] */
        memmove(host, host + 1, strlen(host));
        host[strlen(host) - 1] = '\0';
    }
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
    int rc = getaddrinfo(host, colon + 1, &hints, &res);
    if (rc != 0) {
        hc_errstr_set(errstr, errstr_size, "%s: %s", addr, gai_strerror(rc));
        return -1;
    }
    int fd =
        socket(res->ai_family, res->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, res->ai_protocol);
    bool timed_out = false;
    if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) != 0) {
        int ok = 0;
        if (errno == EINPROGRESS) {
            struct pollfd pfd = {.fd = fd, .events = POLLOUT};
            int pr;
            do {
                pr = poll(&pfd, 1, remaining_ms(connect_deadline));
            } while (pr < 0 && errno == EINTR);
            int soerr = 0;
            socklen_t sl = sizeof(soerr);
            if (pr == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 && soerr == 0) {
                ok = 1;
            }
            timed_out = pr == 0;
        }
        if (!ok) {
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    if (fd < 0) {
        if (timed_out) {
            hc_errstr_set(errstr, errstr_size, "cannot connect to %s within %d ms", addr,
                          connect_ms);
        } else {
            hc_errstr_set(errstr, errstr_size, "cannot connect to %s", addr);
        }
        return -1;
    }
    return fd;
}

/* Writes all of buf before deadline; false otherwise. */
static bool write_all(int fd, const char *buf, size_t len, int64_t deadline)
{
    while (len > 0) {
        ssize_t w = send(fd, buf, len, MSG_NOSIGNAL);
        if (w > 0) {
            buf += w;
            len -= (size_t)w;
            continue;
        }
        if (w < 0 && errno != EAGAIN && errno != EINTR) {
            return false;
        }
        struct pollfd pfd = {.fd = fd, .events = POLLOUT};
        int left = remaining_ms(deadline);
        if (left == 0 || (poll(&pfd, 1, left) == 0)) {
            return false;
        }
    }
    return true;
}

hc_err_t hc_metrics_scrape_text_deadline(const char *addr, int connect_ms, int total_ms,
                                         char **text, char *errstr, size_t errstr_size)
{
    *text = NULL;
    int64_t start = hc_now_ms();
    int64_t deadline = start + total_ms;
    int64_t connect_deadline = start + (connect_ms < total_ms ? connect_ms : total_ms);
    int fd = connect_to(addr, connect_deadline, connect_ms, errstr, errstr_size);
    if (fd < 0) {
        return HC_ERR_TRANSIENT;
    }
    hc_err_t err = HC_ERR_TRANSIENT;
    static const char req[] = "GET /metrics HTTP/1.0\r\nAccept: text/plain\r\n\r\n";
    size_t cap = 64 << 10, len = 0;
    char *buf = malloc(cap + 1);
    if (!buf || !write_all(fd, req, sizeof(req) - 1, deadline)) {
        hc_errstr_set(errstr, errstr_size, "%s: request failed", addr);
        goto done;
    }
    /* One deadline for the whole answer: a stage that trickles a byte at a time is cut there. */
    for (;;) {
        if (len == cap) {
            char *grown = cap < MAX_BODY ? realloc(buf, cap * 2 + 1) : NULL;
            if (!grown) {
                hc_errstr_set(errstr, errstr_size, "%s: answer too large", addr);
                goto done;
            }
            buf = grown;
            cap *= 2;
        }
        ssize_t r = recv(fd, buf + len, cap - len, 0);
        if (r > 0) {
            len += (size_t)r;
            continue;
        }
        if (r == 0) {
            break;
        }
        if (errno != EAGAIN && errno != EINTR) {
            hc_errstr_set(errstr, errstr_size, "%s: %s", addr, strerror(errno));
            goto done;
        }
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int left = remaining_ms(deadline);
        if (left == 0 || poll(&pfd, 1, left) == 0) {
            hc_errstr_set(errstr, errstr_size, "%s: no whole answer within %d ms", addr, total_ms);
            goto done;
        }
    }
    buf[len] = '\0';
    const char *body = strstr(buf, "\r\n\r\n");
    if (len < 12 || strncmp(buf, "HTTP/1.", 7) != 0 || strncmp(buf + 8, " 200", 4) != 0 || !body) {
        hc_errstr_set(errstr, errstr_size, "%s: not a 200 answer to GET /metrics", addr);
        goto done;
    }
    body += 4;
    memmove(buf, body, len + 1 - (size_t)(body - buf));
    *text = buf;
    buf = NULL;
    err = HC_OK;
done:
    free(buf);
    close(fd);
    return err;
}

hc_err_t hc_metrics_scrape_text(const char *addr, int timeout_ms, char **text, char *errstr,
                                size_t errstr_size)
{
    return hc_metrics_scrape_text_deadline(addr, timeout_ms, timeout_ms, text, errstr, errstr_size);
}

hc_err_t hc_hotkeys_scrape(const char *addr, int timeout_ms, hc_scraped_hotkey_t *out, size_t max,
                           size_t *count, char *errstr, size_t errstr_size)
{
    char *text = NULL;
    *count = 0;
    hc_err_t err = hc_metrics_scrape_text(addr, timeout_ms, &text, errstr, errstr_size);
    if (err == HC_OK) {
        *count = hc_hotkeys_parse(text, out, max);
        free(text);
    }
    return err;
}
