/* Layer: store (private to src/store/sqlite/). The SQLite backend's handle, its prepared
 * statements and what its files share: sqlite.c (the descriptor, the file, open, schema, the
 * statements, errors), sqlite_commit.c (apply) and sqlite_read.c (offsets, get, top, foreach).
 * The layout and the locking: sqlite.c's file comment. */
#ifndef HOTCOUNT_STORE_SQLITE_IMPL_H
#define HOTCOUNT_STORE_SQLITE_IMPL_H

#include "store_impl.h"
#include "store_util.h"

#include <sqlite3.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define SQLITE_URI_PREFIX "sqlite:"

enum stmt_id {
    STMT_BEGIN_READ,
    STMT_BEGIN_WRITE,
    STMT_COMMIT,
    STMT_ROLLBACK,
    STMT_OFFSET_GET,
    STMT_OFFSET_PUT,
    STMT_COUNT_ADD,
    STMT_COUNT_GET,
    STMT_COUNT_TOP,
    STMT_COUNT_ALL,
    STMT_COUNT_, /* number of statements */
};

/* The statements that need no tables come first: open prepares them unconditionally. */
#define STMT_FIRST_SCHEMA STMT_OFFSET_GET

typedef struct sqlite_store {
    hc_store_t base; /* first: store.c only sees this */
    sqlite3 *db;     /* owned */
    /* owned; the schema statements stay NULL until the tables exist (see ensure_prepared) */
    sqlite3_stmt *stmt[STMT_COUNT_];
    bool prepared; /* every statement is ready */
} sqlite_store_t;

sqlite_store_t *sqlite_store(hc_store_t *st);
hc_err_t sqlite_sql_fail(sqlite_store_t *sst, int rc, const char *what, char *errstr,
                         size_t errstr_size);
void sqlite_stmt_done(sqlite3_stmt *stmt);
hc_err_t sqlite_stmt_exec(sqlite_store_t *sst, enum stmt_id id, const char *what, char *errstr,
                          size_t errstr_size);
hc_err_t sqlite_rollback(sqlite_store_t *sst, hc_err_t err, char *errstr, size_t errstr_size);
hc_err_t sqlite_ensure_prepared(sqlite_store_t *sst, char *errstr, size_t errstr_size);
hc_err_t sqlite_apply(hc_store_t *st, const hc_store_batch_t *batch, char *errstr,
                      size_t errstr_size);
hc_err_t sqlite_offset_get(sqlite_store_t *sst, const char *group, const char *topic,
                           int32_t partition, int64_t *offset_out, char *errstr,
                           size_t errstr_size);
hc_err_t sqlite_read_offsets(hc_store_t *st, const char *group, const char *topic,
                             const int32_t *partitions, size_t count, int64_t *offsets_out,
                             char *errstr, size_t errstr_size);
hc_err_t sqlite_get(hc_store_t *st, const char *const *post_ids, const size_t *post_id_lens,
                    size_t count, int64_t *likes_out, char *errstr, size_t errstr_size);
hc_err_t sqlite_top(hc_store_t *st, size_t n, hc_store_row_t *rows_out, size_t *count_out,
                    char *errstr, size_t errstr_size);
hc_err_t sqlite_foreach(hc_store_t *st, hc_store_row_fn fn, void *opaque, char *errstr,
                        size_t errstr_size);

#endif
