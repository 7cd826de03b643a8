/* The Redis store: "redis://[[user]:password@]host[:port][/db]" (port 6379 and db 0 by default;
 * user and password may be percent-encoded; a user name is sent as Redis 6 ACL `AUTH user pw`).
 * The password may come from store.password.file instead ("redis://user@host", hotcount's
 * config: cfg->store_password).
 *
 * TLS: "rediss://...[?cacert=FILE][&capath=DIR][&cert=FILE&key=FILE][&servername=NAME]" (values
 * percent-encoded; the option names are redis-cli's --cacert, --cacertdir, --cert, --key, --sni).
 * The server's certificate must chain to cacert/capath (default: the system's trust store) and
 * name the host (or servername): an IP literal must be among its IP addresses, a name among its
 * DNS names, as libpq's sslmode=verify-full checks. hiredis itself verifies only the chain, so
 * the store builds the OpenSSL context and connection itself and hands the SSL object to
 * hiredis (redisInitiateSSL). There is no way to switch verification off. TLS 1.2 at least. A
 * certificate that does not verify, or a client key that does not load, is HC_ERR_INVALID (a
 * configuration mistake, like a wrong password); a handshake cut short or timed out is
 * HC_ERR_TRANSIENT. A build without hiredis_ssl (HC_DEPS=system: Debian 12's hiredis 0.14)
 * refuses rediss:// with a message saying so.
 *
 * Layout (docs/FORMATS.md, "Store layout"):
 *
 *   <store.redis.prefix>P        string: the count of post P, an integer (`GET likes:P` reads it)
 *   hotcount:offsets:<group>     hash: field "<topic>/<partition>", value the next offset to read
 *   hotcount:staging:<batch id>  list: the staged parts of a split batch (one packed element
 *                                each), gone after its commit
 *   hotcount:top:<prefix>        sorted set: the top index, at most K count keys scored with their
 *                                counts (K = rs->top_keep)
 *   hotcount:top-meta:<prefix>   hash: the index's floor F and "built"
 *
 * There is no updated_at: the contract's Redis layout has none, and keeping one would mean a
 * second key per post (twice the writes) or a hash instead of a plain string (no plain GET).
 * The prefix may not overlap "hotcount:offsets:" or "hotcount:staging:", or a post id could
 * name one of those keys.
 *
 * apply. One Lua script, loaded with SCRIPT LOAD when the handle opens and run with EVALSHA (a
 * NOSCRIPT reply, after a server restart or SCRIPT FLUSH, loads it again and retries once).
 * Redis runs a script atomically but does not roll back a script that fails halfway, so the
 * script makes every check before its first write: each partition's stored offset must equal
 * the batch's expected one (HC_OFFSET_NONE: the field must not exist), and each count it will
 * add to must be absent or an integer far from overflow (else a write would fail after earlier
 * ones landed). Only then does it write every count and HSET every offset. The deltas travel
 * packed, one MessagePack argument per part (cmsgpack unpacks it in C); the checks read the
 * counts with MGET and the writes set the new totals with MSET, a thousand posts per call,
 * INCRBY only for a total a double cannot hold exactly (commit.lua says why and when). A lost
 * compare-and-set answers {0, index of the partition, stored offset} and has written nothing.
 *
 * Split batches. One script call carries at most REDIS_PART_DELTAS deltas and about
 * REDIS_PART_BYTES bytes of arguments. Bigger batches (max.keys allows a million posts) are cut
 * into parts so that no single command is tens of megabytes that the server must buffer whole
 * and turn into Lua tables at once. Every part but the last is staged: the script RPUSHes the
 * part, packed as it came, as one element of a list named with a fresh random 128-bit batch id,
 * which expires REDIS_STAGING_TTL_MS after the last part touched it. The last part commits: one
 * script checks the offsets, checks that the list holds exactly the parts staged so far (LLEN),
 * checks every count, then adds the staged deltas and its own, moves the offsets and deletes the
 * list. Hence:
 *  - nothing of a batch is visible before its commit and all of it after: staged pairs live
 *    outside the count keys, and the commit is one script;
 *  - offsets move only with the last part, in the same script as every delta;
 *  - a part that fails, or a connection lost midway, leaves at most an orphaned list that
 *    expires; the retry of the batch stages under a new batch id, so no part is applied twice,
 *    and the compare-and-set turns a retry of a commit that did land into HC_ERR_CONFLICT;
 *  - a list that expired or was evicted before the commit fails the LLEN check
 *    (HC_ERR_TRANSIENT: retry the batch) instead of silently dropping deltas;
 *  - a stale batch already loses at its first part (each part checks the offsets and drops its
 *    list) and in any case at the commit, which changes nothing then.
 * The commit still walks the whole batch inside one script: atomicity costs that, and the server
 * serves no one else meanwhile. Measured on loopback on a 2-CPU VM before the packed commit of
 * issue 27 (bench/RESULTS.md has the current cost per post): a 50 000-delta batch took
 * 0.15-0.27 s end to end, of which the commit script is 0.11-0.22 s and each staged part of
 * 10 000 deltas 3-7 ms (under heavy load on the box, up to ~0.45 s for the commit).
 *
 * The top index (issue 25: top was a SCAN of every key, which a public /v1/top turned into a
 * weapon). The commit keeps a sorted set of at most K posts and a floor F above which no post
 * outside it has a count, in the same script as the counts and offsets (commit.lua, "The top
 * index": the invariants and the rules; a refused batch touches none of it). top n asks the
 * script for the members scored at least as high as the n-th and their counts, one call, and
 * ranks them exactly here (scores are doubles); when the n-th is not above F, or the index is not
 * built, it SCANs as below. init builds the index of counts written before it (a SCAN, one
 * "absorb" script call per page; commits running meanwhile keep what is covered) and marks it
 * built. Its cost on the commit: bench/RESULTS.md, "The top index's cost".
 *
 * Reads. read_offsets is one HMGET, get is MGET in chunks. foreach (and a top the index cannot
 * answer) SCAN the keys under the prefix (MATCH, the prefix glob-escaped) and MGET each page:
 * O(keys in the database) on the server, a bounded min-heap of n rows for top. Redis has no
 * snapshot reads: each page shows the counts of the moment it is read, so foreach is consistent
 * only while nothing writes (verify runs once stage 2 has caught up). SCAN may return a key twice
 * when the keyspace is resized during the scan; a set of the ids seen (on the client, about 100
 * bytes per post) makes foreach and top report each post once.
 *
 * Errors. A refused connection, a reset, or no reply within the command bound
 * (cfg->timeouts.store_statement_ms; a whole batch within store_batch_ms) is
 * HC_ERR_TRANSIENT; hiredis cannot reuse a context after an I/O error, so the handle drops it and
 * the next call reconnects (stage 2 then retries the same batch and the compare-and-set guards
 * it: a command that timed out, say behind a DEBUG SLEEP, may still run once the server is back,
 * and the retry then loses the compare-and-set). Error replies that mean "not now" (LOADING,
 * BUSY: a script or function running past busy-reply-threshold, MASTERDOWN, READONLY, OOM,
 * MISCONF, TRYAGAIN, ..., and "ERR max number of clients reached") are HC_ERR_TRANSIENT too,
 * returned at once: the store does not retry inside a call, stage 2's back-off does; READONLY
 * and MASTERDOWN also drop the connection so that the next call reaches whatever primary the
 * address leads to by then. Anything else (a script error, an unexpected reply) is HC_ERR_FATAL
 * with the server's message; a count the batch cannot add to (near overflow, not an integer) is
 * HC_ERR_RECORD naming that delta. Run with SIGPIPE ignored (the CLI does): hiredis writes with
 * write(2). A batch's on_progress is called after each part's script call that got through (a
 * staged part, the commit).
 *
 * Not supported: Redis Cluster (the commit touches keys in every slot). Durability is the
 * server's: with AOF everysec a crash loses up to a second of batches, counts and offsets
 * together, and stage 2 re-reads the offsets on the conflict that follows. Run the server with
 * maxmemory-policy noeviction: an evicted count is lost for good (an evicted staging list is
 * merely retried). */

#include "redis_impl.h"

/* ---- opening ---- */

/* Decimal digits in [p, end) as an int within [min, max]. */
static bool parse_uint_range(const char *p, const char *end, long min, long max, int *out)
{
    long v = 0;

    if (p == end) {
        return false;
    }
    for (; p < end; p++) {
        if (*p < '0' || *p > '9') {
            return false;
        }
        v = v * 10 + (*p - '0');
        if (v > max) {
            return false;
        }
    }
    if (v < min) {
        return false;
    }
    *out = (int)v;
    return true;
}

/* Fills host, port, db, user and password from the URI. Messages never repeat the URI: it may
 * carry a password, and they end up in logs. */
/* The TLS options of a rediss:// URI: "name=value" pairs after '?', joined by '&'. */
static hc_err_t parse_tls_options(redis_store_t *rs, const char *p, const char **why, bool *bad)
{
    static const struct {
        const char *name;
        size_t offset;
    } opts[] = {
        {"cacert", offsetof(redis_store_t, tls_cacert)},
        {"capath", offsetof(redis_store_t, tls_capath)},
        {"cert", offsetof(redis_store_t, tls_cert)},
        {"key", offsetof(redis_store_t, tls_key)},
        {"servername", offsetof(redis_store_t, tls_servername)},
    };

    while (*p != '\0') {
        size_t len = strcspn(p, "&");
        const char *eq = memchr(p, '=', len);
        size_t i;

        for (i = 0; eq != NULL && i < sizeof(opts) / sizeof(opts[0]); i++) {
            if ((size_t)(eq - p) == strlen(opts[i].name) &&
                strncmp(p, opts[i].name, (size_t)(eq - p)) == 0) {
                break;
            }
        }
        if (eq == NULL || i == sizeof(opts) / sizeof(opts[0])) {
            *why = "unknown option after '?' (rediss:// knows cacert, capath, cert, key and "
                   "servername)";
            return HC_ERR_INVALID;
        }
        char **slot = (char **)(void *)((char *)rs + opts[i].offset);
        if (*slot != NULL || eq + 1 == p + len) {
            *why = "a TLS option is empty or given twice";
            return HC_ERR_INVALID;
        }
        *slot = hc_store_percent_decode(eq + 1, (size_t)(p + len - eq - 1), bad);
        if (*slot == NULL) {
            *why = *bad ? "bad percent-encoding in a TLS option" : NULL;
            return *bad ? HC_ERR_INVALID : HC_ERR_FATAL;
        }
        p += len;
        p += *p == '&';
    }
    return HC_OK;
}

static hc_err_t parse_uri(redis_store_t *rs, const char *uri, char *errstr, size_t errstr_size)
{
    const char *rest;
    const char *at;
    const char *host;
    const char *host_end;
    const char *p;
    const char *colon;
    const char *why;
    bool bad = false;
    hc_err_t err;

    rs->tls = strncmp(uri, REDISS_URI_PREFIX, strlen(REDISS_URI_PREFIX)) == 0;
    rest = uri + strlen(rs->tls ? REDISS_URI_PREFIX : REDIS_URI_PREFIX);
    at = strrchr(rest, '@');
    if (at != NULL) {
        colon = memchr(rest, ':', (size_t)(at - rest));
        if (colon == NULL) {
            /* "user@": the password comes from store.password.file */
            rs->user = hc_store_percent_decode(rest, (size_t)(at - rest), &bad);
            if (rs->user == NULL) {
                goto fail_decode;
            }
            if (rs->user[0] == '\0') {
                why = "empty user name before '@'";
                goto fail_invalid;
            }
        } else if (colon > rest) {
            rs->user = hc_store_percent_decode(rest, (size_t)(colon - rest), &bad);
            if (rs->user == NULL) {
                goto fail_decode;
            }
        }
        if (colon != NULL) {
            rs->password = hc_store_percent_decode(colon + 1, (size_t)(at - colon - 1), &bad);
            if (rs->password == NULL) {
                goto fail_decode;
            }
        }
        rest = at + 1;
    }
    if (rest[0] == '[') { /* [IPv6] */
        host = rest + 1;
        host_end = strchr(host, ']');
        if (host_end == NULL) {
            why = "unclosed '[' in the host";
            goto fail_invalid;
        }
        p = host_end + 1;
    } else {
        host = rest;
        host_end = host + strcspn(host, ":/?#");
        p = host_end;
    }
    if (host_end == host) {
        why = "missing host";
        goto fail_invalid;
    }
    rs->port = REDIS_DEFAULT_PORT;
    if (*p == ':') {
        p++;
        if (!parse_uint_range(p, p + strcspn(p, "/?#"), 1, 65535, &rs->port)) {
            why = "the port must be 1..65535";
            goto fail_invalid;
        }
        p += strcspn(p, "/?#");
    }
    rs->db = 0;
    if (*p == '/') {
        p++;
        if (*p != '\0' && !parse_uint_range(p, p + strcspn(p, "?#"), 0, INT32_MAX, &rs->db)) {
            why = "the database must be a number";
            goto fail_invalid;
        }
        p += strcspn(p, "?#");
    }
    if (*p == '?' && rs->tls) {
        err = parse_tls_options(rs, p + 1, &why, &bad);
        if (err == HC_ERR_INVALID) {
            goto fail_invalid;
        }
        if (err != HC_OK) {
            goto fail_decode;
        }
        p += strlen(p);
    }
    if (*p != '\0') {
        why = *p == '?' ? "query options are for rediss:// (TLS) only"
                        : "unexpected text after the host, port or database";
        goto fail_invalid;
    }
    rs->host = strndup(host, (size_t)(host_end - host));
    if (rs->host == NULL) {
        goto fail_decode;
    }
    return HC_OK;

fail_decode:
    if (bad) {
        why = "bad percent-encoding in the credentials";
        goto fail_invalid;
    }
    hc_errstr_set(errstr, errstr_size, "redis store: out of memory");
    return HC_ERR_FATAL;

fail_invalid:
    hc_errstr_set(errstr, errstr_size, "store: bad redis URI: %s (expected %s)", why,
                  REDIS_URI_FORM);
    return HC_ERR_INVALID;
}

/* "hotcount-<instance.id>", cut to fit, with every byte Redis refuses in a client name (spaces,
 * control and non-ASCII bytes) replaced by '_'. */
static void client_name(char *buf, size_t buf_size, const char *instance_id)
{
    size_t i;

    snprintf(buf, buf_size, "hotcount-%s", instance_id != NULL ? instance_id : "");
    for (i = 0; buf[i] != '\0'; i++) {
        if (buf[i] < '!' || buf[i] > '~') {
            buf[i] = '_';
        }
    }
}

/* True when a key <prefix>P could equal a key that starts with `internal`. */
static bool prefix_overlaps(const char *prefix, const char *internal)
{
    size_t a = strlen(prefix);
    size_t b = strlen(internal);

    return strncmp(prefix, internal, a < b ? a : b) == 0;
}

static void redis_close(hc_store_t *st)
{
    redis_store_t *rs = redis_store(st);

    if (rs == NULL) {
        return;
    }
    redis_disconnect(rs);
    redis_args_fini(&rs->args);
    free(rs->pack);
    free(rs->host);
    free(rs->user);
    free(rs->password);
    free(rs->tls_cacert);
    free(rs->tls_capath);
    free(rs->tls_cert);
    free(rs->tls_key);
    free(rs->tls_servername);
#ifdef HC_REDIS_TLS
    SSL_CTX_free(rs->ssl_ctx); /* accepts NULL */
#endif
    free(rs->prefix);
    free(rs);
}

static hc_err_t redis_open(const hc_config_t *cfg, hc_store_t **stp, char *errstr,
                           size_t errstr_size)
{
    const char *prefix = cfg->store_redis_prefix != NULL ? cfg->store_redis_prefix : "";
    redis_store_t *rs;
    hc_err_t err;

    *stp = NULL;
    if (strncmp(cfg->store, REDIS_URI_PREFIX, strlen(REDIS_URI_PREFIX)) != 0 &&
        strncmp(cfg->store, REDISS_URI_PREFIX, strlen(REDISS_URI_PREFIX)) != 0) {
        hc_errstr_set(errstr, errstr_size, "store: bad redis URI (expected %s)", REDIS_URI_FORM);
        return HC_ERR_INVALID;
    }
    if (prefix_overlaps(prefix, OFFSETS_KEY_PREFIX) ||
        prefix_overlaps(prefix, STAGING_KEY_PREFIX) || prefix_overlaps(prefix, TOP_KEY_PREFIX) ||
        prefix_overlaps(prefix, TOP_META_KEY_PREFIX)) {
        hc_errstr_set(errstr, errstr_size,
                      "store.redis.prefix: \"%s\" would put counts among hotcount's own keys "
                      "(" OFFSETS_KEY_PREFIX "*, " STAGING_KEY_PREFIX "*, " TOP_KEY_PREFIX
                      "*, " TOP_META_KEY_PREFIX "*); choose another, such as the default "
                      "\"likes:\"",
                      prefix);
        return HC_ERR_INVALID;
    }

    rs = calloc(1, sizeof(*rs));
    if (rs == NULL) {
        hc_errstr_set(errstr, errstr_size, "redis store: out of memory");
        return HC_ERR_FATAL;
    }
    rs->base.ops = hc_store_redis_backend.ops;
    hc_timeouts_t scratch;
    const hc_timeouts_t *t = hc_store_timeouts(cfg, &scratch);
    rs->connect_ms = (long)t->store_connect_ms;
    rs->command_ms = (long)t->store_statement_ms;
    rs->batch_ms = t->store_batch_ms;
    rs->timeout_ms = rs->command_ms;
    err = parse_uri(rs, cfg->store, errstr, errstr_size);
    if (err != HC_OK) {
        goto fail_close;
    }
    if (cfg->store_password != NULL && cfg->store_password[0] != '\0') {
        if (rs->password != NULL) { /* hc_config_validate refuses this too */
            hc_errstr_set(errstr, errstr_size,
                          "store.password.file and a password in `store`: give only one");
            err = HC_ERR_INVALID;
            goto fail_close;
        }
        rs->password = strdup(cfg->store_password);
        if (rs->password == NULL) {
            hc_errstr_set(errstr, errstr_size, "redis store: out of memory");
            err = HC_ERR_FATAL;
            goto fail_close;
        }
    } else if (rs->user != NULL && rs->password == NULL) {
        /* Not quoted: "redis://PASSWORD@host" is a common slip, and this would print it. */
        hc_errstr_set(errstr, errstr_size,
                      "store: bad redis URI: a user without a password (user:password@, user@ "
                      "with store.password.file, or :password@ for the password alone)");
        err = HC_ERR_INVALID;
        goto fail_close;
    }
    if (rs->tls) {
        err = redis_tls_context_new(rs, errstr, errstr_size);
        if (err != HC_OK) {
            goto fail_close;
        }
    }
    rs->prefix = strdup(prefix);
    if (rs->prefix == NULL) {
        hc_errstr_set(errstr, errstr_size, "redis store: out of memory");
        err = HC_ERR_FATAL;
        goto fail_close;
    }
    rs->prefix_len = strlen(prefix);
    /* No top asks for more than serve.top.max rows (hc_store_top, the CLI, serve): the index
     * keeps twice that, so that ties and falls at its end rarely leave the n-th row unproven. */
    rs->top_keep =
        2 * cfg->serve_top_max > REDIS_TOP_KEEP ? 2 * cfg->serve_top_max : REDIS_TOP_KEEP;
    client_name(rs->name, sizeof(rs->name), cfg->instance_id);

    /* Connect now, so that a wrong address or password shows at open rather than at the first
     * batch, and load the script, which also proves the server runs Lua. */
    err = redis_load_script(rs, errstr, errstr_size);
    if (err != HC_OK) {
        goto fail_close;
    }
    *stp = &rs->base;
    return HC_OK;

fail_close:
    redis_close(&rs->base);
    return err;
}

/* Keys appear with the first write. The server must be ready for the script, and the top
 * index of counts written before it existed is built once (redis_build_top_index). */
static hc_err_t redis_init_schema(hc_store_t *st, char *errstr, size_t errstr_size)
{
    hc_err_t err = redis_load_script(redis_store(st), errstr, errstr_size);

    if (err != HC_OK) {
        return err;
    }
    return redis_build_top_index(redis_store(st), errstr, errstr_size);
}

static const hc_store_ops_t redis_ops = {
    .kind = "redis",
    .open = redis_open,
    .close = redis_close,
    .init_schema = redis_init_schema,
    .read_offsets = redis_read_offsets,
    .apply = redis_apply,
    .get = redis_get,
    .top = redis_top,
    .foreach = redis_foreach,
    .identity = redis_identity,
};

/* One command's bound (a script call of REDIS_PART_DELTAS deltas takes well under a second). */
#define REDIS_COMMAND_MS 10000

static const char *const redis_schemes[] = {REDIS_URI_PREFIX, REDISS_URI_PREFIX, NULL};

static int64_t redis_statements_per_batch(int64_t max_keys)
{
    /* one script call per part, the last one commits */
    return (max_keys + REDIS_PART_DELTAS - 1) / REDIS_PART_DELTAS + 1;
}

const hc_store_backend_t hc_store_redis_backend = {
    .facts =
        {
            .name = "redis",
            .title = "Redis",
            .schemes = redis_schemes,
            .uri_form = "redis[s]://[user:pw@]host:port[/db]",
            .takes_password_file = true,
            .connect_ms = HC_STORE_CONNECT_MS,
            .statement_ms = REDIS_COMMAND_MS,
            .statements_per_batch = redis_statements_per_batch,
        },
    .ops = &redis_ops,
};
