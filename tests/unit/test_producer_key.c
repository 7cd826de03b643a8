/* Adaptive salting (core/producer_key.h): the shared vectors that the Python reference
 * (tools/producer_key.py) is checked against too, and the view's own contract. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* cmocka.h needs the four headers above; keep it in its own include block */
#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "hotcount/producer_key.h"
#include "hotcount/salt.h"

static const char *vectors_path = HC_PRODUCER_KEY_VECTORS;

#define T0 1796144600000LL

static void key_matches_every_shared_vector(void **state)
{
    (void)state;
    json_error_t jerr;
    json_t *doc = json_load_file(vectors_path, 0, &jerr);
    if (!doc) {
        fail_msg("%s: %s", vectors_path, jerr.text);
    }
    json_t *cases = json_object_get(doc, "cases");
    assert_true(json_array_size(cases) >= 20);
    size_t i;
    json_t *c;
    int failed = 0;
    json_array_foreach(cases, i, c)
    {
        hc_hotview_t *hv =
            hc_hotview_new((uint32_t)json_integer_value(json_object_get(c, "default_salts")));
        assert_non_null(hv);
        size_t j;
        json_t *rec;
        json_array_foreach(json_object_get(c, "records"), j, rec)
        {
            char *value = json_dumps(rec, JSON_COMPACT | JSON_PRESERVE_ORDER);
            char errstr[256];
            (void)hc_hotview_apply_value(hv, value, strlen(value), errstr, sizeof(errstr));
            free(value);
        }
        const char *post = json_string_value(json_object_get(c, "post"));
        const char *user = json_string_value(json_object_get(c, "user"));
        const char *want = json_string_value(json_object_get(c, "key"));
        char key[300];
        size_t len =
            hc_producer_key(hv, post, strlen(post), user, strlen(user),
                            json_integer_value(json_object_get(c, "now")), key, sizeof(key));
        if (len != strlen(want) || memcmp(key, want, len) != 0) {
            print_message("%s: got %.*s, want %s\n", json_string_value(json_object_get(c, "name")),
                          (int)len, key, want);
            failed++;
        }
        hc_hotview_destroy(hv);
    }
    json_decref(doc);
    assert_int_equal(failed, 0);
}

static hc_hotkey_record_t detected(const char *post, bool hot)
{
    hc_hotkey_record_t rec = {0};
    rec.post_id_len = strlen(post);
    memcpy(rec.post_id, post, rec.post_id_len);
    rec.hot = hot;
    rec.since_ms = T0 - 1000;
    rec.source = HC_HOTKEY_DETECTED;
    rec.expires_ms = HC_HOTSET_NONE;
    return rec;
}

static void cold_view_keys_every_post_unsalted(void **state)
{
    (void)state;
    char key[64];
    assert_int_equal(hc_producer_key(NULL, "42", 2, "u5", 2, T0, key, sizeof(key)), 4);
    assert_memory_equal(key, "42#0", 5);
    hc_hotview_t *hv = hc_hotview_new(16);
    assert_non_null(hv);
    assert_int_equal(hc_hotview_salts(hv, "42", 2, T0), 0);
    assert_int_equal(hc_producer_key(hv, "42", 2, "u5", 2, T0, key, sizeof(key)), 4);
    assert_memory_equal(key, "42#0", 5);
    hc_hotview_destroy(hv);
}

static void hot_post_is_salted_as_the_static_rule(void **state)
{
    (void)state;
    hc_hotview_t *hv = hc_hotview_new(16);
    hc_hotkey_record_t rec = detected("42", true);
    assert_int_equal(hc_hotview_apply(hv, &rec), HC_OK);
    assert_int_equal(hc_hotview_salts(hv, "42", 2, T0), 16);
    char key[64], want[64];
    for (int u = 0; u < 200; u++) {
        char user[16];
        int ulen = snprintf(user, sizeof(user), "u%d", u);
        size_t len = hc_producer_key(hv, "42", 2, user, (size_t)ulen, T0, key, sizeof(key));
        size_t wlen = hc_salt_key(want, sizeof(want), "42", 2, hc_salt(user, (size_t)ulen, 16));
        assert_int_equal(len, wlen);
        assert_memory_equal(key, want, len);
    }
    rec.hot = false; /* the post cools: the same key replaces the record */
    assert_int_equal(hc_hotview_apply(hv, &rec), HC_OK);
    assert_int_equal(hc_hotview_salts(hv, "42", 2, T0), 0);
    assert_int_equal(hc_hotview_posts(hv), 0); /* it left the set: nothing to hold */
    assert_int_equal(hc_hotview_records(hv), 2);
    hc_hotview_destroy(hv);
}

/* A writer of topic.hotkeys flooding it with posts cannot grow a producer's memory: past
 * HC_HOTVIEW_MAX_POSTS a new post is refused as a record, and the posts already known keep
 * following their records.
 * mutant: no bound (the post past it is taken, the view grows) */
static void view_refuses_posts_past_its_bound(void **state)
{
    (void)state;
    hc_hotview_t *hv = hc_hotview_new(8);
    char post[16];
    for (int p = 0; p < HC_HOTVIEW_MAX_POSTS; p++) {
        snprintf(post, sizeof(post), "%d", p);
        hc_hotkey_record_t rec = detected(post, true);
        assert_int_equal(hc_hotview_apply(hv, &rec), HC_OK);
    }
    hc_hotkey_record_t extra = detected("flood", true);
    assert_int_equal(hc_hotview_apply(hv, &extra), HC_ERR_RECORD);
    assert_int_equal(hc_hotview_posts(hv), HC_HOTVIEW_MAX_POSTS);
    assert_int_equal(hc_hotview_salts(hv, "flood", 5, T0), 0);
    hc_hotkey_record_t cool = detected("7", false); /* a known post still changes state */
    assert_int_equal(hc_hotview_apply(hv, &cool), HC_OK);
    assert_int_equal(hc_hotview_salts(hv, "7", 1, T0), 0);
    hc_hotview_destroy(hv);
}

/* The table grows past its first capacity without losing any post. */
static void view_keeps_every_post_through_growth(void **state)
{
    (void)state;
    hc_hotview_t *hv = hc_hotview_new(8);
    char post[16];
    for (int p = 0; p < 5000; p++) {
        snprintf(post, sizeof(post), "%d", p);
        hc_hotkey_record_t rec = detected(post, p % 2 == 0);
        assert_int_equal(hc_hotview_apply(hv, &rec), HC_OK);
    }
    assert_int_equal(hc_hotview_posts(hv), 2500); /* the cool half is not held */
    for (int p = 0; p < 5000; p++) {
        int len = snprintf(post, sizeof(post), "%d", p);
        assert_int_equal(hc_hotview_salts(hv, post, (size_t)len, T0), p % 2 == 0 ? 8 : 0);
    }
    assert_int_equal(hc_hotview_salts(hv, "5000", 4, T0), 0);
    hc_hotview_destroy(hv);
}

static void invalid_value_leaves_view_unchanged(void **state)
{
    (void)state;
    hc_hotview_t *hv = hc_hotview_new(16);
    char errstr[256];
    const char *good = "{\"post\":\"p\",\"state\":\"hot\",\"rate\":1.0,\"since\":1,"
                       "\"source\":\"detected\",\"expires\":null}";
    const char *bad = "{\"post\":\"p\",\"state\":\"cool\",\"since\":\"soon\","
                      "\"source\":\"detected\",\"expires\":null}";
    assert_int_equal(hc_hotview_apply_value(hv, good, strlen(good), errstr, sizeof(errstr)), HC_OK);
    assert_int_equal(hc_hotview_apply_value(hv, bad, strlen(bad), errstr, sizeof(errstr)),
                     HC_ERR_RECORD);
    assert_int_equal(hc_hotview_apply_value(hv, "xx", 2, errstr, sizeof(errstr)), HC_ERR_RECORD);
    assert_int_equal(hc_hotview_salts(hv, "p", 1, T0), 16);
    assert_int_equal(hc_hotview_records(hv), 1);
    hc_hotview_destroy(hv);
}

static void key_too_large_for_buffer_writes_nothing(void **state)
{
    (void)state;
    hc_hotview_t *hv = hc_hotview_new(16);
    hc_hotkey_record_t rec = detected("12345", true);
    assert_int_equal(hc_hotview_apply(hv, &rec), HC_OK);
    char key[6] = "xxxxx";
    assert_int_equal(hc_producer_key(hv, "12345", 5, "u5", 2, T0, key, sizeof(key)), 0);
    assert_memory_equal(key, "xxxxx", 6);
    hc_hotview_destroy(hv);
}

typedef struct listed {
    int n;
    int declared;
    char last[16];
} listed_t;

static void list_one(void *opaque, const hc_hotkey_record_t *rec)
{
    listed_t *l = opaque;
    l->n++;
    l->declared += rec->source == HC_HOTKEY_DECLARED;
    snprintf(l->last, sizeof(l->last), "%.*s", (int)rec->post_id_len, rec->post_id);
}

/* The listing names exactly the records that make a post hot now: cool, expired and
 * not-yet-started ones are left out, a post hot by both sources is seen once per source, and
 * `max` cuts the calls but not the count.
 * mutant: listing every present record (cool and expired ones too) */
static void listing_names_only_what_is_hot_now(void **state)
{
    (void)state;
    hc_hotview_t *hv = hc_hotview_new(16);
    char post[16];
    for (int p = 0; p < 10; p++) {
        snprintf(post, sizeof(post), "%d", p);
        hc_hotkey_record_t rec = detected(post, p < 4); /* 0..3 hot, 4..9 cool */
        assert_int_equal(hc_hotview_apply(hv, &rec), HC_OK);
    }
    hc_hotkey_record_t decl = detected("3", true); /* also declared: two records */
    decl.source = HC_HOTKEY_DECLARED;
    decl.expires_ms = T0 + 60000;
    assert_int_equal(hc_hotview_apply(hv, &decl), HC_OK);
    hc_hotkey_record_t over = detected("over", true); /* a declaration that has expired */
    over.source = HC_HOTKEY_DECLARED;
    over.expires_ms = T0 - 1;
    assert_int_equal(hc_hotview_apply(hv, &over), HC_OK);
    hc_hotkey_record_t later = detected("later", true); /* one that has not started */
    later.source = HC_HOTKEY_DECLARED;
    later.since_ms = T0 + 1000;
    later.expires_ms = T0 + 60000;
    assert_int_equal(hc_hotview_apply(hv, &later), HC_OK);

    listed_t l = {0};
    assert_int_equal(hc_hotview_each_hot(hv, T0, 100, list_one, &l), 5);
    assert_int_equal(l.n, 5);
    assert_int_equal(l.declared, 1);
    listed_t cut = {0};
    assert_int_equal(hc_hotview_each_hot(hv, T0, 2, list_one, &cut), 5);
    assert_int_equal(cut.n, 2);
    listed_t none = {0};
    assert_int_equal(hc_hotview_each_hot(NULL, T0, 100, list_one, &none), 0);
    assert_int_equal(none.n, 0);
    hc_hotview_destroy(hv);
}

/* Issue 25, item 4: the view holds what decides something. Cool records take no room (one
 * flood of them, or a deployment's history in the compacted topic, filled the bound for good
 * before), posts whose records all expired are swept out when room is needed, and a tombstone
 * removes its source's record; what is hot stays.
 * mutant: keeping cool records (the hot newcomer is refused) */
static void view_holds_no_cool_posts(void **state)
{
    (void)state;
    hc_hotview_t *hv = hc_hotview_new(8);
    char post[16];
    for (int p = 0; p < HC_HOTVIEW_MAX_POSTS; p++) {
        snprintf(post, sizeof(post), "%d", p);
        hc_hotkey_record_t rec = detected(post, false);
        assert_int_equal(hc_hotview_apply(hv, &rec), HC_OK);
    }
    assert_int_equal(hc_hotview_posts(hv), 0);
    hc_hotkey_record_t hot = detected("newly-hot", true);
    assert_int_equal(hc_hotview_apply(hv, &hot), HC_OK);
    assert_int_equal(hc_hotview_salts(hv, "newly-hot", 9, T0), 8);
    hc_hotview_destroy(hv);
}

/* mutant: no sweep (the newcomer is refused while the view is full of expired posts) */
static void view_sweeps_expired_posts_for_a_hot_newcomer(void **state)
{
    (void)state;
    hc_hotview_t *hv = hc_hotview_new(8);
    char post[16];
    for (int p = 0; p < HC_HOTVIEW_MAX_POSTS; p++) {
        snprintf(post, sizeof(post), "%d", p);
        hc_hotkey_record_t rec = detected(post, true);
        rec.expires_ms = T0 + 1000 + p % 2; /* detections carry expires = now + ttl */
        assert_int_equal(hc_hotview_apply_at(hv, &rec, T0), HC_OK);
    }
    assert_int_equal(hc_hotview_posts(hv), HC_HOTVIEW_MAX_POSTS);
    hc_hotkey_record_t fresh = detected("fresh", true);
    fresh.expires_ms = T0 + 60000;
    assert_int_equal(hc_hotview_apply_at(hv, &fresh, T0 + 2000), HC_OK);
    assert_int_equal(hc_hotview_salts(hv, "fresh", 5, T0 + 2000), 8);
    assert_int_equal(hc_hotview_posts(hv), 1);
    assert_int_equal(hc_hotview_evicted(hv), HC_HOTVIEW_MAX_POSTS);
    /* a declaration that has not started yet decides something later: it is kept */
    hc_hotkey_record_t later = detected("later", true);
    later.source = HC_HOTKEY_DECLARED;
    later.since_ms = T0 + 10000;
    later.expires_ms = T0 + 20000;
    assert_int_equal(hc_hotview_apply_at(hv, &later, T0 + 2000), HC_OK);
    assert_int_equal(hc_hotview_salts(hv, "later", 5, T0 + 10000), 8);
    hc_hotview_destroy(hv);
}

/* A view full of posts that are all hot keeps them, refuses the newcomer and counts it, and a
 * flood of newcomers costs each one a bounded share of a sweep (about 100 000 records here:
 * quadratic, that is 10^10 slot visits, would time the test out). */
static void view_full_of_hot_posts_keeps_them(void **state)
{
    (void)state;
    hc_hotview_t *hv = hc_hotview_new(8);
    char post[24];
    for (int p = 0; p < HC_HOTVIEW_MAX_POSTS; p++) {
        snprintf(post, sizeof(post), "%d", p);
        hc_hotkey_record_t rec = detected(post, true);
        assert_int_equal(hc_hotview_apply_at(hv, &rec, T0), HC_OK);
    }
    for (int p = 0; p < HC_HOTVIEW_MAX_POSTS; p++) {
        snprintf(post, sizeof(post), "flood%d", p);
        hc_hotkey_record_t rec = detected(post, true);
        assert_int_equal(hc_hotview_apply_at(hv, &rec, T0), HC_ERR_RECORD);
    }
    assert_int_equal(hc_hotview_refused(hv), HC_HOTVIEW_MAX_POSTS);
    assert_int_equal(hc_hotview_salts(hv, "99999", 5, T0), 8);
    hc_hotview_destroy(hv);
}

/* mutant: tombstones read as invalid values (the post stays hot) */
static void tombstone_removes_its_sources_record(void **state)
{
    (void)state;
    hc_hotview_t *hv = hc_hotview_new(8);
    char errstr[256];
    hc_hotkey_record_t det = detected("p1", true);
    hc_hotkey_record_t decl = detected("p1", true);
    decl.source = HC_HOTKEY_DECLARED;
    decl.salts = 4;
    assert_int_equal(hc_hotview_apply_at(hv, &det, T0), HC_OK);
    assert_int_equal(hc_hotview_apply_at(hv, &decl, T0), HC_OK);
    assert_int_equal(hc_hotview_salts(hv, "p1", 2, T0), 4);
    assert_int_equal(
        hc_hotview_apply_message(hv, "declared:p1", 11, NULL, 0, T0, errstr, sizeof(errstr)),
        HC_OK);
    assert_int_equal(hc_hotview_salts(hv, "p1", 2, T0), 8); /* still detected */
    assert_int_equal(
        hc_hotview_apply_message(hv, "detected:p1", 11, NULL, 0, T0, errstr, sizeof(errstr)),
        HC_OK);
    assert_int_equal(hc_hotview_salts(hv, "p1", 2, T0), 0);
    assert_int_equal(hc_hotview_posts(hv), 0);
    /* a tombstone for a post not held, and one whose key names no source */
    assert_int_equal(
        hc_hotview_apply_message(hv, "detected:zz", 11, NULL, 0, T0, errstr, sizeof(errstr)),
        HC_OK);
    assert_int_equal(hc_hotview_apply_message(hv, "p1", 2, NULL, 0, T0, errstr, sizeof(errstr)),
                     HC_ERR_RECORD);
    assert_int_equal(hc_hotview_apply_message(hv, NULL, 0, NULL, 0, T0, errstr, sizeof(errstr)),
                     HC_ERR_RECORD);
    /* removal keeps every other post findable (backward shift through probe runs) */
    char post[16];
    for (int p = 0; p < 3000; p++) {
        snprintf(post, sizeof(post), "%d", p);
        hc_hotkey_record_t rec = detected(post, true);
        assert_int_equal(hc_hotview_apply_at(hv, &rec, T0), HC_OK);
    }
    for (int p = 0; p < 3000; p += 2) {
        char key[32];
        int klen = snprintf(key, sizeof(key), "detected:%d", p);
        assert_int_equal(
            hc_hotview_apply_message(hv, key, (size_t)klen, NULL, 0, T0, errstr, sizeof(errstr)),
            HC_OK);
    }
    assert_int_equal(hc_hotview_posts(hv), 1500);
    for (int p = 0; p < 3000; p++) {
        int len = snprintf(post, sizeof(post), "%d", p);
        assert_int_equal(hc_hotview_salts(hv, post, (size_t)len, T0), p % 2 ? 8 : 0);
    }
    hc_hotview_destroy(hv);
}

int main(int argc, char **argv)
{
    if (argc > 1) {
        vectors_path = argv[1];
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(key_matches_every_shared_vector),
        cmocka_unit_test(cold_view_keys_every_post_unsalted),
        cmocka_unit_test(hot_post_is_salted_as_the_static_rule),
        cmocka_unit_test(view_keeps_every_post_through_growth),
        cmocka_unit_test(view_refuses_posts_past_its_bound),
        cmocka_unit_test(invalid_value_leaves_view_unchanged),
        cmocka_unit_test(key_too_large_for_buffer_writes_nothing),
        cmocka_unit_test(listing_names_only_what_is_hot_now),
        cmocka_unit_test(view_holds_no_cool_posts),
        cmocka_unit_test(view_sweeps_expired_posts_for_a_hot_newcomer),
        cmocka_unit_test(view_full_of_hot_posts_keeps_them),
        cmocka_unit_test(tombstone_removes_its_sources_record),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
