/* Tests for the metrics HTTP endpoint (src/obs/metrics_http.c). Unlike the other unit tests this
 * one opens sockets: loopback only, on ports the kernel picks (metrics.listen port 0), with a plain
 * socket client so the test depends on nothing but libc. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* cmocka.h needs the four headers above first. */
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <poll.h>
#include <pthread.h>

#include "hotcount/clock.h"
#include "hotcount/hotkeys_scrape.h"
#include "hotcount/http_guard.h"
#include "hotcount/metrics_http.h"

#define FLUSH_MS 1000

typedef struct fixture {
    hc_metrics_t m;
    hc_metrics_http_t *http;
    int port;
} fixture_t;

typedef struct reply {
    int status;
    char raw[1 << 16]; /* status line, headers and body, NUL-terminated */
    const char *body;
} reply_t;

/* Sends `request` to host:port over TCP (family AF_INET or AF_INET6) and reads the whole reply
 * (the request asks for Connection: close). Returns false when no connection could be made. */
static bool http_exchange(int family, int port, const char *request, reply_t *rep)
{
    struct sockaddr_storage ss;
    socklen_t len;
    memset(&ss, 0, sizeof(ss));
    if (family == AF_INET6) {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons((uint16_t)port);
        s6->sin6_addr = in6addr_loopback;
        len = sizeof(*s6);
    } else {
        struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
        s4->sin_family = AF_INET;
        s4->sin_port = htons((uint16_t)port);
        s4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        len = sizeof(*s4);
    }
    int fd = socket(family, SOCK_STREAM, 0);
    if (fd < 0) {
        return false;
    }
    struct timeval tv = {.tv_sec = 10, .tv_usec = 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    if (connect(fd, (struct sockaddr *)&ss, len) != 0) {
        close(fd);
        return false;
    }
    size_t sent = 0;
    size_t want = strlen(request);
    while (sent < want) {
        ssize_t n = send(fd, request + sent, want - sent, MSG_NOSIGNAL);
        if (n <= 0) {
            break;
        }
        sent += (size_t)n;
    }
    size_t got = 0;
    for (;;) {
        ssize_t n = recv(fd, rep->raw + got, sizeof(rep->raw) - 1 - got, 0);
        if (n <= 0) {
            break;
        }
        got += (size_t)n;
        if (got == sizeof(rep->raw) - 1) {
            break;
        }
    }
    close(fd);
    rep->raw[got] = '\0';
    rep->status = 0;
    sscanf(rep->raw, "HTTP/1.%*d %d", &rep->status);
    const char *sep = strstr(rep->raw, "\r\n\r\n");
    rep->body = sep ? sep + 4 : rep->raw + got;
    return true;
}

static reply_t *request(const fixture_t *fx, const char *method, const char *path)
{
    static reply_t rep;
    char req[512];
    snprintf(req, sizeof(req), "%s %s HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
             method, path);
    assert_true(http_exchange(AF_INET, fx->port, req, &rep));
    return &rep;
}

/* The value of header `name` (case-insensitive) in rep, or NULL. Static buffer. */
static const char *header(const reply_t *rep, const char *name)
{
    static char value[256];
    size_t nlen = strlen(name);
    const char *line = strstr(rep->raw, "\r\n");
    while (line && line + 2 < rep->body) {
        line += 2;
        if (strncasecmp(line, name, nlen) == 0 && line[nlen] == ':') {
            const char *v = line + nlen + 1;
            while (*v == ' ') {
                v++;
            }
            size_t vlen = strcspn(v, "\r\n");
            if (vlen >= sizeof(value)) {
                vlen = sizeof(value) - 1;
            }
            memcpy(value, v, vlen);
            value[vlen] = '\0';
            return value;
        }
        line = strstr(line, "\r\n");
    }
    return NULL;
}

static int setup(void **state)
{
    fixture_t *fx = calloc(1, sizeof(*fx));
    char errstr[256];
    if (!fx || hc_metrics_init(&fx->m) != HC_OK) {
        free(fx);
        return -1;
    }
    if (hc_metrics_http_start("127.0.0.1:0", &fx->m, FLUSH_MS, &fx->http, errstr, sizeof(errstr)) !=
        HC_OK) {
        fprintf(stderr, "start: %s\n", errstr);
        hc_metrics_fini(&fx->m);
        free(fx);
        return -1;
    }
    fx->port = hc_metrics_http_port(fx->http);
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *fx = *state;
    hc_metrics_http_stop(fx->http);
    hc_metrics_fini(&fx->m);
    free(fx);
    return 0;
}

/* `top --live --from` reads stage 1's hot keys back through the real endpoint, escapes and
 * all. */
static void hot_keys_scrape_back_hottest_first(void **state)
{
    fixture_t *fx = *state;
    hc_hotkey_t keys[2] = {{.post_id = "p\"1\\", .post_id_len = 4, .events_per_second = 5000},
                           {.post_id = "p2", .post_id_len = 2, .events_per_second = 1200}};
    hc_metrics_publish_hot_keys(&fx->m, "stage1/t", keys, 2, hc_now_ms());
    char addr[64], errstr[256];
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", fx->port);
    hc_scraped_hotkey_t got[8];
    size_t n = 0;
    assert_int_equal(hc_hotkeys_scrape(addr, 5000, got, 8, &n, errstr, sizeof(errstr)), HC_OK);
    assert_int_equal(n, 2);
    assert_int_equal(got[0].post_id_len, 4);
    assert_memory_equal(got[0].post_id, "p\"1\\", 4);
    assert_true(got[0].events_per_second == 5000);
    assert_string_equal(got[1].post_id, "p2");
    /* nothing listens on port 1 */
    assert_int_equal(hc_hotkeys_scrape("127.0.0.1:1", 1000, got, 8, &n, errstr, sizeof(errstr)),
                     HC_ERR_TRANSIENT);
}

static void port_zero_picks_a_free_port(void **state)
{
    fixture_t *fx = *state;
    assert_true(fx->port > 0 && fx->port <= 65535);
}

static void metrics_are_served_as_prometheus_text(void **state)
{
    fixture_t *fx = *state;
    hc_metric_add(fx->m.events_ok, 42);
    hc_metric_add(fx->m.store_commit, 3);
    reply_t *rep = request(fx, "GET", "/metrics");
    assert_int_equal(rep->status, 200);
    const char *ctype = header(rep, "Content-Type");
    assert_non_null(ctype);
    assert_non_null(strstr(ctype, "text/plain; version=0.0.4"));
    static const char *const names[] = {
        "# TYPE hotcount_events_total counter",
        "hotcount_events_total{result=\"ok\"} 42",
        "hotcount_events_total{result=\"invalid\"} 0",
        "hotcount_partials_total",
        "hotcount_transactions_total{outcome=\"commit\"}",
        "hotcount_transactions_total{outcome=\"abort\"}",
        "hotcount_store_batches_total{outcome=\"commit\"} 3",
        "hotcount_store_batches_total{outcome=\"conflict\"}",
        "hotcount_store_batches_total{outcome=\"error\"}",
        "hotcount_store_keys_written_total",
        "# TYPE hotcount_consumer_lag gauge",
        "# TYPE hotcount_end_to_end_seconds histogram",
        "hotcount_end_to_end_seconds_bucket{le=\"+Inf\"}",
        "# TYPE hotcount_hot_key_events_per_second gauge",
        "hotcount_up 1",
        "hotcount_ready 0",
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (!strstr(rep->body, names[i])) {
            fail_msg("/metrics lacks \"%s\"", names[i]);
        }
    }
    const char *clen = header(rep, "Content-Length");
    assert_non_null(clen);
    assert_int_equal(strtoul(clen, NULL, 10), strlen(rep->body));

    /* a query string does not change the path */
    rep = request(fx, "GET", "/metrics?name[]=hotcount_up");
    assert_int_equal(rep->status, 200);
}

static void healthz_answers_ok(void **state)
{
    fixture_t *fx = *state;
    reply_t *rep = request(fx, "GET", "/healthz");
    assert_int_equal(rep->status, 200);
    assert_string_equal(rep->body, "ok\n");
}

static void readyz_follows_the_readiness_rules(void **state)
{
    fixture_t *fx = *state;
    reply_t *rep = request(fx, "GET", "/readyz");
    assert_int_equal(rep->status, 503); /* no stage runs yet */

    hc_metrics_stage_started(&fx->m, HC_METRICS_STAGE1, hc_now_ms());
    rep = request(fx, "GET", "/readyz");
    assert_int_equal(rep->status, 503); /* no partitions */

    hc_metric_add(fx->m.stage1_assigned, 3);
    rep = request(fx, "GET", "/readyz");
    assert_int_equal(rep->status, 200);
    assert_string_equal(rep->body, "ready\n");
    rep = request(fx, "GET", "/metrics");
    assert_non_null(strstr(rep->body, "\nhotcount_ready 1\n"));

    /* input waiting for 10 flush intervals: unready; flushed: ready */
    hc_metric_set(fx->m.stage[HC_METRICS_STAGE1].started_ms, hc_now_ms() - 20 * FLUSH_MS);
    hc_metrics_stage_input(&fx->m, HC_METRICS_STAGE1, hc_now_ms() - 10 * FLUSH_MS);
    rep = request(fx, "GET", "/readyz");
    assert_int_equal(rep->status, 503);
    /* the body says why (the seconds depend on how long the request took) */
    assert_non_null(strstr(rep->body, "not ready: stage1 has input waiting 10."));
    assert_non_null(
        strstr(rep->body, " s for a flush (3 x flush.ms: transactions keep failing)\n"));
    hc_metrics_stage_flushed(&fx->m, HC_METRICS_STAGE1, hc_now_ms(), 0.01);
    rep = request(fx, "GET", "/readyz");
    assert_int_equal(rep->status, 200);
}

static void unknown_paths_are_404(void **state)
{
    fixture_t *fx = *state;
    static const char *const paths[] = {"/", "/metric", "/metrics/", "/healthz/x", "/READYZ"};
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
        reply_t *rep = request(fx, "GET", paths[i]);
        assert_int_equal(rep->status, 404);
    }
}

static void other_methods_are_405(void **state)
{
    fixture_t *fx = *state;
    static const char *const methods[] = {"DELETE", "PUT", "OPTIONS"};
    for (size_t i = 0; i < sizeof(methods) / sizeof(methods[0]); i++) {
        reply_t *rep = request(fx, methods[i], "/metrics");
        assert_int_equal(rep->status, 405);
        assert_non_null(header(rep, "Allow"));
        assert_string_equal(header(rep, "Allow"), "GET, HEAD");
    }
    /* a POST with a body */
    static reply_t rep;
    assert_true(http_exchange(AF_INET, fx->port,
                              "POST /metrics HTTP/1.1\r\nHost: localhost\r\nContent-Length: 5\r\n"
                              "Connection: close\r\n\r\nhello",
                              &rep));
    assert_int_equal(rep.status, 405);
    /* the server still serves afterwards */
    assert_int_equal(request(fx, "GET", "/healthz")->status, 200);
}

static void head_gets_headers_without_a_body(void **state)
{
    fixture_t *fx = *state;
    reply_t *rep = request(fx, "HEAD", "/metrics");
    assert_int_equal(rep->status, 200);
    assert_string_equal(rep->body, "");
}

static void bad_listen_values_are_invalid(void **state)
{
    (void)state;
    hc_metrics_t m;
    hc_metrics_http_t *http = (hc_metrics_http_t *)&m; /* must be reset to NULL */
    char errstr[256];
    static const char *const bad[] = {
        "nonsense",        "127.0.0.1",    "127.0.0.1:",     ":9464", "127.0.0.1:65536",
        "127.0.0.1:99999", "127.0.0.1:-1", "127.0.0.1:12ab", "[::1",  "[::1]9464",
        "[]:9464",         "[::1]:",
    };
    assert_int_equal(hc_metrics_init(&m), HC_OK);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        errstr[0] = '\0';
        assert_int_equal(hc_metrics_http_start(bad[i], &m, FLUSH_MS, &http, errstr, sizeof(errstr)),
                         HC_ERR_INVALID);
        assert_null(http);
        if (!strstr(errstr, "metrics.listen")) {
            fail_msg("\"%s\": errstr does not name metrics.listen: %s", bad[i], errstr);
        }
    }
    /* an address this host does not have */
    assert_int_equal(
        hc_metrics_http_start("192.0.2.1:0", &m, FLUSH_MS, &http, errstr, sizeof(errstr)),
        HC_ERR_INVALID);
    assert_non_null(strstr(errstr, "metrics.listen"));
    hc_metrics_fini(&m);
}

static void empty_listen_turns_metrics_off(void **state)
{
    (void)state;
    hc_metrics_t m;
    hc_metrics_http_t *http = (hc_metrics_http_t *)&m;
    char errstr[64];
    assert_int_equal(hc_metrics_init(&m), HC_OK);
    assert_int_equal(hc_metrics_http_start("", &m, FLUSH_MS, &http, errstr, sizeof(errstr)), HC_OK);
    assert_null(http);
    hc_metrics_http_stop(http);
    hc_metrics_fini(&m);
}

static void port_in_use_is_reported(void **state)
{
    fixture_t *fx = *state;
    char listen_addr[64];
    char errstr[256];
    hc_metrics_http_t *second = NULL;
    snprintf(listen_addr, sizeof(listen_addr), "127.0.0.1:%d", fx->port);
    assert_int_equal(
        hc_metrics_http_start(listen_addr, &fx->m, FLUSH_MS, &second, errstr, sizeof(errstr)),
        HC_ERR_INVALID);
    assert_null(second);
    assert_non_null(strstr(errstr, "metrics.listen"));
    assert_non_null(strstr(errstr, "already in use"));
    /* the first server is unaffected */
    assert_int_equal(request(fx, "GET", "/healthz")->status, 200);
}

static void stop_and_restart_on_the_same_port(void **state)
{
    (void)state;
    hc_metrics_t m;
    hc_metrics_http_t *http = NULL;
    char listen_addr[64];
    char errstr[256];
    assert_int_equal(hc_metrics_init(&m), HC_OK);
    assert_int_equal(
        hc_metrics_http_start("localhost:0", &m, FLUSH_MS, &http, errstr, sizeof(errstr)), HC_OK);
    int port = hc_metrics_http_port(http);
    /* localhost may resolve to ::1 first; ask on whichever family answers */
    static reply_t rep;
    static const char req[] =
        "GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
    bool v4 = http_exchange(AF_INET, port, req, &rep);
    if (!v4) {
        assert_true(http_exchange(AF_INET6, port, req, &rep));
    }
    assert_int_equal(rep.status, 200);
    hc_metrics_http_stop(http);
    /* the port is free again at once (no TIME_WAIT wait) */
    snprintf(listen_addr, sizeof(listen_addr), "%s:%d", v4 ? "127.0.0.1" : "[::1]", port);
    assert_int_equal(
        hc_metrics_http_start(listen_addr, &m, FLUSH_MS, &http, errstr, sizeof(errstr)), HC_OK);
    assert_int_equal(hc_metrics_http_port(http), port);
    hc_metrics_http_stop(http);
    hc_metrics_fini(&m);
}

static void ipv6_loopback_is_served(void **state)
{
    (void)state;
    hc_metrics_t m;
    hc_metrics_http_t *http = NULL;
    char errstr[256];
    int probe = socket(AF_INET6, SOCK_STREAM, 0);
    struct sockaddr_in6 s6 = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    bool have_v6 = probe >= 0 && bind(probe, (struct sockaddr *)&s6, sizeof(s6)) == 0;
    if (probe >= 0) {
        close(probe);
    }
    if (!have_v6) {
        skip(); /* no IPv6 loopback in this sandbox */
    }
    assert_int_equal(hc_metrics_init(&m), HC_OK);
    assert_int_equal(hc_metrics_http_start("[::1]:0", &m, FLUSH_MS, &http, errstr, sizeof(errstr)),
                     HC_OK);
    static reply_t rep;
    assert_true(http_exchange(AF_INET6, hc_metrics_http_port(http),
                              "GET /metrics HTTP/1.1\r\nHost: [::1]\r\nConnection: close\r\n\r\n",
                              &rep));
    assert_int_equal(rep.status, 200);
    assert_non_null(strstr(rep.body, "hotcount_up 1"));
    hc_metrics_http_stop(http);
    hc_metrics_fini(&m);
}

/* ---- hostile clients ---------------------------------------------------------------------- */

/* A TCP connection to 127.0.0.1:port from source address 127.0.0.<src> (all of 127/8 is loopback
 * on Linux), or -1. */
static int connect_from(int src, int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) {
        return -1;
    }
    struct sockaddr_in me = {.sin_family = AF_INET};
    me.sin_addr.s_addr = htonl(0x7f000000u | (uint32_t)src);
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct timeval tv = {.tv_sec = 5, .tv_usec = 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    if (bind(fd, (struct sockaddr *)&me, sizeof(me)) != 0 ||
        connect(fd, (struct sockaddr *)&to, sizeof(to)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Whether the server closed fd (EOF or reset) within ms. */
static bool closed_within(int fd, int ms)
{
    int64_t end = hc_now_ms() + ms;
    char buf[512];
    for (;;) {
        int left = (int)(end - hc_now_ms());
        if (left <= 0) {
            return false;
        }
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, left) == 1) {
            ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
            if (n <= 0) {
                return true;
            }
        }
    }
}

/* One GET /healthz from 127.0.0.<src>: its status (0 when no answer), *ms the time it took. */
static int healthz_from(int src, int port, int64_t *ms)
{
    int64_t t0 = hc_now_ms();
    int fd = connect_from(src, port);
    int status = 0;
    if (fd >= 0) {
        static const char req[] = "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
        char buf[1024];
        if (send(fd, req, sizeof(req) - 1, MSG_NOSIGNAL) == (ssize_t)(sizeof(req) - 1)) {
            ssize_t n = recv(fd, buf, sizeof(buf) - 1, 0);
            if (n > 0) {
                buf[n] = '\0';
                sscanf(buf, "HTTP/1.%*d %d", &status);
            }
        }
        close(fd);
    }
    *ms = hc_now_ms() - t0;
    return status;
}

/* Sends GET path on fd and reads the status of the answer (0: none, or the connection closed). */
static int status_of(int fd, const char *path)
{
    char req[256];
    char buf[1024];
    int status = 0;
    int len = snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path);
    if (send(fd, req, (size_t)len, MSG_NOSIGNAL) == len) {
        ssize_t n = recv(fd, buf, sizeof(buf) - 1, 0);
        if (n > 0) {
            buf[n] = '\0';
            sscanf(buf, "HTTP/1.%*d %d", &status);
        }
    }
    return status;
}

static const hc_http_limits_t small_limits = {.max_connections = 6,
                                              .reserve = 2,
                                              .per_ip = 3,
                                              .request_timeout_ms = 600,
                                              .reserve_timeout_ms = 300};

/* A request that trickles its headers is cut at the whole-request deadline, however often it
 * sends a byte (an idle timeout would never fire). */
static void trickling_request_is_cut_at_its_deadline(void **state)
{
    (void)state;
    hc_metrics_t m;
    hc_metrics_http_t *http = NULL;
    char errstr[256];
    assert_int_equal(hc_metrics_init(&m), HC_OK);
    assert_int_equal(hc_metrics_http_start_limits("127.0.0.1:0", &m, FLUSH_MS, &small_limits, &http,
                                                  errstr, sizeof(errstr)),
                     HC_OK);
    int fd = connect_from(1, hc_metrics_http_port(http));
    assert_true(fd >= 0);
    int64_t t0 = hc_now_ms();
    assert_true(send(fd, "GET /healthz HTTP/1.1\r\nX-A: ", 28, MSG_NOSIGNAL) == 28);
    bool cut = false;
    for (int i = 0; i < 40 && !cut; i++) { /* one byte every 50 ms, for up to 2 s */
        cut = send(fd, "a", 1, MSG_NOSIGNAL) != 1 || closed_within(fd, 50);
    }
    int64_t lived = hc_now_ms() - t0;
    close(fd);
    print_message("a trickling request lived %lld ms (deadline 600)\n", (long long)lived);
    assert_true(cut);
    assert_true(lived >= 550 && lived < 1200);
    hc_metrics_http_stop(http);
    hc_metrics_fini(&m);
}

/* Slow clients holding every slot from three addresses, each at its per-address limit: a probe
 * from a fourth address still gets /healthz at once (fair-share eviction), and a fifth
 * connection from a full address is refused. */
static void probes_get_in_while_slow_clients_hold_every_slot(void **state)
{
    (void)state;
    hc_metrics_t m;
    hc_metrics_http_t *http = NULL;
    char errstr[256];
    hc_http_limits_t lim = small_limits;
    lim.request_timeout_ms = 30000; /* only eviction can make room here */
    lim.reserve_timeout_ms = 30000;
    assert_int_equal(hc_metrics_init(&m), HC_OK);
    assert_int_equal(hc_metrics_http_start_limits("127.0.0.1:0", &m, FLUSH_MS, &lim, &http, errstr,
                                                  sizeof(errstr)),
                     HC_OK);
    int port = hc_metrics_http_port(http);
    int slow[9];
    for (int i = 0; i < 9; i++) { /* 3 addresses x 3 = 9 > 8 slots: the last is refused */
        slow[i] = connect_from(1 + i / 3, port);
        assert_true(slow[i] >= 0);
        assert_true(send(slow[i], "GET /healthz HTTP/1.1\r\n", 23, MSG_NOSIGNAL) == 23);
        hc_sleep_ms(20);
    }
    /* a fourth from a full address: on probation, so refused (503, closed) unless it asks for a
     * probe (probe_gets_in_at_the_per_address_limit) */
    int extra = connect_from(1, port);
    assert_true(extra >= 0);
    assert_int_equal(status_of(extra, "/metrics"), 503);
    assert_true(closed_within(extra, 2000));
    close(extra);
    for (int i = 0; i < 5; i++) {
        int64_t ms = 0;
        assert_int_equal(healthz_from(9, port, &ms), 200);
        assert_true(ms < 1000);
    }
    int cut = 0;
    for (int i = 0; i < 9; i++) {
        cut += closed_within(slow[i], 10);
        close(slow[i]);
    }
    print_message("slow connections cut to admit probes: %d of 9\n", cut);
    assert_true(cut >= 1);
    hc_metrics_http_stop(http);
    hc_metrics_fini(&m);
}

/* Issue 25, item 7: 16 slow connections from 127.0.0.1 (the metrics endpoint's per-address
 * limit, the address a container HEALTHCHECK probes from) used to fail every /healthz from
 * there, refused at accept. A probe gets in on probation now; the flood does not grow by it:
 * past the limit an address holds at most two probation connections, each answering one probe
 * or nothing (a /metrics there is a 503), and a newcomer evicts the oldest that has not asked. */
static void probe_gets_in_at_the_per_address_limit(void **state)
{
    (void)state;
    hc_metrics_t m;
    hc_metrics_http_t *http = NULL;
    char errstr[256];
    assert_int_equal(hc_metrics_init(&m), HC_OK);
    assert_int_equal(
        hc_metrics_http_start("127.0.0.1:0", &m, FLUSH_MS, &http, errstr, sizeof(errstr)), HC_OK);
    int port = hc_metrics_http_port(http);
    int slow[16];
    for (int i = 0; i < 16; i++) {
        slow[i] = connect_from(1, port);
        assert_true(slow[i] >= 0);
        assert_true(send(slow[i], "GET /healthz HTTP/1.1\r\n", 23, MSG_NOSIGNAL) == 23);
    }
    hc_sleep_ms(50);
    for (int i = 0; i < 5; i++) {
        int64_t ms = 0;
        assert_int_equal(healthz_from(1, port, &ms), 200);
        assert_true(ms < 1000);
    }
    int ready = connect_from(1, port);
    assert_true(ready >= 0);
    int st = status_of(ready, "/readyz");
    assert_true(st == 200 || st == 503); /* answered, ready or not */
    close(ready);
    int scrape = connect_from(1, port);
    assert_true(scrape >= 0);
    assert_int_equal(status_of(scrape, "/metrics"), 503);
    assert_true(closed_within(scrape, 1000));
    close(scrape);
    /* more slow ones from the same address: each evicts an older squatter */
    int more[10];
    for (int i = 0; i < 10; i++) {
        more[i] = connect_from(1, port);
        assert_true(more[i] >= 0);
        assert_true(send(more[i], "GET /healthz HTTP/1.1\r\n", 23, MSG_NOSIGNAL) == 23);
        hc_sleep_ms(10);
    }
    int64_t ms = 0;
    assert_int_equal(healthz_from(1, port, &ms), 200);
    int held = 0;
    for (int i = 0; i < 10; i++) {
        held += !closed_within(more[i], 20);
        close(more[i]);
    }
    int cut = 0;
    for (int i = 0; i < 16; i++) {
        cut += closed_within(slow[i], 10);
        close(slow[i]);
    }
    print_message("past the limit: %d of 10 more slow connections held, %d of 16 cut\n", held, cut);
    assert_true(held <= 2);
    assert_int_equal(cut, 0);
    hc_metrics_http_stop(http);
    hc_metrics_fini(&m);
}

/* Request framing: any Transfer-Encoding, two Content-Lengths, or one that is not 0 is a 400
 * with the connection closed, so the request smuggled behind it is never answered. */
static void ambiguous_framing_is_400_and_closes(void **state)
{
    fixture_t *fx = *state;
    static const char *const attempts[] = {
        "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n"
        "\r\n0\r\n\r\nGET /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
        "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nContent-Length: 36\r\n\r\n"
        "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
        "GET /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
        "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
        "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nabcd"
        "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
    };
    static reply_t rep;
    for (size_t i = 0; i < sizeof(attempts) / sizeof(attempts[0]); i++) {
        /* http_exchange reads until the server closes: it returns only because it does */
        assert_true(http_exchange(AF_INET, fx->port, attempts[i], &rep));
        assert_int_equal(rep.status, 400);
        assert_null(strstr(rep.raw, "hotcount_up")); /* the smuggled /metrics: never answered */
        assert_non_null(strstr(rep.raw, "Connection: close"));
    }
    /* a plain GET with Content-Length: 0 is fine */
    assert_true(http_exchange(AF_INET, fx->port,
                              "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n"
                              "Connection: close\r\n\r\n",
                              &rep));
    assert_int_equal(rep.status, 200);
}

#if MHD_VERSION >= 0x00097701
/* libmicrohttpd's strict parsing (hc_http_guard_mhd_options): what no client of the endpoint
 * sends is answered 400 by libmicrohttpd itself, the connection closed, and the request behind it
 * never answered; what the clients do send is served. */
static void strict_parsing_refuses_what_clients_never_send(void **state)
{
    fixture_t *fx = *state;
    static const char smuggled[] = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
    static const char *const refused[] = {
        /* RFC 9112 3.2: an HTTP/1.1 request without Host is a 400 */
        "GET /healthz HTTP/1.1\r\n\r\n",
        "GET /healthz HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n",
        /* Transfer-Encoding in HTTP/1.0 (RFC 9112 6.1) */
        "GET /healthz HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        /* a folded line hiding a Transfer-Encoding from a front proxy */
        "GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: a\r\n Transfer-Encoding: chunked\r\n\r\n"
        "0\r\n\r\n",
        /* bare LF line ends */
        "GET /healthz HTTP/1.1\nHost: x\nContent-Length: 0\n\n",
        /* a header line without a colon */
        "GET /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding chunked\r\n\r\n",
        /* whitespace inside the request target */
        "GET /healthz HTTP/1.1 HTTP/1.1\r\nHost: x\r\n\r\n",
    };
    static reply_t rep;
    char req[512];
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
        snprintf(req, sizeof(req), "%s%s", refused[i], smuggled);
        /* http_exchange reads until the server closes: it returns only because it does */
        assert_true(http_exchange(AF_INET, fx->port, req, &rep));
        print_message("refused %zu: %.40s\n", i, rep.raw);
        assert_int_equal(rep.status, 400);
        assert_null(strstr(rep.raw, "hotcount_up"));
    }
    /* What the endpoint's clients send: Prometheus, curl and the kubelet's httpGet probe (Go's
     * net/http) HTTP/1.1 with Host; hotcount's own hot-key scrape and the image's healthcheck
     * HTTP/1.0, with or without Host. */
    static const char *const served[] = {
        "GET /healthz HTTP/1.1\r\nHost: 10.0.0.7:9464\r\nUser-Agent: kube-probe/1.31\r\n"
        "Accept: */*\r\nConnection: close\r\n\r\n",
        "GET /healthz HTTP/1.0\r\nAccept: text/plain\r\n\r\n",
        "GET /healthz HTTP/1.0\r\nHost: 127.0.0.1:9464\r\nConnection: close\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof(served) / sizeof(served[0]); i++) {
        assert_true(http_exchange(AF_INET, fx->port, served[i], &rep));
        assert_int_equal(rep.status, 200);
        assert_string_equal(rep.body, "ok\n");
    }
}
#endif

static void framing_verdicts(void **state)
{
    (void)state;
    const char *why;
    const char *zero[] = {"0"}, *zeros[] = {"000"}, *five[] = {"5"}, *two[] = {"0", "0"},
               *list[] = {"4, 4"}, *empty[] = {""}, *neg[] = {"-1"};
    assert_int_equal(hc_http_framing_verdict(NULL, 0, 0, &why), 0);
    assert_int_equal(hc_http_framing_verdict(zero, 1, 0, &why), 0);
    assert_int_equal(hc_http_framing_verdict(zeros, 1, 0, &why), 0);
    assert_int_equal(hc_http_framing_verdict(NULL, 0, 1, &why), 400);
    assert_int_equal(hc_http_framing_verdict(zero, 1, 1, &why), 400);
    assert_non_null(why);
    assert_int_equal(hc_http_framing_verdict(five, 1, 0, &why), 400);
    assert_int_equal(hc_http_framing_verdict(two, 2, 0, &why), 400);
    assert_int_equal(hc_http_framing_verdict(list, 1, 0, &why), 400);
    assert_int_equal(hc_http_framing_verdict(empty, 1, 0, &why), 400);
    assert_int_equal(hc_http_framing_verdict(neg, 1, 0, &why), 400);
}

/* A fake stage that accepts and then trickles a byte every 100 ms: a scrape with a 400 ms
 * deadline gives up at about 400 ms, not at the first silence (there is none). */
static void *trickler(void *opaque)
{
    int lfd = *(int *)opaque;
    int fd = accept(lfd, NULL, NULL);
    if (fd < 0) {
        return NULL;
    }
    char buf[256];
    (void)recv(fd, buf, sizeof(buf), 0);
    static const char head[] = "HTTP/1.0 200 OK\r\nX: ";
    (void)send(fd, head, sizeof(head) - 1, MSG_NOSIGNAL);
    for (int i = 0; i < 40; i++) {
        if (send(fd, "a", 1, MSG_NOSIGNAL) != 1) {
            break;
        }
        hc_sleep_ms(100);
    }
    close(fd);
    return NULL;
}

static void scrape_has_a_whole_answer_deadline(void **state)
{
    (void)state;
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t alen = sizeof(a);
    assert_int_equal(bind(lfd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(lfd, 4), 0);
    assert_int_equal(getsockname(lfd, (struct sockaddr *)&a, &alen), 0);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, trickler, &lfd), 0);
    char addr[64], errstr[256];
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", ntohs(a.sin_port));
    char *text = NULL;
    int64_t t0 = hc_now_ms();
    assert_int_equal(hc_metrics_scrape_text_deadline(addr, 200, 400, &text, errstr, sizeof(errstr)),
                     HC_ERR_TRANSIENT);
    int64_t took = hc_now_ms() - t0;
    assert_null(text);
    print_message("a trickling stage: gave up after %lld ms (%s)\n", (long long)took, errstr);
    assert_true(took >= 350 && took < 1000);
    pthread_join(th, NULL);

    /* a stage whose backlog is full never accepts: the connect deadline */
    int hole = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in h = {.sin_family = AF_INET};
    h.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t hlen = sizeof(h);
    assert_int_equal(bind(hole, (struct sockaddr *)&h, sizeof(h)), 0);
    assert_int_equal(listen(hole, 0), 0);
    assert_int_equal(getsockname(hole, (struct sockaddr *)&h, &hlen), 0);
    int fill[3];
    for (int i = 0; i < 3; i++) {
        fill[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        (void)connect(fill[i], (struct sockaddr *)&h, sizeof(h));
    }
    hc_sleep_ms(50);
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", ntohs(h.sin_port));
    t0 = hc_now_ms();
    assert_int_equal(
        hc_metrics_scrape_text_deadline(addr, 200, 5000, &text, errstr, sizeof(errstr)),
        HC_ERR_TRANSIENT);
    took = hc_now_ms() - t0;
    print_message("an unreachable stage: gave up after %lld ms (%s)\n", (long long)took, errstr);
    assert_true(took < 1000);
    for (int i = 0; i < 3; i++) {
        close(fill[i]);
    }
    close(hole);
    close(lfd);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(port_zero_picks_a_free_port, setup, teardown),
        cmocka_unit_test_setup_teardown(hot_keys_scrape_back_hottest_first, setup, teardown),
        cmocka_unit_test_setup_teardown(metrics_are_served_as_prometheus_text, setup, teardown),
        cmocka_unit_test_setup_teardown(healthz_answers_ok, setup, teardown),
        cmocka_unit_test_setup_teardown(readyz_follows_the_readiness_rules, setup, teardown),
        cmocka_unit_test_setup_teardown(unknown_paths_are_404, setup, teardown),
        cmocka_unit_test_setup_teardown(other_methods_are_405, setup, teardown),
        cmocka_unit_test_setup_teardown(head_gets_headers_without_a_body, setup, teardown),
        cmocka_unit_test_setup_teardown(port_in_use_is_reported, setup, teardown),
        cmocka_unit_test(bad_listen_values_are_invalid),
        cmocka_unit_test(empty_listen_turns_metrics_off),
        cmocka_unit_test(stop_and_restart_on_the_same_port),
        cmocka_unit_test(ipv6_loopback_is_served),
        cmocka_unit_test(trickling_request_is_cut_at_its_deadline),
        cmocka_unit_test(probes_get_in_while_slow_clients_hold_every_slot),
        cmocka_unit_test(probe_gets_in_at_the_per_address_limit),
        cmocka_unit_test_setup_teardown(ambiguous_framing_is_400_and_closes, setup, teardown),
#if MHD_VERSION >= 0x00097701
        cmocka_unit_test_setup_teardown(strict_parsing_refuses_what_clients_never_send, setup,
                                        teardown),
#endif
        cmocka_unit_test(framing_verdicts),
        cmocka_unit_test(scrape_has_a_whole_answer_deadline),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
