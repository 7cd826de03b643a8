/* The store dispatcher: the only door to the backends, and their list (HC_STORE_BACKENDS).
 *
 * It picks a backend from the scheme of cfg->store (the descriptors' facts), checks the arguments
 * every backend would otherwise check alike (so a batch the SQLite store refuses is refused by
 * Redis and PostgreSQL too), and forwards each call to st->ops. Backends trust what reaches them.
 */
#include "store_impl.h"

#include "hotcount/clock.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hotcount/redact.h"

#define BACKEND_ENTRY(b) &hc_store_##b##_backend,
#define FACTS_ENTRY(b) &hc_store_##b##_backend.facts,
static const hc_store_backend_t *const store_backends[] = {HC_STORE_BACKENDS(BACKEND_ENTRY) NULL};
static const hc_store_facts_t *const store_facts[] = {HC_STORE_BACKENDS(FACTS_ENTRY) NULL};

const hc_store_facts_t *const *hc_store_facts(void)
{
    return store_facts;
}

static const hc_store_backend_t *backend_for(const char *uri)
{
    const hc_store_facts_t *f = hc_store_facts_find(store_facts, uri);

    for (size_t i = 0; f != NULL && store_backends[i] != NULL; i++) {
        if (&store_backends[i]->facts == f) {
            return store_backends[i];
        }
    }
    return NULL;
}

const hc_timeouts_t *hc_store_timeouts(const hc_config_t *cfg, hc_timeouts_t *scratch)
{
    hc_config_t with_stores;

    if (cfg->timeouts.derived || cfg->stores != NULL) {
        return hc_timeouts_of(cfg, scratch);
    }
    with_stores = *cfg; /* a shallow copy, read only */
    with_stores.stores = store_facts;
    return hc_timeouts_of(&with_stores, scratch);
}

hc_err_t hc_store_open(const hc_config_t *cfg, hc_store_t **stp, char *errstr, size_t errstr_size)
{
    const hc_store_backend_t *be;
    size_t scheme_len;
    char forms[512];

    assert(stp != NULL);
    *stp = NULL;
    hc_store_facts_list(store_facts, HC_STORE_LIST_FORMS, forms, sizeof(forms));
    if (cfg == NULL || cfg->store == NULL || cfg->store[0] == '\0') {
        hc_errstr_set(errstr, errstr_size, "store: empty store URI (expected %s)", forms);
        return HC_ERR_INVALID;
    }
    be = backend_for(cfg->store);
    if (be == NULL) {
        /* Echo only the scheme: the rest of a URI may carry a password, and this message ends
         * up in logs. */
        scheme_len = strcspn(cfg->store, ":");
        hc_errstr_set(errstr, errstr_size,
                      "store: unsupported store URI scheme \"%.*s\" (expected %s)",
                      scheme_len > 32 ? 32 : (int)scheme_len, cfg->store, forms);
        return HC_ERR_INVALID;
    }
    return hc_store_open_ops(be->ops, cfg, stp, errstr, errstr_size);
}

hc_err_t hc_store_open_ops(const hc_store_ops_t *ops, const hc_config_t *cfg, hc_store_t **stp,
                           char *errstr, size_t errstr_size)
{
    hc_err_t err;

    assert(ops != NULL && stp != NULL);
    *stp = NULL;
    err = ops->open(cfg, stp, errstr, errstr_size);
    if (err != HC_OK) {
        /* a library may quote the URI back: no password leaves here (hotcount/redact.h) */
        hc_redact_config_secrets(errstr, errstr_size, cfg);
        *stp = NULL;
        return err;
    }
    assert(*stp != NULL && (*stp)->ops == ops);
    return HC_OK;
}

void hc_store_close(hc_store_t *st)
{
    if (st == NULL) {
        return;
    }
    st->ops->close(st);
}

const char *hc_store_kind(const hc_store_t *st)
{
    assert(st != NULL);
    return st->ops->kind;
}

hc_err_t hc_store_init_schema(hc_store_t *st, char *errstr, size_t errstr_size)
{
    assert(st != NULL);
    return st->ops->init_schema(st, errstr, errstr_size);
}

hc_err_t hc_store_read_offsets(hc_store_t *st, const char *group, const char *topic,
                               const int32_t *partitions, size_t count, int64_t *offsets_out,
                               char *errstr, size_t errstr_size)
{
    assert(st != NULL);
    if (count == 0) {
        return HC_OK;
    }
    if (group == NULL || topic == NULL || partitions == NULL || offsets_out == NULL) {
        hc_errstr_set(errstr, errstr_size, "store: read_offsets needs group, topic and arrays");
        return HC_ERR_INVALID;
    }
    return st->ops->read_offsets(st, group, topic, partitions, count, offsets_out, errstr,
                                 errstr_size);
}

hc_err_t hc_store_identity(hc_store_t *st, char *id_out, size_t id_size, char *errstr,
                           size_t errstr_size)
{
    char id[HC_STORE_IDENTITY_MAX] = "";
    hc_err_t err = HC_OK;

    assert(st != NULL);
    if (id_out == NULL || id_size == 0) {
        hc_errstr_set(errstr, errstr_size, "store: identity needs an output buffer");
        return HC_ERR_INVALID;
    }
    if (st->ops->identity != NULL) {
        err = st->ops->identity(st, id, sizeof(id), errstr, errstr_size);
    }
    snprintf(id_out, id_size, "%s", err == HC_OK ? id : "");
    return err;
}

/* Refuses, before the backend sees it, any batch that could break exactly-once or the row
 * layout: a post id the store could not hand back in an hc_store_row_t, a partition listed
 * twice (its compare-and-set would be checked once but written twice), or an offset moving
 * backwards (that would make stage 2 count the same partials again). */
static hc_err_t check_batch(const hc_store_batch_t *batch, char *errstr, size_t errstr_size)
{
    size_t i;
    size_t j;
    const hc_store_offset_t *off;
    const hc_store_delta_t *d;

    if (batch == NULL || (batch->offset_count > 0 && batch->offsets == NULL) ||
        (batch->delta_count > 0 && batch->deltas == NULL)) {
        hc_errstr_set(errstr, errstr_size, "store: batch arrays missing");
        return HC_ERR_INVALID;
    }
    if (batch->offset_count > 0 && (batch->group == NULL || batch->topic == NULL)) {
        hc_errstr_set(errstr, errstr_size, "store: batch with offsets needs group and topic");
        return HC_ERR_INVALID;
    }
    for (i = 0; i < batch->offset_count; i++) {
        off = &batch->offsets[i];
        if (off->partition < 0 || off->next < 0 ||
            (off->expected != HC_OFFSET_NONE && (off->expected < 0 || off->next < off->expected))) {
            hc_errstr_set(errstr, errstr_size,
                          "store: bad offsets for partition %d: expected %lld, next %lld",
                          (int)off->partition, (long long)off->expected, (long long)off->next);
            return HC_ERR_INVALID;
        }
        /* Quadratic, but a batch holds one entry per assigned partition: tens, not thousands. */
        for (j = 0; j < i; j++) {
            if (batch->offsets[j].partition == off->partition) {
                hc_errstr_set(errstr, errstr_size, "store: partition %d listed twice in a batch",
                              (int)off->partition);
                return HC_ERR_INVALID;
            }
        }
    }
    for (i = 0; i < batch->delta_count; i++) {
        d = &batch->deltas[i];
        if (d->post_id == NULL || d->post_id_len == 0 || d->post_id_len > HC_POST_ID_MAX) {
            hc_errstr_set(errstr, errstr_size,
                          "store: delta %zu: post_id must be 1..%d bytes (got %zu)", i,
                          HC_POST_ID_MAX, d->post_id == NULL ? (size_t)0 : d->post_id_len);
            return HC_ERR_INVALID;
        }
    }
    return HC_OK;
}

#ifdef HC_MUTANT_DOUBLE_APPLY
/* Mutant build (tests/faults/mutants.sh), never the product: the third committed batch with
 * deltas is applied again, its offsets' compare-and-set satisfied by the first application. */
static void mutant_apply_again(hc_store_t *st, const hc_store_batch_t *batch, char *errstr,
                               size_t errstr_size)
{
    static int committed;
    if (batch->delta_count == 0 || ++committed != 3) {
        return;
    }
    hc_store_offset_t *offsets = calloc(batch->offset_count + 1, sizeof(*offsets));
    if (offsets) {
        for (size_t i = 0; i < batch->offset_count; i++) {
            offsets[i] = batch->offsets[i];
            offsets[i].expected = offsets[i].next;
        }
        hc_store_batch_t again = *batch;
        again.offsets = offsets;
        (void)st->ops->apply(st, &again, errstr, errstr_size);
        free(offsets);
    }
}
#endif

#ifdef HC_MUTANT_HANG_STORE
/* Mutant build (tests/integration/watchdog.sh), never the product: the third batch with deltas
 * never returns, as a store library that ignores its own timeout would behave. Every real call
 * is bounded (timeouts.h), so only such a hang can show that the watchdog ends a stuck stage. */
static void mutant_hang(const hc_store_batch_t *batch)
{
    static int batches;
    if (batch->delta_count > 0 && ++batches == 3) {
        for (;;) {
            hc_sleep_ms(1000);
        }
    }
}
#endif

hc_err_t hc_store_apply(hc_store_t *st, const hc_store_batch_t *batch, char *errstr,
                        size_t errstr_size)
{
    hc_err_t err;

    assert(st != NULL);
    err = check_batch(batch, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
#ifdef HC_MUTANT_HANG_STORE
    mutant_hang(batch);
#endif
    err = st->ops->apply(st, batch, errstr, errstr_size);
#ifdef HC_MUTANT_DOUBLE_APPLY
    if (err == HC_OK) {
        mutant_apply_again(st, batch, errstr, errstr_size);
    }
#endif
    return err;
}

hc_err_t hc_store_get(hc_store_t *st, const char *const *post_ids, const size_t *post_id_lens,
                      size_t count, int64_t *likes_out, char *errstr, size_t errstr_size)
{
    size_t i;

    assert(st != NULL);
    if (count == 0) {
        return HC_OK;
    }
    if (post_ids == NULL || post_id_lens == NULL || likes_out == NULL) {
        hc_errstr_set(errstr, errstr_size, "store: get needs post ids, lengths and output");
        return HC_ERR_INVALID;
    }
    for (i = 0; i < count; i++) {
        if (post_ids[i] == NULL) {
            hc_errstr_set(errstr, errstr_size, "store: get: post id %zu is NULL", i);
            return HC_ERR_INVALID;
        }
    }
    return st->ops->get(st, post_ids, post_id_lens, count, likes_out, errstr, errstr_size);
}

hc_err_t hc_store_top(hc_store_t *st, size_t n, hc_store_row_t *rows_out, size_t *count_out,
                      char *errstr, size_t errstr_size)
{
    assert(st != NULL);
    if (count_out == NULL || (n > 0 && rows_out == NULL)) {
        hc_errstr_set(errstr, errstr_size, "store: top needs rows and a count output");
        return HC_ERR_INVALID;
    }
    *count_out = 0;
    if (n == 0) {
        return HC_OK;
    }
    if (n > HC_STORE_TOP_MAX) {
        hc_errstr_set(errstr, errstr_size, "store: top of %zu rows; at most %d", n,
                      HC_STORE_TOP_MAX);
        return HC_ERR_INVALID;
    }
    return st->ops->top(st, n, rows_out, count_out, errstr, errstr_size);
}

hc_err_t hc_store_foreach(hc_store_t *st, hc_store_row_fn fn, void *opaque, char *errstr,
                          size_t errstr_size)
{
    assert(st != NULL);
    if (fn == NULL) {
        hc_errstr_set(errstr, errstr_size, "store: foreach needs a callback");
        return HC_ERR_INVALID;
    }
    return st->ops->foreach (st, fn, opaque, errstr, errstr_size);
}
