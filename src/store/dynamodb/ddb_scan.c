/* The DynamoDB backend's reads: offsets and get (BatchGetItem), and the Scan behind top and
 * foreach. */
#include "ddb_impl.h"

hc_err_t ddb_batch_get(ddb_store_t *ds, const char *table, json_t *keys, item_fn fn, void *opaque,
                       char *errstr, size_t errstr_size)
{
    json_t *req =
        json_pack("{s:{s:{s:o, s:b}}}", "RequestItems", table, "Keys", keys, "ConsistentRead", 1);
    ddb_reply_t rep;
    hc_err_t err = HC_OK;
    int rounds = 0;

    while (req != NULL) {
        const json_t *items;
        const json_t *item;
        const json_t *left;
        size_t i;

        err = ddb_call(ds, "BatchGetItem", req, &rep, errstr, errstr_size);
        json_decref(req);
        req = NULL;
        if (err != HC_OK) {
            json_decref(rep.body);
            return err;
        }
        items = json_object_get(json_object_get(rep.body, "Responses"), table);
        json_array_foreach(items, i, item)
        {
            fn(item, opaque);
        }
        left = json_object_get(json_object_get(rep.body, "UnprocessedKeys"), table);
        if (left != NULL && json_array_size(json_object_get(left, "Keys")) > 0) {
            if (++rounds > DDB_ATTEMPTS) {
                json_decref(rep.body);
                hc_errstr_set(errstr, errstr_size, "dynamodb BatchGetItem: throttled");
                return HC_ERR_TRANSIENT;
            }
            ddb_backoff(ds, rounds);
            req = json_pack("{s:{s:O}}", "RequestItems", table, left);
        }
        json_decref(rep.body);
    }
    return err;
}

static void on_offset_item(const json_t *item, void *opaque)
{
    offsets_visit_t *v = opaque;
    const char *key = ddb_av_get_s(item, "key", NULL);
    size_t tlen = strlen(v->topic);
    int64_t next;
    long part;
    char *end;
    size_t i;

    if (key == NULL || strncmp(key, v->topic, tlen) != 0 || key[tlen] != '/' ||
        !ddb_av_get_n(item, "next_offset", &next)) {
        return;
    }
    part = strtol(key + tlen + 1, &end, 10);
    for (i = 0; i < v->count; i++) {
        if (v->partitions[i] == part) {
            v->out[i] = next;
        }
    }
}

hc_err_t ddb_offsets_read(ddb_store_t *ds, const char *group, const char *topic,
                          const int32_t *partitions, size_t count, int64_t *out, char *errstr,
                          size_t errstr_size)
{
    offsets_visit_t v = {topic, partitions, count, out};
    size_t i;
    size_t j;
    hc_err_t err;

    for (i = 0; i < count; i++) {
        out[i] = HC_OFFSET_NONE;
    }
    for (i = 0; i < count; i += GET_KEYS) {
        json_t *keys = json_array();
        for (j = i; j < count && j < i + GET_KEYS; j++) {
            bool dup = false;
            size_t k;
            for (k = i; k < j; k++) {
                dup = dup || partitions[k] == partitions[j];
            }
            if (!dup) {
                json_array_append_new(keys, ddb_offset_item_key(group, topic, partitions[j]));
            }
        }
        err = ddb_batch_get(ds, ds->t_offsets, keys, on_offset_item, &v, errstr, errstr_size);
        if (err != HC_OK) {
            return err;
        }
    }
    return HC_OK;
}

/* ---- reads ---- */

hc_err_t ddb_read_offsets(hc_store_t *st, const char *group, const char *topic,
                          const int32_t *partitions, size_t count, int64_t *offsets_out,
                          char *errstr, size_t errstr_size)
{
    /* A batch in flight on this group and topic is left alone: its offsets have not moved, so
     * a new owner starts at its beginning, re-reads its partials, and its first apply finishes
     * the batch in flight (roll forward) before its own. Finishing it here would make every
     * reader (verify polls this) race the live owner and cost it a conflict per poll. */
    return ddb_offsets_read(ddb_store(st), group, topic, partitions, count, offsets_out, errstr,
                            errstr_size);
}

static void on_get_item(const json_t *item, void *opaque)
{
    get_visit_t *v = opaque;
    size_t len;
    const char *id = ddb_av_get_s(item, "post_id", &len);
    int64_t likes;
    size_t i;

    if (id == NULL || !ddb_av_get_n(item, "likes", &likes)) {
        return;
    }
    for (i = v->from; i < v->to; i++) {
        if (v->lens[i] == len && memcmp(v->ids[i], id, len) == 0) {
            v->out[i] = likes;
        }
    }
}

hc_err_t ddb_get(hc_store_t *st, const char *const *post_ids, const size_t *post_id_lens,
                 size_t count, int64_t *likes_out, char *errstr, size_t errstr_size)
{
    ddb_store_t *ds = ddb_store(st);
    size_t i = 0;
    size_t j;
    hc_err_t err;

    for (j = 0; j < count; j++) {
        likes_out[j] = 0;
    }
    while (i < count) {
        json_t *keys = json_array();
        get_visit_t v = {post_ids, post_id_lens, i, i, likes_out};
        size_t n = 0;
        for (j = i; j < count && n < GET_KEYS; j++) {
            size_t k;
            bool dup = post_id_lens[j] == 0 || post_id_lens[j] > HC_POST_ID_MAX;
            for (k = i; k < j && !dup; k++) {
                dup = post_id_lens[k] == post_id_lens[j] &&
                      memcmp(post_ids[k], post_ids[j], post_id_lens[j]) == 0;
            }
            if (!dup) {
                /* BatchGetItem refuses a key twice in one request. */
                json_t *key = json_pack("{s:o}", "post_id", ddb_av_s(post_ids[j], post_id_lens[j]));
                if (key == NULL) {
                    /* not valid UTF-8: no such post can be stored (apply refuses it), so its
                     * count is 0, as every store answers for a post it does not hold */
                    continue;
                }
                json_array_append_new(keys, key);
                n++;
            }
        }
        v.to = j;
        if (n == 0) {
            json_decref(keys);
        } else {
            err = ddb_batch_get(ds, ds->t_counts, keys, on_get_item, &v, errstr, errstr_size);
            if (err != HC_OK) {
                return err;
            }
        }
        i = j;
    }
    return HC_OK;
}

/* Scans the counts table, at most max_pages pages (0: all); *more (may be NULL when max_pages
 * is 0) tells whether the table goes on past them. */
static hc_err_t scan_counts(ddb_store_t *ds, scan_fn fn, void *opaque, long max_pages, bool *more,
                            char *errstr, size_t errstr_size)
{
    json_t *start = NULL;
    long pages = 0;

    if (more != NULL) {
        *more = false;
    }
    for (;;) {
        json_t *req = json_pack("{s:s, s:b}", "TableName", ds->t_counts, "ConsistentRead", 1);
        if (ds->hooks != NULL && ds->hooks->scan_page_items > 0) {
            json_object_set_new(req, "Limit", json_integer((json_int_t)ds->hooks->scan_page_items));
        }
        ddb_reply_t rep;
        const json_t *items;
        const json_t *item;
        hc_err_t err;
        size_t i;

        if (start != NULL) {
            json_object_set_new(req, "ExclusiveStartKey", start);
            start = NULL;
        }
        err = ddb_call(ds, "Scan", req, &rep, errstr, errstr_size);
        json_decref(req);
        if (err != HC_OK) {
            json_decref(rep.body);
            return err;
        }
        items = json_object_get(rep.body, "Items");
        json_array_foreach(items, i, item)
        {
            size_t len;
            const char *id = ddb_av_get_s(item, "post_id", &len);
            int64_t likes;
            if (id == NULL || len == 0 || len > HC_POST_ID_MAX ||
                !ddb_av_get_n(item, "likes", &likes)) {
                continue;
            }
            if (!fn(id, len, likes, opaque)) {
                json_decref(rep.body);
                return HC_OK;
            }
        }
        start = json_object_get(rep.body, "LastEvaluatedKey");
        if (start == NULL) {
            json_decref(rep.body);
            return HC_OK;
        }
        if (max_pages > 0 && ++pages == max_pages) {
            *more = true;
            json_decref(rep.body);
            return HC_OK;
        }
        json_incref(start);
        json_decref(rep.body);
    }
}

hc_err_t ddb_top(hc_store_t *st, size_t n, hc_store_row_t *rows_out, size_t *count_out,
                 char *errstr, size_t errstr_size)
{
    ddb_store_t *ds = ddb_store(st);
    hc_store_top_t h;
    bool more = false;
    hc_err_t err;

    /* No order by count to read (DYNAMODB.md, "top"): the table's first top_pages pages,
     * exact only when they are all of it; a bigger table is refused, never ranked from part. */
    hc_store_top_init(&h, rows_out, n);
    err = scan_counts(ds, hc_store_top_offer, &h, ds->top_pages, &more, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    if (more) {
        hc_errstr_set(errstr, errstr_size,
                      "dynamodb store: top: the counts table is larger than %ld Scan pages, the "
                      "most one top reads (top_pages= in the store's URI); DynamoDB keeps no "
                      "order by count, so a top of it would read it whole",
                      ds->top_pages);
        return HC_ERR_FATAL;
    }
    *count_out = hc_store_top_finish(&h);
    return HC_OK;
}

static bool on_each_item(const char *id, size_t len, int64_t likes, void *opaque)
{
    each_visit_t *v = opaque;

    return v->fn(id, len, likes, v->opaque);
}

hc_err_t ddb_foreach(hc_store_t *st, hc_store_row_fn fn, void *opaque, char *errstr,
                     size_t errstr_size)
{
    each_visit_t v = {fn, opaque};

    return scan_counts(ddb_store(st), on_each_item, &v, 0, NULL, errstr, errstr_size);
}
