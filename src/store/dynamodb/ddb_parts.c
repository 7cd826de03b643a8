/* The DynamoDB backend's multi-part protocol (docs/DYNAMODB.md): a batch too big for one
 * transaction is staged, begun under its marker, applied part by part, and rolled forward by
 * whoever finds it begun. */
#include "ddb_impl.h"

static hc_err_t staged_part_read(ddb_store_t *ds, const ddb_batch_t *m, size_t j, part_deltas_t *pd,
                                 bool *found, char *errstr, size_t errstr_size)
{
    json_t *req = json_pack("{s:s, s:{s:o, s:o}, s:b}", "TableName", ds->t_staging, "Key", "batch",
                            ddb_av_s(m->id, strlen(m->id)), "part", ddb_av_n((int64_t)j),
                            "ConsistentRead", 1);
    ddb_reply_t rep;
    hc_err_t err = ddb_call(ds, "GetItem", req, &rep, errstr, errstr_size);
    json_t *item;

    json_decref(req);
    *found = false;
    if (err != HC_OK) {
        json_decref(rep.body);
        return err;
    }
    item = json_object_get(rep.body, "Item");
    if (item != NULL) {
        const json_t *ids = json_object_get(json_object_get(item, "ids"), "L");
        const json_t *deltas = json_object_get(json_object_get(item, "deltas"), "L");
        size_t i;
        const json_t *v;
        bool ok = json_array_size(ids) == json_array_size(deltas) && json_array_size(ids) > 0;
        json_array_foreach(ids, i, v)
        {
            ok = ok && json_is_string(json_object_get(v, "S"));
        }
        json_array_foreach(deltas, i, v)
        {
            ok = ok && json_is_string(json_object_get(v, "N"));
        }
        if (!ok) {
            json_decref(rep.body);
            hc_errstr_set(errstr, errstr_size, "dynamodb store: malformed staged part");
            return HC_ERR_FATAL;
        }
        pd->item = json_incref(item);
        pd->count = json_array_size(ids);
        *found = true;
    }
    json_decref(rep.body);
    return HC_OK;
}

static json_t *staging_key(const ddb_store_t *ds, const ddb_batch_t *m, size_t j)
{
    return json_pack("{s:s, s:{s:o, s:o}}", "TableName", ds->t_staging, "Key", "batch",
                     ddb_av_s(m->id, strlen(m->id)), "part", ddb_av_n((int64_t)j));
}

/* Builds part j's transaction: its count updates, the marker's step, the staged part's delete. */
static json_t *part_actions(const ddb_store_t *ds, const ddb_batch_t *m, size_t j,
                            const part_deltas_t *pd)
{
    json_t *acts = json_array();
    size_t i;

    if (pd->item == NULL) {
        const hc_store_batch_t *in = m->in;
        size_t end = (j + 1) * m->part_deltas;
        for (i = j * m->part_deltas; i < end && i < in->delta_count; i++) {
            const hc_store_delta_t *d = &in->deltas[m->order[i]];
            json_array_append_new(
                acts, ddb_count_update(ds, d->post_id, d->post_id_len, d->delta, m->now_ms, NULL));
        }
    } else {
        const json_t *ids = json_object_get(json_object_get(pd->item, "ids"), "L");
        const json_t *deltas = json_object_get(json_object_get(pd->item, "deltas"), "L");
        for (i = 0; i < pd->count; i++) {
            const json_t *sv = json_object_get(json_array_get(ids, i), "S");
            const char *dv = json_string_value(json_object_get(json_array_get(deltas, i), "N"));
            json_array_append_new(
                acts, ddb_count_update(ds, json_string_value(sv), json_string_length(sv),
                                       dv != NULL ? strtoll(dv, NULL, 10) : 0, m->now_ms, NULL));
        }
    }
    json_array_append_new(
        acts, json_pack("{s:{s:s, s:o, s:s, s:s, s:{s:o, s:o, s:o}}}", "Update", "TableName",
                        ds->t_offsets, "Key", ddb_marker_item_key(m), "UpdateExpression",
                        "SET parts_done = :j1", "ConditionExpression",
                        "batch_id = :b AND parts_done = :j", "ExpressionAttributeValues", ":b",
                        ddb_av_s(m->id, strlen(m->id)), ":j", ddb_av_n((int64_t)j), ":j1",
                        ddb_av_n((int64_t)j + 1)));
    json_array_append_new(acts, json_pack("{s:o}", "Delete", staging_key(ds, m, j)));
    return acts;
}

/* Finds the delta of post_id by binary search over the sorted order. */
static long find_post(const ddb_batch_t *b, const char *id, size_t len)
{
    size_t lo = 0;
    size_t hi = b->in->delta_count;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const hc_store_delta_t *d = &b->in->deltas[b->order[mid]];
        size_t n = d->post_id_len < len ? d->post_id_len : len;
        int c = memcmp(d->post_id, id, n);
        if (c == 0) {
            c = d->post_id_len < len ? -1 : d->post_id_len > len;
        }
        if (c == 0) {
            return (long)b->order[mid];
        }
        if (c < 0) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return -1;
}

static void on_total_item(const json_t *item, void *opaque)
{
    totals_visit_t *v = opaque;
    size_t len;
    const char *id = ddb_av_get_s(item, "post_id", &len);
    int64_t likes;
    long i;

    if (id == NULL || !ddb_av_get_n(item, "likes", &likes)) {
        return;
    }
    i = find_post(v->b, id, len);
    if (i >= 0) {
        v->totals[i] = likes;
    }
}

/* The counts of the posts of [from, to) in sorted order (at most GET_KEYS of them), into
 * totals (indexed like in->deltas; 0 for a post not stored). */
hc_err_t ddb_read_totals_chunk(ddb_store_t *ds, const ddb_batch_t *b, size_t from, size_t to,
                               int64_t *totals, char *errstr, size_t errstr_size)
{
    totals_visit_t v = {b, totals};
    const hc_store_batch_t *in = b->in;
    json_t *keys = json_array();
    size_t j;

    for (j = from; j < to; j++) {
        const hc_store_delta_t *d = &in->deltas[b->order[j]];
        totals[b->order[j]] = 0;
        json_array_append_new(keys,
                              json_pack("{s:o}", "post_id", ddb_av_s(d->post_id, d->post_id_len)));
    }
    return ddb_batch_get(ds, ds->t_counts, keys, on_total_item, &v, errstr, errstr_size);
}

/* The counts of the batch's posts now, into totals (0 for a post not stored). */
hc_err_t ddb_read_totals(ddb_store_t *ds, const ddb_batch_t *b, int64_t *totals, char *errstr,
                         size_t errstr_size)
{
    size_t n = b->in->delta_count;
    size_t i;
    hc_err_t err;

    for (i = 0; i < n; i += GET_KEYS) {
        err = ddb_read_totals_chunk(ds, b, i, i + GET_KEYS < n ? i + GET_KEYS : n, totals, errstr,
                                    errstr_size);
        if (err != HC_OK) {
            return err;
        }
    }
    return HC_OK;
}

/* Steps 3 and 4 for the batch of marker m (m->in set: our own batch, else a roll-forward from
 * the staging table), starting at part `from`. */
/* Where batch m stands now: *ours false when the marker is gone or names another batch (someone
 * finished m, and its offsets moved with it); else *done, the parts applied so far. */
static hc_err_t marker_progress(ddb_store_t *ds, const ddb_batch_t *m, bool *ours, int64_t *done,
                                char *errstr, size_t errstr_size)
{
    marker_t now;
    hc_err_t err = ddb_marker_read(ds, m, &now, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    *ours = now.present && strcmp(now.id, m->id) == 0;
    *done = now.done;
    ddb_marker_fini(&now);
    return HC_OK;
}

hc_err_t ddb_run_parts(ddb_store_t *ds, ddb_batch_t *m, int64_t from, step_t *step, char *errstr,
                       size_t errstr_size)
{
    size_t j = (size_t)from;
    size_t want;
    long landed = 0;
    ddb_reply_t rep;
    json_t *acts;
    hc_err_t err;
    size_t i;

    while (j < m->parts) {
        part_deltas_t pd = {NULL, 0};
        if (m->in == NULL) {
            bool found;
            err = staged_part_read(ds, m, j, &pd, &found, errstr, errstr_size);
            if (err != HC_OK) {
                return err;
            }
            if (!found) {
                /* Consumed by a part that landed meanwhile, or the batch is finished. */
                int64_t done;
                bool ours;
                if ((err = marker_progress(ds, m, &ours, &done, errstr, errstr_size)) != HC_OK) {
                    return err;
                }
                if (!ours) {
                    *step = STEP_FINISHED_OTHER;
                    return HC_OK;
                }
                if ((size_t)done == j) {
                    hc_errstr_set(errstr, errstr_size,
                                  "dynamodb store: staged part %zu of batch %s is missing "
                                  "(expired?): the batch cannot be finished",
                                  j, m->id);
                    return HC_ERR_FATAL;
                }
                j = (size_t)done;
                continue;
            }
        }
        if (ds->hooks != NULL && ds->hooks->before_part != NULL) {
            ds->hooks->before_part(ds->hooks->opaque, j);
        }
        want = (pd.item != NULL ? pd.count
                : (j + 1) * m->part_deltas <= m->in->delta_count
                    ? m->part_deltas
                    : m->in->delta_count - j * m->part_deltas) +
               2;
        acts = part_actions(ds, m, j, &pd);
        json_decref(pd.item);
        err = ddb_transact(ds, acts, want, true, &rep, errstr, errstr_size);
        if (err == HC_OK) {
            json_decref(rep.body);
            ddb_progress(ds);
            j++;
            landed++;
            if (ds->hooks != NULL && ds->hooks->crash_after_parts > 0 &&
                landed >= ds->hooks->crash_after_parts) {
                hc_errstr_set(errstr, errstr_size, "test hook: stopped after %ld parts", landed);
                return HC_ERR_TRANSIENT;
            }
            continue;
        }
        if (!ddb_is_cancelled(err, &rep)) {
            json_decref(rep.body);
            return err;
        }
        {
            /* A count's overflow condition failed while the marker's held: the count moved
             * outside the protocol since the batch's check (refuse_overflow). The part changed
             * nothing, the batch is begun and cannot be taken back (parts before j landed): stop
             * here, marker at j, offsets unmoved, until someone repairs that count (see
             * docs/DYNAMODB.md); every apply on the group then finishes the batch. */
            size_t n = want - 2; /* the count updates come first */
            long k = ddb_failed_action(&rep);
            if (k >= 0 && (size_t)k < n && !ddb_action_failed(&rep, n)) {
                const json_t *item = ddb_reason_item(&rep, (size_t)k);
                size_t len = 0;
                const char *id = ddb_av_get_s(item, "post_id", &len);
                const char *likes = ddb_item_likes(item);
                hc_errstr_set(errstr, errstr_size,
                              "dynamodb store: part %zu of batch %s cannot land: the count of "
                              "post \"%.*s\" (%.40s) would leave int64; it was written outside "
                              "this group's batches after the batch's check. The batch stays in "
                              "flight (marker at part %zu, offsets unmoved) until that count is "
                              "repaired (docs/DYNAMODB.md)",
                              j, m->id, id != NULL ? (len > 200 ? 200 : (int)len) : 1,
                              id != NULL ? id : "?", likes != NULL ? likes : "not a number", j);
                json_decref(rep.body);
                return HC_ERR_FATAL;
            }
        }
        json_decref(rep.body);
        /* The marker's condition failed: re-read where the batch is. */
        {
            int64_t done;
            bool ours;
            if ((err = marker_progress(ds, m, &ours, &done, errstr, errstr_size)) != HC_OK) {
                return err;
            }
            if (!ours) {
                *step = STEP_FINISHED_OTHER;
                return HC_OK;
            }
            if ((size_t)done <= j) {
                hc_errstr_set(errstr, errstr_size,
                              "dynamodb store: part %zu of batch %s refused, marker at %lld", j,
                              m->id, (long long)done);
                return HC_ERR_FATAL;
            }
            j = (size_t)done;
        }
    }
    if (m->in != NULL && m->in->totals_out != NULL) {
        /* Every part landed and the marker still holds the group: no other batch can touch the
         * counts until the finish, so these are the totals as this batch left them. */
        err = ddb_read_totals(ds, m, m->in->totals_out, errstr, errstr_size);
        if (err != HC_OK) {
            return err;
        }
    }
    acts = json_array();
    for (i = 0; i < m->offset_count; i++) {
        json_array_append_new(acts, ddb_offset_update(ds, m->group, m->topic, &m->offs[i]));
    }
    json_array_append_new(
        acts, json_pack("{s:{s:s, s:o, s:s, s:{s:o, s:o}}}", "Delete", "TableName", ds->t_offsets,
                        "Key", ddb_marker_item_key(m), "ConditionExpression",
                        "batch_id = :b AND parts_done = :t", "ExpressionAttributeValues", ":b",
                        ddb_av_s(m->id, strlen(m->id)), ":t", ddb_av_n((int64_t)m->parts)));
    err = ddb_transact(ds, acts, m->offset_count + 1, false, &rep, errstr, errstr_size);
    if (err == HC_OK) {
        json_decref(rep.body);
        ddb_progress(ds);
        *step = STEP_DONE;
        return HC_OK;
    }
    if (ddb_is_cancelled(err, &rep)) {
        /* The marker is gone or moved on: someone finished the batch (its offsets moved too,
         * so their conditions fail as well). Only offsets failing alone mean trouble. */
        bool marker_lost = ddb_action_failed(&rep, m->offset_count) || !rep.reasons_valid;
        long k = ddb_failed_action(&rep);
        json_decref(rep.body);
        if (!marker_lost && k >= 0 && (size_t)k < m->offset_count) {
            hc_errstr_set(errstr, errstr_size,
                          "dynamodb store: an offset of batch %s moved while it was in flight "
                          "(something writes %s outside hotcount)",
                          m->id, ds->t_offsets);
            return HC_ERR_FATAL;
        }
        *step = STEP_FINISHED_OTHER;
        return HC_OK;
    }
    json_decref(rep.body);
    return err;
}

/* A marker of another batch: finish that batch from the staging table (roll forward). */
hc_err_t ddb_roll_forward(ddb_store_t *ds, const ddb_batch_t *ours, marker_t *mk, char *errstr,
                          size_t errstr_size)
{
    ddb_batch_t other;
    step_t step;
    hc_err_t err;

    memset(&other, 0, sizeof(other));
    other.group = ours->group;
    snprintf(other.topic, sizeof(other.topic), "%s", ours->topic);
    snprintf(other.marker_key, sizeof(other.marker_key), "%s", ours->marker_key);
    snprintf(other.id, sizeof(other.id), "%s", mk->id);
    other.part_deltas = (size_t)mk->part_deltas;
    other.parts = (size_t)mk->total;
    other.now_ms = mk->now_ms;
    other.offs = mk->offs; /* moved */
    other.offset_count = mk->offset_count;
    mk->offs = NULL;
    /* A warning: it means an owner died or lost its partitions mid-batch, two instances'
     * split batches met on the group's one marker, or an apply of this handle ran out of
     * store_batch_ms and the caller came back with another batch (stage 2 shrinks a batch that
     * failed). */
    hc_log(HC_LOG_WARN, "store",
           "dynamodb: finishing batch %s of group %s (part %lld of %lld), left unfinished by "
           "another owner or an earlier apply",
           other.id, other.group, (long long)mk->done, (long long)mk->total);
    err = ddb_run_parts(ds, &other, mk->done, &step, errstr, errstr_size);
    free(other.offs);
    return err;
}

/* Step 1: every part from *staged on into the staging table, 25 puts per BatchWriteItem;
 * *staged follows each request that landed whole, so that an apply cut short by its deadline
 * goes on from there (ddb_store_t's resume_*). */
hc_err_t ddb_stage_parts(ddb_store_t *ds, const ddb_batch_t *b, size_t *staged, char *errstr,
                         size_t errstr_size)
{
    const hc_store_batch_t *in = b->in;
    int64_t expires = hc_wall_ms() / 1000 + STAGING_TTL_S;
    size_t j = *staged;
    hc_err_t err;

    while (j < b->parts) {
        json_t *puts = json_array();
        json_t *req;
        size_t k;
        int rounds = 0;

        for (k = 0; k < PUT_ITEMS && j < b->parts; k++, j++) {
            json_t *ids = json_array();
            json_t *deltas = json_array();
            size_t i;
            for (i = j * b->part_deltas; i < (j + 1) * b->part_deltas && i < in->delta_count; i++) {
                const hc_store_delta_t *d = &in->deltas[b->order[i]];
                json_array_append_new(ids, ddb_av_s(d->post_id, d->post_id_len));
                json_array_append_new(deltas, ddb_av_n(d->delta));
            }
            json_array_append_new(puts, json_pack("{s:{s:{s:o, s:o, s:{s:o}, s:{s:o}, s:o}}}",
                                                  "PutRequest", "Item", "batch",
                                                  ddb_av_s(b->id, strlen(b->id)), "part",
                                                  ddb_av_n((int64_t)j), "ids", "L", ids, "deltas",
                                                  "L", deltas, "expires_at", ddb_av_n(expires)));
        }
        if (json_array_size(puts) != k) {
            json_decref(puts);
            hc_errstr_set(errstr, errstr_size, "dynamodb store: cannot build the staged parts");
            return HC_ERR_FATAL;
        }
        req = json_pack("{s:{s:o}}", "RequestItems", ds->t_staging, puts);
        while (req != NULL) {
            ddb_reply_t rep;
            const json_t *left;
            err = ddb_call(ds, "BatchWriteItem", req, &rep, errstr, errstr_size);
            json_decref(req);
            req = NULL;
            if (err != HC_OK) {
                json_decref(rep.body);
                return err;
            }
            ddb_progress(ds);
            left = json_object_get(json_object_get(rep.body, "UnprocessedItems"), ds->t_staging);
            if (json_array_size(left) > 0) {
                if (++rounds > DDB_ATTEMPTS) {
                    json_decref(rep.body);
                    hc_errstr_set(errstr, errstr_size, "dynamodb BatchWriteItem: throttled");
                    return HC_ERR_TRANSIENT;
                }
                ddb_backoff(ds, rounds);
                req = json_pack("{s:{s:O}}", "RequestItems", ds->t_staging, left);
            }
            json_decref(rep.body);
        }
        *staged = j;
    }
    return HC_OK;
}
