/* Layer: serve. `hotcount serve`: the HTTP read API over the store (libmicrohttpd).
 *
 *   GET /v1/likes/{post_id}  {"post_id":"…","likes":N,"as_of":ms}; 0 likes for an unknown post;
 *                            404 for a post id no event could carry (after URL-decoding: not
 *                            1..256 bytes, a control character (C0, DEL, C1), invalid UTF-8)
 *   GET /v1/likes?ids=a,b,c  a JSON array of such objects, in the order asked; each id
 *                            URL-decoded after splitting at literal commas (%2C is part of an
 *                            id); 400 when ids is missing, empty, has a malformed id, or more
 *                            than serve.max.ids of them
 *   GET /v1/top?n=N          the N (default 10, 1..serve.top.max, else 400) largest counts as a
 *                            JSON array of the same objects, largest first
 *   GET /v1/hotkeys          the read-hot posts (serve_hot.h), hottest first, at most 256:
 *                            {"posts":[{post_id, rate, since, source, cooling, ttl_ms}],
 *                            "total", and the thresholds}; never cached
 *   GET /v1/stats            the stages' metrics summed (serve_stats.h): the last good sample of
 *                            each, scraped by a background thread, never on a request; polled
 *                            by the page
 *   GET /                    the live page (web/live.html, compiled in)
 *   GET /metrics, /healthz   serve's own Prometheus metrics; 200 "ok"
 *   other methods: 405 with "Allow: GET, HEAD"; other paths: 404; store down: 503; a request
 *   with a body, a Transfer-Encoding or two Content-Lengths: 400 and the connection closed
 *
 * Connection discipline (http_guard.h): serve.max.connections (+16 reserved with a 1 s deadline,
 * fair-share eviction at the limit), serve.max.connections.per.ip, and a whole-request deadline
 * serve.request.timeout.ms; the listen backlog is 512.
 *
 * Freshness and HTTP caching: every count comes through an hc_serve_cache (serve_cache.h) with
 * TTL serve.ttl.ms and request coalescing, so each post costs at most one store read per TTL
 * however many readers ask; a read-hot post (read at serve.hot.enter.rate or more, or hot in
 * topic.hotkeys) gets serve.hot.ttl.ms instead (serve_hot.h). "as_of" is the wall-clock time at
 * which that store read started: the count was the store's at that moment or later. The 200 answers
 * of /v1/likes and /v1/top carry "Cache-Control: public, max-age=S, s-maxage=S" with S = the TTL
 * rounded up to whole seconds, at least 1 (HTTP has no finer unit, and max-age=0 would make a CDN
 * revalidate every request, which is what the TTL is there to prevent), and a weak ETag of the
 * counts (not of as_of, which changes with every store read even when the counts do not);
 * If-None-Match with a matching tag answers 304.
 *
 * Threads: libmicrohttpd runs serve.threads worker threads (a thread pool, each with its own
 * epoll loop); handlers run on them concurrently. The store handle is not thread-safe (SQLite,
 * hiredis and libpq connections are not), so there is ONE store connection behind a mutex: the
 * cache's coalescing already bounds store reads to one per post per TTL, so a pool would only
 * help cold-key scans. */
#ifndef HOTCOUNT_SERVE_H
#define HOTCOUNT_SERVE_H

#include <stddef.h>

#include "hotcount/config.h"
#include "hotcount/err.h"
#include "hotcount/producer_key.h"
#include "hotcount/serve_hot.h"

typedef struct hc_serve hc_serve_t;

/* Opens the store (cfg->store) and listens on cfg->serve_listen (port 0: a free port, see
 * hc_serve_port). cfg is borrowed and must outlive the server. Errors, with nothing left
 * running: HC_ERR_INVALID naming serve.listen (malformed, unknown host, cannot bind) or the
 * store URI; HC_ERR_TRANSIENT when the store is unreachable; HC_ERR_FATAL otherwise. */
hc_err_t hc_serve_start(const hc_config_t *cfg, hc_serve_t **out, char *errstr, size_t errstr_size);
int hc_serve_port(const hc_serve_t *srv);
/* The hot records of topic.hotkeys now (hc_hotview_each_hot's contract: at most max calls of
 * fn, returns how many there are), for the listings: GET /v1/hotkeys names the topic's hot posts
 * even before their first read, and GET /v1/stats' hot_set the declared ones, which no stage's
 * metrics carry. */
typedef size_t (*hc_serve_topic_list_fn)(void *opaque, size_t max, hc_hotview_each_fn fn,
                                         void *fn_opaque);
/* Promotes posts that is_hot says are hot in topic.hotkeys (serve_hot.h) and lists them with
 * list; both NULL: no topic. Called from the HTTP threads: they must outlive the server or be
 * unset first. */
void hc_serve_set_topic(hc_serve_t *srv, hc_serve_hot_topic_fn is_hot, hc_serve_topic_list_fn list,
                        void *opaque);
/* Stops serving (waits for the worker threads), closes the store, frees. Accepts NULL. */
void hc_serve_stop(hc_serve_t *srv);

/* The live page, generated from web/live.html at build time. */
extern const unsigned char hc_serve_live_html[];
extern const size_t hc_serve_live_html_len;

#endif
