/* The Cassandra store: "cassandra://[user[:password]@]host[:port][,host...]/KEYSPACE[?options]"
 * (cassandra_impl.h lists the options; the password may come from store.password.file). The
 * design, its tables and its failure analysis: docs/CASSANDRA.md. This file: the descriptor,
 * open and close, `hotcount init` (keyspace only when the URI gives replication=, the tables, the
 * incarnation), the prepared statements and the mapping of the driver's error classes.
 *
 * The driver is hotcount's own C shim over the `scylla` Rust driver (shim/hc_cql.h), built only
 * when cargo is found (HC_HAVE_CASSANDRA): a build without it has no `cassandra` backend. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "cassandra_impl.h"
#include "hotcount/timeouts.h"
#include "hotcount/utf8.h"

#define CASS_URI_FORM "cassandra://[user[:password]@]host[:port][,host...]/KEYSPACE[?options]"
/* One request's bound: a count write or a base read answers in milliseconds; a Paxos round
 * (the claim) in tens. The driver's own timeout is this; the server's write timeout (2 s by
 * default) comes first. */
#define CASS_STATEMENT_MS 10000

/* Statement texts, "%s" the keyspace (checked by the URI parser: letters, digits, '_'). */
static const char *const cass_cql[CASS_Q__COUNT] = {
    [CASS_Q_GET] = "SELECT likes FROM %s.hotcount_counts WHERE post_id = ?",
    [CASS_Q_BASE] = "SELECT likes, writetime(likes) FROM %s.hotcount_counts WHERE post_id = ?",
    [CASS_Q_COUNT] = "UPDATE %s.hotcount_counts SET likes = ?, updated_at = ? WHERE post_id = ?",
    [CASS_Q_STAGE] = "INSERT INTO %s.hotcount_staging (batch_id, part, payload) VALUES (?, ?, ?)",
    [CASS_Q_STAGED] = "SELECT payload FROM %s.hotcount_staging WHERE batch_id = ? AND part = ?",
    [CASS_Q_CLAIMS] = "SELECT partition, next_offset, from_offset, seq, ts, batch_id, parts, posts "
                      "FROM %s.hotcount_claims WHERE consumer_group = ? AND topic = ?",
    [CASS_Q_DONE] = "SELECT partition, seq FROM %s.hotcount_done WHERE consumer_group = ? AND "
                    "topic = ?",
    [CASS_Q_CLAIM] = "UPDATE %s.hotcount_claims SET next_offset = ?, from_offset = ?, seq = ?, "
                     "ts = ?, batch_id = ?, parts = ?, posts = ? WHERE consumer_group = ? AND "
                     "topic = ? AND partition = ? IF next_offset = ? AND seq = ?",
    [CASS_Q_CLAIM_NEW] = "INSERT INTO %s.hotcount_claims (next_offset, from_offset, seq, ts, "
                         "batch_id, parts, posts, consumer_group, topic, partition) VALUES (?, ?, "
                         "?, ?, ?, ?, ?, ?, ?, ?) IF NOT EXISTS",
    [CASS_Q_DONE_SET] = "UPDATE %s.hotcount_done SET seq = ? WHERE consumer_group = ? AND "
                        "topic = ? AND partition = ?",
    [CASS_Q_SCAN] = "SELECT post_id, likes FROM %s.hotcount_counts",
    [CASS_Q_META] = "SELECT value FROM %s.hotcount_meta WHERE name = 'incarnation'",
    [CASS_Q_TABLES] = "SELECT table_name, id FROM system_schema.tables WHERE keyspace_name = ?",
};

/* The tables of docs/CASSANDRA.md; "%s" the keyspace (the staging one also takes its TTL). */
static const char *const cass_tables[] = {
    "CREATE TABLE IF NOT EXISTS %s.hotcount_counts (post_id text PRIMARY KEY, likes bigint, "
    "updated_at timestamp)",
    "CREATE TABLE IF NOT EXISTS %s.hotcount_claims (consumer_group text, topic text, partition "
    "int, next_offset bigint, from_offset bigint, seq bigint, ts bigint, batch_id uuid, parts int, "
    "posts int, PRIMARY KEY ((consumer_group, topic), partition))",
    "CREATE TABLE IF NOT EXISTS %s.hotcount_done (consumer_group text, topic text, partition "
    "int, seq bigint, PRIMARY KEY ((consumer_group, topic), partition))",
    "CREATE TABLE IF NOT EXISTS %s.hotcount_meta (name text PRIMARY KEY, value text)",
};

/* tmpl with its one "%s" replaced by the keyspace (no printf: the templates are data). */
static void with_keyspace(char *out, size_t size, const char *tmpl, const char *ks)
{
    const char *at = strstr(tmpl, "%s");

    if (at == NULL) {
        snprintf(out, size, "%s", tmpl);
        return;
    }
    snprintf(out, size, "%.*s%s%s", (int)(at - tmpl), tmpl, ks, at + 2);
}

int64_t cass_now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t cass_mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

bool cass_is_text(const char *str, size_t len)
{
    return hc_utf8_valid(str, len); /* what a CQL text value must be */
}

hc_err_t cass_err(int status, const hc_cql_error_t *e, const char *what, char *errstr,
                  size_t errstr_size)
{
    const char *msg = e != NULL && e->message[0] != '\0' ? e->message : "no detail";

    switch (status) {
    case HC_CQL_OK:
        return HC_OK;
    case HC_CQL_TRANSIENT:
        hc_errstr_set(errstr, errstr_size, "cassandra store: %s: %s", what, msg);
        return HC_ERR_TRANSIENT;
    case HC_CQL_UNKNOWN:
        hc_errstr_set(errstr, errstr_size, "cassandra store: %s: outcome unknown: %s", what, msg);
        return HC_ERR_TRANSIENT;
    case HC_CQL_SCHEMA:
        hc_errstr_set(errstr, errstr_size,
                      "cassandra store: %s: %s (run `hotcount init` to create the tables)", what,
                      msg);
        return HC_ERR_FATAL;
    case HC_CQL_AUTH:
        hc_errstr_set(errstr, errstr_size, "cassandra store: %s: not allowed: %s", what, msg);
        return HC_ERR_FATAL;
    default:
        hc_errstr_set(errstr, errstr_size, "cassandra store: %s: %s", what, msg);
        return HC_ERR_FATAL;
    }
}

void cass_known_clear(cass_store_t *cs)
{
    free(cs->known_group);
    free(cs->known_topic);
    cs->known_group = NULL;
    cs->known_topic = NULL;
    cs->known_count = 0;
    cass_cache_clear(&cs->cache);
}

hc_err_t cass_prepare(cass_store_t *cs, char *errstr, size_t errstr_size)
{
    for (size_t q = 0; q < CASS_Q__COUNT; q++) {
        char cql[512];
        hc_cql_error_t e;
        int rc;

        if (cs->prep[q] != NULL) {
            continue;
        }
        with_keyspace(cql, sizeof(cql), cass_cql[q], cs->uri.keyspace);
        rc = hc_cql_prepare(cs->session, cql, &cs->prep[q], &e);
        if (rc != HC_CQL_OK) {
            return cass_err(rc, &e, "prepare", errstr, errstr_size);
        }
    }
    return HC_OK;
}

hc_cql_stmt_t *cass_stmt(cass_store_t *cs, cass_stmt_id_t q)
{
    hc_cql_stmt_t *stmt = hc_cql_stmt_new(cs->prep[q]);

    if (stmt != NULL) {
        hc_cql_stmt_set_consistency(stmt, cs->uri.consistency);
        hc_cql_stmt_set_serial_consistency(stmt, cs->uri.serial_consistency);
        hc_cql_stmt_set_timeout_ms(stmt, cs->statement_ms);
    }
    return stmt;
}

static void cass_close(hc_store_t *st)
{
    cass_store_t *cs = cass_store(st);

    if (cs == NULL) {
        return;
    }
    for (size_t q = 0; q < CASS_Q__COUNT; q++) {
        hc_cql_prepared_free(cs->prep[q]);
    }
    hc_cql_session_close(cs->session);
    cass_known_clear(cs);
    free(cs->known);
    hc_cass_uri_fini(&cs->uri);
    free(cs);
}

/* The keyspace's row of system_schema.keyspaces, as `cql` selects it (its one parameter the
 * keyspace's name), at ONE: the schema is local to each node. *rows_out is the caller's to free
 * (hc_cql_rows_free), and holds no row when the keyspace does not exist. */
static hc_err_t keyspace_row(cass_store_t *cs, const char *cql, const char *what,
                             hc_cql_rows_t **rows_out, char *errstr, size_t errstr_size)
{
    hc_cql_prepared_t *p = NULL;
    hc_cql_stmt_t *stmt;
    hc_cql_error_t e;
    int rc;

    *rows_out = NULL;
    rc = hc_cql_prepare(cs->session, cql, &p, &e);
    if (rc != HC_CQL_OK) {
        return cass_err(rc, &e, what, errstr, errstr_size);
    }
    stmt = hc_cql_stmt_new(p);
    if (stmt == NULL) {
        hc_cql_prepared_free(p);
        hc_errstr_set(errstr, errstr_size, "cassandra store: out of memory");
        return HC_ERR_FATAL;
    }
    hc_cql_bind_text(stmt, 0, cs->uri.keyspace, strlen(cs->uri.keyspace));
    hc_cql_stmt_set_consistency(stmt, HC_CQL_ONE);
    hc_cql_stmt_set_timeout_ms(stmt, cs->statement_ms);
    rc = hc_cql_execute(cs->session, stmt, rows_out, &e);
    hc_cql_stmt_free(stmt);
    hc_cql_prepared_free(p);
    return rc == HC_CQL_OK ? HC_OK : cass_err(rc, &e, what, errstr, errstr_size);
}

/* Refuses a consistency whose reads could miss an acknowledged write on this keyspace
 * (hc_cass_consistency_check). Nothing to check before the keyspace exists: init checks again
 * once it has created it. */
static hc_err_t check_consistency(cass_store_t *cs, char *errstr, size_t errstr_size)
{
    hc_cql_rows_t *rows = NULL;
    const uint8_t *json;
    size_t len;
    char *text;
    hc_err_t err;

    if (cs->uri.consistency != HC_CQL_ONE && cs->uri.consistency != HC_CQL_LOCAL_ONE) {
        return HC_OK;
    }
    err = keyspace_row(
        cs, "SELECT JSON replication FROM system_schema.keyspaces WHERE keyspace_name = ?",
        "replication", &rows, errstr, errstr_size);
    if (err != HC_OK || hc_cql_rows_count(rows) == 0) {
        hc_cql_rows_free(rows);
        return err;
    }
    if (hc_cql_rows_bytes(rows, 0, 0, &json, &len) != HC_CQL_OK ||
        (text = strndup((const char *)json, len)) == NULL) {
        hc_errstr_set(errstr, errstr_size,
                      "cassandra store: the replication of keyspace %s is unreadable",
                      cs->uri.keyspace);
        err = HC_ERR_FATAL;
    } else {
        err = hc_cass_consistency_check(cs->uri.consistency, cs->uri.keyspace, text, errstr,
                                        errstr_size);
        free(text);
    }
    hc_cql_rows_free(rows);
    return err;
}

static hc_err_t cass_open(const hc_config_t *cfg, hc_store_t **stp, char *errstr,
                          size_t errstr_size)
{
    cass_store_t *cs;
    hc_timeouts_t scratch;
    const hc_timeouts_t *t;
    hc_cql_config_t cc;
    hc_cql_error_t e;
    hc_err_t err;
    int rc;

    *stp = NULL;
    cs = calloc(1, sizeof(*cs));
    if (cs == NULL) {
        hc_errstr_set(errstr, errstr_size, "cassandra store: out of memory");
        return HC_ERR_FATAL;
    }
    cs->base.ops = hc_store_cassandra_backend.ops;
    err = hc_cass_uri_parse(cfg->store, &cs->uri, errstr, errstr_size);
    if (err != HC_OK) {
        goto fail_close;
    }
    if (cfg->store_password != NULL && cfg->store_password[0] != '\0') {
        if (cs->uri.password != NULL) { /* hc_config_validate refuses this too */
            hc_errstr_set(errstr, errstr_size,
                          "store.password.file and a password in `store`: give only one");
            err = HC_ERR_INVALID;
            goto fail_close;
        }
        cs->uri.password = strdup(cfg->store_password);
        if (cs->uri.password == NULL) {
            hc_errstr_set(errstr, errstr_size, "cassandra store: out of memory");
            err = HC_ERR_FATAL;
            goto fail_close;
        }
    } else if (cs->uri.user != NULL && cs->uri.password == NULL) {
        /* Not quoted: "cassandra://PASSWORD@host/ks" is a common slip, and this would print it. */
        hc_errstr_set(errstr, errstr_size,
                      "store: bad cassandra URI: a user without a password (user:password@, or "
                      "user@ with store.password.file)");
        err = HC_ERR_INVALID;
        goto fail_close;
    }
    t = hc_store_timeouts(cfg, &scratch);
    cs->statement_ms = (uint32_t)t->store_statement_ms;
    cs->batch_ms = t->store_batch_ms;

    memset(&cc, 0, sizeof(cc));
    cc.contact_points = cs->uri.contact_points;
    cc.user = cs->uri.user;
    cc.password = cs->uri.password;
    cc.local_dc = cs->uri.local_dc;
    cc.tls = cs->uri.tls;
    cc.tls_verify = cs->uri.tls_verify;
    cc.tls_ca_file = cs->uri.tls_ca;
    cc.tls_cert_file = cs->uri.tls_cert;
    cc.tls_key_file = cs->uri.tls_key;
    cc.connect_timeout_ms = (uint32_t)t->store_connect_ms;
    cc.request_timeout_ms = cs->statement_ms;
    rc = hc_cql_session_open(&cc, &cs->session, &e);
    if (rc != HC_CQL_OK) {
        err = cass_err(rc, &e, "connect", errstr, errstr_size);
        /* Bad credentials or a certificate: a configuration mistake, as on the other stores. */
        err = rc == HC_CQL_AUTH || rc == HC_CQL_INVALID ? HC_ERR_INVALID : err;
        goto fail_close;
    }
    err = check_consistency(cs, errstr, errstr_size);
    if (err != HC_OK) {
        goto fail_close;
    }
    /* The statements need the tables: prepared at the first call that needs them (init may be
     * this handle's next call). */
    *stp = &cs->base;
    return HC_OK;

fail_close:
    cass_close(&cs->base);
    return err;
}

/* The incarnation: a random UUID as text. */
static bool random_uuid(char out[37])
{
    uint8_t b[16];

    if (getrandom(b, sizeof(b), 0) != (ssize_t)sizeof(b)) {
        return false;
    }
    b[6] = (uint8_t)((b[6] & 0x0f) | 0x40);
    b[8] = (uint8_t)((b[8] & 0x3f) | 0x80);
    snprintf(out, 37, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
             b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
             b[14], b[15]);
    return true;
}

static hc_err_t keyspace_exists(cass_store_t *cs, bool *exists, char *errstr, size_t errstr_size)
{
    hc_cql_rows_t *rows = NULL;
    hc_err_t err = keyspace_row(
        cs, "SELECT keyspace_name FROM system_schema.keyspaces WHERE keyspace_name = ?", "init",
        &rows, errstr, errstr_size);

    *exists = err == HC_OK && hc_cql_rows_count(rows) > 0;
    hc_cql_rows_free(rows);
    return err;
}

static hc_err_t cass_init_schema(hc_store_t *st, char *errstr, size_t errstr_size)
{
    cass_store_t *cs = cass_store(st);
    char cql[1024];
    char incarnation[37];
    hc_cql_prepared_t *p = NULL;
    hc_cql_stmt_t *stmt;
    hc_cql_error_t e;
    bool exists = false;
    hc_err_t err;
    int rc;

    err = keyspace_exists(cs, &exists, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    if (!exists) {
        if (cs->uri.replication == HC_CASS_REPLICATION_NONE) {
            /* Replication is a cluster's decision, not one to guess (SimpleStrategy with one
             * replica would lose data with any node). */
            hc_errstr_set(errstr, errstr_size,
                          "cassandra store: keyspace %s does not exist: create it, or give its "
                          "replication in the URI (?replication=DC:N[,DC:N...], or "
                          "?replication=simple:N for a test cluster)",
                          cs->uri.keyspace);
            return HC_ERR_FATAL;
        }
        snprintf(cql, sizeof(cql), "CREATE KEYSPACE IF NOT EXISTS %s WITH replication = %s",
                 cs->uri.keyspace, cs->uri.replication_cql);
        rc = hc_cql_query(cs->session, cql, &e);
        if (rc != HC_CQL_OK) {
            return cass_err(rc, &e, "create keyspace", errstr, errstr_size);
        }
        err = check_consistency(cs, errstr, errstr_size); /* open found no keyspace to check */
        if (err != HC_OK) {
            return err;
        }
    }
    for (size_t i = 0; i < sizeof(cass_tables) / sizeof(cass_tables[0]); i++) {
        with_keyspace(cql, sizeof(cql), cass_tables[i], cs->uri.keyspace);
        rc = hc_cql_query(cs->session, cql, &e);
        if (rc != HC_CQL_OK) {
            return cass_err(rc, &e, "create table", errstr, errstr_size);
        }
    }
    /* Staged parts expire (a claim open longer than this cannot be recovered: docs/CASSANDRA.md);
     * TWCS drops whole expired SSTables, so no tombstone is ever read. */
    snprintf(cql, sizeof(cql),
             "CREATE TABLE IF NOT EXISTS %s.hotcount_staging (batch_id uuid, part int, payload "
             "blob, PRIMARY KEY ((batch_id, part))) WITH default_time_to_live = %lld AND "
             "gc_grace_seconds = 3600 AND compaction = {'class': "
             "'TimeWindowCompactionStrategy', 'compaction_window_unit': 'HOURS', "
             "'compaction_window_size': 6}",
             cs->uri.keyspace, (long long)cs->uri.staging_ttl_s);
    rc = hc_cql_query(cs->session, cql, &e);
    if (rc != HC_CQL_OK) {
        return cass_err(rc, &e, "create table", errstr, errstr_size);
    }
    /* The incarnation, written once: a store that forgets (keyspace dropped, table truncated)
     * gets a new one at its next init (hc_store_identity). */
    if (!random_uuid(incarnation)) {
        hc_errstr_set(errstr, errstr_size, "cassandra store: no random bytes for the incarnation");
        return HC_ERR_FATAL;
    }
    snprintf(cql, sizeof(cql),
             "INSERT INTO %s.hotcount_meta (name, value) VALUES ('incarnation', ?) IF NOT EXISTS",
             cs->uri.keyspace);
    rc = hc_cql_prepare(cs->session, cql, &p, &e);
    if (rc != HC_CQL_OK) {
        return cass_err(rc, &e, "init", errstr, errstr_size);
    }
    stmt = hc_cql_stmt_new(p);
    if (stmt == NULL) {
        hc_cql_prepared_free(p);
        hc_errstr_set(errstr, errstr_size, "cassandra store: out of memory");
        return HC_ERR_FATAL;
    }
    hc_cql_bind_text(stmt, 0, incarnation, strlen(incarnation));
    hc_cql_stmt_set_serial_consistency(stmt, cs->uri.serial_consistency);
    hc_cql_stmt_set_consistency(stmt, cs->uri.consistency);
    hc_cql_stmt_set_timeout_ms(stmt, cs->statement_ms);
    rc = hc_cql_execute(cs->session, stmt, NULL, &e);
    hc_cql_stmt_free(stmt);
    hc_cql_prepared_free(p);
    if (rc != HC_CQL_OK) {
        return cass_err(rc, &e, "init", errstr, errstr_size);
    }
    return cass_prepare(cs, errstr, errstr_size);
}

static const hc_store_ops_t cass_ops = {
    .kind = "cassandra",
    .open = cass_open,
    .close = cass_close,
    .init_schema = cass_init_schema,
    .read_offsets = cass_read_offsets,
    .apply = cass_apply,
    .get = cass_get,
    .top = cass_top,
    .foreach = cass_foreach,
    .identity = cass_identity,
};

static const char *const cass_schemes[] = {"cassandra://", NULL};

static int64_t cass_statements_per_batch(int64_t max_keys)
{
    /* a base read and a count write per post, a staged part per ~500 posts, the claims read,
     * the claim, the done rows, and a serial read settling an unknown claim */
    return 2 * max_keys + max_keys / 500 + 4;
}

const hc_store_backend_t hc_store_cassandra_backend = {
    .facts =
        {
            .name = "cassandra",
            .title = "Cassandra",
            .schemes = cass_schemes,
            .uri_form = CASS_URI_FORM,
            .takes_password_file = true,
            .connect_ms = HC_STORE_CONNECT_MS,
            .statement_ms = CASS_STATEMENT_MS,
            .statements_per_batch = cass_statements_per_batch,
        },
    .ops = &cass_ops,
};
