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
 * No index on likes, as in the SQLite store: likes changes in every update, so such an index
 * would turn every HOT update into two index insertions, on the write path that this program
 * exists to keep cheap; `top` is an operator's query and a top-N sort over one scan serves it
 * (0.45 s for two million rows on a two-core test machine).
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
#include "store_impl.h"
#include "store_util.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <libpq-fe.h>
#include <limits.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hotcount/log.h"
#include "hotcount/timeouts.h"

/* Type OIDs of the binary parameters and results. They are fixed in PostgreSQL's catalog and
 * have never changed; the server headers that name them are not a client dependency. */
#define OID_INT8 20
#define OID_INT4 23
#define OID_TEXT 25
#define OID_INT4_ARRAY 1007
#define OID_TEXT_ARRAY 1009
#define OID_INT8_ARRAY 1016

/* Every bound comes from cfg->timeouts (hotcount/timeouts.h): connect_timeout from
 * store_connect_ms, the default statement_timeout from store_server_statement_ms (30 s), the
 * client's wait on one statement from store_statement_ms (45 s: the server's own timeout, which
 * keeps the connection usable, fires first whenever the server is alive), and one whole batch
 * from store_batch_ms: every statement of a batch waits at most until the batch's deadline. */

/* Posts per upsert statement: bounds one parameter at 65536 * (4 + 256) bytes, far below libpq's
 * int lengths, so a batch of any size can be sent. Speed is not the reason: on loopback 50k posts
 * took the same time as one statement or as five of 10k. */
#define PGSQL_APPLY_CHUNK 65536
/* Post ids per lookup in get, and rows per FETCH in foreach: a few MB per round trip. */
#define PGSQL_GET_CHUNK 10000
#define PGSQL_FETCH_ROWS 10000

#define STRINGIFY_(x) #x
#define STRINGIFY(x) STRINGIFY_(x)

/* pg_advisory_xact_lock key that serializes init_schema across processes: concurrent CREATE
 * TABLE IF NOT EXISTS of one name can fail with a unique violation in pg_type. The bytes
 * spell "hotcount". */
#define PGSQL_SCHEMA_LOCK_KEY "7525361472779939444"

#define ARRAY_HEADER 20 /* a one-dimensional binary array's header, see array_start */
#define MSG_MAX 512     /* room for one libpq message in an error string */

enum stmt_id {
    STMT_OFFSETS_READ,
    STMT_OFFSETS_CAS,
    STMT_OFFSETS_CLAIM,
    STMT_COUNTS_ADD,
    STMT_COUNTS_GET,
    STMT_COUNTS_TOP,
    STMT_COUNT_, /* number of statements */
};

#define STMT_MAX_PARAMS 5

static const struct stmt_def {
    const char *name; /* prepared once per connection under this name */
    const char *what; /* for error messages */
    const char *sql;
    int nparams;
    Oid types[STMT_MAX_PARAMS];
} stmt_defs[STMT_COUNT_] = {
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

/* One implicit transaction (a simple-protocol string without BEGIN), so the advisory lock is
 * held until both tables exist and a concurrent init waits, then finds them. */
static const char schema_sql[] = "SELECT pg_advisory_xact_lock(" PGSQL_SCHEMA_LOCK_KEY ");"
                                 "CREATE TABLE IF NOT EXISTS hotcount_counts ("
                                 " post_id TEXT COLLATE \"C\" PRIMARY KEY,"
                                 " likes BIGINT NOT NULL,"
                                 " updated_at TIMESTAMPTZ NOT NULL DEFAULT now()"
                                 ") WITH (fillfactor = 90);"
                                 "CREATE TABLE IF NOT EXISTS hotcount_offsets ("
                                 " consumer_group TEXT COLLATE \"C\","
                                 " topic TEXT COLLATE \"C\","
                                 " partition INT,"
                                 " next_offset BIGINT NOT NULL,"
                                 " PRIMARY KEY (consumer_group, topic, partition)"
                                 ");";

/* Sets the default timeout only where nothing else did ('0' is also what an explicit 0 reads
 * as: to turn the timeout off, set a very large one), then reports the one in force, in ms. */
static const char session_sql_fmt[] =
    "SELECT set_config('statement_timeout', '%" PRId64 "ms', false)"
    " WHERE current_setting('statement_timeout') = '0';"
    "SELECT setting FROM pg_settings WHERE name = 'statement_timeout'";

typedef struct scratch {
    void *data; /* owned */
    size_t cap;
} scratch_t;

typedef struct pgsql_store {
    hc_store_t base;    /* first: store.c only sees this */
    PGconn *conn;       /* owned; PQreset reuses it with the parameters of the first connect */
    bool broken;        /* the connection is lost or mid-statement: reconnect before using it */
    bool session_ready; /* session_sql ran since the last (re)connect */
    bool prepared[STMT_COUNT_];  /* per connection: a reconnect forgets them all */
    int64_t wait_ms;             /* client-side bound on one statement */
    int64_t statement_ms;        /* cfg->timeouts.store_statement_ms: wait_ms at most */
    int64_t server_statement_ms; /* cfg->timeouts.store_server_statement_ms */
    int64_t batch_ms;            /* cfg->timeouts.store_batch_ms */
    int64_t deadline_ms;         /* while a batch runs, its end (now_ms()); else 0 */
    char session_sql[300];       /* session_sql_fmt with the default statement_timeout */
    scratch_t param[3];          /* binary array parameters of the statement being sent */
    scratch_t deltas;            /* the batch's deltas, sorted and merged */
    scratch_t totals;            /* the new total of each of them, in the same order */
    scratch_t offsets;           /* the batch's offsets, sorted */
} pgsql_store_t;

static pgsql_store_t *pgsql_store(hc_store_t *st)
{
    return (pgsql_store_t *)st;
}

static int64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void put_be32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

static void put_be64(unsigned char *p, uint64_t v)
{
    put_be32(p, (uint32_t)(v >> 32));
    put_be32(p + 4, (uint32_t)v);
}

static uint32_t get_be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static uint64_t get_be64(const unsigned char *p)
{
    return (uint64_t)get_be32(p) << 32 | get_be32(p + 4);
}

/* Grows a scratch allocation to at least `need` bytes; kept for the next call, since stage 2
 * sends a batch of about the same size every second. */
static bool scratch_reserve(scratch_t *s, size_t need)
{
    void *data;

    if (need <= s->cap) {
        return true;
    }
    if (need / 2 < s->cap) {
        need = s->cap * 2;
    }
    data = realloc(s->data, need);
    if (data == NULL) {
        return false;
    }
    s->data = data;
    s->cap = need;
    return true;
}

/* Starts a one-dimensional binary array of n elements in s, as the server's array_recv reads
 * it: number of dimensions, has-nulls flag, element type, then the dimension's length and lower
 * bound; each element follows as a 4-byte length and its bytes. Returns where the first element
 * goes, or NULL when `size` (header included) is too large or memory ran out. */
static unsigned char *array_start(scratch_t *s, size_t size, Oid elem, size_t n)
{
    unsigned char *p;

    if (size > INT_MAX || n > INT32_MAX || !scratch_reserve(s, size)) {
        return NULL;
    }
    p = s->data;
    put_be32(p, 1);
    put_be32(p + 4, 0);
    put_be32(p + 8, elem);
    put_be32(p + 12, (uint32_t)n);
    put_be32(p + 16, 1);
    return p + ARRAY_HEADER;
}

/* True when s[0..len) is text PostgreSQL takes in a UTF8 database: well-formed UTF-8 without
 * NUL, overlong forms, surrogates or code points past U+10FFFF. */
static bool is_storable(const unsigned char *s, size_t len)
{
    size_t i = 0;
    size_t k;
    size_t more;
    uint32_t cp;

    while (i < len) {
        if (s[i] == 0) {
            return false;
        }
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        if (s[i] >= 0xc2 && s[i] <= 0xdf) {
            more = 1;
            cp = s[i] & 0x1fu;
        } else if (s[i] >= 0xe0 && s[i] <= 0xef) {
            more = 2;
            cp = s[i] & 0x0fu;
        } else if (s[i] >= 0xf0 && s[i] <= 0xf4) {
            more = 3;
            cp = s[i] & 0x07u;
        } else {
            return false;
        }
        if (len - i - 1 < more) {
            return false;
        }
        for (k = 1; k <= more; k++) {
            if ((s[i + k] & 0xc0) != 0x80) {
                return false;
            }
            cp = cp << 6 | (s[i + k] & 0x3fu);
        }
        if ((more == 2 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
            (more == 3 && (cp < 0x10000 || cp > 0x10ffff))) {
            return false;
        }
        i += more + 1;
    }
    return true;
}

/* libpq messages end in a newline and may span lines (a hint on the second): one line, for
 * errstr and the log. */
static const char *one_line(const char *msg, char *buf, size_t buf_size)
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
static const char *redact_quoted(const char *msg, char *buf, size_t buf_size)
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

static void on_notice(void *arg, const char *message)
{
    (void)arg;
    /* "relation already exists, skipping" and the like: libpq would print them to stderr. */
    hc_log(HC_LOG_DEBUG, "store", "postgresql: %s", message);
}

static hc_err_t out_of_memory(char *errstr, size_t errstr_size)
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
                  one_line(PQerrorMessage(pst->conn), msg, sizeof(msg)));
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
                          ? one_line(PQresultErrorMessage(res), msg, sizeof(msg))
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
    hc_errstr_set(errstr, errstr_size, "postgresql store: %s: %s (SQLSTATE %s)%s", what,
                  one_line(primary != NULL ? primary : PQresultErrorMessage(res), msg, sizeof(msg)),
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
        left = deadline - now_ms();
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
    int64_t deadline = now_ms() + pst->wait_ms;
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
static hc_err_t run_sql(pgsql_store_t *pst, const char *sql, const char *what, bool binary,
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
static hc_err_t run_cmd(pgsql_store_t *pst, const char *sql, const char *what, char *errstr,
                        size_t errstr_size)
{
    PGresult *res;
    hc_err_t err;

    err = run_sql(pst, sql, what, false, PGRES_COMMAND_OK, &res, errstr, errstr_size);
    PQclear(res);
    return err;
}

/* Runs a prepared statement with binary parameters and binary results. */
static hc_err_t run_prepared(pgsql_store_t *pst, enum stmt_id id, const char *const *values,
                             const int *lengths, ExecStatusType want, PGresult **res_out,
                             char *errstr, size_t errstr_size)
{
    static const int binary[STMT_MAX_PARAMS] = {1, 1, 1, 1, 1};
    const struct stmt_def *def = &stmt_defs[id];

    *res_out = NULL;
    if (!PQsendQueryPrepared(pst->conn, def->name, def->nparams, values, lengths, binary, 1)) {
        return lost(pst, def->what, errstr, errstr_size);
    }
    return await_result(pst, def->what, want, res_out, errstr, errstr_size);
}

/* Ends a failed transaction. Keeps the caller's error: when the ROLLBACK fails as well, the
 * connection is dropped instead, which rolls back on the server. */
static hc_err_t rollback(pgsql_store_t *pst, hc_err_t err)
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
    if (run_cmd(pst, "ROLLBACK", "rollback", ignored, sizeof(ignored)) != HC_OK) {
        pst->broken = true;
    }
    return err;
}

/* The effective statement_timeout sets the client-side bound (see PGSQL_CLIENT_GRACE_MS). */
static hc_err_t setup_session(pgsql_store_t *pst, char *errstr, size_t errstr_size)
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
    err = run_sql(pst, pst->session_sql, "setting up the session", false, PGRES_TUPLES_OK, &res,
                  errstr, errstr_size);
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
                      one_line(PQerrorMessage(pst->conn), msg, sizeof(msg)));
        return HC_ERR_TRANSIENT;
    }
    pst->broken = false;
    hc_log(HC_LOG_INFO, "store", "postgresql store: reconnected");
    return HC_OK;
}

/* Statements name the tables, so they are prepared once the schema exists: by init_schema, or
 * by the first call that needs them (another process may have run `hotcount init`). Each is
 * prepared once per connection and reused. */
static hc_err_t prepare_all(pgsql_store_t *pst, char *errstr, size_t errstr_size)
{
    const struct stmt_def *def;
    PGresult *res;
    hc_err_t err;
    int id;

    for (id = 0; id < STMT_COUNT_; id++) {
        if (pst->prepared[id]) {
            continue;
        }
        def = &stmt_defs[id];
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
static hc_err_t ensure_ready(pgsql_store_t *pst, bool need_schema, char *errstr, size_t errstr_size)
{
    hc_err_t err;

    if (pst->broken || PQstatus(pst->conn) != CONNECTION_OK) {
        err = reconnect(pst, errstr, errstr_size);
        if (err != HC_OK) {
            return err;
        }
    }
    if (!pst->session_ready) {
        err = setup_session(pst, errstr, errstr_size);
        if (err != HC_OK) {
            return err;
        }
    }
    return need_schema ? prepare_all(pst, errstr, errstr_size) : HC_OK;
}

/* Binary result values, checked: a table laid out differently (someone else's) must fail
 * loudly, not be read as garbage. */
static bool value_i64(const PGresult *res, int row, int col, int64_t *out)
{
    if (PQgetisnull(res, row, col) || PQgetlength(res, row, col) != 8) {
        return false;
    }
    *out = (int64_t)get_be64((const unsigned char *)PQgetvalue(res, row, col));
    return true;
}

static bool value_i32(const PGresult *res, int row, int col, int32_t *out)
{
    if (PQgetisnull(res, row, col) || PQgetlength(res, row, col) != 4) {
        return false;
    }
    *out = (int32_t)get_be32((const unsigned char *)PQgetvalue(res, row, col));
    return true;
}

static bool value_post_id(const PGresult *res, int row, int col, const char **id, size_t *len)
{
    int n = PQgetlength(res, row, col);

    if (PQgetisnull(res, row, col) || n <= 0 || n > HC_POST_ID_MAX) {
        return false;
    }
    *id = PQgetvalue(res, row, col);
    *len = (size_t)n;
    return true;
}

static hc_err_t layout_fail(const char *what, char *errstr, size_t errstr_size)
{
    hc_errstr_set(errstr, errstr_size,
                  "postgresql store: %s: unexpected row (a NULL, a post_id outside 1..%d bytes or "
                  "a column of another type: is the table hotcount's?)",
                  what, HC_POST_ID_MAX);
    return HC_ERR_FATAL;
}

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
            return out_of_memory(errstr, errstr_size);
        }
        hc_errstr_set(
            errstr, errstr_size,
            "store: bad PostgreSQL URI in `store` (not shown: it may hold a password): %s",
            redact_quoted(msg, line, sizeof(line)));
        PQfreemem(msg);
        return HC_ERR_INVALID;
    }
    PQconninfoFree(opts);
    return HC_OK;
}

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
        return out_of_memory(errstr, errstr_size);
    }
    pst->base.ops = hc_store_pgsql_backend.ops;
    pst->statement_ms = t->store_statement_ms;
    pst->server_statement_ms = t->store_server_statement_ms;
    pst->batch_ms = t->store_batch_ms;
    pst->wait_ms = pst->statement_ms;
    snprintf(pst->session_sql, sizeof(pst->session_sql), session_sql_fmt, pst->server_statement_ms);
    pst->conn = PQconnectdbParams(keys, values, 1);
    if (pst->conn == NULL) {
        err = out_of_memory(errstr, errstr_size);
        goto fail_close;
    }
    PQsetNoticeProcessor(pst->conn, on_notice, NULL);
    if (PQstatus(pst->conn) != CONNECTION_OK) {
        /* Unreachable, refused, or a wrong password or database: libpq's message tells which,
         * but not in a way a program can rely on, so all of them are worth a retry. */
        hc_errstr_set(errstr, errstr_size,
                      "store: cannot connect to the PostgreSQL server of `store`: %s",
                      one_line(PQerrorMessage(pst->conn), msg, sizeof(msg)));
        err = HC_ERR_TRANSIENT;
        goto fail_close;
    }
    err = setup_session(pst, errstr, errstr_size);
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

    err = ensure_ready(pst, false, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    /* An implicit transaction rolls itself back on error: nothing to clean up. */
    err = run_cmd(pst, schema_sql, "creating the schema", errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    /* Preparing also checks that tables which already existed have the columns we use. */
    return prepare_all(pst, errstr, errstr_size);
}

/* next_offset of each of partitions[0..count) into offsets_out, HC_OFFSET_NONE where no row
 * exists; inside the caller's transaction, if any. */
static hc_err_t offsets_query(pgsql_store_t *pst, const char *group, const char *topic,
                              const int32_t *partitions, size_t count, int64_t *offsets_out,
                              char *errstr, size_t errstr_size)
{
    const char *values[3];
    int lengths[3];
    unsigned char *p;
    PGresult *res;
    int64_t next;
    int32_t partition;
    hc_err_t err;
    size_t i;
    int row;

    if (count > INT32_MAX / 8) {
        return out_of_memory(errstr, errstr_size);
    }
    p = array_start(&pst->param[0], ARRAY_HEADER + 8 * count, OID_INT4, count);
    if (p == NULL) {
        return out_of_memory(errstr, errstr_size);
    }
    for (i = 0; i < count; i++, p += 8) {
        put_be32(p, 4);
        put_be32(p + 4, (uint32_t)partitions[i]);
    }
    values[0] = group;
    lengths[0] = (int)strlen(group);
    values[1] = topic;
    lengths[1] = (int)strlen(topic);
    values[2] = pst->param[0].data;
    lengths[2] = (int)(ARRAY_HEADER + 8 * count);
    err = run_prepared(pst, STMT_OFFSETS_READ, values, lengths, PGRES_TUPLES_OK, &res, errstr,
                       errstr_size);
    if (err != HC_OK) {
        return err;
    }
    for (i = 0; i < count; i++) {
        offsets_out[i] = HC_OFFSET_NONE;
    }
    /* One row per partition that has one; a handful of partitions, so a nested scan is fine. */
    for (row = 0; row < PQntuples(res); row++) {
        if (!value_i32(res, row, 0, &partition) || !value_i64(res, row, 1, &next)) {
            err = layout_fail(stmt_defs[STMT_OFFSETS_READ].what, errstr, errstr_size);
            break;
        }
        for (i = 0; i < count; i++) {
            if (partitions[i] == partition) {
                offsets_out[i] = next;
            }
        }
    }
    PQclear(res);
    return err;
}

static hc_err_t pgsql_read_offsets(hc_store_t *st, const char *group, const char *topic,
                                   const int32_t *partitions, size_t count, int64_t *offsets_out,
                                   char *errstr, size_t errstr_size)
{
    pgsql_store_t *pst = pgsql_store(st);
    hc_err_t err;

    err = ensure_ready(pst, true, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    /* One statement is one snapshot: a batch committing meanwhile shows up whole or not at
     * all. */
    return offsets_query(pst, group, topic, partitions, count, offsets_out, errstr, errstr_size);
}

static void format_offset(char *buf, size_t buf_size, int64_t offset)
{
    if (offset == HC_OFFSET_NONE) {
        snprintf(buf, buf_size, "none");
    } else {
        snprintf(buf, buf_size, "%lld", (long long)offset);
    }
}

/* The compare-and-set lost on off->partition: says so with the offset stored now (read inside
 * the transaction, which READ COMMITTED lets see the winner's commit). */
static hc_err_t conflict(pgsql_store_t *pst, const hc_store_batch_t *batch,
                         const hc_store_offset_t *off, char *errstr, size_t errstr_size)
{
    char stored_buf[24] = "unknown";
    char expected_buf[24];
    int64_t stored;

    if (offsets_query(pst, batch->group, batch->topic, &off->partition, 1, &stored, errstr,
                      errstr_size) == HC_OK) {
        format_offset(stored_buf, sizeof(stored_buf), stored);
    }
    format_offset(expected_buf, sizeof(expected_buf), off->expected);
    hc_errstr_set(errstr, errstr_size,
                  "postgresql store: offset conflict on %s/%d (group %s): stored next_offset %s, "
                  "batch expected %s",
                  batch->topic, (int)off->partition, batch->group, stored_buf, expected_buf);
    return HC_ERR_CONFLICT;
}

/* Runs the CAS (claim == false) or the claim statement for offs[0..count) and checks that every
 * partition came back in RETURNING. */
static hc_err_t offsets_move(pgsql_store_t *pst, const hc_store_batch_t *batch,
                             const hc_store_offset_t *offs, size_t count, bool claim, char *errstr,
                             size_t errstr_size)
{
    enum stmt_id id = claim ? STMT_OFFSETS_CLAIM : STMT_OFFSETS_CAS;
    const char *values[5];
    int lengths[5];
    unsigned char *part;
    unsigned char *next;
    unsigned char *expected = NULL;
    PGresult *res;
    int32_t partition;
    hc_err_t err;
    size_t i;
    int row;

    if (count > INT32_MAX / 12) {
        return out_of_memory(errstr, errstr_size);
    }
    part = array_start(&pst->param[0], ARRAY_HEADER + 8 * count, OID_INT4, count);
    next = array_start(&pst->param[1], ARRAY_HEADER + 12 * count, OID_INT8, count);
    if (!claim) {
        expected = array_start(&pst->param[2], ARRAY_HEADER + 12 * count, OID_INT8, count);
    }
    if (part == NULL || next == NULL || (!claim && expected == NULL)) {
        return out_of_memory(errstr, errstr_size);
    }
    for (i = 0; i < count; i++) {
        put_be32(part + 8 * i, 4);
        put_be32(part + 8 * i + 4, (uint32_t)offs[i].partition);
        put_be32(next + 12 * i, 8);
        put_be64(next + 12 * i + 4, (uint64_t)offs[i].next);
        if (!claim) {
            put_be32(expected + 12 * i, 8);
            put_be64(expected + 12 * i + 4, (uint64_t)offs[i].expected);
        }
    }
    values[0] = batch->group;
    lengths[0] = (int)strlen(batch->group);
    values[1] = batch->topic;
    lengths[1] = (int)strlen(batch->topic);
    values[2] = pst->param[0].data;
    lengths[2] = (int)(ARRAY_HEADER + 8 * count);
    /* The CAS takes (partitions, expected, next), the claim (partitions, next). */
    if (claim) {
        values[3] = pst->param[1].data;
        lengths[3] = (int)(ARRAY_HEADER + 12 * count);
    } else {
        values[3] = pst->param[2].data;
        lengths[3] = (int)(ARRAY_HEADER + 12 * count);
        values[4] = pst->param[1].data;
        lengths[4] = (int)(ARRAY_HEADER + 12 * count);
    }
    err = run_prepared(pst, id, values, lengths, PGRES_TUPLES_OK, &res, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    if ((size_t)PQntuples(res) != count) {
        /* Name the first partition that did not move. */
        for (i = 0; i < count; i++) {
            for (row = 0; row < PQntuples(res); row++) {
                if (value_i32(res, row, 0, &partition) && partition == offs[i].partition) {
                    break;
                }
            }
            if (row == PQntuples(res)) {
                break;
            }
        }
        err = conflict(pst, batch, &offs[i < count ? i : 0], errstr, errstr_size);
    }
    PQclear(res);
    return err;
}

/* Adds d[0..count) in one statement. */

/* Adds d[0..count) (sorted by hc_store_delta_cmp, each id once) and sets totals[k] to d[k]'s new
 * total. HC_ERR_RECORD, *refused the first delta whose sum would leave bigint (the statement left
 * its row alone: see STMT_COUNTS_ADD); the caller rolls back. */
static hc_err_t counts_add(pgsql_store_t *pst, const hc_store_delta_t *d, size_t count,
                           int64_t updated_ms, int64_t *totals, const hc_store_delta_t **refused,
                           char *errstr, size_t errstr_size)
{
    const char *values[3];
    int lengths[3];
    unsigned char now_be[8];
    unsigned char *ids;
    unsigned char *likes;
    size_t ids_size = ARRAY_HEADER;
    PGresult *res;
    hc_err_t err;
    size_t i;

    for (i = 0; i < count; i++) {
        ids_size += 4 + d[i].post_id_len;
    }
    ids = array_start(&pst->param[0], ids_size, OID_TEXT, count);
    likes = array_start(&pst->param[1], ARRAY_HEADER + 12 * count, OID_INT8, count);
    if (ids == NULL || likes == NULL) {
        return out_of_memory(errstr, errstr_size);
    }
    for (i = 0; i < count; i++) {
        /* The binary form of text is its bytes: nothing to quote or escape. */
        put_be32(ids, (uint32_t)d[i].post_id_len);
        memcpy(ids + 4, d[i].post_id, d[i].post_id_len);
        ids += 4 + d[i].post_id_len;
        put_be32(likes, 8);
        put_be64(likes + 4, (uint64_t)d[i].delta);
        likes += 12;
    }
    put_be64(now_be, (uint64_t)updated_ms);
    values[0] = pst->param[0].data;
    lengths[0] = (int)ids_size;
    values[1] = pst->param[1].data;
    lengths[1] = (int)(ARRAY_HEADER + 12 * count);
    values[2] = (const char *)now_be;
    lengths[2] = 8;
    err = run_prepared(pst, STMT_COUNTS_ADD, values, lengths, PGRES_TUPLES_OK, &res, errstr,
                       errstr_size);
    if (err != HC_OK) {
        return err;
    }
    /* Every post is inserted or updated exactly once but those whose sum would overflow; more
     * rows means the statement is not doing what this file says it does. */
    if ((size_t)PQntuples(res) > count) {
        hc_errstr_set(errstr, errstr_size, "postgresql store: adding deltas: %d rows for %zu posts",
                      PQntuples(res), count);
        err = HC_ERR_FATAL;
    }
    /* RETURNING's row order is not promised: each row finds its delta by id. Any int64 can be
     * a total, so a missing row is found with flags, allocated only when rows are missing. */
    bool *seen = NULL;
    if (err == HC_OK && (size_t)PQntuples(res) < count) {
        seen = calloc(count, sizeof(*seen));
        if (seen == NULL) {
            err = out_of_memory(errstr, errstr_size);
        }
    }
    for (int row = 0; err == HC_OK && row < PQntuples(res); row++) {
        hc_store_delta_t key = {PQgetvalue(res, row, 0), (size_t)PQgetlength(res, row, 0), 0};
        const hc_store_delta_t *at = bsearch(&key, d, count, sizeof(*d), hc_store_delta_cmp);
        if (PQgetisnull(res, row, 0) || at == NULL || !value_i64(res, row, 1, &totals[at - d])) {
            err = layout_fail(stmt_defs[STMT_COUNTS_ADD].what, errstr, errstr_size);
        } else if (seen != NULL) {
            seen[at - d] = true;
        }
    }
    for (size_t k = 0; err == HC_OK && seen != NULL && k < count; k++) {
        if (!seen[k]) {
            *refused = &d[k];
            hc_errstr_set(errstr, errstr_size,
                          "postgresql store: delta %lld would take the count of post \"%.*s\" "
                          "past bigint; nothing was written",
                          (long long)d[k].delta,
                          d[k].post_id_len > 300 ? 300 : (int)d[k].post_id_len, d[k].post_id);
            err = HC_ERR_RECORD;
        }
    }
    free(seen);
    PQclear(res);
    return err;
}

/* On HC_ERR_RECORD: the index in the batch of the post with id (the first delta of it). */
static void refuse(const hc_store_batch_t *batch, const hc_store_delta_t *bad)
{
    for (size_t i = 0; batch->refused_out != NULL && i < batch->delta_count; i++) {
        if (batch->deltas[i].post_id_len == bad->post_id_len &&
            memcmp(batch->deltas[i].post_id, bad->post_id, bad->post_id_len) == 0) {
            *batch->refused_out = i;
            return;
        }
    }
}

/* Copies the batch's deltas into pst->deltas sorted by id, a repeated id summed into one. */
static hc_err_t sort_deltas(pgsql_store_t *pst, const hc_store_batch_t *batch, size_t *count_out,
                            char *errstr, size_t errstr_size)
{
    hc_store_delta_t *d;
    size_t bad;

    *count_out = 0;
    if (batch->delta_count == 0) {
        return HC_OK;
    }
    if (batch->delta_count > SIZE_MAX / sizeof(*d) ||
        !scratch_reserve(&pst->deltas, batch->delta_count * sizeof(*d))) {
        return out_of_memory(errstr, errstr_size);
    }
    d = pst->deltas.data;
    memcpy(d, batch->deltas, batch->delta_count * sizeof(*d));
    if (!hc_store_deltas_merge(d, batch->delta_count, count_out, &bad)) {
        hc_errstr_set(errstr, errstr_size,
                      "postgresql store: the deltas of a post listed twice overflow");
        refuse(batch, &d[bad]);
        return HC_ERR_RECORD;
    }
    return HC_OK;
}

/* Copies the batch's offsets into pst->offsets: those with an expected offset first, then the
 * HC_OFFSET_NONE ones, each run sorted by partition. */
static hc_err_t sort_offsets(pgsql_store_t *pst, const hc_store_batch_t *batch, size_t *cas_out,
                             char *errstr, size_t errstr_size)
{
    hc_store_offset_t *offs;
    size_t cas = 0;
    size_t c = 0;
    size_t k;
    size_t i;

    *cas_out = 0;
    if (batch->offset_count == 0) {
        return HC_OK;
    }
    if (batch->offset_count > SIZE_MAX / sizeof(*offs) ||
        !scratch_reserve(&pst->offsets, batch->offset_count * sizeof(*offs))) {
        return out_of_memory(errstr, errstr_size);
    }
    offs = pst->offsets.data;
    for (i = 0; i < batch->offset_count; i++) {
        if (batch->offsets[i].expected != HC_OFFSET_NONE) {
            cas++;
        }
    }
    k = cas;
    for (i = 0; i < batch->offset_count; i++) {
        if (batch->offsets[i].expected != HC_OFFSET_NONE) {
            offs[c++] = batch->offsets[i];
        } else {
            offs[k++] = batch->offsets[i];
        }
    }
    qsort(offs, cas, sizeof(*offs), hc_store_offset_cmp);
    qsort(offs + cas, batch->offset_count - cas, sizeof(*offs), hc_store_offset_cmp);
    *cas_out = cas;
    return HC_OK;
}

static hc_err_t commit(pgsql_store_t *pst, char *errstr, size_t errstr_size)
{
    PGresult *res;
    hc_err_t err;

    err = run_sql(pst, "COMMIT", "commit", false, PGRES_COMMAND_OK, &res, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    /* COMMIT of a failed transaction "succeeds" as ROLLBACK. */
    if (strcmp(PQcmdStatus(res), "COMMIT") != 0) {
        hc_errstr_set(errstr, errstr_size, "postgresql store: commit: the server answered %s",
                      PQcmdStatus(res));
        err = HC_ERR_FATAL;
    }
    PQclear(res);
    return err;
}

static hc_err_t apply_batch(hc_store_t *st, const hc_store_batch_t *batch, char *errstr,
                            size_t errstr_size)
{
    pgsql_store_t *pst = pgsql_store(st);
    const hc_store_offset_t *offs;
    const hc_store_delta_t *d;
    int64_t *totals;
    size_t n_deltas;
    size_t n_cas;
    size_t i;
    hc_err_t err;

    /* The server would refuse these mid-transaction with an error that names no post; say
     * which delta, before touching anything. A record class, not a broken store: the id came
     * from likes.partials, and no text column can hold it (storing ids as bytea instead would
     * break `SELECT likes ... WHERE post_id = 'x'`, the layout's plain text key). */
    for (i = 0; i < batch->delta_count; i++) {
        d = &batch->deltas[i];
        if (!is_storable((const unsigned char *)d->post_id, d->post_id_len)) {
            hc_errstr_set(errstr, errstr_size,
                          "postgresql store: delta %zu: post_id is not valid UTF-8 or holds a "
                          "NUL byte; nothing was written",
                          i);
            if (batch->refused_out != NULL) {
                *batch->refused_out = i;
            }
            return HC_ERR_RECORD;
        }
    }
    err = sort_deltas(pst, batch, &n_deltas, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    err = sort_offsets(pst, batch, &n_cas, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    err = ensure_ready(pst, true, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    /* Explicit, in case the role's default_transaction_isolation is stricter: the CAS relies on
     * READ COMMITTED's re-check of the WHERE clause (see the file comment). */
    err = run_cmd(pst, "BEGIN ISOLATION LEVEL READ COMMITTED", "begin", errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    /* Every check before the first delta, so a lost race has only the offsets to undo. */
    offs = pst->offsets.data;
    if (n_cas > 0) {
        err = offsets_move(pst, batch, offs, n_cas, false, errstr, errstr_size);
        if (err != HC_OK) {
            goto fail_rollback;
        }
    }
    if (batch->offset_count > n_cas) {
        err = offsets_move(pst, batch, offs + n_cas, batch->offset_count - n_cas, true, errstr,
                           errstr_size);
        if (err != HC_OK) {
            goto fail_rollback;
        }
    }
    d = pst->deltas.data;
    if (n_deltas > 0 && !scratch_reserve(&pst->totals, n_deltas * sizeof(int64_t))) {
        err = out_of_memory(errstr, errstr_size);
        goto fail_rollback;
    }
    totals = pst->totals.data;
    for (i = 0; i < n_deltas; i += PGSQL_APPLY_CHUNK) {
        const hc_store_delta_t *refused = NULL;
        err = counts_add(pst, d + i,
                         n_deltas - i < PGSQL_APPLY_CHUNK ? n_deltas - i : PGSQL_APPLY_CHUNK,
                         batch->now_ms, totals + i, &refused, errstr, errstr_size);
        if (err == HC_ERR_RECORD) {
            refuse(batch, refused);
        }
        if (err != HC_OK) {
            goto fail_rollback;
        }
        if (batch->on_progress != NULL) {
            batch->on_progress(batch->progress_opaque); /* a chunk's upsert got through */
        }
    }
    err = commit(pst, errstr, errstr_size);
    if (err != HC_OK) {
        goto fail_rollback;
    }
    /* Back in the caller's order; a post listed twice was merged into one sorted entry. */
    for (i = 0; batch->totals_out != NULL && i < batch->delta_count; i++) {
        const hc_store_delta_t *at =
            bsearch(&batch->deltas[i], d, n_deltas, sizeof(*d), hc_store_delta_cmp);
        assert(at != NULL); /* d holds every id of the batch */
        batch->totals_out[i] = totals[at - d];
    }
    return HC_OK;

fail_rollback:
    return rollback(pst, err);
}

/* How many bytes of a looked-up id to send: all of them, or none (the empty id) for an id that
 * cannot have been stored. */
static size_t lookup_len(const char *post_id, size_t len)
{
    if (len == 0 || len > HC_POST_ID_MAX || !is_storable((const unsigned char *)post_id, len)) {
        return 0;
    }
    return len;
}

/* Looks up ids [first, end) in one statement. An id that cannot have been stored (empty, too
 * long, not UTF-8) goes as "", which matches no row, so that the array's positions stay the
 * caller's. */
static hc_err_t get_chunk(pgsql_store_t *pst, const char *const *post_ids,
                          const size_t *post_id_lens, size_t first, size_t end, int64_t *likes_out,
                          char *errstr, size_t errstr_size)
{
    const char *values[1];
    int lengths[1];
    unsigned char *p;
    size_t size = ARRAY_HEADER;
    size_t count = end - first;
    size_t len;
    size_t i;
    PGresult *res;
    int64_t pos;
    int64_t likes;
    hc_err_t err;
    int row;

    for (i = first; i < end; i++) {
        size += 4 + lookup_len(post_ids[i], post_id_lens[i]);
    }
    p = array_start(&pst->param[0], size, OID_TEXT, count);
    if (p == NULL) {
        return out_of_memory(errstr, errstr_size);
    }
    for (i = first; i < end; i++) {
        len = lookup_len(post_ids[i], post_id_lens[i]);
        put_be32(p, (uint32_t)len);
        memcpy(p + 4, post_ids[i], len);
        p += 4 + len;
    }
    values[0] = pst->param[0].data;
    lengths[0] = (int)size;
    err = run_prepared(pst, STMT_COUNTS_GET, values, lengths, PGRES_TUPLES_OK, &res, errstr,
                       errstr_size);
    if (err != HC_OK) {
        return err;
    }
    for (row = 0; row < PQntuples(res); row++) {
        /* WITH ORDINALITY counts from 1. */
        if (!value_i64(res, row, 0, &pos) || pos < 1 || (uint64_t)pos > count ||
            !value_i64(res, row, 1, &likes)) {
            err = layout_fail(stmt_defs[STMT_COUNTS_GET].what, errstr, errstr_size);
            break;
        }
        likes_out[first + (size_t)pos - 1] = likes;
    }
    PQclear(res);
    return err;
}

static hc_err_t pgsql_get(hc_store_t *st, const char *const *post_ids, const size_t *post_id_lens,
                          size_t count, int64_t *likes_out, char *errstr, size_t errstr_size)
{
    pgsql_store_t *pst = pgsql_store(st);
    bool several = count > PGSQL_GET_CHUNK;
    size_t first;
    size_t end;
    size_t i;
    hc_err_t err;

    err = ensure_ready(pst, true, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    for (i = 0; i < count; i++) {
        likes_out[i] = 0;
    }
    /* Several statements share one snapshot, so that counts printed together were true
     * together; one statement is a snapshot by itself. */
    if (several) {
        err = run_cmd(pst, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", "begin", errstr,
                      errstr_size);
        if (err != HC_OK) {
            return err;
        }
    }
    for (first = 0; first < count; first = end) {
        end = count - first < PGSQL_GET_CHUNK ? count : first + PGSQL_GET_CHUNK;
        err = get_chunk(pst, post_ids, post_id_lens, first, end, likes_out, errstr, errstr_size);
        if (err != HC_OK) {
            goto fail_rollback;
        }
    }
    if (several) {
        err = commit(pst, errstr, errstr_size);
        if (err != HC_OK) {
            goto fail_rollback;
        }
    }
    return HC_OK;

fail_rollback:
    return rollback(pst, err);
}

static hc_err_t pgsql_top(hc_store_t *st, size_t n, hc_store_row_t *rows_out, size_t *count_out,
                          char *errstr, size_t errstr_size)
{
    pgsql_store_t *pst = pgsql_store(st);
    const char *values[1];
    int lengths[1] = {8};
    unsigned char limit_be[8];
    const char *id;
    size_t id_len;
    PGresult *res;
    hc_err_t err;
    int64_t likes;
    int row;

    err = ensure_ready(pst, true, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    put_be64(limit_be, n > (size_t)INT64_MAX ? (uint64_t)INT64_MAX : (uint64_t)n);
    values[0] = (const char *)limit_be;
    err = run_prepared(pst, STMT_COUNTS_TOP, values, lengths, PGRES_TUPLES_OK, &res, errstr,
                       errstr_size);
    if (err != HC_OK) {
        return err;
    }
    for (row = 0; row < PQntuples(res) && (size_t)row < n; row++) {
        if (!value_post_id(res, row, 0, &id, &id_len) || !value_i64(res, row, 1, &likes)) {
            err = layout_fail(stmt_defs[STMT_COUNTS_TOP].what, errstr, errstr_size);
            break;
        }
        memcpy(rows_out[row].post_id, id, id_len);
        rows_out[row].post_id[id_len] = '\0';
        rows_out[row].post_id_len = id_len;
        rows_out[row].likes = likes;
    }
    if (err == HC_OK) {
        *count_out = (size_t)row;
    }
    PQclear(res);
    return err;
}

/* Hands one FETCH's rows to fn; *more is false once fn asked to stop or the cursor ran dry. */
static hc_err_t foreach_fetch(pgsql_store_t *pst, hc_store_row_fn fn, void *opaque, bool *more,
                              char *errstr, size_t errstr_size)
{
    const char *id;
    size_t id_len;
    PGresult *res;
    int64_t likes;
    hc_err_t err;
    int row;

    err = run_sql(pst, "FETCH " STRINGIFY(PGSQL_FETCH_ROWS) " FROM hotcount_foreach",
                  "reading the counts", true, PGRES_TUPLES_OK, &res, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    *more = PQntuples(res) == PGSQL_FETCH_ROWS;
    for (row = 0; row < PQntuples(res); row++) {
        if (!value_post_id(res, row, 0, &id, &id_len) || !value_i64(res, row, 1, &likes)) {
            err = layout_fail("reading the counts", errstr, errstr_size);
            break;
        }
        if (!fn(id, id_len, likes, opaque)) {
            *more = false;
            break;
        }
    }
    PQclear(res);
    return err;
}

static hc_err_t pgsql_foreach(hc_store_t *st, hc_store_row_fn fn, void *opaque, char *errstr,
                              size_t errstr_size)
{
    pgsql_store_t *pst = pgsql_store(st);
    bool more = true;
    hc_err_t err;

    err = ensure_ready(pst, true, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    /* A cursor reads the table in slices: ten million rows never sit in memory at once, and
     * each FETCH is a statement of its own, so statement_timeout bounds a slice, not the whole
     * walk (a slow fn is the caller's business). The cursor reads the snapshot of its DECLARE
     * all the way through; stage 2 keeps committing meanwhile. */
    err = run_cmd(pst, "BEGIN READ ONLY", "begin", errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    err = run_cmd(pst,
                  "DECLARE hotcount_foreach NO SCROLL CURSOR FOR"
                  " SELECT post_id, likes FROM hotcount_counts",
                  "reading the counts", errstr, errstr_size);
    if (err != HC_OK) {
        goto fail_rollback;
    }
    while (more) {
        err = foreach_fetch(pst, fn, opaque, &more, errstr, errstr_size);
        if (err != HC_OK) {
            goto fail_rollback;
        }
    }
    err = commit(pst, errstr, errstr_size); /* closes the cursor */
    if (err != HC_OK) {
        goto fail_rollback;
    }
    return HC_OK;

fail_rollback:
    return rollback(pst, err);
}

/* One batch, every statement of it within store_batch_ms. */
static hc_err_t pgsql_apply(hc_store_t *st, const hc_store_batch_t *batch, char *errstr,
                            size_t errstr_size)
{
    pgsql_store_t *pst = pgsql_store(st);

    pst->deadline_ms = now_ms() + pst->batch_ms;
    hc_err_t err = apply_batch(st, batch, errstr, errstr_size);
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

    err = ensure_ready(pst, false, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    err = run_sql(pst, "SELECT pg_postmaster_start_time()::text", "reading the server's start time",
                  false, PGRES_TUPLES_OK, &res, errstr, errstr_size);
    if (err == HC_OK) {
        if (PQntuples(res) != 1 || PQgetisnull(res, 0, 0)) {
            err = layout_fail("reading the server's start time", errstr, errstr_size);
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
