/* The PostgreSQL backend's reads: offsets, get in chunks, top, and foreach through a cursor. */
#include "pgsql_impl.h"

/* Binary result values, checked: a table laid out differently (someone else's) must fail
 * loudly, not be read as garbage. */
bool pgsql_value_i64(const PGresult *res, int row, int col, int64_t *out)
{
    if (PQgetisnull(res, row, col) || PQgetlength(res, row, col) != 8) {
        return false;
    }
    *out = (int64_t)pgsql_get_be64((const unsigned char *)PQgetvalue(res, row, col));
    return true;
}

bool pgsql_value_i32(const PGresult *res, int row, int col, int32_t *out)
{
    if (PQgetisnull(res, row, col) || PQgetlength(res, row, col) != 4) {
        return false;
    }
    *out = (int32_t)pgsql_get_be32((const unsigned char *)PQgetvalue(res, row, col));
    return true;
}

static bool value_post_id(const PGresult *res, int row, int col, const char **id, size_t *len)
{
    int n = PQgetlength(res, row, col);

    if (PQgetisnull(res, row, col) || n <= 0 || n > HC_POST_ID_MAX) {
        return false;
    }
    *id = PQgetvalue(res, row, col);
    *len = (size_t)n;
    return true;
}

hc_err_t pgsql_layout_fail(const char *what, char *errstr, size_t errstr_size)
{
    hc_errstr_set(errstr, errstr_size,
                  "postgresql store: %s: unexpected row (a NULL, a post_id outside 1..%d bytes or "
                  "a column of another type: is the table hotcount's?)",
                  what, HC_POST_ID_MAX);
    return HC_ERR_FATAL;
}

/* next_offset of each of partitions[0..count) into offsets_out, HC_OFFSET_NONE where no row
 * exists; inside the caller's transaction, if any. */
hc_err_t pgsql_offsets_query(pgsql_store_t *pst, const char *group, const char *topic,
                             const int32_t *partitions, size_t count, int64_t *offsets_out,
                             char *errstr, size_t errstr_size)
{
    const char *values[3];
    int lengths[3];
    unsigned char *p;
    PGresult *res;
    int64_t next;
    int32_t partition;
    hc_err_t err;
    size_t i;
    int row;

    if (count > INT32_MAX / 8) {
        return pgsql_out_of_memory(errstr, errstr_size);
    }
    p = pgsql_array_start(&pst->param[0], ARRAY_HEADER + 8 * count, OID_INT4, count);
    if (p == NULL) {
        return pgsql_out_of_memory(errstr, errstr_size);
    }
    for (i = 0; i < count; i++, p += 8) {
        pgsql_put_be32(p, 4);
        pgsql_put_be32(p + 4, (uint32_t)partitions[i]);
    }
    values[0] = group;
    lengths[0] = (int)strlen(group);
    values[1] = topic;
    lengths[1] = (int)strlen(topic);
    values[2] = pst->param[0].data;
    lengths[2] = (int)(ARRAY_HEADER + 8 * count);
    err = pgsql_run_prepared(pst, STMT_OFFSETS_READ, values, lengths, PGRES_TUPLES_OK, &res, errstr,
                             errstr_size);
    if (err != HC_OK) {
        return err;
    }
    for (i = 0; i < count; i++) {
        offsets_out[i] = HC_OFFSET_NONE;
    }
    /* One row per partition that has one; a handful of partitions, so a nested scan is fine. */
    for (row = 0; row < PQntuples(res); row++) {
        if (!pgsql_value_i32(res, row, 0, &partition) || !pgsql_value_i64(res, row, 1, &next)) {
            err = pgsql_layout_fail(pgsql_stmt_defs[STMT_OFFSETS_READ].what, errstr, errstr_size);
            break;
        }
        for (i = 0; i < count; i++) {
            if (partitions[i] == partition) {
                offsets_out[i] = next;
            }
        }
    }
    PQclear(res);
    return err;
}

hc_err_t pgsql_read_offsets(hc_store_t *st, const char *group, const char *topic,
                            const int32_t *partitions, size_t count, int64_t *offsets_out,
                            char *errstr, size_t errstr_size)
{
    pgsql_store_t *pst = pgsql_store(st);
    hc_err_t err;

    err = pgsql_ensure_ready(pst, true, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    /* One statement is one snapshot: a batch committing meanwhile shows up whole or not at
     * all. */
    return pgsql_offsets_query(pst, group, topic, partitions, count, offsets_out, errstr,
                               errstr_size);
}

/* How many bytes of a looked-up id to send: all of them, or none (the empty id) for an id that
 * cannot have been stored. */
static size_t lookup_len(const char *post_id, size_t len)
{
    if (len == 0 || len > HC_POST_ID_MAX ||
        !pgsql_is_storable((const unsigned char *)post_id, len)) {
        return 0;
    }
    return len;
}

/* Looks up ids [first, end) in one statement. An id that cannot have been stored (empty, too
 * long, not UTF-8) goes as "", which matches no row, so that the array's positions stay the
 * caller's. */
static hc_err_t get_chunk(pgsql_store_t *pst, const char *const *post_ids,
                          const size_t *post_id_lens, size_t first, size_t end, int64_t *likes_out,
                          char *errstr, size_t errstr_size)
{
    const char *values[1];
    int lengths[1];
    unsigned char *p;
    size_t size = ARRAY_HEADER;
    size_t count = end - first;
    size_t len;
    size_t i;
    PGresult *res;
    int64_t pos;
    int64_t likes;
    hc_err_t err;
    int row;

    for (i = first; i < end; i++) {
        size += 4 + lookup_len(post_ids[i], post_id_lens[i]);
    }
    p = pgsql_array_start(&pst->param[0], size, OID_TEXT, count);
    if (p == NULL) {
        return pgsql_out_of_memory(errstr, errstr_size);
    }
    for (i = first; i < end; i++) {
        len = lookup_len(post_ids[i], post_id_lens[i]);
        pgsql_put_be32(p, (uint32_t)len);
        memcpy(p + 4, post_ids[i], len);
        p += 4 + len;
    }
    values[0] = pst->param[0].data;
    lengths[0] = (int)size;
    err = pgsql_run_prepared(pst, STMT_COUNTS_GET, values, lengths, PGRES_TUPLES_OK, &res, errstr,
                             errstr_size);
    if (err != HC_OK) {
        return err;
    }
    for (row = 0; row < PQntuples(res); row++) {
        /* WITH ORDINALITY counts from 1. */
        if (!pgsql_value_i64(res, row, 0, &pos) || pos < 1 || (uint64_t)pos > count ||
            !pgsql_value_i64(res, row, 1, &likes)) {
            err = pgsql_layout_fail(pgsql_stmt_defs[STMT_COUNTS_GET].what, errstr, errstr_size);
            break;
        }
        likes_out[first + (size_t)pos - 1] = likes;
    }
    PQclear(res);
    return err;
}

hc_err_t pgsql_get(hc_store_t *st, const char *const *post_ids, const size_t *post_id_lens,
                   size_t count, int64_t *likes_out, char *errstr, size_t errstr_size)
{
    pgsql_store_t *pst = pgsql_store(st);
    bool several = count > PGSQL_GET_CHUNK;
    size_t first;
    size_t end;
    size_t i;
    hc_err_t err;

    err = pgsql_ensure_ready(pst, true, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    for (i = 0; i < count; i++) {
        likes_out[i] = 0;
    }
    /* Several statements share one snapshot, so that counts printed together were true
     * together; one statement is a snapshot by itself. */
    if (several) {
        err = pgsql_run_cmd(pst, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", "begin", errstr,
                            errstr_size);
        if (err != HC_OK) {
            return err;
        }
    }
    for (first = 0; first < count; first = end) {
        end = count - first < PGSQL_GET_CHUNK ? count : first + PGSQL_GET_CHUNK;
        err = get_chunk(pst, post_ids, post_id_lens, first, end, likes_out, errstr, errstr_size);
        if (err != HC_OK) {
            goto fail_rollback;
        }
    }
    if (several) {
        err = pgsql_commit(pst, errstr, errstr_size);
        if (err != HC_OK) {
            goto fail_rollback;
        }
    }
    return HC_OK;

fail_rollback:
    return pgsql_rollback(pst, err);
}

hc_err_t pgsql_top(hc_store_t *st, size_t n, hc_store_row_t *rows_out, size_t *count_out,
                   char *errstr, size_t errstr_size)
{
    pgsql_store_t *pst = pgsql_store(st);
    const char *values[1];
    int lengths[1] = {8};
    unsigned char limit_be[8];
    const char *id;
    size_t id_len;
    PGresult *res;
    hc_err_t err;
    int64_t likes;
    int row;

    err = pgsql_ensure_ready(pst, true, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    pgsql_put_be64(limit_be, n > (size_t)INT64_MAX ? (uint64_t)INT64_MAX : (uint64_t)n);
    values[0] = (const char *)limit_be;
    err = pgsql_run_prepared(pst, STMT_COUNTS_TOP, values, lengths, PGRES_TUPLES_OK, &res, errstr,
                             errstr_size);
    if (err != HC_OK) {
        return err;
    }
    for (row = 0; row < PQntuples(res) && (size_t)row < n; row++) {
        if (!value_post_id(res, row, 0, &id, &id_len) || !pgsql_value_i64(res, row, 1, &likes)) {
            err = pgsql_layout_fail(pgsql_stmt_defs[STMT_COUNTS_TOP].what, errstr, errstr_size);
            break;
        }
        memcpy(rows_out[row].post_id, id, id_len);
        rows_out[row].post_id[id_len] = '\0';
        rows_out[row].post_id_len = id_len;
        rows_out[row].likes = likes;
    }
    if (err == HC_OK) {
        *count_out = (size_t)row;
    }
    PQclear(res);
    return err;
}

/* Hands one FETCH's rows to fn; *more is false once fn asked to stop or the cursor ran dry. */
static hc_err_t foreach_fetch(pgsql_store_t *pst, hc_store_row_fn fn, void *opaque, bool *more,
                              char *errstr, size_t errstr_size)
{
    const char *id;
    size_t id_len;
    PGresult *res;
    int64_t likes;
    hc_err_t err;
    int row;

    err = pgsql_run_sql(pst, "FETCH " STRINGIFY(PGSQL_FETCH_ROWS) " FROM hotcount_foreach",
                        "reading the counts", true, PGRES_TUPLES_OK, &res, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    *more = PQntuples(res) == PGSQL_FETCH_ROWS;
    for (row = 0; row < PQntuples(res); row++) {
        if (!value_post_id(res, row, 0, &id, &id_len) || !pgsql_value_i64(res, row, 1, &likes)) {
            err = pgsql_layout_fail("reading the counts", errstr, errstr_size);
            break;
        }
        if (!fn(id, id_len, likes, opaque)) {
            *more = false;
            break;
        }
    }
    PQclear(res);
    return err;
}

hc_err_t pgsql_foreach(hc_store_t *st, hc_store_row_fn fn, void *opaque, char *errstr,
                       size_t errstr_size)
{
    pgsql_store_t *pst = pgsql_store(st);
    bool more = true;
    hc_err_t err;

    err = pgsql_ensure_ready(pst, true, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    /* A cursor reads the table in slices: ten million rows never sit in memory at once, and
     * each FETCH is a statement of its own, so statement_timeout bounds a slice, not the whole
     * walk (a slow fn is the caller's business). The cursor reads the snapshot of its DECLARE
     * all the way through; stage 2 keeps committing meanwhile. */
    err = pgsql_run_cmd(pst, "BEGIN READ ONLY", "begin", errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    err = pgsql_run_cmd(pst,
                        "DECLARE hotcount_foreach NO SCROLL CURSOR FOR"
                        " SELECT post_id, likes FROM hotcount_counts",
                        "reading the counts", errstr, errstr_size);
    if (err != HC_OK) {
        goto fail_rollback;
    }
    while (more) {
        err = foreach_fetch(pst, fn, opaque, &more, errstr, errstr_size);
        if (err != HC_OK) {
            goto fail_rollback;
        }
    }
    err = pgsql_commit(pst, errstr, errstr_size); /* closes the cursor */
    if (err != HC_OK) {
        goto fail_rollback;
    }
    return HC_OK;

fail_rollback:
    return pgsql_rollback(pst, err);
}
