/* Layer: store (private to src/store/pgsql/). The PostgreSQL backend's handle, its prepared
 * statements and what its files share: pgsql.c (the descriptor, the URI, open, schema),
 * pgsql_conn.c (the session, statements with their deadlines, errors), pgsql_commit.c (apply:
 * the offsets' compare-and-set and the upserts) and pgsql_read.c (offsets, get, top, foreach).
 * The protocol: pgsql.c's file comment. */
#ifndef HOTCOUNT_STORE_PGSQL_IMPL_H
#define HOTCOUNT_STORE_PGSQL_IMPL_H

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

/* The prepared statements, by stmt_id (pgsql_conn.c). */
struct stmt_def {
    const char *name; /* prepared once per connection under this name */
    const char *what; /* for error messages */
    const char *sql;
    int nparams;
    Oid types[STMT_MAX_PARAMS];
};
extern const struct stmt_def pgsql_stmt_defs[STMT_COUNT_];

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

pgsql_store_t *pgsql_store(hc_store_t *st);
int64_t pgsql_now_ms(void);
const char *pgsql_one_line(const char *msg, char *buf, size_t buf_size);
const char *pgsql_redact_quoted(const char *msg, char *buf, size_t buf_size);
void pgsql_on_notice(void *arg, const char *message);
hc_err_t pgsql_out_of_memory(char *errstr, size_t errstr_size);
hc_err_t pgsql_run_sql(pgsql_store_t *pst, const char *sql, const char *what, bool binary,
                       ExecStatusType want, PGresult **res_out, char *errstr, size_t errstr_size);
hc_err_t pgsql_run_cmd(pgsql_store_t *pst, const char *sql, const char *what, char *errstr,
                       size_t errstr_size);
hc_err_t pgsql_run_prepared(pgsql_store_t *pst, enum stmt_id id, const char *const *values,
                            const int *lengths, ExecStatusType want, PGresult **res_out,
                            char *errstr, size_t errstr_size);
hc_err_t pgsql_rollback(pgsql_store_t *pst, hc_err_t err);
hc_err_t pgsql_setup_session(pgsql_store_t *pst, char *errstr, size_t errstr_size);
hc_err_t pgsql_prepare_all(pgsql_store_t *pst, char *errstr, size_t errstr_size);
hc_err_t pgsql_ensure_ready(pgsql_store_t *pst, bool need_schema, char *errstr, size_t errstr_size);
void pgsql_put_be32(unsigned char *p, uint32_t v);
void pgsql_put_be64(unsigned char *p, uint64_t v);
uint32_t pgsql_get_be32(const unsigned char *p);
uint64_t pgsql_get_be64(const unsigned char *p);
unsigned char *pgsql_array_start(scratch_t *s, size_t size, Oid elem, size_t n);
bool pgsql_is_storable(const unsigned char *s, size_t len);
hc_err_t pgsql_commit(pgsql_store_t *pst, char *errstr, size_t errstr_size);
hc_err_t pgsql_apply_batch(hc_store_t *st, const hc_store_batch_t *batch, char *errstr,
                           size_t errstr_size);
bool pgsql_value_i64(const PGresult *res, int row, int col, int64_t *out);
bool pgsql_value_i32(const PGresult *res, int row, int col, int32_t *out);
hc_err_t pgsql_layout_fail(const char *what, char *errstr, size_t errstr_size);
hc_err_t pgsql_offsets_query(pgsql_store_t *pst, const char *group, const char *topic,
                             const int32_t *partitions, size_t count, int64_t *offsets_out,
                             char *errstr, size_t errstr_size);
hc_err_t pgsql_read_offsets(hc_store_t *st, const char *group, const char *topic,
                            const int32_t *partitions, size_t count, int64_t *offsets_out,
                            char *errstr, size_t errstr_size);
hc_err_t pgsql_get(hc_store_t *st, const char *const *post_ids, const size_t *post_id_lens,
                   size_t count, int64_t *likes_out, char *errstr, size_t errstr_size);
hc_err_t pgsql_top(hc_store_t *st, size_t n, hc_store_row_t *rows_out, size_t *count_out,
                   char *errstr, size_t errstr_size);
hc_err_t pgsql_foreach(hc_store_t *st, hc_store_row_fn fn, void *opaque, char *errstr,
                       size_t errstr_size);

#endif
