/* The fake store of the unit tests; see fake_store.h. */
#include "fake_store.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "store_impl.h"

#define FAKES_MAX 16
#define SCRIPT_MAX 16

typedef struct fake_count {
    char post_id[HC_POST_ID_MAX];
    size_t post_id_len;
    int64_t likes;
} fake_count_t;

typedef struct fake_offset {
    char group[128];
    char topic[128];
    int32_t partition;
    int64_t next;
} fake_offset_t;

typedef struct script_entry {
    hc_fake_script_t what;
    hc_fake_batch_t *other; /* owned; HC_FAKE_LOSE_CAS */
} script_entry_t;

struct hc_fake_store {
    int id;
    pthread_mutex_t mu;
    pthread_cond_t changed; /* a batch arrived */
    fake_count_t *counts;   /* owned */
    size_t count_n, count_cap;
    fake_offset_t *offs; /* owned */
    size_t off_n, off_cap;
    script_entry_t script[SCRIPT_MAX];
    size_t script_head, script_n;
    hc_fake_batch_t **batches; /* owned, each owned */
    size_t batch_n, batch_cap;
    fake_count_t refuse[8]; /* posts refused with HC_ERR_RECORD */
    size_t refuse_n;
    int fail_reads;        /* read_offsets calls still to fail */
    int fail_opens;        /* opens still to fail */
    int fail_gets;         /* get calls still to fail */
    int gets_failed;       /* get calls failed so far */
    int reads;             /* read_offsets calls */
    int epoch;             /* the identity: bumped by hc_fake_store_forget(..., true) */
    bool down;             /* every apply fails with HC_ERR_TRANSIENT (hc_fake_store_set_down) */
    size_t throttle_above; /* a batch with more deltas fails with HC_ERR_TRANSIENT; 0: none */
    int64_t us_per_delta;  /* an apply takes this long per delta (a slow store) */
};

/* A handle: what hc_store_open_ops hands out. */
typedef struct fake_handle {
    hc_store_t base;
    hc_fake_store_t *fake; /* borrowed */
} fake_handle_t;

static pthread_mutex_t registry_mu = PTHREAD_MUTEX_INITIALIZER;
static hc_fake_store_t *registry[FAKES_MAX];

static hc_fake_store_t *fake_of(hc_store_t *st)
{
    return ((fake_handle_t *)st)->fake;
}

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size);
    if (!p) {
        abort(); /* a test helper: out of memory ends the test */
    }
    return p;
}

static hc_fake_batch_t *batch_copy(const hc_store_batch_t *batch)
{
    hc_fake_batch_t *b = xcalloc(1, sizeof(*b));
    b->offset_count = batch->offset_count;
    b->offsets = xcalloc(batch->offset_count, sizeof(*b->offsets));
    memcpy(b->offsets, batch->offsets, batch->offset_count * sizeof(*b->offsets));
    b->delta_count = batch->delta_count;
    b->deltas = xcalloc(batch->delta_count, sizeof(*b->deltas));
    for (size_t i = 0; i < batch->delta_count; i++) {
        char *id = xcalloc(batch->deltas[i].post_id_len + 1, 1);
        memcpy(id, batch->deltas[i].post_id, batch->deltas[i].post_id_len);
        b->deltas[i] = (hc_store_delta_t){id, batch->deltas[i].post_id_len, batch->deltas[i].delta};
    }
    return b;
}

static void batch_free(hc_fake_batch_t *b)
{
    if (!b) {
        return;
    }
    for (size_t i = 0; i < b->delta_count; i++) {
        free((char *)b->deltas[i].post_id);
    }
    free(b->deltas);
    free(b->offsets);
    free(b);
}

hc_fake_store_t *hc_fake_store_new(char *uri, size_t uri_size)
{
    hc_fake_store_t *fake = xcalloc(1, sizeof(*fake));
    pthread_mutex_init(&fake->mu, NULL);
    pthread_cond_init(&fake->changed, NULL);
    pthread_mutex_lock(&registry_mu);
    fake->id = -1;
    for (int i = 0; i < FAKES_MAX; i++) {
        if (!registry[i]) {
            registry[i] = fake;
            fake->id = i;
            break;
        }
    }
    pthread_mutex_unlock(&registry_mu);
    if (fake->id < 0) {
        hc_fake_store_destroy(fake);
        return NULL;
    }
    snprintf(uri, uri_size, "fake:%d", fake->id);
    return fake;
}

void hc_fake_store_destroy(hc_fake_store_t *fake)
{
    if (!fake) {
        return;
    }
    pthread_mutex_lock(&registry_mu);
    if (fake->id >= 0) {
        registry[fake->id] = NULL;
    }
    pthread_mutex_unlock(&registry_mu);
    for (size_t i = 0; i < fake->batch_n; i++) {
        batch_free(fake->batches[i]);
    }
    for (size_t i = 0; i < fake->script_n; i++) {
        batch_free(fake->script[(fake->script_head + i) % SCRIPT_MAX].other);
    }
    free(fake->batches);
    free(fake->counts);
    free(fake->offs);
    pthread_cond_destroy(&fake->changed);
    pthread_mutex_destroy(&fake->mu);
    free(fake);
}

static void script_push(hc_fake_store_t *fake, hc_fake_script_t what, hc_fake_batch_t *other)
{
    pthread_mutex_lock(&fake->mu);
    if (fake->script_n == SCRIPT_MAX) {
        abort(); /* a test that scripts this much is wrong */
    }
    fake->script[(fake->script_head + fake->script_n++) % SCRIPT_MAX] =
        (script_entry_t){what, other};
    pthread_mutex_unlock(&fake->mu);
}

void hc_fake_store_script(hc_fake_store_t *fake, hc_fake_script_t what)
{
    script_push(fake, what, NULL);
}

void hc_fake_store_lose_cas(hc_fake_store_t *fake, const hc_store_batch_t *other)
{
    script_push(fake, HC_FAKE_LOSE_CAS, batch_copy(other));
}

/* ---- the data, under fake->mu ---- */

static fake_count_t *count_find(hc_fake_store_t *fake, const char *id, size_t len, bool add)
{
    for (size_t i = 0; i < fake->count_n; i++) {
        if (fake->counts[i].post_id_len == len && memcmp(fake->counts[i].post_id, id, len) == 0) {
            return &fake->counts[i];
        }
    }
    if (!add) {
        return NULL;
    }
    if (fake->count_n == fake->count_cap) {
        fake->count_cap = fake->count_cap ? fake->count_cap * 2 : 64;
        fake->counts = realloc(fake->counts, fake->count_cap * sizeof(*fake->counts));
        if (!fake->counts) {
            abort();
        }
    }
    fake_count_t *c = &fake->counts[fake->count_n++];
    memset(c, 0, sizeof(*c));
    memcpy(c->post_id, id, len);
    c->post_id_len = len;
    return c;
}

static fake_offset_t *offset_find(hc_fake_store_t *fake, const char *group, const char *topic,
                                  int32_t partition, bool add)
{
    for (size_t i = 0; i < fake->off_n; i++) {
        fake_offset_t *o = &fake->offs[i];
        if (o->partition == partition && strcmp(o->group, group) == 0 &&
            strcmp(o->topic, topic) == 0) {
            return o;
        }
    }
    if (!add) {
        return NULL;
    }
    if (fake->off_n == fake->off_cap) {
        fake->off_cap = fake->off_cap ? fake->off_cap * 2 : 16;
        fake->offs = realloc(fake->offs, fake->off_cap * sizeof(*fake->offs));
        if (!fake->offs) {
            abort();
        }
    }
    fake_offset_t *o = &fake->offs[fake->off_n++];
    memset(o, 0, sizeof(*o));
    snprintf(o->group, sizeof(o->group), "%s", group);
    snprintf(o->topic, sizeof(o->topic), "%s", topic);
    o->partition = partition;
    o->next = HC_OFFSET_NONE;
    return o;
}

static int64_t stored_next(hc_fake_store_t *fake, const char *group, const char *topic,
                           int32_t partition)
{
    fake_offset_t *o = offset_find(fake, group, topic, partition, false);
    return o ? o->next : HC_OFFSET_NONE;
}

/* The first post of the batch a backend would refuse (HC_ERR_RECORD), or SIZE_MAX. */
static size_t refused_post(hc_fake_store_t *fake, const hc_store_delta_t *deltas,
                           size_t delta_count)
{
    for (size_t i = 0; i < delta_count; i++) {
        for (size_t j = 0; j < fake->refuse_n; j++) {
            if (fake->refuse[j].post_id_len == deltas[i].post_id_len &&
                memcmp(fake->refuse[j].post_id, deltas[i].post_id, deltas[i].post_id_len) == 0) {
                return i;
            }
        }
        fake_count_t *c = count_find(fake, deltas[i].post_id, deltas[i].post_id_len, false);
        int64_t sum;
        if (__builtin_add_overflow(c ? c->likes : 0, deltas[i].delta, &sum)) {
            return i;
        }
    }
    return SIZE_MAX;
}

/* The backends' semantics: every expected offset must match, then everything lands. */
static bool cas_apply(hc_fake_store_t *fake, const char *group, const char *topic,
                      const hc_store_offset_t *offsets, size_t offset_count,
                      const hc_store_delta_t *deltas, size_t delta_count, int64_t *totals_out)
{
    for (size_t i = 0; i < offset_count; i++) {
        if (stored_next(fake, group, topic, offsets[i].partition) != offsets[i].expected) {
            return false;
        }
    }
    for (size_t i = 0; i < offset_count; i++) {
        offset_find(fake, group, topic, offsets[i].partition, true)->next = offsets[i].next;
    }
    for (size_t i = 0; i < delta_count; i++) {
        fake_count_t *c = count_find(fake, deltas[i].post_id, deltas[i].post_id_len, true);
        c->likes += deltas[i].delta;
        if (totals_out) {
            totals_out[i] = c->likes;
        }
    }
    return true;
}

/* ---- the ops ---- */

static hc_err_t fake_open(const hc_config_t *cfg, hc_store_t **stp, char *errstr,
                          size_t errstr_size)
{
    int id = -1;
    char tail = 0;
    if (sscanf(cfg->store, "fake:%d%c", &id, &tail) != 1 || id < 0 || id >= FAKES_MAX) {
        hc_errstr_set(errstr, errstr_size, "fake store: bad URI %s", cfg->store);
        return HC_ERR_INVALID;
    }
    pthread_mutex_lock(&registry_mu);
    hc_fake_store_t *fake = registry[id];
    pthread_mutex_unlock(&registry_mu);
    if (!fake) {
        hc_errstr_set(errstr, errstr_size, "fake store %d: not running", id);
        return HC_ERR_TRANSIENT;
    }
    pthread_mutex_lock(&fake->mu);
    bool down = fake->fail_opens > 0;
    fake->fail_opens -= down;
    pthread_mutex_unlock(&fake->mu);
    if (down) {
        hc_errstr_set(errstr, errstr_size, "fake store %d: scripted outage", id);
        return HC_ERR_TRANSIENT;
    }
    fake_handle_t *h = xcalloc(1, sizeof(*h));
    h->base.ops = hc_fake_store_ops();
    h->fake = fake;
    *stp = &h->base;
    return HC_OK;
}

static void fake_close(hc_store_t *st)
{
    free(st);
}

static hc_err_t fake_init_schema(hc_store_t *st, char *errstr, size_t errstr_size)
{
    (void)st;
    (void)errstr;
    (void)errstr_size;
    return HC_OK;
}

static hc_err_t fake_read_offsets(hc_store_t *st, const char *group, const char *topic,
                                  const int32_t *partitions, size_t count, int64_t *offsets_out,
                                  char *errstr, size_t errstr_size)
{
    hc_fake_store_t *fake = fake_of(st);
    pthread_mutex_lock(&fake->mu);
    fake->reads++;
    pthread_cond_broadcast(&fake->changed);
    if (fake->fail_reads > 0) {
        fake->fail_reads--;
        pthread_mutex_unlock(&fake->mu);
        hc_errstr_set(errstr, errstr_size, "fake store: scripted outage");
        return HC_ERR_TRANSIENT;
    }
    for (size_t i = 0; i < count; i++) {
        offsets_out[i] = stored_next(fake, group, topic, partitions[i]);
    }
    pthread_mutex_unlock(&fake->mu);
    return HC_OK;
}

static hc_err_t fake_apply(hc_store_t *st, const hc_store_batch_t *batch, char *errstr,
                           size_t errstr_size)
{
    hc_fake_store_t *fake = fake_of(st);
    hc_fake_batch_t *rec = batch_copy(batch);
    pthread_mutex_lock(&fake->mu);
    int64_t us = fake->us_per_delta * (int64_t)batch->delta_count;
    pthread_mutex_unlock(&fake->mu);
    if (us > 0) { /* a slow server, outside the lock: the test reads meanwhile */
        struct timespec ts = {(time_t)(us / 1000000), (long)(us % 1000000) * 1000};
        nanosleep(&ts, NULL);
    }
    pthread_mutex_lock(&fake->mu);
    script_entry_t entry = {HC_FAKE_PASS, NULL};
    if (fake->script_n > 0) {
        entry = fake->script[fake->script_head];
        fake->script_head = (fake->script_head + 1) % SCRIPT_MAX;
        fake->script_n--;
    }
    rec->script = entry.what;
    if (fake->down || (fake->throttle_above > 0 && batch->delta_count > fake->throttle_above)) {
        rec->script = HC_FAKE_TRANSIENT; /* the scripted entry waits for the next batch */
        if (entry.what != HC_FAKE_PASS || entry.other) {
            fake->script_head = (fake->script_head + SCRIPT_MAX - 1) % SCRIPT_MAX;
            fake->script[fake->script_head] = entry;
            fake->script_n++;
            entry = (script_entry_t){HC_FAKE_PASS, NULL};
        }
    }
    if (rec->script == HC_FAKE_TRANSIENT) {
        hc_errstr_set(errstr, errstr_size, "fake store: scripted outage");
        rec->returned = HC_ERR_TRANSIENT;
    } else {
        if (entry.what == HC_FAKE_LOSE_CAS) {
            /* the other owner's batch, which must itself land */
            if (!cas_apply(fake, batch->group, batch->topic, entry.other->offsets,
                           entry.other->offset_count, entry.other->deltas, entry.other->delta_count,
                           NULL)) {
                abort(); /* the test scripted an impossible race */
            }
        }
        size_t refused = refused_post(fake, batch->deltas, batch->delta_count);
        rec->applied =
            refused == SIZE_MAX &&
            cas_apply(fake, batch->group, batch->topic, batch->offsets, batch->offset_count,
                      batch->deltas, batch->delta_count, batch->totals_out);
        if (refused != SIZE_MAX) {
            hc_errstr_set(errstr, errstr_size, "fake store: post %zu refused", refused);
            if (batch->refused_out) {
                *batch->refused_out = refused;
            }
            rec->returned = HC_ERR_RECORD;
        } else if (!rec->applied) {
            hc_errstr_set(errstr, errstr_size, "fake store: offsets moved");
            rec->returned = HC_ERR_CONFLICT;
        } else if (entry.what == HC_FAKE_APPLY_TRANSIENT) {
            hc_errstr_set(errstr, errstr_size, "fake store: scripted ambiguous commit");
            rec->returned = HC_ERR_TRANSIENT;
        } else {
            rec->returned = HC_OK;
        }
    }
    batch_free(entry.other);
    if (fake->batch_n == fake->batch_cap) {
        fake->batch_cap = fake->batch_cap ? fake->batch_cap * 2 : 16;
        fake->batches = realloc(fake->batches, fake->batch_cap * sizeof(*fake->batches));
        if (!fake->batches) {
            abort();
        }
    }
    fake->batches[fake->batch_n++] = rec;
    hc_err_t ret = rec->returned;
    pthread_cond_broadcast(&fake->changed);
    pthread_mutex_unlock(&fake->mu);
    return ret;
}

static hc_err_t fake_get(hc_store_t *st, const char *const *post_ids, const size_t *post_id_lens,
                         size_t count, int64_t *likes_out, char *errstr, size_t errstr_size)
{
    hc_fake_store_t *fake = fake_of(st);
    pthread_mutex_lock(&fake->mu);
    if (fake->fail_gets > 0) {
        fake->fail_gets--;
        fake->gets_failed++;
        pthread_cond_broadcast(&fake->changed);
        pthread_mutex_unlock(&fake->mu);
        hc_errstr_set(errstr, errstr_size, "fake store: scripted outage");
        return HC_ERR_TRANSIENT;
    }
    for (size_t i = 0; i < count; i++) {
        fake_count_t *c = count_find(fake, post_ids[i], post_id_lens[i], false);
        likes_out[i] = c ? c->likes : 0;
    }
    pthread_mutex_unlock(&fake->mu);
    return HC_OK;
}

static hc_err_t fake_top(hc_store_t *st, size_t n, hc_store_row_t *rows_out, size_t *count_out,
                         char *errstr, size_t errstr_size)
{
    (void)errstr;
    (void)errstr_size;
    hc_fake_store_t *fake = fake_of(st);
    pthread_mutex_lock(&fake->mu);
    size_t k = 0;
    /* selection by repeated scans: a test stores tens of posts */
    for (; k < n && k < fake->count_n; k++) {
        const fake_count_t *best = NULL;
        for (size_t i = 0; i < fake->count_n; i++) {
            const fake_count_t *c = &fake->counts[i];
            bool taken = false;
            for (size_t j = 0; j < k && !taken; j++) {
                taken = rows_out[j].post_id_len == c->post_id_len &&
                        memcmp(rows_out[j].post_id, c->post_id, c->post_id_len) == 0;
            }
            if (!taken && (!best || c->likes > best->likes)) {
                best = c;
            }
        }
        memcpy(rows_out[k].post_id, best->post_id, best->post_id_len);
        rows_out[k].post_id[best->post_id_len] = '\0';
        rows_out[k].post_id_len = best->post_id_len;
        rows_out[k].likes = best->likes;
    }
    *count_out = k;
    pthread_mutex_unlock(&fake->mu);
    return HC_OK;
}

static hc_err_t fake_foreach(hc_store_t *st, hc_store_row_fn fn, void *opaque, char *errstr,
                             size_t errstr_size)
{
    (void)errstr;
    (void)errstr_size;
    hc_fake_store_t *fake = fake_of(st);
    pthread_mutex_lock(&fake->mu);
    for (size_t i = 0; i < fake->count_n; i++) {
        if (!fn(fake->counts[i].post_id, fake->counts[i].post_id_len, fake->counts[i].likes,
                opaque)) {
            break;
        }
    }
    pthread_mutex_unlock(&fake->mu);
    return HC_OK;
}

static hc_err_t fake_identity(hc_store_t *st, char *id_out, size_t id_size, char *errstr,
                              size_t errstr_size)
{
    (void)errstr;
    (void)errstr_size;
    hc_fake_store_t *fake = fake_of(st);
    pthread_mutex_lock(&fake->mu);
    snprintf(id_out, id_size, "fake-epoch-%d", fake->epoch);
    pthread_mutex_unlock(&fake->mu);
    return HC_OK;
}

void hc_fake_store_forget(hc_fake_store_t *fake, bool new_identity)
{
    pthread_mutex_lock(&fake->mu);
    fake->count_n = 0;
    fake->off_n = 0;
    fake->epoch += new_identity;
    pthread_mutex_unlock(&fake->mu);
}

static const hc_store_ops_t fake_ops = {
    .kind = "fake",
    .open = fake_open,
    .close = fake_close,
    .init_schema = fake_init_schema,
    .read_offsets = fake_read_offsets,
    .apply = fake_apply,
    .get = fake_get,
    .top = fake_top,
    .foreach = fake_foreach,
    .identity = fake_identity,
};

const struct hc_store_ops *hc_fake_store_ops(void)
{
    return &fake_ops;
}

/* ---- the test's view ---- */

void hc_fake_store_refuse_post(hc_fake_store_t *fake, const char *post_id, size_t post_id_len)
{
    pthread_mutex_lock(&fake->mu);
    if (fake->refuse_n == sizeof(fake->refuse) / sizeof(fake->refuse[0]) ||
        post_id_len > HC_POST_ID_MAX) {
        abort();
    }
    fake_count_t *c = &fake->refuse[fake->refuse_n++];
    memcpy(c->post_id, post_id, post_id_len);
    c->post_id_len = post_id_len;
    pthread_mutex_unlock(&fake->mu);
}

void hc_fake_store_set_down(hc_fake_store_t *fake, bool down)
{
    pthread_mutex_lock(&fake->mu);
    fake->down = down;
    pthread_mutex_unlock(&fake->mu);
}

void hc_fake_store_throttle_above(hc_fake_store_t *fake, size_t max_deltas)
{
    pthread_mutex_lock(&fake->mu);
    fake->throttle_above = max_deltas;
    pthread_mutex_unlock(&fake->mu);
}

void hc_fake_store_slow(hc_fake_store_t *fake, int64_t us_per_delta)
{
    pthread_mutex_lock(&fake->mu);
    fake->us_per_delta = us_per_delta;
    pthread_mutex_unlock(&fake->mu);
}

void hc_fake_store_fail_reads(hc_fake_store_t *fake, int n)
{
    pthread_mutex_lock(&fake->mu);
    fake->fail_reads = n;
    pthread_mutex_unlock(&fake->mu);
}

void hc_fake_store_fail_gets(hc_fake_store_t *fake, int n)
{
    pthread_mutex_lock(&fake->mu);
    fake->fail_gets = n;
    pthread_mutex_unlock(&fake->mu);
}

void hc_fake_store_fail_opens(hc_fake_store_t *fake, int n)
{
    pthread_mutex_lock(&fake->mu);
    fake->fail_opens = n;
    pthread_mutex_unlock(&fake->mu);
}

size_t hc_fake_store_batch_count(hc_fake_store_t *fake)
{
    pthread_mutex_lock(&fake->mu);
    size_t n = fake->batch_n;
    pthread_mutex_unlock(&fake->mu);
    return n;
}

const hc_fake_batch_t *hc_fake_store_batch(hc_fake_store_t *fake, size_t i)
{
    pthread_mutex_lock(&fake->mu);
    const hc_fake_batch_t *b = i < fake->batch_n ? fake->batches[i] : NULL;
    pthread_mutex_unlock(&fake->mu);
    return b;
}

static struct timespec deadline_after(int64_t timeout_ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += timeout_ms / 1000;
    ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

bool hc_fake_store_wait_batches(hc_fake_store_t *fake, size_t n, int64_t timeout_ms)
{
    struct timespec deadline = deadline_after(timeout_ms);
    pthread_mutex_lock(&fake->mu);
    int rc = 0;
    while (fake->batch_n < n && rc != ETIMEDOUT) {
        rc = pthread_cond_timedwait(&fake->changed, &fake->mu, &deadline);
    }
    bool ok = fake->batch_n >= n;
    pthread_mutex_unlock(&fake->mu);
    return ok;
}

bool hc_fake_store_wait_reads(hc_fake_store_t *fake, int n, int64_t timeout_ms)
{
    struct timespec deadline = deadline_after(timeout_ms);
    pthread_mutex_lock(&fake->mu);
    int rc = 0;
    while (fake->reads < n && rc != ETIMEDOUT) {
        rc = pthread_cond_timedwait(&fake->changed, &fake->mu, &deadline);
    }
    bool ok = fake->reads >= n;
    pthread_mutex_unlock(&fake->mu);
    return ok;
}

bool hc_fake_store_wait_failed_gets(hc_fake_store_t *fake, int n, int64_t timeout_ms)
{
    struct timespec deadline = deadline_after(timeout_ms);
    pthread_mutex_lock(&fake->mu);
    int rc = 0;
    while (fake->gets_failed < n && rc != ETIMEDOUT) {
        rc = pthread_cond_timedwait(&fake->changed, &fake->mu, &deadline);
    }
    bool ok = fake->gets_failed >= n;
    pthread_mutex_unlock(&fake->mu);
    return ok;
}

static bool offsets_are(hc_fake_store_t *fake, const char *group, const char *topic,
                        const int64_t *want, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        if (stored_next(fake, group, topic, (int32_t)i) != want[i]) {
            return false;
        }
    }
    return true;
}

bool hc_fake_store_wait_offsets(hc_fake_store_t *fake, const char *group, const char *topic,
                                const int64_t *want, size_t count, int64_t timeout_ms)
{
    struct timespec deadline = deadline_after(timeout_ms);
    pthread_mutex_lock(&fake->mu);
    int rc = 0;
    while (!offsets_are(fake, group, topic, want, count) && rc != ETIMEDOUT) {
        rc = pthread_cond_timedwait(&fake->changed, &fake->mu, &deadline);
    }
    bool ok = offsets_are(fake, group, topic, want, count);
    pthread_mutex_unlock(&fake->mu);
    return ok;
}

int64_t hc_fake_store_likes(hc_fake_store_t *fake, const char *post_id, size_t post_id_len)
{
    pthread_mutex_lock(&fake->mu);
    fake_count_t *c = count_find(fake, post_id, post_id_len, false);
    int64_t likes = c ? c->likes : 0;
    pthread_mutex_unlock(&fake->mu);
    return likes;
}

int64_t hc_fake_store_offset(hc_fake_store_t *fake, const char *group, const char *topic,
                             int32_t partition)
{
    pthread_mutex_lock(&fake->mu);
    int64_t next = stored_next(fake, group, topic, partition);
    pthread_mutex_unlock(&fake->mu);
    return next;
}

size_t hc_fake_store_posts(hc_fake_store_t *fake)
{
    pthread_mutex_lock(&fake->mu);
    size_t n = fake->count_n;
    pthread_mutex_unlock(&fake->mu);
    return n;
}
