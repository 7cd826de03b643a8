/* Connection discipline for the libmicrohttpd listeners (contract in
 * include/obs/hotcount/http_guard.h).
 *
 * One fixed array of connection records, under one mutex: the accept policy counts over it, the
 * connection notifications fill and free records, and a sweeper thread walks it every
 * SWEEP_MS, shutting down the socket of each connection past its deadline. shutdown() (not
 * close) leaves the descriptor to libmicrohttpd, which sees a dead peer and closes it itself.
 * The descriptor cannot be reused under us: libmicrohttpd 0.9.x reports
 * MHD_CONNECTION_NOTIFY_CLOSED (which frees the record under the mutex) before it closes the
 * socket, and the sweeper only touches records it finds in use with the mutex held. */
#include "hotcount/http_guard.h"

#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

#include "hotcount/clock.h"
#include "hotcount/log.h"

#define SWEEP_MS 100
/* Records past the limits, for connections admitted while evicted ones are still closing. */
#define SLACK 64
/* Probe connections of one address past its per-address limit (hc_http_limits_t.probe_paths). A
 * probe needs one connection for a millisecond; two leave room for a liveness and a readiness
 * probe at once. */
#define PROBES_PER_IP 2

typedef struct ip_rec {
    unsigned refs;      /* records in use from this address (cut ones included) */
    unsigned live;      /* of those, not cut */
    unsigned probation; /* of the live ones, admitted past per_ip for a probe */
    size_t addr_len;
    unsigned char addr[16];
} ip_rec_t;

typedef struct conn_rec {
    bool in_use;
    bool cut; /* shut down already */
    bool reserved;
    bool probation; /* admitted past per_ip: it may ask for a probe path, once */
    bool probe_ok;  /* on probation, and its request was a probe: no longer evictable */
    int fd;
    int64_t started_ms;
    int64_t deadline_ms;
    size_t ip; /* index into ips */
} conn_rec_t;

struct hc_http_guard {
    hc_http_limits_t lim;
    char name[32];
    pthread_mutex_t lock;
    pthread_cond_t wake;
    pthread_t sweeper;
    bool stop;
    conn_rec_t *recs;   /* cap + SLACK of them */
    ip_rec_t *ips;      /* cap + SLACK of them */
    size_t cap;         /* max_connections + reserve */
    unsigned open;      /* records in use */
    unsigned live;      /* of those, not cut */
    unsigned probation; /* of the live ones, on probation */
    unsigned probation_max;
    uint64_t refused;
    uint64_t timed_out;
    uint64_t evicted;
    uint64_t bad_framing;
    int64_t log_ms;       /* when libmicrohttpd's last message was logged */
    uint64_t log_dropped; /* messages dropped since */
};

/* The address part of a sockaddr, so that two connections from one host compare equal whatever
 * their ports. An IPv4-mapped IPv6 address counts as its IPv4 address. */
static size_t addr_key(const struct sockaddr *sa, unsigned char out[16])
{
    if (sa && sa->sa_family == AF_INET) {
        memcpy(out, &((const struct sockaddr_in *)sa)->sin_addr, 4);
        return 4;
    }
    if (sa && sa->sa_family == AF_INET6) {
        const unsigned char *b = ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr;
        static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        if (memcmp(b, mapped, sizeof(mapped)) == 0) {
            memcpy(out, b + 12, 4);
            return 4;
        }
        memcpy(out, b, 16);
        return 16;
    }
    return 0;
}

/* The record of an address, or SIZE_MAX. A linear scan: there are at most cap + SLACK
 * addresses, and each accept already costs a system call or two. */
static size_t ip_find(const hc_http_guard_t *g, const unsigned char *key, size_t key_len)
{
    for (size_t i = 0; i < g->cap + SLACK; i++) {
        const ip_rec_t *r = &g->ips[i];
        if (r->refs > 0 && r->addr_len == key_len && memcmp(r->addr, key, key_len) == 0) {
            return i;
        }
    }
    return SIZE_MAX;
}

/* Shuts rec's socket down (libmicrohttpd then closes it) and stops counting it as live. */
/* rec stops counting as live (cut, or closed by libmicrohttpd). */
static void unlive(hc_http_guard_t *g, conn_rec_t *r)
{
    g->ips[r->ip].live--;
    g->live--;
    if (r->probation) {
        g->ips[r->ip].probation--;
        g->probation--;
    }
}

static void cut(hc_http_guard_t *g, conn_rec_t *r)
{
    shutdown(r->fd, SHUT_RDWR);
    r->cut = true;
    unlive(g, r);
}

static void *sweep(void *opaque)
{
    hc_http_guard_t *g = opaque;
    pthread_mutex_lock(&g->lock);
    while (!g->stop) {
        int64_t now = hc_now_ms();
        for (size_t i = 0; i < g->cap + SLACK; i++) {
            conn_rec_t *r = &g->recs[i];
            if (r->in_use && !r->cut && now >= r->deadline_ms) {
                cut(g, r);
                g->timed_out++;
            }
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += SWEEP_MS * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&g->wake, &g->lock, &ts);
    }
    pthread_mutex_unlock(&g->lock);
    return NULL;
}

hc_err_t hc_http_guard_new(const hc_http_limits_t *limits, const char *name, hc_http_guard_t **out,
                           char *errstr, size_t errstr_size)
{
    *out = NULL;
    if (limits->max_connections < 1 || limits->per_ip < 1 || limits->request_timeout_ms < 1 ||
        limits->reserve_timeout_ms < 1) {
        hc_errstr_set(errstr, errstr_size, "%s: connection limits out of range", name);
        return HC_ERR_INVALID;
    }
    hc_http_guard_t *g = calloc(1, sizeof(*g));
    if (!g) {
        hc_errstr_set(errstr, errstr_size, "out of memory");
        return HC_ERR_FATAL;
    }
    g->lim = *limits;
    snprintf(g->name, sizeof(g->name), "%s", name);
    g->cap = (size_t)limits->max_connections + limits->reserve;
    /* Probation connections from all addresses together: as many as the reserved slots (a few
     * probers), and never so many that they eat the slack ordinary admissions need. */
    g->probation_max = limits->reserve > PROBES_PER_IP ? limits->reserve : PROBES_PER_IP;
    if (g->probation_max > SLACK / 2) {
        g->probation_max = SLACK / 2;
    }
    g->recs = calloc(g->cap + SLACK, sizeof(*g->recs));
    g->ips = calloc(g->cap + SLACK, sizeof(*g->ips));
    if (!g->recs || !g->ips) {
        free(g->recs);
        free(g->ips);
        free(g);
        hc_errstr_set(errstr, errstr_size, "out of memory");
        return HC_ERR_FATAL;
    }
    if (pthread_mutex_init(&g->lock, NULL) != 0 || pthread_cond_init(&g->wake, NULL) != 0 ||
        pthread_create(&g->sweeper, NULL, sweep, g) != 0) {
        free(g->recs);
        free(g->ips);
        free(g);
        hc_errstr_set(errstr, errstr_size, "%s: cannot start the connection sweeper", name);
        return HC_ERR_FATAL;
    }
    *out = g;
    return HC_OK;
}

void hc_http_guard_destroy(hc_http_guard_t *g)
{
    if (!g) {
        return;
    }
    pthread_mutex_lock(&g->lock);
    g->stop = true;
    pthread_cond_signal(&g->wake);
    pthread_mutex_unlock(&g->lock);
    pthread_join(g->sweeper, NULL);
    pthread_cond_destroy(&g->wake);
    pthread_mutex_destroy(&g->lock);
    free(g->recs);
    free(g->ips);
    free(g);
}

unsigned hc_http_guard_mhd_limit(const hc_http_guard_t *g, unsigned threads)
{
    /* Each worker of a pool gets limit / threads; give each room for every connection. */
    return (unsigned)(g->cap + SLACK) * (threads > 0 ? threads : 1);
}

/* A newcomer from address me, which holds per_ip ordinary connections already: admitted on
 * probation when the listener has probe paths and the address fewer than PROBES_PER_IP
 * probation connections (and the listener fewer than probation_max); otherwise it takes the
 * place of the address's oldest probation connection that has not yet asked for a probe (a slow
 * client squatting there), if any. So a prober sharing its address with a flood gets in, and the
 * flood gains at most PROBES_PER_IP connections, each answering one probe or nothing. */
static bool admit_on_probation(hc_http_guard_t *g, size_t me)
{
    if (g->lim.probe_paths == NULL || g->lim.probe_paths[0] == NULL) {
        return false;
    }
    if (g->ips[me].probation < PROBES_PER_IP && g->probation < g->probation_max) {
        return true;
    }
    conn_rec_t *victim = NULL;
    for (size_t i = 0; i < g->cap + SLACK; i++) {
        conn_rec_t *r = &g->recs[i];
        if (r->in_use && !r->cut && r->ip == me && r->probation && !r->probe_ok &&
            (!victim || r->started_ms < victim->started_ms)) {
            victim = r;
        }
    }
    if (!victim) {
        return false;
    }
    cut(g, victim);
    g->evicted++;
    return true;
}

/* The accept policy. Over per_ip ordinary connections from one address: on probation, for a
 * probe only (admit_on_probation), or refused. Below the total: admitted. At the total: fair
 * share. If some address holds at least two live connections more than the newcomer's address,
 * its oldest connection is evicted to make room; otherwise refused. So an address with few
 * connections (a probe, a scraper, a client behind its own address) always gets in while others
 * hold many, and a flood from a few addresses evicts only its own. */
enum MHD_Result hc_http_guard_accept(void *cls, const struct sockaddr *addr, socklen_t addrlen)
{
    hc_http_guard_t *g = cls;
    unsigned char key[16];
    (void)addrlen;
    size_t key_len = addr_key(addr, key);
    bool ok = false;
    pthread_mutex_lock(&g->lock);
    size_t me = ip_find(g, key, key_len);
    unsigned mine = me == SIZE_MAX ? 0 : g->ips[me].live;
    unsigned ordinary = me == SIZE_MAX ? 0 : mine - g->ips[me].probation;
    if (g->open >= g->cap + SLACK) {
        ok = false;
    } else if (ordinary >= g->lim.per_ip) {
        ok = admit_on_probation(g, me);
    } else if (g->live < g->cap) {
        ok = true;
    } else {
        size_t heavy = SIZE_MAX;
        for (size_t i = 0; i < g->cap + SLACK; i++) {
            if (g->ips[i].refs > 0 && (heavy == SIZE_MAX || g->ips[i].live > g->ips[heavy].live)) {
                heavy = i;
            }
        }
        if (heavy != SIZE_MAX && g->ips[heavy].live >= mine + 2) {
            conn_rec_t *victim = NULL;
            for (size_t i = 0; i < g->cap + SLACK; i++) {
                conn_rec_t *r = &g->recs[i];
                if (r->in_use && !r->cut && r->ip == heavy &&
                    (!victim || r->started_ms < victim->started_ms)) {
                    victim = r;
                }
            }
            if (victim) {
                cut(g, victim);
                g->evicted++;
                ok = true;
            }
        }
    }
    if (!ok) {
        g->refused++;
    }
    pthread_mutex_unlock(&g->lock);
    return ok ? MHD_YES : MHD_NO;
}

void hc_http_guard_notify(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    hc_http_guard_t *g = cls;
    if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
        conn_rec_t *r = *socket_context;
        if (r) {
            pthread_mutex_lock(&g->lock);
            ip_rec_t *ip = &g->ips[r->ip];
            if (!r->cut) {
                unlive(g, r);
            }
            ip->refs--;
            r->in_use = false;
            g->open--;
            pthread_mutex_unlock(&g->lock);
            *socket_context = NULL;
        }
        return;
    }
    /* Each answer read before the next call: libmicrohttpd 1.0 returns one scratch union per
     * connection for both, so the address's answer overwrote the descriptor's (0.9.75 pointed
     * into the connection instead), and the sweeper shut down whatever descriptor number the
     * address pointer's low bytes made. */
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!info) {
        return;
    }
    const MHD_socket fd = info->connect_fd;
    info = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    unsigned char key[16];
    size_t key_len = addr_key(info ? info->client_addr : NULL, key);
    pthread_mutex_lock(&g->lock);
    conn_rec_t *r = NULL;
    size_t free_ip = SIZE_MAX;
    for (size_t i = 0; i < g->cap + SLACK && !r; i++) {
        if (!g->recs[i].in_use) {
            r = &g->recs[i];
        }
    }
    size_t ip = ip_find(g, key, key_len);
    for (size_t i = 0; ip == SIZE_MAX && i < g->cap + SLACK && free_ip == SIZE_MAX; i++) {
        if (g->ips[i].refs == 0) {
            free_ip = i;
        }
    }
    if (!r || (ip == SIZE_MAX && free_ip == SIZE_MAX)) {
        /* Admitted by two workers at once past the slack: not kept. */
        shutdown(fd, SHUT_RDWR);
        g->refused++;
        pthread_mutex_unlock(&g->lock);
        return;
    }
    if (ip == SIZE_MAX) {
        ip = free_ip;
        g->ips[ip].addr_len = key_len;
        memcpy(g->ips[ip].addr, key, key_len);
    }
    /* Decided here, not at accept: connections of the address may have closed since. */
    bool probation = g->ips[ip].live - g->ips[ip].probation >= g->lim.per_ip;
    g->ips[ip].refs++;
    g->ips[ip].live++;
    int64_t now = hc_now_ms();
    r->in_use = true;
    r->cut = false;
    r->ip = ip;
    r->probation = probation;
    r->probe_ok = false;
    if (probation) {
        g->ips[ip].probation++;
        g->probation++;
    }
    r->reserved = probation || g->live >= g->lim.max_connections;
    r->fd = fd;
    r->started_ms = now;
    r->deadline_ms = now + (r->reserved ? g->lim.reserve_timeout_ms : g->lim.request_timeout_ms);
    g->open++;
    g->live++;
    pthread_mutex_unlock(&g->lock);
    *socket_context = r;
}

void hc_http_guard_request_done(hc_http_guard_t *g, struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    if (!info || !info->socket_context) {
        return;
    }
    conn_rec_t *r = info->socket_context;
    pthread_mutex_lock(&g->lock);
    if (r->in_use && r->probation && !r->cut) {
        /* one answer per probation connection: its slot is for the next probe */
        cut(g, r);
    } else if (r->in_use) {
        r->deadline_ms =
            hc_now_ms() + (r->reserved ? g->lim.reserve_timeout_ms : g->lim.request_timeout_ms);
    }
    pthread_mutex_unlock(&g->lock);
}

struct MHD_OptionItem *hc_http_guard_mhd_options(void)
{
    /* Level 1: "stricter", RFC 9110/9112 to the letter, the level libmicrohttpd recommends for
     * loaded public servers. Level 2 and 3 refuse what the RFCs tell servers to accept (an empty
     * line before a request, whitespace in chunk extensions); 0, the default, accepts two
     * equal Content-Lengths, Content-Length with chunked, Transfer-Encoding in HTTP/1.0, folded
     * header lines, bare LF line ends and whitespace inside the request target. MHD reads the array
     * during MHD_start_daemon only; it is never written. */
    static struct MHD_OptionItem opts[] = {
#if MHD_VERSION >= 0x00097701
        {MHD_OPTION_CLIENT_DISCIPLINE_LVL, 1, NULL},
#endif
        {MHD_OPTION_END, 0, NULL},
    };
    return opts;
}

unsigned hc_http_framing_verdict(const char *const *cl, size_t cl_count, int has_te,
                                 const char **why)
{
    if (has_te) {
        *why = cl_count > 0 ? "Content-Length with Transfer-Encoding"
                            : "Transfer-Encoding on a request that takes no body";
        return MHD_HTTP_BAD_REQUEST;
    }
    if (cl_count > 1) {
        *why = "more than one Content-Length";
        return MHD_HTTP_BAD_REQUEST;
    }
    if (cl_count == 1) {
        const char *v = cl[0];
        size_t n = strlen(v);
        if (n == 0 || strspn(v, "0123456789") != n) {
            *why = "Content-Length is not a number";
            return MHD_HTTP_BAD_REQUEST;
        }
        if (strspn(v, "0") != n) {
            *why = "a request body where none is taken";
            return MHD_HTTP_BAD_REQUEST;
        }
    }
    *why = NULL;
    return 0;
}

#define MAX_CL 4

typedef struct framing {
    const char *cl[MAX_CL];
    size_t cl_count; /* may exceed MAX_CL: only the first MAX_CL are kept */
    int has_te;
} framing_t;

static enum MHD_Result collect(void *cls, enum MHD_ValueKind kind, const char *key,
                               const char *value)
{
    framing_t *f = cls;
    (void)kind;
    if (strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH) == 0) {
        if (f->cl_count < MAX_CL) {
            f->cl[f->cl_count] = value ? value : "";
        }
        f->cl_count++;
    } else if (strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING) == 0) {
        f->has_te = 1;
    }
    return MHD_YES;
}

/* Whether target's path (up to a '?') is one of the probe paths. */
static bool is_probe(const char *const *paths, const char *target)
{
    if (paths == NULL || target == NULL) {
        return false;
    }
    size_t len = strcspn(target, "?");
    for (size_t i = 0; paths[i] != NULL; i++) {
        if (strlen(paths[i]) == len && memcmp(paths[i], target, len) == 0) {
            return true;
        }
    }
    return false;
}

unsigned hc_http_guard_check_request(hc_http_guard_t *g, struct MHD_Connection *conn,
                                     const char *target, const char **why)
{
    framing_t f = {0};
    MHD_get_connection_values(conn, MHD_HEADER_KIND, collect, &f);
    unsigned status =
        hc_http_framing_verdict(f.cl, f.cl_count < MAX_CL ? f.cl_count : MAX_CL, f.has_te, why);
    if (!g) {
        return status;
    }
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    conn_rec_t *r = info ? info->socket_context : NULL;
    pthread_mutex_lock(&g->lock);
    if (status != 0) {
        g->bad_framing++;
    } else if (r && r->in_use && r->probation && !r->probe_ok) {
        if (is_probe(g->lim.probe_paths, target)) {
            r->probe_ok = true;
        } else {
            status = MHD_HTTP_SERVICE_UNAVAILABLE;
            *why = "too many connections from this address: only a probe is answered";
            g->refused++;
        }
    }
    pthread_mutex_unlock(&g->lock);
    return status;
}

void hc_http_guard_get_stats(hc_http_guard_t *g, hc_http_guard_stats_t *out)
{
    pthread_mutex_lock(&g->lock);
    out->refused_total = g->refused;
    out->timed_out = g->timed_out;
    out->evicted = g->evicted;
    out->bad_framing = g->bad_framing;
    out->open = g->live;
    pthread_mutex_unlock(&g->lock);
}

void hc_http_guard_log(void *cls, const char *fmt, va_list ap)
{
    hc_http_guard_t *g = cls;
    char msg[512];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    int64_t now = hc_now_ms();
    uint64_t dropped = 0;
    pthread_mutex_lock(&g->lock);
    bool emit = g->log_ms == 0 || now - g->log_ms >= 1000;
    if (emit) {
        dropped = g->log_dropped;
        g->log_dropped = 0;
        g->log_ms = now;
    } else {
        g->log_dropped++;
    }
    pthread_mutex_unlock(&g->lock);
    if (emit) {
        size_t n = strlen(msg);
        while (n > 0 && (msg[n - 1] == '\n' || msg[n - 1] == '\r')) {
            msg[--n] = '\0';
        }
        if (dropped > 0) {
            hc_log(HC_LOG_WARN, g->name, "%s (%" PRIu64 " more such messages in the last second)",
                   msg, dropped);
        } else {
            hc_log(HC_LOG_WARN, g->name, "%s", msg);
        }
    }
}
