/* The Cassandra store's reads: read_offsets (settles every open claim of the partitions asked,
 * docs/CASSANDRA.md "Recovery"), get (the readers' own query, one row per post), top and foreach
 * (a paged scan of hotcount_counts: not a snapshot, as on Redis and DynamoDB), identity. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cassandra_impl.h"
#include "store_util.h"

#define CASS_GET_GROUP 1024
#define CASS_GET_IN_FLIGHT 128
#define CASS_SCAN_PAGE 2000

hc_err_t cass_read_offsets(hc_store_t *st, const char *group, const char *topic,
                           const int32_t *partitions, size_t count, int64_t *offsets_out,
                           char *errstr, size_t errstr_size)
{
    cass_store_t *cs = cass_store(st);
    cass_claim_t *c = NULL;
    size_t n = 0;
    hc_err_t err;

    err = cass_prepare(cs, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    /* Whatever this handle knew, an offsets read starts it over (stage 2 calls this after an
     * assignment, a conflict or an error). */
    cass_known_clear(cs);
    err = cass_settle(cs, group, topic, partitions, count, &c, &n, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    for (size_t i = 0; i < count; i++) {
        offsets_out[i] = HC_OFFSET_NONE;
        for (size_t j = 0; j < n; j++) {
            if (c[j].partition == partitions[i]) {
                offsets_out[i] = c[j].next_offset;
            }
        }
    }
    free(c);
    return HC_OK;
}

hc_err_t cass_get(hc_store_t *st, const char *const *post_ids, const size_t *post_id_lens,
                  size_t count, int64_t *likes_out, char *errstr, size_t errstr_size)
{
    cass_store_t *cs = cass_store(st);
    hc_cql_stmt_t *stmts[CASS_GET_GROUP];
    hc_cql_rows_t *rows[CASS_GET_GROUP];
    size_t idx[CASS_GET_GROUP];
    hc_err_t err;

    err = cass_prepare(cs, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    for (size_t at = 0; at < count;) {
        size_t m = 0;
        hc_cql_error_t e;
        int rc;

        /* An id no text column holds is no stored post: 0, without a query. */
        for (; at < count && m < CASS_GET_GROUP; at++) {
            likes_out[at] = 0;
            if (post_id_lens[at] == 0 || !cass_is_text(post_ids[at], post_id_lens[at])) {
                continue;
            }
            stmts[m] = cass_stmt(cs, CASS_Q_GET);
            if (stmts[m] == NULL) {
                for (size_t i = 0; i < m; i++) {
                    hc_cql_stmt_free(stmts[i]);
                }
                hc_errstr_set(errstr, errstr_size, "cassandra store: out of memory");
                return HC_ERR_FATAL;
            }
            hc_cql_bind_text(stmts[m], 0, post_ids[at], post_id_lens[at]);
            idx[m++] = at;
        }
        if (m == 0) {
            continue;
        }
        memset(rows, 0, m * sizeof(rows[0]));
        rc = hc_cql_execute_many(cs->session, stmts, m, CASS_GET_IN_FLIGHT, NULL, rows, &e);
        for (size_t i = 0; i < m; i++) {
            hc_cql_stmt_free(stmts[i]);
            if (rc == HC_CQL_OK && hc_cql_rows_count(rows[i]) > 0 &&
                !hc_cql_rows_is_null(rows[i], 0, 0)) {
                hc_cql_rows_int64(rows[i], 0, 0, &likes_out[idx[i]]);
            }
            hc_cql_rows_free(rows[i]);
        }
        if (rc != HC_CQL_OK) {
            return cass_err(rc, &e, "get", errstr, errstr_size);
        }
    }
    return HC_OK;
}

hc_err_t cass_foreach(hc_store_t *st, hc_store_row_fn fn, void *opaque, char *errstr,
                      size_t errstr_size)
{
    cass_store_t *cs = cass_store(st);
    hc_cql_stmt_t *stmt;
    hc_err_t err;
    bool go_on = true;

    err = cass_prepare(cs, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    stmt = cass_stmt(cs, CASS_Q_SCAN);
    if (stmt == NULL) {
        hc_errstr_set(errstr, errstr_size, "cassandra store: out of memory");
        return HC_ERR_FATAL;
    }
    hc_cql_stmt_set_page_size(stmt, CASS_SCAN_PAGE);
    do {
        hc_cql_rows_t *rows = NULL;
        hc_cql_error_t e;
        int rc = hc_cql_execute(cs->session, stmt, &rows, &e);

        if (rc != HC_CQL_OK) {
            hc_cql_stmt_free(stmt);
            return cass_err(rc, &e, "scan", errstr, errstr_size);
        }
        for (size_t r = 0; go_on && r < hc_cql_rows_count(rows); r++) {
            const uint8_t *id;
            size_t len;
            int64_t likes;

            if (hc_cql_rows_bytes(rows, r, 0, &id, &len) != HC_CQL_OK || len == 0 ||
                len > HC_POST_ID_MAX || hc_cql_rows_int64(rows, r, 1, &likes) != HC_CQL_OK) {
                continue; /* not a row hotcount wrote (an id too long, a null count) */
            }
            go_on = fn((const char *)id, len, likes, opaque);
        }
        hc_cql_rows_free(rows);
    } while (go_on && hc_cql_stmt_has_more_pages(stmt));
    hc_cql_stmt_free(stmt);
    return HC_OK;
}

hc_err_t cass_top(hc_store_t *st, size_t n, hc_store_row_t *rows_out, size_t *count_out,
                  char *errstr, size_t errstr_size)
{
    hc_store_top_t top;
    hc_err_t err;

    /* A full scan: Cassandra keeps no order by value. Each token range is visited once, so no
     * post comes back twice. */
    hc_store_top_init(&top, rows_out, n);
    err = cass_foreach(st, hc_store_top_offer, &top, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    *count_out = hc_store_top_finish(&top);
    return HC_OK;
}

/* "<incarnation>/<hotcount_counts id>/<hotcount_claims id>": a keyspace dropped and created
 * again, a table dropped and created again, or an init after the meta row was lost all change
 * it. */
hc_err_t cass_identity(hc_store_t *st, char *id_out, size_t id_size, char *errstr,
                       size_t errstr_size)
{
    cass_store_t *cs = cass_store(st);
    hc_cql_stmt_t *meta = NULL;
    hc_cql_stmt_t *tables = NULL;
    hc_cql_rows_t *rows = NULL;
    hc_cql_error_t e;
    char inc[64] = "";
    char counts_id[40] = "";
    char claims_id[40] = "";
    hc_err_t err;
    int rc;

    err = cass_prepare(cs, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    meta = cass_stmt(cs, CASS_Q_META);
    tables = cass_stmt(cs, CASS_Q_TABLES);
    if (meta == NULL || tables == NULL) {
        hc_errstr_set(errstr, errstr_size, "cassandra store: out of memory");
        err = HC_ERR_FATAL;
        goto out;
    }
    rc = hc_cql_execute(cs->session, meta, &rows, &e);
    if (rc != HC_CQL_OK) {
        err = cass_err(rc, &e, "identity", errstr, errstr_size);
        goto out;
    }
    if (hc_cql_rows_count(rows) == 1) {
        const uint8_t *v;
        size_t len;

        if (hc_cql_rows_bytes(rows, 0, 0, &v, &len) == HC_CQL_OK && len < sizeof(inc)) {
            memcpy(inc, v, len);
            inc[len] = '\0';
        }
    }
    hc_cql_rows_free(rows);
    rows = NULL;
    if (inc[0] == '\0') {
        hc_errstr_set(errstr, errstr_size,
                      "cassandra store: no incarnation in %s.hotcount_meta (the store lost it: "
                      "run `hotcount init`)",
                      cs->uri.keyspace);
        err = HC_ERR_FATAL;
        goto out;
    }
    hc_cql_bind_text(tables, 0, cs->uri.keyspace, strlen(cs->uri.keyspace));
    hc_cql_stmt_set_consistency(tables, HC_CQL_ONE); /* system_schema is local to each node */
    rc = hc_cql_execute(cs->session, tables, &rows, &e);
    if (rc != HC_CQL_OK) {
        err = cass_err(rc, &e, "identity", errstr, errstr_size);
        goto out;
    }
    for (size_t r = 0; r < hc_cql_rows_count(rows); r++) {
        const uint8_t *name;
        size_t len;
        uint8_t u[16];
        char *dst;

        if (hc_cql_rows_bytes(rows, r, 0, &name, &len) != HC_CQL_OK ||
            hc_cql_rows_uuid(rows, r, 1, u) != HC_CQL_OK) {
            continue;
        }
        if (len == 15 && memcmp(name, "hotcount_counts", 15) == 0) {
            dst = counts_id;
        } else if (len == 15 && memcmp(name, "hotcount_claims", 15) == 0) {
            dst = claims_id;
        } else {
            continue;
        }
        for (size_t i = 0; i < 16; i++) {
            snprintf(dst + 2 * i, 3, "%02x", u[i]);
        }
    }
    snprintf(id_out, id_size, "%s/%s/%s", inc, counts_id, claims_id);
    err = HC_OK;
out:
    hc_cql_rows_free(rows);
    hc_cql_stmt_free(meta);
    hc_cql_stmt_free(tables);
    return err;
}
