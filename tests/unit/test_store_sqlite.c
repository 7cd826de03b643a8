/* The SQLite store, driven only through store.h (plus one raw look at the file to check the
 * layout readers script against). Each test gets a fresh database file under /tmp. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka.h needs the four above first; the blank line keeps clang-format from sorting it up. */

#include <cmocka.h>

#include <pthread.h>
#include <sqlite3.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hotcount/store.h"

#define GROUP "hotcount-stage2"
#define TOPIC "likes.partials"

typedef struct fixture {
    char path[64];
    char uri[96];
    char prefix[16];
    hc_config_t cfg;
    hc_store_t *st;
    char errstr[512];
} fixture_t;

/* Built by hand: config.c is not what is under test here. */
static void config_for(hc_config_t *cfg, char *uri, char *prefix)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->store = uri;
    cfg->store_redis_prefix = prefix;
}

static void remove_db(const char *path)
{
    char side[80];

    unlink(path);
    snprintf(side, sizeof(side), "%s-wal", path);
    unlink(side);
    snprintf(side, sizeof(side), "%s-shm", path);
    unlink(side);
    snprintf(side, sizeof(side), "%s-journal", path);
    unlink(side);
}

static int setup(void **state)
{
    fixture_t *fx = calloc(1, sizeof(*fx));
    int fd;

    assert_non_null(fx);
    snprintf(fx->path, sizeof(fx->path), "/tmp/hc_test_store_XXXXXX");
    fd = mkstemp(fx->path);
    assert_true(fd >= 0);
    close(fd); /* SQLite takes an empty file as a new database */
    snprintf(fx->uri, sizeof(fx->uri), "sqlite:%s", fx->path);
    snprintf(fx->prefix, sizeof(fx->prefix), "likes:");
    config_for(&fx->cfg, fx->uri, fx->prefix);
    assert_int_equal(hc_store_open(&fx->cfg, &fx->st, fx->errstr, sizeof(fx->errstr)), HC_OK);
    assert_int_equal(hc_store_init_schema(fx->st, fx->errstr, sizeof(fx->errstr)), HC_OK);
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *fx = *state;

    hc_store_close(fx->st);
    remove_db(fx->path);
    free(fx);
    return 0;
}

static hc_store_delta_t delta(const char *post_id, int64_t d)
{
    hc_store_delta_t out = {.post_id = post_id, .post_id_len = strlen(post_id), .delta = d};
    return out;
}

static hc_store_batch_t batch_of(const hc_store_offset_t *offsets, size_t offset_count,
                                 const hc_store_delta_t *deltas, size_t delta_count)
{
    hc_store_batch_t b = {
        .group = GROUP,
        .topic = TOPIC,
        .offsets = offsets,
        .offset_count = offset_count,
        .deltas = deltas,
        .delta_count = delta_count,
        .now_ms = 1700000000000LL,
    };
    return b;
}

static int64_t likes_of(hc_store_t *st, const char *post_id)
{
    size_t len = strlen(post_id);
    int64_t likes = -12345;

    assert_int_equal(hc_store_get(st, &post_id, &len, 1, &likes, NULL, 0), HC_OK);
    return likes;
}

static int64_t offset_of(hc_store_t *st, int32_t partition)
{
    int64_t off = 0;

    assert_int_equal(hc_store_read_offsets(st, GROUP, TOPIC, &partition, 1, &off, NULL, 0), HC_OK);
    return off;
}

static void apply_ok(fixture_t *fx, const hc_store_batch_t *b)
{
    hc_err_t err = hc_store_apply(fx->st, b, fx->errstr, sizeof(fx->errstr));

    if (err != HC_OK) {
        fail_msg("apply: %s: %s", hc_err_name(err), fx->errstr);
    }
}

static void kind_is_sqlite(void **state)
{
    fixture_t *fx = *state;

    assert_string_equal(hc_store_kind(fx->st), "sqlite");
}

static void apply_sums_deltas(void **state)
{
    fixture_t *fx = *state;
    hc_store_offset_t off = {.partition = 0, .expected = HC_OFFSET_NONE, .next = 10};
    hc_store_delta_t d1[] = {delta("a", 5), delta("b", 1)};
    hc_store_delta_t d2[] = {delta("a", 7), delta("b", -3), delta("c", 2)};
    hc_store_batch_t b = batch_of(&off, 1, d1, 2);

    apply_ok(fx, &b);
    off.expected = 10;
    off.next = 20;
    b = batch_of(&off, 1, d2, 3);
    apply_ok(fx, &b);

    assert_int_equal(likes_of(fx->st, "a"), 12);
    assert_int_equal(likes_of(fx->st, "b"), -2); /* unlikes may outrun likes within a window */
    assert_int_equal(likes_of(fx->st, "c"), 2);
}

static void apply_moves_offsets(void **state)
{
    fixture_t *fx = *state;
    hc_store_offset_t offs[] = {
        {.partition = 0, .expected = HC_OFFSET_NONE, .next = 3},
        {.partition = 5, .expected = HC_OFFSET_NONE, .next = 42},
    };
    hc_store_delta_t d[] = {delta("p", 1)};
    hc_store_batch_t b = batch_of(offs, 2, d, 1);
    int32_t parts[] = {0, 5, 7};
    int64_t got[3] = {0, 0, 0};

    apply_ok(fx, &b);
    assert_int_equal(
        hc_store_read_offsets(fx->st, GROUP, TOPIC, parts, 3, got, fx->errstr, sizeof(fx->errstr)),
        HC_OK);
    assert_int_equal(got[0], 3);
    assert_int_equal(got[1], 42);
    assert_true(got[2] == HC_OFFSET_NONE); /* never written */

    offs[0].expected = 3;
    offs[0].next = 9;
    b = batch_of(offs, 1, d, 1);
    apply_ok(fx, &b);
    assert_int_equal(offset_of(fx->st, 0), 9);
    assert_int_equal(offset_of(fx->st, 5), 42); /* not in the batch: untouched */

    /* Offsets are per group and topic. */
    assert_int_equal(hc_store_read_offsets(fx->st, "other-group", TOPIC, parts, 1, got, NULL, 0),
                     HC_OK);
    assert_true(got[0] == HC_OFFSET_NONE);
    assert_int_equal(hc_store_read_offsets(fx->st, GROUP, "other.topic", parts, 1, got, NULL, 0),
                     HC_OK);
    assert_true(got[0] == HC_OFFSET_NONE);
}

static void batch_conflict_changes_nothing(void **state)
{
    fixture_t *fx = *state;
    hc_store_offset_t offs[] = {
        {.partition = 0, .expected = HC_OFFSET_NONE, .next = 10},
        {.partition = 1, .expected = HC_OFFSET_NONE, .next = 20},
    };
    hc_store_delta_t d1[] = {delta("a", 1), delta("b", 2)};
    hc_store_delta_t d2[] = {delta("a", 100), delta("new", 100)};
    hc_store_batch_t b = batch_of(offs, 2, d1, 2);

    apply_ok(fx, &b);

    /* Partition 0 matches, partition 1 does not: the whole batch must lose. */
    offs[0].expected = 10;
    offs[0].next = 11;
    offs[1].expected = 19;
    offs[1].next = 21;
    b = batch_of(offs, 2, d2, 2);
    assert_int_equal(hc_store_apply(fx->st, &b, fx->errstr, sizeof(fx->errstr)), HC_ERR_CONFLICT);
    assert_non_null(strstr(fx->errstr, "/1"));
    assert_non_null(strstr(fx->errstr, "20"));
    assert_non_null(strstr(fx->errstr, "19"));

    assert_int_equal(likes_of(fx->st, "a"), 1);
    assert_int_equal(likes_of(fx->st, "b"), 2);
    assert_int_equal(likes_of(fx->st, "new"), 0);
    assert_int_equal(offset_of(fx->st, 0), 10);
    assert_int_equal(offset_of(fx->st, 1), 20);

    /* The handle is still usable, and the right expectation wins. */
    offs[1].expected = 20;
    apply_ok(fx, &b);
    assert_int_equal(likes_of(fx->st, "a"), 101);
    assert_int_equal(offset_of(fx->st, 1), 21);
}

static void expected_none_conflicts_when_row_exists(void **state)
{
    fixture_t *fx = *state;
    hc_store_offset_t off = {.partition = 3, .expected = HC_OFFSET_NONE, .next = 5};
    hc_store_delta_t d[] = {delta("x", 1)};
    hc_store_batch_t b = batch_of(&off, 1, d, 1);

    apply_ok(fx, &b); /* no row yet: NONE matches */
    assert_int_equal(offset_of(fx->st, 3), 5);

    off.next = 8;
    assert_int_equal(hc_store_apply(fx->st, &b, fx->errstr, sizeof(fx->errstr)), HC_ERR_CONFLICT);
    assert_non_null(strstr(fx->errstr, "none"));
    assert_int_equal(likes_of(fx->st, "x"), 1);
    assert_int_equal(offset_of(fx->st, 3), 5);
}

/* A failure halfway through the writes (here a trigger refusing one post) must undo the deltas
 * already written and leave the offsets alone: on error nothing changed. */
static void failed_batch_rolls_back_everything(void **state)
{
    fixture_t *fx = *state;
    hc_store_offset_t off = {.partition = 0, .expected = HC_OFFSET_NONE, .next = 5};
    hc_store_delta_t d[] = {delta("a", 1), delta("b", 1), delta("boom", 1)};
    hc_store_batch_t b = batch_of(&off, 1, d, 3);
    sqlite3 *db = NULL;

    assert_int_equal(sqlite3_open(fx->path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db,
                                  "CREATE TRIGGER refuse_boom BEFORE INSERT ON hotcount_counts"
                                  " WHEN new.post_id = 'boom'"
                                  " BEGIN SELECT RAISE(ABORT, 'boom refused'); END",
                                  NULL, NULL, NULL),
                     SQLITE_OK);

    assert_int_equal(hc_store_apply(fx->st, &b, fx->errstr, sizeof(fx->errstr)), HC_ERR_FATAL);
    assert_non_null(strstr(fx->errstr, "boom refused"));
    assert_int_equal(likes_of(fx->st, "a"), 0);
    assert_int_equal(likes_of(fx->st, "b"), 0);
    assert_true(offset_of(fx->st, 0) == HC_OFFSET_NONE);

    /* No transaction was left open: once the cause is gone the same batch applies. */
    assert_int_equal(sqlite3_exec(db, "DROP TRIGGER refuse_boom", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    apply_ok(fx, &b);
    assert_int_equal(likes_of(fx->st, "boom"), 1);
    assert_int_equal(offset_of(fx->st, 0), 5);
}

static void expected_offset_conflicts_when_no_row(void **state)
{
    fixture_t *fx = *state;
    hc_store_offset_t off = {.partition = 0, .expected = 0, .next = 5};
    hc_store_delta_t d[] = {delta("x", 1)};
    hc_store_batch_t b = batch_of(&off, 1, d, 1);

    assert_int_equal(hc_store_apply(fx->st, &b, fx->errstr, sizeof(fx->errstr)), HC_ERR_CONFLICT);
    assert_int_equal(likes_of(fx->st, "x"), 0);
    assert_true(offset_of(fx->st, 0) == HC_OFFSET_NONE);
}

static void second_handle_stale_batch_is_refused(void **state)
{
    fixture_t *fx = *state;
    hc_store_t *stale = NULL;
    hc_store_offset_t off = {.partition = 0, .expected = HC_OFFSET_NONE, .next = 100};
    hc_store_delta_t d_new[] = {delta("hot", 50)};
    hc_store_delta_t d_old[] = {delta("hot", 40)};
    hc_store_batch_t b;
    int32_t part = 0;
    int64_t seen = 0;

    assert_int_equal(hc_store_open(&fx->cfg, &stale, fx->errstr, sizeof(fx->errstr)), HC_OK);
    /* Both instances start from the same stored offset. */
    assert_int_equal(hc_store_read_offsets(stale, GROUP, TOPIC, &part, 1, &seen, NULL, 0), HC_OK);
    assert_true(seen == HC_OFFSET_NONE);

    b = batch_of(&off, 1, d_new, 1);
    apply_ok(fx, &b); /* the current owner commits first */

    off.next = 90;
    b = batch_of(&off, 1, d_old, 1);
    assert_int_equal(hc_store_apply(stale, &b, fx->errstr, sizeof(fx->errstr)), HC_ERR_CONFLICT);

    /* The loser re-reads the offset, as stage 2 does, and sees the winner's. */
    assert_int_equal(hc_store_read_offsets(stale, GROUP, TOPIC, &part, 1, &seen, NULL, 0), HC_OK);
    assert_int_equal(seen, 100);
    assert_int_equal(likes_of(stale, "hot"), 50);
    assert_int_equal(likes_of(fx->st, "hot"), 50);
    hc_store_close(stale);
}

/* Several handles race on one partition, each reading the offset and trying to move it by one.
 * The compare-and-set must let exactly one win per offset: the count equals the final offset. */
#define RACE_THREADS 4
#define RACE_WINS 100

typedef struct racer {
    const hc_config_t *cfg;
    int wins;
    int conflicts;
    hc_err_t failure;
    char errstr[256];
} racer_t;

static void *race(void *arg)
{
    racer_t *r = arg;
    hc_store_t *st = NULL;
    hc_store_offset_t off = {.partition = 0};
    hc_store_delta_t d = {.post_id = "race", .post_id_len = 4, .delta = 1};
    hc_store_batch_t b = batch_of(&off, 1, &d, 1);
    int32_t part = 0;
    hc_err_t err;

    r->failure = hc_store_open(r->cfg, &st, r->errstr, sizeof(r->errstr));
    while (r->failure == HC_OK && r->wins < RACE_WINS) {
        err = hc_store_read_offsets(st, GROUP, TOPIC, &part, 1, &off.expected, r->errstr,
                                    sizeof(r->errstr));
        if (err == HC_OK) {
            off.next = off.expected == HC_OFFSET_NONE ? 1 : off.expected + 1;
            err = hc_store_apply(st, &b, r->errstr, sizeof(r->errstr));
        }
        if (err == HC_OK) {
            r->wins++;
        } else if (err == HC_ERR_CONFLICT) {
            r->conflicts++;
        } else if (err != HC_ERR_TRANSIENT) {
            r->failure = err;
        }
    }
    hc_store_close(st);
    return NULL;
}

static void concurrent_handles_count_each_commit_once(void **state)
{
    fixture_t *fx = *state;
    pthread_t threads[RACE_THREADS];
    racer_t racers[RACE_THREADS];
    int i;

    for (i = 0; i < RACE_THREADS; i++) {
        memset(&racers[i], 0, sizeof(racers[i]));
        racers[i].cfg = &fx->cfg;
        assert_int_equal(pthread_create(&threads[i], NULL, race, &racers[i]), 0);
    }
    for (i = 0; i < RACE_THREADS; i++) {
        assert_int_equal(pthread_join(threads[i], NULL), 0);
        if (racers[i].failure != HC_OK) {
            fail_msg("racer %d: %s: %s", i, hc_err_name(racers[i].failure), racers[i].errstr);
        }
    }
    assert_int_equal(likes_of(fx->st, "race"), RACE_THREADS * RACE_WINS);
    assert_int_equal(offset_of(fx->st, 0), RACE_THREADS * RACE_WINS);
}

static void get_unknown_post_is_zero(void **state)
{
    fixture_t *fx = *state;
    hc_store_delta_t d[] = {delta("known", 4)};
    hc_store_batch_t b = batch_of(NULL, 0, d, 1);
    const char *ids[] = {"unknown", "known", ""};
    size_t lens[] = {7, 5, 0};
    int64_t likes[] = {-1, -1, -1};

    apply_ok(fx, &b);
    assert_int_equal(hc_store_get(fx->st, ids, lens, 3, likes, fx->errstr, sizeof(fx->errstr)),
                     HC_OK);
    assert_int_equal(likes[0], 0);
    assert_int_equal(likes[1], 4);
    assert_int_equal(likes[2], 0);
}

static void top_orders_by_likes_then_post_id(void **state)
{
    fixture_t *fx = *state;
    hc_store_delta_t d[] = {delta("m", 5), delta("b", 9), delta("z", 9),
                            delta("a", 9), delta("q", 1), delta("c", 5)};
    hc_store_batch_t b = batch_of(NULL, 0, d, 6);
    hc_store_row_t rows[10];
    size_t count = 99;
    const char *want[] = {"a", "b", "z", "c", "m", "q"};
    const int64_t want_likes[] = {9, 9, 9, 5, 5, 1};
    size_t i;

    apply_ok(fx, &b);
    assert_int_equal(hc_store_top(fx->st, 4, rows, &count, fx->errstr, sizeof(fx->errstr)), HC_OK);
    assert_int_equal(count, 4);
    for (i = 0; i < count; i++) {
        assert_string_equal(rows[i].post_id, want[i]);
        assert_int_equal(rows[i].post_id_len, 1);
        assert_int_equal(rows[i].likes, want_likes[i]);
    }

    /* More room than rows: all of them, still in order. */
    assert_int_equal(hc_store_top(fx->st, 10, rows, &count, NULL, 0), HC_OK);
    assert_int_equal(count, 6);
    for (i = 0; i < count; i++) {
        assert_string_equal(rows[i].post_id, want[i]);
    }

    assert_int_equal(hc_store_top(fx->st, 0, rows, &count, NULL, 0), HC_OK);
    assert_int_equal(count, 0);
}

typedef struct visit {
    int seen;
    int64_t sum;
    int stop_after; /* 0: never stop */
} visit_t;

static bool visit_row(const char *post_id, size_t post_id_len, int64_t likes, void *opaque)
{
    visit_t *v = opaque;

    assert_non_null(post_id);
    assert_true(post_id_len > 0);
    v->seen++;
    v->sum += likes;
    return v->stop_after == 0 || v->seen < v->stop_after;
}

static void foreach_visits_every_row(void **state)
{
    fixture_t *fx = *state;
    hc_store_delta_t d[50];
    char ids[50][8];
    hc_store_batch_t b;
    visit_t v = {0};
    int i;

    for (i = 0; i < 50; i++) {
        snprintf(ids[i], sizeof(ids[i]), "p%d", i);
        d[i] = delta(ids[i], i + 1);
    }
    b = batch_of(NULL, 0, d, 50);
    apply_ok(fx, &b);

    assert_int_equal(hc_store_foreach(fx->st, visit_row, &v, fx->errstr, sizeof(fx->errstr)),
                     HC_OK);
    assert_int_equal(v.seen, 50);
    assert_int_equal(v.sum, 50 * 51 / 2);

    memset(&v, 0, sizeof(v));
    v.stop_after = 7;
    assert_int_equal(hc_store_foreach(fx->st, visit_row, &v, NULL, 0), HC_OK);
    assert_int_equal(v.seen, 7);

    /* The statement was reset: a second full pass works. */
    memset(&v, 0, sizeof(v));
    assert_int_equal(hc_store_foreach(fx->st, visit_row, &v, NULL, 0), HC_OK);
    assert_int_equal(v.seen, 50);
}

static void init_schema_twice_keeps_data(void **state)
{
    fixture_t *fx = *state;
    hc_store_delta_t d[] = {delta("kept", 3)};
    hc_store_batch_t b = batch_of(NULL, 0, d, 1);
    hc_store_t *other = NULL;

    apply_ok(fx, &b);
    assert_int_equal(hc_store_init_schema(fx->st, fx->errstr, sizeof(fx->errstr)), HC_OK);
    assert_int_equal(hc_store_open(&fx->cfg, &other, fx->errstr, sizeof(fx->errstr)), HC_OK);
    assert_int_equal(hc_store_init_schema(other, fx->errstr, sizeof(fx->errstr)), HC_OK);
    assert_int_equal(likes_of(other, "kept"), 3);
    assert_int_equal(likes_of(fx->st, "kept"), 3);
    hc_store_close(other);
}

static void offsets_only_batch_moves_offsets(void **state)
{
    fixture_t *fx = *state;
    hc_store_offset_t off = {.partition = 2, .expected = HC_OFFSET_NONE, .next = 7};
    hc_store_batch_t b = batch_of(&off, 1, NULL, 0);
    visit_t v = {0};

    apply_ok(fx, &b);
    assert_int_equal(offset_of(fx->st, 2), 7);
    assert_int_equal(hc_store_foreach(fx->st, visit_row, &v, NULL, 0), HC_OK);
    assert_int_equal(v.seen, 0);
}

#define LARGE_BATCH 100000

static void large_batch_applies(void **state)
{
    fixture_t *fx = *state;
    hc_store_delta_t *d = calloc(LARGE_BATCH, sizeof(*d));
    char *ids = calloc(LARGE_BATCH, 16);
    hc_store_offset_t off = {.partition = 0, .expected = HC_OFFSET_NONE, .next = LARGE_BATCH};
    hc_store_batch_t b;
    visit_t v = {0};
    int i;

    assert_non_null(d);
    assert_non_null(ids);
    for (i = 0; i < LARGE_BATCH; i++) {
        d[i].post_id = ids + (size_t)i * 16;
        d[i].post_id_len = (size_t)snprintf(ids + (size_t)i * 16, 16, "post-%d", i);
        d[i].delta = 2;
    }
    b = batch_of(&off, 1, d, LARGE_BATCH);
    apply_ok(fx, &b);
    assert_int_equal(hc_store_foreach(fx->st, visit_row, &v, NULL, 0), HC_OK);
    assert_int_equal(v.seen, LARGE_BATCH);
    assert_int_equal(v.sum, 2 * LARGE_BATCH);
    assert_int_equal(likes_of(fx->st, "post-99999"), 2);
    assert_int_equal(offset_of(fx->st, 0), LARGE_BATCH);
    free(ids);
    free(d);
}

static bool find_long_id(const char *post_id, size_t post_id_len, int64_t likes, void *opaque)
{
    visit_t *v = opaque;

    if (post_id_len == HC_POST_ID_MAX) {
        v->seen++;
        v->sum = likes;
        assert_true(post_id[0] == 'L' && post_id[HC_POST_ID_MAX - 1] == 'L');
    }
    return true;
}

static void post_ids_keep_their_bytes(void **state)
{
    fixture_t *fx = *state;
    /* "é", a CJK character, an emoji: multi-byte UTF-8 must round-trip byte for byte. */
    const char *utf8 = "caf\xc3\xa9-\xe6\x97\xa5-\xf0\x9f\x91\x8d";
    char long_id[HC_POST_ID_MAX + 2];
    hc_store_delta_t d[2];
    hc_store_batch_t b;
    hc_store_row_t rows[2];
    size_t count = 0;
    size_t len = HC_POST_ID_MAX;
    const char *id = long_id;
    int64_t likes = 0;
    visit_t v = {0};

    memset(long_id, 'L', sizeof(long_id));
    long_id[HC_POST_ID_MAX] = '\0';
    d[0] = delta(utf8, 3);
    d[1] = (hc_store_delta_t){.post_id = long_id, .post_id_len = HC_POST_ID_MAX, .delta = 2};
    b = batch_of(NULL, 0, d, 2);
    apply_ok(fx, &b);

    assert_int_equal(likes_of(fx->st, utf8), 3);
    assert_int_equal(hc_store_get(fx->st, &id, &len, 1, &likes, NULL, 0), HC_OK);
    assert_int_equal(likes, 2);

    assert_int_equal(hc_store_top(fx->st, 2, rows, &count, NULL, 0), HC_OK);
    assert_int_equal(count, 2);
    assert_int_equal(rows[0].post_id_len, strlen(utf8));
    assert_memory_equal(rows[0].post_id, utf8, strlen(utf8));
    assert_int_equal(rows[1].post_id_len, HC_POST_ID_MAX);
    assert_memory_equal(rows[1].post_id, long_id, HC_POST_ID_MAX);
    assert_int_equal(rows[1].post_id[HC_POST_ID_MAX], '\0');

    assert_int_equal(hc_store_foreach(fx->st, find_long_id, &v, NULL, 0), HC_OK);
    assert_int_equal(v.seen, 1);
    assert_int_equal(v.sum, 2);

    /* Only the given length counts, not what follows in memory. */
    len = 3;
    assert_int_equal(hc_store_get(fx->st, &utf8, &len, 1, &likes, NULL, 0), HC_OK);
    assert_int_equal(likes, 0);
}

static void bad_batch_is_invalid_and_changes_nothing(void **state)
{
    fixture_t *fx = *state;
    char too_long[HC_POST_ID_MAX + 1];
    hc_store_delta_t d[2];
    hc_store_offset_t offs[2] = {
        {.partition = 0, .expected = HC_OFFSET_NONE, .next = 5},
        {.partition = 0, .expected = HC_OFFSET_NONE, .next = 6},
    };
    hc_store_batch_t b;

    memset(too_long, 'x', sizeof(too_long));
    d[0] = delta("ok", 1);
    d[1] = (hc_store_delta_t){.post_id = too_long, .post_id_len = sizeof(too_long), .delta = 1};
    b = batch_of(offs, 1, d, 2);
    assert_int_equal(hc_store_apply(fx->st, &b, fx->errstr, sizeof(fx->errstr)), HC_ERR_INVALID);

    d[1].post_id_len = 0;
    assert_int_equal(hc_store_apply(fx->st, &b, NULL, 0), HC_ERR_INVALID);

    b = batch_of(offs, 2, d, 1); /* partition 0 twice */
    assert_int_equal(hc_store_apply(fx->st, &b, fx->errstr, sizeof(fx->errstr)), HC_ERR_INVALID);

    offs[1].partition = 1;
    offs[1].expected = 10;
    offs[1].next = 9; /* backwards */
    assert_int_equal(hc_store_apply(fx->st, &b, fx->errstr, sizeof(fx->errstr)), HC_ERR_INVALID);

    b = batch_of(offs, 1, d, 1);
    b.group = NULL;
    assert_int_equal(hc_store_apply(fx->st, &b, fx->errstr, sizeof(fx->errstr)), HC_ERR_INVALID);

    assert_int_equal(likes_of(fx->st, "ok"), 0);
    assert_true(offset_of(fx->st, 0) == HC_OFFSET_NONE);
}

/* Readers (sqlite3, scripts, `verify`) rely on the contract's layout and on WAL. */
static void schema_matches_contract_layout(void **state)
{
    fixture_t *fx = *state;
    hc_store_offset_t off = {.partition = 4, .expected = HC_OFFSET_NONE, .next = 77};
    hc_store_delta_t d[] = {delta("p1", 6)};
    hc_store_batch_t b = batch_of(&off, 1, d, 1);
    sqlite3 *db = NULL;
    sqlite3_stmt *stmt = NULL;

    apply_ok(fx, &b);
    assert_int_equal(sqlite3_open_v2(fx->path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);

    assert_int_equal(sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &stmt, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(stmt), SQLITE_ROW);
    assert_string_equal((const char *)sqlite3_column_text(stmt, 0), "wal");
    sqlite3_finalize(stmt);

    assert_int_equal(sqlite3_prepare_v2(db,
                                        "SELECT post_id, likes, updated_at FROM hotcount_counts",
                                        -1, &stmt, NULL),
                     SQLITE_OK);
    assert_int_equal(sqlite3_step(stmt), SQLITE_ROW);
    assert_string_equal((const char *)sqlite3_column_text(stmt, 0), "p1");
    assert_int_equal(sqlite3_column_type(stmt, 0), SQLITE_TEXT);
    assert_int_equal(sqlite3_column_int64(stmt, 1), 6);
    assert_int_equal(sqlite3_column_type(stmt, 2), SQLITE_INTEGER);
    assert_int_equal(sqlite3_column_int64(stmt, 2), 1700000000000LL); /* ms since the epoch */
    sqlite3_finalize(stmt);

    assert_int_equal(sqlite3_prepare_v2(db,
                                        "SELECT consumer_group, topic, partition, next_offset"
                                        " FROM hotcount_offsets",
                                        -1, &stmt, NULL),
                     SQLITE_OK);
    assert_int_equal(sqlite3_step(stmt), SQLITE_ROW);
    assert_string_equal((const char *)sqlite3_column_text(stmt, 0), GROUP);
    assert_string_equal((const char *)sqlite3_column_text(stmt, 1), TOPIC);
    assert_int_equal(sqlite3_column_int(stmt, 2), 4);
    assert_int_equal(sqlite3_column_int64(stmt, 3), 77);
    sqlite3_finalize(stmt);
    sqlite3_close(db);
}

static void calls_before_init_schema_are_fatal(void **state)
{
    fixture_t *fx = *state;
    char path[64] = "/tmp/hc_test_store_noschema_XXXXXX";
    char uri[96];
    hc_config_t cfg;
    hc_store_t *st = NULL;
    hc_store_batch_t b = batch_of(NULL, 0, NULL, 0);
    int fd = mkstemp(path);

    assert_true(fd >= 0);
    close(fd);
    snprintf(uri, sizeof(uri), "sqlite:%s", path);
    config_for(&cfg, uri, fx->prefix);
    assert_int_equal(hc_store_open(&cfg, &st, fx->errstr, sizeof(fx->errstr)), HC_OK);
    assert_int_equal(hc_store_apply(st, &b, fx->errstr, sizeof(fx->errstr)), HC_ERR_FATAL);
    assert_non_null(strstr(fx->errstr, "hotcount init"));
    /* Once the schema exists the same handle works. */
    assert_int_equal(hc_store_init_schema(st, fx->errstr, sizeof(fx->errstr)), HC_OK);
    assert_int_equal(hc_store_apply(st, &b, fx->errstr, sizeof(fx->errstr)), HC_OK);
    hc_store_close(st);
    remove_db(path);
}

static void memory_database_works(void **state)
{
    fixture_t *fx = *state;
    char uri[] = "sqlite::memory:";
    hc_config_t cfg;
    hc_store_t *st = NULL;
    hc_store_delta_t d[] = {delta("m", 2)};
    hc_store_batch_t b = batch_of(NULL, 0, d, 1);

    config_for(&cfg, uri, fx->prefix);
    assert_int_equal(hc_store_open(&cfg, &st, fx->errstr, sizeof(fx->errstr)), HC_OK);
    assert_int_equal(hc_store_init_schema(st, fx->errstr, sizeof(fx->errstr)), HC_OK);
    assert_int_equal(hc_store_apply(st, &b, fx->errstr, sizeof(fx->errstr)), HC_OK);
    assert_int_equal(likes_of(st, "m"), 2);
    hc_store_close(st);
}

static void open_expect(const char *uri, hc_err_t want, const char *want_in_errstr)
{
    char uri_buf[128];
    char prefix[] = "likes:";
    char errstr[256] = "";
    hc_config_t cfg;
    hc_store_t *st = (hc_store_t *)&cfg; /* must come back NULL */

    snprintf(uri_buf, sizeof(uri_buf), "%s", uri);
    config_for(&cfg, uri_buf, prefix);
    assert_int_equal(hc_store_open(&cfg, &st, errstr, sizeof(errstr)), want);
    assert_null(st);
    if (strstr(errstr, want_in_errstr) == NULL) {
        fail_msg("open(\"%s\"): errstr \"%s\" lacks \"%s\"", uri, errstr, want_in_errstr);
    }
}

static void open_rejects_bad_uris(void **state)
{
    (void)state;
    open_expect("mysql://db/likes", HC_ERR_INVALID, "store");
    open_expect("hotcount.db", HC_ERR_INVALID, "store");
    open_expect("", HC_ERR_INVALID, "store");
    open_expect("sqlite:", HC_ERR_INVALID, "store");
    open_expect("SQLITE:x.db", HC_ERR_INVALID, "store");
    open_expect("sqlite:/nonexistent-dir-hc/x.db", HC_ERR_INVALID, "store");
    /* The password after the scheme never reaches the message. */
    open_expect("rediss://:s3cret@host:6380", HC_ERR_INVALID, "rediss");
    /* A refused connection is an outage to wait out, not a configuration mistake. */
    open_expect("redis://127.0.0.1:1", HC_ERR_TRANSIENT, "127.0.0.1:1");
}

static void open_never_echoes_password(void **state)
{
    char uri[] = "rediss://:s3cret@host:6380";
    char prefix[] = "likes:";
    char errstr[256] = "";
    hc_config_t cfg;
    hc_store_t *st = NULL;

    (void)state;
    config_for(&cfg, uri, prefix);
    assert_int_equal(hc_store_open(&cfg, &st, errstr, sizeof(errstr)), HC_ERR_INVALID);
    assert_null(strstr(errstr, "s3cret"));
}

static void close_accepts_null(void **state)
{
    (void)state;
    hc_store_close(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(kind_is_sqlite, setup, teardown),
        cmocka_unit_test_setup_teardown(apply_sums_deltas, setup, teardown),
        cmocka_unit_test_setup_teardown(apply_moves_offsets, setup, teardown),
        cmocka_unit_test_setup_teardown(batch_conflict_changes_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(expected_none_conflicts_when_row_exists, setup, teardown),
        cmocka_unit_test_setup_teardown(expected_offset_conflicts_when_no_row, setup, teardown),
        cmocka_unit_test_setup_teardown(failed_batch_rolls_back_everything, setup, teardown),
        cmocka_unit_test_setup_teardown(second_handle_stale_batch_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(concurrent_handles_count_each_commit_once, setup, teardown),
        cmocka_unit_test_setup_teardown(get_unknown_post_is_zero, setup, teardown),
        cmocka_unit_test_setup_teardown(top_orders_by_likes_then_post_id, setup, teardown),
        cmocka_unit_test_setup_teardown(foreach_visits_every_row, setup, teardown),
        cmocka_unit_test_setup_teardown(init_schema_twice_keeps_data, setup, teardown),
        cmocka_unit_test_setup_teardown(offsets_only_batch_moves_offsets, setup, teardown),
        cmocka_unit_test_setup_teardown(large_batch_applies, setup, teardown),
        cmocka_unit_test_setup_teardown(post_ids_keep_their_bytes, setup, teardown),
        cmocka_unit_test_setup_teardown(bad_batch_is_invalid_and_changes_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(schema_matches_contract_layout, setup, teardown),
        cmocka_unit_test_setup_teardown(calls_before_init_schema_are_fatal, setup, teardown),
        cmocka_unit_test_setup_teardown(memory_database_works, setup, teardown),
        cmocka_unit_test(open_rejects_bad_uris),
        cmocka_unit_test(open_never_echoes_password),
        cmocka_unit_test(close_accepts_null),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
