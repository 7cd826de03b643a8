/* The Cassandra store's claims read (R0) and the recovery of open claims (docs/CASSANDRA.md,
 * "Recovery of an open claim"): a claim whose seq is above its partition's done seq is
 * completed from its staged parts, at its own timestamp. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cassandra_impl.h"

hc_err_t cass_read_claims(cass_store_t *cs, const char *group, const char *topic,
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
static bool decode_part(const uint8_t *p, size_t len, cass_count_write_t *w, size_t *n,
                        int64_t *now_ms)
{
    size_t at = 9;

    if (len < 9 || p[0] != CASS_PART_VERSION) {
        return false;
    }
    *now_ms = (int64_t)cass_get_be64(p + 1);
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
        w[*n].count = (int64_t)cass_get_be64(p + at + idlen);
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
    cass_count_write_t *w = malloc((CASS_PART_BYTES / 10 + 1) * sizeof(*w));
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
    rc = nparts > 0 ? cass_run_many(cs, stmts, nparts, rows, CASS_REPEAT_ALL, deadline_ms, &e)
                    : HC_CQL_OK;
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
        err = cass_write_counts(cs, w, n, cl->ts, now_ms, deadline_ms, NULL, NULL, errstr,
                                errstr_size);
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
    err = cass_write_done(cs, group, topic, pp, seq, np, cl->ts, deadline_ms, errstr, errstr_size);
    if (err == HC_OK) {
        for (size_t i = 0; i < all_count; i++) {
            if (all[i].seq > all[i].done_seq && memcmp(all[i].batch, cl->batch, 16) == 0) {
                all[i].done_seq = all[i].seq;
            }
        }
    }
out:
    if (stmts != NULL) {
        cass_free_stmts(stmts, nparts);
    }
    if (rows != NULL) {
        cass_free_rows(rows, nparts);
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

    err = cass_read_claims(cs, group, topic, &c, &n, errstr, errstr_size);
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
