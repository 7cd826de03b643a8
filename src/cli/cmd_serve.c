/* serve: the HTTP read API, the live page and serve's own metrics, until SIGINT/SIGTERM. */
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "cli_wait.h"
#include "cmds.h"
#include "hotcount/clock.h"
#include "hotcount/hotkeys_follow.h"
#include "hotcount/log.h"
#include "hotcount/producer_key.h"
#include "hotcount/serve.h"

/* Following topic.hotkeys never holds serve up: it runs on a thread of its own, which gives up
 * a catch-up after FOLLOW_OPEN_MS and tries again every FOLLOW_RETRY_MS (so a stop waits at
 * most FOLLOW_OPEN_MS for it). */
#define FOLLOW_OPEN_MS 2000
#define FOLLOW_RETRY_MS 30000
#define FOLLOW_POLL_MS 200

static const hc_cli_cmd_t serve_cmd = {
    "serve", "",
    "Serves the counts over HTTP on serve.listen until SIGINT/SIGTERM: GET /v1/likes/POST, "
    "/v1/likes?ids=a,b,c, /v1/top?n=N, /v1/hotkeys, /v1/stats, the live page at /, and "
    "/metrics. Each post is read from the store at most once per serve.ttl.ms, however many "
    "clients ask, and at most once per serve.hot.ttl.ms while it is read-hot (read at "
    "serve.hot.enter.rate or more, or hot in topic.hotkeys). Prints the base URL (with the "
    "bound port) on the first line of stdout.",
    NULL};

/* The hot-set view of topic.hotkeys, fed by the follower thread and asked by serve's HTTP
 * threads: a read-write lock, as reads are many and records few. */
typedef struct follow {
    const hc_config_t *cfg; /* borrowed */
    pthread_rwlock_t lock;
    hc_hotview_t *hv; /* owned; read only under lock and once ready */
    bool ready;       /* under lock: caught up once, hv is the follower's from now on */
    atomic_bool stop;
    pthread_t thread;
} follow_t;

static bool topic_hot(void *opaque, const char *post_id, size_t post_id_len)
{
    follow_t *f = opaque;
    pthread_rwlock_rdlock(&f->lock);
    bool hot = f->ready && hc_hotview_salts(f->hv, post_id, post_id_len, hc_wall_ms()) > 0;
    pthread_rwlock_unlock(&f->lock);
    return hot;
}

static size_t topic_list(void *opaque, size_t max, hc_hotview_each_fn fn, void *fn_opaque)
{
    follow_t *f = opaque;
    pthread_rwlock_rdlock(&f->lock);
    size_t n = f->ready ? hc_hotview_each_hot(f->hv, hc_wall_ms(), max, fn, fn_opaque) : 0;
    pthread_rwlock_unlock(&f->lock);
    return n;
}

static void *follow_main(void *opaque)
{
    follow_t *f = opaque;
    hc_hotkeys_follow_t *fl = NULL;
    bool told = false;
    while (!atomic_load(&f->stop)) {
        if (!fl) {
            /* hv is not shared until ready: open writes it without the lock */
            char errstr[512];
            hc_err_t err =
                hc_hotkeys_follow_open(f->cfg, f->hv, FOLLOW_OPEN_MS, &fl, errstr, sizeof(errstr));
            if (err == HC_OK) {
                pthread_rwlock_wrlock(&f->lock);
                f->ready = true;
                pthread_rwlock_unlock(&f->lock);
                hc_log(HC_LOG_INFO, "serve",
                       "following %s: its hot posts are read-hot from their first read",
                       f->cfg->topic_hotkeys);
                continue;
            }
            if (!told || err != HC_ERR_TRANSIENT) {
                hc_log(HC_LOG_INFO, "serve",
                       "not following %s (%s): read-hot promotion by read rate only%s",
                       f->cfg->topic_hotkeys, errstr,
                       err == HC_ERR_TRANSIENT ? "; trying again every 30 s" : "");
                told = true;
            }
            if (err != HC_ERR_TRANSIENT) {
                break; /* a bad client configuration or no memory: retrying changes nothing */
            }
            hc_cli_wait(FOLLOW_RETRY_MS, &f->stop);
            continue;
        }
        pthread_rwlock_wrlock(&f->lock);
        int64_t applied = hc_hotkeys_follow_poll(fl, 0); /* never waits under the lock */
        pthread_rwlock_unlock(&f->lock);
        if (applied < 0) {
            hc_log(HC_LOG_WARN, "serve", "out of memory following %s: no longer followed",
                   f->cfg->topic_hotkeys);
            break;
        }
        hc_cli_wait(FOLLOW_POLL_MS, &f->stop);
    }
    hc_hotkeys_follow_close(fl);
    return NULL;
}

/* serve.hot.follow -1: only when brokers was set (serve is often run with no Kafka at all,
 * and brokers' default would then only fill the log with refused connections). */
static bool want_follow(const hc_config_t *cfg)
{
    if (!cfg->topic_hotkeys || !cfg->topic_hotkeys[0] || cfg->serve_hot_follow == 0) {
        return false;
    }
    return cfg->serve_hot_follow == 1 || !hc_config_is_default(cfg, "brokers");
}

/* Starts following; false (nothing started, serve runs without it) when it cannot. */
static bool follow_start(follow_t *f, const hc_config_t *cfg, hc_serve_t *srv)
{
    memset(f, 0, sizeof(*f));
    f->cfg = cfg;
    atomic_init(&f->stop, false);
    f->hv = hc_hotview_new((uint32_t)cfg->salts);
    if (!f->hv) {
        return false;
    }
    if (pthread_rwlock_init(&f->lock, NULL) != 0) {
        hc_hotview_destroy(f->hv);
        return false;
    }
    hc_serve_set_topic(srv, topic_hot, topic_list, f);
    if (pthread_create(&f->thread, NULL, follow_main, f) != 0) {
        hc_serve_set_topic(srv, NULL, NULL, NULL);
        pthread_rwlock_destroy(&f->lock);
        hc_hotview_destroy(f->hv);
        return false;
    }
    return true;
}

/* After hc_serve_stop: no HTTP thread asks any more. */
static void follow_stop(follow_t *f)
{
    atomic_store(&f->stop, true);
    pthread_join(f->thread, NULL);
    pthread_rwlock_destroy(&f->lock);
    hc_hotview_destroy(f->hv);
}

int hc_cmd_serve(int argc, char **argv)
{
    hc_cli_t cli;
    int status = hc_cli_parse(&cli, &serve_cmd, argc, argv);
    if (status >= 0) {
        return status;
    }
    hc_cli_install_signals();
    hc_serve_t *srv = NULL;
    char errstr[512];
    hc_err_t err = hc_serve_start(&cli.cfg, &srv, errstr, sizeof(errstr));
    if (err != HC_OK) {
        fprintf(stderr, "hotcount serve: %s\n", errstr);
        hc_cli_fini(&cli);
        return err == HC_ERR_INVALID ? HC_EXIT_USAGE : HC_EXIT_FAILED;
    }
    follow_t follow;
    bool following = want_follow(&cli.cfg) && follow_start(&follow, &cli.cfg, srv);
    const char *listen = cli.cfg.serve_listen;
    const char *colon = strrchr(listen, ':');
    printf("http://%.*s:%d/\n", (int)(colon - listen), listen, hc_serve_port(srv));
    fflush(stdout);
    hc_cli_wait(-1, &hc_cli_stop);
    hc_serve_stop(srv);
    if (following) {
        follow_stop(&follow);
    }
    hc_cli_fini(&cli);
    return HC_EXIT_OK;
}
