/* The DynamoDB backend's apply: one transaction when the batch fits, else the multi-part
 * protocol (ddb_parts.c), every request of it within store_batch_ms. */
#include "ddb_impl.h"

/* A cancelled transaction whose first actions were the batch's offset checks: HC_ERR_CONFLICT
 * when one of those failed (another owner moved the offsets), else HC_OK with *again set (a
 * marker or count changed under us: the caller looks again). Consumes rep. */
static hc_err_t cancelled_outcome(const ddb_batch_t *b, ddb_reply_t *rep, bool *again, char *errstr,
                                  size_t errstr_size)
{
    long k = ddb_failed_action(rep);
    json_decref(rep->body);
    if (k >= 0 && (size_t)k < b->offset_count) {
        hc_errstr_set(errstr, errstr_size,
                      "dynamodb store: partition %d's stored offset differs from the batch's "
                      "expected one",
                      (int)b->offs[k].partition);
        return HC_ERR_CONFLICT;
    }
    *again = true;
    return HC_OK;
}

/* Step 2. HC_OK: the marker is ours. HC_ERR_CONFLICT: an offset differs. *marker_taken: a
 * marker (ours or another's) was there; the caller looks again. */
static hc_err_t begin_batch(ddb_store_t *ds, const ddb_batch_t *b, bool *marker_taken, char *errstr,
                            size_t errstr_size)
{
    json_t *acts = json_array();
    ddb_reply_t rep;
    hc_err_t err;
    size_t i;

    *marker_taken = false;
    for (i = 0; i < b->offset_count; i++) {
        json_array_append_new(acts, ddb_offset_check(ds, b->group, b->topic, &b->offs[i]));
    }
    json_array_append_new(
        acts,
        json_pack("{s:{s:s, s:{s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o}, s:s}}", "Put", "TableName",
                  ds->t_offsets, "Item", "group", ddb_av_s(b->group, strlen(b->group)), "key",
                  ddb_av_s(b->marker_key, strlen(b->marker_key)), "batch_id",
                  ddb_av_s(b->id, strlen(b->id)), "parts_total", ddb_av_n((int64_t)b->parts),
                  "parts_done", ddb_av_n(0), "part_deltas", ddb_av_n((int64_t)b->part_deltas),
                  "now_ms", ddb_av_n(b->now_ms), "offsets",
                  ddb_av_s(b->offsets_text, strlen(b->offsets_text)), "ConditionExpression",
                  "attribute_not_exists(batch_id)"));
    err = ddb_transact(ds, acts, b->offset_count + 1, false, &rep, errstr, errstr_size);
    if (err == HC_OK) {
        ddb_progress(ds);
    }
    if (err == HC_OK || !ddb_is_cancelled(err, &rep)) {
        json_decref(rep.body);
        return err;
    }
    return cancelled_outcome(b, &rep, marker_taken, errstr, errstr_size);
}

/* A batch that fits one transaction: offsets compared and moved, marker checked absent,
 * counts added. *retry: the marker or a count changed under us; look again. */
static hc_err_t apply_single(ddb_store_t *ds, const ddb_batch_t *b, bool *retry, char *errstr,
                             size_t errstr_size)
{
    const hc_store_batch_t *in = b->in;
    int64_t *old = NULL;
    json_t *acts;
    ddb_reply_t rep;
    hc_err_t err;
    size_t i;

    *retry = false;
    if (in->totals_out != NULL && in->delta_count > 0) {
        /* Read the counts first and make each update conditional on them: the totals we
         * report are then exactly what this transaction left. */
        old = in->totals_out;
        err = ddb_read_totals(ds, b, old, errstr, errstr_size);
        if (err != HC_OK) {
            return err;
        }
        for (i = 0; i < in->delta_count; i++) {
            /* Each update holds only if its count is still `old`: then old + delta is what it
             * would become. */
            if (ddb_count_overflows(old[i], in->deltas[i].delta)) {
                char likes[24];
                snprintf(likes, sizeof(likes), "%lld", (long long)old[i]);
                return ddb_refuse_delta(in, i, likes, errstr, errstr_size);
            }
        }
    }
    acts = json_array();
    for (i = 0; i < b->offset_count; i++) {
        json_array_append_new(acts, ddb_offset_update(ds, b->group, b->topic, &b->offs[i]));
    }
    if (b->offset_count > 0) {
        json_array_append_new(acts,
                              json_pack("{s:{s:s, s:o, s:s}}", "ConditionCheck", "TableName",
                                        ds->t_offsets, "Key", ddb_marker_item_key(b),
                                        "ConditionExpression", "attribute_not_exists(batch_id)"));
    }
    for (i = 0; i < in->delta_count; i++) {
        const hc_store_delta_t *d = &in->deltas[b->order[i]];
        json_array_append_new(acts,
                              ddb_count_update(ds, d->post_id, d->post_id_len, d->delta, b->now_ms,
                                               old != NULL ? &old[b->order[i]] : NULL));
    }
    err = ddb_transact(ds, acts, b->offset_count + (b->offset_count > 0) + in->delta_count, false,
                       &rep, errstr, errstr_size);
    if (err == HC_OK) {
        json_decref(rep.body);
        ddb_progress(ds);
        if (old != NULL) {
            for (i = 0; i < in->delta_count; i++) {
                old[i] += in->deltas[i].delta;
            }
        }
        return HC_OK;
    }
    if (!ddb_is_cancelled(err, &rep)) {
        json_decref(rep.body);
        return err;
    }
    if (old == NULL) {
        /* The actions: the offsets, the marker check (with offsets), then the counts in sorted
         * order. A count's condition (without `old`) fails only when the sum would leave int64.
         * The first failed action decides: a stale offset is a conflict before anything. */
        size_t base = b->offset_count + (b->offset_count > 0);
        long k = ddb_failed_action(&rep);
        if (k >= 0 && (size_t)k >= base && (size_t)k < base + in->delta_count) {
            err = ddb_refuse_delta(in, b->order[(size_t)k - base],
                                   ddb_item_likes(ddb_reason_item(&rep, (size_t)k)), errstr,
                                   errstr_size);
            json_decref(rep.body);
            return err;
        }
    }
    return cancelled_outcome(b, &rep, retry, errstr, errstr_size);
}

/* Before a split batch writes anything: a post whose count (read strongly consistent now)
 * would leave int64 refuses the batch (HC_ERR_RECORD), since once begun the batch must finish.
 * Between this read and the parts no other batch of the group changes these counts and lets
 * this one begin (a post's partials are one partition's, whose offset every such batch moves,
 * and the marker holds the group from the begin), so the parts' own overflow conditions then
 * hold; run_parts says what happens if something outside the protocol writes a count
 * meanwhile. */
static hc_err_t refuse_overflow(ddb_store_t *ds, const ddb_batch_t *b, size_t *checked,
                                char *errstr, size_t errstr_size)
{
    const hc_store_batch_t *in = b->in;
    int64_t *now = malloc((in->delta_count + 1) * sizeof(*now));
    hc_err_t err = HC_OK;
    size_t from;
    size_t i;

    if (now == NULL) {
        hc_errstr_set(errstr, errstr_size, "dynamodb store: out of memory");
        return HC_ERR_FATAL;
    }
    /* In part order, a chunk of GET_KEYS at a time; *checked follows each chunk found fine, so
     * that an apply cut short by its deadline goes on from there (ddb_store_t's resume_*). */
    for (from = *checked; err == HC_OK && from < in->delta_count; from += GET_KEYS) {
        size_t to = from + GET_KEYS < in->delta_count ? from + GET_KEYS : in->delta_count;
        err = ddb_read_totals_chunk(ds, b, from, to, now, errstr, errstr_size);
        for (i = from; err == HC_OK && i < to; i++) {
            size_t k = b->order[i]; /* the first in part order */
            if (ddb_count_overflows(now[k], in->deltas[k].delta)) {
                char likes[24];
                snprintf(likes, sizeof(likes), "%lld", (long long)now[k]);
                err = ddb_refuse_delta(in, k, likes, errstr, errstr_size);
            }
        }
        if (err == HC_OK) {
            *checked = to;
        }
    }
    free(now);
    return err;
}

static hc_err_t apply_batch(ddb_store_t *ds, const hc_store_batch_t *in, char *errstr,
                            size_t errstr_size)
{
    ddb_batch_t b;
    marker_t mk;
    hc_err_t err;
    int round;

    if (in->offset_count == 0 && in->delta_count == 0) {
        return HC_OK;
    }
    if (in->offset_count > MAX_PARTITIONS) {
        hc_errstr_set(errstr, errstr_size,
                      "dynamodb store: a batch may move at most %d partitions' offsets (got "
                      "%zu): one transaction moves them all",
                      MAX_PARTITIONS, in->offset_count);
        return HC_ERR_INVALID;
    }
    err = ddb_batch_init(ds, &b, in, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    for (round = 0; round < DDB_ROUNDS; round++) {
        bool again = false;
        step_t step;

        err = ddb_marker_read(ds, &b, &mk, errstr, errstr_size);
        if (err != HC_OK) {
            goto out;
        }
        if (mk.present && strcmp(mk.id, b.id) == 0) {
            /* Our own batch, begun by an earlier attempt or by another owner: finish it. */
            err = ddb_run_parts(ds, &b, mk.done, &step, errstr, errstr_size);
            ddb_marker_fini(&mk);
            if (err == HC_OK && step == STEP_FINISHED_OTHER) {
                hc_errstr_set(errstr, errstr_size,
                              "dynamodb store: batch %s was finished by another handle", b.id);
                err = HC_ERR_CONFLICT;
            }
            goto out;
        }
        if (mk.present) {
            err = ddb_roll_forward(ds, &b, &mk, errstr, errstr_size);
            ddb_marker_fini(&mk);
            if (err != HC_OK) {
                goto out;
            }
            continue;
        }
        ddb_marker_fini(&mk);
        if (in->delta_count <= b.part_deltas &&
            in->delta_count + in->offset_count + 1 <= TXN_MAX_ACTIONS) {
            err = apply_single(ds, &b, &again, errstr, errstr_size);
            if (err != HC_OK || !again) {
                goto out;
            }
            ddb_backoff(ds, round);
            continue;
        }
        if (b.offset_count > 0) {
            /* A stale batch loses here, before it stages anything. begin_batch checks again,
             * atomically. */
            int32_t parts[MAX_PARTITIONS];
            int64_t stored[MAX_PARTITIONS];
            size_t i;
            for (i = 0; i < b.offset_count; i++) {
                parts[i] = b.offs[i].partition;
            }
            err = ddb_offsets_read(ds, b.group, b.topic, parts, b.offset_count, stored, errstr,
                                   errstr_size);
            if (err != HC_OK) {
                goto out;
            }
            for (i = 0; i < b.offset_count; i++) {
                if (stored[i] != b.offs[i].expected) {
                    hc_errstr_set(errstr, errstr_size,
                                  "dynamodb store: partition %d's stored offset differs from "
                                  "the batch's expected one",
                                  (int)b.offs[i].partition);
                    err = HC_ERR_CONFLICT;
                    goto out;
                }
            }
        }
        /* What an earlier apply of this very batch (same id: same group, topic, offsets,
         * deltas and parts) checked and staged holds still: nothing of the group moved
         * meanwhile without moving an offset, which the begin checks again. */
        if (strcmp(ds->resume_id, b.id) != 0) {
            snprintf(ds->resume_id, sizeof(ds->resume_id), "%s", b.id);
            ds->resume_checked = 0;
            ds->resume_staged = 0;
        }
        err = refuse_overflow(ds, &b, &ds->resume_checked, errstr, errstr_size);
        if (err == HC_OK) {
            err = ddb_stage_parts(ds, &b, &ds->resume_staged, errstr, errstr_size);
        }
        if (err == HC_OK) {
            err = begin_batch(ds, &b, &again, errstr, errstr_size);
        }
        if (err != HC_ERR_TRANSIENT) {
            ds->resume_id[0] = '\0'; /* begun, refused or lost: nothing to resume */
        }
        if (err != HC_OK) {
            goto out;
        }
        if (again) {
            continue; /* someone's marker: the next round finishes it */
        }
        err = ddb_run_parts(ds, &b, 0, &step, errstr, errstr_size);
        if (err == HC_OK && step == STEP_FINISHED_OTHER) {
            hc_errstr_set(errstr, errstr_size,
                          "dynamodb store: batch %s was finished by another handle", b.id);
            err = HC_ERR_CONFLICT;
        }
        goto out;
    }
    hc_errstr_set(errstr, errstr_size,
                  "dynamodb store: other batches kept taking the group's marker; retry");
    err = HC_ERR_TRANSIENT;
out:
    ddb_batch_fini(&b);
    return err;
}

/* One apply, every request of it within store_batch_ms (the deadline ddb_call and the back-offs
 * keep to). */
hc_err_t ddb_apply(hc_store_t *st, const hc_store_batch_t *in, char *errstr, size_t errstr_size)
{
    ddb_store_t *ds = ddb_store(st);
    hc_err_t err;

    ds->deadline_ms = hc_now_ms() + ds->batch_ms;
    ds->cur = in;
    err = apply_batch(ds, in, errstr, errstr_size);
    ds->deadline_ms = 0;
    ds->cur = NULL;
    return err;
}
