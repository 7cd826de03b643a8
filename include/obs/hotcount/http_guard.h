/* Layer: obs. Connection discipline for every libmicrohttpd listener of hotcount (the stages'
 * metrics endpoint, `hotcount serve`), against clients that hold connections open on purpose:
 *
 *   - a per-address limit (per_ip): a connection past it is refused at accept (closed before
 *     any byte is read), except that a listener with probe paths admits up to two more from the
 *     address on probation: each is answered one request, and only if that request asks for a
 *     probe path (any other is answered 503 and closed), and a newcomer past those takes the
 *     place of the oldest one that has not yet asked for its probe. So a liveness probe gets in
 *     from an address whose slow clients hold every connection it is allowed;
 *   - a total limit (max_connections + reserve) with fair-share shedding: at the total, a
 *     newcomer from an address holding at least two connections fewer than the busiest address
 *     evicts that address's oldest connection; otherwise it is refused. So a probe or scraper
 *     (one connection from its address) always gets in while a flood from a few addresses holds
 *     every slot, and a flood only evicts itself;
 *   - reserved slots: the `reserve` connections accepted past max_connections get a short
 *     deadline (reserve_timeout_ms), so a probe (/healthz, /metrics) still finds a slot while
 *     slow clients hold every ordinary one, and a slow client that lands in a reserved slot
 *     loses it within that deadline;
 *   - a deadline for a whole request, not only idle time: from accept (or from the end of the
 *     previous request on a kept-alive connection) to the end of the answer, at most
 *     request_timeout_ms; a client that trickles one header byte every few seconds is cut there
 *     (a sweeper thread shuts the socket down; libmicrohttpd then closes it as a dead peer);
 *   - strict request framing (hc_http_guard_check_request): our endpoints take no request body,
 *     so a Transfer-Encoding, a Content-Length other than 0, two Content-Length headers, or one
 *     that is not a plain number is answered 400 with Connection: close before any body byte is
 *     read, so a smuggled second request is never parsed.
 *
 *   - strict parsing by libmicrohttpd itself (hc_http_guard_mhd_options, libmicrohttpd >= 1.0:
 *     MHD_OPTION_CLIENT_DISCIPLINE_LVL 1): two Content-Lengths, Content-Length with
 *     Transfer-Encoding, Transfer-Encoding in HTTP/1.0, a folded or colon-less header line, bare
 *     LF line ends, whitespace in the request target, and an HTTP/1.1 request without Host
 *     (RFC 9112 section 3.2: "MUST respond with a 400") are answered 400 by libmicrohttpd,
 *     connection closed, before the handler runs. Every HTTP/1.1 client of these endpoints sends
 *     Host (Prometheus, curl, the kubelet's httpGet probes and any Go net/http client, whose
 *     HTTP/1.1 writer always sends one); an HTTP/1.0 request needs none (hotcount's own hot-key
 *     scrape, deploy/docker/hotcount-healthcheck's form) and is served.
 *
 * libmicrohttpd has no whole-request deadline (its timeout is an idle timeout), and 0.9.75
 * (Debian 12's, HC_DEPS=system, where hc_http_guard_mhd_options is empty) accepts both
 * Transfer-Encoding and Content-Length, hence this module. Use: hc_http_guard_new, then pass
 * hc_http_guard_accept / hc_http_guard_notify with the guard as their cls to MHD_start_daemon
 * (the apc argument, MHD_OPTION_NOTIFY_CONNECTION) with MHD_OPTION_CONNECTION_LIMIT
 * hc_http_guard_mhd_limit() and MHD_OPTION_ARRAY hc_http_guard_mhd_options(); call
 * hc_http_guard_request_done from MHD_OPTION_NOTIFY_COMPLETED; stop the daemon, then
 * hc_http_guard_destroy. Thread-safe. */
#ifndef HOTCOUNT_HTTP_GUARD_H
#define HOTCOUNT_HTTP_GUARD_H

#include <microhttpd.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "hotcount/err.h"

typedef struct hc_http_limits {
    unsigned max_connections;   /* >= 1: ordinary slots */
    unsigned reserve;           /* slots past max_connections, with the short deadline */
    unsigned per_ip;            /* >= 1: connections from one address */
    int64_t request_timeout_ms; /* >= 1 */
    int64_t reserve_timeout_ms; /* >= 1 */
    /* NULL-terminated paths answered past per_ip (on probation), or NULL: none. Borrowed: must
     * outlive the guard (a static array). */
    const char *const *probe_paths;
} hc_http_limits_t;

typedef struct hc_http_guard_stats {
    uint64_t refused_total; /* refused at accept (a limit), or on probation not a probe */
    uint64_t timed_out;     /* cut at their deadline */
    uint64_t evicted;       /* cut to make room for an address with fewer (fair share) */
    uint64_t bad_framing;   /* answered 400 by hc_http_guard_check_request */
    unsigned open;          /* connections open now */
} hc_http_guard_stats_t;

typedef struct hc_http_guard hc_http_guard_t;

/* name: for the log ("serve", "metrics"). Starts the sweeper thread. HC_ERR_INVALID for bad
 * limits, HC_ERR_FATAL when out of memory or no thread. */
hc_err_t hc_http_guard_new(const hc_http_limits_t *limits, const char *name, hc_http_guard_t **out,
                           char *errstr, size_t errstr_size);
/* Stops the sweeper and frees; call after MHD_stop_daemon. Accepts NULL. */
void hc_http_guard_destroy(hc_http_guard_t *g);

/* The value for MHD_OPTION_CONNECTION_LIMIT: above the guard's own limits, which are the real
 * ones (MHD splits its limit over a thread pool's workers). */
unsigned hc_http_guard_mhd_limit(const hc_http_guard_t *g, unsigned threads);

/* The value for MHD_OPTION_ARRAY: libmicrohttpd's strict request parsing (above), the same for
 * every listener; empty before libmicrohttpd 0.9.77. Static; never freed. */
struct MHD_OptionItem *hc_http_guard_mhd_options(void);

enum MHD_Result hc_http_guard_accept(void *cls, const struct sockaddr *addr, socklen_t addrlen);
void hc_http_guard_notify(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode code);
/* A request on conn finished: its connection gets a fresh deadline for the next one. */
void hc_http_guard_request_done(hc_http_guard_t *g, struct MHD_Connection *conn);

/* 0 when the request's framing is acceptable for a bodyless GET/HEAD endpoint and its
 * connection may ask for target (the request target as received, or the path: compared up to a
 * '?'); otherwise the status to answer with *why set to a static message, and the answer must
 * carry "Connection: close": 400 for framing (counts bad_framing), 503 for a connection on
 * probation asking for anything but a probe path (counts refused_total). Call it once per
 * request, before answering. */
unsigned hc_http_guard_check_request(hc_http_guard_t *g, struct MHD_Connection *conn,
                                     const char *target, const char **why);

/* The pure part of the framing rule, for tests and the fuzzer: given the request's
 * Content-Length values (cl[0..cl_count), each as received) and whether any Transfer-Encoding
 * header was present, the status (0 or 400) and *why. */
unsigned hc_http_framing_verdict(const char *const *cl, size_t cl_count, int has_te,
                                 const char **why);

/* libmicrohttpd's logger (MHD_OPTION_EXTERNAL_LOGGER with the guard as cls): at most one line a
 * second, with a count of those dropped, so a flood of bad connections cannot flood the log. */
void hc_http_guard_log(void *cls, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));

void hc_http_guard_get_stats(hc_http_guard_t *g, hc_http_guard_stats_t *out);

#endif
