/* The serve cache: one mutex over a chained hash table and an LRU list; one condition variable
 * per entry, so a finished load wakes only the readers of its own key. */
#include "hotcount/serve_cache.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "hotcount/siphash.h"

#define ERRSTR_MAX 256

typedef enum entry_state {
    ENTRY_LOADING,
    ENTRY_READY,
} entry_state_t;

typedef struct entry entry_t;
struct entry {
    entry_t *chain;         /* next in the bucket */
    entry_t *newer, *older; /* LRU list */
    char *key;              /* owned */
    size_t key_len;
    uint64_t hash;
    entry_state_t state;
    unsigned pins;           /* callers loading or waiting: not evictable while > 0 */
    int64_t loaded_at;       /* clock when the last (or current) load started */
    hc_err_t err;            /* of the last load */
    char errstr[ERRSTR_MAX]; /* of the last load */
    void *value;             /* owned */
    size_t value_len;
    pthread_cond_t done; /* broadcast when a load finishes */
};

struct hc_serve_cache {
    hc_serve_cache_opts_t opts;
    pthread_mutex_t lock;
    entry_t **buckets; /* owned */
    size_t bucket_mask;
    entry_t *newest, *oldest;
    hc_serve_cache_stats_t stats;
    hc_hash_key_t hkey; /* the process key */
};

/* Keys are post ids from URLs anyone can send: with an unkeyed hash (this was FNV-1a) a client
 * could fill one bucket chain and make every lookup walk it under the cache's one mutex.
 * SipHash-1-3 under the process's random key (hotcount/siphash.h) makes that guesswork. */
static uint64_t hash_key(const hc_serve_cache_t *cache, const char *key, size_t len)
{
    return hc_siphash13(&cache->hkey, key, len);
}

static void lru_unlink(hc_serve_cache_t *cache, entry_t *e)
{
    if (e->newer) {
        e->newer->older = e->older;
    } else {
        cache->newest = e->older;
    }
    if (e->older) {
        e->older->newer = e->newer;
    } else {
        cache->oldest = e->newer;
    }
    e->newer = e->older = NULL;
}

static void lru_push(hc_serve_cache_t *cache, entry_t *e)
{
    e->older = cache->newest;
    e->newer = NULL;
    if (cache->newest) {
        cache->newest->newer = e;
    } else {
        cache->oldest = e;
    }
    cache->newest = e;
}

static entry_t *find(hc_serve_cache_t *cache, const char *key, size_t len, uint64_t h)
{
    for (entry_t *e = cache->buckets[h & cache->bucket_mask]; e; e = e->chain) {
        if (e->hash == h && e->key_len == len && memcmp(e->key, key, len) == 0) {
            return e;
        }
    }
    return NULL;
}

static void entry_free(entry_t *e)
{
    pthread_cond_destroy(&e->done);
    free(e->key);
    free(e->value);
    free(e);
}

static void remove_entry(hc_serve_cache_t *cache, entry_t *e)
{
    entry_t **pp = &cache->buckets[e->hash & cache->bucket_mask];
    while (*pp != e) {
        pp = &(*pp)->chain;
    }
    *pp = e->chain;
    lru_unlink(cache, e);
    cache->stats.entries--;
    entry_free(e);
}

/* Makes room for one more entry: drops the least recently used unpinned ones. */
static void evict(hc_serve_cache_t *cache)
{
    entry_t *e = cache->oldest;
    while (e && cache->stats.entries >= cache->opts.max_entries) {
        entry_t *newer = e->newer;
        if (e->pins == 0) {
            remove_entry(cache, e);
            cache->stats.evictions++;
        }
        e = newer;
    }
}

static entry_t *insert(hc_serve_cache_t *cache, const char *key, size_t len, uint64_t h)
{
    evict(cache);
    entry_t *e = calloc(1, sizeof(*e));
    if (!e) {
        return NULL;
    }
    e->key = malloc(len ? len : 1);
    if (!e->key || pthread_cond_init(&e->done, NULL) != 0) {
        free(e->key);
        free(e);
        return NULL;
    }
    memcpy(e->key, key, len);
    e->key_len = len;
    e->hash = h;
    e->state = ENTRY_LOADING;
    e->chain = cache->buckets[h & cache->bucket_mask];
    cache->buckets[h & cache->bucket_mask] = e;
    lru_push(cache, e);
    cache->stats.entries++;
    return e;
}

/* The entry's last result, copied for the caller. Lock held. */
static hc_err_t copy_out(const entry_t *e, void **value, size_t *value_len, int64_t *loaded_at,
                         char *errstr, size_t errstr_size)
{
    *value = NULL;
    *value_len = 0;
    if (e->err != HC_OK) {
        hc_errstr_set(errstr, errstr_size, "%s", e->errstr);
        return e->err;
    }
    char *copy = malloc(e->value_len + 1);
    if (!copy) {
        hc_errstr_set(errstr, errstr_size, "out of memory");
        return HC_ERR_FATAL;
    }
    if (e->value_len) {
        memcpy(copy, e->value, e->value_len);
    }
    copy[e->value_len] = '\0';
    *value = copy;
    *value_len = e->value_len;
    *loaded_at = e->loaded_at;
    return HC_OK;
}

hc_err_t hc_serve_cache_new(const hc_serve_cache_opts_t *opts, hc_serve_cache_t **out, char *errstr,
                            size_t errstr_size)
{
    *out = NULL;
    if (opts->ttl < 1 || opts->max_entries < 1 || !opts->load || !opts->clock) {
        hc_errstr_set(errstr, errstr_size,
                      "cache: ttl and max_entries must be >= 1, load "
                      "and clock set");
        return HC_ERR_INVALID;
    }
    hc_serve_cache_t *cache = calloc(1, sizeof(*cache));
    if (!cache) {
        goto oom;
    }
    cache->opts = *opts;
    cache->hkey = hc_hash_process_key();
    size_t nb = 16;
    while (nb < opts->max_entries && nb < ((size_t)1 << 30)) {
        nb <<= 1;
    }
    cache->buckets = calloc(nb, sizeof(*cache->buckets));
    if (!cache->buckets) {
        goto free_cache;
    }
    cache->bucket_mask = nb - 1;
    if (pthread_mutex_init(&cache->lock, NULL) != 0) {
        goto free_buckets;
    }
    *out = cache;
    return HC_OK;
free_buckets:
    free(cache->buckets);
free_cache:
    free(cache);
oom:
    hc_errstr_set(errstr, errstr_size, "cache: out of memory");
    return HC_ERR_FATAL;
}

void hc_serve_cache_destroy(hc_serve_cache_t *cache)
{
    if (!cache) {
        return;
    }
    while (cache->oldest) {
        remove_entry(cache, cache->oldest);
    }
    pthread_mutex_destroy(&cache->lock);
    free(cache->buckets);
    free(cache);
}

hc_err_t hc_serve_cache_get(hc_serve_cache_t *cache, const char *key, size_t key_len, void **value,
                            size_t *value_len, int64_t *loaded_at, char *errstr, size_t errstr_size)
{
    return hc_serve_cache_get_ttl(cache, key, key_len, cache->opts.ttl, value, value_len, loaded_at,
                                  errstr, errstr_size);
}

hc_err_t hc_serve_cache_get_ttl(hc_serve_cache_t *cache, const char *key, size_t key_len,
                                int64_t ttl, void **value, size_t *value_len, int64_t *loaded_at,
                                char *errstr, size_t errstr_size)
{
    uint64_t h = hash_key(cache, key, key_len);
    hc_err_t err;

    pthread_mutex_lock(&cache->lock);
    cache->stats.gets++;
    entry_t *e = find(cache, key, key_len, h);
    if (e && e->state == ENTRY_LOADING) {
        /* Someone is reading the store for this key right now: wait for that read. Whatever it
         * returns is at most one load old, so it is served even if the TTL has since passed. */
        cache->stats.coalesced++;
        cache->stats.waiting++;
        e->pins++;
        while (e->state == ENTRY_LOADING) {
            pthread_cond_wait(&e->done, &cache->lock);
        }
        e->pins--;
        cache->stats.waiting--;
        err = copy_out(e, value, value_len, loaded_at, errstr, errstr_size);
        pthread_mutex_unlock(&cache->lock);
        return err;
    }
    int64_t now = cache->opts.clock(cache->opts.clock_opaque);
    if (e && now - e->loaded_at < (ttl >= 1 ? ttl : 1)) {
        cache->stats.hits++;
        lru_unlink(cache, e);
        lru_push(cache, e);
        err = copy_out(e, value, value_len, loaded_at, errstr, errstr_size);
        pthread_mutex_unlock(&cache->lock);
        return err;
    }
    if (e) {
        lru_unlink(cache, e);
        lru_push(cache, e);
        e->state = ENTRY_LOADING;
    } else {
        e = insert(cache, key, key_len, h);
        if (!e) {
            pthread_mutex_unlock(&cache->lock);
            hc_errstr_set(errstr, errstr_size, "cache: out of memory");
            return HC_ERR_FATAL;
        }
    }
    e->pins++;
    e->loaded_at = now;
    cache->stats.loads++;
    pthread_mutex_unlock(&cache->lock);

    void *loaded = NULL;
    size_t loaded_len = 0;
    char load_errstr[ERRSTR_MAX] = "";
    hc_err_t load_err = cache->opts.load(cache->opts.load_opaque, e->key, e->key_len, &loaded,
                                         &loaded_len, load_errstr, sizeof(load_errstr));

    pthread_mutex_lock(&cache->lock);
    free(e->value);
    e->value = NULL;
    e->value_len = 0;
    e->err = load_err;
    if (load_err == HC_OK) {
        e->value = loaded;
        e->value_len = loaded ? loaded_len : 0;
        e->errstr[0] = '\0';
    } else {
        cache->stats.load_errors++;
        memcpy(e->errstr, load_errstr, sizeof(e->errstr));
    }
    e->state = ENTRY_READY;
    e->pins--;
    pthread_cond_broadcast(&e->done);
    err = copy_out(e, value, value_len, loaded_at, errstr, errstr_size);
    pthread_mutex_unlock(&cache->lock);
    return err;
}

void hc_serve_cache_get_stats(hc_serve_cache_t *cache, hc_serve_cache_stats_t *stats)
{
    pthread_mutex_lock(&cache->lock);
    *stats = cache->stats;
    pthread_mutex_unlock(&cache->lock);
}
