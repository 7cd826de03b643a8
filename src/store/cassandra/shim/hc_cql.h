/* Layer: store (Cassandra backend only). hc_cql: hotcount's thin C ABI over the `scylla` Rust
 * CQL driver (src/store/cassandra/shim/src/lib.rs; docs/CASSANDRA.md, "The driver"). Built by
 * CMake through cargo into a static library; only src/store/cassandra/ and its tests include
 * this header.
 *
 * Threading: a session owns a small runtime (two threads) that carries its connections; every
 * call blocks the calling thread until its requests are done. One thread at a time per session,
 * and statements, batches and rows are used by one thread at a time too.
 *
 * Errors: every call that talks to the server returns an hc_cql_status_t and fills the
 * caller's hc_cql_error_t (optional, NULL: not wanted; never allocated). The classes say what
 * the caller may do, which is what the backend turns into hc_err_t:
 *   HC_CQL_INVALID    a bad statement, value or argument: never retry
 *   HC_CQL_TRANSIENT  not applied (no connection, unavailable, overloaded, bootstrapping, a read
 *                     timeout, a prepare that failed): retry later
 *   HC_CQL_UNKNOWN    a write that may or may not have been applied, or may be applied later (a
 *                     server write timeout, whose write_type says which kind; the client's
 *                     timeout; a connection broken after the request was sent): only an
 *                     idempotent write may be repeated; a CAS is settled by a SERIAL read
 *   HC_CQL_AUTH       bad credentials or missing permission
 *   HC_CQL_SCHEMA     keyspace, table or column missing (`hotcount init`)
 *   HC_CQL_FATAL      anything else (server error, protocol error, an internal panic)
 * The driver never retries on its own: the caller decides what is safe to repeat.
 *
 * Ownership: every _new/_open result is the caller's, freed by its _free/_close (NULL
 * accepted). Bound values are copied into the statement; pointers into rows stay valid until
 * hc_cql_rows_free. */
#ifndef HC_CQL_H
#define HC_CQL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum hc_cql_status {
    HC_CQL_OK = 0,
    HC_CQL_INVALID = 1,
    HC_CQL_TRANSIENT = 2,
    HC_CQL_UNKNOWN = 3,
    HC_CQL_AUTH = 4,
    HC_CQL_SCHEMA = 5,
    HC_CQL_FATAL = 6,
} hc_cql_status_t;

/* The server's write type on a write timeout or failure (CQL protocol v4, section 9). */
typedef enum hc_cql_write_type {
    HC_CQL_WT_NONE = 0,
    HC_CQL_WT_SIMPLE = 1,
    HC_CQL_WT_BATCH = 2, /* logged batch: the batchlog was written, it will be applied */
    HC_CQL_WT_UNLOGGED_BATCH = 3,
    HC_CQL_WT_COUNTER = 4,
    HC_CQL_WT_BATCH_LOG = 5, /* logged batch: writing the batchlog itself timed out */
    HC_CQL_WT_CAS = 6,       /* a lightweight transaction: settle it with a SERIAL read */
    HC_CQL_WT_OTHER = 7,
} hc_cql_write_type_t;

typedef struct hc_cql_error {
    int status;     /* hc_cql_status_t */
    int32_t code;   /* the CQL error code (0x1100 write timeout, ...), 0 for a client-side error */
    int write_type; /* hc_cql_write_type_t */
    char message[256]; /* NUL-terminated, UTF-8, cut to fit */
} hc_cql_error_t;

/* Consistency levels, the protocol's codes. */
enum {
    HC_CQL_ANY = 0x0000,
    HC_CQL_ONE = 0x0001,
    HC_CQL_TWO = 0x0002,
    HC_CQL_THREE = 0x0003,
    HC_CQL_QUORUM = 0x0004,
    HC_CQL_ALL = 0x0005,
    HC_CQL_LOCAL_QUORUM = 0x0006,
    HC_CQL_EACH_QUORUM = 0x0007,
    HC_CQL_SERIAL = 0x0008,
    HC_CQL_LOCAL_SERIAL = 0x0009,
    HC_CQL_LOCAL_ONE = 0x000A,
};

/* hc_cql_stmt_set_timestamp / hc_cql_batch_set_timestamp: the server's clock instead. */
#define HC_CQL_NO_TIMESTAMP INT64_MIN

typedef struct hc_cql_config {
    const char *contact_points; /* "host[:port][,host[:port]...]", port 9042 by default */
    const char *user;           /* NULL or "": no authentication */
    const char *password;
    const char *local_dc;        /* NULL: no preference; else routing stays in that datacenter */
    const char *keyspace;        /* NULL: statements name their keyspace */
    int tls;                     /* 0: plain; 1: TLS (OpenSSL) */
    int tls_verify;              /* 1: verify the chain against tls_ca_file (else the system's CAs)
                                    and the node's IP address; 0: no verification at all */
    const char *tls_ca_file;     /* PEM, optional */
    const char *tls_cert_file;   /* PEM client certificate chain, optional */
    const char *tls_key_file;    /* PEM client key, optional */
    uint32_t connect_timeout_ms; /* 0: 10 000 (a whole connect is bounded by 3x this) */
    uint32_t request_timeout_ms; /* 0: 12 000; the client's bound on every request */
} hc_cql_config_t;

typedef struct hc_cql_session_t hc_cql_session_t;
typedef struct hc_cql_prepared_t hc_cql_prepared_t;
typedef struct hc_cql_stmt_t hc_cql_stmt_t;
typedef struct hc_cql_batch_t hc_cql_batch_t;
typedef struct hc_cql_rows_t hc_cql_rows_t;

/* Connects (token-aware, DC-aware routing; LOCAL_QUORUM and LOCAL_SERIAL unless a statement
 * says otherwise). On error *out is NULL. Strings are only read during the call. */
int hc_cql_session_open(const hc_cql_config_t *cfg, hc_cql_session_t **out, hc_cql_error_t *err);
void hc_cql_session_close(hc_cql_session_t *s);

/* An unprepared statement without values (schema changes: waits for schema agreement). */
int hc_cql_query(hc_cql_session_t *s, const char *cql, hc_cql_error_t *err);

int hc_cql_prepare(hc_cql_session_t *s, const char *cql, hc_cql_prepared_t **out,
                   hc_cql_error_t *err);
void hc_cql_prepared_free(hc_cql_prepared_t *p);

/* A statement of p with every value null; NULL on a NULL p. The binds return HC_CQL_OK or
 * HC_CQL_INVALID (index out of range; text that is not UTF-8); the server checks the types. */
hc_cql_stmt_t *hc_cql_stmt_new(const hc_cql_prepared_t *p);
void hc_cql_stmt_free(hc_cql_stmt_t *st);
int hc_cql_bind_null(hc_cql_stmt_t *st, size_t i);
int hc_cql_bind_text(hc_cql_stmt_t *st, size_t i, const void *p, size_t len);
int hc_cql_bind_blob(hc_cql_stmt_t *st, size_t i, const void *p, size_t len);
int hc_cql_bind_int64(hc_cql_stmt_t *st, size_t i, int64_t v); /* bigint */
int hc_cql_bind_int32(hc_cql_stmt_t *st, size_t i, int32_t v); /* int */
int hc_cql_bind_bool(hc_cql_stmt_t *st, size_t i, int v);
int hc_cql_bind_timestamp_ms(hc_cql_stmt_t *st, size_t i, int64_t ms);
int hc_cql_bind_uuid(hc_cql_stmt_t *st, size_t i, const uint8_t bytes[16]);
/* Any level above; SERIAL and LOCAL_SERIAL only for a read (a Paxos read, settling any
 * lightweight transaction in flight). */
int hc_cql_stmt_set_consistency(hc_cql_stmt_t *st, int consistency);
int hc_cql_stmt_set_serial_consistency(hc_cql_stmt_t *st, int serial);
/* The write timestamp in microseconds (as USING TIMESTAMP), or HC_CQL_NO_TIMESTAMP. */
void hc_cql_stmt_set_timestamp(hc_cql_stmt_t *st, int64_t us);
void hc_cql_stmt_set_timeout_ms(hc_cql_stmt_t *st, uint32_t ms); /* 0: the session's */
int hc_cql_stmt_set_page_size(hc_cql_stmt_t *st, int32_t rows);
void hc_cql_stmt_set_idempotent(hc_cql_stmt_t *st, int idempotent);

/* Runs one page of st from its paging state and moves that state on: call again while
 * hc_cql_stmt_has_more_pages(st). rows_out optional (NULL: the rows are dropped); *rows_out is
 * NULL on error. */
int hc_cql_execute(hc_cql_session_t *s, hc_cql_stmt_t *st, hc_cql_rows_t **rows_out,
                   hc_cql_error_t *err);
int hc_cql_stmt_has_more_pages(const hc_cql_stmt_t *st);
void hc_cql_stmt_reset_paging(hc_cql_stmt_t *st);

/* Runs n statements concurrently, at most `concurrency` in flight, each unpaged.
 * statuses_out[i] and rows_out[i] (both optional, n long) get each one's class and rows (NULL on
 * error); err the first failure by index. Returns HC_CQL_OK when all succeeded, else the
 * status of that first failure. */
int hc_cql_execute_many(hc_cql_session_t *s, hc_cql_stmt_t *const *stmts, size_t n,
                        size_t concurrency, int *statuses_out, hc_cql_rows_t **rows_out,
                        hc_cql_error_t *err);

enum { HC_CQL_BATCH_LOGGED = 0, HC_CQL_BATCH_UNLOGGED = 1 };

/* NULL for an unknown kind. hc_cql_batch_add copies st's statement and values (not its
 * options: the batch's own apply). At most 65 535 statements. */
hc_cql_batch_t *hc_cql_batch_new(int kind);
void hc_cql_batch_free(hc_cql_batch_t *b);
int hc_cql_batch_add(hc_cql_batch_t *b, const hc_cql_stmt_t *st);
int hc_cql_batch_set_consistency(hc_cql_batch_t *b, int consistency);
int hc_cql_batch_set_serial_consistency(hc_cql_batch_t *b, int serial);
void hc_cql_batch_set_timestamp(hc_cql_batch_t *b, int64_t us);
void hc_cql_batch_set_timeout_ms(hc_cql_batch_t *b, uint32_t ms);
/* A conditional batch answers with rows: `[applied]` (boolean) first, then, when not applied,
 * the current values of the columns its conditions name. */
int hc_cql_batch_execute(hc_cql_session_t *s, const hc_cql_batch_t *b, hc_cql_rows_t **rows_out,
                         hc_cql_error_t *err);

size_t hc_cql_rows_count(const hc_cql_rows_t *r);
/* 1 for a null cell (or one out of range). */
int hc_cql_rows_is_null(const hc_cql_rows_t *r, size_t row, size_t col);
/* bigint, int, smallint, tinyint, counter, timestamp (ms). HC_CQL_INVALID: another type, null,
 * out of range. */
int hc_cql_rows_int64(const hc_cql_rows_t *r, size_t row, size_t col, int64_t *out);
int hc_cql_rows_bool(const hc_cql_rows_t *r, size_t row, size_t col, int *out);
/* text, ascii or blob, borrowed, not NUL-terminated. */
int hc_cql_rows_bytes(const hc_cql_rows_t *r, size_t row, size_t col, const uint8_t **p,
                      size_t *len);
int hc_cql_rows_uuid(const hc_cql_rows_t *r, size_t row, size_t col, uint8_t out[16]);
void hc_cql_rows_free(hc_cql_rows_t *r);

#ifdef __cplusplus
}
#endif

#endif
