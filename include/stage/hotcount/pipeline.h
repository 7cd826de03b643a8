/* Layer: stage. Stages on threads in one process: what `run`, `stage1`, `stage2`, the demo and the
 * in-process tests start. Each stage gets its own thread, clients and instance id; they share cfg
 * and metrics (borrowed, must outlive the pipeline). A stage that fails raises the shared stop
 * flag, so one failure stops them all. */
#ifndef HOTCOUNT_PIPELINE_H
#define HOTCOUNT_PIPELINE_H

#include <stdatomic.h>
#include <stdbool.h>

#include "hotcount/config.h"
#include "hotcount/err.h"
#include "hotcount/metrics.h"

#define HC_PIPELINE_MAX_STAGES 16

typedef struct hc_pipeline hc_pipeline_t;

/* Starts n1 stage-1 and n2 stage-2 threads. With one stage of a kind it uses cfg->instance_id,
 * with several "<instance.id>-s1-<i>" / "-s2-<i>". stop (borrowed) is read by every stage and
 * set by any that fails; the caller sets it to stop them. */
hc_err_t hc_pipeline_start(const hc_config_t *cfg, int n1, int n2, hc_metrics_t *metrics,
                           atomic_bool *stop, hc_pipeline_t **plp, char *errstr,
                           size_t errstr_size);

/* True once every stage holds partitions, all partitions of both topics are held, and that
 * stayed so for settle_ms. False on timeout or when a stage failed. */
bool hc_pipeline_wait_settled(hc_pipeline_t *pl, int settle_ms, int timeout_ms);

/* How long the least lively running stage has shown no progress (0 when all are fine or none
 * runs yet); name gets that stage ("stage1" or "stage2"). For the watchdog. */
int64_t hc_pipeline_stalled_ms(const hc_pipeline_t *pl, int64_t now_ms, const char **name);

/* True when some stage stopped with an error; errstr gets the first one. */
bool hc_pipeline_failed(const hc_pipeline_t *pl, char *errstr, size_t errstr_size);

/* Sets stop, joins every thread, destroys the stages. Returns the first stage error (with
 * errstr) or HC_OK. Accepts NULL. */
hc_err_t hc_pipeline_stop(hc_pipeline_t *pl, char *errstr, size_t errstr_size);

#endif
