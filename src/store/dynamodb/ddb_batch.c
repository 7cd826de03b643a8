/* The DynamoDB backend's batch: its sorted deltas and offsets, its id, the requests that write
 * or check its items, one transaction, and the progress marker of a split batch. */
#include "ddb_impl.h"

/* qsort has no context argument in C11; handles of several threads sort at once. */
static _Thread_local const hc_store_batch_t *sort_batch;

static int cmp_delta(const void *a, const void *b)
{
    return hc_store_delta_cmp(&sort_batch->deltas[*(const size_t *)a],
                              &sort_batch->deltas[*(const size_t *)b]);
}

static char *offsets_to_text(const hc_store_offset_t *offs, size_t n)
{
    size_t cap = n * 64 + 1;
    char *s = malloc(cap);
    size_t len = 0;
    size_t i;

    if (s == NULL) {
        return NULL;
    }
    s[0] = '\0';
    for (i = 0; i < n; i++) {
        if (offs[i].expected == HC_OFFSET_NONE) {
            len += (size_t)snprintf(s + len, cap - len, "%s%d:-:%" PRId64, i > 0 ? "," : "",
                                    (int)offs[i].partition, offs[i].next);
        } else {
            len +=
                (size_t)snprintf(s + len, cap - len, "%s%d:%" PRId64 ":%" PRId64, i > 0 ? "," : "",
                                 (int)offs[i].partition, offs[i].expected, offs[i].next);
        }
    }
    return s;
}

static bool offsets_from_text(const char *s, hc_store_offset_t **out, size_t *count)
{
    size_t n = *s == '\0' ? 0 : 1;
    const char *p;
    hc_store_offset_t *offs;
    size_t i = 0;

    for (p = s; *p != '\0'; p++) {
        n += *p == ',';
    }
    offs = calloc(n + 1, sizeof(*offs));
    if (offs == NULL) {
        return false;
    }
    p = s;
    while (i < n) {
        char *end;
        long part = strtol(p, &end, 10);
        if (*end != ':') {
            goto bad;
        }
        p = end + 1;
        if (*p == '-') {
            offs[i].expected = HC_OFFSET_NONE;
            p++;
        } else {
            offs[i].expected = strtoll(p, &end, 10);
            p = end;
        }
        if (*p != ':') {
            goto bad;
        }
        offs[i].next = strtoll(p + 1, &end, 10);
        offs[i].partition = (int32_t)part;
        p = end;
        i++;
        if (*p == ',') {
            p++;
        } else if (*p != '\0' || i != n) {
            goto bad;
        }
    }
    *out = offs;
    *count = n;
    return true;
bad:
    free(offs);
    return false;
}

void ddb_batch_fini(ddb_batch_t *b)
{
    free(b->order);
    free(b->offsets_text);
    free(b->offs);
    memset(b, 0, sizeof(*b));
}

void ddb_marker_key_of(ddb_batch_t *b, const char *group, const char *topic)
{
    b->group = group != NULL && group[0] != '\0' ? group : "#none";
    snprintf(b->topic, sizeof(b->topic), "%s", topic != NULL && topic[0] != '\0' ? topic : "#none");
    snprintf(b->marker_key, sizeof(b->marker_key), "%s#batch", b->topic);
}

hc_err_t ddb_batch_init(ddb_store_t *ds, ddb_batch_t *b, const hc_store_batch_t *in, char *errstr,
                        size_t errstr_size)
{
    hash2_t h = {HC_FNV1A64_BASIS, 0x84222325cbf29ce4ULL};
    size_t i;

    memset(b, 0, sizeof(*b));
    b->in = in;
    b->now_ms = in->now_ms;
    b->part_deltas =
        ds->hooks != NULL && ds->hooks->part_deltas > 0 ? ds->hooks->part_deltas : PART_DELTAS;
    if (b->part_deltas > PART_DELTAS) {
        b->part_deltas = PART_DELTAS;
    }
    b->parts = (in->delta_count + b->part_deltas - 1) / b->part_deltas;
    b->order = malloc((in->delta_count + 1) * sizeof(*b->order));
    b->offs = malloc((in->offset_count + 1) * sizeof(*b->offs));
    if (b->order == NULL || b->offs == NULL) {
        goto oom;
    }
    for (i = 0; i < in->delta_count; i++) {
        /* DynamoDB strings are UTF-8 (and jansson refuses anything else): say so now rather
         * than build a transaction short of a delta. */
        json_t *probe = json_stringn(in->deltas[i].post_id, in->deltas[i].post_id_len);
        if (probe == NULL) {
            /* A record: the id came from likes.partials, and no DynamoDB string holds it. */
            ddb_batch_fini(b);
            hc_errstr_set(errstr, errstr_size,
                          "dynamodb store: delta %zu: post_id is not valid UTF-8; nothing was "
                          "written",
                          i);
            if (in->refused_out != NULL) {
                *in->refused_out = i;
            }
            return HC_ERR_RECORD;
        }
        json_decref(probe);
        b->order[i] = i;
    }
    sort_batch = in;
    qsort(b->order, in->delta_count, sizeof(*b->order), cmp_delta);
    if (in->offset_count > 0) {
        memcpy(b->offs, in->offsets, in->offset_count * sizeof(*b->offs));
    }
    b->offset_count = in->offset_count;
    qsort(b->offs, b->offset_count, sizeof(*b->offs), hc_store_offset_cmp);
    b->offsets_text = offsets_to_text(b->offs, b->offset_count);
    if (b->offsets_text == NULL) {
        goto oom;
    }
    ddb_marker_key_of(b, in->group, in->topic);
    /* The id: what the batch is (group, topic, offsets, deltas in their sorted order). A batch
     * without offsets has no compare-and-set and may legitimately be applied twice: a random
     * part makes its ids differ. */
    ddb_hash_bytes(&h, b->group, strlen(b->group) + 1);
    ddb_hash_bytes(&h, b->marker_key, strlen(b->marker_key) + 1);
    ddb_hash_bytes(&h, b->offsets_text, strlen(b->offsets_text) + 1);
    for (i = 0; i < in->delta_count; i++) {
        const hc_store_delta_t *d = &in->deltas[b->order[i]];
        ddb_hash_i64(&h, (int64_t)d->post_id_len);
        ddb_hash_bytes(&h, d->post_id, d->post_id_len);
        ddb_hash_i64(&h, d->delta);
    }
    ddb_hash_i64(&h, (int64_t)b->part_deltas);
    if (in->offset_count == 0) {
        ddb_hash_i64(&h, (int64_t)ddb_rand64());
    }
    snprintf(b->id, sizeof(b->id), "%016" PRIx64 "%016" PRIx64, h.a, h.b);
    return HC_OK;
oom:
    ddb_batch_fini(b);
    hc_errstr_set(errstr, errstr_size, "dynamodb store: out of memory");
    return HC_ERR_FATAL;
}

/* ---- request builders ---- */

json_t *ddb_offset_item_key(const char *group, const char *topic, int32_t partition)
{
    char key[300];

    snprintf(key, sizeof(key), "%s/%d", topic, (int)partition);
    return json_pack("{s:o, s:o}", "group", ddb_av_s(group, strlen(group)), "key",
                     ddb_av_s(key, strlen(key)));
}

json_t *ddb_marker_item_key(const ddb_batch_t *b)
{
    return json_pack("{s:o, s:o}", "group", ddb_av_s(b->group, strlen(b->group)), "key",
                     ddb_av_s(b->marker_key, strlen(b->marker_key)));
}

/* A count's ADD. DynamoDB numbers hold 38 digits, so nothing on the server stops a count from
 * leaving int64 (and then no reader of ours could parse it): without `old`, the update is
 * conditional on the count staying inside int64 (likes <= INT64_MAX - delta for a positive
 * delta, >= INT64_MIN - delta for a negative one; an absent count is 0, and any delta fits).
 * With `old` (the count read just before), it is conditional on being exactly that, and the
 * caller has checked old + delta itself. A failed condition returns the item (ALL_OLD), which
 * names the post in the cancellation reasons. */
json_t *ddb_count_update(const ddb_store_t *ds, const char *post_id, size_t len, int64_t delta,
                         int64_t now_ms, const int64_t *old)
{
    json_t *u = json_pack("{s:s, s:{s:o}, s:s, s:{s:o, s:o}, s:s}", "TableName", ds->t_counts,
                          "Key", "post_id", ddb_av_s(post_id, len), "UpdateExpression",
                          "ADD likes :d SET updated_at = :t", "ExpressionAttributeValues", ":d",
                          ddb_av_n(delta), ":t", ddb_av_n(now_ms),
                          "ReturnValuesOnConditionCheckFailure", "ALL_OLD");

    if (old != NULL && u != NULL) {
        /* The count is what we read: the total we report is then exact. */
        if (*old == 0) {
            json_object_set_new(u, "ConditionExpression",
                                json_string("attribute_not_exists(likes) OR likes = :o"));
        } else {
            json_object_set_new(u, "ConditionExpression", json_string("likes = :o"));
        }
        json_object_set_new(json_object_get(u, "ExpressionAttributeValues"), ":o", ddb_av_n(*old));
    } else if (u != NULL && delta != 0) {
        json_object_set_new(u, "ConditionExpression",
                            json_string(delta > 0 ? "attribute_not_exists(likes) OR likes <= :m"
                                                  : "attribute_not_exists(likes) OR likes >= :m"));
        json_object_set_new(json_object_get(u, "ExpressionAttributeValues"), ":m",
                            ddb_av_n(delta > 0 ? INT64_MAX - delta : INT64_MIN - delta));
    }
    return json_pack("{s:o}", "Update", u);
}

/* old + delta leaves int64. */
bool ddb_count_overflows(int64_t old, int64_t delta)
{
    int64_t sum;

    return __builtin_add_overflow(old, delta, &sum);
}

/* The refusal of deltas[i] (HC_ERR_RECORD): its post named, the caller's refused_out set. likes:
 * the stored count as DynamoDB gave it, or NULL when it gave none. */
hc_err_t ddb_refuse_delta(const hc_store_batch_t *in, size_t i, const char *likes, char *errstr,
                          size_t errstr_size)
{
    const hc_store_delta_t *d = &in->deltas[i];

    hc_errstr_set(errstr, errstr_size,
                  "dynamodb store: delta %zu (%lld) would take the count of post \"%.*s\" (%.40s) "
                  "past int64; nothing was written",
                  i, (long long)d->delta, d->post_id_len > 200 ? 200 : (int)d->post_id_len,
                  d->post_id, likes != NULL ? likes : "not a number");
    if (in->refused_out != NULL) {
        *in->refused_out = i;
    }
    /* One post's count is refused, the store is fine: the caller sets that post aside. */
    return HC_ERR_RECORD;
}

/* The offset of one partition moved from expected to next, on condition. */
json_t *ddb_offset_update(const ddb_store_t *ds, const char *group, const char *topic,
                          const hc_store_offset_t *off)
{
    json_t *u;

    if (off->expected == HC_OFFSET_NONE) {
        u = json_pack("{s:s, s:o, s:s, s:s, s:{s:o}}", "TableName", ds->t_offsets, "Key",
                      ddb_offset_item_key(group, topic, off->partition), "UpdateExpression",
                      "SET next_offset = :n", "ConditionExpression",
                      "attribute_not_exists(next_offset)", "ExpressionAttributeValues", ":n",
                      ddb_av_n(off->next));
    } else {
        u = json_pack("{s:s, s:o, s:s, s:s, s:{s:o, s:o}}", "TableName", ds->t_offsets, "Key",
                      ddb_offset_item_key(group, topic, off->partition), "UpdateExpression",
                      "SET next_offset = :n", "ConditionExpression", "next_offset = :e",
                      "ExpressionAttributeValues", ":n", ddb_av_n(off->next), ":e",
                      ddb_av_n(off->expected));
    }
    return json_pack("{s:o}", "Update", u);
}

json_t *ddb_offset_check(const ddb_store_t *ds, const char *group, const char *topic,
                         const hc_store_offset_t *off)
{
    json_t *c;

    if (off->expected == HC_OFFSET_NONE) {
        c = json_pack("{s:s, s:o, s:s}", "TableName", ds->t_offsets, "Key",
                      ddb_offset_item_key(group, topic, off->partition), "ConditionExpression",
                      "attribute_not_exists(next_offset)");
    } else {
        c = json_pack("{s:s, s:o, s:s, s:{s:o}}", "TableName", ds->t_offsets, "Key",
                      ddb_offset_item_key(group, topic, off->partition), "ConditionExpression",
                      "next_offset = :e", "ExpressionAttributeValues", ":e",
                      ddb_av_n(off->expected));
    }
    return json_pack("{s:o}", "ConditionCheck", c);
}

/* Index of the first action whose condition failed, or -1 (no reasons, or none failed). */
long ddb_failed_action(const ddb_reply_t *rep)
{
    const json_t *reasons = json_object_get(rep->body, "CancellationReasons");
    const json_t *r;
    const char *code;
    size_t i;

    json_array_foreach(reasons, i, r)
    {
        code = json_string_value(json_object_get(r, "Code"));
        if (code != NULL && strcmp(code, "ConditionalCheckFailed") == 0) {
            return (long)i;
        }
    }
    return -1;
}

/* Action i's condition failed. */
bool ddb_action_failed(const ddb_reply_t *rep, size_t i)
{
    const char *code = json_string_value(json_object_get(
        json_array_get(json_object_get(rep->body, "CancellationReasons"), i), "Code"));

    return code != NULL && strcmp(code, "ConditionalCheckFailed") == 0;
}

/* The item that reason i of a cancelled transaction returned (ALL_OLD), or NULL. */
const json_t *ddb_reason_item(const ddb_reply_t *rep, size_t i)
{
    return json_object_get(json_array_get(json_object_get(rep->body, "CancellationReasons"), i),
                           "Item");
}

/* The count (an N's text) in such an item, or NULL. */
const char *ddb_item_likes(const json_t *item)
{
    return json_string_value(json_object_get(json_object_get(item, "likes"), "N"));
}

bool ddb_is_cancelled(hc_err_t err, const ddb_reply_t *rep)
{
    return err == HC_ERR_FATAL && strcmp(rep->type, "TransactionCanceledException") == 0;
}

/* TransactWriteItems with a fresh token, kept across the retries of ddb_call. */
hc_err_t ddb_transact(ddb_store_t *ds, json_t *actions, size_t want, bool is_part, ddb_reply_t *rep,
                      char *errstr, size_t errstr_size)
{
    char token[33];
    json_t *req;
    hc_err_t err;

    if (json_array_size(actions) != want) {
        /* An action failed to build (out of memory): never send a transaction short of one. */
        json_decref(actions);
        memset(rep, 0, sizeof(*rep));
        hc_errstr_set(errstr, errstr_size, "dynamodb store: cannot build a transaction");
        return HC_ERR_FATAL;
    }
    ddb_token_new(token);
    req = json_pack("{s:o, s:s, s:s}", "TransactItems", actions, "ClientRequestToken", token,
                    "ReturnConsumedCapacity", "TOTAL");
    if (req == NULL) {
        hc_errstr_set(errstr, errstr_size, "dynamodb store: out of memory");
        memset(rep, 0, sizeof(*rep));
        return HC_ERR_FATAL;
    }
    err = ddb_call(ds, "TransactWriteItems", req, rep, errstr, errstr_size);
    if (err == HC_OK && is_part && ds->hooks != NULL && ds->hooks->resend_parts) {
        /* Test seam: the reply was "lost"; the same request goes out again. Its outcome is what
         * a caller sees. */
        json_decref(rep->body);
        err = ddb_call(ds, "TransactWriteItems", req, rep, errstr, errstr_size);
    }
    json_decref(req);
    return err;
}

void ddb_marker_fini(marker_t *mk)
{
    free(mk->offs);
    memset(mk, 0, sizeof(*mk));
}

hc_err_t ddb_marker_read(ddb_store_t *ds, const ddb_batch_t *b, marker_t *mk, char *errstr,
                         size_t errstr_size)
{
    json_t *req = json_pack("{s:s, s:o, s:b}", "TableName", ds->t_offsets, "Key",
                            ddb_marker_item_key(b), "ConsistentRead", 1);
    ddb_reply_t rep;
    const json_t *item;
    const char *id;
    const char *text;
    hc_err_t err;

    memset(mk, 0, sizeof(*mk));
    err = ddb_call(ds, "GetItem", req, &rep, errstr, errstr_size);
    json_decref(req);
    if (err != HC_OK) {
        json_decref(rep.body);
        return err;
    }
    item = json_object_get(rep.body, "Item");
    if (item == NULL) {
        json_decref(rep.body);
        return HC_OK;
    }
    id = ddb_av_get_s(item, "batch_id", NULL);
    text = ddb_av_get_s(item, "offsets", NULL);
    if (id == NULL || text == NULL || strlen(id) >= sizeof(mk->id) ||
        !ddb_av_get_n(item, "parts_done", &mk->done) ||
        !ddb_av_get_n(item, "parts_total", &mk->total) ||
        !ddb_av_get_n(item, "now_ms", &mk->now_ms) ||
        !ddb_av_get_n(item, "part_deltas", &mk->part_deltas) || mk->part_deltas < 1 ||
        mk->part_deltas > PART_DELTAS || mk->done < 0 || mk->done > mk->total ||
        !offsets_from_text(text, &mk->offs, &mk->offset_count)) {
        json_decref(rep.body);
        hc_errstr_set(errstr, errstr_size, "dynamodb store: malformed batch marker in %s",
                      ds->t_offsets);
        return HC_ERR_FATAL;
    }
    snprintf(mk->id, sizeof(mk->id), "%s", id);
    mk->present = true;
    json_decref(rep.body);
    return HC_OK;
}
