/* The Redis backend's connection: the command builder, connecting (TLS included), the
 * handshake, one command's round trip and its error classes, the commit script's loading and
 * its calls. */
#include "redis_impl.h"

redis_store_t *redis_store(hc_store_t *st)
{
    return (redis_store_t *)st;
}

static struct timeval ms_to_timeval(long ms)
{
    struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};

    return tv;
}

/* ---- argument lists ---- */

void redis_args_reset(args_t *a)
{
    a->used = 0;
    a->count = 0;
    a->failed = false;
}

void redis_args_fini(args_t *a)
{
    free(a->buf);
    free(a->offs);
    free(a->lens);
    free(a->argv);
    memset(a, 0, sizeof(*a));
}

static bool args_reserve(args_t *a, size_t bytes)
{
    size_t size;
    size_t cap;
    char *buf;
    size_t *offs;
    size_t *lens;
    const char **argv;

    if (a->failed) {
        return false;
    }
    if (a->count == a->cap) {
        cap = a->cap == 0 ? 64 : a->cap * 2;
        offs = realloc(a->offs, cap * sizeof(*offs));
        if (offs != NULL) {
            a->offs = offs;
        }
        lens = realloc(a->lens, cap * sizeof(*lens));
        if (lens != NULL) {
            a->lens = lens;
        }
        argv = realloc(a->argv, cap * sizeof(*argv));
        if (argv != NULL) {
            a->argv = argv;
        }
        if (offs == NULL || lens == NULL || argv == NULL) {
            a->failed = true;
            return false;
        }
        a->cap = cap;
    }
    if (a->size - a->used < bytes + 1) {
        size = a->size == 0 ? 4096 : a->size;
        while (size - a->used < bytes + 1) {
            size *= 2;
        }
        buf = realloc(a->buf, size);
        if (buf == NULL) {
            a->failed = true;
            return false;
        }
        a->buf = buf;
        a->size = size;
    }
    return true;
}

/* Appends one argument made of two byte ranges (a key prefix and a name, often). */
void redis_args_push2(args_t *a, const void *p1, size_t len1, const void *p2, size_t len2)
{
    if (!args_reserve(a, len1 + len2)) {
        return;
    }
    a->offs[a->count] = a->used;
    a->lens[a->count] = len1 + len2;
    a->count++;
    if (len1 > 0) {
        memcpy(a->buf + a->used, p1, len1);
    }
    if (len2 > 0) {
        memcpy(a->buf + a->used + len1, p2, len2);
    }
    a->used += len1 + len2;
    a->buf[a->used++] = '\0';
}

void redis_args_push(args_t *a, const void *p, size_t len)
{
    redis_args_push2(a, p, len, NULL, 0);
}

void redis_args_push_str(args_t *a, const char *s)
{
    redis_args_push(a, s, strlen(s));
}

void redis_args_pushf(args_t *a, const char *fmt, ...)
{
    va_list ap;
    int len;

    va_start(ap, fmt);
    len = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (len < 0 || !args_reserve(a, (size_t)len)) {
        a->failed = true;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(a->buf + a->used, (size_t)len + 1, fmt, ap);
    va_end(ap);
    a->offs[a->count] = a->used;
    a->lens[a->count] = (size_t)len;
    a->count++;
    a->used += (size_t)len + 1;
}

static hc_err_t args_finish(args_t *a, char *errstr, size_t errstr_size)
{
    size_t i;

    if (a->failed || a->count > INT32_MAX) {
        hc_errstr_set(errstr, errstr_size, "redis store: out of memory building a command");
        return HC_ERR_FATAL;
    }
    for (i = 0; i < a->count; i++) {
        a->argv[i] = a->buf + a->offs[i];
    }
    return HC_OK;
}

/* ---- the seen set ---- */

/* ---- connection and commands ---- */

/* Releases the last reply: the one place replies are freed. */
static void release_reply(redis_store_t *rs)
{
    freeReplyObject(rs->reply); /* accepts NULL */
    rs->reply = NULL;
}

void redis_disconnect(redis_store_t *rs)
{
    release_reply(rs);
    if (rs->ctx != NULL) {
        redisFree(rs->ctx);
        rs->ctx = NULL;
    }
}

static bool first_word_is(const char *msg, const char *word)
{
    size_t len = strlen(word);

    return strncmp(msg, word, len) == 0 && (msg[len] == ' ' || msg[len] == '\0');
}

/* Error replies that say "not now" rather than "never": retrying the same call later is the
 * cure. OOM and MISCONF (a failing RDB save stops writes) pass once memory or disk is freed;
 * they must not kill stage 2, whose retries are safe. */
static hc_err_t error_reply_class(const char *msg)
{
    static const char *const transient[] = {
        "LOADING",     "BUSY", "MASTERDOWN", "READONLY",   "TRYAGAIN",
        "CLUSTERDOWN", "OOM",  "MISCONF",    "NOREPLICAS",
    };
    size_t i;

    for (i = 0; i < sizeof(transient) / sizeof(transient[0]); i++) {
        if (first_word_is(msg, transient[i])) {
            return HC_ERR_TRANSIENT;
        }
    }
    /* maxclients: the server refuses a new connection with this before it closes it (the
     * handshake's first command gets it); clients come and go, so it passes */
    if (strncmp(msg, "ERR max number of clients reached", 33) == 0) {
        return HC_ERR_TRANSIENT;
    }
    return HC_ERR_FATAL;
}

/* A call that got no reply: the context is spent (hiredis cannot resume a stream after an
 * error), so drop it; the next call reconnects. */
static hc_err_t connection_failed(redis_store_t *rs, const char *what, char *errstr,
                                  size_t errstr_size)
{
    int kind = rs->ctx->err;
    hc_err_t err;

    if (kind == REDIS_ERR_IO && strstr(rs->ctx->errstr, "temporarily unavailable") != NULL) {
        hc_errstr_set(errstr, errstr_size, "redis store: %s: no reply from %s:%d within %ld ms",
                      what, rs->host, rs->port, rs->ctx_timeout_ms);
    } else {
        hc_errstr_set(errstr, errstr_size, "redis store: %s: %s:%d: %s", what, rs->host, rs->port,
                      rs->ctx->errstr[0] != '\0' ? rs->ctx->errstr : "connection lost");
    }
    /* A protocol error means the peer is not a Redis server we understand: retrying will not
     * change that. */
    err = kind == REDIS_ERR_PROTOCOL || kind == REDIS_ERR_OOM ? HC_ERR_FATAL : HC_ERR_TRANSIENT;
    redis_disconnect(rs);
    return err;
}

/* Sends a's command on the open connection. On HC_OK *reply_out is a non-error reply owned by
 * the handle, valid until the next command. An error reply is described in errstr and
 * classified; *noscript (when given) tells whether it was NOSCRIPT. */
static hc_err_t roundtrip(redis_store_t *rs, args_t *a, const char *what, redisReply **reply_out,
                          bool *noscript, char *errstr, size_t errstr_size)
{
    hc_err_t err;

    *reply_out = NULL;
    if (noscript != NULL) {
        *noscript = false;
    }
    err = args_finish(a, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    release_reply(rs);
    if (rs->ctx_timeout_ms != rs->timeout_ms) {
        if (redisSetTimeout(rs->ctx, ms_to_timeval(rs->timeout_ms)) != REDIS_OK) {
            return connection_failed(rs, what, errstr, errstr_size);
        }
        rs->ctx_timeout_ms = rs->timeout_ms;
    }
    rs->reply = redisCommandArgv(rs->ctx, (int)a->count, a->argv, a->lens);
    if (rs->reply == NULL) {
        return connection_failed(rs, what, errstr, errstr_size);
    }
    if (rs->reply->type != REDIS_REPLY_ERROR) {
        *reply_out = rs->reply;
        return HC_OK;
    }
    hc_errstr_set(errstr, errstr_size, "redis store: %s: %s", what, rs->reply->str);
    if (noscript != NULL) {
        *noscript = first_word_is(rs->reply->str, "NOSCRIPT");
    }
    err = error_reply_class(rs->reply->str);
    if (first_word_is(rs->reply->str, "READONLY") || first_word_is(rs->reply->str, "MASTERDOWN")) {
        /* We reached a replica (after a failover, say): reconnect to find the primary. */
        redis_disconnect(rs);
    } else {
        release_reply(rs);
    }
    return err;
}

/* AUTH, SELECT and CLIENT SETNAME on a fresh connection. A refusal of AUTH or SELECT that is
 * not transient is a configuration mistake (wrong password, no such database): HC_ERR_INVALID,
 * reported against the key. The commands are built in a list of their own: a reconnect happens
 * inside command(), while rs->args holds the caller's command. */
static hc_err_t handshake(redis_store_t *rs, char *errstr, size_t errstr_size)
{
    args_t a = {0};
    redisReply *reply;
    hc_err_t err = HC_OK;

    if (rs->password != NULL) {
        redis_args_push_str(&a, "AUTH");
        if (rs->user != NULL) {
            redis_args_push_str(&a, rs->user);
        }
        redis_args_push_str(&a, rs->password);
        err = roundtrip(rs, &a, "AUTH", &reply, NULL, errstr, errstr_size);
        if (err != HC_OK) {
            /* Say which server refused whom (the reply, WRONGPASS, names neither). */
            size_t used = errstr != NULL ? strlen(errstr) : 0;
            if (used + 1 < errstr_size) {
                snprintf(errstr + used, errstr_size - used, " (server %s:%d, user %s)", rs->host,
                         rs->port, rs->user != NULL ? rs->user : "default");
            }
            goto out_fini;
        }
    }
    if (rs->db != 0) {
        redis_args_reset(&a);
        redis_args_push_str(&a, "SELECT");
        redis_args_pushf(&a, "%d", rs->db);
        err = roundtrip(rs, &a, "SELECT", &reply, NULL, errstr, errstr_size);
        if (err != HC_OK) {
            goto out_fini;
        }
    }
    /* So that CLIENT LIST tells which replica holds which connection. Only a courtesy: an ACL
     * user without +client gets an error reply, and that is no reason to refuse to work. */
    redis_args_reset(&a);
    redis_args_push_str(&a, "CLIENT");
    redis_args_push_str(&a, "SETNAME");
    redis_args_push_str(&a, rs->name);
    err = roundtrip(rs, &a, "CLIENT SETNAME", &reply, NULL, errstr, errstr_size);
    if (err == HC_ERR_FATAL && rs->ctx != NULL) {
        err = HC_OK;
    }

out_fini:
    redis_args_fini(&a);
    return err == HC_ERR_FATAL ? HC_ERR_INVALID : err;
}

#ifdef HC_REDIS_TLS
/* OpenSSL's reason for the last error on this thread, or fallback. */
static const char *openssl_reason(const char *fallback)
{
    const char *why = ERR_reason_error_string(ERR_peek_last_error());

    return why != NULL ? why : fallback;
}

/* An encrypted client key would make OpenSSL ask for its passphrase on the terminal, blocking a
 * service: refuse instead (the key must be stored unencrypted, readable by this user only). */
static int no_passphrase(char *buf, int size, int rwflag, void *userdata)
{
    (void)buf;
    (void)size;
    (void)rwflag;
    (void)userdata;
    return 0;
}

/* The SSL_CTX every connection of this handle uses: loaded once, so a reconnect does not read
 * the files again (and does not fail because a file was rotated away meanwhile). */
hc_err_t redis_tls_context_new(redis_store_t *rs, char *errstr, size_t errstr_size)
{
    SSL_CTX *ctx;
    hc_err_t err = HC_ERR_INVALID;

    ERR_clear_error();
    ctx = SSL_CTX_new(TLS_client_method());
    if (ctx == NULL) {
        hc_errstr_set(errstr, errstr_size, "redis store: cannot set up TLS: %s",
                      openssl_reason("SSL_CTX_new failed"));
        return HC_ERR_FATAL;
    }
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    SSL_CTX_set_default_passwd_cb(ctx, no_passphrase);
    if (rs->tls_cacert != NULL || rs->tls_capath != NULL) {
        if (SSL_CTX_load_verify_locations(ctx, rs->tls_cacert, rs->tls_capath) != 1) {
            hc_errstr_set(errstr, errstr_size,
                          "store: rediss:// cacert/capath: cannot load CA certificates from %s: %s",
                          rs->tls_cacert != NULL ? rs->tls_cacert : rs->tls_capath,
                          openssl_reason("unreadable"));
            goto fail_free;
        }
    } else if (SSL_CTX_set_default_verify_paths(ctx) != 1) {
        hc_errstr_set(errstr, errstr_size,
                      "store: rediss://: cannot load the system's CA certificates: %s (give "
                      "cacert=FILE)",
                      openssl_reason("unreadable"));
        goto fail_free;
    }
    if ((rs->tls_cert == NULL) != (rs->tls_key == NULL)) {
        hc_errstr_set(errstr, errstr_size,
                      "store: rediss://: a client certificate needs both cert=FILE and key=FILE");
        goto fail_free;
    }
    if (rs->tls_cert != NULL) {
        if (SSL_CTX_use_certificate_chain_file(ctx, rs->tls_cert) != 1) {
            hc_errstr_set(errstr, errstr_size, "store: rediss:// cert=%s: %s", rs->tls_cert,
                          openssl_reason("cannot load the client certificate"));
            goto fail_free;
        }
        if (SSL_CTX_use_PrivateKey_file(ctx, rs->tls_key, SSL_FILETYPE_PEM) != 1 ||
            SSL_CTX_check_private_key(ctx) != 1) {
            hc_errstr_set(errstr, errstr_size,
                          "store: rediss:// key=%s: %s (an unencrypted PEM key matching cert)",
                          rs->tls_key, openssl_reason("cannot load the client key"));
            goto fail_free;
        }
    }
    rs->ssl_ctx = ctx;
    return HC_OK;

fail_free:
    SSL_CTX_free(ctx);
    return err;
}

/* The TLS handshake on the fresh TCP connection rs->ctx, bounded by the connect timeout (the
 * socket's timeouts bound each blocking read and write of it). */
static hc_err_t start_tls(redis_store_t *rs, char *errstr, size_t errstr_size)
{
    const char *name = rs->tls_servername != NULL ? rs->tls_servername : rs->host;
    long verify;
    SSL *ssl;

    ERR_clear_error();
    ssl = SSL_new(rs->ssl_ctx);
    if (ssl == NULL) {
        hc_errstr_set(errstr, errstr_size, "redis store: cannot set up TLS: %s",
                      openssl_reason("SSL_new failed"));
        return HC_ERR_FATAL;
    }
    /* The name check hiredis leaves out: an IP literal against the certificate's IP
     * addresses, anything else against its DNS names (no partial wildcards), and as SNI.
     * -DHC_MUTANT_TLS_NO_NAME_CHECK drops it, so that tests/integration/tls.sh can show it
     * would notice (its redis_wrong_name case must fail on such a build). Never in a product. */
#ifndef HC_MUTANT_TLS_NO_NAME_CHECK
    X509_VERIFY_PARAM *param = SSL_get0_param(ssl);
    X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    if (X509_VERIFY_PARAM_set1_ip_asc(param, name) != 1 &&
        (X509_VERIFY_PARAM_set1_host(param, name, 0) != 1 ||
         SSL_set_tlsext_host_name(ssl, name) != 1)) {
        hc_errstr_set(errstr, errstr_size, "store: rediss://: cannot verify the name \"%s\": %s",
                      name, openssl_reason("not a host name"));
        SSL_free(ssl);
        return HC_ERR_INVALID;
    }
#else
    (void)name;
#endif
    if (redisSetTimeout(rs->ctx, ms_to_timeval(rs->connect_ms)) != REDIS_OK) {
        hc_errstr_set(errstr, errstr_size, "redis store: setting up the connection to %s:%d: %s",
                      rs->host, rs->port, rs->ctx->errstr);
        SSL_free(ssl);
        return HC_ERR_TRANSIENT;
    }
    if (redisInitiateSSL(rs->ctx, ssl) == REDIS_OK) {
        return HC_OK; /* hiredis owns ssl now */
    }
    /* On failure hiredis leaves ssl to us. */
    verify = SSL_get_verify_result(ssl);
    SSL_free(ssl);
    if (verify != X509_V_OK) {
        hc_errstr_set(errstr, errstr_size,
                      "redis store: TLS with %s:%d: the server's certificate does not verify: %s "
                      "(check the rediss:// URI's host or servername and its cacert)",
                      rs->host, rs->port, X509_verify_cert_error_string(verify));
        return HC_ERR_INVALID;
    }
    hc_errstr_set(errstr, errstr_size, "redis store: TLS handshake with %s:%d failed: %s%s",
                  rs->host, rs->port, rs->ctx->errstr[0] != '\0' ? rs->ctx->errstr : "no reason",
                  " (is it a TLS port? does it want a client certificate?)");
    return HC_ERR_TRANSIENT;
}
#else
hc_err_t redis_tls_context_new(redis_store_t *rs, char *errstr, size_t errstr_size)
{
    (void)rs;
    hc_errstr_set(errstr, errstr_size,
                  "store: rediss:// needs a hotcount built with TLS for Redis (hiredis >= 1.0 "
                  "with hiredis_ssl, and OpenSSL: the default HC_DEPS=debian-testing); this one "
                  "was built without");
    return HC_ERR_INVALID;
}

static hc_err_t start_tls(redis_store_t *rs, char *errstr, size_t errstr_size)
{
    return redis_tls_context_new(rs, errstr, errstr_size);
}
#endif

static hc_err_t ensure_connected(redis_store_t *rs, char *errstr, size_t errstr_size)
{
    hc_err_t err;

    if (rs->ctx != NULL) {
        return HC_OK;
    }
    rs->ctx = redisConnectWithTimeout(rs->host, rs->port, ms_to_timeval(rs->connect_ms));
    if (rs->ctx == NULL) {
        hc_errstr_set(errstr, errstr_size, "redis store: out of memory connecting");
        return HC_ERR_FATAL;
    }
    if (rs->ctx->err != 0) {
        hc_errstr_set(errstr, errstr_size, "redis store: cannot connect to %s:%d: %s", rs->host,
                      rs->port, rs->ctx->errstr);
        err = HC_ERR_TRANSIENT;
        goto fail_disconnect;
    }
    if (rs->tls) {
        err = start_tls(rs, errstr, errstr_size);
        if (err != HC_OK) {
            goto fail_disconnect;
        }
    }
    /* Keepalive finds a peer that vanished without a FIN while we wait for a reply. */
    if (redisSetTimeout(rs->ctx, ms_to_timeval(rs->command_ms)) != REDIS_OK ||
        redisEnableKeepAlive(rs->ctx) != REDIS_OK) {
        hc_errstr_set(errstr, errstr_size, "redis store: setting up the connection to %s:%d: %s",
                      rs->host, rs->port, rs->ctx->errstr);
        err = HC_ERR_TRANSIENT;
        goto fail_disconnect;
    }
    rs->ctx_timeout_ms = rs->command_ms;
    err = handshake(rs, errstr, errstr_size);
    if (err != HC_OK) {
        goto fail_disconnect;
    }
    return HC_OK;

fail_disconnect:
    redis_disconnect(rs);
    return err;
}

/* Connects if needed, then runs a's command (see roundtrip). */
hc_err_t redis_command(redis_store_t *rs, args_t *a, const char *what, redisReply **reply_out,
                       bool *noscript, char *errstr, size_t errstr_size)
{
    hc_err_t err;

    *reply_out = NULL;
    err = ensure_connected(rs, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    return roundtrip(rs, a, what, reply_out, noscript, errstr, errstr_size);
}

hc_err_t redis_load_script(redis_store_t *rs, char *errstr, size_t errstr_size)
{
    args_t a = {0};
    redisReply *reply;
    hc_err_t err;

    /* Its own argument list: the caller's (rs->args) may hold the EVALSHA to retry. */
    redis_args_push_str(&a, "SCRIPT");
    redis_args_push_str(&a, "LOAD");
    redis_args_push(&a, hc_store_redis_commit_lua, hc_store_redis_commit_lua_len);
    err = redis_command(rs, &a, "SCRIPT LOAD", &reply, NULL, errstr, errstr_size);
    if (err != HC_OK) {
        goto out_fini;
    }
    if (reply->type != REDIS_REPLY_STRING || reply->len != sizeof(rs->sha) - 1) {
        hc_errstr_set(errstr, errstr_size, "redis store: SCRIPT LOAD: unexpected reply");
        err = HC_ERR_FATAL;
        goto out_fini;
    }
    memcpy(rs->sha, reply->str, sizeof(rs->sha) - 1);
    rs->sha[sizeof(rs->sha) - 1] = '\0';

out_fini:
    redis_args_fini(&a);
    return err;
}

/* Runs the EVALSHA in a (its argv[1] is the SHA). The script cache is empty after a restart,
 * a failover or SCRIPT FLUSH: then load the script again and retry once. Retrying is safe
 * because NOSCRIPT means the script did not run. */
hc_err_t redis_run_script(redis_store_t *rs, args_t *a, redisReply **reply_out, char *errstr,
                          size_t errstr_size)
{
    bool noscript = false;
    hc_err_t err;

    err = redis_command(rs, a, "apply", reply_out, &noscript, errstr, errstr_size);
    if (err == HC_OK || !noscript) {
        return err;
    }
    err = redis_load_script(rs, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    return redis_command(rs, a, "apply", reply_out, NULL, errstr, errstr_size);
}
