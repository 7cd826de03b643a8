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

/* MessagePack str header for n bytes into out (at most 5 bytes); returns its length. */
static size_t pack_str_header(unsigned char *out, size_t n)
{
    if (n < 32) {
        out[0] = (unsigned char)(0xa0 | n);
        return 1;
    }
    if (n < 256) {
        out[0] = 0xd9;
        out[1] = (unsigned char)n;
        return 2;
    }
    if (n < 65536) {
        out[0] = 0xda;
        out[1] = (unsigned char)(n >> 8);
        out[2] = (unsigned char)n;
        return 3;
    }
    out[0] = 0xdb;
    out[1] = (unsigned char)(n >> 24);
    out[2] = (unsigned char)(n >> 16);
    out[3] = (unsigned char)(n >> 8);
    out[4] = (unsigned char)n;
    return 5;
}

/* Below this magnitude a double holds every integer: the script computes such totals itself. */
#define REDIS_EXACT_DELTA (INT64_C(1) << 53)

/* Deltas [start, end) as one MessagePack array (count key, delta, count key, delta, ...) into
 * rs->pack: the part's one argument, which the script unpacks in C (cmsgpack) and a staged part
 * keeps whole as one list element. A delta of magnitude below 2^53 goes as an integer (cmsgpack
 * makes a Lua number of it, exactly); a bigger one as its decimal string (the batch is then
 * incr_only: see batch_is_incr_only). False when out of memory. */
static bool pack_part(redis_store_t *rs, const hc_store_batch_t *batch, size_t start, size_t end)
{
    size_t need = 5;
    size_t n = 2 * (end - start);
    size_t i;
    unsigned char *p;

    for (i = start; i < end; i++) {
        need += 5 + rs->prefix_len + batch->deltas[i].post_id_len + 1 + 20;
    }
    if (need > rs->pack_size) {
        unsigned char *grown = realloc(rs->pack, need);
        if (grown == NULL) {
            return false;
        }
        rs->pack = grown;
        rs->pack_size = need;
    }
    p = rs->pack;
    *p++ = 0xdd; /* array 32 */
    *p++ = (unsigned char)(n >> 24);
    *p++ = (unsigned char)(n >> 16);
    *p++ = (unsigned char)(n >> 8);
    *p++ = (unsigned char)n;
    for (i = start; i < end; i++) {
        const hc_store_delta_t *d = &batch->deltas[i];

        p += pack_str_header(p, rs->prefix_len + d->post_id_len);
        memcpy(p, rs->prefix, rs->prefix_len);
        p += rs->prefix_len;
        memcpy(p, d->post_id, d->post_id_len);
        p += d->post_id_len;
        if (d->delta >= 0 && d->delta < 128) {
            *p++ = (unsigned char)d->delta; /* positive fixint */
        } else if (d->delta > -REDIS_EXACT_DELTA && d->delta < REDIS_EXACT_DELTA) {
            uint64_t u = (uint64_t)d->delta;

            *p++ = 0xd3; /* int 64, big-endian */
            for (int shift = 56; shift >= 0; shift -= 8) {
                *p++ = (unsigned char)(u >> shift);
            }
        } else {
            char num[24];
            int len = snprintf(num, sizeof(num), "%lld", (long long)d->delta);

            *p++ = (unsigned char)(0xa0 | len); /* fixstr: at most 20 characters */
            memcpy(p, num, (size_t)len);
            p += len;
        }
    }
    rs->pack_len = (size_t)(p - rs->pack);
    return true;
}

/* Whether the script must add every delta with INCRBY instead of writing totals it computed
 * (commit.lua): a delta of 2^53 or more, which a double would round, or a post listed twice
 * (store.h forbids it; a total computed from the count before the batch would lose the first
 * delta). Checked here, on the client, so that the store's one thread does not pay for it: an
 * open-addressing table of the ids' keyed 64-bit hashes (hc_store_id_hash: SipHash under the
 * process key, since the ids come from likes.partials and must not be able to collide on
 * purpose; 8 bytes a slot, at least two slots a post, freed at once), where equal hashes count
 * as a repeat: a collision only sends the batch down the INCRBY path, which is exact for any
 * batch. */
static hc_err_t batch_is_incr_only(const hc_store_batch_t *batch, bool *incr_only, char *errstr,
                                   size_t errstr_size)
{
    uint64_t *slots;
    size_t cap = 16;
    size_t i;

    *incr_only = false;
    for (i = 0; i < batch->delta_count; i++) {
        int64_t d = batch->deltas[i].delta;
        if (d <= -REDIS_EXACT_DELTA || d >= REDIS_EXACT_DELTA) {
            *incr_only = true;
            return HC_OK;
        }
    }
    while (cap < 2 * batch->delta_count) {
        cap *= 2;
    }
    slots = calloc(cap, sizeof(*slots));
    if (slots == NULL) {
        hc_errstr_set(errstr, errstr_size, "redis store: out of memory");
        return HC_ERR_FATAL;
    }
    for (i = 0; i < batch->delta_count && !*incr_only; i++) {
        const hc_store_delta_t *d = &batch->deltas[i];
        uint64_t h = hc_store_id_hash(d->post_id, d->post_id_len); /* never 0: empty */
        size_t at;

        for (at = (size_t)h & (cap - 1); slots[at] != 0 && slots[at] != h;
             at = (at + 1) & (cap - 1)) {
        }
        *incr_only = slots[at] == h;
        slots[at] = h;
    }
    free(slots);
    return HC_OK;
}

/* Builds the EVALSHA for deltas [start, end) of the part numbered `part`: staged, or the commit
 * when it is the last part. */
static hc_err_t build_part(redis_store_t *rs, const hc_store_batch_t *batch, const char *batch_id,
                           size_t part, size_t start, size_t end, bool commit, bool incr_only,
                           char *errstr, size_t errstr_size)
{
    args_t *a = &rs->args;
    const hc_store_offset_t *off;
    size_t i;

    if (!pack_part(rs, batch, start, end)) {
        hc_errstr_set(errstr, errstr_size, "redis store: out of memory");
        return HC_ERR_FATAL;
    }
    redis_args_reset(a);
    redis_args_push_str(a, "EVALSHA");
    redis_args_push_str(a, rs->sha);
    redis_push_script_keys(rs, a, batch->group, batch_id);
    redis_args_push_str(a, !commit ? "stage" : batch->totals_out ? "commit" : "commit_quiet");
    redis_args_pushf(a, "%zu", batch->offset_count);
    redis_args_pushf(a, "%zu", part); /* every earlier part staged one list element */
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
    redis_args_push(a, rs->pack, rs->pack_len);
    redis_args_push_str(a, incr_only ? "1" : "0");
    redis_args_pushf(a, "%" PRId64, rs->top_keep);
    return HC_OK;
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
    if (code == -3) {
        hc_errstr_set(errstr, errstr_size,
                      "redis store: the top index (" TOP_KEY_PREFIX "<prefix>, a sorted set, and "
                      "" TOP_META_KEY_PREFIX "<prefix>, a hash) is of another type or its floor "
                      "is not a number; nothing was written (delete both and run `hotcount "
                      "init`)");
        return HC_ERR_FATAL;
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
    size_t part = 0;
    size_t end;
    bool last;
    bool incr_only;
    hc_err_t err;

    err = new_batch_id(batch_id, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    err = batch_is_incr_only(batch, &incr_only, errstr, errstr_size);
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
        err =
            build_part(rs, batch, batch_id, part, start, end, last, incr_only, errstr, errstr_size);
        if (err != HC_OK) {
            break;
        }
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
        part++;
    } while (err == HC_OK && !last);
    rs->timeout_ms = rs->command_ms;
    return err;
}
