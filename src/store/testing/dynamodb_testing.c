/* The test-only side of the DynamoDB backend (store_testing.h): the cost meter, the fault
 * hooks and the table peek. Linked by the tests and the benchmark, never by hotcount. */
#include "ddb_impl.h"
#include "store_testing.h"

#include <assert.h>

/* The cost meter of one handle: an observer of its answered requests (ddb_seam.h). */
typedef struct meter {
    ddb_observer_t obs; /* first: the handle holds &obs */
    const ddb_store_t *ds;
    hc_ddb_usage_t usage;
    size_t marker_bytes; /* the size of the marker this handle last wrote or read */
} meter_t;

/* ---- cost: capacity units by DynamoDB's published rules (docs/DYNAMODB.md, "Cost") ----
 *
 * An item's size is the sum of its attribute names' and values' sizes: a string its UTF-8
 * bytes, a number 1 byte per two significant digits plus 1, a list or map 3 bytes plus its
 * elements plus 1 byte each. A write costs 1 unit per KB of the item (the larger of before and
 * after), rounded up, 2 in a transaction (a ConditionCheck priced as such a write: the docs say
 * less, see docs/DYNAMODB.md); a strongly consistent read 1 unit per 4 KB. */

static size_t n_text_bytes(const char *s)
{
    size_t digits = 0;
    size_t zeros = 0; /* trailing zeros seen so far, dropped unless a digit follows */
    bool lead = true;

    for (; s != NULL && *s != '\0'; s++) {
        if (*s < '0' || *s > '9') {
            continue;
        }
        if (*s == '0') {
            if (!lead) {
                zeros++;
            }
            continue;
        }
        lead = false;
        digits += zeros + 1;
        zeros = 0;
    }
    return (digits + 1) / 2 + 1;
}

static size_t av_bytes(const json_t *v)
{
    const char *type;
    json_t *inner;
    size_t n = 0;

    json_object_foreach((json_t *)v, type, inner)
    {
        if (strcmp(type, "S") == 0) {
            n += json_string_length(inner);
        } else if (strcmp(type, "N") == 0) {
            n += n_text_bytes(json_string_value(inner));
        } else if (strcmp(type, "L") == 0) {
            const json_t *e;
            size_t i;
            n += 3;
            json_array_foreach(inner, i, e)
            {
                n += av_bytes(e) + 1;
            }
        } else if (strcmp(type, "M") == 0) {
            const char *k;
            json_t *e;
            n += 3;
            json_object_foreach(inner, k, e)
            {
                n += strlen(k) + av_bytes(e) + 1;
            }
        } else {
            n += 1; /* BOOL, NULL; hotcount writes no binary */
        }
    }
    return n;
}

static size_t item_bytes(const json_t *item)
{
    const char *name;
    json_t *v;
    size_t n = 0;

    json_object_foreach((json_t *)item, name, v)
    {
        n += strlen(name) + av_bytes(v);
    }
    return n;
}

/* Units of an item of `bytes` per `unit` bytes, rounded up; at least 1. */
static double units_of(size_t bytes, size_t unit)
{
    return bytes == 0 ? 1.0 : (double)((bytes + unit - 1) / unit);
}

/* Bounds of what an update leaves beside the key: a count's likes (an int64: 19 digits) and
 * updated_at (ms since the epoch: 13 digits); an offset's next_offset. */
#define COUNT_REST_BYTES (5 + 11 + 10 + 8)
#define OFFSET_REST_BYTES (11 + 11)

/* The size of the item a transaction's action writes or checks, by the layout. A part's staged
 * item holds exactly the ids and deltas of that transaction's count updates. */
static size_t action_bytes(const meter_t *m, const char *kind, const json_t *a, size_t staged_bytes)
{
    const char *table = json_string_value(json_object_get(a, "TableName"));
    const json_t *key = json_object_get(a, "Key");
    const char *k;

    if (strcmp(kind, "Put") == 0) {
        return item_bytes(json_object_get(a, "Item"));
    }
    if (table == NULL) {
        return 0;
    }
    if (strcmp(table, m->ds->t_counts) == 0) {
        return item_bytes(key) + COUNT_REST_BYTES;
    }
    if (strcmp(table, m->ds->t_staging) == 0) {
        return staged_bytes;
    }
    k = ddb_av_get_s(key, "key", NULL);
    if (k != NULL && strlen(k) > 6 && strcmp(k + strlen(k) - 6, "#batch") == 0) {
        /* the marker: a ConditionCheck that it is absent finds no item (the minimum) */
        return strcmp(kind, "ConditionCheck") == 0 ? 0 : m->marker_bytes;
    }
    return item_bytes(key) + OFFSET_REST_BYTES;
}

/* Which table's tally an action's units go to. */
static double *tally_of(meter_t *m, const json_t *a)
{
    const char *table = json_string_value(json_object_get(a, "TableName"));

    if (table != NULL && strcmp(table, m->ds->t_counts) == 0) {
        return &m->usage.write_units_counts;
    }
    if (table != NULL && strcmp(table, m->ds->t_staging) == 0) {
        return &m->usage.write_units_staging;
    }
    return &m->usage.write_units_offsets;
}

static void account_transaction(meter_t *m, const json_t *req, bool committed)
{
    const json_t *acts = json_object_get(req, "TransactItems");
    const json_t *e;
    size_t staged = 0;
    size_t i;

    /* A part's staged item: its batch and part (the Delete's key), the ids and the deltas of
     * the count updates, expires_at. */
    json_array_foreach(acts, i, e)
    {
        const json_t *a = json_object_get(e, "Update");
        const json_t *d = json_object_get(e, "Delete");
        const char *t = json_string_value(json_object_get(a != NULL ? a : d, "TableName"));
        if (a != NULL && t != NULL && strcmp(t, m->ds->t_counts) == 0) {
            staged +=
                av_bytes(json_object_get(json_object_get(a, "Key"), "post_id")) + 1 +
                av_bytes(json_object_get(json_object_get(a, "ExpressionAttributeValues"), ":d")) +
                1;
        } else if (d != NULL && t != NULL && strcmp(t, m->ds->t_staging) == 0) {
            staged += item_bytes(json_object_get(d, "Key")) + 3 + 3 + 6 + 3 + 10 + 6;
        }
    }
    json_array_foreach(acts, i, e)
    {
        const char *kind;
        json_t *a;
        json_object_foreach((json_t *)e, kind, a)
        {
            double u = 2.0 * units_of(action_bytes(m, kind, a, staged), 1024);
            if (!committed) {
                m->usage.write_units_cancelled += u;
                continue;
            }
            *tally_of(m, a) += u;
            m->usage.write_units += u;
            if (strcmp(kind, "Put") == 0 &&
                strcmp(json_string_value(json_object_get(a, "TableName")), m->ds->t_offsets) == 0) {
                m->marker_bytes = item_bytes(json_object_get(a, "Item"));
            }
        }
    }
    if (committed) {
        m->usage.transactions++;
    } else {
        m->usage.cancelled++;
    }
}

/* What an answered request cost (the rules above) and what the server said it cost. */
static void account(meter_t *m, const char *op, const json_t *req, const json_t *body, bool ok)
{
    const json_t *cc = json_object_get(body, "ConsumedCapacity");
    const json_t *e;
    size_t i;

    bool writes = strcmp(op, "TransactWriteItems") == 0 || strcmp(op, "BatchWriteItem") == 0;
    uint64_t *replies = writes ? &m->usage.reported_write_replies : &m->usage.reported_read_replies;
    double *units = writes ? &m->usage.reported_write_units : &m->usage.reported_read_units;

    m->usage.requests++;
    m->usage.write_requests += writes;
    if (json_is_object(cc) && json_object_get(cc, "CapacityUnits") != NULL) {
        (*replies)++;
        *units += json_number_value(json_object_get(cc, "CapacityUnits"));
    } else if (json_is_array(cc) && json_array_size(cc) > 0) {
        (*replies)++;
        json_array_foreach(cc, i, e)
        {
            *units += json_number_value(json_object_get(e, "CapacityUnits"));
        }
    }
    if (strcmp(op, "TransactWriteItems") == 0) {
        account_transaction(m, req, ok);
    } else if (!ok) {
        return;
    } else if (strcmp(op, "BatchWriteItem") == 0) {
        const json_t *puts =
            json_object_get(json_object_get(req, "RequestItems"), m->ds->t_staging);
        const json_t *left =
            json_object_get(json_object_get(body, "UnprocessedItems"), m->ds->t_staging);
        double u = 0;
        json_array_foreach(puts, i, e)
        {
            u += units_of(item_bytes(json_object_get(json_object_get(e, "PutRequest"), "Item")),
                          1024);
        }
        /* unprocessed puts are sent (and charged) again */
        json_array_foreach(left, i, e)
        {
            u -= units_of(item_bytes(json_object_get(json_object_get(e, "PutRequest"), "Item")),
                          1024);
        }
        m->usage.write_units += u;
        m->usage.write_units_staging += u;
    } else if (strcmp(op, "GetItem") == 0) {
        const json_t *item = json_object_get(body, "Item");
        m->usage.read_units += units_of(item_bytes(item), 4096);
        if (json_object_get(item, "batch_id") != NULL) {
            m->marker_bytes = item_bytes(item);
        }
    } else if (strcmp(op, "BatchGetItem") == 0) {
        const char *table;
        json_t *ask;
        json_object_foreach(json_object_get((json_t *)req, "RequestItems"), table, ask)
        {
            /* each key at least one unit, found or not; our items are all under 4 KB */
            m->usage.read_units += (double)json_array_size(json_object_get(ask, "Keys"));
            m->usage.read_units -= (double)json_array_size(json_object_get(
                json_object_get(json_object_get(body, "UnprocessedKeys"), table), "Keys"));
        }
    } else if (strcmp(op, "Scan") == 0) {
        size_t bytes = 0;
        json_array_foreach(json_object_get(body, "Items"), i, e)
        {
            bytes += item_bytes(e);
        }
        m->usage.read_units += units_of(bytes, 4096);
    }
}

static void meter_on_reply(ddb_observer_t *obs, const char *op, const json_t *req,
                           const json_t *body, bool ok)
{
    account((meter_t *)obs, op, req, body, ok);
}

static void meter_destroy(ddb_observer_t *obs)
{
    free(obs);
}

hc_err_t hc_store_dynamodb_meter(hc_store_t *st)
{
    ddb_store_t *ds = ddb_store(st);
    meter_t *m;

    assert(strcmp(hc_store_kind(st), "dynamodb") == 0 && ds->observer == NULL);
    m = calloc(1, sizeof(*m));
    if (m == NULL) {
        return HC_ERR_FATAL;
    }
    m->obs.on_reply = meter_on_reply;
    m->obs.destroy = meter_destroy;
    m->ds = ds;
    ds->observer = &m->obs;
    return HC_OK;
}

void hc_store_dynamodb_usage(hc_store_t *st, hc_ddb_usage_t *out)
{
    const ddb_store_t *ds = ddb_store(st);

    assert(ds->observer != NULL && ds->observer->on_reply == meter_on_reply);
    *out = ((const meter_t *)ds->observer)->usage;
}

void hc_store_dynamodb_set_test_hooks(hc_store_t *st, const hc_ddb_test_hooks_t *hooks)
{
    ddb_store(st)->hooks = hooks;
}

hc_err_t hc_store_dynamodb_test_peek(hc_store_t *st, const char *group, const char *topic,
                                     int32_t partition, int64_t *offset, int64_t *parts_done,
                                     char *errstr, size_t errstr_size)
{
    ddb_store_t *ds = ddb_store(st);
    ddb_batch_t key;
    marker_t mk;
    hc_err_t err;

    memset(&key, 0, sizeof(key));
    ddb_marker_key_of(&key, group, topic);
    err = ddb_marker_read(ds, &key, &mk, errstr, errstr_size);
    *parts_done = mk.present ? mk.done : -1;
    ddb_marker_fini(&mk);
    if (err != HC_OK) {
        return err;
    }
    return ddb_offsets_read(ds, group, topic, &partition, 1, offset, errstr, errstr_size);
}
