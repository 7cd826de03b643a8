/* The Cassandra store's apply and the recovery of open claims (docs/CASSANDRA.md, "One apply"
 * and "Recovery of an open claim"): R0 claims read, R1 base reads, R2 staging, R3 the claim (the
 * batch's one LWT), R4 absolute counts at the batch's timestamp T, R5 done rows.
 *
 * What is not done yet (src/store/cassandra/README.md): the guard against a change of
 * topic.partials.partitions with a backlog; a batch without offsets (tools and tests only: stage
 * 2's batches always carry offsets) has no claim, so a crash in its R4 leaves some of its posts
 * written and others not. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
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

/* ---- helpers ---- */

static void put_be64(uint8_t *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--) {
        p[i] = (uint8_t)(v & 0xff);
        v >>= 8;
    }
}

static uint64_t get_be64(const uint8_t *p)
{
    uint64_t v = 0;

    for (int i = 0; i < 8; i++) {
        v = v << 8 | p[i];
    }
    return v;
}

static size_t group_size(const cass_store_t *cs)
{
    return cs->hooks != NULL && cs->hooks->group_size > 0 ? cs->hooks->group_size : CASS_GROUP;
}

static void before(cass_store_t *cs, hc_cass_step_t step)
{
    if (cs->hooks != NULL && cs->hooks->before != NULL) {
        cs->hooks->before(cs->hooks->opaque, step);
    }
}

/* The test seam's stop (cass_seam.h): true when the apply must end here. */
static bool stopped(cass_store_t *cs, hc_cass_step_t step, size_t *k, char *errstr,
                    size_t errstr_size)
{
    ++*k;
    if (cs->hooks != NULL && cs->hooks->after != NULL &&
        !cs->hooks->after(cs->hooks->opaque, step, *k)) {
        hc_errstr_set(errstr, errstr_size,
                      "cassandra store: stopped by a test hook after request "
                      "group %zu",
                      *k);
        return true;
    }
    return false;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};

    nanosleep(&ts, NULL);
}

/* Runs stmts[0..n) concurrently; those that failed with a class `repeat` names (not applied:
 * REPEAT_TRANSIENT, unknown outcome: REPEAT_UNKNOWN; only for idempotent statements) are sent
 * again until they all pass or deadline_ms (monotonic; at most CASS_REPEAT_MS from now) passes.
 * rows_out optional, n long. */
enum { REPEAT_UNKNOWN = 1, REPEAT_TRANSIENT = 2, REPEAT_ALL = 3 };

static int run_many(cass_store_t *cs, hc_cql_stmt_t *const *stmts, size_t n,
                    hc_cql_rows_t **rows_out, int repeat, int64_t deadline_ms, hc_cql_error_t *e)
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
            if (!((status[i] == HC_CQL_UNKNOWN && (repeat & REPEAT_UNKNOWN)) ||
                  (status[i] == HC_CQL_TRANSIENT && (repeat & REPEAT_TRANSIENT)))) {
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

static void free_stmts(hc_cql_stmt_t **stmts, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        hc_cql_stmt_free(stmts[i]);
    }
}

static void free_rows(hc_cql_rows_t **rows, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        hc_cql_rows_free(rows[i]);
        rows[i] = NULL;
    }
}

/* Writes count[i] of ids[i] at timestamp ts (R4: absolute counts, idempotent), in groups. k:
 * the apply's request groups for the test seam, NULL in a recovery (no hooks there). */
typedef struct count_write {
    const char *id;
    size_t len;
    int64_t count;
} count_write_t;

static hc_err_t write_counts(cass_store_t *cs, const count_write_t *w, size_t n, int64_t ts,
                             int64_t now_ms, int64_t deadline_ms, size_t *k,
                             const hc_store_batch_t *b, char *errstr, size_t errstr_size)
{
    size_t g = group_size(cs);
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
                free_stmts(stmts, i);
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
            before(cs, HC_CASS_R4_COUNTS);
        }
        if (rc == HC_CQL_OK) {
            rc = run_many(cs, stmts, m, NULL, REPEAT_ALL, deadline_ms, &e);
        } else {
            snprintf(e.message, sizeof(e.message), "a post id that is not text");
        }
        free_stmts(stmts, m);
        if (rc != HC_CQL_OK) {
            err = cass_err(rc, &e, "count writes (the claim stays open until recovered)", errstr,
                           errstr_size);
        } else if (k != NULL && stopped(cs, HC_CASS_R4_COUNTS, k, errstr, errstr_size)) {
            err = HC_ERR_TRANSIENT;
        } else if (b != NULL && b->on_progress != NULL) {
            b->on_progress(b->progress_opaque);
        }
    }
    free(stmts);
    return err;
}

/* The done rows of the partitions listed: seq[i] at ts, one single-partition unlogged batch. */
static hc_err_t write_done(cass_store_t *cs, const char *group, const char *topic,
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

/* ---- R0: the claims, and the recovery of open ones ---- */

static hc_err_t read_claims(cass_store_t *cs, const char *group, const char *topic,
                            cass_claim_t **out, size_t *count, char *errstr, size_t errstr_size)
{
    hc_cql_stmt_t *stmt = cass_stmt(cs, CASS_Q_CLAIMS);
    hc_cql_stmt_t *dstmt = cass_stmt(cs, CASS_Q_DONE);
    hc_cql_rows_t *rows = NULL;
    cass_claim_t *c = NULL;
    size_t n = 0;
    size_t cap = 0;
    hc_cql_error_t e;
    hc_err_t err = HC_OK;
    int rc;

    *out = NULL;
    *count = 0;
    if (stmt == NULL || dstmt == NULL) {
        hc_cql_stmt_free(stmt);
        hc_cql_stmt_free(dstmt);
        hc_errstr_set(errstr, errstr_size, "cassandra store: out of memory");
        return HC_ERR_FATAL;
    }
    /* At the serial consistency: a Paxos read, which completes any claim left in flight. */
    hc_cql_stmt_set_consistency(stmt, cs->uri.serial_consistency);
    hc_cql_bind_text(stmt, 0, group, strlen(group));
    hc_cql_bind_text(stmt, 1, topic, strlen(topic));
    hc_cql_bind_text(dstmt, 0, group, strlen(group));
    hc_cql_bind_text(dstmt, 1, topic, strlen(topic));
    hc_cql_stmt_set_page_size(stmt, 5000);
    hc_cql_stmt_set_page_size(dstmt, 5000);
    do {
        rc = hc_cql_execute(cs->session, stmt, &rows, &e);
        if (rc != HC_CQL_OK) {
            err = cass_err(rc, &e, "claims read", errstr, errstr_size);
            goto done;
        }
        size_t m = hc_cql_rows_count(rows);
        if (n + m > cap) {
            size_t ncap = (n + m) * 2 + 8;
            cass_claim_t *nc = realloc(c, ncap * sizeof(*nc));
            if (nc == NULL) {
                hc_errstr_set(errstr, errstr_size, "cassandra store: out of memory");
                err = HC_ERR_FATAL;
                goto done;
            }
            c = nc;
            cap = ncap;
        }
        for (size_t r = 0; r < m; r++) {
            cass_claim_t *cl = &c[n];
            int64_t v[8] = {0};

            memset(cl, 0, sizeof(*cl));
            for (size_t col = 0; col < 8; col++) {
                if (col == 5) {
                    if (hc_cql_rows_uuid(rows, r, col, cl->batch) != HC_CQL_OK) {
                        memset(cl->batch, 0, sizeof(cl->batch));
                    }
                } else if (hc_cql_rows_int64(rows, r, col, &v[col]) != HC_CQL_OK) {
                    hc_errstr_set(errstr, errstr_size,
                                  "cassandra store: a claim row with a null or odd column %zu "
                                  "(hotcount_claims is written only by hotcount)",
                                  col);
                    err = HC_ERR_FATAL;
                    goto done;
                }
            }
            cl->partition = (int32_t)v[0];
            cl->next_offset = v[1];
            cl->from_offset = v[2];
            cl->seq = v[3];
            cl->ts = v[4];
            cl->parts = (int32_t)v[6];
            cl->posts = (int32_t)v[7];
            n++;
        }
        hc_cql_rows_free(rows);
        rows = NULL;
    } while (hc_cql_stmt_has_more_pages(stmt));
    do {
        rc = hc_cql_execute(cs->session, dstmt, &rows, &e);
        if (rc != HC_CQL_OK) {
            err = cass_err(rc, &e, "done rows read", errstr, errstr_size);
            goto done;
        }
        for (size_t r = 0; r < hc_cql_rows_count(rows); r++) {
            int64_t p;
            int64_t seq;

            if (hc_cql_rows_int64(rows, r, 0, &p) != HC_CQL_OK ||
                hc_cql_rows_int64(rows, r, 1, &seq) != HC_CQL_OK) {
                continue;
            }
            for (size_t i = 0; i < n; i++) {
                if (c[i].partition == p) {
                    c[i].done_seq = seq;
                }
            }
        }
        hc_cql_rows_free(rows);
        rows = NULL;
    } while (hc_cql_stmt_has_more_pages(dstmt));

done:
    hc_cql_rows_free(rows);
    hc_cql_stmt_free(stmt);
    hc_cql_stmt_free(dstmt);
    if (err != HC_OK) {
        free(c);
        return err;
    }
    *out = c;
    *count = n;
    return HC_OK;
}

/* Decodes one staged part into w (room for CASS_PART_BYTES / 10 entries), false if malformed. */
static bool decode_part(const uint8_t *p, size_t len, count_write_t *w, size_t *n, int64_t *now_ms)
{
    size_t at = 9;

    if (len < 9 || p[0] != CASS_PART_VERSION) {
        return false;
    }
    *now_ms = (int64_t)get_be64(p + 1);
    *n = 0;
    while (at < len) {
        size_t idlen;

        if (len - at < 2) {
            return false;
        }
        idlen = (size_t)p[at] << 8 | p[at + 1];
        at += 2;
        if (idlen == 0 || idlen > HC_POST_ID_MAX || len - at < idlen + 8) {
            return false;
        }
        w[*n].id = (const char *)p + at;
        w[*n].len = idlen;
        w[*n].count = (int64_t)get_be64(p + at + idlen);
        ++*n;
        at += idlen + 8;
    }
    return true;
}

/* Replays the open claim cl (every partition whose claim holds its batch id): its staged parts'
 * counts at its own timestamp, then the done rows. The values and timestamp are the ones its
 * writer used: where its writes landed this changes nothing. */
static hc_err_t recover(cass_store_t *cs, const char *group, const char *topic, cass_claim_t *all,
                        size_t all_count, const cass_claim_t *cl, int64_t deadline_ms, char *errstr,
                        size_t errstr_size)
{
    size_t nparts = cl->parts > 0 ? (size_t)cl->parts : 0;
    hc_cql_stmt_t **stmts = calloc(nparts + 1, sizeof(*stmts));
    hc_cql_rows_t **rows = calloc(nparts + 1, sizeof(*rows));
    count_write_t *w = malloc((CASS_PART_BYTES / 10 + 1) * sizeof(*w));
    int32_t *pp = calloc(all_count + 1, sizeof(*pp));
    int64_t *seq = calloc(all_count + 1, sizeof(*seq));
    size_t posts = 0;
    size_t np = 0;
    hc_cql_error_t e;
    hc_err_t err = HC_OK;
    int rc;

    if (stmts == NULL || rows == NULL || w == NULL || pp == NULL || seq == NULL) {
        hc_errstr_set(errstr, errstr_size, "cassandra store: out of memory");
        err = HC_ERR_FATAL;
        goto out;
    }
    for (size_t i = 0; i < nparts; i++) {
        stmts[i] = cass_stmt(cs, CASS_Q_STAGED);
        if (stmts[i] == NULL) {
            hc_errstr_set(errstr, errstr_size, "cassandra store: out of memory");
            err = HC_ERR_FATAL;
            goto out;
        }
        hc_cql_bind_uuid(stmts[i], 0, cl->batch);
        hc_cql_bind_int32(stmts[i], 1, (int32_t)i);
    }
    rc = nparts > 0 ? run_many(cs, stmts, nparts, rows, REPEAT_ALL, deadline_ms, &e) : HC_CQL_OK;
    if (rc != HC_CQL_OK) {
        err = cass_err(rc, &e, "staged parts read (recovering an open claim)", errstr, errstr_size);
        goto out;
    }
    for (size_t i = 0; i < nparts; i++) {
        const uint8_t *p;
        size_t len;
        size_t n;
        int64_t now_ms;

        if (hc_cql_rows_count(rows[i]) != 1) {
            /* Expired (the claim stayed open longer than the staging TTL) or lost. */
            hc_errstr_set(errstr, errstr_size,
                          "cassandra store: partition %d: the open claim %lld's staged part %zu "
                          "is gone (older than the staging TTL?): its counts cannot be "
                          "completed from the store; rebuild from likes.partials",
                          (int)cl->partition, (long long)cl->seq, i);
            err = HC_ERR_FATAL;
            goto out;
        }
        if (hc_cql_rows_bytes(rows[i], 0, 0, &p, &len) != HC_CQL_OK ||
            !decode_part(p, len, w, &n, &now_ms)) {
            hc_errstr_set(errstr, errstr_size,
                          "cassandra store: partition %d: staged part %zu of claim %lld is "
                          "malformed",
                          (int)cl->partition, i, (long long)cl->seq);
            err = HC_ERR_FATAL;
            goto out;
        }
        posts += n;
        err = write_counts(cs, w, n, cl->ts, now_ms, deadline_ms, NULL, NULL, errstr, errstr_size);
        if (err != HC_OK) {
            goto out;
        }
    }
    if (posts != (size_t)(cl->posts > 0 ? cl->posts : 0)) {
        hc_errstr_set(errstr, errstr_size,
                      "cassandra store: partition %d: claim %lld names %d posts, its staged "
                      "parts hold %zu",
                      (int)cl->partition, (long long)cl->seq, (int)cl->posts, posts);
        err = HC_ERR_FATAL;
        goto out;
    }
    for (size_t i = 0; i < all_count; i++) {
        if (all[i].seq > all[i].done_seq && memcmp(all[i].batch, cl->batch, 16) == 0) {
            pp[np] = all[i].partition;
            seq[np++] = all[i].seq;
        }
    }
    err = write_done(cs, group, topic, pp, seq, np, cl->ts, deadline_ms, errstr, errstr_size);
    if (err == HC_OK) {
        for (size_t i = 0; i < all_count; i++) {
            if (all[i].seq > all[i].done_seq && memcmp(all[i].batch, cl->batch, 16) == 0) {
                all[i].done_seq = all[i].seq;
            }
        }
    }
out:
    if (stmts != NULL) {
        free_stmts(stmts, nparts);
    }
    if (rows != NULL) {
        free_rows(rows, nparts);
    }
    free(stmts);
    free(rows);
    free(w);
    free(pp);
    free(seq);
    return err;
}

static bool listed(const int32_t *partitions, size_t count, int32_t p)
{
    if (partitions == NULL) {
        return true;
    }
    for (size_t i = 0; i < count; i++) {
        if (partitions[i] == p) {
            return true;
        }
    }
    return false;
}

hc_err_t cass_settle(cass_store_t *cs, const char *group, const char *topic,
                     const int32_t *partitions, size_t count, cass_claim_t **claims_out,
                     size_t *claims_count, char *errstr, size_t errstr_size)
{
    int64_t deadline_ms = cass_mono_ms() + cs->batch_ms;
    cass_claim_t *c;
    size_t n;
    hc_err_t err;

    err = read_claims(cs, group, topic, &c, &n, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    for (size_t i = 0; i < n; i++) {
        if (c[i].seq > c[i].done_seq && listed(partitions, count, c[i].partition)) {
            err = recover(cs, group, topic, c, n, &c[i], deadline_ms, errstr, errstr_size);
            if (err != HC_OK) {
                free(c);
                return err;
            }
        }
    }
    *claims_out = c;
    *claims_count = n;
    return HC_OK;
}

/* ---- apply ---- */

static cass_known_t *known_of(cass_store_t *cs, int32_t partition)
{
    for (size_t i = 0; i < cs->known_count; i++) {
        if (cs->known[i].partition == partition) {
            return &cs->known[i];
        }
    }
    return NULL;
}

/* True when the handle knows every partition of the batch for its (group, topic). */
static bool knows(cass_store_t *cs, const hc_store_batch_t *b)
{
    if (cs->known_group == NULL || strcmp(cs->known_group, b->group) != 0 ||
        strcmp(cs->known_topic, b->topic) != 0) {
        return false;
    }
    for (size_t i = 0; i < b->offset_count; i++) {
        if (known_of(cs, b->offsets[i].partition) == NULL) {
            return false;
        }
    }
    return true;
}

/* R0: settles the batch's partitions and records their claim rows as known. */
static hc_err_t learn(cass_store_t *cs, const hc_store_batch_t *b, char *errstr, size_t errstr_size)
{
    int32_t *parts = malloc(b->offset_count * sizeof(*parts));
    cass_claim_t *c = NULL;
    size_t n = 0;
    hc_err_t err;

    if (parts == NULL) {
        hc_errstr_set(errstr, errstr_size, "cassandra store: out of memory");
        return HC_ERR_FATAL;
    }
    for (size_t i = 0; i < b->offset_count; i++) {
        parts[i] = b->offsets[i].partition;
    }
    cass_known_clear(cs);
    err = cass_settle(cs, b->group, b->topic, parts, b->offset_count, &c, &n, errstr, errstr_size);
    free(parts);
    if (err != HC_OK) {
        return err;
    }
    if (cs->known_cap < b->offset_count) {
        cass_known_t *k = realloc(cs->known, b->offset_count * sizeof(*k));
        if (k == NULL) {
            free(c);
            hc_errstr_set(errstr, errstr_size, "cassandra store: out of memory");
            return HC_ERR_FATAL;
        }
        cs->known = k;
        cs->known_cap = b->offset_count;
    }
    cs->known_group = strdup(b->group);
    cs->known_topic = strdup(b->topic);
    if (cs->known_group == NULL || cs->known_topic == NULL) {
        free(c);
        cass_known_clear(cs);
        hc_errstr_set(errstr, errstr_size, "cassandra store: out of memory");
        return HC_ERR_FATAL;
    }
    for (size_t i = 0; i < b->offset_count; i++) {
        cass_known_t *k = &cs->known[cs->known_count++];

        *k = (cass_known_t){.partition = b->offsets[i].partition, .next = HC_OFFSET_NONE};
        for (size_t j = 0; j < n; j++) {
            if (c[j].partition == k->partition) {
                k->next = c[j].next_offset;
                k->seq = c[j].seq;
                k->ts = c[j].ts;
            }
        }
    }
    free(c);
    return HC_OK;
}

/* R1: base[i] and the write time of the row of each post need[] lists (0 and 0 without a
 * row). */
static hc_err_t read_bases(cass_store_t *cs, const hc_store_batch_t *b, const size_t *need,
                           size_t n_need, int64_t *base, int64_t *wt, int64_t deadline_ms,
                           size_t *k, char *errstr, size_t errstr_size)
{
    size_t g = group_size(cs);
    hc_cql_stmt_t **stmts = calloc(g, sizeof(*stmts));
    hc_cql_rows_t **rows = calloc(g, sizeof(*rows));
    hc_err_t err = HC_OK;

    if (stmts == NULL || rows == NULL) {
        free(stmts);
        free(rows);
        hc_errstr_set(errstr, errstr_size, "cassandra store: out of memory");
        return HC_ERR_FATAL;
    }
    for (size_t at = 0; at < n_need && err == HC_OK; at += g) {
        size_t m = n_need - at < g ? n_need - at : g;
        hc_cql_error_t e;
        int rc;

        for (size_t i = 0; i < m; i++) {
            const hc_store_delta_t *d = &b->deltas[need[at + i]];

            stmts[i] = cass_stmt(cs, CASS_Q_BASE);
            if (stmts[i] == NULL) {
                free_stmts(stmts, i);
                err = HC_ERR_FATAL;
                hc_errstr_set(errstr, errstr_size, "cassandra store: out of memory");
                goto out;
            }
            hc_cql_bind_text(stmts[i], 0, d->post_id, d->post_id_len);
        }
        before(cs, HC_CASS_R1_BASES);
        /* a refusal is not repeated (nothing is committed yet: stage 2's back-off retries the
         * batch), a timeout is, within CASS_REPEAT_MS (a process resumed from SIGSTOP sees its
         * first requests time out at once) */
        rc = run_many(cs, stmts, m, rows, REPEAT_UNKNOWN, deadline_ms, &e);
        free_stmts(stmts, m);
        if (rc != HC_CQL_OK) {
            free_rows(rows, m);
            err = cass_err(rc, &e, "base reads", errstr, errstr_size);
            break;
        }
        for (size_t i = 0; i < m; i++) {
            size_t j = need[at + i];

            base[j] = 0;
            wt[j] = 0;
            if (hc_cql_rows_count(rows[i]) > 0 && !hc_cql_rows_is_null(rows[i], 0, 0)) {
                if (hc_cql_rows_int64(rows[i], 0, 0, &base[j]) != HC_CQL_OK ||
                    hc_cql_rows_int64(rows[i], 0, 1, &wt[j]) != HC_CQL_OK) {
                    err = HC_ERR_FATAL;
                    hc_errstr_set(errstr, errstr_size,
                                  "cassandra store: an odd row in hotcount_counts");
                }
            }
        }
        free_rows(rows, m);
        if (err == HC_OK && stopped(cs, HC_CASS_R1_BASES, k, errstr, errstr_size)) {
            err = HC_ERR_TRANSIENT;
        } else if (err == HC_OK && b->on_progress != NULL) {
            b->on_progress(b->progress_opaque);
        }
    }
out:
    free(stmts);
    free(rows);
    return err;
}

/* The batch's new counts packed into parts (docs/CASSANDRA.md R2): *buf holds them back to back,
 * start[j] where part j begins (start[parts] the end). */
static hc_err_t pack_parts(const hc_store_batch_t *b, const int64_t *next, uint8_t **buf,
                           size_t **start, size_t *parts, char *errstr, size_t errstr_size)
{
    size_t total = 0;
    size_t cap_parts = 1;
    size_t at = 0;
    size_t part_len = 0;
    uint8_t *p;
    size_t *s;

    for (size_t i = 0; i < b->delta_count; i++) {
        total += 2 + b->deltas[i].post_id_len + 8;
    }
    cap_parts = total / (CASS_PART_BYTES - 9 - 2 - HC_POST_ID_MAX - 8) + 2;
    total += cap_parts * 9;
    p = malloc(total + 1);
    s = malloc((cap_parts + 1) * sizeof(*s));
    if (p == NULL || s == NULL) {
        free(p);
        free(s);
        hc_errstr_set(errstr, errstr_size, "cassandra store: out of memory");
        return HC_ERR_FATAL;
    }
    *parts = 0;
    for (size_t i = 0; i < b->delta_count; i++) {
        size_t need = 2 + b->deltas[i].post_id_len + 8;

        if (*parts == 0 || part_len + need > CASS_PART_BYTES) {
            s[(*parts)++] = at;
            p[at] = CASS_PART_VERSION;
            put_be64(p + at + 1, (uint64_t)b->now_ms);
            at += 9;
            part_len = 9;
        }
        p[at] = (uint8_t)(b->deltas[i].post_id_len >> 8);
        p[at + 1] = (uint8_t)(b->deltas[i].post_id_len & 0xff);
        memcpy(p + at + 2, b->deltas[i].post_id, b->deltas[i].post_id_len);
        put_be64(p + at + 2 + b->deltas[i].post_id_len, (uint64_t)next[i]);
        at += need;
        part_len += need;
    }
    s[*parts] = at;
    *buf = p;
    *start = s;
    return HC_OK;
}

static hc_err_t stage(cass_store_t *cs, const hc_store_batch_t *b, const uint8_t id[16],
                      const uint8_t *buf, const size_t *start, size_t parts, int64_t deadline_ms,
                      size_t *k, char *errstr, size_t errstr_size)
{
    size_t g = group_size(cs);
    hc_cql_stmt_t **stmts = calloc(g, sizeof(*stmts));
    hc_err_t err = HC_OK;

    if (stmts == NULL) {
        hc_errstr_set(errstr, errstr_size, "cassandra store: out of memory");
        return HC_ERR_FATAL;
    }
    for (size_t at = 0; at < parts && err == HC_OK; at += g) {
        size_t m = parts - at < g ? parts - at : g;
        hc_cql_error_t e;
        int rc;

        for (size_t i = 0; i < m; i++) {
            stmts[i] = cass_stmt(cs, CASS_Q_STAGE);
            if (stmts[i] == NULL) {
                free_stmts(stmts, i);
                free(stmts);
                hc_errstr_set(errstr, errstr_size, "cassandra store: out of memory");
                return HC_ERR_FATAL;
            }
            hc_cql_bind_uuid(stmts[i], 0, id);
            hc_cql_bind_int32(stmts[i], 1, (int32_t)(at + i));
            hc_cql_bind_blob(stmts[i], 2, buf + start[at + i], start[at + i + 1] - start[at + i]);
            hc_cql_stmt_set_idempotent(stmts[i], 1);
        }
        before(cs, HC_CASS_R2_STAGING);
        rc = run_many(cs, stmts, m, NULL, REPEAT_UNKNOWN, deadline_ms, &e);
        free_stmts(stmts, m);
        if (rc != HC_CQL_OK) {
            err = cass_err(rc, &e, "staging", errstr, errstr_size);
        } else if (stopped(cs, HC_CASS_R2_STAGING, k, errstr, errstr_size)) {
            err = HC_ERR_TRANSIENT;
        } else if (b->on_progress != NULL) {
            b->on_progress(b->progress_opaque);
        }
    }
    free(stmts);
    return err;
}

/* After a claim whose outcome is unknown: a serial read of the claim rows settles it (and any
 * Paxos round in flight). *landed when every partition's claim holds the batch id. */
static hc_err_t claim_landed(cass_store_t *cs, const hc_store_batch_t *b, const uint8_t id[16],
                             bool *landed, char *errstr, size_t errstr_size)
{
    cass_claim_t *c;
    size_t n;
    size_t hits = 0;
    hc_err_t err = read_claims(cs, b->group, b->topic, &c, &n, errstr, errstr_size);

    if (err != HC_OK) {
        return err;
    }
    for (size_t i = 0; i < n; i++) {
        if (memcmp(c[i].batch, id, 16) == 0) { /* only this batch's partitions hold its id */
            hits++;
        }
    }
    free(c);
    *landed = hits == b->offset_count;
    return HC_OK;
}

/* R3: the claim, one conditional batch on the (group, topic) partition. */
static hc_err_t claim(cass_store_t *cs, const hc_store_batch_t *b, const uint8_t id[16], int64_t ts,
                      size_t parts, char *errstr, size_t errstr_size)
{
    hc_cql_batch_t *bt = hc_cql_batch_new(HC_CQL_BATCH_LOGGED);
    hc_cql_rows_t *rows = NULL;
    hc_cql_error_t e;
    int applied = 0;
    hc_err_t err;
    int rc = HC_CQL_OK;

    if (bt == NULL) {
        hc_errstr_set(errstr, errstr_size, "cassandra store: out of memory");
        return HC_ERR_FATAL;
    }
    for (size_t i = 0; i < b->offset_count && rc == HC_CQL_OK; i++) {
        const hc_store_offset_t *o = &b->offsets[i];
        const cass_known_t *k = known_of(cs, o->partition);
        bool fresh = k->seq == 0;
        hc_cql_stmt_t *stmt = cass_stmt(cs, fresh ? CASS_Q_CLAIM_NEW : CASS_Q_CLAIM);

        if (stmt == NULL) {
            hc_cql_batch_free(bt);
            hc_errstr_set(errstr, errstr_size, "cassandra store: out of memory");
            return HC_ERR_FATAL;
        }
        hc_cql_bind_int64(stmt, 0, o->next);
        hc_cql_bind_int64(stmt, 1, o->expected);
        hc_cql_bind_int64(stmt, 2, k->seq + 1);
        hc_cql_bind_int64(stmt, 3, ts);
        hc_cql_bind_uuid(stmt, 4, id);
        hc_cql_bind_int32(stmt, 5, (int32_t)parts);
        hc_cql_bind_int32(stmt, 6, (int32_t)b->delta_count);
        hc_cql_bind_text(stmt, 7, b->group, strlen(b->group));
        hc_cql_bind_text(stmt, 8, b->topic, strlen(b->topic));
        hc_cql_bind_int32(stmt, 9, o->partition);
        if (!fresh) {
            hc_cql_bind_int64(stmt, 10, o->expected);
            hc_cql_bind_int64(stmt, 11, k->seq);
        }
        rc = hc_cql_batch_add(bt, stmt);
        hc_cql_stmt_free(stmt);
    }
    hc_cql_batch_set_consistency(bt, cs->uri.consistency);
    hc_cql_batch_set_serial_consistency(bt, cs->uri.serial_consistency);
    hc_cql_batch_set_timeout_ms(bt, cs->statement_ms);
    if (rc == HC_CQL_OK) {
        rc = hc_cql_batch_execute(cs->session, bt, &rows, &e);
    }
    hc_cql_batch_free(bt);
    if (rc == HC_CQL_OK) {
        if (hc_cql_rows_count(rows) < 1 || hc_cql_rows_bool(rows, 0, 0, &applied) != HC_CQL_OK) {
            hc_cql_rows_free(rows);
            hc_errstr_set(errstr, errstr_size, "cassandra store: the claim got no [applied]");
            return HC_ERR_FATAL;
        }
        hc_cql_rows_free(rows);
        if (!applied) {
            hc_errstr_set(errstr, errstr_size,
                          "cassandra store: the stored offsets of %s/%s moved (another writer "
                          "claimed a partition of this batch since)",
                          b->group, b->topic);
            return HC_ERR_CONFLICT;
        }
        return HC_OK;
    }
    if (rc != HC_CQL_UNKNOWN) {
        return cass_err(rc, &e, "claim", errstr, errstr_size);
    }
    /* Unknown: never sent blindly again; the serial read says whether it landed. */
    bool landed = false;
    err = claim_landed(cs, b, id, &landed, errstr, errstr_size);
    if (err != HC_OK) {
        return HC_ERR_TRANSIENT; /* still unknown: the next R0 recovers it if it landed */
    }
    if (!landed) {
        hc_errstr_set(errstr, errstr_size,
                      "cassandra store: the claim timed out and did not land: %s", e.message);
        return HC_ERR_TRANSIENT;
    }
    return HC_OK;
}

hc_err_t cass_apply(hc_store_t *st, const hc_store_batch_t *b, char *errstr, size_t errstr_size)
{
    cass_store_t *cs = cass_store(st);
    int64_t deadline_ms = cass_mono_ms() + cs->batch_ms;
    size_t n = b->delta_count;
    int64_t *base = NULL;
    int64_t *wt = NULL;
    int64_t *next = NULL;
    count_write_t *w = NULL;
    uint8_t *buf = NULL;
    size_t *start = NULL;
    size_t *need = NULL;
    size_t n_need = 0;
    size_t parts = 0;
    uint8_t id[16];
    size_t k = 0;
    int64_t ts;
    hc_err_t err;

    err = cass_prepare(cs, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    /* Ids no text column holds: refused before anything is read or written. */
    for (size_t i = 0; i < n; i++) {
        if (!cass_is_text(b->deltas[i].post_id, b->deltas[i].post_id_len)) {
            if (b->refused_out != NULL) {
                *b->refused_out = i;
            }
            hc_errstr_set(errstr, errstr_size,
                          "cassandra store: delta %zu: post_id is not valid UTF-8", i);
            return HC_ERR_RECORD;
        }
    }
    /* R0 */
    if (b->offset_count > 0) {
        if (!knows(cs, b)) {
            before(cs, HC_CASS_R0_CLAIMS);
            err = learn(cs, b, errstr, errstr_size);
            if (err != HC_OK) {
                return err;
            }
            if (stopped(cs, HC_CASS_R0_CLAIMS, &k, errstr, errstr_size)) {
                return HC_ERR_TRANSIENT;
            }
        }
        for (size_t i = 0; i < b->offset_count; i++) {
            const cass_known_t *kn = known_of(cs, b->offsets[i].partition);

            if (kn->next != b->offsets[i].expected) {
                hc_errstr_set(errstr, errstr_size,
                              "cassandra store: partition %d: the stored offset is not the one "
                              "the batch started from",
                              (int)b->offsets[i].partition);
                cass_known_clear(cs);
                return HC_ERR_CONFLICT;
            }
        }
    }
    base = calloc(n + 1, sizeof(*base));
    wt = calloc(n + 1, sizeof(*wt));
    next = calloc(n + 1, sizeof(*next));
    w = calloc(n + 1, sizeof(*w));
    need = calloc(n + 1, sizeof(*need));
    if (base == NULL || wt == NULL || next == NULL || w == NULL || need == NULL) {
        hc_errstr_set(errstr, errstr_size, "cassandra store: out of memory");
        err = HC_ERR_FATAL;
        goto out;
    }
    /* R1, for the posts the cache does not hold (only for a batch with offsets: the cache is
     * valid with the claims this handle knows) */
    for (size_t i = 0; i < n; i++) {
        const cass_cache_slot_t *c =
            b->offset_count > 0
                ? cass_cache_get(&cs->cache, b->deltas[i].post_id, b->deltas[i].post_id_len)
                : NULL;

        if (c != NULL) {
            base[i] = c->count;
            wt[i] = c->ts;
        } else {
            need[n_need++] = i;
        }
    }
    err = read_bases(cs, b, need, n_need, base, wt, deadline_ms, &k, errstr, errstr_size);
    if (err != HC_OK) {
        goto out;
    }
    /* The new counts (overflow refused before any write) and T: strictly above every write this
     * batch must win against, whatever the hosts' clocks say. */
    ts = cass_now_us();
    for (size_t i = 0; i < b->offset_count; i++) {
        const cass_known_t *kn = known_of(cs, b->offsets[i].partition);
        ts = kn->ts >= ts ? kn->ts + 1 : ts;
    }
    for (size_t i = 0; i < n; i++) {
        if (__builtin_add_overflow(base[i], b->deltas[i].delta, &next[i])) {
            if (b->refused_out != NULL) {
                *b->refused_out = i;
            }
            hc_errstr_set(errstr, errstr_size,
                          "cassandra store: delta %zu, post %.*s: the count would leave int64 "
                          "(%lld%+lld)",
                          i, (int)b->deltas[i].post_id_len, b->deltas[i].post_id,
                          (long long)base[i], (long long)b->deltas[i].delta);
            err = HC_ERR_RECORD;
            goto out;
        }
        ts = wt[i] >= ts ? wt[i] + 1 : ts;
        w[i] = (count_write_t){
            .id = b->deltas[i].post_id, .len = b->deltas[i].post_id_len, .count = next[i]};
    }
    if (b->offset_count > 0) {
        /* R2, R3 */
        if (getrandom(id, sizeof(id), 0) != (ssize_t)sizeof(id)) {
            hc_errstr_set(errstr, errstr_size, "cassandra store: no random bytes for a batch id");
            err = HC_ERR_FATAL;
            goto out;
        }
        id[6] = (uint8_t)((id[6] & 0x0f) | 0x40);
        id[8] = (uint8_t)((id[8] & 0x3f) | 0x80);
        if (n > 0) {
            err = pack_parts(b, next, &buf, &start, &parts, errstr, errstr_size);
            if (err == HC_OK) {
                err = stage(cs, b, id, buf, start, parts, deadline_ms, &k, errstr, errstr_size);
            }
            if (err != HC_OK) {
                goto out;
            }
        }
        before(cs, HC_CASS_R3_CLAIM);
        err = claim(cs, b, id, ts, parts, errstr, errstr_size);
        if (err != HC_OK) {
            cass_known_clear(cs);
            goto out;
        }
        if (stopped(cs, HC_CASS_R3_CLAIM, &k, errstr, errstr_size)) {
            cass_known_clear(cs);
            err = HC_ERR_TRANSIENT;
            goto out;
        }
        if (b->on_progress != NULL) {
            b->on_progress(b->progress_opaque);
        }
    }
    /* R4: from here the batch is committed; an error leaves the claim open for the next R0. */
    err = write_counts(cs, w, n, ts, b->now_ms, deadline_ms, &k, b, errstr, errstr_size);
    if (err != HC_OK) {
        cass_known_clear(cs);
        goto out;
    }
    if (b->offset_count > 0) {
        /* R5 */
        int32_t *pp = malloc(b->offset_count * sizeof(*pp));
        int64_t *seq = malloc(b->offset_count * sizeof(*seq));

        if (pp == NULL || seq == NULL) {
            free(pp);
            free(seq);
            cass_known_clear(cs);
            hc_errstr_set(errstr, errstr_size, "cassandra store: out of memory");
            err = HC_ERR_FATAL;
            goto out;
        }
        for (size_t i = 0; i < b->offset_count; i++) {
            pp[i] = b->offsets[i].partition;
            seq[i] = known_of(cs, pp[i])->seq + 1;
        }
        before(cs, HC_CASS_R5_DONE);
        err = write_done(cs, b->group, b->topic, pp, seq, b->offset_count, ts, deadline_ms, errstr,
                         errstr_size);
        free(pp);
        free(seq);
        if (err != HC_OK || stopped(cs, HC_CASS_R5_DONE, &k, errstr, errstr_size)) {
            err = err != HC_OK ? err : HC_ERR_TRANSIENT;
            cass_known_clear(cs);
            goto out;
        }
        for (size_t i = 0; i < b->offset_count; i++) {
            cass_known_t *kn = known_of(cs, b->offsets[i].partition);
            kn->next = b->offsets[i].next;
            kn->seq++;
            kn->ts = ts;
        }
        for (size_t i = 0; i < n; i++) {
            cass_cache_put(&cs->cache, b->deltas[i].post_id, b->deltas[i].post_id_len, next[i], ts);
        }
    }
    if (b->totals_out != NULL) {
        memcpy(b->totals_out, next, n * sizeof(*next));
    }
    err = HC_OK;
out:
    free(base);
    free(wt);
    free(next);
    free(w);
    free(buf);
    free(start);
    free(need);
    return err;
}
