/* The PostgreSQL backend's apply: one transaction, the offsets' compare-and-set first, then the
 * deltas sorted and merged (store_util.h) and upserted PGSQL_APPLY_CHUNK posts a statement, as
 * binary arrays. */
#include "pgsql_impl.h"

#include <string.h>

#include "hotcount/utf8.h"

void pgsql_put_be32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

void pgsql_put_be64(unsigned char *p, uint64_t v)
{
    pgsql_put_be32(p, (uint32_t)(v >> 32));
    pgsql_put_be32(p + 4, (uint32_t)v);
}

uint32_t pgsql_get_be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

uint64_t pgsql_get_be64(const unsigned char *p)
{
    return (uint64_t)pgsql_get_be32(p) << 32 | pgsql_get_be32(p + 4);
}

/* Grows a scratch allocation to at least `need` bytes; kept for the next call, since stage 2
 * sends a batch of about the same size every second. */
static bool scratch_reserve(scratch_t *s, size_t need)
{
    void *data;

    if (need <= s->cap) {
        return true;
    }
    if (need / 2 < s->cap) {
        need = s->cap * 2;
    }
    data = realloc(s->data, need);
    if (data == NULL) {
        return false;
    }
    s->data = data;
    s->cap = need;
    return true;
}

/* Starts a one-dimensional binary array of n elements in s, as the server's array_recv reads
 * it: number of dimensions, has-nulls flag, element type, then the dimension's length and lower
 * bound; each element follows as a 4-byte length and its bytes. Returns where the first element
 * goes, or NULL when `size` (header included) is too large or memory ran out. */
unsigned char *pgsql_array_start(scratch_t *s, size_t size, Oid elem, size_t n)
{
    unsigned char *p;

    if (size > INT_MAX || n > INT32_MAX || !scratch_reserve(s, size)) {
        return NULL;
    }
    p = s->data;
    pgsql_put_be32(p, 1);
    pgsql_put_be32(p + 4, 0);
    pgsql_put_be32(p + 8, elem);
    pgsql_put_be32(p + 12, (uint32_t)n);
    pgsql_put_be32(p + 16, 1);
    return p + ARRAY_HEADER;
}

/* True when s[0..len) is text PostgreSQL takes in a UTF8 database: well-formed UTF-8 without
 * NUL, overlong forms, surrogates or code points past U+10FFFF. */
bool pgsql_is_storable(const unsigned char *s, size_t len)
{
    return memchr(s, 0, len) == NULL && hc_utf8_valid(s, len);
}

static void format_offset(char *buf, size_t buf_size, int64_t offset)
{
    if (offset == HC_OFFSET_NONE) {
        snprintf(buf, buf_size, "none");
    } else {
        snprintf(buf, buf_size, "%lld", (long long)offset);
    }
}

/* The compare-and-set lost on off->partition: says so with the offset stored now (read inside
 * the transaction, which READ COMMITTED lets see the winner's commit). */
static hc_err_t conflict(pgsql_store_t *pst, const hc_store_batch_t *batch,
                         const hc_store_offset_t *off, char *errstr, size_t errstr_size)
{
    char stored_buf[24] = "unknown";
    char expected_buf[24];
    int64_t stored;

    if (pgsql_offsets_query(pst, batch->group, batch->topic, &off->partition, 1, &stored, errstr,
                            errstr_size) == HC_OK) {
        format_offset(stored_buf, sizeof(stored_buf), stored);
    }
    format_offset(expected_buf, sizeof(expected_buf), off->expected);
    hc_errstr_set(errstr, errstr_size,
                  "postgresql store: offset conflict on %s/%d (group %s): stored next_offset %s, "
                  "batch expected %s",
                  batch->topic, (int)off->partition, batch->group, stored_buf, expected_buf);
    return HC_ERR_CONFLICT;
}

/* Runs the CAS (claim == false) or the claim statement for offs[0..count) and checks that every
 * partition came back in RETURNING. */
static hc_err_t offsets_move(pgsql_store_t *pst, const hc_store_batch_t *batch,
                             const hc_store_offset_t *offs, size_t count, bool claim, char *errstr,
                             size_t errstr_size)
{
    enum stmt_id id = claim ? STMT_OFFSETS_CLAIM : STMT_OFFSETS_CAS;
    const char *values[5];
    int lengths[5];
    unsigned char *part;
    unsigned char *next;
    unsigned char *expected = NULL;
    PGresult *res;
    int32_t partition;
    hc_err_t err;
    size_t i;
    int row;

    if (count > INT32_MAX / 12) {
        return pgsql_out_of_memory(errstr, errstr_size);
    }
    part = pgsql_array_start(&pst->param[0], ARRAY_HEADER + 8 * count, OID_INT4, count);
    next = pgsql_array_start(&pst->param[1], ARRAY_HEADER + 12 * count, OID_INT8, count);
    if (!claim) {
        expected = pgsql_array_start(&pst->param[2], ARRAY_HEADER + 12 * count, OID_INT8, count);
    }
    if (part == NULL || next == NULL || (!claim && expected == NULL)) {
        return pgsql_out_of_memory(errstr, errstr_size);
    }
    for (i = 0; i < count; i++) {
        pgsql_put_be32(part + 8 * i, 4);
        pgsql_put_be32(part + 8 * i + 4, (uint32_t)offs[i].partition);
        pgsql_put_be32(next + 12 * i, 8);
        pgsql_put_be64(next + 12 * i + 4, (uint64_t)offs[i].next);
        if (!claim) {
            pgsql_put_be32(expected + 12 * i, 8);
            pgsql_put_be64(expected + 12 * i + 4, (uint64_t)offs[i].expected);
        }
    }
    values[0] = batch->group;
    lengths[0] = (int)strlen(batch->group);
    values[1] = batch->topic;
    lengths[1] = (int)strlen(batch->topic);
    values[2] = pst->param[0].data;
    lengths[2] = (int)(ARRAY_HEADER + 8 * count);
    /* The CAS takes (partitions, expected, next), the claim (partitions, next). */
    if (claim) {
        values[3] = pst->param[1].data;
        lengths[3] = (int)(ARRAY_HEADER + 12 * count);
    } else {
        values[3] = pst->param[2].data;
        lengths[3] = (int)(ARRAY_HEADER + 12 * count);
        values[4] = pst->param[1].data;
        lengths[4] = (int)(ARRAY_HEADER + 12 * count);
    }
    err = pgsql_run_prepared(pst, id, values, lengths, PGRES_TUPLES_OK, &res, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    if ((size_t)PQntuples(res) != count) {
        /* Name the first partition that did not move. */
        for (i = 0; i < count; i++) {
            for (row = 0; row < PQntuples(res); row++) {
                if (pgsql_value_i32(res, row, 0, &partition) && partition == offs[i].partition) {
                    break;
                }
            }
            if (row == PQntuples(res)) {
                break;
            }
        }
        err = conflict(pst, batch, &offs[i < count ? i : 0], errstr, errstr_size);
    }
    PQclear(res);
    return err;
}

/* Adds d[0..count) in one statement. */

/* Adds d[0..count) (sorted by hc_store_delta_cmp, each id once) and sets totals[k] to d[k]'s new
 * total. HC_ERR_RECORD, *refused the first delta whose sum would leave bigint (the statement left
 * its row alone: see STMT_COUNTS_ADD); the caller rolls back. */
static hc_err_t counts_add(pgsql_store_t *pst, const hc_store_delta_t *d, size_t count,
                           int64_t updated_ms, int64_t *totals, const hc_store_delta_t **refused,
                           char *errstr, size_t errstr_size)
{
    const char *values[3];
    int lengths[3];
    unsigned char now_be[8];
    unsigned char *ids;
    unsigned char *likes;
    size_t ids_size = ARRAY_HEADER;
    PGresult *res;
    hc_err_t err;
    size_t i;

    for (i = 0; i < count; i++) {
        ids_size += 4 + d[i].post_id_len;
    }
    ids = pgsql_array_start(&pst->param[0], ids_size, OID_TEXT, count);
    likes = pgsql_array_start(&pst->param[1], ARRAY_HEADER + 12 * count, OID_INT8, count);
    if (ids == NULL || likes == NULL) {
        return pgsql_out_of_memory(errstr, errstr_size);
    }
    for (i = 0; i < count; i++) {
        /* The binary form of text is its bytes: nothing to quote or escape. */
        pgsql_put_be32(ids, (uint32_t)d[i].post_id_len);
        memcpy(ids + 4, d[i].post_id, d[i].post_id_len);
        ids += 4 + d[i].post_id_len;
        pgsql_put_be32(likes, 8);
        pgsql_put_be64(likes + 4, (uint64_t)d[i].delta);
        likes += 12;
    }
    pgsql_put_be64(now_be, (uint64_t)updated_ms);
    values[0] = pst->param[0].data;
    lengths[0] = (int)ids_size;
    values[1] = pst->param[1].data;
    lengths[1] = (int)(ARRAY_HEADER + 12 * count);
    values[2] = (const char *)now_be;
    lengths[2] = 8;
    err = pgsql_run_prepared(pst, STMT_COUNTS_ADD, values, lengths, PGRES_TUPLES_OK, &res, errstr,
                             errstr_size);
    if (err != HC_OK) {
        return err;
    }
    /* Every post is inserted or updated exactly once but those whose sum would overflow; more
     * rows means the statement is not doing what this file says it does. */
    if ((size_t)PQntuples(res) > count) {
        hc_errstr_set(errstr, errstr_size, "postgresql store: adding deltas: %d rows for %zu posts",
                      PQntuples(res), count);
        err = HC_ERR_FATAL;
    }
    /* RETURNING's row order is not promised: each row finds its delta by id. Any int64 can be
     * a total, so a missing row is found with flags, allocated only when rows are missing. */
    bool *seen = NULL;
    if (err == HC_OK && (size_t)PQntuples(res) < count) {
        seen = calloc(count, sizeof(*seen));
        if (seen == NULL) {
            err = pgsql_out_of_memory(errstr, errstr_size);
        }
    }
    for (int row = 0; err == HC_OK && row < PQntuples(res); row++) {
        hc_store_delta_t key = {PQgetvalue(res, row, 0), (size_t)PQgetlength(res, row, 0), 0};
        const hc_store_delta_t *at = bsearch(&key, d, count, sizeof(*d), hc_store_delta_cmp);
        if (PQgetisnull(res, row, 0) || at == NULL ||
            !pgsql_value_i64(res, row, 1, &totals[at - d])) {
            err = pgsql_layout_fail(pgsql_stmt_defs[STMT_COUNTS_ADD].what, errstr, errstr_size);
        } else if (seen != NULL) {
            seen[at - d] = true;
        }
    }
    for (size_t k = 0; err == HC_OK && seen != NULL && k < count; k++) {
        if (!seen[k]) {
            *refused = &d[k];
            hc_errstr_set(errstr, errstr_size,
                          "postgresql store: delta %lld would take the count of post \"%.*s\" "
                          "past bigint; nothing was written",
                          (long long)d[k].delta,
                          d[k].post_id_len > 300 ? 300 : (int)d[k].post_id_len, d[k].post_id);
            err = HC_ERR_RECORD;
        }
    }
    free(seen);
    PQclear(res);
    return err;
}

/* On HC_ERR_RECORD: the index in the batch of the post with id (the first delta of it). */
static void refuse(const hc_store_batch_t *batch, const hc_store_delta_t *bad)
{
    for (size_t i = 0; batch->refused_out != NULL && i < batch->delta_count; i++) {
        if (batch->deltas[i].post_id_len == bad->post_id_len &&
            memcmp(batch->deltas[i].post_id, bad->post_id, bad->post_id_len) == 0) {
            *batch->refused_out = i;
            return;
        }
    }
}

/* Copies the batch's deltas into pst->deltas sorted by id, a repeated id summed into one. */
static hc_err_t sort_deltas(pgsql_store_t *pst, const hc_store_batch_t *batch, size_t *count_out,
                            char *errstr, size_t errstr_size)
{
    hc_store_delta_t *d;
    size_t bad;

    *count_out = 0;
    if (batch->delta_count == 0) {
        return HC_OK;
    }
    if (batch->delta_count > SIZE_MAX / sizeof(*d) ||
        !scratch_reserve(&pst->deltas, batch->delta_count * sizeof(*d))) {
        return pgsql_out_of_memory(errstr, errstr_size);
    }
    d = pst->deltas.data;
    memcpy(d, batch->deltas, batch->delta_count * sizeof(*d));
    if (!hc_store_deltas_merge(d, batch->delta_count, count_out, &bad)) {
        hc_errstr_set(errstr, errstr_size,
                      "postgresql store: the deltas of a post listed twice overflow");
        refuse(batch, &d[bad]);
        return HC_ERR_RECORD;
    }
    return HC_OK;
}

/* Copies the batch's offsets into pst->offsets: those with an expected offset first, then the
 * HC_OFFSET_NONE ones, each run sorted by partition. */
static hc_err_t sort_offsets(pgsql_store_t *pst, const hc_store_batch_t *batch, size_t *cas_out,
                             char *errstr, size_t errstr_size)
{
    hc_store_offset_t *offs;
    size_t cas = 0;
    size_t c = 0;
    size_t k;
    size_t i;

    *cas_out = 0;
    if (batch->offset_count == 0) {
        return HC_OK;
    }
    if (batch->offset_count > SIZE_MAX / sizeof(*offs) ||
        !scratch_reserve(&pst->offsets, batch->offset_count * sizeof(*offs))) {
        return pgsql_out_of_memory(errstr, errstr_size);
    }
    offs = pst->offsets.data;
    for (i = 0; i < batch->offset_count; i++) {
        if (batch->offsets[i].expected != HC_OFFSET_NONE) {
            cas++;
        }
    }
    k = cas;
    for (i = 0; i < batch->offset_count; i++) {
        if (batch->offsets[i].expected != HC_OFFSET_NONE) {
            offs[c++] = batch->offsets[i];
        } else {
            offs[k++] = batch->offsets[i];
        }
    }
    qsort(offs, cas, sizeof(*offs), hc_store_offset_cmp);
    qsort(offs + cas, batch->offset_count - cas, sizeof(*offs), hc_store_offset_cmp);
    *cas_out = cas;
    return HC_OK;
}

hc_err_t pgsql_commit(pgsql_store_t *pst, char *errstr, size_t errstr_size)
{
    PGresult *res;
    hc_err_t err;

    err =
        pgsql_run_sql(pst, "COMMIT", "commit", false, PGRES_COMMAND_OK, &res, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    /* COMMIT of a failed transaction "succeeds" as ROLLBACK. */
    if (strcmp(PQcmdStatus(res), "COMMIT") != 0) {
        hc_errstr_set(errstr, errstr_size, "postgresql store: commit: the server answered %s",
                      PQcmdStatus(res));
        err = HC_ERR_FATAL;
    }
    PQclear(res);
    return err;
}

hc_err_t pgsql_apply_batch(hc_store_t *st, const hc_store_batch_t *batch, char *errstr,
                           size_t errstr_size)
{
    pgsql_store_t *pst = pgsql_store(st);
    const hc_store_offset_t *offs;
    const hc_store_delta_t *d;
    int64_t *totals;
    size_t n_deltas;
    size_t n_cas;
    size_t i;
    hc_err_t err;

    /* The server would refuse these mid-transaction with an error that names no post; say
     * which delta, before touching anything. A record class, not a broken store: the id came
     * from likes.partials, and no text column can hold it (storing ids as bytea instead would
     * break `SELECT likes ... WHERE post_id = 'x'`, the layout's plain text key). */
    for (i = 0; i < batch->delta_count; i++) {
        d = &batch->deltas[i];
        if (!pgsql_is_storable((const unsigned char *)d->post_id, d->post_id_len)) {
            hc_errstr_set(errstr, errstr_size,
                          "postgresql store: delta %zu: post_id is not valid UTF-8 or holds a "
                          "NUL byte; nothing was written",
                          i);
            if (batch->refused_out != NULL) {
                *batch->refused_out = i;
            }
            return HC_ERR_RECORD;
        }
    }
    err = sort_deltas(pst, batch, &n_deltas, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    err = sort_offsets(pst, batch, &n_cas, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    err = pgsql_ensure_ready(pst, true, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    /* Explicit, in case the role's default_transaction_isolation is stricter: the CAS relies on
     * READ COMMITTED's re-check of the WHERE clause (see the file comment). */
    err = pgsql_run_cmd(pst, "BEGIN ISOLATION LEVEL READ COMMITTED", "begin", errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    /* Every check before the first delta, so a lost race has only the offsets to undo. */
    offs = pst->offsets.data;
    if (n_cas > 0) {
        err = offsets_move(pst, batch, offs, n_cas, false, errstr, errstr_size);
        if (err != HC_OK) {
            goto fail_rollback;
        }
    }
    if (batch->offset_count > n_cas) {
        err = offsets_move(pst, batch, offs + n_cas, batch->offset_count - n_cas, true, errstr,
                           errstr_size);
        if (err != HC_OK) {
            goto fail_rollback;
        }
    }
    d = pst->deltas.data;
    if (n_deltas > 0 && !scratch_reserve(&pst->totals, n_deltas * sizeof(int64_t))) {
        err = pgsql_out_of_memory(errstr, errstr_size);
        goto fail_rollback;
    }
    totals = pst->totals.data;
    for (i = 0; i < n_deltas; i += PGSQL_APPLY_CHUNK) {
        const hc_store_delta_t *refused = NULL;
        err = counts_add(pst, d + i,
                         n_deltas - i < PGSQL_APPLY_CHUNK ? n_deltas - i : PGSQL_APPLY_CHUNK,
                         batch->now_ms, totals + i, &refused, errstr, errstr_size);
        if (err == HC_ERR_RECORD) {
            refuse(batch, refused);
        }
        if (err != HC_OK) {
            goto fail_rollback;
        }
        if (batch->on_progress != NULL) {
            batch->on_progress(batch->progress_opaque); /* a chunk's upsert got through */
        }
    }
    err = pgsql_commit(pst, errstr, errstr_size);
    if (err != HC_OK) {
        goto fail_rollback;
    }
    /* Back in the caller's order; a post listed twice was merged into one sorted entry. */
    for (i = 0; batch->totals_out != NULL && i < batch->delta_count; i++) {
        const hc_store_delta_t *at =
            bsearch(&batch->deltas[i], d, n_deltas, sizeof(*d), hc_store_delta_cmp);
        assert(at != NULL); /* d holds every id of the batch */
        batch->totals_out[i] = totals[at - d];
    }
    return HC_OK;

fail_rollback:
    return pgsql_rollback(pst, err);
}
