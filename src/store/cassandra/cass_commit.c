/* The Cassandra store's apply and the recovery of open claims (docs/CASSANDRA.md, "One apply"
 * and "Recovery of an open claim"): R0 claims read, R1 base reads, R2 staging, R3 the claim (the
 * batch's one LWT), R4 absolute counts at the batch's timestamp T, R5 done rows. The claims
 * read and the recovery: cass_recover.c; the requests: cass_exec.c.
 *
 * What is not done yet (src/store/cassandra/README.md): the guard against a change of
 * topic.partials.partitions with a backlog; a batch without offsets (tools and tests only: stage
 * 2's batches always carry offsets) has no claim, so a crash in its R4 leaves some of its posts
 * written and others not. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "cassandra_impl.h"

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
    size_t g = cass_group_size(cs);
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
                cass_free_stmts(stmts, i);
                err = HC_ERR_FATAL;
                hc_errstr_set(errstr, errstr_size, "cassandra store: out of memory");
                goto out;
            }
            hc_cql_bind_text(stmts[i], 0, d->post_id, d->post_id_len);
        }
        cass_before(cs, HC_CASS_R1_BASES);
        /* a refusal is not repeated (nothing is committed yet: stage 2's back-off retries the
         * batch), a timeout is, within CASS_REPEAT_MS (a process resumed from SIGSTOP sees its
         * first requests time out at once) */
        rc = cass_run_many(cs, stmts, m, rows, CASS_REPEAT_UNKNOWN, deadline_ms, &e);
        cass_free_stmts(stmts, m);
        if (rc != HC_CQL_OK) {
            cass_free_rows(rows, m);
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
        cass_free_rows(rows, m);
        if (err == HC_OK && cass_stopped(cs, HC_CASS_R1_BASES, k, errstr, errstr_size)) {
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
            cass_put_be64(p + at + 1, (uint64_t)b->now_ms);
            at += 9;
            part_len = 9;
        }
        p[at] = (uint8_t)(b->deltas[i].post_id_len >> 8);
        p[at + 1] = (uint8_t)(b->deltas[i].post_id_len & 0xff);
        memcpy(p + at + 2, b->deltas[i].post_id, b->deltas[i].post_id_len);
        cass_put_be64(p + at + 2 + b->deltas[i].post_id_len, (uint64_t)next[i]);
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
    size_t g = cass_group_size(cs);
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
                cass_free_stmts(stmts, i);
                free(stmts);
                hc_errstr_set(errstr, errstr_size, "cassandra store: out of memory");
                return HC_ERR_FATAL;
            }
            hc_cql_bind_uuid(stmts[i], 0, id);
            hc_cql_bind_int32(stmts[i], 1, (int32_t)(at + i));
            hc_cql_bind_blob(stmts[i], 2, buf + start[at + i], start[at + i + 1] - start[at + i]);
            hc_cql_stmt_set_idempotent(stmts[i], 1);
        }
        cass_before(cs, HC_CASS_R2_STAGING);
        rc = cass_run_many(cs, stmts, m, NULL, CASS_REPEAT_UNKNOWN, deadline_ms, &e);
        cass_free_stmts(stmts, m);
        if (rc != HC_CQL_OK) {
            err = cass_err(rc, &e, "staging", errstr, errstr_size);
        } else if (cass_stopped(cs, HC_CASS_R2_STAGING, k, errstr, errstr_size)) {
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
    hc_err_t err = cass_read_claims(cs, b->group, b->topic, &c, &n, errstr, errstr_size);

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
    cass_count_write_t *w = NULL;
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
            cass_before(cs, HC_CASS_R0_CLAIMS);
            err = learn(cs, b, errstr, errstr_size);
            if (err != HC_OK) {
                return err;
            }
            if (cass_stopped(cs, HC_CASS_R0_CLAIMS, &k, errstr, errstr_size)) {
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
        w[i] = (cass_count_write_t){
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
        cass_before(cs, HC_CASS_R3_CLAIM);
        err = claim(cs, b, id, ts, parts, errstr, errstr_size);
        if (err != HC_OK) {
            cass_known_clear(cs);
            goto out;
        }
        if (cass_stopped(cs, HC_CASS_R3_CLAIM, &k, errstr, errstr_size)) {
            cass_known_clear(cs);
            err = HC_ERR_TRANSIENT;
            goto out;
        }
        if (b->on_progress != NULL) {
            b->on_progress(b->progress_opaque);
        }
    }
    /* R4: from here the batch is committed; an error leaves the claim open for the next R0. */
    err = cass_write_counts(cs, w, n, ts, b->now_ms, deadline_ms, &k, b, errstr, errstr_size);
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
        cass_before(cs, HC_CASS_R5_DONE);
        err = cass_write_done(cs, b->group, b->topic, pp, seq, b->offset_count, ts, deadline_ms,
                              errstr, errstr_size);
        free(pp);
        free(seq);
        if (err != HC_OK || cass_stopped(cs, HC_CASS_R5_DONE, &k, errstr, errstr_size)) {
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
