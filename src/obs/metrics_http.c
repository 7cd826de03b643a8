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
#include "hotcount/http_guard.h"
#include "hotcount/listen.h"
#include "hotcount/log.h"

#define LISTEN_BACKLOG 64
#define CONNECTION_TIMEOUT_S 10u

/* A scraper or probe needs one connection for well under a second; 64 ordinary slots, 16 from
 * any one address, and 8 more reserved for probes while slow clients hold the rest. */
/* What a prober asks for; answered even from an address at its per-address limit. */
static const char *const probe_paths[] = {"/healthz", "/readyz", NULL};

const hc_http_limits_t hc_metrics_http_default_limits = {.max_connections = 64,
                                                         .reserve = 8,
                                                         .per_ip = 16,
                                                         .request_timeout_ms = 10000,
                                                         .reserve_timeout_ms = 1000,
                                                         .probe_paths = probe_paths};

struct hc_metrics_http {
    struct MHD_Daemon *daemon; /* owned */
    hc_http_guard_t *guard;    /* owned */
    hc_metrics_t *metrics;     /* borrowed */
    int64_t flush_ms;
    int port;
};

static enum MHD_Result reply_close(struct MHD_Connection *conn, unsigned int status,
                                   const char *body, bool allow_header, bool close_after)
{
    /* copied: a body may be built on the caller's stack (/readyz's reason) */
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(strlen(body), (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!resp) {
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain; charset=utf-8");
    if (allow_header) {
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
    }
    if (close_after) {
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    }
    enum MHD_Result ret = MHD_queue_response(conn, status, resp);
    MHD_destroy_response(resp);
    return ret;
}

static enum MHD_Result reply(struct MHD_Connection *conn, unsigned int status, const char *body,
                             bool allow_header)
{
    return reply_close(conn, status, body, allow_header, false);
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
 * need not be read. A request that announces a body (or frames itself ambiguously) is answered
 * 400 and its connection closed, so no byte after its headers is ever parsed as a request. */
static enum MHD_Result handle(void *cls, struct MHD_Connection *conn, const char *url,
                              const char *method, const char *version, const char *upload_data,
                              size_t *upload_data_size, void **req_cls)
{
    hc_metrics_http_t *http = cls;
    (void)version;
    (void)upload_data;
    (void)upload_data_size;
    (void)req_cls;

    const char *why = NULL;
    unsigned bad = hc_http_guard_check_request(http->guard, conn, url, &why);
    if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0) {
        /* a refused method's body is not read either: then the connection closes */
        return reply_close(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "method not allowed\n", true,
                           bad != 0);
    }
    if (bad != 0) {
        char msg[128];
        snprintf(msg, sizeof(msg), "%s: %s\n",
                 bad == MHD_HTTP_BAD_REQUEST ? "bad request" : "refused", why);
        return reply_close(conn, bad, msg, false, true);
    }
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
        char reason[256] = "";
        if (hc_metrics_readiness(http->metrics, hc_now_ms(), http->flush_ms, reason,
                                 sizeof(reason))) {
            return reply(conn, MHD_HTTP_OK, "ready\n", false);
        }
        /* the reason is built from counters and fixed words: no configured value reaches it */
        char body[300];
        snprintf(body, sizeof(body), "not ready: %s\n", reason);
        return reply(conn, MHD_HTTP_SERVICE_UNAVAILABLE, body, false);
    }
    return reply(conn, MHD_HTTP_NOT_FOUND, "not found\n", false);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **req_cls,
                         enum MHD_RequestTerminationCode toe)
{
    hc_metrics_http_t *http = cls;
    (void)req_cls;
    (void)toe;
    hc_http_guard_request_done(http->guard, conn);
}

hc_err_t hc_metrics_http_start(const char *listen_addr, hc_metrics_t *m, int64_t flush_ms,
                               hc_metrics_http_t **out, char *errstr, size_t errstr_size)
{
    return hc_metrics_http_start_limits(listen_addr, m, flush_ms, &hc_metrics_http_default_limits,
                                        out, errstr, errstr_size);
}

hc_err_t hc_metrics_http_start_limits(const char *listen_addr, hc_metrics_t *m, int64_t flush_ms,
                                      const hc_http_limits_t *limits, hc_metrics_http_t **out,
                                      char *errstr, size_t errstr_size)
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
    hc_http_limits_t lim = *limits;
    if (lim.probe_paths == NULL) {
        lim.probe_paths = probe_paths; /* the endpoint's own, whatever the sizes */
    }
    hc_err_t gerr = hc_http_guard_new(&lim, "metrics", &http->guard, errstr, errstr_size);
    if (gerr != HC_OK) {
        free(http);
        return gerr;
    }
    int family = AF_INET;
    int fd = hc_listen_open("metrics.listen", listen_addr, LISTEN_BACKLOG, &family, &http->port,
                            errstr, errstr_size);
    if (fd < 0) {
        hc_http_guard_destroy(http->guard);
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
        flags, 0, hc_http_guard_accept, http->guard, handle, http, MHD_OPTION_EXTERNAL_LOGGER,
        hc_http_guard_log, http->guard, MHD_OPTION_LISTEN_SOCKET, (MHD_socket)fd,
        MHD_OPTION_CONNECTION_LIMIT, hc_http_guard_mhd_limit(http->guard, 1),
        MHD_OPTION_CONNECTION_TIMEOUT, CONNECTION_TIMEOUT_S, MHD_OPTION_NOTIFY_CONNECTION,
        hc_http_guard_notify, http->guard, MHD_OPTION_NOTIFY_COMPLETED, on_completed, http,
        MHD_OPTION_ARRAY, hc_http_guard_mhd_options(), MHD_OPTION_END);
    if (!http->daemon) {
        /* libmicrohttpd closes the socket on most of its failure paths but not all, and says
         * not which: leaving it open at worst leaks one descriptor on a fatal path, where
         * closing it could close a descriptor another thread has just been given. */
        hc_errstr_set(errstr, errstr_size,
                      "metrics.listen: %s: the HTTP server did not start (see the log)",
                      listen_addr);
        hc_http_guard_destroy(http->guard);
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
    hc_http_guard_destroy(http->guard);
    free(http);
}
