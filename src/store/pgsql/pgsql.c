/* The PostgreSQL store: "postgresql://..." or "postgres://...", a libpq connection URI.
 *
 * Layout (docs/FORMATS.md, "Store layout"), created by init_schema:
 *
 *   hotcount_counts  (post_id TEXT COLLATE "C" PRIMARY KEY, likes BIGINT NOT NULL,
 *                     updated_at TIMESTAMPTZ NOT NULL DEFAULT now())
 *   hotcount_offsets (consumer_group TEXT COLLATE "C", topic TEXT COLLATE "C", partition INT,
 *                     next_offset BIGINT NOT NULL, PRIMARY KEY (consumer_group, topic, partition))
 *
 * The text columns use the "C" collation: keys compare byte by byte (memcmp, the cheapest
 * comparison for a b-tree that every delta probes), ties in `top` come out in byte order as in
 * the SQLite store, and the primary keys cannot be corrupted by an operating-system collation
 * upgrade. updated_at is the batch's now_ms. hotcount_counts has fillfactor 90: a hot post's row
 * is rewritten every second, and the free room lets PostgreSQL update it on its page without a
 * new primary-key entry (a "HOT" update).
 *
 * hotcount_counts_likes (likes DESC, post_id), as in the SQLite store, is `top`'s order: without
 * it `hotcount serve`'s public /v1/top sorted the whole table once per TTL (0.45 s for two
 * million rows on a two-core test machine; issue 25). It is paid on the write path: likes
 * changes in every update, so no update is HOT, and each delta inserts a primary-key and a
 * likes entry; bench/results/studies.md, "The top index's cost", measured it at 1.86x the
 * server's write CPU. A bounded top table kept in the apply's transaction (as the Redis store's
 * sorted set) would give most of that back; not built yet.
 *
 * Connecting: the URI goes to libpq unchanged and is never echoed (it may hold a password);
 * errors name the `store` key and quote libpq's message. Defaults the URI may override:
 * connect_timeout=10 (seconds) and the application name "hotcount". client_encoding is always
 * UTF8, so post ids travel as their own bytes; the database should be UTF8 too. Ids that no
 * UTF8 text column can hold (invalid UTF-8, a NUL byte) never reach the server: apply refuses
 * the batch with HC_ERR_RECORD naming that delta (store.h), get answers 0 for them. Each
 * (re)connect sets statement_timeout to 30 s unless the session already has one (from the URI's
 * `options=-c statement_timeout=...`, the role or the database): a lock wait or a slow server then
 * ends with HC_ERR_TRANSIENT instead of stalling stage 2. Beyond that, every call bounds its own
 * wait at statement_timeout + 15 s on the client side (non-blocking libpq) and drops the connection
 * when a server stops answering altogether (a hung disk or host, where the server-side timeout
 * cannot fire). Statements are prepared once per connection, so a pooler in between must keep
 * sessions (PgBouncer: session mode, or 1.21+ with prepared-statement support).
 *
 * hc_store_apply is one READ COMMITTED transaction: (1) one UPDATE moves every partition whose
 * expected offset matches (`... AND next_offset = expected`, set-based over unnest'ed arrays);
 * READ COMMITTED re-evaluates that WHERE on the latest row version after waiting for a
 * concurrent writer, so of two racing batches the second sees the first's offsets and matches
 * nothing. (2) One INSERT ... ON CONFLICT DO NOTHING claims the partitions expected to have no
 * row. Fewer rows than partitions in either step is a lost compare-and-set: ROLLBACK,
 * HC_ERR_CONFLICT, nothing changed. (3) The deltas go in as one INSERT ... ON CONFLICT DO UPDATE
 * per 65536 posts (one statement for any realistic batch), their ids and values passed as binary
 * text[] and int8[] parameters, so no id is ever quoted or escaped. (4) COMMIT. The offsets and
 * the deltas are sent sorted (partition; id bytes): the upsert then locks rows in one order in
 * every batch and walks the primary key in order, and a deadlock that still happens is
 * HC_ERR_TRANSIENT. A post listed twice is summed, since ON CONFLICT refuses to touch a row
 * twice in one statement. A batch's on_progress is called after each chunk's upsert. The whole
 * batch, every statement of it, waits at most store_batch_ms (then HC_ERR_TRANSIENT, the
 * connection dropped, which rolls the transaction back on the server).
 *
 * Errors: a lost connection (CONNECTION_BAD, SQLSTATE class 08, 57P01/57P02/57P03 shutdown or
 * start-up), 40001/40P01 (serialization failure, deadlock), 57014 (statement_timeout), 55P03
 * (lock timeout) and class 53 (too many connections, disk full, out of memory) are
 * HC_ERR_TRANSIENT, returned at once (the transaction rolled back: nothing changed): the store
 * does not retry inside a call, stage 2's back-off does; a delta that would take a count past
 * bigint is HC_ERR_RECORD (the upsert's WHERE leaves that row alone instead of raising 22003, see
 * STMT_COUNTS_ADD); after a lost connection the next call reconnects (PQreset) and prepares its
 * statements again. A COMMIT whose answer is lost with the connection is ambiguous: it may have
 * landed. It is reported as HC_ERR_TRANSIENT all the same; stage 2 retries the same batch, and if
 * the first attempt did commit, the retry's compare-and-set fails with HC_ERR_CONFLICT and stage
 * 2 re-reads its offsets: nothing is counted twice. Everything else is HC_ERR_FATAL with the
 * SQLSTATE and the server's message.
 *
 * Durability is the server's: with synchronous_commit=off (settable in the URI's options) a
 * crash may lose the last commits, but deltas and offsets roll back together, so stage 2 re-reads
 * the older offsets and re-applies the same partials. */

#include "pgsql_impl.h"

/* One implicit transaction (a simple-protocol string without BEGIN), so the advisory lock is
 * held until both tables exist and a concurrent init waits, then finds them. */
static const char schema_sql[] = "SELECT pg_advisory_xact_lock(" PGSQL_SCHEMA_LOCK_KEY ");"
                                 "CREATE TABLE IF NOT EXISTS hotcount_counts ("
                                 " post_id TEXT COLLATE \"C\" PRIMARY KEY,"
                                 " likes BIGINT NOT NULL,"
                                 " updated_at TIMESTAMPTZ NOT NULL DEFAULT now()"
                                 ") WITH (fillfactor = 90);"
                                 /* top's order (issue 25, item 5); IF NOT EXISTS: `init` adds
                                  * it to a store made before it */
                                 "CREATE INDEX IF NOT EXISTS hotcount_counts_likes"
                                 " ON hotcount_counts (likes DESC, post_id);"
                                 "CREATE TABLE IF NOT EXISTS hotcount_offsets ("
                                 " consumer_group TEXT COLLATE \"C\","
                                 " topic TEXT COLLATE \"C\","
                                 " partition INT,"
                                 " next_offset BIGINT NOT NULL,"
                                 " PRIMARY KEY (consumer_group, topic, partition)"
                                 ");";

static void pgsql_close(hc_store_t *st)
{
    pgsql_store_t *pst = pgsql_store(st);
    size_t i;

    if (pst == NULL) {
        return;
    }
    PQfinish(pst->conn); /* accepts NULL */
    for (i = 0; i < sizeof(pst->param) / sizeof(pst->param[0]); i++) {
        free(pst->param[i].data);
    }
    free(pst->deltas.data);
    free(pst->totals.data);
    free(pst->offsets.data);
    free(pst);
}

/* Refuses a URI libpq cannot parse before anything connects: a configuration mistake
 * (HC_ERR_INVALID), reported without the URI. */
static hc_err_t check_uri(const char *uri, char *errstr, size_t errstr_size)
{
    PQconninfoOption *opts;
    char *msg = NULL;
    char line[MSG_MAX];

    opts = PQconninfoParse(uri, &msg);
    if (opts == NULL) {
        if (msg == NULL) {
            return pgsql_out_of_memory(errstr, errstr_size);
        }
        hc_errstr_set(
            errstr, errstr_size,
            "store: bad PostgreSQL URI in `store` (not shown: it may hold a password): %s",
            pgsql_redact_quoted(msg, line, sizeof(line)));
        PQfreemem(msg);
        return HC_ERR_INVALID;
    }
    PQconninfoFree(opts);
    return HC_OK;
}

/* Sets the default timeout only where nothing else did ('0' is also what an explicit 0 reads
 * as: to turn the timeout off, set a very large one), then reports the one in force, in ms. */
static const char session_sql_fmt[] =
    "SELECT set_config('statement_timeout', '%" PRId64 "ms', false)"
    " WHERE current_setting('statement_timeout') = '0';"
    "SELECT setting FROM pg_settings WHERE name = 'statement_timeout'";

static hc_err_t pgsql_open(const hc_config_t *cfg, hc_store_t **stp, char *errstr,
                           size_t errstr_size)
{
    /* libpq applies these in order and an expanded dbname (the URI) overwrites what came
     * before it: the keys before "dbname" are defaults the URI may override, those after it
     * always win. The password from store.password.file comes last (libpq ignores an empty
     * value, so without the key the URI's, PGPASSWORD or ~/.pgpass apply); the configuration
     * refuses a password in both. TLS is the URI's: sslmode=verify-full&sslrootcert=FILE
     * (libpq's own checks: the chain and the host name). */
    static const char *const keys[] = {
        "connect_timeout", "fallback_application_name",
        "dbname",          "client_encoding",
        "password",        NULL,
    };
    hc_timeouts_t scratch;
    const hc_timeouts_t *t = hc_store_timeouts(cfg, &scratch);
    char connect_s[24]; /* libpq counts whole seconds: rounded up */
    snprintf(connect_s, sizeof(connect_s), "%" PRId64, (t->store_connect_ms + 999) / 1000);
    const char *password = cfg->store_password != NULL ? cfg->store_password : "";
    const char *values[] = {connect_s, "hotcount", cfg->store, "UTF8", password, NULL};
    pgsql_store_t *pst;
    char msg[MSG_MAX];
    hc_err_t err;

    *stp = NULL;
    err = check_uri(cfg->store, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    pst = calloc(1, sizeof(*pst));
    if (pst == NULL) {
        return pgsql_out_of_memory(errstr, errstr_size);
    }
    pst->base.ops = hc_store_pgsql_backend.ops;
    pst->statement_ms = t->store_statement_ms;
    pst->server_statement_ms = t->store_server_statement_ms;
    pst->batch_ms = t->store_batch_ms;
    pst->wait_ms = pst->statement_ms;
    snprintf(pst->session_sql, sizeof(pst->session_sql), session_sql_fmt, pst->server_statement_ms);
    pst->conn = PQconnectdbParams(keys, values, 1);
    if (pst->conn == NULL) {
        err = pgsql_out_of_memory(errstr, errstr_size);
        goto fail_close;
    }
    PQsetNoticeProcessor(pst->conn, pgsql_on_notice, NULL);
    if (PQstatus(pst->conn) != CONNECTION_OK) {
        /* Unreachable, refused, or a wrong password or database: libpq's message tells which,
         * but not in a way a program can rely on, so all of them are worth a retry. */
        hc_errstr_set(errstr, errstr_size,
                      "store: cannot connect to the PostgreSQL server of `store`: %s",
                      pgsql_one_line(PQerrorMessage(pst->conn), msg, sizeof(msg)));
        err = HC_ERR_TRANSIENT;
        goto fail_close;
    }
    err = pgsql_setup_session(pst, errstr, errstr_size);
    if (err != HC_OK) {
        goto fail_close;
    }
    *stp = &pst->base;
    return HC_OK;

fail_close:
    pgsql_close(&pst->base);
    return err;
}

static hc_err_t pgsql_init_schema(hc_store_t *st, char *errstr, size_t errstr_size)
{
    pgsql_store_t *pst = pgsql_store(st);
    hc_err_t err;

    err = pgsql_ensure_ready(pst, false, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    /* An implicit transaction rolls itself back on error: nothing to clean up. */
    err = pgsql_run_cmd(pst, schema_sql, "creating the schema", errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    /* Preparing also checks that tables which already existed have the columns we use. */
    return pgsql_prepare_all(pst, errstr, errstr_size);
}

/* One batch, every statement of it within store_batch_ms. */
static hc_err_t pgsql_apply(hc_store_t *st, const hc_store_batch_t *batch, char *errstr,
                            size_t errstr_size)
{
    pgsql_store_t *pst = pgsql_store(st);

    pst->deadline_ms = pgsql_now_ms() + pst->batch_ms;
    hc_err_t err = pgsql_apply_batch(st, batch, errstr, errstr_size);
    pst->deadline_ms = 0;
    return err;
}

/* The server's start time (pg_postmaster_start_time(), which any role may read): new at every
 * restart, other on another server after a failover. */
static hc_err_t pgsql_identity(hc_store_t *st, char *id_out, size_t id_size, char *errstr,
                               size_t errstr_size)
{
    pgsql_store_t *pst = pgsql_store(st);
    PGresult *res;
    hc_err_t err;

    err = pgsql_ensure_ready(pst, false, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    err = pgsql_run_sql(pst, "SELECT pg_postmaster_start_time()::text",
                        "reading the server's start time", false, PGRES_TUPLES_OK, &res, errstr,
                        errstr_size);
    if (err == HC_OK) {
        if (PQntuples(res) != 1 || PQgetisnull(res, 0, 0)) {
            err = pgsql_layout_fail("reading the server's start time", errstr, errstr_size);
        } else {
            snprintf(id_out, id_size, "%s", PQgetvalue(res, 0, 0));
        }
    }
    PQclear(res);
    return err;
}

static const hc_store_ops_t pgsql_ops = {
    .kind = "postgresql",
    .open = pgsql_open,
    .close = pgsql_close,
    .init_schema = pgsql_init_schema,
    .read_offsets = pgsql_read_offsets,
    .apply = pgsql_apply,
    .get = pgsql_get,
    .top = pgsql_top,
    .foreach = pgsql_foreach,
    .identity = pgsql_identity,
};

/* The client's wait on one statement: the server's statement_timeout plus a grace, so that the
 * server's fires first. */
#define PGSQL_STATEMENT_MS 45000
#define PGSQL_SERVER_STATEMENT_MS 30000

static const char *const pgsql_schemes[] = {"postgresql://", "postgres://", NULL};

static int64_t pgsql_statements_per_batch(int64_t max_keys)
{
    /* BEGIN, the offsets' UPDATE, the claim INSERT, one upsert per chunk, COMMIT */
    return (max_keys + PGSQL_APPLY_CHUNK - 1) / PGSQL_APPLY_CHUNK + 4;
}

const hc_store_backend_t hc_store_pgsql_backend = {
    .facts =
        {
            .name = "postgresql",
            .title = "PostgreSQL",
            .schemes = pgsql_schemes,
            .uri_form = "postgresql://...",
            .takes_password_file = true,
            .connect_ms = HC_STORE_CONNECT_MS,
            .statement_ms = PGSQL_STATEMENT_MS,
            .server_statement_ms = PGSQL_SERVER_STATEMENT_MS,
            .statements_per_batch = pgsql_statements_per_batch,
        },
    .ops = &pgsql_ops,
};
