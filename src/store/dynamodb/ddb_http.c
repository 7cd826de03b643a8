/* The DynamoDB backend's requests: JSON attribute values, one signed HTTP request (libcurl's
 * SigV4) with its retries, back-off and the running apply's deadline, and the error classes. */
#include "ddb_impl.h"

ddb_store_t *ddb_store(hc_store_t *st)
{
    return (ddb_store_t *)st;
}

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_global_rc;

static void curl_global(void)
{
    curl_global_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

/* libcurl's global initialisation, once per process: its result. */
CURLcode ddb_curl_init(void)
{
    pthread_once(&curl_once, curl_global);
    return curl_global_rc;
}

/* ---- JSON helpers ---- */

json_t *ddb_av_s(const char *s, size_t len)
{
    return json_pack("{s:s%}", "S", s, len);
}

json_t *ddb_av_n(int64_t n)
{
    char buf[32];

    snprintf(buf, sizeof(buf), "%" PRId64, n);
    return json_pack("{s:s}", "N", buf);
}

bool ddb_av_get_n(const json_t *item, const char *name, int64_t *out)
{
    const char *s = json_string_value(json_object_get(json_object_get(item, name), "N"));
    char *end;
    long long v;

    if (s == NULL) {
        return false;
    }
    errno = 0;
    v = strtoll(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0') {
        return false;
    }
    *out = (int64_t)v;
    return true;
}

const char *ddb_av_get_s(const json_t *item, const char *name, size_t *len)
{
    const json_t *s = json_object_get(json_object_get(item, name), "S");

    if (!json_is_string(s)) {
        return NULL;
    }
    if (len != NULL) {
        *len = json_string_length(s);
    }
    return json_string_value(s);
}

/* ---- random numbers and hashes ---- */

uint64_t ddb_rand64(void)
{
    uint64_t v = 0;

    if (getrandom(&v, sizeof(v), 0) != (ssize_t)sizeof(v)) {
        v = (uint64_t)hc_now_ms() * 0x9e3779b97f4a7c15ULL ^ (uint64_t)(uintptr_t)&v;
    }
    return v;
}

void ddb_hash_bytes(hash2_t *h, const void *data, size_t len)
{
    h->a = hc_fnv1a64(h->a, data, len);
    h->b = hc_fnv1a64(h->b, data, len);
}

void ddb_hash_i64(hash2_t *h, int64_t v)
{
    ddb_hash_bytes(h, &v, sizeof(v));
}

void ddb_token_new(char out[33])
{
    snprintf(out, 33, "%016" PRIx64 "%016" PRIx64, ddb_rand64(), ddb_rand64());
}

/* ---- HTTP ---- */

size_t ddb_on_body(char *data, size_t size, size_t nmemb, void *opaque)
{
    ddb_store_t *ds = opaque;
    size_t n = size * nmemb;
    size_t cap;
    char *p;

    if (ds->resp_len + n + 1 > ds->resp_cap) {
        cap = ds->resp_cap == 0 ? 16384 : ds->resp_cap;
        while (cap < ds->resp_len + n + 1) {
            cap *= 2;
        }
        p = realloc(ds->resp, cap);
        if (p == NULL) {
            return 0; /* curl reports CURLE_WRITE_ERROR */
        }
        ds->resp = p;
        ds->resp_cap = cap;
    }
    memcpy(ds->resp + ds->resp_len, data, n);
    ds->resp_len += n;
    ds->resp[ds->resp_len] = '\0';
    return n;
}

static bool retryable_type(const char *type)
{
    static const char *const types[] = {
        "ProvisionedThroughputExceededException",
        "ThrottlingException",
        "RequestLimitExceeded",
        "InternalServerError",
        "ServiceUnavailable",
        "TransactionInProgressException",
        "LimitExceededException",
        "Throttling",
        "TooManyRequestsException",
        "ReplicatedWriteConflictException",
    };
    size_t i;

    for (i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
        if (strcmp(type, types[i]) == 0) {
            return true;
        }
    }
    return false;
}

/* A TransactionCanceledException whose reasons include TransactionConflict or throttling is
 * "not now", not a lost condition: retry the same request. */
static bool cancel_is_transient(const json_t *body)
{
    const json_t *reasons = json_object_get(body, "CancellationReasons");
    const json_t *r;
    const char *code;
    size_t i;

    json_array_foreach(reasons, i, r)
    {
        code = json_string_value(json_object_get(r, "Code"));
        if (code != NULL &&
            (strcmp(code, "TransactionConflict") == 0 || strcmp(code, "ThrottlingError") == 0 ||
             strcmp(code, "ProvisionedThroughputExceeded") == 0)) {
            return true;
        }
    }
    return false;
}

/* What is left of the running apply's store_batch_ms, or INT64_MAX outside an apply. */
static int64_t time_left(const ddb_store_t *ds)
{
    return ds->deadline_ms > 0 ? ds->deadline_ms - hc_now_ms() : INT64_MAX;
}

/* Full jitter over a capped exponential, never past the apply's deadline. */
void ddb_backoff(const ddb_store_t *ds, int attempt)
{
    int64_t cap = DDB_BACKOFF_BASE_MS << (attempt < 6 ? attempt : 6);
    int64_t ms;
    int64_t left = time_left(ds);

    if (cap > DDB_BACKOFF_CAP_MS) {
        cap = DDB_BACKOFF_CAP_MS;
    }
    ms = (int64_t)(ddb_rand64() % (uint64_t)(cap + 1));
    hc_sleep_ms(ms < left ? ms : left > 0 ? left : 0);
}

/* A write request of the running apply got through: tell its caller (hotcount/store.h). */
void ddb_progress(const ddb_store_t *ds)
{
    if (ds->cur != NULL && ds->cur->on_progress != NULL) {
        ds->cur->on_progress(ds->cur->progress_opaque);
    }
}

/* HC_ERR_TRANSIENT once the running apply has used its store_batch_ms. */
static hc_err_t past_deadline(const ddb_store_t *ds, const char *op, char *errstr,
                              size_t errstr_size)
{
    if (time_left(ds) > 0) {
        return HC_OK;
    }
    hc_errstr_set(errstr, errstr_size,
                  "dynamodb %s: the batch took longer than store_batch_ms (%" PRId64
                  " ms); a begun batch goes on from its marker at the next apply",
                  op, ds->batch_ms);
    return HC_ERR_TRANSIENT;
}

/* Sends one DynamoDB request (op, body req), retrying what may succeed later. HC_OK: 2xx, reply
 * parsed into rep->body. HC_ERR_FATAL with rep->type set: DynamoDB refused it (the caller may
 * recognise the type, e.g. a cancelled transaction or a missing table); rep->body holds the
 * error. HC_ERR_TRANSIENT: no answer worth having after DDB_ATTEMPTS. rep->body may be set in
 * every case and is the caller's to json_decref. */
hc_err_t ddb_call(ddb_store_t *ds, const char *op, json_t *req, ddb_reply_t *rep, char *errstr,
                  size_t errstr_size)
{
    char target[96];
    char curl_err[CURL_ERROR_SIZE];
    struct curl_slist *hdrs = NULL;
    struct curl_slist *h;
    char *payload;
    CURLcode rc = CURLE_OK;
    const char *type;
    const char *msg;
    hc_err_t err = HC_ERR_TRANSIENT;
    int64_t timeout_ms;
    int64_t t0;
    int attempt;

    memset(rep, 0, sizeof(*rep));
    if (strncmp(op, "Batch", 5) == 0 || strcmp(op, "GetItem") == 0 || strcmp(op, "Scan") == 0) {
        json_object_set_new(req, "ReturnConsumedCapacity", json_string("TOTAL"));
    }
    payload = json_dumps(req, JSON_COMPACT);
    if (payload == NULL) {
        hc_errstr_set(errstr, errstr_size, "dynamodb %s: cannot encode the request", op);
        return HC_ERR_FATAL;
    }
    snprintf(target, sizeof(target), DDB_TARGET_PREFIX "%s", op);
    h = curl_slist_append(NULL, "Content-Type: application/x-amz-json-1.0");
    hdrs = h;
    if (h != NULL) {
        h = curl_slist_append(hdrs, target);
    }
    if (h != NULL && ds->cred_hdr != NULL) {
        h = curl_slist_append(hdrs, ds->cred_hdr->data);
    }
    if (h == NULL) {
        curl_slist_free_all(hdrs);
        free(payload);
        hc_errstr_set(errstr, errstr_size, "dynamodb %s: out of memory", op);
        return HC_ERR_FATAL;
    }
    curl_easy_setopt(ds->curl, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(ds->curl, CURLOPT_POSTFIELDS, payload);
    curl_easy_setopt(ds->curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(payload));
    curl_easy_setopt(ds->curl, CURLOPT_ERRORBUFFER, curl_err);
    timeout_ms = strcmp(op, "Scan") == 0 ? DDB_SCAN_TIMEOUT_MS : DDB_REQUEST_TIMEOUT_MS;

    t0 = hc_now_ms();
    for (attempt = 0; attempt < DDB_ATTEMPTS; attempt++) {
        if (attempt > 0) {
            if (hc_now_ms() - t0 >= DDB_CALL_TIMEOUTS * timeout_ms) {
                break;
            }
            ddb_backoff(ds, attempt);
        }
        /* No attempt starts past the apply's deadline, and none outlives it. */
        int64_t left = time_left(ds);
        if (left <= 0) {
            err = past_deadline(ds, op, errstr, errstr_size);
            break;
        }
        curl_easy_setopt(ds->curl, CURLOPT_TIMEOUT_MS,
                         (long)(left < timeout_ms ? left : timeout_ms));
        json_decref(rep->body);
        rep->body = NULL;
        rep->type[0] = '\0';
        rep->http = 0;
        ds->resp_len = 0;
        curl_err[0] = '\0';
        rc = curl_easy_perform(ds->curl);
        if (rc != CURLE_OK) {
            /* Connection refused, reset, timeout: the request may or may not have landed; the
             * same body (same token) is safe to send again. */
            hc_errstr_set(errstr, errstr_size, "dynamodb %s: %s", op,
                          curl_err[0] != '\0' ? curl_err : curl_easy_strerror(rc));
            err = HC_ERR_TRANSIENT;
            continue;
        }
        curl_easy_getinfo(ds->curl, CURLINFO_RESPONSE_CODE, &rep->http);
        rep->body = ds->resp_len > 0 ? json_loadb(ds->resp, ds->resp_len, 0, NULL) : NULL;
        if (rep->http >= 200 && rep->http < 300) {
            if (rep->body == NULL) {
                hc_errstr_set(errstr, errstr_size, "dynamodb %s: unreadable reply", op);
                err = HC_ERR_TRANSIENT;
                continue;
            }
            err = HC_OK;
            if (ds->observer != NULL) {
                ds->observer->on_reply(ds->observer, op, req, rep->body, true);
            }
            break;
        }
        type = json_string_value(json_object_get(rep->body, "__type"));
        msg = json_string_value(json_object_get(rep->body, "message"));
        if (msg == NULL) {
            msg = json_string_value(json_object_get(rep->body, "Message"));
        }
        if (type != NULL && strchr(type, '#') != NULL) {
            type = strchr(type, '#') + 1;
        }
        snprintf(rep->type, sizeof(rep->type), "%s", type != NULL ? type : "");
        hc_errstr_set(errstr, errstr_size, "dynamodb %s: HTTP %ld %s: %s", op, rep->http,
                      rep->type[0] != '\0' ? rep->type : "error", msg != NULL ? msg : "");
        if (rep->http >= 500 || rep->http == 429 || retryable_type(rep->type) ||
            (strcmp(rep->type, "TransactionCanceledException") == 0 &&
             cancel_is_transient(rep->body))) {
            err = HC_ERR_TRANSIENT;
            continue;
        }
        rep->reasons_valid = json_is_array(json_object_get(rep->body, "CancellationReasons")) != 0;
        if (ds->observer != NULL) {
            ds->observer->on_reply(ds->observer, op, req, rep->body, false);
        }
        err = HC_ERR_FATAL;
        if (strcmp(rep->type, "ResourceNotFoundException") == 0) {
            hc_errstr_set(errstr, errstr_size,
                          "dynamodb %s: table missing (run `hotcount init`): %s", op,
                          msg != NULL ? msg : "");
        }
        break;
    }
    curl_easy_setopt(ds->curl, CURLOPT_HTTPHEADER, NULL);
    curl_easy_setopt(ds->curl, CURLOPT_POSTFIELDS, NULL);
    curl_easy_setopt(ds->curl, CURLOPT_ERRORBUFFER, NULL);
    curl_slist_free_all(hdrs);
    free(payload);
    return err;
}
