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
#include "hotcount/metric_defs.h"
#include "hotcount/prom_text.h"

#define MAX_BODY (4 << 20) /* a metrics page is tens of KiB; refuse anything absurd */
/* A rate is a count per second: anything past this (or NaN, or negative) is a broken or hostile
 * endpoint, not a hot key. */
#define MAX_RATE 1e15

size_t hc_hotkeys_parse_family(const char *text, const char *family, hc_scraped_hotkey_t *out,
                               size_t max)
{
    size_t n = 0;
    hc_prom_sample_t smp;
    for (const char *pos = text; n < max && hc_prom_next(&pos, &smp);) {
        hc_scraped_hotkey_t *k = &out[n];
        if (!hc_prom_is(&smp, family) ||
            !hc_prom_label(&smp, "post_id", k->post_id, sizeof(k->post_id), &k->post_id_len) ||
            !isfinite(smp.value) || smp.value < 0) {
            continue;
        }
        if (!hc_prom_label(&smp, "source", k->source, sizeof(k->source), NULL)) {
            k->source[0] = '\0';
        }
        k->events_per_second = smp.value < MAX_RATE ? smp.value : MAX_RATE;
        n++;
    }
    return n;
}

size_t hc_hotkeys_parse(const char *text, hc_scraped_hotkey_t *out, size_t max)
{
    return hc_hotkeys_parse_family(text, hc_metric_defs[HC_M_HOT_KEY_EVENTS_PER_SECOND].name, out,
                                   max);
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
