/* The plug-in seam behind store.h: each backend states what it is in one descriptor
 * (hc_store_backend_t: its facts and its ops table), embeds hc_store_t as the first member of
 * its handle, and is listed once in HC_STORE_BACKENDS below. Only src/store/ (the test-only
 * testing/ too), the store layer's own unit tests (test_store_backends, test_store_util) and a
 * test's own store (tests/support/fake_store.c, opened with hc_store_open_ops) include this
 * file; tests/layers proves a layer above cannot. */
#ifndef HOTCOUNT_STORE_IMPL_H
#define HOTCOUNT_STORE_IMPL_H

#include "hotcount/store.h"
#include "hotcount/store_facts.h"
#include "hotcount/timeouts.h"

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

/* A backend: what it is (name, schemes, URI form, password rule, timing: the facts the
 * configuration and the timeouts are handed, hotcount/store_facts.h) and what it does. */
typedef struct hc_store_backend {
    hc_store_facts_t facts;
    const hc_store_ops_t *ops;
} hc_store_backend_t;

/* Every backend of this build, in the order --help and messages list them: adding one is one
 * entry here and its folder (src/store/README.md). */
#ifdef HC_HAVE_CASSANDRA /* a build with cargo (src/store/cassandra/shim/hc_cql.cmake) */
#define HC_STORE_BACKEND_CASSANDRA(X) X(cassandra)
#else
#define HC_STORE_BACKEND_CASSANDRA(X)
#endif
#define HC_STORE_BACKENDS(X) X(sqlite) X(redis) X(pgsql) X(dynamodb) HC_STORE_BACKEND_CASSANDRA(X)

#define HC_STORE_BACKEND_DECLARE(b) extern const hc_store_backend_t hc_store_##b##_backend;
HC_STORE_BACKENDS(HC_STORE_BACKEND_DECLARE)
#undef HC_STORE_BACKEND_DECLARE

/* A store connection is a handshake on a LAN: 10 s only runs out when the host is gone. */
#define HC_STORE_CONNECT_MS 10000

/* cfg's timeouts for a backend: cfg->timeouts, or for a configuration built by hand (tests:
 * no hc_config_init, so neither derived timeouts nor store facts) the ones derived from cfg with
 * this build's backends, into *scratch. */
const hc_timeouts_t *hc_store_timeouts(const hc_config_t *cfg, hc_timeouts_t *scratch);

#endif
