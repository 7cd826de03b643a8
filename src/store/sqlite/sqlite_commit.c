/* The SQLite backend's apply: one BEGIN IMMEDIATE transaction, the offsets' compare-and-set
 * first, then every delta, then the offsets (sqlite.c's file comment). */
#include "sqlite_impl.h"

static void format_offset(char *buf, size_t buf_size, int64_t offset)
{
    if (offset == HC_OFFSET_NONE) {
        snprintf(buf, buf_size, "none");
    } else {
        snprintf(buf, buf_size, "%lld", (long long)offset);
    }
}

hc_err_t sqlite_apply(hc_store_t *st, const hc_store_batch_t *batch, char *errstr,
                      size_t errstr_size)
{
    sqlite_store_t *sst = sqlite_store(st);
    const hc_store_offset_t *off;
    const hc_store_delta_t *d;
    sqlite3_stmt *stmt;
    char stored_buf[24];
    char expected_buf[24];
    int64_t stored;
    hc_err_t err;
    size_t i;
    int rc;

    err = sqlite_ensure_prepared(sst, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    /* IMMEDIATE takes the write lock now, before the offsets are read: the compare-and-set
     * below then reads the latest commit and no other handle can commit until we are done. A
     * deferred BEGIN would read an older snapshot and fail later with SQLITE_BUSY_SNAPSHOT. */
    err = sqlite_stmt_exec(sst, STMT_BEGIN_WRITE, "begin", errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }

    /* Every check before the first write, so a lost race has nothing to undo but the lock. */
    for (i = 0; i < batch->offset_count; i++) {
        off = &batch->offsets[i];
        err = sqlite_offset_get(sst, batch->group, batch->topic, off->partition, &stored, errstr,
                                errstr_size);
        if (err != HC_OK) {
            goto fail_rollback;
        }
        if (stored != off->expected) {
            format_offset(stored_buf, sizeof(stored_buf), stored);
            format_offset(expected_buf, sizeof(expected_buf), off->expected);
            hc_errstr_set(errstr, errstr_size,
                          "sqlite store: offset conflict on %s/%d (group %s): stored "
                          "next_offset %s, batch expected %s",
                          batch->topic, (int)off->partition, batch->group, stored_buf,
                          expected_buf);
            err = HC_ERR_CONFLICT;
            goto fail_rollback;
        }
    }

    stmt = sst->stmt[STMT_COUNT_ADD];
    for (i = 0; i < batch->delta_count; i++) {
        d = &batch->deltas[i];
        sqlite3_bind_text(stmt, 1, d->post_id, (int)d->post_id_len, SQLITE_STATIC);
        sqlite3_bind_int64(stmt, 2, d->delta);
        sqlite3_bind_int64(stmt, 3, batch->now_ms);
        /* one row back (the new total), then done */
        rc = sqlite3_step(stmt);
        if (rc == SQLITE_ROW) {
            /* SQLite turns an integer sum that leaves int64 into a REAL: the count would lose
             * its exactness and every later delta with it, so the batch is refused instead. */
            if (sqlite3_column_type(stmt, 0) != SQLITE_INTEGER) {
                sqlite_stmt_done(stmt);
                hc_errstr_set(errstr, errstr_size,
                              "sqlite store: delta %zu (%lld) would take the count of post "
                              "\"%.*s\" past int64; nothing was written",
                              i, (long long)d->delta,
                              d->post_id_len > 300 ? 300 : (int)d->post_id_len, d->post_id);
                if (batch->refused_out) {
                    *batch->refused_out = i;
                }
                err = HC_ERR_RECORD;
                goto fail_rollback;
            }
            if (batch->totals_out) {
                batch->totals_out[i] = sqlite3_column_int64(stmt, 0);
            }
            rc = sqlite3_step(stmt);
        }
        sqlite_stmt_done(stmt);
        if (rc != SQLITE_DONE) {
            err = sqlite_sql_fail(sst, rc, "adding a delta", errstr, errstr_size);
            goto fail_rollback;
        }
    }

    stmt = sst->stmt[STMT_OFFSET_PUT];
    for (i = 0; i < batch->offset_count; i++) {
        off = &batch->offsets[i];
        sqlite3_bind_text(stmt, 1, batch->group, -1, SQLITE_STATIC);
        sqlite3_bind_text(stmt, 2, batch->topic, -1, SQLITE_STATIC);
        sqlite3_bind_int(stmt, 3, off->partition);
        sqlite3_bind_int64(stmt, 4, off->next);
        err = sqlite_stmt_exec(sst, STMT_OFFSET_PUT, "moving an offset", errstr, errstr_size);
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
