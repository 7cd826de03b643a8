/* The store contract (include/store/hotcount/store.h, docs/FORMATS.md "Store layout"), checked
 * the same way against every backend: the store named by HC_TEST_STORE_URI (sqlite:...,
 * redis://..., postgresql://..., dynamodb://...). Unset is a failure, not a skip: a skipped
 * integration test is not a pass.
 *
 * The store may be shared with other runs and other tests (a Redis or PostgreSQL server), so
 * each run uses its own key space: a unique store.redis.prefix, post ids that start with the
 * run id and the test's number, and one consumer group per test. top uses counts far above
 * anything else a test run writes, and every check of "all rows" filters on this test's post id
 * prefix. At the end the run's keys and rows are deleted with the backend's own client, the one
 * place this file looks past store.h. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka.h needs the four above first; the blank line keeps clang-format from sorting it up. */

#include <cmocka.h>

#include <hiredis/hiredis.h>
#include <libpq-fe.h>
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hotcount/config.h"
#include "hotcount/store.h"

#define TOPIC "likes.partials"
#define MAX_IDS 64
/* Posts in the large batch: 100 000, or HC_TEST_LARGE_BATCH (a multiple of 1000; with-store.sh
 * lowers it on the DynamoDB emulator, whose transactions take ~0.1 s per 100 actions). */
static size_t large_batch = 100000;

/* Above any count another test writes, so that top's first rows are this test's. */
#define TOP_BASE 4000000000000000LL

static const char *store_uri;
static char run_id[48];       /* unique per run: pid, time, random */
static char redis_prefix[80]; /* store.redis.prefix for this run */
static int test_seq;

typedef struct fixture {
    hc_config_t cfg;
    hc_store_t *st;
    char group[128]; /* this test's consumer group */
    char ns[96];     /* this test's post id prefix: "<run>/<n>/" */
    size_t ns_len;
    char ids[MAX_IDS][HC_POST_ID_MAX + 1];
    int nids;
    char errstr[512];
} fixture_t;

static void config_for_run(hc_config_t *cfg)
{
    char errstr[256];

    assert_int_equal(hc_config_init(cfg, hc_store_facts()), HC_OK);
    assert_int_equal(hc_config_set(cfg, "store", store_uri, errstr, sizeof(errstr)), HC_OK);
    assert_int_equal(hc_config_set(cfg, "store.redis.prefix", redis_prefix, errstr, sizeof(errstr)),
                     HC_OK);
}

static hc_store_t *open_store(fixture_t *fx)
{
    hc_store_t *st = NULL;
    hc_err_t err = hc_store_open(&fx->cfg, &st, fx->errstr, sizeof(fx->errstr));

    if (err != HC_OK) {
        fail_msg("open: %s: %s", hc_err_name(err), fx->errstr);
    }
    return st;
}

static int setup(void **state)
{
    fixture_t *fx = calloc(1, sizeof(*fx));
    hc_err_t err;
    int n = ++test_seq;

    assert_non_null(fx);
    config_for_run(&fx->cfg);
    snprintf(fx->group, sizeof(fx->group), "hctest-%s-%d", run_id, n);
    snprintf(fx->ns, sizeof(fx->ns), "%s/%d/", run_id, n);
    fx->ns_len = strlen(fx->ns);
    fx->st = open_store(fx);
    err = hc_store_init_schema(fx->st, fx->errstr, sizeof(fx->errstr));
    if (err != HC_OK) {
        fail_msg("init_schema: %s: %s", hc_err_name(err), fx->errstr);
    }
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *fx = *state;

    hc_store_close(fx->st);
    hc_config_fini(&fx->cfg);
    free(fx);
    return 0;
}

/* This test's post id "<ns><name>", kept in the fixture. */
static const char *post(fixture_t *fx, const char *name)
{
    assert_true(fx->nids < MAX_IDS);
    snprintf(fx->ids[fx->nids], sizeof(fx->ids[0]), "%s%s", fx->ns, name);
    return fx->ids[fx->nids++];
}

static hc_store_delta_t delta(const char *post_id, int64_t d)
{
    hc_store_delta_t out = {.post_id = post_id, .post_id_len = strlen(post_id), .delta = d};

    return out;
}

static hc_store_batch_t batch_of(const fixture_t *fx, const hc_store_offset_t *offsets,
                                 size_t offset_count, const hc_store_delta_t *deltas,
                                 size_t delta_count)
{
    hc_store_batch_t b = {
        .group = fx->group,
        .topic = TOPIC,
        .offsets = offsets,
        .offset_count = offset_count,
        .deltas = deltas,
        .delta_count = delta_count,
        .now_ms = 1700000000000LL,
    };

    return b;
}

static void apply_ok(fixture_t *fx, hc_store_t *st, const hc_store_batch_t *b)
{
    hc_err_t err = hc_store_apply(st, b, fx->errstr, sizeof(fx->errstr));

    if (err != HC_OK) {
        fail_msg("apply: %s: %s", hc_err_name(err), fx->errstr);
    }
}

static void apply_conflicts(fixture_t *fx, hc_store_t *st, const hc_store_batch_t *b)
{
    hc_err_t err = hc_store_apply(st, b, fx->errstr, sizeof(fx->errstr));

    if (err != HC_ERR_CONFLICT) {
        fail_msg("apply: want conflict, got %s: %s", hc_err_name(err), fx->errstr);
    }
    assert_true(fx->errstr[0] != '\0');
}

static int64_t likes_n(hc_store_t *st, const char *post_id, size_t len)
{
    char errstr[256] = "";
    int64_t likes = -12345;
    hc_err_t err = hc_store_get(st, &post_id, &len, 1, &likes, errstr, sizeof(errstr));

    if (err != HC_OK) {
        fail_msg("get: %s: %s", hc_err_name(err), errstr);
    }
    return likes;
}

static int64_t likes_of(hc_store_t *st, const char *post_id)
{
    return likes_n(st, post_id, strlen(post_id));
}

static int64_t offset_in(hc_store_t *st, const char *group, int32_t partition)
{
    char errstr[256] = "";
    int64_t off = 0;
    hc_err_t err =
        hc_store_read_offsets(st, group, TOPIC, &partition, 1, &off, errstr, sizeof(errstr));

    if (err != HC_OK) {
        fail_msg("read_offsets: %s: %s", hc_err_name(err), errstr);
    }
    return off;
}

static int64_t offset_of(fixture_t *fx, int32_t partition)
{
    return offset_in(fx->st, fx->group, partition);
}

/* foreach, counting only this test's rows (the store may hold many others). */
typedef struct visit {
    const fixture_t *fx;
    long seen;      /* rows of this test */
    long all;       /* every row visited */
    int64_t sum;    /* likes of this test's rows */
    long stop_at;   /* 0: never stop; else stop after this many rows of any kind */
    bool long_seen; /* the 256-byte id came back whole */
    const char *want_id;
    size_t want_len;
    long want_hits;
} visit_t;

static bool visit_row(const char *post_id, size_t post_id_len, int64_t likes, void *opaque)
{
    visit_t *v = opaque;

    assert_non_null(post_id);
    assert_true(post_id_len >= 1 && post_id_len <= HC_POST_ID_MAX);
    v->all++;
    if (post_id_len >= v->fx->ns_len && memcmp(post_id, v->fx->ns, v->fx->ns_len) == 0) {
        v->seen++;
        v->sum += likes;
        if (v->want_id != NULL && post_id_len == v->want_len &&
            memcmp(post_id, v->want_id, post_id_len) == 0) {
            v->want_hits++;
        }
    }
    return v->stop_at == 0 || v->all < v->stop_at;
}

static visit_t visit_all(fixture_t *fx)
{
    visit_t v = {.fx = fx};
    hc_err_t err = hc_store_foreach(fx->st, visit_row, &v, fx->errstr, sizeof(fx->errstr));

    if (err != HC_OK) {
        fail_msg("foreach: %s: %s", hc_err_name(err), fx->errstr);
    }
    return v;
}

/* ---- the tests ---- */

static void kind_matches_the_uri(void **state)
{
    fixture_t *fx = *state;
    const char *kind = hc_store_kind(fx->st);

    if (strncmp(store_uri, "sqlite:", 7) == 0) {
        assert_string_equal(kind, "sqlite");
    } else if (strncmp(store_uri, "redis://", 8) == 0 || strncmp(store_uri, "rediss://", 9) == 0) {
        assert_string_equal(kind, "redis");
    } else if (strncmp(store_uri, "dynamodb://", 11) == 0) {
        assert_string_equal(kind, "dynamodb");
    } else if (strncmp(store_uri, "cassandra://", 12) == 0) {
        assert_string_equal(kind, "cassandra");
    } else {
        assert_string_equal(kind, "postgresql");
    }
}

static void apply_sums_deltas(void **state)
{
    fixture_t *fx = *state;
    const char *a = post(fx, "a");
    const char *b = post(fx, "b");
    const char *c = post(fx, "c");
    hc_store_offset_t off = {.partition = 0, .expected = HC_OFFSET_NONE, .next = 10};
    hc_store_delta_t d1[] = {delta(a, 5), delta(b, 1)};
    hc_store_delta_t d2[] = {delta(a, 7), delta(b, -3), delta(c, 2)};
    hc_store_batch_t bt = batch_of(fx, &off, 1, d1, 2);
    int64_t totals[3] = {-99, -99, -99};

    apply_ok(fx, fx->st, &bt);
    off.expected = 10;
    off.next = 20;
    bt = batch_of(fx, &off, 1, d2, 3);
    bt.totals_out = totals; /* each post's total as this batch left it, in the batch's order */
    apply_ok(fx, fx->st, &bt);
    assert_int_equal(totals[0], 12);
    assert_int_equal(totals[1], -2);
    assert_int_equal(totals[2], 2);

    assert_int_equal(likes_of(fx->st, a), 12);
    assert_int_equal(likes_of(fx->st, b), -2); /* unlikes may outrun likes */
    assert_int_equal(likes_of(fx->st, c), 2);
    assert_int_equal(offset_of(fx, 0), 20);
}

static void apply_moves_offsets(void **state)
{
    fixture_t *fx = *state;
    hc_store_offset_t offs[] = {
        {.partition = 0, .expected = HC_OFFSET_NONE, .next = 3},
        {.partition = 5, .expected = HC_OFFSET_NONE, .next = 42},
    };
    hc_store_delta_t d[] = {delta(post(fx, "p"), 1)};
    hc_store_batch_t b = batch_of(fx, offs, 2, d, 1);
    int32_t parts[] = {0, 5, 7};
    int64_t got[3] = {0, 0, 0};
    char other_group[160];

    apply_ok(fx, fx->st, &b);
    assert_int_equal(hc_store_read_offsets(fx->st, fx->group, TOPIC, parts, 3, got, fx->errstr,
                                           sizeof(fx->errstr)),
                     HC_OK);
    assert_int_equal(got[0], 3);
    assert_int_equal(got[1], 42);
    assert_true(got[2] == HC_OFFSET_NONE); /* never written */

    offs[0].expected = 3;
    offs[0].next = 9;
    b = batch_of(fx, offs, 1, d, 1);
    apply_ok(fx, fx->st, &b);
    assert_int_equal(offset_of(fx, 0), 9);
    assert_int_equal(offset_of(fx, 5), 42); /* not in the batch: untouched */

    /* Offsets belong to one group and one topic. */
    snprintf(other_group, sizeof(other_group), "%s-other", fx->group);
    assert_true(offset_in(fx->st, other_group, 0) == HC_OFFSET_NONE);
    assert_int_equal(
        hc_store_read_offsets(fx->st, fx->group, "other.topic", parts, 1, got, NULL, 0), HC_OK);
    assert_true(got[0] == HC_OFFSET_NONE);

    /* An offset may stay where it is (a batch that consumed nothing new on a partition). */
    offs[0].expected = 9;
    offs[0].next = 9;
    b = batch_of(fx, offs, 1, d, 1);
    apply_ok(fx, fx->st, &b);
    assert_int_equal(offset_of(fx, 0), 9);
}

static void stale_batch_changes_nothing(void **state)
{
    fixture_t *fx = *state;
    const char *a = post(fx, "a");
    const char *b = post(fx, "b");
    const char *fresh = post(fx, "new");
    hc_store_offset_t offs[] = {
        {.partition = 0, .expected = HC_OFFSET_NONE, .next = 10},
        {.partition = 1, .expected = HC_OFFSET_NONE, .next = 20},
    };
    hc_store_delta_t d1[] = {delta(a, 1), delta(b, 2)};
    hc_store_delta_t d2[] = {delta(a, 100), delta(fresh, 100)};
    hc_store_batch_t bt = batch_of(fx, offs, 2, d1, 2);

    apply_ok(fx, fx->st, &bt);

    /* Partition 0 matches, partition 1 does not: the whole batch loses. */
    offs[0].expected = 10;
    offs[0].next = 11;
    offs[1].expected = 19;
    offs[1].next = 21;
    bt = batch_of(fx, offs, 2, d2, 2);
    apply_conflicts(fx, fx->st, &bt);
    assert_int_equal(likes_of(fx->st, a), 1);
    assert_int_equal(likes_of(fx->st, b), 2);
    assert_int_equal(likes_of(fx->st, fresh), 0);
    assert_int_equal(offset_of(fx, 0), 10);
    assert_int_equal(offset_of(fx, 1), 20);

    /* The same batch again still loses (a retry does not half-apply it either). */
    apply_conflicts(fx, fx->st, &bt);
    assert_int_equal(likes_of(fx->st, a), 1);
    assert_int_equal(offset_of(fx, 0), 10);

    /* The handle is still usable, and the right expectation wins. */
    offs[1].expected = 20;
    apply_ok(fx, fx->st, &bt);
    assert_int_equal(likes_of(fx->st, a), 101);
    assert_int_equal(likes_of(fx->st, fresh), 100);
    assert_int_equal(offset_of(fx, 0), 11);
    assert_int_equal(offset_of(fx, 1), 21);

    /* Applying the winning batch twice: the second attempt is a conflict, not a double count. */
    apply_conflicts(fx, fx->st, &bt);
    assert_int_equal(likes_of(fx->st, a), 101);
}

static void offset_none_means_no_stored_offset(void **state)
{
    fixture_t *fx = *state;
    const char *x = post(fx, "x");
    hc_store_offset_t off = {.partition = 3, .expected = HC_OFFSET_NONE, .next = 5};
    hc_store_delta_t d[] = {delta(x, 1)};
    hc_store_batch_t b = batch_of(fx, &off, 1, d, 1);

    /* A stored offset where the batch expects none: conflict. */
    apply_ok(fx, fx->st, &b);
    assert_int_equal(offset_of(fx, 3), 5);
    off.next = 8;
    apply_conflicts(fx, fx->st, &b);
    assert_int_equal(likes_of(fx->st, x), 1);
    assert_int_equal(offset_of(fx, 3), 5);

    /* No stored offset where the batch expects one (even 0): conflict. */
    off.partition = 4;
    off.expected = 0;
    off.next = 5;
    apply_conflicts(fx, fx->st, &b);
    assert_int_equal(likes_of(fx->st, x), 1);
    assert_true(offset_of(fx, 4) == HC_OFFSET_NONE);

    /* An offset of 0 is a stored offset like any other. */
    off.expected = HC_OFFSET_NONE;
    off.next = 0;
    apply_ok(fx, fx->st, &b);
    assert_int_equal(offset_of(fx, 4), 0);
    off.expected = 0;
    off.next = 2;
    apply_ok(fx, fx->st, &b);
    assert_int_equal(offset_of(fx, 4), 2);
    assert_int_equal(likes_of(fx->st, x), 3);
}

static void stale_handle_loses(void **state)
{
    fixture_t *fx = *state;
    const char *hot = post(fx, "hot");
    hc_store_t *stale = open_store(fx);
    hc_store_offset_t off = {.partition = 0, .expected = HC_OFFSET_NONE, .next = 100};
    hc_store_delta_t d_new[] = {delta(hot, 50)};
    hc_store_delta_t d_old[] = {delta(hot, 40)};
    hc_store_batch_t b;

    /* Both instances start from the same stored offset. */
    assert_true(offset_in(stale, fx->group, 0) == HC_OFFSET_NONE);

    b = batch_of(fx, &off, 1, d_new, 1);
    apply_ok(fx, fx->st, &b); /* the current owner commits first */

    off.next = 90;
    b = batch_of(fx, &off, 1, d_old, 1);
    apply_conflicts(fx, stale, &b);

    /* The loser re-reads the offset, as stage 2 does, and sees the winner's. */
    assert_int_equal(offset_in(stale, fx->group, 0), 100);
    assert_int_equal(likes_of(stale, hot), 50);
    assert_int_equal(likes_of(fx->st, hot), 50);
    hc_store_close(stale);
}

/* Handles race on one partition, each reading the offset and moving it by one: the
 * compare-and-set lets exactly one win per offset, so the count equals the final offset. */
#define RACE_THREADS 4
#define RACE_WINS 25

typedef struct racer {
    const hc_config_t *cfg;
    const char *group;
    const char *post_id;
    int wins;
    hc_err_t failure;
    char errstr[256];
} racer_t;

static void *race(void *arg)
{
    racer_t *r = arg;
    hc_store_t *st = NULL;
    hc_store_offset_t off = {.partition = 0};
    hc_store_delta_t d = {.post_id = r->post_id, .post_id_len = strlen(r->post_id), .delta = 1};
    hc_store_batch_t b = {.group = r->group,
                          .topic = TOPIC,
                          .offsets = &off,
                          .offset_count = 1,
                          .deltas = &d,
                          .delta_count = 1};
    int32_t part = 0;
    hc_err_t err;

    r->failure = hc_store_open(r->cfg, &st, r->errstr, sizeof(r->errstr));
    while (r->failure == HC_OK && r->wins < RACE_WINS) {
        err = hc_store_read_offsets(st, r->group, TOPIC, &part, 1, &off.expected, r->errstr,
                                    sizeof(r->errstr));
        if (err == HC_OK) {
            off.next = off.expected == HC_OFFSET_NONE ? 1 : off.expected + 1;
            err = hc_store_apply(st, &b, r->errstr, sizeof(r->errstr));
        }
        if (err == HC_OK) {
            r->wins++;
        } else if (err != HC_ERR_CONFLICT && err != HC_ERR_TRANSIENT) {
            r->failure = err;
        }
    }
    hc_store_close(st);
    return NULL;
}

static void racing_handles_count_each_commit_once(void **state)
{
    fixture_t *fx = *state;
    const char *id = post(fx, "race");
    pthread_t threads[RACE_THREADS];
    racer_t racers[RACE_THREADS];
    int i;

    for (i = 0; i < RACE_THREADS; i++) {
        memset(&racers[i], 0, sizeof(racers[i]));
        racers[i].cfg = &fx->cfg;
        racers[i].group = fx->group;
        racers[i].post_id = id;
        assert_int_equal(pthread_create(&threads[i], NULL, race, &racers[i]), 0);
    }
    for (i = 0; i < RACE_THREADS; i++) {
        assert_int_equal(pthread_join(threads[i], NULL), 0);
        if (racers[i].failure != HC_OK) {
            fail_msg("racer %d: %s: %s", i, hc_err_name(racers[i].failure), racers[i].errstr);
        }
    }
    assert_int_equal(likes_of(fx->st, id), RACE_THREADS * RACE_WINS);
    assert_int_equal(offset_of(fx, 0), RACE_THREADS * RACE_WINS);
}

static void get_of_unknown_post_is_zero(void **state)
{
    fixture_t *fx = *state;
    const char *known = post(fx, "known");
    const char *unknown = post(fx, "unknown");
    hc_store_delta_t d[] = {delta(known, 4)};
    hc_store_batch_t b = batch_of(fx, NULL, 0, d, 1);
    const char *ids[] = {unknown, known, known, ""};
    size_t lens[] = {strlen(unknown), strlen(known), strlen(known) - 1, 0};
    int64_t likes[] = {-1, -1, -1, -1};

    apply_ok(fx, fx->st, &b);
    assert_int_equal(hc_store_get(fx->st, ids, lens, 4, likes, fx->errstr, sizeof(fx->errstr)),
                     HC_OK);
    assert_int_equal(likes[0], 0);
    assert_int_equal(likes[1], 4);
    assert_int_equal(likes[2], 0); /* only the given length counts */
    assert_int_equal(likes[3], 0);
}

static void make_long_id(fixture_t *fx, char *out)
{
    /* Exactly HC_POST_ID_MAX bytes of valid UTF-8: the prefix, 4-byte emoji, ASCII padding. */
    size_t len = fx->ns_len;

    memcpy(out, fx->ns, fx->ns_len);
    while (len + 4 <= HC_POST_ID_MAX) {
        memcpy(out + len, "\xf0\x9f\x91\x8d", 4);
        len += 4;
    }
    while (len < HC_POST_ID_MAX) {
        out[len++] = 'L';
    }
    out[len] = '\0';
}

static void top_orders_by_likes_then_post_id(void **state)
{
    fixture_t *fx = *state;
    char long_id[HC_POST_ID_MAX + 1];
    const char *names[] = {"m", "b", "z", "a", "q", "c", "B"};
    const int64_t adds[] = {5, 9, 9, 9, 1, 5, 5};
    hc_store_delta_t d[8];
    hc_store_batch_t b;
    hc_store_row_t rows[12];
    size_t count = 99;
    /* Ties by post id in byte order: "B" (0x42) before "a" (0x61). */
    const char *want[] = {"a", "b", "z", NULL, "B", "c", "m", "q"};
    const int64_t want_likes[] = {9, 9, 9, 7, 5, 5, 5, 1};
    size_t i;

    make_long_id(fx, long_id);
    for (i = 0; i < 7; i++) {
        d[i] = delta(post(fx, names[i]), TOP_BASE + adds[i]);
    }
    d[7] = (hc_store_delta_t){
        .post_id = long_id, .post_id_len = HC_POST_ID_MAX, .delta = TOP_BASE + 7};
    b = batch_of(fx, NULL, 0, d, 8);
    apply_ok(fx, fx->st, &b);

    assert_int_equal(hc_store_top(fx->st, 5, rows, &count, fx->errstr, sizeof(fx->errstr)), HC_OK);
    assert_int_equal(count, 5);
    for (i = 0; i < count; i++) {
        assert_int_equal(rows[i].likes, TOP_BASE + want_likes[i]);
        if (want[i] == NULL) {
            assert_int_equal(rows[i].post_id_len, HC_POST_ID_MAX);
            assert_memory_equal(rows[i].post_id, long_id, HC_POST_ID_MAX);
            assert_int_equal(rows[i].post_id[HC_POST_ID_MAX], '\0');
        } else {
            assert_int_equal(rows[i].post_id_len, fx->ns_len + 1);
            assert_memory_equal(rows[i].post_id, fx->ns, fx->ns_len);
            assert_string_equal(rows[i].post_id + fx->ns_len, want[i]);
        }
    }

    /* More room than this test's rows: all eight first, in order, then whatever else the store
     * holds, never above them. */
    assert_int_equal(hc_store_top(fx->st, 12, rows, &count, NULL, 0), HC_OK);
    assert_true(count >= 8);
    for (i = 0; i < 8; i++) {
        assert_int_equal(rows[i].likes, TOP_BASE + want_likes[i]);
    }
    for (i = 1; i < count; i++) {
        assert_true(rows[i - 1].likes >= rows[i].likes);
    }

    assert_int_equal(hc_store_top(fx->st, 0, rows, &count, NULL, 0), HC_OK);
    assert_int_equal(count, 0);

    /* Back to 0, so that these rows do not crowd the top of later tests and runs. */
    for (i = 0; i < 8; i++) {
        d[i].delta = -d[i].delta;
    }
    apply_ok(fx, fx->st, &b);
    assert_int_equal(likes_n(fx->st, long_id, HC_POST_ID_MAX), 0);
}

/* ---- top is read from an index (issue 25, item 5), per backend ---- */

static redisContext *redis_connect_uri(const char *uri);

/* Redis: "cmdstat_scan:calls=N" of INFO commandstats (0 when the server never ran a SCAN). */
static long long redis_scan_calls(redisContext *c)
{
    redisReply *r = redisCommand(c, "INFO commandstats");
    long long calls = 0;

    assert_non_null(r);
    assert_int_equal(r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_VERB, 1);
    const char *p = strstr(r->str, "cmdstat_scan:calls=");
    if (p != NULL) {
        calls = atoll(p + strlen("cmdstat_scan:calls="));
    }
    freeReplyObject(r);
    return calls;
}

/* Redis: the score of post_id in this run's top index, or -1 when it is no member. */
static double redis_index_score(redisContext *c, const char *post_id)
{
    redisReply *r =
        redisCommand(c, "ZSCORE hotcount:top:%s %s%s", redis_prefix, redis_prefix, post_id);
    double score = -1;

    assert_non_null(r);
    if (r->type == REDIS_REPLY_STRING) {
        score = strtod(r->str, NULL);
    } else {
        assert_int_equal(r->type, REDIS_REPLY_NIL);
    }
    freeReplyObject(r);
    return score;
}

/* PostgreSQL: idx_scan of hotcount_counts_likes in the store's schema, as the statistics
 * show it now (-1: no such index). */
static long long pg_top_index_scans(PGconn *conn)
{
    PGresult *res = PQexec(conn, "SELECT pg_stat_clear_snapshot()");
    long long n = -1;

    PQclear(res);
    res = PQexec(conn, "SELECT idx_scan FROM pg_stat_user_indexes WHERE indexrelname = "
                       "'hotcount_counts_likes' AND schemaname = current_schema()");
    assert_int_equal(PQresultStatus(res), PGRES_TUPLES_OK);
    if (PQntuples(res) == 1) {
        n = atoll(PQgetvalue(res, 0, 0));
    }
    PQclear(res);
    return n;
}

/* Posts ranked by a batch, a replay of it and a zombie's batch (both refused): top answers the
 * batch's posts, and comes from the backend's index, never from a walk of every count:
 *  - Redis: no SCAN reaches the server during top (INFO commandstats), and the index's members
 *    are scored with their counts while the refused batches' post is in it nowhere (mutant
 *    tried: redis_top scanning whatever the index says; a refused batch touching the index is
 *    store_redis_commit_diff's to catch);
 *  - PostgreSQL: the statistics count a scan of hotcount_counts_likes for top (mutant tried: no
 *    such index);
 *  - SQLite: the plan of top's statement (sqlite.c's STMT_COUNT_TOP, copied here) walks
 *    hotcount_counts_likes (mutant: no such index);
 *  - DynamoDB keeps no index: its Scan is bounded instead (store_dynamodb,
 *    top_scan_is_bounded). */
static void top_is_read_from_an_index(void **state)
{
    fixture_t *fx = *state;
    const char *a = post(fx, "a");
    const char *b = post(fx, "b");
    const char *c = post(fx, "c");
    const char *z = post(fx, "zombie");
    hc_store_offset_t off = {.partition = 0, .expected = HC_OFFSET_NONE, .next = 10};
    hc_store_delta_t d[] = {delta(a, TOP_BASE + 300), delta(b, TOP_BASE + 200),
                            delta(c, TOP_BASE + 100)};
    hc_store_delta_t dz[] = {delta(z, TOP_BASE + 900), delta(c, TOP_BASE + 900)};
    hc_store_t *zombie = open_store(fx);
    hc_store_batch_t bt = batch_of(fx, &off, 1, d, 3);
    hc_store_row_t rows[3];
    size_t count = 0;
    size_t i;

    apply_ok(fx, fx->st, &bt);
    apply_conflicts(fx, fx->st, &bt); /* a replay */
    bt = batch_of(fx, &off, 1, dz, 2);
    apply_conflicts(fx, zombie, &bt); /* a zombie, from the offset before */
    hc_store_close(zombie);

    bool redis = strncmp(store_uri, "redis://", 8) == 0;
    bool pg = strncmp(store_uri, "postgres", 8) == 0;
    redisContext *rc = redis ? redis_connect_uri(store_uri) : NULL;
    PGconn *pc = pg ? PQconnectdb(store_uri) : NULL;
    long long before = 0;
    if (redis) {
        assert_non_null(rc);
        before = redis_scan_calls(rc);
    } else if (pg) {
        assert_int_equal(PQstatus(pc), CONNECTION_OK);
        before = pg_top_index_scans(pc);
        assert_true(before >= 0);
    }

    assert_int_equal(hc_store_top(fx->st, 3, rows, &count, fx->errstr, sizeof(fx->errstr)), HC_OK);
    assert_int_equal(count, 3);
    for (i = 0; i < 3; i++) {
        assert_string_equal(rows[i].post_id, fx->ids[fx->nids - 4 + (int)i]);
        assert_int_equal(rows[i].likes, TOP_BASE + 300 - 100 * (int64_t)i);
    }

    if (redis) {
        assert_int_equal(redis_scan_calls(rc), before);
        assert_true(redis_index_score(rc, a) == (double)(TOP_BASE + 300));
        assert_true(redis_index_score(rc, c) == (double)(TOP_BASE + 100));
        assert_true(redis_index_score(rc, z) == -1);
        redisFree(rc);
    } else if (pg) {
        /* A backend's statistics reach the shared view when it goes idle (within about 10 s
         * in PostgreSQL 15): wait for that, with a deadline. */
        long long after = before;
        for (int tries = 0; tries < 300 && after <= before; tries++) {
            struct timespec ts = {0, 100 * 1000 * 1000};
            nanosleep(&ts, NULL);
            after = pg_top_index_scans(pc);
        }
        assert_true(after > before);
        PQfinish(pc);
    } else if (strncmp(store_uri, "sqlite:", 7) == 0) {
        sqlite3 *db = NULL;
        sqlite3_stmt *stmt = NULL;
        bool walks = false;

        assert_int_equal(sqlite3_open_v2(store_uri + 7, &db, SQLITE_OPEN_READONLY, NULL),
                         SQLITE_OK);
        assert_int_equal(sqlite3_prepare_v2(db,
                                            "EXPLAIN QUERY PLAN SELECT post_id, likes FROM "
                                            "hotcount_counts ORDER BY likes DESC, post_id ASC "
                                            "LIMIT 3",
                                            -1, &stmt, NULL),
                         SQLITE_OK);
        while (sqlite3_step(stmt) == SQLITE_ROW) {
            const char *detail = (const char *)sqlite3_column_text(stmt, 3);
            walks = walks || (detail != NULL && strstr(detail, "hotcount_counts_likes") != NULL &&
                              strstr(detail, "TEMP B-TREE") == NULL);
        }
        sqlite3_finalize(stmt);
        sqlite3_close(db);
        assert_true(walks);
    }

    /* Back to 0, so that these rows do not crowd the top of later tests and runs. */
    for (i = 0; i < 3; i++) {
        d[i].delta = -d[i].delta;
    }
    off.expected = 10;
    off.next = 11;
    bt = batch_of(fx, &off, 1, d, 3);
    apply_ok(fx, fx->st, &bt);
}

static void foreach_visits_each_row_once(void **state)
{
    fixture_t *fx = *state;
    hc_store_delta_t d[50];
    char names[50][16];
    hc_store_batch_t b;
    visit_t v;
    int i;

    for (i = 0; i < 50; i++) {
        snprintf(names[i], sizeof(names[i]), "p%d", i);
        d[i] = delta(post(fx, names[i]), i + 1);
    }
    b = batch_of(fx, NULL, 0, d, 50);
    apply_ok(fx, fx->st, &b);

    v = visit_all(fx);
    assert_int_equal(v.seen, 50);
    assert_int_equal(v.sum, 50 * 51 / 2);

    /* fn returning false stops the walk at once. */
    memset(&v, 0, sizeof(v));
    v.fx = fx;
    v.stop_at = 1;
    assert_int_equal(hc_store_foreach(fx->st, visit_row, &v, NULL, 0), HC_OK);
    assert_int_equal(v.all, 1);

    /* And a full walk works again afterwards. */
    v = visit_all(fx);
    assert_int_equal(v.seen, 50);
}

static void offsets_only_batch_moves_offsets(void **state)
{
    fixture_t *fx = *state;
    hc_store_offset_t off = {.partition = 2, .expected = HC_OFFSET_NONE, .next = 7};
    hc_store_batch_t b = batch_of(fx, &off, 1, NULL, 0);
    visit_t v;

    apply_ok(fx, fx->st, &b);
    assert_int_equal(offset_of(fx, 2), 7);
    v = visit_all(fx);
    assert_int_equal(v.seen, 0);

    /* It is compared and set like any other. */
    off.next = 9;
    apply_conflicts(fx, fx->st, &b);
    off.expected = 7;
    apply_ok(fx, fx->st, &b);
    assert_int_equal(offset_of(fx, 2), 9);

    /* An empty batch (no offsets, no deltas) is a no-op that succeeds. */
    b = batch_of(fx, NULL, 0, NULL, 0);
    apply_ok(fx, fx->st, &b);
}

/* A batch as large as stage 2 may send: all of it lands with its offset, or none of it. */
static void large_batch_applies_atomically(void **state)
{
    fixture_t *fx = *state;
    hc_store_delta_t *d = calloc(large_batch, sizeof(*d));
    char *ids = calloc(large_batch, 128);
    hc_store_offset_t off = {.partition = 0, .expected = HC_OFFSET_NONE, .next = 1000};
    const char *page_ids[1000];
    size_t page_lens[1000];
    int64_t likes[1000];
    hc_store_batch_t b;
    visit_t v;
    size_t i;
    size_t j;

    assert_non_null(d);
    assert_non_null(ids);
    for (i = 0; i < large_batch; i++) {
        d[i].post_id = ids + i * 128;
        d[i].post_id_len = (size_t)snprintf(ids + i * 128, 128, "%spost-%zu", fx->ns, i);
        d[i].delta = 2;
    }
    b = batch_of(fx, &off, 1, d, large_batch);
    apply_ok(fx, fx->st, &b);
    assert_int_equal(offset_of(fx, 0), 1000);
    v = visit_all(fx);
    assert_int_equal(v.seen, large_batch);
    assert_int_equal(v.sum, 2 * large_batch);

    /* A stale batch of the same size changes none of the 100 000 counts. */
    for (i = 0; i < large_batch; i++) {
        d[i].delta = 1000;
    }
    off.next = 2000; /* expected is still "none" */
    apply_conflicts(fx, fx->st, &b);
    assert_int_equal(offset_of(fx, 0), 1000);
    v = visit_all(fx);
    assert_int_equal(v.seen, large_batch);
    assert_int_equal(v.sum, 2 * large_batch);

    /* The right expectation applies all of it, every post once. */
    for (i = 0; i < large_batch; i++) {
        d[i].delta = (int64_t)(i % 7) - 3;
    }
    off.expected = 1000;
    /* Totals come back in the batch's order, also from a batch split in parts (Redis). */
    int64_t *totals = calloc(large_batch, sizeof(*totals));
    assert_non_null(totals);
    b.totals_out = totals;
    apply_ok(fx, fx->st, &b);
    assert_int_equal(offset_of(fx, 0), 2000);
    for (i = 0; i < large_batch; i++) {
        if (totals[i] != 2 + (int64_t)(i % 7) - 3) {
            fail_msg("post %zu: total reported %lld", i, (long long)totals[i]);
        }
    }
    free(totals);
    for (i = 0; i < large_batch; i += 1000) {
        for (j = 0; j < 1000; j++) {
            page_ids[j] = d[i + j].post_id;
            page_lens[j] = d[i + j].post_id_len;
        }
        assert_int_equal(
            hc_store_get(fx->st, page_ids, page_lens, 1000, likes, fx->errstr, sizeof(fx->errstr)),
            HC_OK);
        for (j = 0; j < 1000; j++) {
            if (likes[j] != 2 + (int64_t)((i + j) % 7) - 3) {
                fail_msg("post %zu: %lld likes", i + j, (long long)likes[j]);
            }
        }
    }
    free(ids);
    free(d);
}

/* hc_store_batch_t.on_progress: called on the caller's thread only while hc_store_apply runs,
 * never after it returned; by every backend that sends a batch in several requests or
 * statements (Redis: each part's script call, PostgreSQL: each chunk's upsert, DynamoDB: each
 * write request) at least once for a batch that landed, and the batch lands the same as without
 * it. SQLite commits in one transaction and need not call it. */
typedef struct progress_probe {
    bool in_apply;
    pthread_t caller;
    int calls;
    int outside; /* calls outside hc_store_apply or on another thread */
} progress_probe_t;

static void on_progress_probe(void *opaque)
{
    progress_probe_t *p = opaque;

    p->calls++;
    if (!p->in_apply || !pthread_equal(p->caller, pthread_self())) {
        p->outside++;
    }
}

static void progress_is_reported_only_inside_apply(void **state)
{
    fixture_t *fx = *state;
    size_t n = large_batch < 25000 ? large_batch : 25000; /* Redis: 3 parts */
    hc_store_delta_t *d = calloc(n, sizeof(*d));
    char *ids = calloc(n, 128);
    hc_store_offset_t off = {.partition = 0, .expected = HC_OFFSET_NONE, .next = 10};
    progress_probe_t probe = {.caller = pthread_self()};
    const char *kind = hc_store_kind(fx->st);
    hc_store_batch_t b;
    visit_t v;
    hc_err_t err;
    size_t i;

    assert_non_null(d);
    assert_non_null(ids);
    for (i = 0; i < n; i++) {
        d[i].post_id = ids + i * 128;
        d[i].post_id_len = (size_t)snprintf(ids + i * 128, 128, "%sprogress-%zu", fx->ns, i);
        d[i].delta = 3;
    }
    b = batch_of(fx, &off, 1, d, n);
    b.on_progress = on_progress_probe;
    b.progress_opaque = &probe;
    probe.in_apply = true;
    err = hc_store_apply(fx->st, &b, fx->errstr, sizeof(fx->errstr));
    probe.in_apply = false;
    if (err != HC_OK) {
        fail_msg("apply: %s: %s", hc_err_name(err), fx->errstr);
    }
    assert_int_equal(probe.outside, 0);
    if (strcmp(kind, "sqlite") != 0 && probe.calls < 1) {
        fail_msg("%s: a batch of %zu posts landed without one on_progress call", kind, n);
    }
    v = visit_all(fx);
    assert_int_equal(v.seen, n);
    assert_int_equal(v.sum, 3 * (int64_t)n);
    assert_int_equal(offset_of(fx, 0), 10);

    /* A stale batch changes nothing, whatever it reported; nothing comes after a return. */
    probe.in_apply = true;
    apply_conflicts(fx, fx->st, &b);
    probe.in_apply = false;
    v = visit_all(fx);
    assert_int_equal(v.sum, 3 * (int64_t)n);
    assert_int_equal(probe.outside, 0);
    free(ids);
    free(d);
}

static void post_ids_keep_their_bytes(void **state)
{
    fixture_t *fx = *state;
    /* Valid UTF-8 (what events allow) with bytes that mean something to some backend: glob and
     * LIKE wildcards, quotes, backslash, ':' and '/' (key separators), multi-byte characters,
     * ids that are prefixes of each other. */
    const char *names[] = {
        "caf\xc3\xa9-\xe6\x97\xa5-\xf0\x9f\x91\x8d",
        "glob*?[x]\\",
        "like%_",
        "quote'\"`",
        "sp ace\ttab",
        "colon:slash/",
        "ab",
        "abc",
        "\xe2\x80\xaertl", /* U+202E right-to-left override */
    };
    const size_t n = sizeof(names) / sizeof(names[0]);
    char long_id[HC_POST_ID_MAX + 1];
    hc_store_delta_t d[16];
    hc_store_batch_t b;
    visit_t v;
    size_t i;

    make_long_id(fx, long_id);
    for (i = 0; i < n; i++) {
        d[i] = delta(post(fx, names[i]), (int64_t)i + 1);
    }
    d[n] = (hc_store_delta_t){.post_id = long_id, .post_id_len = HC_POST_ID_MAX, .delta = 100};
    b = batch_of(fx, NULL, 0, d, n + 1);
    apply_ok(fx, fx->st, &b);

    for (i = 0; i < n; i++) {
        assert_int_equal(likes_n(fx->st, d[i].post_id, d[i].post_id_len), (int64_t)i + 1);
    }
    assert_int_equal(likes_n(fx->st, long_id, HC_POST_ID_MAX), 100);
    assert_int_equal(likes_n(fx->st, long_id, HC_POST_ID_MAX - 1), 0);
    /* Not UTF-8 (the id above, cut, may end inside an emoji, depending on the namespace's
     * length): no store can hold such a post, so every store counts it 0, never an error. */
    assert_int_equal(likes_n(fx->st, "\xc3(", 2), 0);
    assert_int_equal(likes_of(fx->st, post(fx, "a")), 0);
    assert_int_equal(likes_of(fx->st, post(fx, "glob")), 0);

    /* foreach hands every id back byte for byte. */
    for (i = 0; i <= n; i++) {
        v = (visit_t){.fx = fx, .want_id = d[i].post_id, .want_len = d[i].post_id_len};
        assert_int_equal(hc_store_foreach(fx->st, visit_row, &v, fx->errstr, sizeof(fx->errstr)),
                         HC_OK);
        assert_int_equal(v.seen, (long)n + 1);
        if (v.want_hits != 1) {
            fail_msg("id %zu seen %ld times by foreach", i, v.want_hits);
        }
    }

    /* One byte past the limit is refused before anything is written. */
    long_id[HC_POST_ID_MAX] = 'L';
    d[0] = (hc_store_delta_t){.post_id = long_id, .post_id_len = HC_POST_ID_MAX + 1, .delta = 1};
    b = batch_of(fx, NULL, 0, d, 1);
    assert_int_equal(hc_store_apply(fx->st, &b, fx->errstr, sizeof(fx->errstr)), HC_ERR_INVALID);
    assert_int_equal(likes_n(fx->st, long_id, HC_POST_ID_MAX), 100);
}

static void init_schema_repeats_and_keeps_data(void **state)
{
    fixture_t *fx = *state;
    const char *kept = post(fx, "kept");
    hc_store_offset_t off = {.partition = 0, .expected = HC_OFFSET_NONE, .next = 4};
    hc_store_delta_t d[] = {delta(kept, 3)};
    hc_store_batch_t b = batch_of(fx, &off, 1, d, 1);
    hc_store_t *other;

    apply_ok(fx, fx->st, &b);
    assert_int_equal(hc_store_init_schema(fx->st, fx->errstr, sizeof(fx->errstr)), HC_OK);
    assert_int_equal(hc_store_init_schema(fx->st, fx->errstr, sizeof(fx->errstr)), HC_OK);
    other = open_store(fx);
    assert_int_equal(hc_store_init_schema(other, fx->errstr, sizeof(fx->errstr)), HC_OK);
    assert_int_equal(likes_of(other, kept), 3);
    assert_int_equal(likes_of(fx->st, kept), 3);
    assert_int_equal(offset_in(other, fx->group, 0), 4);

    /* Both handles keep working after each other's init. */
    off.expected = 4;
    off.next = 6;
    apply_ok(fx, other, &b);
    assert_int_equal(likes_of(fx->st, kept), 6);
    hc_store_close(other);
}

/* A delta that would take a count past int64 is refused whole, as a bad record (not "the store
 * is down") naming the post, instead of wrapping the count or changing its type; the rest then
 * applies, and the count stays an exact integer. Counts at +-8e18 so that Redis (whose script
 * checks in doubles, with that bound) and the SQL stores refuse the same batches.
 * Mutants caught: SQLite without the REAL check (the count becomes 1.8e19, HC_OK); PostgreSQL
 * without the upsert's WHERE (22003: HC_ERR_FATAL); Redis answering -2 as HC_ERR_FATAL; DynamoDB
 * without the update's range condition (HC_OK: a 38-digit number holds 1.7e19). Run
 * last: its counts near 8e18 would otherwise top `top` (they end at 0). */
static void overflowing_delta_is_a_refused_record(void **state)
{
    fixture_t *fx = *state;
    const char *hi = post(fx, "hi");
    const char *lo = post(fx, "lo");
    const char *ok = post(fx, "ok");
    const int64_t big = 8000000000000000000LL;
    hc_store_offset_t off = {.partition = 0, .expected = HC_OFFSET_NONE, .next = 10};
    hc_store_delta_t d1[] = {delta(hi, big), delta(lo, -big)};
    hc_store_delta_t up[] = {delta(ok, 3), delta(hi, INT64_MAX)};
    hc_store_delta_t down[] = {delta(lo, INT64_MIN), delta(ok, 3)};
    hc_store_delta_t rest[] = {delta(ok, 3)};
    hc_store_batch_t bt;
    size_t refused;

    bt = batch_of(fx, &off, 1, d1, 2);
    apply_ok(fx, fx->st, &bt);
    off.expected = 10;
    off.next = 20;
    for (int attempt = 0; attempt < 2; attempt++) { /* a retry fails the same way */
        refused = 99;
        bt = batch_of(fx, &off, 1, up, 2);
        bt.refused_out = &refused;
        assert_int_equal(hc_store_apply(fx->st, &bt, fx->errstr, sizeof(fx->errstr)),
                         HC_ERR_RECORD);
        assert_int_equal(refused, 1);
        assert_non_null(strstr(fx->errstr, hi));
        refused = 99;
        bt = batch_of(fx, &off, 1, down, 2);
        bt.refused_out = &refused;
        assert_int_equal(hc_store_apply(fx->st, &bt, fx->errstr, sizeof(fx->errstr)),
                         HC_ERR_RECORD);
        assert_int_equal(refused, 0);
        /* nothing of either batch was written */
        assert_int_equal(likes_of(fx->st, hi), big);
        assert_int_equal(likes_of(fx->st, lo), -big);
        assert_int_equal(likes_of(fx->st, ok), 0);
        assert_int_equal(offset_of(fx, 0), 10);
    }
    /* without the refused post the batch applies */
    bt = batch_of(fx, &off, 1, rest, 1);
    apply_ok(fx, fx->st, &bt);
    assert_int_equal(likes_of(fx->st, ok), 3);
    assert_int_equal(offset_of(fx, 0), 20);
    /* still exact integers: 8e18 + 123456789 is no double */
    hc_store_delta_t d2[] = {delta(hi, 123456789), delta(lo, -123456789)};
    off.expected = 20;
    off.next = 30;
    bt = batch_of(fx, &off, 1, d2, 2);
    apply_ok(fx, fx->st, &bt);
    assert_int_equal(likes_of(fx->st, hi), big + 123456789);
    assert_int_equal(likes_of(fx->st, lo), -big - 123456789);
    hc_store_delta_t d3[] = {delta(hi, -big - 123456789), delta(lo, big + 123456789)};
    off.expected = 30;
    off.next = 40;
    bt = batch_of(fx, &off, 1, d3, 2);
    apply_ok(fx, fx->st, &bt);
    assert_int_equal(likes_of(fx->st, hi), 0);
    assert_int_equal(likes_of(fx->st, lo), 0);
}

/* ---- clean-up: the run's keys and rows, through each backend's own client ---- */

/* Minimal parse of redis://[[user]:password@]host[:port][/db] for the clean-up connection. */
static redisContext *redis_connect_uri(const char *uri)
{
    char buf[512];
    char *rest;
    char *at;
    char *host;
    char *p;
    char *colon;
    int port = 6379;
    int db = 0;
    redisContext *c;
    redisReply *r;

    snprintf(buf, sizeof(buf), "%s", uri + strlen("redis://"));
    rest = buf;
    at = strrchr(rest, '@');
    host = at != NULL ? at + 1 : rest;
    p = strchr(host, '/');
    if (p != NULL) {
        *p = '\0';
        db = atoi(p + 1);
    }
    p = strchr(host, ':');
    if (p != NULL) {
        *p = '\0';
        port = atoi(p + 1);
    }
    c = redisConnect(host, port);
    if (c == NULL || c->err != 0) {
        redisFree(c);
        return NULL;
    }
    if (at != NULL) {
        *at = '\0';
        colon = strchr(rest, ':');
        if (colon != NULL && colon > rest) {
            *colon = '\0';
            r = redisCommand(c, "AUTH %s %s", rest, colon + 1);
        } else {
            r = redisCommand(c, "AUTH %s", colon != NULL ? colon + 1 : rest);
        }
        freeReplyObject(r);
    }
    r = redisCommand(c, "SELECT %d", db);
    freeReplyObject(r);
    return c;
}

static void redis_delete_matching(redisContext *c, const char *pattern)
{
    char cursor[32] = "0";
    redisReply *r;
    size_t i;

    do {
        r = redisCommand(c, "SCAN %s MATCH %s COUNT 1000", cursor, pattern);
        if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
            freeReplyObject(r);
            return;
        }
        snprintf(cursor, sizeof(cursor), "%s", r->element[0]->str);
        for (i = 0; i < r->element[1]->elements; i++) {
            freeReplyObject(redisCommand(c, "UNLINK %b", r->element[1]->element[i]->str,
                                         r->element[1]->element[i]->len));
        }
        freeReplyObject(r);
    } while (strcmp(cursor, "0") != 0);
}

static void cleanup_redis(void)
{
    redisContext *c = redis_connect_uri(store_uri);
    char pattern[160];

    if (c == NULL) {
        fprintf(stderr, "clean-up: cannot connect to redis\n");
        return;
    }
    /* The run's prefix and groups contain no glob characters. */
    snprintf(pattern, sizeof(pattern), "%s*", redis_prefix);
    redis_delete_matching(c, pattern);
    snprintf(pattern, sizeof(pattern), "hotcount:offsets:hctest-%s-*", run_id);
    redis_delete_matching(c, pattern);
    redisFree(c);
}

static void cleanup_sql(void)
{
    char sql[512];
    size_t run_len = strlen(run_id);

    /* The run id is [0-9a-f-] only: safe to quote inline. */
    snprintf(sql, sizeof(sql),
             "DELETE FROM hotcount_counts WHERE substr(post_id, 1, %zu) = '%s/';"
             "DELETE FROM hotcount_offsets WHERE substr(consumer_group, 1, %zu) = 'hctest-%s-';",
             run_len + 1, run_id, run_len + 8, run_id);
    if (strncmp(store_uri, "sqlite:", 7) == 0) {
        sqlite3 *db = NULL;

        if (sqlite3_open_v2(store_uri + 7, &db, SQLITE_OPEN_READWRITE, NULL) == SQLITE_OK) {
            sqlite3_busy_timeout(db, 5000);
            if (sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK) {
                fprintf(stderr, "clean-up: %s\n", sqlite3_errmsg(db));
            }
        }
        sqlite3_close(db);
    } else {
        PGconn *conn = PQconnectdb(store_uri);
        PGresult *res;

        if (PQstatus(conn) == CONNECTION_OK) {
            res = PQexec(conn, sql);
            if (PQresultStatus(res) != PGRES_COMMAND_OK) {
                fprintf(stderr, "clean-up: %s", PQerrorMessage(conn));
            }
            PQclear(res);
        }
        PQfinish(conn);
    }
}

static int cleanup_run(void **state)
{
    (void)state;
    if (strncmp(store_uri, "redis://", 8) == 0) {
        cleanup_redis();
    } else if (strncmp(store_uri, "dynamodb://", 11) == 0 ||
               strncmp(store_uri, "cassandra://", 12) == 0) {
        /* with-store.sh gave this run tables (a keyspace) of its own. */
    } else {
        cleanup_sql();
    }
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(kind_matches_the_uri, setup, teardown),
        cmocka_unit_test_setup_teardown(apply_sums_deltas, setup, teardown),
        cmocka_unit_test_setup_teardown(apply_moves_offsets, setup, teardown),
        cmocka_unit_test_setup_teardown(stale_batch_changes_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(offset_none_means_no_stored_offset, setup, teardown),
        cmocka_unit_test_setup_teardown(stale_handle_loses, setup, teardown),
        cmocka_unit_test_setup_teardown(racing_handles_count_each_commit_once, setup, teardown),
        cmocka_unit_test_setup_teardown(get_of_unknown_post_is_zero, setup, teardown),
        cmocka_unit_test_setup_teardown(top_orders_by_likes_then_post_id, setup, teardown),
        cmocka_unit_test_setup_teardown(top_is_read_from_an_index, setup, teardown),
        cmocka_unit_test_setup_teardown(foreach_visits_each_row_once, setup, teardown),
        cmocka_unit_test_setup_teardown(offsets_only_batch_moves_offsets, setup, teardown),
        cmocka_unit_test_setup_teardown(large_batch_applies_atomically, setup, teardown),
        cmocka_unit_test_setup_teardown(progress_is_reported_only_inside_apply, setup, teardown),
        cmocka_unit_test_setup_teardown(post_ids_keep_their_bytes, setup, teardown),
        cmocka_unit_test_setup_teardown(init_schema_repeats_and_keeps_data, setup, teardown),
        cmocka_unit_test_setup_teardown(overflowing_delta_is_a_refused_record, setup, teardown),
    };
    struct timespec now;
    unsigned int seed;

    store_uri = getenv("HC_TEST_STORE_URI");
    if (store_uri == NULL || store_uri[0] == '\0') {
        fprintf(stderr, "test_store_contract: HC_TEST_STORE_URI is not set (sqlite:PATH, "
                        "redis://... or postgresql://...); run it through "
                        "tests/integration/with-store.sh. Not skipping: that would be a pass.\n");
        return 1;
    }
    if (getenv("HC_TEST_LARGE_BATCH") != NULL) {
        large_batch = (size_t)strtoul(getenv("HC_TEST_LARGE_BATCH"), NULL, 10);
        if (large_batch == 0 || large_batch % 1000 != 0) {
            fprintf(stderr,
                    "test_store_contract: HC_TEST_LARGE_BATCH must be a multiple of 1000\n");
            return 1;
        }
    }
    /* The Redis store writes with write(2): a server that drops us must not kill the test. */
    signal(SIGPIPE, SIG_IGN);
    clock_gettime(CLOCK_REALTIME, &now);
    seed = (unsigned int)now.tv_nsec ^ (unsigned int)getpid();
    snprintf(run_id, sizeof(run_id), "%x-%lx-%x", (unsigned int)getpid(), (long)now.tv_sec,
             (unsigned int)rand_r(&seed));
    snprintf(redis_prefix, sizeof(redis_prefix), "hctest:%s:", run_id);
    return cmocka_run_group_tests(tests, NULL, cleanup_run);
}
