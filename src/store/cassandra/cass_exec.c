/* The Cassandra store's requests (cassandra_impl.h): groups of statements run concurrently,
 * repeated where that is safe, the count and done writes an apply and a recovery share, and
 * the test seam's calls (cass_seam.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cassandra_impl.h"
/* Statements per request group of R1, R2 and R4, and how many of them in flight. */
#define CASS_GROUP 4096
#define CASS_IN_FLIGHT 256
/* How long failed idempotent writes of a committed batch (R4, R5, a recovery) are repeated
 * before the apply gives up with HC_ERR_TRANSIENT and leaves the claim open for the next R0: a
 * node that is down fails at once, and stage 2's own back-off should take over soon (a dead
 * store must show as failed batches within seconds, tests/faults/store_outage.sh). */
#define CASS_REPEAT_MS 4000

void cass_put_be64(uint8_t *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--) {
        p[i] = (uint8_t)(v & 0xff);
        v >>= 8;
    }
}

uint64_t cass_get_be64(const uint8_t *p)
{
    uint64_t v = 0;

    for (int i = 0; i < 8; i++) {
        v = v << 8 | p[i];
    }
    return v;
}

size_t cass_group_size(const cass_store_t *cs)
{
    return cs->hooks != NULL && cs->hooks->group_size > 0 ? cs->hooks->group_size : CASS_GROUP;
}

void cass_before(cass_store_t *cs, hc_cass_step_t step)
{
    if (cs->hooks != NULL && cs->hooks->before != NULL) {
        cs->hooks->before(cs->hooks->opaque, step);
    }
}

/* The test seam's stop (cass_seam.h): true when the apply must end here. */
bool cass_stopped(cass_store_t *cs, hc_cass_step_t step, size_t *k, char *errstr,
                  size_t errstr_size)
{
    ++*k;
    if (cs->hooks != NULL && cs->hooks->after != NULL &&
        !cs->hooks->after(cs->hooks->opaque, step, *k)) {
        hc_errstr_set(errstr, errstr_size,
                      "cassandra store: stopped by a test hook after request group %zu", *k);
        return true;
    }
    return false;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};

    nanosleep(&ts, NULL);
}

/* cassandra_impl.h says what it does. */

int cass_run_many(cass_store_t *cs, hc_cql_stmt_t *const *stmts, size_t n, hc_cql_rows_t **rows_out,
                  int repeat, int64_t deadline_ms, hc_cql_error_t *e)
{
    int *status = calloc(n, sizeof(*status));
    hc_cql_stmt_t **again = NULL;
    size_t *where = NULL;
    hc_cql_rows_t **again_rows = NULL;
    long pause_ms = 50;
    int rc;

    if (status == NULL) {
        snprintf(e->message, sizeof(e->message), "out of memory");
        return HC_CQL_FATAL;
    }
    rc = hc_cql_execute_many(cs->session, stmts, n, CASS_IN_FLIGHT, status, rows_out, e);
    /* The repeat budget counts from the first failure: a process stopped (SIGSTOP) while its
     * requests were out sees them time out when it resumes, and should try again once. */
    if (deadline_ms > cass_mono_ms() + CASS_REPEAT_MS) {
        deadline_ms = cass_mono_ms() + CASS_REPEAT_MS;
    }
    while (rc != HC_CQL_OK && repeat && cass_mono_ms() + pause_ms < deadline_ms) {
        size_t m = 0;

        if (again == NULL) {
            again = malloc(n * sizeof(*again));
            where = malloc(n * sizeof(*where));
            again_rows = calloc(n, sizeof(*again_rows));
            if (again == NULL || where == NULL || again_rows == NULL) {
                break;
            }
        }
        for (size_t i = 0; i < n; i++) {
            if (status[i] == HC_CQL_OK) {
                continue;
            }
            if (!((status[i] == HC_CQL_UNKNOWN && (repeat & CASS_REPEAT_UNKNOWN)) ||
                  (status[i] == HC_CQL_TRANSIENT && (repeat & CASS_REPEAT_TRANSIENT)))) {
                m = 0;
                break;
            }
            again[m] = stmts[i];
            where[m++] = i;
        }
        if (m == 0) {
            break;
        }
        sleep_ms(pause_ms);
        pause_ms = pause_ms < 800 ? pause_ms * 2 : pause_ms;
        int *st2 = calloc(m, sizeof(*st2));
        if (st2 == NULL) {
            break;
        }
        rc = hc_cql_execute_many(cs->session, again, m, CASS_IN_FLIGHT, st2,
                                 rows_out != NULL ? again_rows : NULL, e);
        for (size_t j = 0; j < m; j++) {
            status[where[j]] = st2[j];
            if (rows_out != NULL) {
                hc_cql_rows_free(rows_out[where[j]]);
                rows_out[where[j]] = again_rows[j];
                again_rows[j] = NULL;
            }
        }
        free(st2);
    }
    free(again);
    free(where);
    free(again_rows);
    free(status);
    return rc;
}

void cass_free_stmts(hc_cql_stmt_t **stmts, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        hc_cql_stmt_free(stmts[i]);
    }
}

void cass_free_rows(hc_cql_rows_t **rows, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        hc_cql_rows_free(rows[i]);
        rows[i] = NULL;
    }
}

/* Writes count[i] of ids[i] at timestamp ts (R4: absolute counts, idempotent), in groups. k:
 * the apply's request groups for the test seam, NULL in a recovery (no hooks there). */

hc_err_t cass_write_counts(cass_store_t *cs, const cass_count_write_t *w, size_t n, int64_t ts,
                           int64_t now_ms, int64_t deadline_ms, size_t *k,
                           const hc_store_batch_t *b, char *errstr, size_t errstr_size)
{
    size_t g = cass_group_size(cs);
    hc_cql_stmt_t **stmts = calloc(g, sizeof(*stmts));
    hc_err_t err = HC_OK;

    if (stmts == NULL) {
        hc_errstr_set(errstr, errstr_size, "cassandra store: out of memory");
        return HC_ERR_FATAL;
    }
    for (size_t at = 0; at < n && err == HC_OK; at += g) {
        size_t m = n - at < g ? n - at : g;
        hc_cql_error_t e;
        int rc = HC_CQL_OK;

        for (size_t i = 0; i < m; i++) {
            stmts[i] = cass_stmt(cs, CASS_Q_COUNT);
            if (stmts[i] == NULL) {
                cass_free_stmts(stmts, i);
                hc_errstr_set(errstr, errstr_size, "cassandra store: out of memory");
                free(stmts);
                return HC_ERR_FATAL;
            }
            hc_cql_bind_int64(stmts[i], 0, w[at + i].count);
            hc_cql_bind_timestamp_ms(stmts[i], 1, now_ms);
            rc = hc_cql_bind_text(stmts[i], 2, w[at + i].id, w[at + i].len);
            hc_cql_stmt_set_timestamp(stmts[i], ts);
            hc_cql_stmt_set_idempotent(stmts[i], 1);
        }
        if (k != NULL) {
            cass_before(cs, HC_CASS_R4_COUNTS);
        }
        if (rc == HC_CQL_OK) {
            rc = cass_run_many(cs, stmts, m, NULL, CASS_REPEAT_ALL, deadline_ms, &e);
        } else {
            snprintf(e.message, sizeof(e.message), "a post id that is not text");
        }
        cass_free_stmts(stmts, m);
        if (rc != HC_CQL_OK) {
            err = cass_err(rc, &e, "count writes (the claim stays open until recovered)", errstr,
                           errstr_size);
        } else if (k != NULL && cass_stopped(cs, HC_CASS_R4_COUNTS, k, errstr, errstr_size)) {
            err = HC_ERR_TRANSIENT;
        } else if (b != NULL && b->on_progress != NULL) {
            b->on_progress(b->progress_opaque);
        }
    }
    free(stmts);
    return err;
}

/* The done rows of the partitions listed: seq[i] at ts, one single-partition unlogged batch. */
hc_err_t cass_write_done(cass_store_t *cs, const char *group, const char *topic,
                         const int32_t *parts, const int64_t *seq, size_t n, int64_t ts,
                         int64_t deadline_ms, char *errstr, size_t errstr_size)
{
    hc_cql_batch_t *bt = hc_cql_batch_new(HC_CQL_BATCH_UNLOGGED);
    hc_cql_error_t e;
    long pause_ms = 50;
    int rc = HC_CQL_OK;

    if (bt == NULL) {
        hc_errstr_set(errstr, errstr_size, "cassandra store: out of memory");
        return HC_ERR_FATAL;
    }
    if (deadline_ms > cass_mono_ms() + CASS_REPEAT_MS) {
        deadline_ms = cass_mono_ms() + CASS_REPEAT_MS;
    }
    for (size_t i = 0; i < n && rc == HC_CQL_OK; i++) {
        hc_cql_stmt_t *stmt = cass_stmt(cs, CASS_Q_DONE_SET);

        if (stmt == NULL) {
            rc = HC_CQL_FATAL;
            snprintf(e.message, sizeof(e.message), "out of memory");
            break;
        }
        hc_cql_bind_int64(stmt, 0, seq[i]);
        hc_cql_bind_text(stmt, 1, group, strlen(group));
        hc_cql_bind_text(stmt, 2, topic, strlen(topic));
        hc_cql_bind_int32(stmt, 3, parts[i]);
        rc = hc_cql_batch_add(bt, stmt);
        hc_cql_stmt_free(stmt);
    }
    hc_cql_batch_set_consistency(bt, cs->uri.consistency);
    hc_cql_batch_set_timestamp(bt, ts);
    hc_cql_batch_set_timeout_ms(bt, cs->statement_ms);
    if (rc == HC_CQL_OK) {
        rc = hc_cql_batch_execute(cs->session, bt, NULL, &e);
        /* Idempotent (same values, same timestamp): repeat within the deadline. */
        while ((rc == HC_CQL_TRANSIENT || rc == HC_CQL_UNKNOWN) &&
               cass_mono_ms() + pause_ms < deadline_ms) {
            sleep_ms(pause_ms);
            pause_ms = pause_ms < 800 ? pause_ms * 2 : pause_ms;
            rc = hc_cql_batch_execute(cs->session, bt, NULL, &e);
        }
    }
    hc_cql_batch_free(bt);
    return rc == HC_CQL_OK ? HC_OK : cass_err(rc, &e, "done rows", errstr, errstr_size);
}
