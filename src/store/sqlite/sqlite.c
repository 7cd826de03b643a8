/* The SQLite store: "sqlite:PATH" (PATH may be ":memory:", handy for tests and the demo).
 *
 * Layout (docs/FORMATS.md, "Store layout"):
 *
 *   hotcount_counts  (post_id TEXT PRIMARY KEY, likes BIGINT NOT NULL, updated_at INTEGER)
 *   hotcount_offsets (consumer_group TEXT, topic TEXT, partition INT, next_offset BIGINT NOT NULL,
 *                     PRIMARY KEY (consumer_group, topic, partition))
 *
 * updated_at is INTEGER milliseconds since the Unix epoch (the batch's now_ms), not ISO text:
 * the pipeline already has ms timestamps, integers cost nothing to format on the hot path, and
 * `SELECT datetime(updated_at / 1000, 'unixepoch')` reads them. post_id holds the id's bytes as
 * TEXT with an explicit length, compared byte by byte (BINARY collation), so ties in `top` are
 * broken in byte order. Both tables are WITHOUT ROWID: every lookup is by primary key, so the key
 * lives in the row itself, with no second b-tree to maintain.
 *
 * Durability: journal_mode=WAL with synchronous=NORMAL. In WAL mode NORMAL syncs at checkpoints,
 * not at every commit, so a power loss may drop the last commits; but a commit carries the deltas
 * and the offsets together, so they roll back together, stage 2 re-reads the older offsets and
 * re-applies the same partials: exactly-once holds. A process crash loses nothing.
 *
 * Concurrency: any number of handles (threads or processes) on one file. hc_store_apply takes
 * the write lock up front (BEGIN IMMEDIATE) before it reads the stored offsets, so its
 * compare-and-set sees the latest commit and no other writer can slip in between the check and
 * the write: a stale stage-2 instance's batch loses with HC_ERR_CONFLICT. Waiting for the lock is
 * bounded by busy_timeout; past it the call returns HC_ERR_TRANSIENT. Reads run in WAL snapshots
 * and never block the writer.
 *
 * Error classes: SQLITE_BUSY/LOCKED/PROTOCOL (lock contention) and SQLITE_IOERR/FULL (disk
 * trouble that may pass) are HC_ERR_TRANSIENT; every failed apply is rolled back, so the retry
 * starts from the same state. Even a COMMIT that fails ambiguously is safe to retry: if it did
 * land, the retry's compare-and-set fails with HC_ERR_CONFLICT and nothing is counted twice.
 * Anything else (corrupt file, wrong schema, out of memory) is HC_ERR_FATAL. */

#include "sqlite_impl.h"

static const char *const stmt_sql[STMT_COUNT_] = {
    [STMT_BEGIN_READ] = "BEGIN DEFERRED",
    [STMT_BEGIN_WRITE] = "BEGIN IMMEDIATE",
    [STMT_COMMIT] = "COMMIT",
    [STMT_ROLLBACK] = "ROLLBACK",
    [STMT_OFFSET_GET] = "SELECT next_offset FROM hotcount_offsets"
                        " WHERE consumer_group = ?1 AND topic = ?2 AND partition = ?3",
    [STMT_OFFSET_PUT] =
        "INSERT INTO hotcount_offsets (consumer_group, topic, partition, next_offset)"
        " VALUES (?1, ?2, ?3, ?4)"
        " ON CONFLICT (consumer_group, topic, partition)"
        " DO UPDATE SET next_offset = excluded.next_offset",
    [STMT_COUNT_ADD] =
        "INSERT INTO hotcount_counts (post_id, likes, updated_at) VALUES (?1, ?2, ?3)"
        " ON CONFLICT (post_id) DO UPDATE SET likes = likes + excluded.likes,"
        " updated_at = excluded.updated_at RETURNING likes",
    [STMT_COUNT_GET] = "SELECT likes FROM hotcount_counts WHERE post_id = ?1",
    /* Walks hotcount_counts_likes (schema_sql) and stops after n rows. The index costs a second
     * b-tree update per delta of every batch, but without it `hotcount serve`'s public /v1/top
     * sorted the whole table once per TTL (issue 25, item 5). */
    [STMT_COUNT_TOP] = "SELECT post_id, likes FROM hotcount_counts"
                       " ORDER BY likes DESC, post_id ASC LIMIT ?1",
    [STMT_COUNT_ALL] = "SELECT post_id, likes FROM hotcount_counts",
};

/* Created in one transaction so that a concurrent `init` never sees half a schema. */
static const char schema_sql[] = "BEGIN IMMEDIATE;"
                                 "CREATE TABLE IF NOT EXISTS hotcount_counts ("
                                 " post_id TEXT PRIMARY KEY,"
                                 " likes BIGINT NOT NULL,"
                                 " updated_at INTEGER" /* ms since the Unix epoch */
                                 ") WITHOUT ROWID;"
                                 /* top's order; IF NOT EXISTS: `init` adds it to a store made
                                  * before it */
                                 "CREATE INDEX IF NOT EXISTS hotcount_counts_likes"
                                 " ON hotcount_counts (likes DESC, post_id);"
                                 "CREATE TABLE IF NOT EXISTS hotcount_offsets ("
                                 " consumer_group TEXT,"
                                 " topic TEXT,"
                                 " partition INT,"
                                 " next_offset BIGINT NOT NULL,"
                                 " PRIMARY KEY (consumer_group, topic, partition)"
                                 ") WITHOUT ROWID;"
                                 "COMMIT;";

sqlite_store_t *sqlite_store(hc_store_t *st)
{
    return (sqlite_store_t *)st;
}

static hc_err_t err_class(int rc)
{
    switch (rc & 0xff) { /* the primary code, whatever the extended one */
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
    case SQLITE_PROTOCOL:
    case SQLITE_IOERR:
    case SQLITE_FULL:
        return HC_ERR_TRANSIENT;
    default:
        return HC_ERR_FATAL;
    }
}

/* Reports a failed SQLite call. Call it before anything else touches the connection: the next
 * call (a ROLLBACK included) replaces sqlite3_errmsg. */
hc_err_t sqlite_sql_fail(sqlite_store_t *sst, int rc, const char *what, char *errstr,
                         size_t errstr_size)
{
    hc_errstr_set(errstr, errstr_size, "sqlite store: %s: %s (%s)", what,
                  sst->db != NULL ? sqlite3_errmsg(sst->db) : "no connection", sqlite3_errstr(rc));
    return err_class(rc);
}

/* Reset and unbind at once: bindings are SQLITE_STATIC pointers into the caller's memory, which
 * must not outlive the call that lent them. */
void sqlite_stmt_done(sqlite3_stmt *stmt)
{
    sqlite3_reset(stmt);
    sqlite3_clear_bindings(stmt);
}

/* Runs a statement that returns no rows (BEGIN, COMMIT, an upsert). */
hc_err_t sqlite_stmt_exec(sqlite_store_t *sst, enum stmt_id id, const char *what, char *errstr,
                          size_t errstr_size)
{
    sqlite3_stmt *stmt = sst->stmt[id];
    hc_err_t err = HC_OK;
    int rc;

    rc = sqlite3_step(stmt);
    if (rc != SQLITE_DONE) {
        err = sqlite_sql_fail(sst, rc, what, errstr, errstr_size);
    }
    sqlite_stmt_done(stmt);
    return err;
}

/* Ends a transaction that failed. Keeps the caller's error unless the rollback fails too and
 * leaves the transaction open: then the handle is unusable and the caller must know. */
hc_err_t sqlite_rollback(sqlite_store_t *sst, hc_err_t err, char *errstr, size_t errstr_size)
{
    int rc;

    /* SQLite rolls some failures back by itself (e.g. SQLITE_FULL); ROLLBACK would then fail. */
    if (sqlite3_get_autocommit(sst->db)) {
        return err;
    }
    rc = sqlite3_step(sst->stmt[STMT_ROLLBACK]);
    sqlite3_reset(sst->stmt[STMT_ROLLBACK]);
    if (rc != SQLITE_DONE && !sqlite3_get_autocommit(sst->db)) {
        hc_errstr_set(errstr, errstr_size, "sqlite store: rollback failed: %s",
                      sqlite3_errmsg(sst->db));
        return HC_ERR_FATAL;
    }
    return err;
}

static hc_err_t prepare_range(sqlite_store_t *sst, enum stmt_id first, enum stmt_id end,
                              char *errstr, size_t errstr_size)
{
    int id;
    int rc;

    for (id = first; id < (int)end; id++) {
        if (sst->stmt[id] != NULL) {
            continue;
        }
        /* PERSISTENT: these live as long as the handle, so SQLite keeps them out of its
         * lookaside pool of short-lived allocations. */
        rc = sqlite3_prepare_v3(sst->db, stmt_sql[id], -1, SQLITE_PREPARE_PERSISTENT,
                                &sst->stmt[id], NULL);
        if (rc == SQLITE_ERROR) {
            /* "no such table/column": the schema is missing or someone else's. */
            hc_errstr_set(errstr, errstr_size,
                          "sqlite store: %s (is hotcount's schema there? run `hotcount init`)",
                          sqlite3_errmsg(sst->db));
            sst->stmt[id] = NULL;
            return HC_ERR_FATAL;
        }
        if (rc != SQLITE_OK) {
            sst->stmt[id] = NULL;
            return sqlite_sql_fail(sst, rc, "preparing a statement", errstr, errstr_size);
        }
    }
    return HC_OK;
}

/* The statements that name the tables can only be prepared once the tables exist, so they are
 * prepared at open when the schema is already there, else by init_schema, else by the first call
 * that needs them (another handle may have created the schema meanwhile). Either way each is
 * prepared once per handle and then reused. */
hc_err_t sqlite_ensure_prepared(sqlite_store_t *sst, char *errstr, size_t errstr_size)
{
    hc_err_t err;

    if (sst->prepared) {
        return HC_OK;
    }
    err = prepare_range(sst, STMT_FIRST_SCHEMA, STMT_COUNT_, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    sst->prepared = true;
    return HC_OK;
}

static hc_err_t schema_exists(sqlite_store_t *sst, bool *exists, char *errstr, size_t errstr_size)
{
    sqlite3_stmt *stmt = NULL;
    hc_err_t err = HC_OK;
    int rc;

    rc = sqlite3_prepare_v2(sst->db,
                            "SELECT count(*) FROM sqlite_master WHERE type = 'table'"
                            " AND name IN ('hotcount_counts', 'hotcount_offsets')",
                            -1, &stmt, NULL);
    if (rc == SQLITE_OK) {
        rc = sqlite3_step(stmt);
    }
    if (rc != SQLITE_ROW) {
        err = sqlite_sql_fail(sst, rc, "reading the schema", errstr, errstr_size);
        goto out_finalize;
    }
    *exists = sqlite3_column_int(stmt, 0) == 2;
out_finalize:
    sqlite3_finalize(stmt);
    return err;
}

static void sqlite_close(hc_store_t *st)
{
    sqlite_store_t *sst = sqlite_store(st);
    int id;

    if (sst == NULL) {
        return;
    }
    for (id = 0; id < STMT_COUNT_; id++) {
        sqlite3_finalize(sst->stmt[id]); /* accepts NULL */
    }
    /* Every statement is finalized above, so close_v2 closes now rather than deferring. */
    sqlite3_close_v2(sst->db);
    free(sst);
}

/* Runs a PRAGMA that answers with one text row and returns that row in buf. */
static hc_err_t pragma_text(sqlite_store_t *sst, const char *sql, char *buf, size_t buf_size,
                            char *errstr, size_t errstr_size)
{
    sqlite3_stmt *stmt = NULL;
    const unsigned char *text;
    hc_err_t err = HC_OK;
    int rc;

    rc = sqlite3_prepare_v2(sst->db, sql, -1, &stmt, NULL);
    if (rc == SQLITE_OK) {
        rc = sqlite3_step(stmt);
    }
    if (rc != SQLITE_ROW) {
        err = sqlite_sql_fail(sst, rc, sql, errstr, errstr_size);
        goto out_finalize;
    }
    text = sqlite3_column_text(stmt, 0);
    snprintf(buf, buf_size, "%s", text != NULL ? (const char *)text : "");
out_finalize:
    sqlite3_finalize(stmt);
    return err;
}

static hc_err_t sqlite_open(const hc_config_t *cfg, hc_store_t **stp, char *errstr,
                            size_t errstr_size)
{
    sqlite_store_t *sst;
    const char *path;
    char mode[16];
    hc_err_t err;
    bool exists = false;
    int rc;

    *stp = NULL;
    if (strncmp(cfg->store, SQLITE_URI_PREFIX, strlen(SQLITE_URI_PREFIX)) != 0 ||
        cfg->store[strlen(SQLITE_URI_PREFIX)] == '\0') {
        hc_errstr_set(errstr, errstr_size, "store: expected sqlite:PATH, got \"%s\"", cfg->store);
        return HC_ERR_INVALID;
    }
    path = cfg->store + strlen(SQLITE_URI_PREFIX);

    sst = calloc(1, sizeof(*sst));
    if (sst == NULL) {
        hc_errstr_set(errstr, errstr_size, "sqlite store: out of memory");
        return HC_ERR_FATAL;
    }
    sst->base.ops = hc_store_sqlite_backend.ops;

    /* NOMUTEX: a handle is used by one thread at a time (store.h), so SQLite's per-connection
     * mutex would be pure overhead. Without SQLITE_OPEN_URI the path is taken literally. */
    rc = sqlite3_open_v2(path, &sst->db,
                         SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc != SQLITE_OK) {
        /* A path that cannot be opened is a configuration mistake, reported against the key. */
        hc_errstr_set(errstr, errstr_size, "store: cannot open sqlite database \"%s\": %s", path,
                      sst->db != NULL ? sqlite3_errmsg(sst->db) : sqlite3_errstr(rc));
        err = (rc & 0xff) == SQLITE_CANTOPEN ? HC_ERR_INVALID : err_class(rc);
        goto fail_close;
    }
    /* Before anything that may take a lock, so that switching to WAL waits out other handles. */
    /* How long a call waits for another handle's write lock before it reports HC_ERR_TRANSIENT:
     * cfg->timeouts.store_statement_ms (5 s). Batches commit in milliseconds; 5 s only runs out
     * when another process hangs on to the lock. */
    hc_timeouts_t scratch;
    sqlite3_busy_timeout(sst->db, (int)hc_store_timeouts(cfg, &scratch)->store_statement_ms);

    /* WAL lets readers (get, top, verify) run beside stage 2's writer, and makes a commit one
     * append instead of a rollback-journal round trip. The mode is stored in the file; an
     * in-memory database answers "memory", which is fine: nothing to share, nothing to lose. */
    err = pragma_text(sst, "PRAGMA journal_mode = WAL", mode, sizeof(mode), errstr, errstr_size);
    if (err != HC_OK) {
        goto fail_close;
    }
    if (strcmp(mode, "wal") != 0 && strcmp(mode, "memory") != 0) {
        hc_errstr_set(errstr, errstr_size,
                      "sqlite store: \"%s\" refused journal_mode=WAL (got \"%s\")", path, mode);
        err = HC_ERR_FATAL;
        goto fail_close;
    }
    /* See the file comment: durable enough, because data and offsets commit together. */
    rc = sqlite3_exec(sst->db, "PRAGMA synchronous = NORMAL", NULL, NULL, NULL);
    if (rc != SQLITE_OK) {
        err = sqlite_sql_fail(sst, rc, "PRAGMA synchronous", errstr, errstr_size);
        goto fail_close;
    }

    err = prepare_range(sst, 0, STMT_FIRST_SCHEMA, errstr, errstr_size);
    if (err != HC_OK) {
        goto fail_close;
    }
    err = schema_exists(sst, &exists, errstr, errstr_size);
    if (err != HC_OK) {
        goto fail_close;
    }
    if (exists) {
        err = sqlite_ensure_prepared(sst, errstr, errstr_size);
        if (err != HC_OK) {
            goto fail_close;
        }
    }
    *stp = &sst->base;
    return HC_OK;

fail_close:
    sqlite_close(&sst->base);
    return err;
}

static hc_err_t sqlite_init_schema(hc_store_t *st, char *errstr, size_t errstr_size)
{
    sqlite_store_t *sst = sqlite_store(st);
    hc_err_t err;
    int rc;

    rc = sqlite3_exec(sst->db, schema_sql, NULL, NULL, NULL);
    if (rc != SQLITE_OK) {
        err = sqlite_sql_fail(sst, rc, "creating the schema", errstr, errstr_size);
        return sqlite_rollback(sst, err, errstr, errstr_size);
    }
    return sqlite_ensure_prepared(sst, errstr, errstr_size);
}

/* The database file's device and inode: a restore, or a delete and a new file, under the same
 * path changes them (this handle would still read the old, unlinked file). An in-memory or
 * temporary database has no file: no identity. */
static hc_err_t sqlite_identity(hc_store_t *st, char *id_out, size_t id_size, char *errstr,
                                size_t errstr_size)
{
    sqlite_store_t *sst = sqlite_store(st);
    const char *path = sqlite3_db_filename(sst->db, "main");
    struct stat sb;

    if (path == NULL || path[0] == '\0') {
        id_out[0] = '\0';
        return HC_OK;
    }
    if (stat(path, &sb) != 0) {
        /* gone: a different store from the one this handle has open */
        snprintf(id_out, id_size, "missing");
        (void)errstr;
        (void)errstr_size;
        return HC_OK;
    }
    snprintf(id_out, id_size, "%llu:%llu", (unsigned long long)sb.st_dev,
             (unsigned long long)sb.st_ino);
    return HC_OK;
}

static const hc_store_ops_t sqlite_ops = {
    .kind = "sqlite",
    .open = sqlite_open,
    .close = sqlite_close,
    .init_schema = sqlite_init_schema,
    .read_offsets = sqlite_read_offsets,
    .apply = sqlite_apply,
    .get = sqlite_get,
    .top = sqlite_top,
    .foreach = sqlite_foreach,
    .identity = sqlite_identity,
};

/* One transaction: BEGIN IMMEDIATE and, under a concurrent checkpoint, COMMIT wait on the file's
 * lock at most busy_timeout, this. */
#define SQLITE_BUSY_MS 5000

static const char *const sqlite_schemes[] = {SQLITE_URI_PREFIX, NULL};

static int64_t sqlite_statements_per_batch(int64_t max_keys)
{
    (void)max_keys;
    return 2; /* the transaction's two lock waits */
}

const hc_store_backend_t hc_store_sqlite_backend = {
    .facts =
        {
            .name = "sqlite",
            .title = "SQLite",
            .schemes = sqlite_schemes,
            .uri_form = "sqlite:PATH",
            .after_scheme = "a file path",
            .takes_password_file = false,
            .connect_ms = HC_STORE_CONNECT_MS,
            .statement_ms = SQLITE_BUSY_MS,
            .statements_per_batch = sqlite_statements_per_batch,
        },
    .ops = &sqlite_ops,
};
