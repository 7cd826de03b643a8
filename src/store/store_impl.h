/* The plug-in seam behind store.h: each backend fills one ops table and embeds hc_store_t as
 * its first member. Only store.c, store_<backend>.c and a test's own store
 * (tests/support/fake_store.c, opened with hc_store_open_ops) include this file. */
#ifndef HOTCOUNT_STORE_IMPL_H
#define HOTCOUNT_STORE_IMPL_H

#include "hotcount/store.h"

typedef struct hc_store_ops {
    const char *kind;
    hc_err_t (*open)(const hc_config_t *cfg, hc_store_t **stp, char *errstr, size_t errstr_size);
    void (*close)(hc_store_t *st);
    hc_err_t (*init_schema)(hc_store_t *st, char *errstr, size_t errstr_size);
    hc_err_t (*read_offsets)(hc_store_t *st, const char *group, const char *topic,
                             const int32_t *partitions, size_t count, int64_t *offsets_out,
                             char *errstr, size_t errstr_size);
    hc_err_t (*apply)(hc_store_t *st, const hc_store_batch_t *batch, char *errstr,
                      size_t errstr_size);
    hc_err_t (*get)(hc_store_t *st, const char *const *post_ids, const size_t *post_id_lens,
                    size_t count, int64_t *likes_out, char *errstr, size_t errstr_size);
    hc_err_t (*top)(hc_store_t *st, size_t n, hc_store_row_t *rows_out, size_t *count_out,
                    char *errstr, size_t errstr_size);
    hc_err_t (*foreach)(hc_store_t *st, hc_store_row_fn fn, void *opaque, char *errstr,
                        size_t errstr_size);
    /* optional (NULL: the backend has no identity, hc_store_identity gives ""); id_out holds
     * HC_STORE_IDENTITY_MAX bytes */
    hc_err_t (*identity)(hc_store_t *st, char *id_out, size_t id_size, char *errstr,
                         size_t errstr_size);
} hc_store_ops_t;

struct hc_store {
    const hc_store_ops_t *ops;
};

extern const hc_store_ops_t hc_store_sqlite_ops;
extern const hc_store_ops_t hc_store_redis_ops;
extern const hc_store_ops_t hc_store_pgsql_ops;
extern const hc_store_ops_t hc_store_dynamodb_ops;

#endif
