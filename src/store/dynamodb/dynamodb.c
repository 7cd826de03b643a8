/* The DynamoDB store: "dynamodb://REGION[/PREFIX][?endpoint=URL&profile=NAME]".
 *
 * REGION empty: AWS_REGION, then AWS_DEFAULT_REGION. PREFIX (default "hotcount_") names the three
 * tables PREFIXcounts, PREFIXoffsets, PREFIXstaging. endpoint overrides
 * https://dynamodb.REGION.amazonaws.com (a local DynamoDB-API server). Credentials: the
 * environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN), else the profile
 * (profile=, AWS_PROFILE, "default") of AWS_SHARED_CREDENTIALS_FILE or ~/.aws/credentials. No
 * message of this file ever contains a credential or the URI past its scheme.
 *
 * Layout (docs/DYNAMODB.md):
 *   PREFIXcounts   post_id (S, hash key), likes (N), updated_at (N, ms since the epoch)
 *   PREFIXoffsets  group (S, hash key), key (S, range key):
 *                    "<topic>/<partition>"  next_offset (N): the next offset to read
 *                    "<topic>#batch"        the progress marker of a split batch in flight
 *   PREFIXstaging  batch (S, hash key), part (N, range key): the parts of a split batch
 *
 * apply. A batch whose deltas and offsets fit one TransactWriteItems (100 actions) is one
 * transaction: each offset updated on condition that it equals `expected`, the marker checked
 * absent, each count ADDed. A bigger batch runs the multi-part protocol of docs/DYNAMODB.md:
 *   0. its deltas sorted by post id and cut into parts of PART_DELTAS: the same batch always
 *      gives the same parts; its id hashes (group, topic, offsets, deltas);
 *   1. stage: every part written to the staging table (idempotent puts);
 *   2. begin: one transaction checks every offset equals `expected` and puts the marker
 *      {batch_id, parts_total, parts_done = 0, the offsets, now_ms} where none exists. From here
 *      on the batch is decided: whoever finds the marker finishes it, from the staged parts;
 *   3. parts: part j is one transaction: its count updates, the marker's parts_done moved from
 *      j to j + 1 on condition batch_id and parts_done = j, the staged part deleted;
 *   4. finish: one transaction moves every offset and deletes the marker, on condition that
 *      parts_done = parts_total.
 * A marker of another batch is rolled forward (3 and 4 from the staging table) before an apply
 * does anything else on that group and topic, so a new owner finishes a dead owner's batch
 * whatever it re-reads (read_offsets leaves it alone: its offsets have not moved). A zombie's part
 * fails its condition. Offsets move only in 4. Each request carries a ClientRequestToken fixed for
 * its retries.
 *
 * Reads: read_offsets is BatchGetItem (strongly consistent); get is BatchGetItem; top and
 * foreach Scan the counts table (strongly consistent pages; each page as of its own moment, as
 * Redis' SCAN: consistent while nothing writes). A Scan reads the whole table: about one read
 * unit per 4 KB of items, so `top` on 10 million posts reads ~1 GB and costs ~250 000 units.
 *
 * Errors: connection failures, timeouts, 5xx, HTTP 429, throttling
 * (ProvisionedThroughputExceeded, Throttling, RequestLimitExceeded, a cancelled transaction whose
 * reasons are throttling) and transaction conflicts are retried here with capped exponential
 * back-off and full jitter, then HC_ERR_TRANSIENT. One apply, every request and back-off of it
 * included, ends by cfg->timeouts.store_batch_ms: past that it returns HC_ERR_TRANSIENT where it
 * stands (a request cut short is an ambiguous one), and the next apply of the group rolls the
 * begun batch forward from its marker, so a batch of thousands of slow requests is finished over
 * several applies instead of holding stage 2 in one call. batch->on_progress is called after
 * each write request that got through (a staged BatchWriteItem, the begin, each part, including
 * a rolled-forward batch's, the finish, a single transaction). A missing table is HC_ERR_FATAL
 * ("run hotcount init"); other 4xx are HC_ERR_FATAL with DynamoDB's error type and message. A
 * delta that would take a count past int64 (DynamoDB's numbers would hold it) is HC_ERR_RECORD
 * naming the post: each count update is conditional on staying inside int64, and a split batch
 * checks its counts before it begins (docs/DYNAMODB.md, "Counts past int64"). */

#include "ddb_impl.h"

/* ---- opening: URI, credentials ---- */

static bool prefix_ok(const char *p, size_t len)
{
    size_t i;

    for (i = 0; i < len; i++) {
        char c = p[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-' || c == '.')) {
            return false;
        }
    }
    return len <= 200;
}

static char *dup_n(const char *s, size_t n)
{
    char *p = malloc(n + 1);

    if (p != NULL) {
        memcpy(p, s, n);
        p[n] = '\0';
    }
    return p;
}

static hc_err_t parse_uri(ddb_store_t *ds, const char *uri, char **profile_out, char *errstr,
                          size_t errstr_size)
{
    const char *p = uri + strlen(DDB_URI_PREFIX);
    size_t region_len = strcspn(p, "/?");
    const char *prefix = DDB_DEFAULT_PREFIX;
    size_t prefix_len = strlen(DDB_DEFAULT_PREFIX);
    char region[64];
    const char *q;
    const char *endpoint = NULL;
    size_t endpoint_len = 0;

    if (region_len >= sizeof(region)) {
        hc_errstr_set(errstr, errstr_size, "dynamodb store: region too long (%s)", DDB_URI_FORM);
        return HC_ERR_INVALID;
    }
    memcpy(region, p, region_len);
    region[region_len] = '\0';
    if (region[0] == '\0') {
        const char *env = getenv("AWS_REGION");
        if (env == NULL || env[0] == '\0') {
            env = getenv("AWS_DEFAULT_REGION");
        }
        if (env == NULL || env[0] == '\0' || strlen(env) >= sizeof(region)) {
            hc_errstr_set(errstr, errstr_size,
                          "dynamodb store: no region (in the URI, AWS_REGION or "
                          "AWS_DEFAULT_REGION; %s)",
                          DDB_URI_FORM);
            return HC_ERR_INVALID;
        }
        snprintf(region, sizeof(region), "%s", env);
    }
    if (!prefix_ok(region, strlen(region))) {
        hc_errstr_set(errstr, errstr_size, "dynamodb store: bad region (%s)", DDB_URI_FORM);
        return HC_ERR_INVALID;
    }
    p += region_len;
    if (*p == '/') {
        p++;
        prefix = p;
        prefix_len = strcspn(p, "?");
        p += prefix_len;
        if (prefix_len == 0) {
            prefix = DDB_DEFAULT_PREFIX;
            prefix_len = strlen(DDB_DEFAULT_PREFIX);
        }
    }
    if (!prefix_ok(prefix, prefix_len)) {
        hc_errstr_set(errstr, errstr_size,
                      "dynamodb store: the table prefix takes [A-Za-z0-9_.-], at most 200");
        return HC_ERR_INVALID;
    }
    if (*p == '?') {
        p++;
    }
    ds->top_pages = DDB_TOP_PAGES;
    while (*p != '\0') {
        size_t len = strcspn(p, "&");
        q = memchr(p, '=', len);
        if (q != NULL && (size_t)(q - p) == 8 && strncmp(p, "endpoint", 8) == 0) {
            endpoint = q + 1;
            endpoint_len = len - 9;
        } else if (q != NULL && (size_t)(q - p) == 7 && strncmp(p, "profile", 7) == 0) {
            free(*profile_out);
            *profile_out = dup_n(q + 1, len - 8);
        } else if (q != NULL && (size_t)(q - p) == 9 && strncmp(p, "top_pages", 9) == 0) {
            long v = 0;
            size_t i;
            for (i = 10; i < len && p[i] >= '0' && p[i] <= '9' && v <= DDB_TOP_PAGES_MAX; i++) {
                v = v * 10 + (p[i] - '0');
            }
            if (i != len || len == 10 || v < 1 || v > DDB_TOP_PAGES_MAX) {
                hc_errstr_set(errstr, errstr_size,
                              "dynamodb store: top_pages must be 1..%d (Scan pages one top "
                              "reads)",
                              DDB_TOP_PAGES_MAX);
                return HC_ERR_INVALID;
            }
            ds->top_pages = v;
        } else {
            hc_errstr_set(errstr, errstr_size,
                          "dynamodb store: unknown URI parameter \"%.*s\" (endpoint, profile, "
                          "top_pages)",
                          q != NULL ? (int)(q - p) : (int)(len > 32 ? 32 : len), p);
            return HC_ERR_INVALID;
        }
        p += len;
        if (*p == '&') {
            p++;
        }
    }
    snprintf(ds->sigv4, sizeof(ds->sigv4), "aws:amz:%s:dynamodb", region);
    snprintf(ds->t_counts, sizeof(ds->t_counts), "%.*scounts", (int)prefix_len, prefix);
    snprintf(ds->t_offsets, sizeof(ds->t_offsets), "%.*soffsets", (int)prefix_len, prefix);
    snprintf(ds->t_staging, sizeof(ds->t_staging), "%.*sstaging", (int)prefix_len, prefix);
    if (endpoint != NULL) {
        if (strncmp(endpoint, "http://", 7) != 0 && strncmp(endpoint, "https://", 8) != 0) {
            hc_errstr_set(errstr, errstr_size,
                          "dynamodb store: endpoint must start with http:// or https://");
            return HC_ERR_INVALID;
        }
        ds->endpoint = dup_n(endpoint, endpoint_len);
    } else {
        size_t n = strlen("https://dynamodb..amazonaws.com/") + strlen(region) + 1;
        ds->endpoint = malloc(n);
        if (ds->endpoint != NULL) {
            snprintf(ds->endpoint, n, "https://dynamodb.%s.amazonaws.com/", region);
        }
    }
    if (ds->endpoint == NULL) {
        hc_errstr_set(errstr, errstr_size, "dynamodb store: out of memory");
        return HC_ERR_FATAL;
    }
    return HC_OK;
}

static void ddb_close(hc_store_t *st)
{
    ddb_store_t *ds = ddb_store(st);

    if (ds == NULL) {
        return;
    }
    if (ds->curl != NULL) {
        curl_easy_cleanup(ds->curl);
    }
    if (ds->cred_hdr != NULL) {
        explicit_bzero(ds->cred_hdr->data, strlen(ds->cred_hdr->data));
        curl_slist_free_all(ds->cred_hdr);
    }
    if (ds->observer != NULL) {
        ds->observer->destroy(ds->observer);
    }
    ddb_wipe_free(ds->userpwd);
    free(ds->endpoint);
    free(ds->resp);
    free(ds);
}

static hc_err_t ddb_open(const hc_config_t *cfg, hc_store_t **stp, char *errstr, size_t errstr_size)
{
    ddb_store_t *ds;
    char *profile = NULL;
    hc_err_t err;

    *stp = NULL;
    if (strncmp(cfg->store, DDB_URI_PREFIX, strlen(DDB_URI_PREFIX)) != 0) {
        hc_errstr_set(errstr, errstr_size, "store: bad dynamodb URI (expected %s)", DDB_URI_FORM);
        return HC_ERR_INVALID;
    }
    if (ddb_curl_init() != CURLE_OK) {
        hc_errstr_set(errstr, errstr_size, "dynamodb store: libcurl failed to initialise");
        return HC_ERR_FATAL;
    }
    ds = calloc(1, sizeof(*ds));
    if (ds == NULL) {
        hc_errstr_set(errstr, errstr_size, "dynamodb store: out of memory");
        return HC_ERR_FATAL;
    }
    ds->base.ops = hc_store_dynamodb_backend.ops;
    {
        hc_timeouts_t scratch;
        ds->batch_ms = hc_store_timeouts(cfg, &scratch)->store_batch_ms;
    }
    err = parse_uri(ds, cfg->store, &profile, errstr, errstr_size);
    if (err == HC_OK) {
        err = ddb_load_credentials(ds, profile, errstr, errstr_size);
    }
    free(profile);
    if (err != HC_OK) {
        goto fail_close;
    }
    ds->curl = curl_easy_init();
    if (ds->curl == NULL) {
        hc_errstr_set(errstr, errstr_size, "dynamodb store: curl_easy_init failed");
        err = HC_ERR_FATAL;
        goto fail_close;
    }
    curl_easy_setopt(ds->curl, CURLOPT_URL, ds->endpoint);
    curl_easy_setopt(ds->curl, CURLOPT_AWS_SIGV4, ds->sigv4);
    curl_easy_setopt(ds->curl, CURLOPT_USERPWD, ds->userpwd);
    curl_easy_setopt(ds->curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(ds->curl, CURLOPT_TIMEOUT_MS, (long)DDB_REQUEST_TIMEOUT_MS);
    curl_easy_setopt(ds->curl, CURLOPT_CONNECTTIMEOUT_MS, (long)DDB_CONNECT_TIMEOUT_MS);
    curl_easy_setopt(ds->curl, CURLOPT_WRITEFUNCTION, ddb_on_body);
    curl_easy_setopt(ds->curl, CURLOPT_WRITEDATA, ds);
    curl_easy_setopt(ds->curl, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(ds->curl, CURLOPT_PROTOCOLS_STR, "http,https");
    *stp = &ds->base;
    return HC_OK;

fail_close:
    ddb_close(&ds->base);
    return err;
}

/* ---- init ---- */

static hc_err_t create_table(ddb_store_t *ds, const char *name, const char *hash_key,
                             const char *range_key, const char *range_type, char *errstr,
                             size_t errstr_size)
{
    json_t *req;
    ddb_reply_t rep;
    hc_err_t err;

    if (range_key == NULL) {
        req = json_pack("{s:s, s:s, s:[{s:s, s:s}], s:[{s:s, s:s}]}", "TableName", name,
                        "BillingMode", "PAY_PER_REQUEST", "KeySchema", "AttributeName", hash_key,
                        "KeyType", "HASH", "AttributeDefinitions", "AttributeName", hash_key,
                        "AttributeType", "S");
    } else {
        req = json_pack("{s:s, s:s, s:[{s:s, s:s}, {s:s, s:s}], s:[{s:s, s:s}, {s:s, s:s}]}",
                        "TableName", name, "BillingMode", "PAY_PER_REQUEST", "KeySchema",
                        "AttributeName", hash_key, "KeyType", "HASH", "AttributeName", range_key,
                        "KeyType", "RANGE", "AttributeDefinitions", "AttributeName", hash_key,
                        "AttributeType", "S", "AttributeName", range_key, "AttributeType",
                        range_type);
    }
    err = ddb_call(ds, "CreateTable", req, &rep, errstr, errstr_size);
    json_decref(req);
    if (err == HC_ERR_FATAL && strcmp(rep.type, "ResourceInUseException") == 0) {
        err = HC_OK; /* it exists: init is safe to repeat */
    }
    json_decref(rep.body);
    return err;
}

/* Waits until the table is ACTIVE (DynamoDB creates tables asynchronously, in seconds). */
static hc_err_t wait_active(ddb_store_t *ds, const char *name, char *errstr, size_t errstr_size)
{
    int64_t deadline = hc_now_ms() + 120000;
    json_t *req = json_pack("{s:s}", "TableName", name);
    ddb_reply_t rep;
    hc_err_t err;
    const char *status;

    for (;;) {
        err = ddb_call(ds, "DescribeTable", req, &rep, errstr, errstr_size);
        status = err == HC_OK ? json_string_value(json_object_get(
                                    json_object_get(rep.body, "Table"), "TableStatus"))
                              : NULL;
        if (status != NULL && strcmp(status, "ACTIVE") == 0) {
            json_decref(rep.body);
            break;
        }
        json_decref(rep.body);
        if ((err != HC_OK && err != HC_ERR_TRANSIENT) || hc_now_ms() > deadline) {
            if (err == HC_OK) {
                hc_errstr_set(errstr, errstr_size, "dynamodb: table %s not ACTIVE after 120 s",
                              name);
                err = HC_ERR_TRANSIENT;
            }
            json_decref(req);
            return err;
        }
        hc_sleep_ms(500);
    }
    json_decref(req);
    return HC_OK;
}

static hc_err_t ddb_init_schema(hc_store_t *st, char *errstr, size_t errstr_size)
{
    ddb_store_t *ds = ddb_store(st);
    ddb_reply_t rep;
    json_t *req;
    hc_err_t err;

    err = create_table(ds, ds->t_counts, "post_id", NULL, NULL, errstr, errstr_size);
    if (err == HC_OK) {
        err = create_table(ds, ds->t_offsets, "group", "key", "S", errstr, errstr_size);
    }
    if (err == HC_OK) {
        err = create_table(ds, ds->t_staging, "batch", "part", "N", errstr, errstr_size);
    }
    if (err == HC_OK) {
        err = wait_active(ds, ds->t_counts, errstr, errstr_size);
    }
    if (err == HC_OK) {
        err = wait_active(ds, ds->t_offsets, errstr, errstr_size);
    }
    if (err == HC_OK) {
        err = wait_active(ds, ds->t_staging, errstr, errstr_size);
    }
    if (err != HC_OK) {
        return err;
    }
    /* Abandoned staged parts expire (best effort: a second init finds TTL already on, which
     * DynamoDB answers with a ValidationException). */
    req = json_pack("{s:s, s:{s:b, s:s}}", "TableName", ds->t_staging, "TimeToLiveSpecification",
                    "Enabled", 1, "AttributeName", "expires_at");
    err = ddb_call(ds, "UpdateTimeToLive", req, &rep, errstr, errstr_size);
    json_decref(req);
    json_decref(rep.body);
    if (err == HC_ERR_FATAL) {
        err = HC_OK;
        if (errstr != NULL && errstr_size > 0) {
            errstr[0] = '\0';
        }
    }
    return err;
}

static const hc_store_ops_t dynamodb_ops = {
    .kind = "dynamodb",
    .open = ddb_open,
    .close = ddb_close,
    .init_schema = ddb_init_schema,
    .read_offsets = ddb_read_offsets,
    .apply = ddb_apply,
    .get = ddb_get,
    .top = ddb_top,
    .foreach = ddb_foreach,
};

static const char *const ddb_schemes[] = {DDB_URI_PREFIX, NULL};

static int64_t ddb_statements_per_batch(int64_t max_keys)
{
    /* one HTTP request per call (DDB_REQUEST_TIMEOUT_MS each), a transaction per
     * TXN_MAX_ACTIONS items; a batch is bounded as a whole by store_batch_ms */
    return (max_keys + TXN_MAX_ACTIONS - 1) / TXN_MAX_ACTIONS + 1;
}

const hc_store_backend_t hc_store_dynamodb_backend = {
    .facts =
        {
            .name = "dynamodb",
            .title = "DynamoDB",
            .schemes = ddb_schemes,
            .uri_form = DDB_URI_FORM,
            .takes_password_file = false,
            .connect_ms = HC_STORE_CONNECT_MS,
            .statement_ms = DDB_REQUEST_TIMEOUT_MS,
            .statements_per_batch = ddb_statements_per_batch,
        },
    .ops = &dynamodb_ops,
};
