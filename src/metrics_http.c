/* The metrics endpoint on libmicrohttpd.
 *
 * The listening socket is created here rather than by libmicrohttpd, so that a port in use or an
 * address that is not local is reported with its errno, naming metrics.listen, instead of MHD's
 * generic start failure; MHD then owns the socket and closes it on stop. */
#include "hotcount/metrics_http.h"

#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "hotcount/kafka.h"
#include "hotcount/log.h"

#define LISTEN_BACKLOG 64
#define MAX_CONNECTIONS 64u
#define CONNECTION_TIMEOUT_S 10u

struct hc_metrics_http {
    struct MHD_Daemon *daemon; /* owned */
    hc_metrics_t *metrics;     /* borrowed */
    int64_t flush_ms;
    int port;
};

static void mhd_log(void *cls, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    char msg[512];
    (void)cls;
    vsnprintf(msg, sizeof(msg), fmt, ap);
    hc_log(HC_LOG_WARN, "metrics", "%s", msg);
}

static enum MHD_Result reply(struct MHD_Connection *conn, unsigned int status, const char *body,
                             bool allow_header)
{
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(strlen(body), (void *)body, MHD_RESPMEM_PERSISTENT);
    if (!resp) {
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain; charset=utf-8");
    if (allow_header) {
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
    }
    enum MHD_Result ret = MHD_queue_response(conn, status, resp);
    MHD_destroy_response(resp);
    return ret;
}

static enum MHD_Result serve_metrics(hc_metrics_http_t *http, struct MHD_Connection *conn)
{
    char *text = NULL;
    size_t len = hc_metrics_render(http->metrics, hc_now_ms(), http->flush_ms, &text);
    if (!text) {
        return reply(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory\n", false);
    }
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
                            "text/plain; version=0.0.4; charset=utf-8");
    enum MHD_Result ret = MHD_queue_response(conn, MHD_HTTP_OK, resp);
    MHD_destroy_response(resp);
    return ret;
}

/* Every request is answered on its first call: none of ours needs a body, and a refused method
 * need not be read. */
static enum MHD_Result handle(void *cls, struct MHD_Connection *conn, const char *url,
                              const char *method, const char *version, const char *upload_data,
                              size_t *upload_data_size, void **req_cls)
{
    hc_metrics_http_t *http = cls;
    (void)version;
    (void)upload_data;
    (void)upload_data_size;
    (void)req_cls;

    if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0) {
        return reply(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "method not allowed\n", true);
    }
    if (strcmp(url, "/metrics") == 0) {
        return serve_metrics(http, conn);
    }
    if (strcmp(url, "/healthz") == 0) {
        return reply(conn, MHD_HTTP_OK, "ok\n", false);
    }
    if (strcmp(url, "/readyz") == 0) {
        if (hc_metrics_is_ready(http->metrics, hc_now_ms(), http->flush_ms)) {
            return reply(conn, MHD_HTTP_OK, "ready\n", false);
        }
        return reply(conn, MHD_HTTP_SERVICE_UNAVAILABLE, "not ready\n", false);
    }
    return reply(conn, MHD_HTTP_NOT_FOUND, "not found\n", false);
}

/* Splits "host:port" or "[v6]:port" (the last colon, so an unbracketed IPv6 host also works).
 * The port: 0..65535, 0 meaning any free port. */
static bool split_listen(const char *addr, char *host, size_t host_size, char *port,
                         size_t port_size)
{
    const char *colon;
    const char *host_start = addr;
    size_t host_len;

    if (addr[0] == '[') {
        const char *close_bracket = strchr(addr, ']');
        if (!close_bracket || close_bracket[1] != ':') {
            return false;
        }
        host_start = addr + 1;
        host_len = (size_t)(close_bracket - host_start);
        colon = close_bracket + 1;
    } else {
        colon = strrchr(addr, ':');
        if (!colon) {
            return false;
        }
        host_len = (size_t)(colon - addr);
    }
    const char *digits = colon + 1;
    size_t n = strspn(digits, "0123456789");
    if (host_len == 0 || host_len >= host_size || n == 0 || n > 5 || digits[n] != '\0' ||
        n >= port_size || strtol(digits, NULL, 10) > 65535) {
        return false;
    }
    memcpy(host, host_start, host_len);
    host[host_len] = '\0';
    memcpy(port, digits, n + 1);
    return true;
}

/* A listening socket on the first address of addr that binds. Returns the fd, or -1 with errstr
 * set (every failure here is the value of metrics.listen: HC_ERR_INVALID). */
static int open_listener(const char *addr, int *family, char *errstr, size_t errstr_size)
{
    char host[256];
    char port[8];
    if (!split_listen(addr, host, sizeof(host), port, sizeof(port))) {
        hc_errstr_set(errstr, errstr_size,
                      "metrics.listen: \"%s\" is not host:port or [ipv6]:port with a port in "
                      "0..65535",
                      addr);
        return -1;
    }
    struct addrinfo hints = {0};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    struct addrinfo *res = NULL;
    int gai = getaddrinfo(host, port, &hints, &res);
    if (gai != 0) {
        hc_errstr_set(errstr, errstr_size, "metrics.listen: cannot resolve host \"%s\": %s", host,
                      gai_strerror(gai));
        return -1;
    }
    int fd = -1;
    int saved = 0;
    for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
        if (fd < 0) {
            saved = errno;
            continue;
        }
        /* Restarts must not wait out TIME_WAIT; a port another socket listens on still fails. */
        int on = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, LISTEN_BACKLOG) != 0) {
            saved = errno;
            close(fd);
            fd = -1;
            continue;
        }
        *family = ai->ai_family;
    }
    freeaddrinfo(res);
    if (fd < 0) {
        if (saved == EADDRINUSE) {
            hc_errstr_set(errstr, errstr_size,
                          "metrics.listen: cannot listen on %s: the port is already in use (stop "
                          "the other process, pick another port, or set metrics.listen empty to "
                          "turn metrics off)",
                          addr);
        } else {
            hc_errstr_set(errstr, errstr_size, "metrics.listen: cannot listen on %s: %s", addr,
                          strerror(saved));
        }
    }
    return fd;
}

static int bound_port(int fd)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0) {
        return -1;
    }
    if (ss.ss_family == AF_INET6) {
        return ntohs(((const struct sockaddr_in6 *)&ss)->sin6_port);
    }
    return ntohs(((const struct sockaddr_in *)&ss)->sin_port);
}

hc_err_t hc_metrics_http_start(const char *listen_addr, hc_metrics_t *m, int64_t flush_ms,
                               hc_metrics_http_t **out, char *errstr, size_t errstr_size)
{
    *out = NULL;
    if (!listen_addr || listen_addr[0] == '\0') {
        return HC_OK; /* metrics off */
    }
    hc_metrics_http_t *http = calloc(1, sizeof(*http));
    if (!http) {
        hc_errstr_set(errstr, errstr_size, "out of memory");
        return HC_ERR_FATAL;
    }
    http->metrics = m;
    http->flush_ms = flush_ms;
    int family = AF_INET;
    int fd = open_listener(listen_addr, &family, errstr, errstr_size);
    if (fd < 0) {
        free(http);
        return HC_ERR_INVALID;
    }
    http->port = bound_port(fd);
    /* AUTO picks epoll on Linux: select() would fail once this process holds more than
     * FD_SETSIZE descriptors, which Kafka and store connections can reach. */
    unsigned int flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG | MHD_USE_AUTO;
    if (family == AF_INET6) {
        flags |= MHD_USE_IPv6;
    }
    /* The logger first: MHD logs while it parses the options that follow. */
    http->daemon = MHD_start_daemon(
        flags, 0, NULL, NULL, handle, http, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
        MHD_OPTION_LISTEN_SOCKET, (MHD_socket)fd, MHD_OPTION_CONNECTION_LIMIT, MAX_CONNECTIONS,
        MHD_OPTION_CONNECTION_TIMEOUT, CONNECTION_TIMEOUT_S, MHD_OPTION_END);
    if (!http->daemon) {
        /* libmicrohttpd closes the socket on most of its failure paths but not all, and says
         * not which: leaving it open at worst leaks one descriptor on a fatal path, where
         * closing it could close a descriptor another thread has just been given. */
        hc_errstr_set(errstr, errstr_size,
                      "metrics.listen: %s: the HTTP server did not start (see the log)",
                      listen_addr);
        free(http);
        return HC_ERR_FATAL;
    }
    hc_log(HC_LOG_INFO, "metrics", "serving /metrics, /healthz and /readyz on %s (port %d)",
           listen_addr, http->port);
    *out = http;
    return HC_OK;
}

int hc_metrics_http_port(const hc_metrics_http_t *http)
{
    return http->port;
}

void hc_metrics_http_stop(hc_metrics_http_t *http)
{
    if (!http) {
        return;
    }
    MHD_stop_daemon(http->daemon);
    free(http);
}
