/* The Redis backend's reads: offsets (HMGET), get (MGET), and the SCAN behind top and foreach. */
#include "redis_impl.h"

/* ---- replies ---- */

/* A decimal int64 written by INCRBY or by us. */
static bool parse_i64(const char *p, size_t len, int64_t *out)
{
    bool neg = len > 0 && p[0] == '-';
    uint64_t limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    uint64_t v = 0;
    size_t i = neg ? 1 : 0;

    if (i == len || len - i > 19) {
        return false;
    }
    for (; i < len; i++) {
        if (p[i] < '0' || p[i] > '9') {
            return false;
        }
        v = v * 10 + (uint64_t)(p[i] - '0');
    }
    if (v > limit) {
        return false;
    }
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return true;
}

/* One count from an MGET: nil (no such key, or a key of another type) is 0. */
static hc_err_t count_value(const redisReply *r, const char *key, size_t key_len, int64_t *likes,
                            bool *present, char *errstr, size_t errstr_size)
{
    *present = false;
    *likes = 0;
    if (r->type == REDIS_REPLY_NIL) {
        return HC_OK;
    }
    if (r->type != REDIS_REPLY_STRING || !parse_i64(r->str, r->len, likes)) {
        hc_errstr_set(errstr, errstr_size,
                      "redis store: key \"%.*s\" does not hold an integer count",
                      key_len > 300 ? 300 : (int)key_len, key);
        return HC_ERR_FATAL;
    }
    *present = true;
    return HC_OK;
}

hc_err_t redis_unexpected_reply(const char *what, char *errstr, size_t errstr_size)
{
    hc_errstr_set(errstr, errstr_size, "redis store: %s: unexpected reply", what);
    return HC_ERR_FATAL;
}

/* ---- offsets ---- */

void redis_push_offsets_key(args_t *a, const char *group)
{
    redis_args_push2(a, OFFSETS_KEY_PREFIX, strlen(OFFSETS_KEY_PREFIX), group,
                     group != NULL ? strlen(group) : 0);
}

void redis_push_script_keys(redis_store_t *rs, args_t *a, const char *group, const char *batch_id)
{
    redis_args_push_str(a, "4");
    redis_push_offsets_key(a, group);
    redis_args_push2(a, STAGING_KEY_PREFIX, strlen(STAGING_KEY_PREFIX), batch_id, strlen(batch_id));
    redis_args_push2(a, TOP_KEY_PREFIX, strlen(TOP_KEY_PREFIX), rs->prefix, rs->prefix_len);
    redis_args_push2(a, TOP_META_KEY_PREFIX, strlen(TOP_META_KEY_PREFIX), rs->prefix,
                     rs->prefix_len);
}

hc_err_t redis_read_offsets(hc_store_t *st, const char *group, const char *topic,
                            const int32_t *partitions, size_t count, int64_t *offsets_out,
                            char *errstr, size_t errstr_size)
{
    redis_store_t *rs = redis_store(st);
    redisReply *reply;
    redisReply *r;
    hc_err_t err;
    size_t i;

    /* One HMGET: all partitions as of one moment, like the SQL stores' snapshot. */
    redis_args_reset(&rs->args);
    redis_args_push_str(&rs->args, "HMGET");
    redis_push_offsets_key(&rs->args, group);
    for (i = 0; i < count; i++) {
        redis_args_pushf(&rs->args, "%s/%d", topic, (int)partitions[i]);
    }
    err = redis_command(rs, &rs->args, "reading offsets", &reply, NULL, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    if (reply->type != REDIS_REPLY_ARRAY || reply->elements != count) {
        return redis_unexpected_reply("HMGET", errstr, errstr_size);
    }
    for (i = 0; i < count; i++) {
        r = reply->element[i];
        if (r->type == REDIS_REPLY_NIL) {
            offsets_out[i] = HC_OFFSET_NONE;
        } else if (r->type != REDIS_REPLY_STRING || !parse_i64(r->str, r->len, &offsets_out[i]) ||
                   offsets_out[i] < 0) {
            hc_errstr_set(errstr, errstr_size,
                          "redis store: " OFFSETS_KEY_PREFIX "%s field %s/%d is not an offset",
                          group, topic, (int)partitions[i]);
            return HC_ERR_FATAL;
        }
    }
    return HC_OK;
}

/* ---- get ---- */

hc_err_t redis_get(hc_store_t *st, const char *const *post_ids, const size_t *post_id_lens,
                   size_t count, int64_t *likes_out, char *errstr, size_t errstr_size)
{
    redis_store_t *rs = redis_store(st);
    redisReply *reply;
    bool present;
    hc_err_t err;
    size_t base;
    size_t n;
    size_t i;

    /* In pages, so that a long list of posts is not one huge command and reply. Unlike the
     * SQL stores the pages are not one snapshot: Redis has none. */
    for (base = 0; base < count; base += n) {
        n = count - base < REDIS_PAGE_KEYS ? count - base : REDIS_PAGE_KEYS;
        redis_args_reset(&rs->args);
        redis_args_push_str(&rs->args, "MGET");
        for (i = 0; i < n; i++) {
            redis_args_push2(&rs->args, rs->prefix, rs->prefix_len, post_ids[base + i],
                             post_id_lens[base + i]);
        }
        err = redis_command(rs, &rs->args, "reading counts", &reply, NULL, errstr, errstr_size);
        if (err != HC_OK) {
            return err;
        }
        if (reply->type != REDIS_REPLY_ARRAY || reply->elements != n) {
            return redis_unexpected_reply("MGET", errstr, errstr_size);
        }
        for (i = 0; i < n; i++) {
            err = count_value(reply->element[i], rs->args.argv[i + 1], rs->args.lens[i + 1],
                              &likes_out[base + i], &present, errstr, errstr_size);
            if (err != HC_OK) {
                return err;
            }
        }
    }
    return HC_OK;
}

/* ---- scans: top and foreach ---- */

/* MATCH pattern for every key under the prefix: the prefix with glob characters escaped. */
static char *scan_pattern(const redis_store_t *rs)
{
    char *pattern = malloc(rs->prefix_len * 2 + 2);
    size_t n = 0;
    size_t i;

    if (pattern == NULL) {
        return NULL;
    }
    for (i = 0; i < rs->prefix_len; i++) {
        if (strchr("*?[]\\", rs->prefix[i]) != NULL) {
            pattern[n++] = '\\';
        }
        pattern[n++] = rs->prefix[i];
    }
    pattern[n++] = '*';
    pattern[n] = '\0';
    return pattern;
}

/* One SCAN page and the MGET of its keys; fn is called once per post not seen before. Updates
 * cursor; *more turns false at the end of the scan or when fn asks to stop. */
static hc_err_t scan_page(redis_store_t *rs, const char *pattern, char cursor[24],
                          hc_store_seen_t *seen, hc_store_row_fn fn, void *opaque, bool *more,
                          char *errstr, size_t errstr_size)
{
    redisReply *reply;
    redisReply *keys;
    const char *id;
    size_t id_len;
    int64_t likes;
    bool present;
    bool fresh;
    hc_err_t err;
    size_t i;

    redis_args_reset(&rs->args);
    redis_args_push_str(&rs->args, "SCAN");
    redis_args_push_str(&rs->args, cursor);
    redis_args_push_str(&rs->args, "MATCH");
    redis_args_push_str(&rs->args, pattern);
    redis_args_push_str(&rs->args, "COUNT");
    redis_args_pushf(&rs->args, "%d", REDIS_PAGE_KEYS);
    err = redis_command(rs, &rs->args, "scanning counts", &reply, NULL, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2 ||
        reply->element[0]->type != REDIS_REPLY_STRING || reply->element[0]->len >= 24 ||
        reply->element[1]->type != REDIS_REPLY_ARRAY) {
        return redis_unexpected_reply("SCAN", errstr, errstr_size);
    }
    memcpy(cursor, reply->element[0]->str, reply->element[0]->len);
    cursor[reply->element[0]->len] = '\0';
    *more = strcmp(cursor, "0") != 0;
    keys = reply->element[1];
    if (keys->elements == 0) {
        return HC_OK;
    }

    /* The keys are copied into the MGET, which outlives the SCAN reply. */
    redis_args_reset(&rs->args);
    redis_args_push_str(&rs->args, "MGET");
    for (i = 0; i < keys->elements; i++) {
        if (keys->element[i]->type != REDIS_REPLY_STRING) {
            return redis_unexpected_reply("SCAN", errstr, errstr_size);
        }
        redis_args_push(&rs->args, keys->element[i]->str, keys->element[i]->len);
    }
    err = redis_command(rs, &rs->args, "reading counts", &reply, NULL, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    if (reply->type != REDIS_REPLY_ARRAY || reply->elements != rs->args.count - 1) {
        return redis_unexpected_reply("MGET", errstr, errstr_size);
    }
    for (i = 0; i < reply->elements; i++) {
        err = count_value(reply->element[i], rs->args.argv[i + 1], rs->args.lens[i + 1], &likes,
                          &present, errstr, errstr_size);
        if (err != HC_OK) {
            return err;
        }
        if (!present) {
            continue; /* deleted since the SCAN, or not a string: not a count */
        }
        id = rs->args.argv[i + 1] + rs->prefix_len;
        id_len = rs->args.lens[i + 1] - rs->prefix_len;
        if (id_len == 0 || id_len > HC_POST_ID_MAX) {
            /* hc_store_apply never writes such a key: someone else did, under our prefix. */
            hc_errstr_set(errstr, errstr_size,
                          "redis store: key \"%.*s\" under the prefix has a post id of %zu bytes "
                          "(allowed 1..%d)",
                          (int)(rs->args.lens[i + 1] > 300 ? 300 : rs->args.lens[i + 1]),
                          rs->args.argv[i + 1], id_len, HC_POST_ID_MAX);
            return HC_ERR_FATAL;
        }
        if (!hc_store_seen_add(seen, id, id_len, &fresh)) {
            hc_errstr_set(errstr, errstr_size, "redis store: out of memory while scanning");
            return HC_ERR_FATAL;
        }
        if (fresh && !fn(id, id_len, likes, opaque)) {
            *more = false;
            return HC_OK;
        }
    }
    return HC_OK;
}

static hc_err_t scan_counts(redis_store_t *rs, hc_store_row_fn fn, void *opaque, char *errstr,
                            size_t errstr_size)
{
    char cursor[24] = "0";
    hc_store_seen_t seen = {0};
    char *pattern;
    bool more = true;
    hc_err_t err = HC_OK;

    pattern = scan_pattern(rs);
    if (pattern == NULL) {
        hc_errstr_set(errstr, errstr_size, "redis store: out of memory");
        return HC_ERR_FATAL;
    }
    while (err == HC_OK && more) {
        err = scan_page(rs, pattern, cursor, &seen, fn, opaque, &more, errstr, errstr_size);
    }
    hc_store_seen_fini(&seen);
    free(pattern);
    return err;
}

hc_err_t redis_foreach(hc_store_t *st, hc_store_row_fn fn, void *opaque, char *errstr,
                       size_t errstr_size)
{
    return scan_counts(redis_store(st), fn, opaque, errstr, errstr_size);
}

/* The top from the index (commit.lua's "top" mode: one script call, so one moment): the
 * members scored at least as high as the n-th, with their counts, ranked here exactly (scores
 * are doubles; the counts are not). *answered is false when the index cannot prove the answer
 * (not built yet, n past what it keeps, or the n-th score not above its floor). */
static hc_err_t top_from_index(redis_store_t *rs, hc_store_top_t *heap, size_t n, bool *answered,
                               char *errstr, size_t errstr_size)
{
    redisReply *reply;
    hc_err_t err;

    *answered = false;
    redis_args_reset(&rs->args);
    redis_args_push_str(&rs->args, "EVALSHA");
    redis_args_push_str(&rs->args, rs->sha);
    redis_push_script_keys(rs, &rs->args, "", "");
    redis_args_push_str(&rs->args, "top");
    redis_args_pushf(&rs->args, "%zu", n);
    err = redis_run_script(rs, &rs->args, &reply, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    if (reply->type != REDIS_REPLY_ARRAY || reply->elements < 1 ||
        reply->element[0]->type != REDIS_REPLY_INTEGER || reply->elements % 2 != 1) {
        return redis_unexpected_reply("top", errstr, errstr_size);
    }
    if (reply->element[0]->integer != 1) {
        return HC_OK;
    }
    for (size_t i = 1; i < reply->elements; i += 2) {
        const redisReply *key = reply->element[i];
        int64_t likes;
        bool present;

        if (key->type != REDIS_REPLY_STRING || key->len <= rs->prefix_len ||
            key->len - rs->prefix_len > HC_POST_ID_MAX ||
            memcmp(key->str, rs->prefix, rs->prefix_len) != 0) {
            return redis_unexpected_reply("top (a member of the index is not a count key)", errstr,
                                          errstr_size);
        }
        err = count_value(reply->element[i + 1], key->str, key->len, &likes, &present, errstr,
                          errstr_size);
        if (err != HC_OK) {
            return err;
        }
        if (present) { /* a member whose key is gone (deleted by hand) is no post */
            hc_store_top_offer(key->str + rs->prefix_len, key->len - rs->prefix_len, likes, heap);
        }
    }
    *answered = true;
    return HC_OK;
}

hc_err_t redis_top(hc_store_t *st, size_t n, hc_store_row_t *rows_out, size_t *count_out,
                   char *errstr, size_t errstr_size)
{
    redis_store_t *rs = redis_store(st);
    hc_store_top_t heap;
    bool answered = false;
    hc_err_t err = HC_OK;

    hc_store_top_init(&heap, rows_out, n);
    if (n > 0) {
        err = top_from_index(rs, &heap, n, &answered, errstr, errstr_size);
    }
    if (err == HC_OK && n > 0 && !answered) {
        /* The index cannot say: every count is read once (O(keys)), and only n rows are
         * ever held. */
        hc_store_top_init(&heap, rows_out, n);
        err = scan_counts(rs, hc_store_top_offer, &heap, errstr, errstr_size);
    }
    if (err != HC_OK) {
        return err;
    }
    *count_out = hc_store_top_finish(&heap);
    return HC_OK;
}

/* One page of keys to commit.lua's "absorb" mode; last: the SCAN is over. */
static hc_err_t absorb_page(redis_store_t *rs, const redisReply *keys, bool last, char *errstr,
                            size_t errstr_size)
{
    redisReply *reply;
    hc_err_t err;

    redis_args_reset(&rs->args);
    redis_args_push_str(&rs->args, "EVALSHA");
    redis_args_push_str(&rs->args, rs->sha);
    redis_push_script_keys(rs, &rs->args, "", "");
    redis_args_push_str(&rs->args, "absorb");
    redis_args_pushf(&rs->args, "%" PRId64, rs->top_keep);
    redis_args_push_str(&rs->args, last ? "1" : "0");
    for (size_t i = 0; keys != NULL && i < keys->elements; i++) {
        if (keys->element[i]->type != REDIS_REPLY_STRING) {
            return redis_unexpected_reply("SCAN", errstr, errstr_size);
        }
        redis_args_push(&rs->args, keys->element[i]->str, keys->element[i]->len);
    }
    err = redis_run_script(rs, &rs->args, &reply, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    if (reply->type == REDIS_REPLY_ARRAY && reply->elements == 2 &&
        reply->element[0]->type == REDIS_REPLY_INTEGER && reply->element[0]->integer == -3) {
        hc_errstr_set(errstr, errstr_size,
                      "redis store: the top index (" TOP_KEY_PREFIX "<prefix>, "
                      "" TOP_META_KEY_PREFIX "<prefix>) is of another type or its floor is not a "
                      "number: delete both and run `hotcount init` again");
        return HC_ERR_FATAL;
    }
    if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 1 ||
        reply->element[0]->type != REDIS_REPLY_INTEGER || reply->element[0]->integer != 1) {
        return redis_unexpected_reply("building the top index", errstr, errstr_size);
    }
    return HC_OK;
}

/* Builds the top index of a store whose counts predate it, once: a SCAN of the keys under the
 * prefix, each page of at most REDIS_PAGE_KEYS keys absorbed by one script call (so the server
 * is never held longer than a page), the index marked built after the last. Commits running
 * meanwhile keep it as they always do; a page absorbed is covered from then on. */
hc_err_t redis_build_top_index(redis_store_t *rs, char *errstr, size_t errstr_size)
{
    char cursor[24] = "0";
    redisReply *reply;
    char *pattern;
    hc_err_t err;

    redis_args_reset(&rs->args);
    redis_args_push_str(&rs->args, "HGET");
    redis_args_push2(&rs->args, TOP_META_KEY_PREFIX, strlen(TOP_META_KEY_PREFIX), rs->prefix,
                     rs->prefix_len);
    redis_args_push_str(&rs->args, "built");
    err = redis_command(rs, &rs->args, "reading the top index's state", &reply, NULL, errstr,
                        errstr_size);
    if (err != HC_OK) {
        return err;
    }
    if (reply->type == REDIS_REPLY_STRING && reply->len == 1 && reply->str[0] == '1') {
        return HC_OK;
    }
    pattern = scan_pattern(rs);
    if (pattern == NULL) {
        hc_errstr_set(errstr, errstr_size, "redis store: out of memory");
        return HC_ERR_FATAL;
    }
    do {
        redis_args_reset(&rs->args);
        redis_args_push_str(&rs->args, "SCAN");
        redis_args_push_str(&rs->args, cursor);
        redis_args_push_str(&rs->args, "MATCH");
        redis_args_push_str(&rs->args, pattern);
        redis_args_push_str(&rs->args, "COUNT");
        redis_args_pushf(&rs->args, "%d", REDIS_PAGE_KEYS);
        err = redis_command(rs, &rs->args, "scanning counts", &reply, NULL, errstr, errstr_size);
        if (err != HC_OK) {
            break;
        }
        if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2 ||
            reply->element[0]->type != REDIS_REPLY_STRING || reply->element[0]->len >= 24 ||
            reply->element[1]->type != REDIS_REPLY_ARRAY) {
            err = redis_unexpected_reply("SCAN", errstr, errstr_size);
            break;
        }
        memcpy(cursor, reply->element[0]->str, reply->element[0]->len);
        cursor[reply->element[0]->len] = '\0';
        bool last = strcmp(cursor, "0") == 0;
        /* The SCAN reply lives until the next command, after its keys are copied into it. */
        if (reply->element[1]->elements > 0 || last) {
            err = absorb_page(rs, reply->element[1], last, errstr, errstr_size);
        }
    } while (err == HC_OK && strcmp(cursor, "0") != 0);
    free(pattern);
    return err;
}

/* The server's run_id, from INFO server: a random id each start, so a restart that lost the
 * data (no persistence) or a failover to another server changes it. */
hc_err_t redis_identity(hc_store_t *st, char *id_out, size_t id_size, char *errstr,
                        size_t errstr_size)
{
    redis_store_t *rs = redis_store(st);
    redisReply *reply;
    hc_err_t err;

    redis_args_reset(&rs->args);
    redis_args_push_str(&rs->args, "INFO");
    redis_args_push_str(&rs->args, "server");
    err = redis_command(rs, &rs->args, "reading the server's run_id", &reply, NULL, errstr,
                        errstr_size);
    if (err != HC_OK) {
        return err;
    }
    if (reply->type != REDIS_REPLY_STRING && reply->type != REDIS_REPLY_VERB) {
        return redis_unexpected_reply("INFO server", errstr, errstr_size);
    }
    static const char field[] = "run_id:";
    const char *p = reply->str != NULL ? strstr(reply->str, field) : NULL;
    if (p == NULL) {
        id_out[0] = '\0'; /* a server that does not say: no identity */
        return HC_OK;
    }
    p += sizeof(field) - 1;
    size_t len = strcspn(p, "\r\n");
    snprintf(id_out, id_size, "%.*s", (int)len, p);
    return HC_OK;
}
