/* The SQLite backend's reads: offsets, get, and top and foreach in WAL snapshots. */
#include "sqlite_impl.h"

/* Reads one partition's stored next_offset inside the caller's transaction. */
hc_err_t sqlite_offset_get(sqlite_store_t *sst, const char *group, const char *topic,
                           int32_t partition, int64_t *offset_out, char *errstr, size_t errstr_size)
{
    sqlite3_stmt *stmt = sst->stmt[STMT_OFFSET_GET];
    hc_err_t err = HC_OK;
    int rc;

    sqlite3_bind_text(stmt, 1, group, -1, SQLITE_STATIC);
    sqlite3_bind_text(stmt, 2, topic, -1, SQLITE_STATIC);
    sqlite3_bind_int(stmt, 3, partition);
    rc = sqlite3_step(stmt);
    if (rc == SQLITE_ROW) {
        *offset_out = sqlite3_column_int64(stmt, 0);
    } else if (rc == SQLITE_DONE) {
        *offset_out = HC_OFFSET_NONE;
    } else {
        err = sqlite_sql_fail(sst, rc, "reading an offset", errstr, errstr_size);
    }
    sqlite_stmt_done(stmt);
    return err;
}

hc_err_t sqlite_read_offsets(hc_store_t *st, const char *group, const char *topic,
                             const int32_t *partitions, size_t count, int64_t *offsets_out,
                             char *errstr, size_t errstr_size)
{
    sqlite_store_t *sst = sqlite_store(st);
    hc_err_t err;
    size_t i;

    err = sqlite_ensure_prepared(sst, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    /* One snapshot for all partitions: a batch committing meanwhile shows up whole or not at
     * all. */
    err = sqlite_stmt_exec(sst, STMT_BEGIN_READ, "begin", errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    for (i = 0; i < count; i++) {
        err = sqlite_offset_get(sst, group, topic, partitions[i], &offsets_out[i], errstr,
                                errstr_size);
        if (err != HC_OK) {
            goto fail_rollback;
        }
    }
    err = sqlite_stmt_exec(sst, STMT_COMMIT, "commit", errstr, errstr_size);
    if (err != HC_OK) {
        goto fail_rollback;
    }
    return HC_OK;

fail_rollback:
    return sqlite_rollback(sst, err, errstr, errstr_size);
}

hc_err_t sqlite_get(hc_store_t *st, const char *const *post_ids, const size_t *post_id_lens,
                    size_t count, int64_t *likes_out, char *errstr, size_t errstr_size)
{
    sqlite_store_t *sst = sqlite_store(st);
    sqlite3_stmt *stmt;
    hc_err_t err;
    size_t i;
    int rc;

    err = sqlite_ensure_prepared(sst, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    /* One snapshot, so that the counts printed together were true together. */
    err = sqlite_stmt_exec(sst, STMT_BEGIN_READ, "begin", errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    stmt = sst->stmt[STMT_COUNT_GET];
    for (i = 0; i < count; i++) {
        /* An id longer than any stored one simply is not found: 0, like any unknown post. */
        sqlite3_bind_text(stmt, 1, post_ids[i],
                          post_id_lens[i] > HC_POST_ID_MAX + 1 ? HC_POST_ID_MAX + 1
                                                               : (int)post_id_lens[i],
                          SQLITE_STATIC);
        rc = sqlite3_step(stmt);
        if (rc == SQLITE_ROW) {
            likes_out[i] = sqlite3_column_int64(stmt, 0);
        } else if (rc == SQLITE_DONE) {
            likes_out[i] = 0;
        } else {
            err = sqlite_sql_fail(sst, rc, "reading a count", errstr, errstr_size);
            sqlite_stmt_done(stmt);
            goto fail_rollback;
        }
        sqlite_stmt_done(stmt);
    }
    err = sqlite_stmt_exec(sst, STMT_COMMIT, "commit", errstr, errstr_size);
    if (err != HC_OK) {
        goto fail_rollback;
    }
    return HC_OK;

fail_rollback:
    return sqlite_rollback(sst, err, errstr, errstr_size);
}

/* Column 0 of a counts row as post id bytes. Only ids that hc_store_apply could have written
 * (1..HC_POST_ID_MAX bytes) fit an hc_store_row_t; anything else was written behind our back. */
static hc_err_t row_post_id(sqlite_store_t *sst, sqlite3_stmt *stmt, const char **id_out,
                            size_t *len_out, char *errstr, size_t errstr_size)
{
    const unsigned char *id = sqlite3_column_text(stmt, 0);
    int len = sqlite3_column_bytes(stmt, 0);

    if (id == NULL) {
        if (sqlite3_errcode(sst->db) == SQLITE_NOMEM) {
            hc_errstr_set(errstr, errstr_size, "sqlite store: out of memory");
        } else {
            hc_errstr_set(errstr, errstr_size, "sqlite store: hotcount_counts has a NULL post_id");
        }
        return HC_ERR_FATAL;
    }
    if (len <= 0 || len > HC_POST_ID_MAX) {
        hc_errstr_set(errstr, errstr_size,
                      "sqlite store: hotcount_counts has a post_id of %d bytes (allowed 1..%d)",
                      len, HC_POST_ID_MAX);
        return HC_ERR_FATAL;
    }
    *id_out = (const char *)id;
    *len_out = (size_t)len;
    return HC_OK;
}

hc_err_t sqlite_top(hc_store_t *st, size_t n, hc_store_row_t *rows_out, size_t *count_out,
                    char *errstr, size_t errstr_size)
{
    sqlite_store_t *sst = sqlite_store(st);
    sqlite3_stmt *stmt;
    const char *id;
    size_t id_len;
    size_t count = 0;
    hc_err_t err;
    int rc = SQLITE_DONE;

    err = sqlite_ensure_prepared(sst, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    stmt = sst->stmt[STMT_COUNT_TOP];
    sqlite3_bind_int64(stmt, 1, n > (size_t)INT64_MAX ? INT64_MAX : (sqlite3_int64)n);
    while (count < n && (rc = sqlite3_step(stmt)) == SQLITE_ROW) {
        err = row_post_id(sst, stmt, &id, &id_len, errstr, errstr_size);
        if (err != HC_OK) {
            goto out_reset;
        }
        memcpy(rows_out[count].post_id, id, id_len);
        rows_out[count].post_id[id_len] = '\0';
        rows_out[count].post_id_len = id_len;
        rows_out[count].likes = sqlite3_column_int64(stmt, 1);
        count++;
    }
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
        err = sqlite_sql_fail(sst, rc, "reading the top counts", errstr, errstr_size);
        goto out_reset;
    }
    *count_out = count;

out_reset:
    sqlite_stmt_done(stmt);
    return err;
}

hc_err_t sqlite_foreach(hc_store_t *st, hc_store_row_fn fn, void *opaque, char *errstr,
                        size_t errstr_size)
{
    sqlite_store_t *sst = sqlite_store(st);
    sqlite3_stmt *stmt;
    const char *id;
    size_t id_len;
    hc_err_t err;
    int rc;

    err = sqlite_ensure_prepared(sst, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    /* One statement is one snapshot: fn sees the counts as of one commit, and stage 2 keeps
     * committing meanwhile (WAL readers do not block the writer). */
    stmt = sst->stmt[STMT_COUNT_ALL];
    while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
        err = row_post_id(sst, stmt, &id, &id_len, errstr, errstr_size);
        if (err != HC_OK) {
            goto out_reset;
        }
        if (!fn(id, id_len, sqlite3_column_int64(stmt, 1), opaque)) {
            rc = SQLITE_DONE;
            break;
        }
    }
    if (rc != SQLITE_DONE) {
        err = sqlite_sql_fail(sst, rc, "reading the counts", errstr, errstr_size);
    }

out_reset:
    sqlite_stmt_done(stmt);
    return err;
}
