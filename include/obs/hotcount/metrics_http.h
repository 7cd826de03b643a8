/* Layer: obs. The metrics HTTP endpoint (libmicrohttpd, one internal polling thread):
 *
 *   GET /metrics  200, Prometheus text format 0.0.4 (hc_metrics_render)
 *   GET /healthz  200 "ok" while the process runs
 *   GET /readyz   200 "ready" or 503 "not ready" (hc_metrics_is_ready)
 *   other paths   404; methods other than GET and HEAD: 405 with "Allow: GET, HEAD"
 *
 * At most 64 connections at once, each closed after 10 s idle, so a misbehaving scraper cannot
 * pin the process. Requests are served on the server's own thread, which only reads the
 * metrics. */
#ifndef HOTCOUNT_METRICS_HTTP_H
#define HOTCOUNT_METRICS_HTTP_H

#include <stddef.h>
#include <stdint.h>

#include "hotcount/err.h"
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

/* The bound TCP port (the real one when started with port 0). */
int hc_metrics_http_port(const hc_metrics_http_t *http);

/* Stops serving (waits for the server thread) and frees. Accepts NULL. */
void hc_metrics_http_stop(hc_metrics_http_t *http);

#endif
