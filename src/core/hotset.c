/* Stage 2's hot set (see include/core/hotcount/hotset.h for the contract).
 *
 * Layout: `ent` holds the members (HOT or COOLING), at most max; `slots` is an open-addressing
 * index (linear probing, >= 4 max slots, so at most 25 % full) from a post's keyed hash to its
 * member, rebuilt from scratch at every end (members change only there, so no deletions and no
 * tombstones). `cand` is a min-heap by events of this window's newcomers at or over enter_rate,
 * at most max: a newcomer colder than the heap's top when the heap is full cannot make the set
 * and is dropped at once, so however many posts pass, the set stays max + max records. */
#include "hotcount/hotset.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hotcount/siphash.h"
#include "hotcount/topn.h"

typedef struct entry {
    hc_hotset_state_t state;
    uint32_t hash;
    uint16_t len;
    bool evict;           /* end: chosen for eviction */
    int64_t events;       /* this window's */
    double rate;          /* the last closed window's */
    int64_t since_ms;     /* became HOT */
    int64_t cooling_ms;   /* entered COOLING */
    int64_t announced_ms; /* last hot record (TO_HOT or REFRESH) */
    char key[HC_POST_ID_MAX];
} entry_t;

/* A post that left the set, for flap counting: direct-mapped by its 64-bit hash, so a newer
 * departure may overwrite an older one (the flap count can only err low). */
typedef struct recent {
    uint64_t hash;
    int64_t left_ms;
} recent_t;

typedef struct cand {
    uint32_t hash;
    uint16_t len;
    int64_t events;
    char key[HC_POST_ID_MAX];
} cand_t;

/* Newcomers rank by this window's events, most first (hc_topn_cmp_fn). */
static int by_cand_events_desc(const void *a, const void *b)
{
    const cand_t *x = a;
    const cand_t *y = b;
    return x->events > y->events ? -1 : x->events < y->events;
}

struct hc_hotset {
    hc_hotset_opts_t o;
    hc_hash_key_t hkey;
    entry_t *ent; /* owned, max */
    size_t n;
    cand_t *cand_items; /* owned, max: the items of cand */
    hc_topn_t cand;     /* this window's hottest newcomers, at most max (hotcount/topn.h) */
    uint32_t *slots;    /* owned, mask + 1: member index + 1, 0 = empty */
    recent_t *recent;   /* owned, mask + 1: departures, for flaps */
    size_t mask;
    hc_hotset_transition_t *trans; /* owned, 2 max */
    size_t ntrans;
    int64_t last_end_ms; /* the last end, or when the set was made */
    int64_t now_ms;      /* begin's clock reading */
    double window_s;     /* begin's window length */
    double enter_events; /* enter_rate x window_s: a newcomer's bar */
    hc_hotset_stats_t stats;
};

hc_hotset_state_t hc_hotset_next(hc_hotset_state_t state, double rate, int64_t cooling_ms,
                                 const hc_hotset_opts_t *opts)
{
    switch (state) {
    case HC_HOTSET_COLD:
        return rate >= opts->enter_rate ? HC_HOTSET_HOT : HC_HOTSET_COLD;
    case HC_HOTSET_HOT:
        if (rate >= opts->leave_rate) {
            return HC_HOTSET_HOT;
        }
        return opts->dwell_ms > 0 ? HC_HOTSET_COOLING : HC_HOTSET_COLD;
    case HC_HOTSET_COOLING:
        if (rate >= opts->leave_rate) {
            return HC_HOTSET_HOT;
        }
        return cooling_ms >= opts->dwell_ms ? HC_HOTSET_COLD : HC_HOTSET_COOLING;
    }
    return HC_HOTSET_COLD;
}

const char *hc_hotset_state_name(hc_hotset_state_t state)
{
    switch (state) {
    case HC_HOTSET_COLD:
        return "cold";
    case HC_HOTSET_HOT:
        return "hot";
    case HC_HOTSET_COOLING:
        return "cooling";
    }
    return "cold";
}

static uint32_t hash_key(const hc_hotset_t *hs, const char *key, size_t len)
{
    uint64_t h = hc_siphash13(&hs->hkey, key, len);
    return (uint32_t)h ^ (uint32_t)(h >> 32);
}

hc_hotset_t *hc_hotset_new(const hc_hotset_opts_t *opts, char *errstr, size_t errstr_size)
{
    if (!opts->now_ms) {
        hc_errstr_set(errstr, errstr_size, "hot set: no clock");
        return NULL;
    }
    if (!(opts->enter_rate > 0) || !(opts->leave_rate >= 0) ||
        !(opts->leave_rate < opts->enter_rate)) {
        hc_errstr_set(errstr, errstr_size, "hot set: want 0 <= leave rate < enter rate");
        return NULL;
    }
    if (opts->max < 1 || opts->max > HC_HOTSET_MAX || opts->dwell_ms < 0 || opts->window_ms < 1 ||
        opts->ttl_ms < 0 || opts->flap_ms < 0) {
        hc_errstr_set(errstr, errstr_size,
                      "hot set: want 1 <= max <= %d, dwell >= 0, window >= 1, ttl, flap >= 0",
                      HC_HOTSET_MAX);
        return NULL;
    }
    hc_hotset_t *hs = calloc(1, sizeof(*hs));
    if (!hs) {
        hc_errstr_set(errstr, errstr_size, "out of memory");
        return NULL;
    }
    hs->o = *opts;
    hs->hkey = hc_hash_process_key();
    size_t slots = 16;
    while (slots < 4 * opts->max) {
        slots *= 2;
    }
    hs->mask = slots - 1;
    hs->ent = calloc(opts->max, sizeof(*hs->ent));
    hs->cand_items = calloc(opts->max, sizeof(*hs->cand_items));
    hc_topn_init(&hs->cand, hs->cand_items, sizeof(*hs->cand_items), opts->max,
                 by_cand_events_desc);
    hs->slots = calloc(slots, sizeof(*hs->slots));
    hs->recent = calloc(slots, sizeof(*hs->recent));
    hs->trans = calloc(2 * opts->max, sizeof(*hs->trans));
    if (!hs->ent || !hs->cand_items || !hs->slots || !hs->recent || !hs->trans) {
        hc_hotset_destroy(hs);
        hc_errstr_set(errstr, errstr_size, "out of memory");
        return NULL;
    }
    hs->last_end_ms = opts->now_ms(opts->clock_opaque);
    hs->window_s = (double)opts->window_ms / 1000.0;
    return hs;
}

void hc_hotset_destroy(hc_hotset_t *hs)
{
    if (!hs) {
        return;
    }
    free(hs->ent);
    free(hs->cand_items);
    free(hs->slots);
    free(hs->recent);
    free(hs->trans);
    free(hs);
}

/* The member holding key, or -1. */
static long find(const hc_hotset_t *hs, const char *key, size_t len, uint32_t h)
{
    for (size_t pos = h & hs->mask;; pos = (pos + 1) & hs->mask) {
        uint32_t s = hs->slots[pos];
        if (s == 0) {
            return -1;
        }
        const entry_t *e = &hs->ent[s - 1];
        if (e->hash == h && e->len == len && memcmp(e->key, key, len) == 0) {
            return (long)(s - 1);
        }
    }
}

static void index_rebuild(hc_hotset_t *hs)
{
    memset(hs->slots, 0, (hs->mask + 1) * sizeof(*hs->slots));
    for (size_t i = 0; i < hs->n; i++) {
        size_t pos = hs->ent[i].hash & hs->mask;
        while (hs->slots[pos] != 0) {
            pos = (pos + 1) & hs->mask;
        }
        hs->slots[pos] = (uint32_t)(i + 1);
    }
}

void hc_hotset_begin(hc_hotset_t *hs)
{
    int64_t now = hs->o.now_ms(hs->o.clock_opaque);
    int64_t len = now - hs->last_end_ms;
    if (len <= 0) { /* a clock that went back */
        len = hs->o.window_ms;
    }
    hs->now_ms = now;
    hs->window_s = (double)len / 1000.0;
    hs->enter_events = hs->o.enter_rate * hs->window_s;
    hc_topn_clear(&hs->cand);
    hs->ntrans = 0;
    for (size_t i = 0; i < hs->n; i++) {
        hs->ent[i].events = 0;
    }
}

void hc_hotset_offer(hc_hotset_t *hs, const char *post_id, size_t post_id_len, int64_t events)
{
    if (events < 1 || post_id_len == 0 || post_id_len > HC_POST_ID_MAX) {
        return;
    }
    uint32_t h = hash_key(hs, post_id, post_id_len);
    long i = find(hs, post_id, post_id_len, h);
    if (i >= 0) {
        hs->ent[i].events += events;
        return;
    }
    if ((double)events < hs->enter_events) {
        return; /* a cold post stays unremembered */
    }
    if (hc_topn_is_full(&hs->cand)) {
        hs->stats.dropped++; /* this one, or the coldest newcomer that makes room for it */
    }
    cand_t c = {.hash = h, .len = (uint16_t)post_id_len, .events = events};
    memcpy(c.key, post_id, post_id_len);
    hc_topn_offer(&hs->cand, &c);
}

static hc_hotset_transition_t *add_transition(hc_hotset_t *hs, hc_hotset_change_t change,
                                              const char *key, size_t len, double rate)
{
    hc_hotset_transition_t *t = &hs->trans[hs->ntrans++];
    t->change = change;
    memcpy(t->post_id, key, len);
    t->post_id[len] = '\0';
    t->post_id_len = len;
    t->rate = rate;
    t->since_ms = hs->now_ms;
    t->expires_ms = change != HC_HOTSET_TO_COOL && hs->o.ttl_ms > 0 ? hs->now_ms + hs->o.ttl_ms
                                                                    : HC_HOTSET_NONE;
    t->evicted = false;
    if (change != HC_HOTSET_REFRESH) {
        uint64_t h = hc_siphash13(&hs->hkey, key, len);
        recent_t *r = &hs->recent[h & hs->mask];
        if (change == HC_HOTSET_TO_COOL) {
            *r = (recent_t){h, hs->now_ms};
        } else if (r->hash == h && hs->o.flap_ms > 0 && hs->now_ms - r->left_ms < hs->o.flap_ms) {
            hs->stats.flaps++;
        }
    }
    return t;
}

/* Members coldest first: COOLING ones before the rest, as their rate is below leave_rate
 * whatever this window says; then by this window's rate. */
static int by_member_rate_asc(const void *a, const void *b)
{
    const entry_t *x = a;
    const entry_t *y = b;
    if ((x->state == HC_HOTSET_COOLING) != (y->state == HC_HOTSET_COOLING)) {
        return x->state == HC_HOTSET_COOLING ? -1 : 1;
    }
    return x->rate < y->rate ? -1 : x->rate > y->rate;
}

const hc_hotset_transition_t *hc_hotset_end(hc_hotset_t *hs, size_t *n)
{
    int64_t now = hs->now_ms;
    const hc_hotset_opts_t *o = &hs->o;
    /* 1. members: the state machine on this window's exact rate */
    size_t kept = 0;
    for (size_t i = 0; i < hs->n; i++) {
        entry_t *e = &hs->ent[i];
        e->rate = (double)e->events / hs->window_s;
        e->evict = false;
        hc_hotset_state_t next = hc_hotset_next(e->state, e->rate, now - e->cooling_ms, o);
        if (next == HC_HOTSET_COOLING && e->state == HC_HOTSET_HOT) {
            e->cooling_ms = now;
        } else if (next == HC_HOTSET_HOT && e->state == HC_HOTSET_COOLING) {
            hs->stats.dips++;
        }
        e->state = next;
        if (next == HC_HOTSET_COLD) {
            add_transition(hs, HC_HOTSET_TO_COOL, e->key, e->len, e->rate);
            hs->stats.to_cool++;
            continue;
        }
        hs->ent[kept++] = *e;
    }
    hs->n = kept;
    /* 2. room for the newcomers: evict the coldest members colder than the hottest newcomers
     * (both sorted in place: members' order means nothing, the index is rebuilt below) */
    size_t nc = hc_topn_sort(&hs->cand);
    qsort(hs->ent, hs->n, sizeof(*hs->ent), by_member_rate_asc);
    size_t take = 0, evict = 0, free_slots = o->max - hs->n;
    while (take < nc) {
        double rate = (double)hs->cand_items[take].events / hs->window_s;
        if (free_slots > 0) {
            free_slots--;
        } else if (evict < hs->n &&
                   (hs->ent[evict].state == HC_HOTSET_COOLING || hs->ent[evict].rate < rate)) {
            hs->ent[evict++].evict = true;
        } else {
            break;
        }
        take++;
    }
    hs->stats.dropped += (int64_t)(nc - take);
    /* 3. evictions and refreshes, then compact */
    kept = 0;
    for (size_t i = 0; i < hs->n; i++) {
        entry_t *e = &hs->ent[i];
        if (e->evict) {
            add_transition(hs, HC_HOTSET_TO_COOL, e->key, e->len, e->rate)->evicted = true;
            hs->stats.to_cool++;
            hs->stats.evicted++;
            continue;
        }
        if (o->ttl_ms > 0 && e->state == HC_HOTSET_HOT && now - e->announced_ms >= o->ttl_ms / 3) {
            add_transition(hs, HC_HOTSET_REFRESH, e->key, e->len, e->rate)->since_ms = e->since_ms;
            e->announced_ms = now;
        }
        hs->ent[kept++] = *e;
    }
    hs->n = kept;
    /* 4. the newcomers, hottest first */
    for (size_t i = 0; i < take; i++) {
        const cand_t *c = &hs->cand_items[i];
        entry_t *e = &hs->ent[hs->n++];
        double rate = (double)c->events / hs->window_s;
        *e = (entry_t){.state = hc_hotset_next(HC_HOTSET_COLD, rate, 0, o),
                       .hash = c->hash,
                       .len = c->len,
                       .rate = rate,
                       .since_ms = now,
                       .announced_ms = now};
        memcpy(e->key, c->key, c->len);
        add_transition(hs, HC_HOTSET_TO_HOT, c->key, c->len, rate);
        hs->stats.to_hot++;
    }
    hc_topn_clear(&hs->cand);
    index_rebuild(hs);
    hs->last_end_ms = now;
    *n = hs->ntrans;
    return hs->trans;
}

hc_hotset_state_t hc_hotset_state(const hc_hotset_t *hs, const char *post_id, size_t post_id_len)
{
    if (post_id_len == 0 || post_id_len > HC_POST_ID_MAX) {
        return HC_HOTSET_COLD;
    }
    long i = find(hs, post_id, post_id_len, hash_key(hs, post_id, post_id_len));
    return i >= 0 ? hs->ent[i].state : HC_HOTSET_COLD;
}

size_t hc_hotset_size(const hc_hotset_t *hs)
{
    return hs->n;
}

hc_hotset_member_t hc_hotset_member(const hc_hotset_t *hs, size_t i)
{
    const entry_t *e = &hs->ent[i];
    return (hc_hotset_member_t){
        .post_id = e->key, .post_id_len = e->len, .state = e->state, .rate = e->rate};
}

hc_hotset_stats_t hc_hotset_stats(const hc_hotset_t *hs)
{
    return hs->stats;
}

/* ---- records ---- */

static const char *source_name(hc_hotkey_source_t source)
{
    return source == HC_HOTKEY_DECLARED ? "declared" : "detected";
}

size_t hc_hotkey_record_key(const hc_hotkey_record_t *rec, char *out, size_t size)
{
    const char *src = source_name(rec->source);
    size_t sl = strlen(src);
    if (sl + 1 + rec->post_id_len > size) {
        return 0;
    }
    memcpy(out, src, sl);
    out[sl] = ':';
    memcpy(out + sl + 1, rec->post_id, rec->post_id_len);
    return sl + 1 + rec->post_id_len;
}

char *hc_hotkey_record_encode(const hc_hotkey_record_t *rec)
{
    json_t *obj = json_object();
    if (!obj) {
        return NULL;
    }
    /* rates to 0.1 likes/s: the record is for people and producers, not for accounting */
    double rate = isfinite(rec->rate) ? round(rec->rate * 10.0) / 10.0 : 0.0;
    bool ok =
        json_object_set_new(obj, "post", json_stringn(rec->post_id, rec->post_id_len)) == 0 &&
        json_object_set_new(obj, "state", json_string(rec->hot ? "hot" : "cool")) == 0 &&
        json_object_set_new(obj, "rate", json_real(rate)) == 0 &&
        json_object_set_new(obj, "since", json_integer(rec->since_ms)) == 0 &&
        json_object_set_new(obj, "source", json_string(source_name(rec->source))) == 0 &&
        json_object_set_new(obj, "expires",
                            rec->expires_ms == HC_HOTSET_NONE ? json_null()
                                                              : json_integer(rec->expires_ms)) == 0;
    if (ok && rec->salts > 0) {
        ok = json_object_set_new(obj, "salts", json_integer(rec->salts)) == 0;
    }
    char *s =
        ok ? json_dumps(obj, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(15)) : NULL;
    json_decref(obj);
    return s;
}

hc_err_t hc_hotkey_record_parse(const void *value, size_t len, hc_hotkey_record_t *rec,
                                char *errstr, size_t errstr_size)
{
    json_error_t jerr;
    json_t *obj = value ? json_loadb(value, len, JSON_REJECT_DUPLICATES, &jerr) : NULL;
    hc_err_t err = HC_ERR_RECORD;
    const char *why = "not a JSON object";
    if (!json_is_object(obj)) {
        goto out;
    }
    json_t *post = json_object_get(obj, "post"), *state = json_object_get(obj, "state");
    json_t *rate = json_object_get(obj, "rate"), *since = json_object_get(obj, "since");
    json_t *source = json_object_get(obj, "source"), *expires = json_object_get(obj, "expires");
    json_t *salts = json_object_get(obj, "salts");
    why = "post: want a post id (1..256 bytes of UTF-8, no control characters)";
    if (!json_is_string(post) ||
        !hc_post_id_valid(json_string_value(post), json_string_length(post))) {
        goto out;
    }
    why = "state: want \"hot\" or \"cool\"";
    if (!json_is_string(state) || (strcmp(json_string_value(state), "hot") != 0 &&
                                   strcmp(json_string_value(state), "cool") != 0)) {
        goto out;
    }
    why = "source: want \"detected\" or \"declared\"";
    if (!json_is_string(source) || (strcmp(json_string_value(source), "detected") != 0 &&
                                    strcmp(json_string_value(source), "declared") != 0)) {
        goto out;
    }
    why = "since: want an integer; expires: an integer or null; rate: a number";
    if (!json_is_integer(since) ||
        !(expires == NULL || json_is_null(expires) || json_is_integer(expires)) ||
        !(rate == NULL || json_is_number(rate))) {
        goto out;
    }
    why = "salts: want an integer 1..65536";
    if (salts && (!json_is_integer(salts) || json_integer_value(salts) < 1 ||
                  json_integer_value(salts) > 65536)) {
        goto out;
    }
    memset(rec, 0, sizeof(*rec));
    rec->post_id_len = json_string_length(post);
    memcpy(rec->post_id, json_string_value(post), rec->post_id_len);
    rec->hot = strcmp(json_string_value(state), "hot") == 0;
    rec->rate = rate ? json_number_value(rate) : 0.0;
    rec->since_ms = json_integer_value(since);
    rec->source = strcmp(json_string_value(source), "declared") == 0 ? HC_HOTKEY_DECLARED
                                                                     : HC_HOTKEY_DETECTED;
    rec->expires_ms = json_is_integer(expires) ? json_integer_value(expires) : HC_HOTSET_NONE;
    rec->salts = salts ? (int32_t)json_integer_value(salts) : 0;
    err = HC_OK;
out:
    if (err != HC_OK) {
        hc_errstr_set(errstr, errstr_size, "hotkeys record: %s", why);
    }
    json_decref(obj);
    return err;
}

bool hc_hotkey_record_is_hot(const hc_hotkey_record_t *rec, int64_t now_ms)
{
    if (!rec->hot) {
        return false;
    }
    if (rec->expires_ms != HC_HOTSET_NONE && now_ms >= rec->expires_ms) {
        return false;
    }
    return rec->source != HC_HOTKEY_DECLARED || now_ms >= rec->since_ms;
}
