/* The Redis backend's apply: a batch cut into parts of at most REDIS_PART_DELTAS deltas, the
 * staged parts and the commit, each one call of commit.lua (redis.c's file comment). */
#include "redis_impl.h"

/* ---- apply ---- */

static void format_offset(char *buf, size_t buf_size, int64_t offset)
{
    if (offset == HC_OFFSET_NONE) {
        snprintf(buf, buf_size, "none");
    } else {
        snprintf(buf, buf_size, "%lld", (long long)offset);
    }
}

/* The end of the part that starts at delta `start`: at least one delta, at most
 * REDIS_PART_DELTAS, and no more than REDIS_PART_BYTES of keys and values. */
static size_t part_end(const redis_store_t *rs, const hc_store_batch_t *batch, size_t start)
{
    size_t bytes = 0;
    size_t i;

    for (i = start; i < batch->delta_count && i - start < REDIS_PART_DELTAS; i++) {
        bytes += rs->prefix_len + batch->deltas[i].post_id_len + 20;
        if (bytes > REDIS_PART_BYTES && i > start) {
            break;
        }
    }
    return i;
}

/* A random 128-bit id in hex: staging lists of concurrent batches, also from other processes
 * and hosts, must never share a name. */
static hc_err_t new_batch_id(char out[33], char *errstr, size_t errstr_size)
{
    static const char hex[] = "0123456789abcdef";
    unsigned char raw[16];
    size_t i;

    if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw)) {
        hc_errstr_set(errstr, errstr_size, "redis store: getrandom failed");
        return HC_ERR_FATAL;
    }
    for (i = 0; i < sizeof(raw); i++) {
        out[2 * i] = hex[raw[i] >> 4];
        out[2 * i + 1] = hex[raw[i] & 15];
    }
    out[32] = '\0';
    return HC_OK;
}

/* Builds the EVALSHA for deltas [start, end): staged, or the commit when it is the last part. */
static void build_part(redis_store_t *rs, const hc_store_batch_t *batch, const char *batch_id,
                       size_t start, size_t end, bool commit)
{
    args_t *a = &rs->args;
    const hc_store_offset_t *off;
    const hc_store_delta_t *d;
    size_t i;

    redis_args_reset(a);
    redis_args_push_str(a, "EVALSHA");
    redis_args_push_str(a, rs->sha);
    redis_args_pushf(a, "%zu", 2 + (commit ? end - start : 0));
    redis_push_offsets_key(a, batch->group);
    redis_args_push2(a, STAGING_KEY_PREFIX, strlen(STAGING_KEY_PREFIX), batch_id, strlen(batch_id));
    if (commit) {
        for (i = start; i < end; i++) {
            d = &batch->deltas[i];
            redis_args_push2(a, rs->prefix, rs->prefix_len, d->post_id, d->post_id_len);
        }
    }
    redis_args_push_str(a, !commit ? "stage" : batch->totals_out ? "commit" : "commit_quiet");
    redis_args_pushf(a, "%zu", batch->offset_count);
    redis_args_pushf(a, "%zu", start); /* every earlier part staged its deltas */
    redis_args_pushf(a, "%d", REDIS_STAGING_TTL_MS);
    for (i = 0; i < batch->offset_count; i++) {
        off = &batch->offsets[i];
        redis_args_pushf(a, "%s/%d", batch->topic, (int)off->partition);
        if (off->expected == HC_OFFSET_NONE) {
            redis_args_push(a, "", 0);
        } else {
            redis_args_pushf(a, "%lld", (long long)off->expected);
        }
        redis_args_pushf(a, "%lld", (long long)off->next);
    }
    for (i = start; i < end; i++) {
        d = &batch->deltas[i];
        if (!commit) {
            redis_args_push2(a, rs->prefix, rs->prefix_len, d->post_id, d->post_id_len);
        }
        redis_args_pushf(a, "%lld", (long long)d->delta);
    }
}

/* Turns the script's reply into an outcome (see commit.lua); a commit's totals go to the
 * batch's totals_out. */
static hc_err_t part_outcome(const redisReply *reply, const hc_store_batch_t *batch, bool commit,
                             char *errstr, size_t errstr_size)
{
    const hc_store_offset_t *off;
    const redisReply *stored;
    char expected_buf[24];
    long long code;
    long long index;

    if (reply->type != REDIS_REPLY_ARRAY || reply->elements < 1 ||
        reply->element[0]->type != REDIS_REPLY_INTEGER) {
        return redis_unexpected_reply("apply", errstr, errstr_size);
    }
    code = reply->element[0]->integer;
    if (code == 1 && !commit) {
        return HC_OK;
    }
    if (code == 1) {
        if (reply->elements != 1 + (batch->totals_out ? batch->delta_count : 0)) {
            return redis_unexpected_reply("apply", errstr, errstr_size);
        }
        for (size_t i = 0; batch->totals_out != NULL && i < batch->delta_count; i++) {
            if (reply->element[1 + i]->type != REDIS_REPLY_INTEGER) {
                return redis_unexpected_reply("apply", errstr, errstr_size);
            }
            batch->totals_out[i] = reply->element[1 + i]->integer;
        }
        return HC_OK;
    }
    if (code == 0 && reply->elements == 3 && reply->element[1]->type == REDIS_REPLY_INTEGER &&
        reply->element[2]->type == REDIS_REPLY_STRING) {
        index = reply->element[1]->integer;
        stored = reply->element[2];
        if (index < 0 || (size_t)index >= batch->offset_count) {
            return redis_unexpected_reply("apply", errstr, errstr_size);
        }
        off = &batch->offsets[index];
        format_offset(expected_buf, sizeof(expected_buf), off->expected);
        hc_errstr_set(errstr, errstr_size,
                      "redis store: offset conflict on %s/%d (group %s): stored next_offset %.*s, "
                      "batch expected %s",
                      batch->topic, (int)off->partition, batch->group,
                      stored->len == 0 ? 4 : (stored->len > 24 ? 24 : (int)stored->len),
                      stored->len == 0 ? "none" : stored->str, expected_buf);
        return HC_ERR_CONFLICT;
    }
    if (code == -1) {
        hc_errstr_set(errstr, errstr_size,
                      "redis store: the staged parts of a split batch were gone at its commit "
                      "(expired or evicted); nothing was written, retry the batch");
        return HC_ERR_TRANSIENT;
    }
    if (code == -2 && reply->elements == 4 && reply->element[1]->type == REDIS_REPLY_STRING &&
        reply->element[2]->type == REDIS_REPLY_INTEGER &&
        reply->element[3]->type == REDIS_REPLY_STRING) {
        index = reply->element[2]->integer;
        if (index < 0 || (size_t)index >= batch->delta_count) {
            return redis_unexpected_reply("apply", errstr, errstr_size);
        }
        bool overflow = strcmp(reply->element[3]->str, "overflow") == 0;
        hc_errstr_set(errstr, errstr_size,
                      "redis store: delta %lld (%lld) %s key \"%.*s\"; nothing was written", index,
                      (long long)batch->deltas[index].delta,
                      overflow ? "would take past 9e18 the count at"
                               : "cannot be added to (not an integer, or another type)",
                      reply->element[1]->len > 300 ? 300 : (int)reply->element[1]->len,
                      reply->element[1]->str);
        if (batch->refused_out != NULL) {
            *batch->refused_out = (size_t)index;
        }
        /* One post's count is refused, the store is fine: the caller sets that post aside. */
        return HC_ERR_RECORD;
    }
    return redis_unexpected_reply("apply", errstr, errstr_size);
}

hc_err_t redis_apply(hc_store_t *st, const hc_store_batch_t *batch, char *errstr,
                     size_t errstr_size)
{
    redis_store_t *rs = redis_store(st);
    redisReply *reply;
    char batch_id[33];
    size_t start = 0;
    size_t end;
    bool last;
    hc_err_t err;

    err = new_batch_id(batch_id, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    /* On any failure the parts staged so far stay behind, invisible, until their list expires;
     * a retry stages under a new id. */
    /* The parts share one deadline, so a batch of any size is bounded by store_batch_ms. */
    int64_t deadline = hc_now_ms() + rs->batch_ms;
    do {
        end = part_end(rs, batch, start);
        last = end == batch->delta_count;
        build_part(rs, batch, batch_id, start, end, last);
        long want = rs->command_ms;
        if (last) {
            want += (long)(batch->delta_count * REDIS_COMMIT_US_PER_DELTA / 1000);
        }
        int64_t left = deadline - hc_now_ms();
        if (left <= 0) {
            hc_errstr_set(errstr, errstr_size,
                          "redis store: apply: the batch took longer than %" PRId64
                          " ms; nothing of it was applied",
                          rs->batch_ms);
            err = HC_ERR_TRANSIENT;
            break;
        }
        rs->timeout_ms = left < want ? (long)left : want;
        err = redis_run_script(rs, &rs->args, &reply, errstr, errstr_size);
        if (err == HC_OK) {
            err = part_outcome(reply, batch, last, errstr, errstr_size);
        }
        if (err == HC_OK && batch->on_progress != NULL) {
            batch->on_progress(batch->progress_opaque); /* a part staged, or the commit */
        }
        start = end;
    } while (err == HC_OK && !last);
    rs->timeout_ms = rs->command_ms;
    return err;
}
