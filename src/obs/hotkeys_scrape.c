#include "hotcount/hotkeys_scrape.h"

#include <netdb.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define METRIC "hotcount_hot_key_events_per_second{post_id=\""
#define MAX_BODY (4 << 20) /* a metrics page is tens of KiB; refuse anything absurd */

/* Unescapes a label value (\\, \", \n) up to its closing quote; returns the byte after it. */
static const char *parse_label(const char *p, hc_scraped_hotkey_t *k)
{
    k->post_id_len = 0;
    while (*p && *p != '"') {
        char c = *p++;
        if (c == '\\' && *p) {
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

size_t hc_hotkeys_parse(const char *text, hc_scraped_hotkey_t *out, size_t max)
{
    size_t n = 0;
    for (const char *line = text; line && *line && n < max;) {
        const char *eol = strchr(line, '\n');
        if (strncmp(line, METRIC, sizeof(METRIC) - 1) == 0) {
            const char *p = parse_label(line + sizeof(METRIC) - 1, &out[n]);
            if (p && *p == '}' && p[1] == ' ') {
                char *end;
                out[n].events_per_second = strtod(p + 2, &end);
                if (end != p + 2) {
                    n++;
                }
            }
        }
        line = eol ? eol + 1 : NULL;
    }
    return n;
}

static int connect_to(const char *addr, int timeout_ms, char *errstr, size_t errstr_size)
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
    int fd = socket(res->ai_family, res->ai_socktype, res->ai_protocol);
    if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) != 0) {
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0) {
        hc_errstr_set(errstr, errstr_size, "cannot connect to %s", addr);
        return -1;
    }
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    return fd;
}

hc_err_t hc_metrics_scrape_text(const char *addr, int timeout_ms, char **text, char *errstr,
                                size_t errstr_size)
{
    *text = NULL;
    int fd = connect_to(addr, timeout_ms, errstr, errstr_size);
    if (fd < 0) {
        return HC_ERR_TRANSIENT;
    }
    hc_err_t err = HC_ERR_TRANSIENT;
    static const char req[] = "GET /metrics HTTP/1.0\r\nAccept: text/plain\r\n\r\n";
    size_t cap = 64 << 10, len = 0;
    char *buf = malloc(cap + 1);
    if (!buf || write(fd, req, sizeof(req) - 1) != (ssize_t)(sizeof(req) - 1)) {
        hc_errstr_set(errstr, errstr_size, "%s: request failed", addr);
        goto done;
    }
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
        ssize_t r = read(fd, buf + len, cap - len);
        if (r < 0) {
            hc_errstr_set(errstr, errstr_size, "%s: no answer within %d ms", addr, timeout_ms);
            goto done;
        }
        if (r == 0) {
            break;
        }
        len += (size_t)r;
    }
    buf[len] = '\0';
    const char *body = strstr(buf, "\r\n\r\n");
    if (strncmp(buf, "HTTP/1.", 7) != 0 || strncmp(buf + 8, " 200", 4) != 0 || !body) {
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
