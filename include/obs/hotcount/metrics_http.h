/* Layer: obs. The metrics HTTP endpoint (libmicrohttpd, one internal polling thread):
 *
 *   GET /metrics  200, Prometheus text format 0.0.4 (hc_metrics_render)
 *   GET /healthz  200 "ok" while the process runs
 *   GET /readyz   200 "ready" or 503 "not ready" (hc_metrics_is_ready)
 *   other paths   404; methods other than GET and HEAD: 405 with "Allow: GET, HEAD"
 *
 * Connection discipline (http_guard.h, hc_metrics_http_default_limits): at most 64 connections
 * at once plus 8 reserved for probes with a 1 s deadline, 16 from one address, each request
 * (headers in, answer out) within 10 s whatever the client trickles, and a request that carries
 * or announces a body (Transfer-Encoding, Content-Length > 0, two Content-Lengths) answered 400
 * with the connection closed; so a slow or hostile client cannot take /healthz down. Requests
 * are served on the server's own thread, which only reads the metrics. */
#ifndef HOTCOUNT_METRICS_HTTP_H
#define HOTCOUNT_METRICS_HTTP_H

#include <stddef.h>
#include <stdint.h>

#include "hotcount/err.h"
#include "hotcount/http_guard.h"
#include "hotcount/metrics.h"

typedef struct hc_metrics_http hc_metrics_http_t;

/* Listens on listen_addr ("host:port", "[ipv6]:port"; the host may be a name; port 0 picks a free
 * port, see hc_metrics_http_port) and serves m (borrowed: it must outlive the server) with
 * flush_ms for readiness. An empty listen_addr means metrics are off: HC_OK with *out NULL.
 * Errors, with nothing left running: HC_ERR_INVALID naming metrics.listen for a malformed value,
 * an unknown host, or an address that cannot be bound (in use, not local, not permitted);
 * HC_ERR_FATAL when the server cannot start. Call from the owning thread. */
hc_err_t hc_metrics_http_start(const char *listen_addr, hc_metrics_t *m, int64_t flush_ms,
                               hc_metrics_http_t **out, char *errstr, size_t errstr_size);

/* The same with other connection limits (tests use small ones). */
hc_err_t hc_metrics_http_start_limits(const char *listen_addr, hc_metrics_t *m, int64_t flush_ms,
                                      const hc_http_limits_t *limits, hc_metrics_http_t **out,
                                      char *errstr, size_t errstr_size);
extern const hc_http_limits_t hc_metrics_http_default_limits;

/* The bound TCP port (the real one when started with port 0). */
int hc_metrics_http_port(const hc_metrics_http_t *http);

/* Stops serving (waits for the server thread) and frees. Accepts NULL. */
void hc_metrics_http_stop(hc_metrics_http_t *http);

#endif
