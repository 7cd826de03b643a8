#include "hotcount/pipeline.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "hotcount/clock.h"
#include "hotcount/stage.h"

typedef struct stage_thread {
    hc_stage1_t *s1; /* owned; exactly one of s1, s2 */
    hc_stage2_t *s2; /* owned */
    pthread_t tid;
    bool started;
    atomic_bool *stop;
    atomic_int err;   /* hc_err_t, written by the thread */
    atomic_bool done; /* the stage's run returned */
    char errstr[512];
} stage_thread_t;

struct hc_pipeline {
    const hc_config_t *cfg;
    hc_metrics_t *metrics;
    atomic_bool *stop;
    int n;
    stage_thread_t stages[HC_PIPELINE_MAX_STAGES];
};

static void *stage_main(void *arg)
{
    stage_thread_t *t = arg;
    hc_err_t err = t->s1 ? hc_stage1_run(t->s1, t->stop, t->errstr, sizeof(t->errstr))
                         : hc_stage2_run(t->s2, t->stop, t->errstr, sizeof(t->errstr));
    atomic_store(&t->err, err);
    atomic_store(&t->done, true);
    if (err != HC_OK) {
        atomic_store(t->stop, true);
    }
    return NULL;
}

hc_err_t hc_pipeline_start(const hc_config_t *cfg, int n1, int n2, hc_metrics_t *metrics,
                           atomic_bool *stop, hc_pipeline_t **plp, char *errstr, size_t errstr_size)
{
    *plp = NULL;
    if (n1 < 0 || n2 < 0 || n1 + n2 < 1 || n1 + n2 > HC_PIPELINE_MAX_STAGES) {
        hc_errstr_set(errstr, errstr_size, "between 1 and %d stages", HC_PIPELINE_MAX_STAGES);
        return HC_ERR_INVALID;
    }
    hc_pipeline_t *pl = calloc(1, sizeof(*pl));
    if (!pl) {
        hc_errstr_set(errstr, errstr_size, "out of memory");
        return HC_ERR_FATAL;
    }
    pl->cfg = cfg;
    pl->metrics = metrics;
    pl->stop = stop;
    hc_err_t err = HC_OK;
    for (int i = 0; i < n1 + n2 && err == HC_OK; i++) {
        bool one = i < n1;
        int k = one ? i + 1 : i - n1 + 1;
        char id[300];
        if ((one ? n1 : n2) == 1) {
            snprintf(id, sizeof(id), "%s", cfg->instance_id);
        } else {
            snprintf(id, sizeof(id), "%s-s%d-%d", cfg->instance_id, one ? 1 : 2, k);
        }
        stage_thread_t *t = &pl->stages[pl->n];
        t->stop = stop;
        err = one ? hc_stage1_new(cfg, id, metrics, &t->s1, errstr, errstr_size)
                  : hc_stage2_new(cfg, id, metrics, &t->s2, errstr, errstr_size);
        if (err == HC_OK) {
            pl->n++;
        }
    }
    for (int i = 0; i < pl->n && err == HC_OK; i++) {
        stage_thread_t *t = &pl->stages[i];
        if (pthread_create(&t->tid, NULL, stage_main, t) != 0) {
            hc_errstr_set(errstr, errstr_size, "cannot start a thread");
            err = HC_ERR_FATAL;
        } else {
            t->started = true;
        }
    }
    if (err != HC_OK) {
        hc_pipeline_stop(pl, NULL, 0);
        return err;
    }
    *plp = pl;
    return HC_OK;
}

bool hc_pipeline_failed(const hc_pipeline_t *pl, char *errstr, size_t errstr_size)
{
    for (int i = 0; i < pl->n; i++) {
        const stage_thread_t *t = &pl->stages[i];
        if (atomic_load(&t->err) != HC_OK) {
            hc_errstr_set(errstr, errstr_size, "%s", t->errstr);
            return true;
        }
    }
    return false;
}

bool hc_pipeline_wait_settled(hc_pipeline_t *pl, int settle_ms, int timeout_ms)
{
    int64_t stable_since = -1;
    int64_t deadline = hc_now_ms() + timeout_ms;
    while (hc_now_ms() < deadline && !hc_pipeline_failed(pl, NULL, 0)) {
        int64_t s1 = 0, s2 = 0;
        bool each = true;
        for (int i = 0; i < pl->n; i++) {
            const stage_thread_t *t = &pl->stages[i];
            int a = t->s1 ? hc_stage1_assigned(t->s1) : hc_stage2_assigned(t->s2);
            *(t->s1 ? &s1 : &s2) += a;
            each = each && a > 0;
        }
        bool has1 = false, has2 = false;
        for (int i = 0; i < pl->n; i++) {
            has1 = has1 || pl->stages[i].s1;
            has2 = has2 || pl->stages[i].s2;
        }
        bool ok = each && (!has1 || s1 == pl->cfg->topic_raw_partitions) &&
                  (!has2 || s2 == pl->cfg->topic_partials_partitions);
        if (!ok) {
            stable_since = -1;
        } else if (stable_since < 0) {
            stable_since = hc_now_ms();
        } else if (hc_now_ms() - stable_since >= settle_ms) {
            return true;
        }
        struct timespec ts = {0, 20 * 1000000};
        nanosleep(&ts, NULL);
    }
    return false;
}

int64_t hc_pipeline_stalled_ms(const hc_pipeline_t *pl, int64_t now_ms, const char **name)
{
    int64_t worst = 0;
    for (int i = 0; i < pl->n; i++) {
        const stage_thread_t *t = &pl->stages[i];
        int64_t beat = t->s1 ? hc_stage1_heartbeat_ms(t->s1) : hc_stage2_heartbeat_ms(t->s2);
        /* a stage that has not started or has already returned is not stalled */
        if (beat == 0 || atomic_load(&t->done)) {
            continue;
        }
        if (now_ms - beat > worst) {
            worst = now_ms - beat;
            *name = t->s1 ? "stage1" : "stage2";
        }
    }
    return worst;
}

hc_err_t hc_pipeline_stop(hc_pipeline_t *pl, char *errstr, size_t errstr_size)
{
    if (!pl) {
        return HC_OK;
    }
    atomic_store(pl->stop, true);
    hc_err_t first = HC_OK;
    for (int i = 0; i < pl->n; i++) {
        stage_thread_t *t = &pl->stages[i];
        if (t->started) {
            pthread_join(t->tid, NULL);
        }
        hc_err_t err = atomic_load(&t->err);
        if (err != HC_OK && first == HC_OK) {
            first = err;
            hc_errstr_set(errstr, errstr_size, "%s", t->errstr);
        }
        hc_stage1_destroy(t->s1);
        hc_stage2_destroy(t->s2);
    }
    free(pl);
    return first;
}
