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

#include "hotcount/clock.h"
#include "hotcount/listen.h"
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
    int fd = hc_listen_open("metrics.listen", listen_addr, LISTEN_BACKLOG, &family, &http->port,
                            errstr, errstr_size);
    if (fd < 0) {
        free(http);
        return HC_ERR_INVALID;
    }
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
