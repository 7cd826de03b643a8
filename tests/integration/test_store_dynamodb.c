/* The DynamoDB store's multi-part protocol (docs/DYNAMODB.md), against the DynamoDB-API server
 * named by HC_TEST_STORE_URI (tests/integration/with-store.sh dynamodb: moto's server, an
 * emulator). Unset is a failure, not a skip.
 *
 * The fault seam of src/store/testing/store_testing.h cuts batches into small parts (3 deltas) and
 * breaks into the protocol: a crash between parts, a stale owner whose part goes out after a new
 * owner finished the batch, a part sent twice. Each test checks every count and the offset
 * afterwards: each delta counted exactly once, the offset moved only with the whole batch. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka.h needs the four above first; the blank line keeps clang-format from sorting it up. */

#include <cmocka.h>

#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "hotcount/config.h"
#include "hotcount/store.h"
#include "store_testing.h"

#define TOPIC "likes.partials"
#define NPOSTS 10 /* 4 parts of 3, 3, 3 and 1 */
#define PART 3

static const char *store_uri;
static char run_id[48];
static int test_seq;

typedef struct fixture {
    hc_config_t cfg;
    char group[128];
    char ids[NPOSTS][96];
    hc_store_delta_t d[NPOSTS];
    hc_store_offset_t off;
    hc_store_batch_t b;
    int64_t totals[NPOSTS];
    char errstr[512];
} fixture_t;

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
    char errstr[256];
    hc_store_t *st;
    int n = ++test_seq;
    int i;

    assert_non_null(fx);
    assert_int_equal(hc_config_init(&fx->cfg, hc_store_facts()), HC_OK);
    assert_int_equal(hc_config_set(&fx->cfg, "store", store_uri, errstr, sizeof(errstr)), HC_OK);
    snprintf(fx->group, sizeof(fx->group), "hcddb-%s-%d", run_id, n);
    for (i = 0; i < NPOSTS; i++) {
        snprintf(fx->ids[i], sizeof(fx->ids[i]), "%s/%d/post-%02d", run_id, n, i);
        fx->d[i] = (hc_store_delta_t){fx->ids[i], strlen(fx->ids[i]), i + 1};
    }
    fx->off = (hc_store_offset_t){.partition = 0, .expected = HC_OFFSET_NONE, .next = 10};
    fx->b = (hc_store_batch_t){.group = fx->group,
                               .topic = TOPIC,
                               .offsets = &fx->off,
                               .offset_count = 1,
                               .deltas = fx->d,
                               .delta_count = NPOSTS,
                               .now_ms = 1700000000000LL};
    st = open_store(fx);
    if (hc_store_init_schema(st, fx->errstr, sizeof(fx->errstr)) != HC_OK) {
        fail_msg("init: %s", fx->errstr);
    }
    hc_store_close(st);
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *fx = *state;

    hc_config_fini(&fx->cfg);
    free(fx);
    return 0;
}

/* Every post's count equals its delta times `times`. */
static void assert_counts(fixture_t *fx, hc_store_t *st, int times)
{
    const char *ids[NPOSTS];
    size_t lens[NPOSTS];
    int64_t likes[NPOSTS];
    int i;

    for (i = 0; i < NPOSTS; i++) {
        ids[i] = fx->ids[i];
        lens[i] = strlen(fx->ids[i]);
    }
    assert_int_equal(hc_store_get(st, ids, lens, NPOSTS, likes, fx->errstr, sizeof(fx->errstr)),
                     HC_OK);
    for (i = 0; i < NPOSTS; i++) {
        if (likes[i] != (int64_t)(i + 1) * times) {
            fail_msg("post %d: %lld likes, want %lld", i, (long long)likes[i],
                     (long long)(i + 1) * times);
        }
    }
}

static void peek(fixture_t *fx, hc_store_t *st, int64_t *offset, int64_t *parts_done)
{
    hc_err_t err = hc_store_dynamodb_test_peek(st, fx->group, TOPIC, 0, offset, parts_done,
                                               fx->errstr, sizeof(fx->errstr));

    if (err != HC_OK) {
        fail_msg("peek: %s: %s", hc_err_name(err), fx->errstr);
    }
}

/* The first two parts (posts 0..5) landed, the rest did not, the offset has not moved. */
static void crash_after_two_parts(fixture_t *fx, hc_store_t *st)
{
    hc_ddb_test_hooks_t hooks = {.part_deltas = PART, .crash_after_parts = 2};
    const char *ids[NPOSTS];
    size_t lens[NPOSTS];
    int64_t likes[NPOSTS];
    int64_t offset;
    int64_t done;
    int i;

    hc_store_dynamodb_set_test_hooks(st, &hooks);
    assert_int_equal(hc_store_apply(st, &fx->b, fx->errstr, sizeof(fx->errstr)), HC_ERR_TRANSIENT);
    hc_store_dynamodb_set_test_hooks(st, NULL);
    for (i = 0; i < NPOSTS; i++) {
        ids[i] = fx->ids[i];
        lens[i] = strlen(fx->ids[i]);
    }
    assert_int_equal(hc_store_get(st, ids, lens, NPOSTS, likes, fx->errstr, sizeof(fx->errstr)),
                     HC_OK);
    for (i = 0; i < NPOSTS; i++) {
        assert_int_equal(likes[i], i < 2 * PART ? i + 1 : 0);
    }
    peek(fx, st, &offset, &done);
    assert_true(offset == HC_OFFSET_NONE); /* offsets move only with the whole batch */
    assert_int_equal(done, 2);
}

/* A retry of the same batch by the same kind of owner (same split) finishes it: the parts that
 * landed are not applied again, the totals are those the batch left. */
static void retry_finishes_half_applied_batch(void **state)
{
    fixture_t *fx = *state;
    hc_store_t *dead = open_store(fx);
    hc_store_t *next = open_store(fx);
    hc_ddb_test_hooks_t hooks = {.part_deltas = PART};
    int64_t offset;
    int64_t done;
    int i;

    crash_after_two_parts(fx, dead);
    hc_store_close(dead);

    hc_store_dynamodb_set_test_hooks(next, &hooks);
    fx->b.totals_out = fx->totals;
    if (hc_store_apply(next, &fx->b, fx->errstr, sizeof(fx->errstr)) != HC_OK) {
        fail_msg("apply: %s", fx->errstr);
    }
    for (i = 0; i < NPOSTS; i++) {
        assert_int_equal(fx->totals[i], i + 1);
    }
    assert_counts(fx, next, 1);
    peek(fx, next, &offset, &done);
    assert_int_equal(offset, 10);
    assert_int_equal(done, -1);

    /* The same batch once more: a conflict, not a second count. */
    assert_int_equal(hc_store_apply(next, &fx->b, fx->errstr, sizeof(fx->errstr)), HC_ERR_CONFLICT);
    assert_counts(fx, next, 1);
    hc_store_close(next);
}

/* A new owner that cuts the re-read partials differently (here: the default part size, so a
 * different batch id) finishes the dead owner's batch from the staged parts, then loses its own
 * compare-and-set: stage 2 re-reads the offset and moves on. Exactly once either way. */
static void new_owner_finishes_dead_owners_batch(void **state)
{
    fixture_t *fx = *state;
    hc_store_t *dead = open_store(fx);
    hc_store_t *owner = open_store(fx);
    int32_t part = 0;
    int64_t stored = 0;

    crash_after_two_parts(fx, dead);
    hc_store_close(dead);

    assert_int_equal(hc_store_apply(owner, &fx->b, fx->errstr, sizeof(fx->errstr)),
                     HC_ERR_CONFLICT);
    assert_counts(fx, owner, 1);
    assert_int_equal(hc_store_read_offsets(owner, fx->group, TOPIC, &part, 1, &stored, NULL, 0),
                     HC_OK);
    assert_int_equal(stored, 10);
    hc_store_close(owner);
}

/* read_offsets (stage 2 on every assignment, verify while it polls) leaves a batch in flight
 * alone: it reports the offsets from before the batch (they have not moved) and does not race
 * the owner, whose retry then finishes the batch as its own (HC_OK, not a conflict). */
static void read_offsets_leaves_batch_in_flight(void **state)
{
    fixture_t *fx = *state;
    hc_store_t *owner = open_store(fx);
    hc_store_t *reader = open_store(fx);
    hc_ddb_test_hooks_t hooks = {.part_deltas = PART};
    int32_t part = 0;
    int64_t stored = 0;
    int64_t offset;
    int64_t done;

    crash_after_two_parts(fx, owner);
    assert_int_equal(hc_store_read_offsets(reader, fx->group, TOPIC, &part, 1, &stored, NULL, 0),
                     HC_OK);
    assert_true(stored == HC_OFFSET_NONE);
    peek(fx, reader, &offset, &done);
    assert_int_equal(done, 2);

    hc_store_dynamodb_set_test_hooks(owner, &hooks);
    if (hc_store_apply(owner, &fx->b, fx->errstr, sizeof(fx->errstr)) != HC_OK) {
        fail_msg("apply: %s", fx->errstr);
    }
    assert_counts(fx, reader, 1);
    assert_int_equal(hc_store_read_offsets(reader, fx->group, TOPIC, &part, 1, &stored, NULL, 0),
                     HC_OK);
    assert_int_equal(stored, 10);
    hc_store_close(owner);
    hc_store_close(reader);
}

/* A stale owner (a zombie) is paused before its part 2; meanwhile the new owner applies the
 * same batch and finishes it. The zombie's part then goes out and fails its condition: its
 * apply is a conflict and nothing is counted twice. */
typedef struct zombie_ctx {
    fixture_t *fx;
    hc_store_t *owner;
    bool fired;
    hc_err_t owner_err;
} zombie_ctx_t;

static void let_owner_finish(void *opaque, size_t part)
{
    zombie_ctx_t *z = opaque;

    if (part == 2 && !z->fired) {
        z->fired = true;
        z->owner_err = hc_store_apply(z->owner, &z->fx->b, NULL, 0);
    }
}

static void stale_owners_part_is_refused(void **state)
{
    fixture_t *fx = *state;
    hc_store_t *zombie = open_store(fx);
    zombie_ctx_t z = {.fx = fx, .owner = open_store(fx)};
    hc_ddb_test_hooks_t zhooks = {
        .part_deltas = PART, .before_part = let_owner_finish, .opaque = &z};
    hc_ddb_test_hooks_t ohooks = {.part_deltas = PART};
    int64_t offset;
    int64_t done;

    hc_store_dynamodb_set_test_hooks(zombie, &zhooks);
    hc_store_dynamodb_set_test_hooks(z.owner, &ohooks);
    assert_int_equal(hc_store_apply(zombie, &fx->b, fx->errstr, sizeof(fx->errstr)),
                     HC_ERR_CONFLICT);
    assert_true(z.fired);
    assert_int_equal(z.owner_err, HC_OK);
    assert_counts(fx, z.owner, 1);
    peek(fx, z.owner, &offset, &done);
    assert_int_equal(offset, 10);
    assert_int_equal(done, -1);
    hc_store_close(zombie);
    hc_store_close(z.owner);
}

/* Every part transaction is sent twice (a retry after a lost reply): counted once. */
static void resent_part_counts_once(void **state)
{
    fixture_t *fx = *state;
    hc_store_t *st = open_store(fx);
    hc_ddb_test_hooks_t hooks = {.part_deltas = PART, .resend_parts = true};
    int64_t offset;
    int64_t done;

    hc_store_dynamodb_set_test_hooks(st, &hooks);
    if (hc_store_apply(st, &fx->b, fx->errstr, sizeof(fx->errstr)) != HC_OK) {
        fail_msg("apply: %s", fx->errstr);
    }
    assert_counts(fx, st, 1);
    peek(fx, st, &offset, &done);
    assert_int_equal(offset, 10);
    assert_int_equal(done, -1);

    /* And the next batch of the group goes through as usual. */
    fx->off.expected = 10;
    fx->off.next = 20;
    if (hc_store_apply(st, &fx->b, fx->errstr, sizeof(fx->errstr)) != HC_OK) {
        fail_msg("apply: %s", fx->errstr);
    }
    assert_counts(fx, st, 2);
    hc_store_close(st);
}

/* A stale multi-part batch loses before it changes anything; the right one then applies. */
static void stale_split_batch_changes_nothing(void **state)
{
    fixture_t *fx = *state;
    hc_store_t *st = open_store(fx);
    hc_ddb_test_hooks_t hooks = {.part_deltas = PART};
    int64_t offset;
    int64_t done;

    hc_store_dynamodb_set_test_hooks(st, &hooks);
    fx->off.expected = 5; /* nothing stored: stale */
    assert_int_equal(hc_store_apply(st, &fx->b, fx->errstr, sizeof(fx->errstr)), HC_ERR_CONFLICT);
    assert_counts(fx, st, 0);
    peek(fx, st, &offset, &done);
    assert_true(offset == HC_OFFSET_NONE);
    assert_int_equal(done, -1);
    fx->off.expected = HC_OFFSET_NONE;
    if (hc_store_apply(st, &fx->b, fx->errstr, sizeof(fx->errstr)) != HC_OK) {
        fail_msg("apply: %s", fx->errstr);
    }
    assert_counts(fx, st, 1);
    hc_store_close(st);
}

/* A split batch over several partitions, some first seen, moves each of them; so does the
 * next one, which starts where the first left them. */
static void split_batch_moves_every_partition(void **state)
{
    fixture_t *fx = *state;
    hc_store_t *st = open_store(fx);
    hc_ddb_test_hooks_t hooks = {.part_deltas = PART};
    hc_store_offset_t offs[] = {
        {.partition = 3, .expected = HC_OFFSET_NONE, .next = 7},
        {.partition = 1, .expected = HC_OFFSET_NONE, .next = 4},
        {.partition = 0, .expected = HC_OFFSET_NONE, .next = 0},
    };
    int32_t parts[] = {0, 1, 3};
    int64_t got[3];
    hc_err_t err;

    hc_store_dynamodb_set_test_hooks(st, &hooks);
    fx->b.offsets = offs;
    fx->b.offset_count = 3;
    err = hc_store_apply(st, &fx->b, fx->errstr, sizeof(fx->errstr));
    if (err != HC_OK) {
        fail_msg("apply: %s: %s", hc_err_name(err), fx->errstr);
    }
    offs[0].expected = 7;
    offs[0].next = 9;
    offs[1].expected = 4;
    offs[2].expected = 0;
    offs[2].next = 3;
    err = hc_store_apply(st, &fx->b, fx->errstr, sizeof(fx->errstr));
    if (err != HC_OK) {
        fail_msg("apply: %s: %s", hc_err_name(err), fx->errstr);
    }
    assert_counts(fx, st, 2);
    assert_int_equal(hc_store_read_offsets(st, fx->group, TOPIC, parts, 3, got, NULL, 0), HC_OK);
    assert_int_equal(got[0], 3);
    assert_int_equal(got[1], 4);
    assert_int_equal(got[2], 9);
    hc_store_close(st);
}

/* Sets post i's count outside the group's protocol: a batch without offsets, group or topic (its
 * own marker, "#none"), as another writer of the table would. */
static void write_outside(fixture_t *fx, hc_store_t *st, int i, int64_t delta)
{
    hc_store_delta_t d = {fx->ids[i], strlen(fx->ids[i]), delta};
    hc_store_batch_t b = {.deltas = &d, .delta_count = 1, .now_ms = 1700000000000LL};
    hc_err_t err = hc_store_apply(st, &b, fx->errstr, sizeof(fx->errstr));

    if (err != HC_OK) {
        fail_msg("write outside: %s: %s", hc_err_name(err), fx->errstr);
    }
}

static int64_t likes_of(fixture_t *fx, hc_store_t *st, int i)
{
    const char *id = fx->ids[i];
    size_t len = strlen(id);
    int64_t likes = -1;

    assert_int_equal(hc_store_get(st, &id, &len, 1, &likes, fx->errstr, sizeof(fx->errstr)), HC_OK);
    return likes;
}

/* A split batch with one post whose count would leave int64 is refused whole before anything
 * is written (HC_ERR_RECORD naming that post, no marker, no part landed, the offset unmoved),
 * the same on a retry; without that post the batch applies. Post 7 is in part 2 of 4.
 * Mutant caught: refuse_overflow not called (the batch begins, parts 0 and 1 land, part 2 is
 * refused by its condition: HC_ERR_FATAL, not HC_ERR_RECORD). */
static void split_batch_overflow_is_refused_whole(void **state)
{
    fixture_t *fx = *state;
    hc_store_t *st = open_store(fx);
    hc_ddb_test_hooks_t hooks = {.part_deltas = PART};
    hc_store_delta_t rest[NPOSTS - 1];
    size_t refused;
    int64_t offset;
    int64_t done;
    int i;

    write_outside(fx, st, 7, INT64_MAX - 3); /* its delta is 8 */
    hc_store_dynamodb_set_test_hooks(st, &hooks);
    for (int attempt = 0; attempt < 2; attempt++) {
        refused = 99;
        fx->b.refused_out = &refused;
        assert_int_equal(hc_store_apply(st, &fx->b, fx->errstr, sizeof(fx->errstr)), HC_ERR_RECORD);
        assert_int_equal(refused, 7);
        assert_non_null(strstr(fx->errstr, fx->ids[7]));
        for (i = 0; i < NPOSTS; i++) {
            assert_int_equal(likes_of(fx, st, i), i == 7 ? INT64_MAX - 3 : 0);
        }
        peek(fx, st, &offset, &done);
        assert_true(offset == HC_OFFSET_NONE);
        assert_int_equal(done, -1);
    }
    for (i = 0; i < NPOSTS - 1; i++) {
        rest[i] = fx->d[i < 7 ? i : i + 1];
    }
    fx->b.deltas = rest;
    fx->b.delta_count = NPOSTS - 1;
    fx->b.refused_out = NULL;
    if (hc_store_apply(st, &fx->b, fx->errstr, sizeof(fx->errstr)) != HC_OK) {
        fail_msg("apply: %s", fx->errstr);
    }
    for (i = 0; i < NPOSTS; i++) {
        assert_int_equal(likes_of(fx, st, i), i == 7 ? INT64_MAX - 3 : i + 1);
    }
    peek(fx, st, &offset, &done);
    assert_int_equal(offset, 10);
    hc_store_close(st);
}

/* The count of post 7 is pushed near INT64_MAX by another writer after the batch's check, just
 * before part 2: the part is refused whole by its condition, the apply is HC_ERR_FATAL naming
 * the post, and the batch stays in flight (marker at 2, parts 0 and 1 landed, offset unmoved).
 * Once the count is repaired, the next apply finishes the batch: each delta counted once.
 * Mutant caught: the parts' count updates without the range condition (HC_OK with post 7 at
 * 2^63 + 4, which no reader parses). */
typedef struct outside_ctx {
    fixture_t *fx;
    hc_store_t *other;
    bool fired;
} outside_ctx_t;

static void push_post_7(void *opaque, size_t part)
{
    outside_ctx_t *o = opaque;

    if (part == 2 && !o->fired) {
        o->fired = true;
        write_outside(o->fx, o->other, 7, INT64_MAX - 3);
    }
}

static void overflow_after_begin_stops_the_batch(void **state)
{
    fixture_t *fx = *state;
    hc_store_t *st = open_store(fx);
    outside_ctx_t o = {.fx = fx, .other = open_store(fx)};
    hc_ddb_test_hooks_t hooks = {.part_deltas = PART, .before_part = push_post_7, .opaque = &o};
    int64_t offset;
    int64_t done;
    int i;

    hc_store_dynamodb_set_test_hooks(st, &hooks);
    assert_int_equal(hc_store_apply(st, &fx->b, fx->errstr, sizeof(fx->errstr)), HC_ERR_FATAL);
    assert_true(o.fired);
    assert_non_null(strstr(fx->errstr, fx->ids[7]));
    for (i = 0; i < NPOSTS; i++) {
        assert_int_equal(likes_of(fx, st, i), i == 7 ? INT64_MAX - 3 : i < 2 * PART ? i + 1 : 0);
    }
    peek(fx, st, &offset, &done);
    assert_true(offset == HC_OFFSET_NONE);
    assert_int_equal(done, 2);

    write_outside(fx, o.other, 7, -(INT64_MAX - 3)); /* the repair */
    if (hc_store_apply(st, &fx->b, fx->errstr, sizeof(fx->errstr)) != HC_OK) {
        fail_msg("apply: %s", fx->errstr);
    }
    assert_counts(fx, st, 1);
    peek(fx, st, &offset, &done);
    assert_int_equal(offset, 10);
    assert_int_equal(done, -1);
    hc_store_close(st);
    hc_store_close(o.other);
}

/* Credentials never appear in a message: neither in an unknown-parameter refusal nor in the
 * error of a server that does not answer. */
static void errors_never_show_credentials(void **state)
{
    fixture_t *fx = *state;
    const char *secret = "hc-test-secret-Zq8x";
    char *saved = getenv("AWS_SECRET_ACCESS_KEY") ? strdup(getenv("AWS_SECRET_ACCESS_KEY")) : NULL;
    hc_config_t cfg;
    hc_store_t *st = NULL;
    char errstr[512];
    int32_t part = 0;
    int64_t off;
    hc_err_t err;

    setenv("AWS_SECRET_ACCESS_KEY", secret, 1);
    assert_int_equal(hc_config_init(&cfg, hc_store_facts()), HC_OK);
    assert_int_equal(hc_config_set(&cfg, "store",
                                   "dynamodb://us-east-1/x_?password=hc-test-secret-Zq8x", errstr,
                                   sizeof(errstr)),
                     HC_OK);
    assert_int_equal(hc_store_open(&cfg, &st, errstr, sizeof(errstr)), HC_ERR_INVALID);
    assert_null(strstr(errstr, secret));
    assert_non_null(strstr(errstr, "password")); /* the name, so the user sees what is wrong */

    /* Port 1 on loopback: nothing listens, every attempt is refused. */
    assert_int_equal(hc_config_set(&cfg, "store",
                                   "dynamodb://us-east-1/x_?endpoint=http://127.0.0.1:1", errstr,
                                   sizeof(errstr)),
                     HC_OK);
    assert_int_equal(hc_store_open(&cfg, &st, errstr, sizeof(errstr)), HC_OK);
    err = hc_store_read_offsets(st, fx->group, TOPIC, &part, 1, &off, errstr, sizeof(errstr));
    assert_int_equal(err, HC_ERR_TRANSIENT);
    assert_null(strstr(errstr, secret));
    assert_null(strstr(errstr, "AKIA"));
    hc_store_close(st);
    hc_config_fini(&cfg);
    if (saved != NULL) {
        setenv("AWS_SECRET_ACCESS_KEY", saved, 1);
        free(saved);
    }
}

/* ---- throttling and slow requests ---- */

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void count_progress(void *opaque)
{
    (*(int *)opaque)++;
}

/* A batch of n posts "<run>/<test>/post-00/<tag>-<i>" (delta i + 1) on partition 0, from
 * HC_OFFSET_NONE to 10; the ids live in *ids (free both). */
static hc_store_delta_t *big_batch(fixture_t *fx, size_t n, const char *tag, char **ids,
                                   hc_store_batch_t *b)
{
    hc_store_delta_t *d = calloc(n, sizeof(*d));
    size_t i;

    *ids = calloc(n, 96);
    assert_non_null(d);
    assert_non_null(*ids);
    for (i = 0; i < n; i++) {
        char *id = *ids + i * 96;
        d[i] = (hc_store_delta_t){id, (size_t)snprintf(id, 96, "%s/%s-%03zu", fx->ids[0], tag, i),
                                  (int64_t)i + 1};
    }
    *b = fx->b;
    b->deltas = d;
    b->delta_count = n;
    return d;
}

/* Every post of a big_batch counted `times` times. */
static void assert_big_counts(fixture_t *fx, hc_store_t *st, const hc_store_batch_t *b, int times)
{
    const char **ids = calloc(b->delta_count, sizeof(*ids));
    size_t *lens = calloc(b->delta_count, sizeof(*lens));
    int64_t *likes = calloc(b->delta_count, sizeof(*likes));
    size_t i;

    assert_non_null(ids);
    assert_non_null(lens);
    assert_non_null(likes);
    for (i = 0; i < b->delta_count; i++) {
        ids[i] = b->deltas[i].post_id;
        lens[i] = b->deltas[i].post_id_len;
    }
    assert_int_equal(
        hc_store_get(st, ids, lens, b->delta_count, likes, fx->errstr, sizeof(fx->errstr)), HC_OK);
    for (i = 0; i < b->delta_count; i++) {
        if (likes[i] != b->deltas[i].delta * times) {
            fail_msg("post %zu: %lld likes, want %lld", i, (long long)likes[i],
                     (long long)(b->deltas[i].delta * times));
        }
    }
    free(ids);
    free(lens);
    free(likes);
}

/* tests/harness/fault-proxy.py in throttle mode in front of the emulator, and the store URI that
 * goes through it. */
typedef struct throttler {
    pid_t pid;
    char dir[64];
    char uri[1024];
} throttler_t;

static void throttler_start(throttler_t *t, const char *status, const char *type,
                            const char *fraction, const char *delay_ms, const char *seed)
{
    const char *script = getenv("HC_FAULT_PROXY");
    char dflt[1024];
    char upstream[256];
    char port_file[128];
    char state_file[128];
    const char *ep = strstr(store_uri, "endpoint=http://");
    size_t up_len;
    char port[16] = "";
    FILE *f;
    int i;

    if (script == NULL || script[0] == '\0') {
        /* beside this file (CMake compiles it by its full path): tests/harness/ */
        const char *slash = strrchr(__FILE__, '/');
        snprintf(dflt, sizeof(dflt), "%.*s/../harness/fault-proxy.py",
                 slash != NULL ? (int)(slash - __FILE__) : 1, slash != NULL ? __FILE__ : ".");
        script = dflt;
    }
    assert_non_null(ep);
    ep += strlen("endpoint=http://");
    up_len = strcspn(ep, "&/");
    snprintf(upstream, sizeof(upstream), "%.*s", (int)up_len, ep);
    snprintf(t->dir, sizeof(t->dir), "/tmp/hcddb-proxy-XXXXXX");
    assert_non_null(mkdtemp(t->dir));
    snprintf(port_file, sizeof(port_file), "%s/port", t->dir);
    snprintf(state_file, sizeof(state_file), "%s/state.json", t->dir);
    t->pid = fork();
    assert_true(t->pid >= 0);
    if (t->pid == 0) {
        /* never outlives the test, whatever ends it; its log beside its state */
        char log[160];
        snprintf(log, sizeof(log), "%s/proxy.log", t->dir);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (freopen("/dev/null", "w", stdout) == NULL || freopen(log, "w", stderr) == NULL) {
            _exit(126);
        }
        execlp("python3", "python3", script, "--upstream", upstream, "--port-file", port_file,
               "--state-file", state_file, "--lifetime", "600", "--mode", "throttle", "--throttle",
               fraction, "--delay-ms", delay_ms, "--seed", seed, "--throttle-status", status,
               "--throttle-type", type, (char *)NULL);
        _exit(127);
    }
    for (i = 0; i < 300 && port[0] == '\0'; i++) {
        f = fopen(port_file, "r");
        if (f != NULL) {
            if (fgets(port, sizeof(port), f) == NULL) {
                port[0] = '\0';
            }
            fclose(f);
        }
        if (port[0] == '\0') {
            usleep(20000);
        }
    }
    if (port[0] == '\0') {
        fail_msg("fault-proxy.py (%s) did not start", script);
    }
    port[strcspn(port, "\n")] = '\0';
    snprintf(t->uri, sizeof(t->uri), "%.*shttp://127.0.0.1:%s%s",
             (int)(ep - strlen("http://") - store_uri), store_uri, port, ep + up_len);
}

/* A counter of the proxy's state file ("throttled", "writes", ...). */
static long throttler_total(const throttler_t *t, const char *name)
{
    char path[128];
    char buf[4096];
    char key[64];
    const char *at;
    size_t n;
    FILE *f;

    snprintf(path, sizeof(path), "%s/state.json", t->dir);
    f = fopen(path, "r");
    assert_non_null(f);
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    snprintf(key, sizeof(key), "\"%s\": ", name);
    at = strstr(buf, key);
    assert_non_null(at);
    return strtol(at + strlen(key), NULL, 10);
}

static void throttler_stop(throttler_t *t)
{
    char cmd[160];
    int status;

    kill(t->pid, SIGTERM);
    waitpid(t->pid, &status, 0);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", t->dir);
    if (system(cmd) != 0) {
        fprintf(stderr, "could not remove %s\n", t->dir);
    }
}

/* Through the proxy answering a share of every write request as throttled (each kind of "not
 * now" DynamoDB sends: the throughput and request-rate errors at 400, a 5xx whose type the store
 * does not know) and holding the others: a split batch of 10 parts completes, every post counted
 * once, the offset moved once, on_progress called once per write that got through (the staged
 * BatchWriteItem, the begin, 10 parts, the finish), and a small batch (one transaction) once.
 * Mutants caught: ProvisionedThroughputExceededException, ThrottlingException or
 * RequestLimitExceeded left out of retryable_type, or the 5xx rule (HC_ERR_FATAL); no
 * on_progress, or one for a throttled attempt (the count). */
static void throttled_writes_are_retried_and_count_once(void **state)
{
    static const struct {
        const char *status;
        const char *type;
    } kinds[] = {
        {"400", "ProvisionedThroughputExceededException"},
        {"400", "ThrottlingException"},
        {"400", "RequestLimitExceeded"},
        {"500", "InternalFailure"},
        {"503", "ServiceUnavailable"},
    };
    fixture_t *fx = *state;
    hc_ddb_test_hooks_t hooks = {.part_deltas = PART};
    size_t k;

    for (k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
        throttler_t t;
        hc_config_t cfg;
        hc_store_t *st = NULL;
        hc_store_t *direct = open_store(fx);
        hc_store_batch_t b;
        hc_store_offset_t off = {.partition = 0, .expected = HC_OFFSET_NONE, .next = 10};
        char group[160];
        char errstr[256];
        char *ids;
        hc_store_delta_t *d;
        int progress = 0;
        int64_t offset;
        int64_t done;
        hc_err_t err;

        throttler_start(&t, kinds[k].status, kinds[k].type, "0.3", "20", "7");
        assert_int_equal(hc_config_init(&cfg, hc_store_facts()), HC_OK);
        assert_int_equal(hc_config_set(&cfg, "store", t.uri, errstr, sizeof(errstr)), HC_OK);
        err = hc_store_open(&cfg, &st, fx->errstr, sizeof(fx->errstr));
        if (err != HC_OK) {
            fail_msg("open through the proxy: %s", fx->errstr);
        }
        hc_store_dynamodb_set_test_hooks(st, &hooks);
        snprintf(group, sizeof(group), "%s-%zu", fx->group, k);
        char tag[16];
        snprintf(tag, sizeof(tag), "kind%zu", k); /* this kind's posts */
        d = big_batch(fx, 10 * PART, tag, &ids, &b);
        b.group = group;
        b.offsets = &off;
        b.on_progress = count_progress;
        b.progress_opaque = &progress;
        err = hc_store_apply(st, &b, fx->errstr, sizeof(fx->errstr));
        if (err != HC_OK) {
            fail_msg("%s %s: apply: %s: %s", kinds[k].status, kinds[k].type, hc_err_name(err),
                     fx->errstr);
        }
        assert_int_equal(progress, 1 + 1 + 10 + 1);
        assert_big_counts(fx, direct, &b, 1);
        assert_int_equal(hc_store_dynamodb_test_peek(direct, group, TOPIC, 0, &offset, &done,
                                                     fx->errstr, sizeof(fx->errstr)),
                         HC_OK);
        assert_int_equal(offset, 10);
        assert_int_equal(done, -1);

        /* One transaction: one call. Then the same batch again is a conflict, not a count. */
        progress = 0;
        off = (hc_store_offset_t){.partition = 0, .expected = 10, .next = 11};
        b.delta_count = 2;
        err = hc_store_apply(st, &b, fx->errstr, sizeof(fx->errstr));
        if (err != HC_OK) {
            fail_msg("%s %s: small apply: %s: %s", kinds[k].status, kinds[k].type, hc_err_name(err),
                     fx->errstr);
        }
        assert_int_equal(progress, 1);
        assert_int_equal(hc_store_apply(st, &b, fx->errstr, sizeof(fx->errstr)), HC_ERR_CONFLICT);
        b.delta_count = 10 * PART;
        for (size_t i = 0; i < 2; i++) {
            d[i].delta *= 2; /* what the two posts now hold */
        }
        assert_big_counts(fx, direct, &b, 1);
        hc_store_close(st);
        hc_store_close(direct);
        hc_config_fini(&cfg);
        if (throttler_total(&t, "throttled") < 1) {
            fail_msg("%s %s: the proxy throttled nothing (%ld writes)", kinds[k].status,
                     kinds[k].type, throttler_total(&t, "writes"));
        }
        throttler_stop(&t);
        free(d);
        free(ids);
    }
}

/* A split batch of 20 parts whose every part is slow (250 ms before it goes out) against a
 * store_batch_ms of 2 s: each apply ends by then with HC_ERR_TRANSIENT where it stands, and the
 * next applies of the same batch go on from its marker until it lands: each post counted once,
 * the offset moved once, no part written twice (on_progress at most once per request).
 * Mutant caught: no deadline across the requests (the first apply takes 5 s and lands). */
/* A store that answers every part, slowly. */
static void sleep_before_part(void *opaque, size_t part)
{
    (void)opaque;
    (void)part;
    usleep(250000);
}

static void slow_split_batch_keeps_to_store_batch_ms(void **state)
{
    fixture_t *fx = *state;
    hc_ddb_test_hooks_t hooks = {.part_deltas = PART, .before_part = sleep_before_part};
    hc_store_t *st;
    hc_store_batch_t b;
    char *ids;
    hc_store_delta_t *d;
    int progress = 0;
    int applies = 0;
    int64_t offset;
    int64_t done;
    hc_err_t err = HC_ERR_TRANSIENT;

    fx->cfg.timeouts.store_batch_ms = 2000;
    st = open_store(fx);
    hc_store_dynamodb_set_test_hooks(st, &hooks);
    d = big_batch(fx, 20 * PART, "slow", &ids, &b);
    b.on_progress = count_progress;
    b.progress_opaque = &progress;
    while (err == HC_ERR_TRANSIENT && applies < 20) {
        double t0 = now_s();
        err = hc_store_apply(st, &b, fx->errstr, sizeof(fx->errstr));
        double took = now_s() - t0;
        applies++;
        if (took > 2.0 + 1.5) {
            fail_msg("apply %d took %.2f s, past store_batch_ms (2 s)", applies, took);
        }
        if (applies == 1 && err != HC_ERR_TRANSIENT) {
            fail_msg("the first apply: %s (%s), want HC_ERR_TRANSIENT at store_batch_ms",
                     hc_err_name(err), fx->errstr);
        }
        if (err == HC_ERR_TRANSIENT) {
            assert_non_null(strstr(fx->errstr, "store_batch_ms"));
        }
    }
    if (err != HC_OK) {
        fail_msg("apply %d: %s: %s", applies, hc_err_name(err), fx->errstr);
    }
    assert_true(applies >= 3);
    assert_true(progress >= 20 && progress <= 1 + 1 + 20 + 1);
    assert_big_counts(fx, st, &b, 1);
    peek(fx, st, &offset, &done);
    assert_int_equal(offset, 10);
    assert_int_equal(done, -1);
    hc_store_close(st);
    free(d);
    free(ids);
}

/* Every request 500 ms slow (the proxy, throttling nothing) against a store_batch_ms of 2 s: the
 * steps before the begin (the marker, the offsets, the counts' check, two staging requests)
 * take longer than one apply may (at least 2.5 s), so the next apply of the same batch goes on
 * where the last stopped instead of starting over, while one request alone fits in an apply even
 * on a loaded machine (at 200 ms and 1 s the emulator's own time under load made single requests
 * overrun, and no apply progressed: a full test run of 2026-12-05 at load 5). Once begun, the
 * parts go on from the marker. The batch lands whole, counted once, and no write request is sent
 * twice except one cut in flight by an apply's deadline.
 * Mutant caught: the resume_* bookkeeping left out (every apply starts over and none begins). */
static void unbegun_batch_resumes_where_it_stopped(void **state)
{
    fixture_t *fx = *state;
    hc_ddb_test_hooks_t hooks = {.part_deltas = PART};
    throttler_t t;
    hc_config_t cfg;
    hc_store_t *st = NULL;
    hc_store_t *direct = open_store(fx);
    hc_store_batch_t b;
    char errstr[256];
    char *ids;
    hc_store_delta_t *d;
    int progress = 0;
    int applies = 0;
    int64_t offset;
    int64_t done;
    hc_err_t err = HC_ERR_TRANSIENT;

    throttler_start(&t, "400", "ProvisionedThroughputExceededException", "0", "500", "1");
    assert_int_equal(hc_config_init(&cfg, hc_store_facts()), HC_OK);
    assert_int_equal(hc_config_set(&cfg, "store", t.uri, errstr, sizeof(errstr)), HC_OK);
    cfg.timeouts.store_batch_ms = 2000;
    if (hc_store_open(&cfg, &st, fx->errstr, sizeof(fx->errstr)) != HC_OK) {
        fail_msg("open through the proxy: %s", fx->errstr);
    }
    hc_store_dynamodb_set_test_hooks(st, &hooks);
    d = big_batch(fx, 30 * PART, "resume", &ids, &b); /* 30 parts: two staging requests */
    b.on_progress = count_progress;
    b.progress_opaque = &progress;
    while (err == HC_ERR_TRANSIENT && applies < 80) {
        err = hc_store_apply(st, &b, fx->errstr, sizeof(fx->errstr));
        applies++;
        if (applies == 1) {
            assert_int_equal(err, HC_ERR_TRANSIENT);
            peek(fx, direct, &offset, &done);
            assert_int_equal(done, -1); /* not begun within the first apply */
        }
    }
    if (err != HC_OK) {
        fail_msg("apply %d: %s: %s", applies, hc_err_name(err), fx->errstr);
    }
    assert_big_counts(fx, direct, &b, 1);
    peek(fx, direct, &offset, &done);
    assert_int_equal(offset, 10);
    assert_int_equal(done, -1);
    assert_true(progress <= 2 + 1 + 30 + 1);
    /* each apply that ran out of time may have cut one write in flight, sent again by the next
     * (a resent write counts once: resent_part_counts_once); nothing else is sent twice */
    assert_true(throttler_total(&t, "writes") <= 2 + 1 + 30 + 1 + (applies - 1));
    hc_store_close(st);
    hc_store_close(direct);
    hc_config_fini(&cfg);
    throttler_stop(&t);
    free(d);
    free(ids);
}

/* top Scans, at most top_pages pages (DYNAMODB.md, "top"): exact while the table fits them, and
 * a table that needs more is refused, never ranked from a part. Tables of its own (the run's
 * prefix + "top_", dropped with the run's), 3 items a Scan page (the seam's Limit) and
 * top_pages=2: 5 posts fit, 7 do not (DynamoDB may say more follows after a full last page, which
 * would refuse 6; the emulator does not). Mutant: no page bound (7 posts answer HC_OK). */
static void top_scan_is_bounded(void **state)
{
    fixture_t *fx = *state;
    const char *q = strchr(store_uri, '?');
    char uri[1024];
    char errstr[256];
    hc_config_t cfg;
    hc_store_t *st = NULL;
    hc_ddb_test_hooks_t hooks = {.scan_page_items = 3};
    hc_store_row_t rows[3];
    size_t count = 0;
    int i;

    assert_non_null(q);
    snprintf(uri, sizeof(uri), "%.*stop_%s&top_pages=2", (int)(q - store_uri), store_uri, q);
    assert_int_equal(hc_config_init(&cfg, hc_store_facts()), HC_OK);
    assert_int_equal(hc_config_set(&cfg, "store", uri, errstr, sizeof(errstr)), HC_OK);
    assert_int_equal(hc_store_open(&cfg, &st, fx->errstr, sizeof(fx->errstr)), HC_OK);
    assert_int_equal(hc_store_init_schema(st, fx->errstr, sizeof(fx->errstr)), HC_OK);
    hc_store_dynamodb_set_test_hooks(st, &hooks);
    fx->b.delta_count = 5;
    fx->b.offset_count = 0;
    assert_int_equal(hc_store_apply(st, &fx->b, fx->errstr, sizeof(fx->errstr)), HC_OK);
    assert_int_equal(hc_store_top(st, 3, rows, &count, fx->errstr, sizeof(fx->errstr)), HC_OK);
    assert_int_equal(count, 3);
    for (i = 0; i < 3; i++) {
        assert_string_equal(rows[i].post_id, fx->ids[4 - i]);
        assert_int_equal(rows[i].likes, 5 - i);
    }

    fx->b.deltas = &fx->d[5];
    fx->b.delta_count = 2;
    assert_int_equal(hc_store_apply(st, &fx->b, fx->errstr, sizeof(fx->errstr)), HC_OK);
    assert_int_equal(hc_store_top(st, 3, rows, &count, fx->errstr, sizeof(fx->errstr)),
                     HC_ERR_FATAL);
    assert_non_null(strstr(fx->errstr, "top_pages"));

    hc_store_dynamodb_set_test_hooks(st, NULL);
    hc_store_close(st);
    hc_config_fini(&cfg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(retry_finishes_half_applied_batch, setup, teardown),
        cmocka_unit_test_setup_teardown(new_owner_finishes_dead_owners_batch, setup, teardown),
        cmocka_unit_test_setup_teardown(read_offsets_leaves_batch_in_flight, setup, teardown),
        cmocka_unit_test_setup_teardown(stale_owners_part_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(resent_part_counts_once, setup, teardown),
        cmocka_unit_test_setup_teardown(stale_split_batch_changes_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(split_batch_moves_every_partition, setup, teardown),
        cmocka_unit_test_setup_teardown(split_batch_overflow_is_refused_whole, setup, teardown),
        cmocka_unit_test_setup_teardown(overflow_after_begin_stops_the_batch, setup, teardown),
        cmocka_unit_test_setup_teardown(errors_never_show_credentials, setup, teardown),
        cmocka_unit_test_setup_teardown(throttled_writes_are_retried_and_count_once, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(slow_split_batch_keeps_to_store_batch_ms, setup, teardown),
        cmocka_unit_test_setup_teardown(unbegun_batch_resumes_where_it_stopped, setup, teardown),
        cmocka_unit_test_setup_teardown(top_scan_is_bounded, setup, teardown),
    };
    struct timespec now;

    store_uri = getenv("HC_TEST_STORE_URI");
    if (store_uri == NULL || strncmp(store_uri, "dynamodb://", 11) != 0) {
        fprintf(stderr, "test_store_dynamodb: HC_TEST_STORE_URI must name a dynamodb:// store; "
                        "run it through tests/integration/with-store.sh dynamodb. Not "
                        "skipping: that would be a pass.\n");
        return 1;
    }
    clock_gettime(CLOCK_REALTIME, &now);
    snprintf(run_id, sizeof(run_id), "%x-%lx-%lx", (unsigned int)getpid(), (long)now.tv_sec,
             (long)now.tv_nsec);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
