/* The PostgreSQL backend's session: connecting and reconnecting, the session settings, the
 * prepared statements, one statement's round trip within its deadline, and the error classes
 * (SQLSTATE -> hc_err_t). */
#include "pgsql_impl.h"

const struct stmt_def pgsql_stmt_defs[STMT_COUNT_] = {
    [STMT_OFFSETS_READ] = {"hotcount_offsets_read",
                           "reading offsets",
                           "SELECT partition, next_offset FROM hotcount_offsets"
                           " WHERE consumer_group = $1 AND topic = $2 AND partition = ANY ($3)",
                           3,
                           {OID_TEXT, OID_TEXT, OID_INT4_ARRAY}},
    [STMT_OFFSETS_CAS] = {"hotcount_offsets_cas",
                          "moving offsets",
                          "UPDATE hotcount_offsets AS o SET next_offset = u.next"
                          " FROM unnest($3, $4, $5) AS u(partition, expected, next)"
                          " WHERE o.consumer_group = $1 AND o.topic = $2"
                          " AND o.partition = u.partition AND o.next_offset = u.expected"
                          " RETURNING o.partition",
                          5,
                          {OID_TEXT, OID_TEXT, OID_INT4_ARRAY, OID_INT8_ARRAY, OID_INT8_ARRAY}},
    [STMT_OFFSETS_CLAIM] = {"hotcount_offsets_claim",
                            "claiming offsets",
                            "INSERT INTO hotcount_offsets"
                            " (consumer_group, topic, partition, next_offset)"
                            " SELECT $1, $2, u.partition, u.next"
                            " FROM unnest($3, $4) AS u(partition, next)"
                            " ON CONFLICT (consumer_group, topic, partition) DO NOTHING"
                            " RETURNING partition",
                            4,
                            {OID_TEXT, OID_TEXT, OID_INT4_ARRAY, OID_INT8_ARRAY}},
    [STMT_COUNTS_ADD] = {"hotcount_counts_add",
                         "adding deltas",
                         "INSERT INTO hotcount_counts AS c (post_id, likes, updated_at)"
                         " SELECT u.post_id, u.likes, to_timestamp($3::float8 / 1000)"
                         " FROM unnest($1, $2) AS u(post_id, likes)"
                         " ON CONFLICT (post_id) DO UPDATE"
                         " SET likes = c.likes + EXCLUDED.likes, updated_at = EXCLUDED.updated_at"
                         /* a sum past bigint would raise 22003 and fail the whole batch without
                          * naming its post: such a row is left alone and missing from RETURNING,
                          * which counts_add turns into HC_ERR_RECORD for that post */
                         " WHERE CASE WHEN EXCLUDED.likes >= 0"
                         " THEN c.likes <= 9223372036854775807 - EXCLUDED.likes"
                         " ELSE c.likes >= -9223372036854775807 - 1 - EXCLUDED.likes END"
                         " RETURNING c.post_id, c.likes",
                         3,
                         {OID_TEXT_ARRAY, OID_INT8_ARRAY, OID_INT8}},
    [STMT_COUNTS_GET] = {"hotcount_counts_get",
                         "reading counts",
                         "SELECT u.i, c.likes FROM unnest($1) WITH ORDINALITY AS u(post_id, i)"
                         " JOIN hotcount_counts AS c ON c.post_id = u.post_id",
                         1,
                         {OID_TEXT_ARRAY}},
    [STMT_COUNTS_TOP] = {"hotcount_counts_top",
                         "reading the top counts",
                         "SELECT post_id, likes FROM hotcount_counts"
                         " ORDER BY likes DESC, post_id COLLATE \"C\" LIMIT $1",
                         1,
                         {OID_INT8}},
};

pgsql_store_t *pgsql_store(hc_store_t *st)
{
    return (pgsql_store_t *)st;
}

int64_t pgsql_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* libpq messages end in a newline and may span lines (a hint on the second): one line, for
 * errstr and the log. */
const char *pgsql_one_line(const char *msg, char *buf, size_t buf_size)
{
    size_t n = 0;

    for (; msg != NULL && *msg != '\0' && n + 1 < buf_size; msg++) {
        if (*msg == '\n' || *msg == '\r' || *msg == '\t') {
            if (n > 0 && buf[n - 1] != ' ') {
                buf[n++] = ' ';
            }
        } else {
            buf[n++] = *msg;
        }
    }
    while (n > 0 && buf[n - 1] == ' ') {
        n--;
    }
    buf[n] = '\0';
    return buf;
}

/* libpq's URI parse errors quote the part they could not parse, which may be the password or
 * the whole URI: keep the message, drop what it quotes. */
const char *pgsql_redact_quoted(const char *msg, char *buf, size_t buf_size)
{
    bool quoted = false;
    size_t n = 0;

    for (; *msg != '\0' && n + 4 < buf_size; msg++) {
        if (*msg == '"') {
            quoted = !quoted;
            if (quoted) {
                memcpy(buf + n, "\"...", 4);
                n += 4;
            } else {
                buf[n++] = '"';
            }
        } else if (!quoted) {
            buf[n++] = *msg == '\n' ? ' ' : *msg;
        }
    }
    while (n > 0 && buf[n - 1] == ' ') {
        n--;
    }
    buf[n] = '\0';
    return buf;
}

void pgsql_on_notice(void *arg, const char *message)
{
    (void)arg;
    /* "relation already exists, skipping" and the like: libpq would print them to stderr. */
    hc_log(HC_LOG_DEBUG, "store", "postgresql: %s", message);
}

hc_err_t pgsql_out_of_memory(char *errstr, size_t errstr_size)
{
    hc_errstr_set(errstr, errstr_size, "postgresql store: out of memory");
    return HC_ERR_FATAL;
}

/* The connection failed under a statement: report it, and reconnect on the next call. */
static hc_err_t lost(pgsql_store_t *pst, const char *what, char *errstr, size_t errstr_size)
{
    char msg[MSG_MAX];

    pst->broken = true;
    hc_errstr_set(errstr, errstr_size,
                  "postgresql store: %s: connection lost: %s (reconnecting on the next call)", what,
                  pgsql_one_line(PQerrorMessage(pst->conn), msg, sizeof(msg)));
    return HC_ERR_TRANSIENT;
}

static bool sqlstate_is(const char *state, const char *code)
{
    return strncmp(state, code, strlen(code)) == 0;
}

/* See the file comment for the classes. */
static hc_err_t sqlstate_class(const char *state, bool *drop_connection)
{
    *drop_connection = sqlstate_is(state, "08") || sqlstate_is(state, "57P01") ||
                       sqlstate_is(state, "57P02") || sqlstate_is(state, "57P03");
    if (*drop_connection || sqlstate_is(state, "40001") || sqlstate_is(state, "40P01") ||
        sqlstate_is(state, "57014") || sqlstate_is(state, "55P03") || sqlstate_is(state, "53")) {
        return HC_ERR_TRANSIENT;
    }
    return HC_ERR_FATAL;
}

/* Reports a result whose status is not the one wanted. */
static hc_err_t result_fail(pgsql_store_t *pst, const PGresult *res, const char *what, char *errstr,
                            size_t errstr_size)
{
    const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
    const char *primary = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
    const char *hint = "";
    bool drop = false;
    char msg[MSG_MAX];
    hc_err_t err;

    if (PQstatus(pst->conn) != CONNECTION_OK) {
        return lost(pst, what, errstr, errstr_size);
    }
    if (state == NULL) {
        /* Failed in libpq itself, or a status no caller expects. */
        hc_errstr_set(errstr, errstr_size, "postgresql store: %s: %s", what,
                      PQresultStatus(res) == PGRES_FATAL_ERROR
                          ? pgsql_one_line(PQresultErrorMessage(res), msg, sizeof(msg))
                          : PQresStatus(PQresultStatus(res)));
        return HC_ERR_FATAL;
    }
    err = sqlstate_class(state, &drop);
    if (drop) {
        pst->broken = true;
    }
    if (strcmp(state, "42P01") == 0 || strcmp(state, "42703") == 0) {
        hint = " (is hotcount's schema there? run `hotcount init`)";
    }
    hc_errstr_set(
        errstr, errstr_size, "postgresql store: %s: %s (SQLSTATE %s)%s", what,
        pgsql_one_line(primary != NULL ? primary : PQresultErrorMessage(res), msg, sizeof(msg)),
        state, hint);
    return err;
}

/* Waits until the socket is ready for `events`: 1 when ready, 0 at the deadline, -1 when the
 * socket is gone. */
static int wait_socket(PGconn *conn, short events, int64_t deadline)
{
    struct pollfd pfd = {.fd = PQsocket(conn), .events = events};
    int64_t left;
    int rc;

    if (pfd.fd < 0) {
        return -1;
    }
    for (;;) {
        left = deadline - pgsql_now_ms();
        if (left <= 0) {
            return 0;
        }
        rc = poll(&pfd, 1, left > INT_MAX ? INT_MAX : (int)left);
        if (rc != -1) {
            return rc > 0 ? 1 : 0;
        }
        if (errno != EINTR) {
            return -1;
        }
    }
}

/* Finishes the statement just sent: flushes it, waits for every result within pst->wait_ms and
 * returns the one that matters (the first failure, else the last) in *res_out when its status
 * is `want`; the caller PQclears it. On error *res_out is NULL. */
static hc_err_t await_result(pgsql_store_t *pst, const char *what, ExecStatusType want,
                             PGresult **res_out, char *errstr, size_t errstr_size)
{
    PGconn *conn = pst->conn;
    int64_t deadline = pgsql_now_ms() + pst->wait_ms;
    PGresult *res = NULL;

    if (pst->deadline_ms > 0 && pst->deadline_ms < deadline) {
        deadline = pst->deadline_ms; /* the batch's bound is the tighter one */
    }
    PGresult *next;
    ExecStatusType status;
    hc_err_t err;
    int rc;

    *res_out = NULL;
    /* A batch's parameters can exceed the socket buffer; in non-blocking mode PQflush sends what
     * fits and the server's answers are read meanwhile, so neither side waits on a full buffer
     * and a server that stops reading cannot hold us past the deadline. */
    while ((rc = PQflush(conn)) == 1) {
        rc = wait_socket(conn, POLLIN | POLLOUT, deadline);
        if (rc <= 0) {
            goto fail_wait;
        }
        if (!PQconsumeInput(conn)) {
            goto fail_lost;
        }
    }
    if (rc < 0) {
        goto fail_lost;
    }
    for (;;) {
        while (PQisBusy(conn)) {
            rc = wait_socket(conn, POLLIN, deadline);
            if (rc <= 0) {
                goto fail_wait;
            }
            if (!PQconsumeInput(conn)) {
                goto fail_lost;
            }
        }
        next = PQgetResult(conn);
        if (next == NULL) {
            break;
        }
        status = res != NULL ? PQresultStatus(res) : PGRES_COMMAND_OK;
        if (status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK) {
            PQclear(res);
            res = next;
        } else {
            PQclear(next);
        }
    }
    if (res == NULL) {
        goto fail_lost;
    }
    if (PQresultStatus(res) == want) {
        *res_out = res;
        return HC_OK;
    }
    err = result_fail(pst, res, what, errstr, errstr_size);
    goto out_clear;

fail_wait:
    if (rc == 0) {
        /* Mid-statement: the connection cannot be reused; PQreset closes it. */
        pst->broken = true;
        hc_errstr_set(errstr, errstr_size,
                      "postgresql store: %s: no answer from the server within %lld ms%s; "
                      "dropping the connection",
                      what, (long long)pst->wait_ms,
                      pst->deadline_ms > 0 ? " (or by the batch's deadline, store_batch_ms)" : "");
        err = HC_ERR_TRANSIENT;
        goto out_clear;
    }
fail_lost:
    err = lost(pst, what, errstr, errstr_size);
out_clear:
    PQclear(res);
    return err;
}

/* Runs SQL without parameters. binary: one statement over the extended protocol, rows in binary;
 * otherwise the simple protocol, which takes several statements separated by semicolons. */
hc_err_t pgsql_run_sql(pgsql_store_t *pst, const char *sql, const char *what, bool binary,
                       ExecStatusType want, PGresult **res_out, char *errstr, size_t errstr_size)
{
    int sent = binary ? PQsendQueryParams(pst->conn, sql, 0, NULL, NULL, NULL, NULL, 1)
                      : PQsendQuery(pst->conn, sql);

    *res_out = NULL;
    if (!sent) {
        return lost(pst, what, errstr, errstr_size);
    }
    return await_result(pst, what, want, res_out, errstr, errstr_size);
}

/* Runs a command that returns no rows (BEGIN, COMMIT, DECLARE ...). */
hc_err_t pgsql_run_cmd(pgsql_store_t *pst, const char *sql, const char *what, char *errstr,
                       size_t errstr_size)
{
    PGresult *res;
    hc_err_t err;

    err = pgsql_run_sql(pst, sql, what, false, PGRES_COMMAND_OK, &res, errstr, errstr_size);
    PQclear(res);
    return err;
}

/* Runs a prepared statement with binary parameters and binary results. */
hc_err_t pgsql_run_prepared(pgsql_store_t *pst, enum stmt_id id, const char *const *values,
                            const int *lengths, ExecStatusType want, PGresult **res_out,
                            char *errstr, size_t errstr_size)
{
    static const int binary[STMT_MAX_PARAMS] = {1, 1, 1, 1, 1};
    const struct stmt_def *def = &pgsql_stmt_defs[id];

    *res_out = NULL;
    if (!PQsendQueryPrepared(pst->conn, def->name, def->nparams, values, lengths, binary, 1)) {
        return lost(pst, def->what, errstr, errstr_size);
    }
    return await_result(pst, def->what, want, res_out, errstr, errstr_size);
}

/* Ends a failed transaction. Keeps the caller's error: when the ROLLBACK fails as well, the
 * connection is dropped instead, which rolls back on the server. */
hc_err_t pgsql_rollback(pgsql_store_t *pst, hc_err_t err)
{
    char ignored[MSG_MAX];
    PGTransactionStatusType ts;

    if (pst->broken || PQstatus(pst->conn) != CONNECTION_OK) {
        return err;
    }
    ts = PQtransactionStatus(pst->conn);
    if (ts == PQTRANS_IDLE) {
        return err;
    }
    if (ts != PQTRANS_INTRANS && ts != PQTRANS_INERROR) {
        pst->broken = true;
        return err;
    }
    if (pgsql_run_cmd(pst, "ROLLBACK", "rollback", ignored, sizeof(ignored)) != HC_OK) {
        pst->broken = true;
    }
    return err;
}

/* The effective statement_timeout sets the client-side bound (see PGSQL_CLIENT_GRACE_MS). */
hc_err_t pgsql_setup_session(pgsql_store_t *pst, char *errstr, size_t errstr_size)
{
    PGresult *res;
    const char *setting;
    char *end;
    long long ms;
    hc_err_t err;

    if (PQsetnonblocking(pst->conn, 1) != 0) {
        return lost(pst, "setting up the session", errstr, errstr_size);
    }
    pst->wait_ms = pst->statement_ms;
    err = pgsql_run_sql(pst, pst->session_sql, "setting up the session", false, PGRES_TUPLES_OK,
                        &res, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    setting = PQntuples(res) == 1 ? PQgetvalue(res, 0, 0) : "";
    errno = 0;
    ms = strtoll(setting, &end, 10);
    if (errno != 0 || end == setting || *end != '\0' || ms < 0) {
        hc_errstr_set(errstr, errstr_size,
                      "postgresql store: unexpected statement_timeout setting \"%s\"", setting);
        err = HC_ERR_FATAL;
        goto out_clear;
    }
    /* A statement_timeout the URI, role or database set moves the client's wait with it (the
     * same grace above it), but never past store_statement_ms, which the watchdog counts on. */
    if (ms > 0 && ms < INT64_MAX / 2) {
        int64_t grace = pst->statement_ms - pst->server_statement_ms;
        pst->wait_ms = ms + grace < pst->statement_ms ? ms + grace : pst->statement_ms;
    }
    pst->session_ready = true;
out_clear:
    PQclear(res);
    return err;
}

/* PQreset reconnects with the parameters of the first connect, so the URI is not kept. */
static hc_err_t reconnect(pgsql_store_t *pst, char *errstr, size_t errstr_size)
{
    char msg[MSG_MAX];

    pst->session_ready = false;
    memset(pst->prepared, 0, sizeof(pst->prepared)); /* they died with the old session */
    PQreset(pst->conn);
    if (PQstatus(pst->conn) != CONNECTION_OK) {
        pst->broken = true;
        hc_errstr_set(errstr, errstr_size,
                      "store: cannot reconnect to the PostgreSQL server of `store`: %s",
                      pgsql_one_line(PQerrorMessage(pst->conn), msg, sizeof(msg)));
        return HC_ERR_TRANSIENT;
    }
    pst->broken = false;
    hc_log(HC_LOG_INFO, "store", "postgresql store: reconnected");
    return HC_OK;
}

/* Statements name the tables, so they are prepared once the schema exists: by init_schema, or
 * by the first call that needs them (another process may have run `hotcount init`). Each is
 * prepared once per connection and reused. */
hc_err_t pgsql_prepare_all(pgsql_store_t *pst, char *errstr, size_t errstr_size)
{
    const struct stmt_def *def;
    PGresult *res;
    hc_err_t err;
    int id;

    for (id = 0; id < STMT_COUNT_; id++) {
        if (pst->prepared[id]) {
            continue;
        }
        def = &pgsql_stmt_defs[id];
        if (!PQsendPrepare(pst->conn, def->name, def->sql, def->nparams, def->types)) {
            return lost(pst, "preparing a statement", errstr, errstr_size);
        }
        err =
            await_result(pst, "preparing a statement", PGRES_COMMAND_OK, &res, errstr, errstr_size);
        PQclear(res);
        if (err != HC_OK) {
            return err;
        }
        pst->prepared[id] = true;
    }
    return HC_OK;
}

/* Called first by every operation: reconnects after a loss, sets the session up, and prepares
 * the statements when the caller needs the tables. */
hc_err_t pgsql_ensure_ready(pgsql_store_t *pst, bool need_schema, char *errstr, size_t errstr_size)
{
    hc_err_t err;

    if (pst->broken || PQstatus(pst->conn) != CONNECTION_OK) {
        err = reconnect(pst, errstr, errstr_size);
        if (err != HC_OK) {
            return err;
        }
    }
    if (!pst->session_ready) {
        err = pgsql_setup_session(pst, errstr, errstr_size);
        if (err != HC_OK) {
            return err;
        }
    }
    return need_schema ? pgsql_prepare_all(pst, errstr, errstr_size) : HC_OK;
}
