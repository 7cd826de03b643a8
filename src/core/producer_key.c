/* Adaptive salting: the hot-set view and the producer key rule (producer_key.h). The view is an
 * open-addressing table keyed by post id, one slot per source, since a detection and a
 * declaration of the same post are separate keys in the compacted topic and both may make the
 * post hot. */
#include "hotcount/producer_key.h"

#include <stdlib.h>
#include <string.h>

#include "hotcount/salt.h"
#include "hotcount/siphash.h"

typedef struct view_rec {
    bool present;
    hc_hotkey_record_t rec; /* the last record of this source for the post */
} view_rec_t;

typedef struct view_entry {
    char *post_id; /* owned; NULL: empty slot */
    size_t post_id_len;
    view_rec_t by_source[2]; /* [HC_HOTKEY_DETECTED], [HC_HOTKEY_DECLARED] */
} view_entry_t;

struct hc_hotview {
    view_entry_t *slots; /* owned; cap is a power of two, kept at most half full */
    size_t cap;
    size_t used;
    int64_t records;
    int64_t refused;  /* new posts turned away while every post held was hot */
    int64_t evicted;  /* posts dropped by a sweep: every record of theirs had expired */
    int64_t sweep_at; /* records: the next sweep may run once this many were fed */
    uint32_t default_salts;
    hc_hash_key_t hkey; /* the process key */
};

#define VIEW_MIN_CAP 64

hc_hotview_t *hc_hotview_new(uint32_t default_salts)
{
    hc_hotview_t *hv = calloc(1, sizeof(*hv));
    if (!hv) {
        return NULL;
    }
    hv->slots = calloc(VIEW_MIN_CAP, sizeof(*hv->slots));
    if (!hv->slots) {
        free(hv);
        return NULL;
    }
    hv->cap = VIEW_MIN_CAP;
    hv->default_salts = default_salts < 1 ? 1 : default_salts;
    hv->hkey = hc_hash_process_key();
    return hv;
}

void hc_hotview_destroy(hc_hotview_t *hv)
{
    if (!hv) {
        return;
    }
    for (size_t i = 0; i < hv->cap; i++) {
        free(hv->slots[i].post_id);
    }
    free(hv->slots);
    free(hv);
}

/* The slot holding post_id, or the empty slot where it would go. Post ids come from whoever
 * may write topic.hotkeys: with an unkeyed hash (this was FNV-1a 32) ids that share one probe
 * run are computed in a fraction of a second, and 100 000 of them made every lookup of an
 * adaptive producer walk the whole run. SipHash-1-3 under the process key (hotcount/siphash.h)
 * makes that guesswork. */
static view_entry_t *find_slot(const hc_hash_key_t *hkey, view_entry_t *slots, size_t cap,
                               const char *post_id, size_t len)
{
    size_t i = (size_t)hc_siphash13(hkey, post_id, len) & (cap - 1);
    for (;;) {
        view_entry_t *e = &slots[i];
        if (!e->post_id ||
            (e->post_id_len == len && (len == 0 || memcmp(e->post_id, post_id, len) == 0))) {
            return e;
        }
        i = (i + 1) & (cap - 1);
    }
}

static bool grow(hc_hotview_t *hv)
{
    size_t cap = hv->cap * 2;
    view_entry_t *slots = calloc(cap, sizeof(*slots));
    if (!slots) {
        return false;
    }
    for (size_t i = 0; i < hv->cap; i++) {
        if (hv->slots[i].post_id) {
            *find_slot(&hv->hkey, slots, cap, hv->slots[i].post_id, hv->slots[i].post_id_len) =
                hv->slots[i];
        }
    }
    free(hv->slots);
    hv->slots = slots;
    hv->cap = cap;
    return true;
}

/* Whether a source's record can still make its post hot at now_ms or later: a "cool" record
 * never does (a later record of the same key replaces it), a hot one until it expires (time
 * moves one way), a declared one that has not started yet does. now_ms HC_HOTSET_NONE: not
 * known, so only "cool" decides nothing. */
static bool rec_decides(const view_rec_t *vr, int64_t now_ms)
{
    if (!vr->present || !vr->rec.hot) {
        return false;
    }
    return vr->rec.expires_ms == HC_HOTSET_NONE || now_ms == HC_HOTSET_NONE ||
           now_ms < vr->rec.expires_ms;
}

static bool entry_decides(const view_entry_t *e, int64_t now_ms)
{
    return rec_decides(&e->by_source[0], now_ms) || rec_decides(&e->by_source[1], now_ms);
}

/* Removes the entry at e, shifting later members of its probe run back (no tombstones, so a
 * lookup still stops at the first empty slot). */
static void remove_entry(hc_hotview_t *hv, view_entry_t *e)
{
    size_t mask = hv->cap - 1;
    size_t i = (size_t)(e - hv->slots);
    free(e->post_id);
    hv->slots[i].post_id = NULL;
    hv->used--;
    for (size_t j = (i + 1) & mask; hv->slots[j].post_id; j = (j + 1) & mask) {
        size_t home =
            (size_t)hc_siphash13(&hv->hkey, hv->slots[j].post_id, hv->slots[j].post_id_len) & mask;
        /* j's entry may move to the hole at i when its home is not in (i, j] */
        if (((j - home) & mask) >= ((j - i) & mask)) {
            hv->slots[i] = hv->slots[j];
            hv->slots[j].post_id = NULL;
            i = j;
        }
    }
}

/* Drops every post that decides nothing at now_ms (all its records expired), rebuilding the
 * table: O(cap). Called only when the view is full, and at most once per SWEEP_EVERY records,
 * so a flood of posts that are all hot costs each record O(cap / SWEEP_EVERY), not O(cap). */
#define SWEEP_EVERY (HC_HOTVIEW_MAX_POSTS / 64)

static bool sweep(hc_hotview_t *hv, int64_t now_ms)
{
    view_entry_t *slots = calloc(hv->cap, sizeof(*slots));
    if (!slots) {
        return false;
    }
    size_t used = 0;
    for (size_t i = 0; i < hv->cap; i++) {
        view_entry_t *e = &hv->slots[i];
        if (!e->post_id) {
            continue;
        }
        if (entry_decides(e, now_ms)) {
            *find_slot(&hv->hkey, slots, hv->cap, e->post_id, e->post_id_len) = *e;
            used++;
        } else {
            free(e->post_id);
            hv->evicted++;
        }
    }
    free(hv->slots);
    hv->slots = slots;
    hv->used = used;
    hv->sweep_at = hv->records + SWEEP_EVERY;
    return true;
}

hc_err_t hc_hotview_apply_at(hc_hotview_t *hv, const hc_hotkey_record_t *rec, int64_t now_ms)
{
    size_t src = rec->source == HC_HOTKEY_DECLARED ? 1 : 0;
    view_rec_t vr = {.present = true, .rec = *rec};
    if ((hv->used + 1) * 2 > hv->cap && !grow(hv)) {
        return HC_ERR_FATAL; /* nothing changed: the old table is intact */
    }
    view_entry_t *e = find_slot(&hv->hkey, hv->slots, hv->cap, rec->post_id, rec->post_id_len);
    if (!e->post_id) {
        if (!rec_decides(&vr, now_ms)) {
            hv->records++; /* a cool or expired record of a post not held: nothing to keep */
            return HC_OK;
        }
        if (hv->used >= HC_HOTVIEW_MAX_POSTS && now_ms != HC_HOTSET_NONE &&
            hv->records >= hv->sweep_at) {
            if (!sweep(hv, now_ms)) {
                return HC_ERR_FATAL;
            }
            e = find_slot(&hv->hkey, hv->slots, hv->cap, rec->post_id, rec->post_id_len);
        }
        if (hv->used >= HC_HOTVIEW_MAX_POSTS) {
            hv->refused++;
            return HC_ERR_RECORD; /* every post held is hot: they keep their state */
        }
        e->post_id = malloc(rec->post_id_len + 1);
        if (!e->post_id) {
            return HC_ERR_FATAL;
        }
        memcpy(e->post_id, rec->post_id, rec->post_id_len);
        e->post_id[rec->post_id_len] = '\0';
        e->post_id_len = rec->post_id_len;
        memset(e->by_source, 0, sizeof(e->by_source));
        hv->used++;
    }
    e->by_source[src] = vr;
    hv->records++;
    if (!entry_decides(e, now_ms)) {
        remove_entry(hv, e); /* cooled (or expired) by both sources: it left the set */
    }
    return HC_OK;
}

hc_err_t hc_hotview_apply(hc_hotview_t *hv, const hc_hotkey_record_t *rec)
{
    return hc_hotview_apply_at(hv, rec, HC_HOTSET_NONE);
}

hc_err_t hc_hotview_apply_value(hc_hotview_t *hv, const void *value, size_t len, char *errstr,
                                size_t errstr_size)
{
    hc_hotkey_record_t rec;
    hc_err_t err = hc_hotkey_record_parse(value, len, &rec, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    return hc_hotview_apply(hv, &rec);
}

/* A tombstone's key, "<source>:<post>" (hc_hotkey_record_key): the source's record goes. */
static hc_err_t apply_tombstone(hc_hotview_t *hv, const char *key, size_t klen, char *errstr,
                                size_t errstr_size)
{
    static const struct {
        const char *prefix;
        size_t len;
    } sources[2] = {{"detected:", 9}, {"declared:", 9}};
    for (size_t s = 0; s < 2; s++) {
        if (klen > sources[s].len && klen - sources[s].len <= HC_POST_ID_MAX &&
            memcmp(key, sources[s].prefix, sources[s].len) == 0) {
            const char *post_id = key + sources[s].len;
            size_t len = klen - sources[s].len;
            view_entry_t *e = find_slot(&hv->hkey, hv->slots, hv->cap, post_id, len);
            if (e->post_id) {
                e->by_source[s].present = false;
                if (!entry_decides(e, HC_HOTSET_NONE)) {
                    remove_entry(hv, e);
                }
            }
            hv->records++;
            return HC_OK;
        }
    }
    hc_errstr_set(errstr, errstr_size, "a tombstone whose key is not <source>:<post>");
    return HC_ERR_RECORD;
}

hc_err_t hc_hotview_apply_message(hc_hotview_t *hv, const void *key, size_t key_len,
                                  const void *value, size_t len, int64_t now_ms, char *errstr,
                                  size_t errstr_size)
{
    if (!value) {
        return apply_tombstone(hv, key ? key : "", key ? key_len : 0, errstr, errstr_size);
    }
    hc_hotkey_record_t rec;
    hc_err_t err = hc_hotkey_record_parse(value, len, &rec, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    return hc_hotview_apply_at(hv, &rec, now_ms);
}

int64_t hc_hotview_refused(const hc_hotview_t *hv)
{
    return hv ? hv->refused : 0;
}

int64_t hc_hotview_evicted(const hc_hotview_t *hv)
{
    return hv ? hv->evicted : 0;
}

uint32_t hc_hotview_salts(const hc_hotview_t *hv, const char *post_id, size_t post_id_len,
                          int64_t now_ms)
{
    if (!hv) {
        return 0;
    }
    const view_entry_t *e = find_slot(&hv->hkey, hv->slots, hv->cap, post_id, post_id_len);
    if (!e->post_id) {
        return 0;
    }
    bool hot = false;
    uint32_t asked = 0; /* the largest `salts` a hot record carries */
    for (size_t s = 0; s < 2; s++) {
        const view_rec_t *vr = &e->by_source[s];
        if (vr->present && hc_hotkey_record_is_hot(&vr->rec, now_ms)) {
            hot = true;
            if (vr->rec.salts > 0 && (uint32_t)vr->rec.salts > asked) {
                asked = (uint32_t)vr->rec.salts;
            }
        }
    }
    if (!hot) {
        return 0;
    }
    return asked > 0 ? asked : hv->default_salts;
}

size_t hc_hotview_posts(const hc_hotview_t *hv)
{
    return hv ? hv->used : 0;
}

size_t hc_hotview_each_hot(const hc_hotview_t *hv, int64_t now_ms, size_t max,
                           hc_hotview_each_fn fn, void *opaque)
{
    size_t hot = 0;
    for (size_t i = 0; hv && i < hv->cap; i++) {
        const view_entry_t *e = &hv->slots[i];
        for (size_t s = 0; e->post_id && s < 2; s++) {
            if (e->by_source[s].present && hc_hotkey_record_is_hot(&e->by_source[s].rec, now_ms)) {
                if (hot++ < max) {
                    fn(opaque, &e->by_source[s].rec);
                }
            }
        }
    }
    return hot;
}

int64_t hc_hotview_records(const hc_hotview_t *hv)
{
    return hv ? hv->records : 0;
}

size_t hc_producer_key(const hc_hotview_t *hv, const char *post_id, size_t post_id_len,
                       const void *user_id, size_t user_id_len, int64_t now_ms, char *buf,
                       size_t buf_size)
{
    uint32_t ways = hc_hotview_salts(hv, post_id, post_id_len, now_ms);
    /* hc_salt gives 0 for ways <= 1, so a cold post and a post declared with --salts 1 both
     * key "<post>#0". */
    uint32_t salt = ways > 1 ? hc_salt(user_id, user_id_len, ways) : 0;
    return hc_salt_key(buf, buf_size, post_id, post_id_len, salt);
}
