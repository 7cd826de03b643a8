/* The Cassandra store's own tests (docs/CASSANDRA.md, "Tests"), against a real node, through the
 * backend's fault seam (src/store/testing/cassandra_testing.h): a writer killed after every
 * request of an apply, a zombie writer paused before its claim and inside its count writes, a
 * reader polling posts while a writer is paused mid-batch, the node hung (SIGSTOP) before a
 * claim and inside count writes, the node killed (kill -9) inside count writes and restarted,
 * and a store that forgets (identity). HC_TEST_CASSANDRA_CTL pauses, kills and starts the node.
 * HC_TEST_STORE_URI names a keyspace of this run's own (tests/integration/with-store.sh
 * cassandra); HC_TEST_CASSANDRA_CONTACT the node, for the direct CQL the forgetting test needs.
 * Unset is a failure, not a skip. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka.h needs the four above first; the blank line keeps clang-format from sorting it up. */

#include <cmocka.h>

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cassandra_testing.h"
#include "hc_cql.h"
#include "hotcount/config.h"
#include "hotcount/store.h"

#define TOPIC "likes.partials"
#define POSTS 6

static const char *store_uri;
static char run_id[48];
static int test_seq;

typedef struct fixture {
    hc_config_t cfg;
    char group[96];
    char ids[POSTS][64];
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
    int n = ++test_seq;
    hc_store_t *st;

    assert_non_null(fx);
    assert_int_equal(hc_config_init(&fx->cfg, hc_store_facts()), HC_OK);
    assert_int_equal(hc_config_set(&fx->cfg, "store", store_uri, errstr, sizeof(errstr)), HC_OK);
    snprintf(fx->group, sizeof(fx->group), "hct-%s-%d", run_id, n);
    for (int i = 0; i < POSTS; i++) {
        snprintf(fx->ids[i], sizeof(fx->ids[i]), "%s/%d/p%d", run_id, n, i);
    }
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

/* Round r's batch: every post gets r + i + 1 (i its index), partitions 0 and 1 move from
 * 10 * r to 10 * (r + 1) (HC_OFFSET_NONE for round 0). */
typedef struct round {
    hc_store_offset_t off[2];
    hc_store_delta_t d[POSTS];
    hc_store_batch_t b;
} round_t;

static void round_of(fixture_t *fx, int r, round_t *rd)
{
    for (int p = 0; p < 2; p++) {
        rd->off[p] = (hc_store_offset_t){
            .partition = p, .expected = r == 0 ? HC_OFFSET_NONE : 10 * r, .next = 10 * (r + 1)};
    }
    for (int i = 0; i < POSTS; i++) {
        rd->d[i] = (hc_store_delta_t){
            .post_id = fx->ids[i], .post_id_len = strlen(fx->ids[i]), .delta = r + i + 1};
    }
    rd->b = (hc_store_batch_t){.group = fx->group,
                               .topic = TOPIC,
                               .offsets = rd->off,
                               .offset_count = 2,
                               .deltas = rd->d,
                               .delta_count = POSTS,
                               .now_ms = 1700000000000LL};
}

/* What post i holds after rounds 0..r-1. */
static int64_t want_after(int rounds, int i)
{
    int64_t sum = 0;

    for (int r = 0; r < rounds; r++) {
        sum += r + i + 1;
    }
    return sum;
}

static void check_counts(fixture_t *fx, hc_store_t *st, int rounds)
{
    for (int i = 0; i < POSTS; i++) {
        const char *id = fx->ids[i];
        size_t len = strlen(id);
        int64_t likes = -1;

        assert_int_equal(hc_store_get(st, &id, &len, 1, &likes, fx->errstr, sizeof(fx->errstr)),
                         HC_OK);
        if (likes != want_after(rounds, i)) {
            fail_msg("post %d after %d rounds: %lld, want %lld", i, rounds, (long long)likes,
                     (long long)want_after(rounds, i));
        }
    }
}

static void read_offsets(fixture_t *fx, hc_store_t *st, int64_t out[2])
{
    const int32_t parts[2] = {0, 1};
    hc_err_t err =
        hc_store_read_offsets(st, fx->group, TOPIC, parts, 2, out, fx->errstr, sizeof(fx->errstr));

    if (err != HC_OK) {
        fail_msg("read_offsets: %s: %s", hc_err_name(err), fx->errstr);
    }
}

/* ---- kill after every request ---- */

typedef struct stop_at {
    size_t at;     /* stop after this request group (0: never) */
    size_t seen;   /* groups seen */
    bool in_child; /* _exit instead of returning false */
} stop_at_t;

static bool stop_after(void *opaque, hc_cass_step_t step, size_t k)
{
    stop_at_t *s = opaque;

    (void)step;
    s->seen = k;
    if (s->at != 0 && k == s->at) {
        if (s->in_child) {
            _exit(0); /* a kill -9 between two requests: nothing after this one is sent */
        }
        return false;
    }
    return true;
}

/* For every k, a forked writer dies right after request group k of round r's apply (group size
 * 1: every base read, staged part and count write is its own group). The next writer reads the
 * offsets (recovering an open claim), applies the round again when the offsets did not move,
 * and every post is counted exactly once per round; the offsets are never between.
 * Mutant: recover() skipped in cass_settle (an open claim left as it is): the counts of a
 * writer killed inside R4 stay short and this fails. */
static void killed_after_every_request_counts_once(void **state)
{
    fixture_t *fx = *state;
    hc_cass_test_hooks_t hooks = {.group_size = 1, .after = stop_after};
    stop_at_t probe = {0};
    round_t rd;
    hc_store_t *st;
    int64_t off[2];
    int r = 0;

    /* Round 0 in full, counting its request groups. */
    st = open_store(fx);
    hooks.opaque = &probe;
    hc_store_cassandra_set_test_hooks(st, &hooks);
    round_of(fx, r, &rd);
    assert_int_equal(hc_store_apply(st, &rd.b, fx->errstr, sizeof(fx->errstr)), HC_OK);
    hc_store_close(st);
    r++;
    size_t groups = probe.seen;
    assert_true(groups >= 2 * POSTS + 3); /* R1 x6, R2, R3, R4 x6, R5 (+R0) */

    for (size_t k = 1; k <= groups; k++, r++) {
        pid_t pid = fork();

        assert_true(pid >= 0);
        if (pid == 0) {
            stop_at_t s = {.at = k, .in_child = true};
            hc_cass_test_hooks_t h = {.group_size = 1, .after = stop_after, .opaque = &s};
            hc_store_t *cst = NULL;
            char errstr[256];

            if (hc_store_open(&fx->cfg, &cst, errstr, sizeof(errstr)) != HC_OK) {
                _exit(3);
            }
            hc_store_cassandra_set_test_hooks(cst, &h);
            round_of(fx, r, &rd);
            hc_store_apply(cst, &rd.b, errstr, sizeof(errstr));
            _exit(2); /* did not stop where asked */
        }
        int status = 0;
        assert_int_equal(waitpid(pid, &status, 0), pid);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fail_msg("round %d: the writer to die after request %zu exited with %d", r, k,
                     WIFEXITED(status) ? WEXITSTATUS(status) : -1);
        }
        st = open_store(fx);
        read_offsets(fx, st, off);
        if (off[0] != off[1] || (off[0] != 10 * r && off[0] != 10 * (r + 1))) {
            fail_msg("round %d, killed after request %zu: offsets %lld, %lld", r, k,
                     (long long)off[0], (long long)off[1]);
        }
        if (off[0] == 10 * r) { /* the claim did not land: stage 2 applies the round again */
            round_of(fx, r, &rd);
            if (hc_store_apply(st, &rd.b, fx->errstr, sizeof(fx->errstr)) != HC_OK) {
                fail_msg("round %d again: %s", r, fx->errstr);
            }
        }
        check_counts(fx, st, r + 1);
        hc_store_close(st);
    }
}

/* A claim of many staged parts (3000 posts of ~63-byte ids: about 220 KB, 7 parts of at most
 * 32 KiB) left open right after its claim: another handle's read_offsets completes every post
 * from the parts. Mutant: a part boundary off by one entry in pack_parts (an entry split across
 * two parts, or dropped): the recovery fails its posts-count check or a count is wrong. */
static bool stop_after_claim(void *opaque, hc_cass_step_t step, size_t k)
{
    (void)opaque;
    (void)k;
    return step != HC_CASS_R3_CLAIM;
}

static void open_claim_of_many_parts_is_recovered(void **state)
{
    enum { N = 3000 };
    fixture_t *fx = *state;
    hc_cass_test_hooks_t hooks = {.after = stop_after_claim};
    char(*ids)[160] = calloc(N, sizeof(*ids));
    hc_store_delta_t *d = calloc(N, sizeof(*d));
    const char **get_ids = calloc(N, sizeof(*get_ids));
    size_t *lens = calloc(N, sizeof(*lens));
    int64_t *likes = calloc(N, sizeof(*likes));
    hc_store_offset_t off = {.partition = 3, .expected = HC_OFFSET_NONE, .next = 77};
    hc_store_t *a;
    hc_store_t *b;
    int64_t got = 0;
    const int32_t part = 3;

    assert_true(ids && d && get_ids && lens && likes);
    for (int i = 0; i < N; i++) {
        snprintf(ids[i], sizeof(ids[i]), "%s-many-parts-post-%05d-%0*d", fx->group, i, 20, i);
        d[i] =
            (hc_store_delta_t){.post_id = ids[i], .post_id_len = strlen(ids[i]), .delta = 1000 + i};
        get_ids[i] = ids[i];
        lens[i] = strlen(ids[i]);
    }
    hc_store_batch_t bt = {.group = fx->group,
                           .topic = TOPIC,
                           .offsets = &off,
                           .offset_count = 1,
                           .deltas = d,
                           .delta_count = N,
                           .now_ms = 1700000000000LL};
    a = open_store(fx);
    hc_store_cassandra_set_test_hooks(a, &hooks);
    assert_int_equal(hc_store_apply(a, &bt, fx->errstr, sizeof(fx->errstr)), HC_ERR_TRANSIENT);
    hc_store_close(a);

    b = open_store(fx);
    /* nothing of the claim's counts is written yet */
    assert_int_equal(hc_store_get(b, get_ids, lens, N, likes, fx->errstr, sizeof(fx->errstr)),
                     HC_OK);
    assert_int_equal(likes[0], 0);
    assert_int_equal(likes[N - 1], 0);
    if (hc_store_read_offsets(b, fx->group, TOPIC, &part, 1, &got, fx->errstr,
                              sizeof(fx->errstr)) != HC_OK) {
        fail_msg("read_offsets: %s", fx->errstr);
    }
    assert_int_equal(got, 77);
    assert_int_equal(hc_store_get(b, get_ids, lens, N, likes, fx->errstr, sizeof(fx->errstr)),
                     HC_OK);
    for (int i = 0; i < N; i++) {
        if (likes[i] != 1000 + i) {
            fail_msg("post %d: %lld after the recovery, want %d", i, (long long)likes[i], 1000 + i);
        }
    }
    hc_store_close(b);
    free(ids);
    free(d);
    free(get_ids);
    free(lens);
    free(likes);
}

/* ---- a zombie writer, a reader mid-batch ---- */

typedef struct pause_point {
    hc_cass_step_t step;
    int nth; /* pause before the nth request group of this step (1-based) */
    int seen;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool paused;
    bool go;
} pause_point_t;

static void pause_before(void *opaque, hc_cass_step_t step)
{
    pause_point_t *p = opaque;

    if (step != p->step || ++p->seen != p->nth) {
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->paused = true;
    pthread_cond_broadcast(&p->cv);
    while (!p->go) {
        pthread_cond_wait(&p->cv, &p->mu);
    }
    pthread_mutex_unlock(&p->mu);
}

typedef struct zombie {
    fixture_t *fx;
    hc_store_t *st;
    round_t rd;
    hc_err_t err;
    char errstr[512];
} zombie_t;

static void *zombie_apply(void *arg)
{
    zombie_t *z = arg;

    z->err = hc_store_apply(z->st, &z->rd.b, z->errstr, sizeof(z->errstr));
    return NULL;
}

static void wait_paused(pause_point_t *p)
{
    struct timespec until;

    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 60;
    pthread_mutex_lock(&p->mu);
    while (!p->paused) {
        if (pthread_cond_timedwait(&p->cv, &p->mu, &until) != 0) {
            pthread_mutex_unlock(&p->mu);
            fail_msg("the zombie never reached its pause");
        }
    }
    pthread_mutex_unlock(&p->mu);
}

static void release(pause_point_t *p)
{
    pthread_mutex_lock(&p->mu);
    p->go = true;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

/* Each post read while a writer is paused inside its count writes is the old or the new count,
 * never another value. */
static void reader_sees_old_or_new(fixture_t *fx, hc_store_t *st, int rounds_before)
{
    for (int i = 0; i < POSTS; i++) {
        const char *id = fx->ids[i];
        size_t len = strlen(id);
        int64_t likes = -1;

        assert_int_equal(hc_store_get(st, &id, &len, 1, &likes, fx->errstr, sizeof(fx->errstr)),
                         HC_OK);
        if (likes != want_after(rounds_before, i) && likes != want_after(rounds_before + 1, i)) {
            fail_msg("post %d mid-batch: %lld, neither %lld nor %lld", i, (long long)likes,
                     (long long)want_after(rounds_before, i),
                     (long long)want_after(rounds_before + 1, i));
        }
    }
}

/* A zombie A pauses in the middle of its count writes (its claim landed); B takes over: its
 * offsets read recovers A's claim, it applies two rounds; A resumes: its late writes carry an
 * older timestamp and change nothing, its apply still ends HC_OK (its claim was committed), and
 * its next apply conflicts. A reader meanwhile sees each post old or new.
 * Mutant: count writes without the client timestamp (the server's clock): A's late writes are
 * then the newest and the counts of round 2 and 3 go back to round 1's; this fails. */
static void zombie_inside_its_count_writes_changes_nothing(void **state)
{
    fixture_t *fx = *state;
    pause_point_t pp = {.step = HC_CASS_R4_COUNTS, .nth = 3};
    hc_cass_test_hooks_t hooks = {.group_size = 1, .before = pause_before, .opaque = &pp};
    zombie_t z = {.fx = fx};
    hc_store_t *b;
    pthread_t th;
    round_t rd;
    int64_t off[2];

    pthread_mutex_init(&pp.mu, NULL);
    pthread_cond_init(&pp.cv, NULL);
    z.st = open_store(fx);
    round_of(fx, 0, &rd);
    assert_int_equal(hc_store_apply(z.st, &rd.b, fx->errstr, sizeof(fx->errstr)), HC_OK);
    hc_store_cassandra_set_test_hooks(z.st, &hooks);
    round_of(fx, 1, &z.rd);
    assert_int_equal(pthread_create(&th, NULL, zombie_apply, &z), 0);
    wait_paused(&pp);

    b = open_store(fx);
    reader_sees_old_or_new(fx, b, 1);
    read_offsets(fx, b, off); /* recovers A's open claim */
    assert_int_equal(off[0], 20);
    check_counts(fx, b, 2);
    for (int r = 2; r < 4; r++) {
        round_of(fx, r, &rd);
        if (hc_store_apply(b, &rd.b, fx->errstr, sizeof(fx->errstr)) != HC_OK) {
            fail_msg("B round %d: %s", r, fx->errstr);
        }
    }
    release(&pp);
    pthread_join(th, NULL);
    if (z.err != HC_OK) {
        fail_msg("A's committed round: %s: %s", hc_err_name(z.err), z.errstr);
    }
    check_counts(fx, b, 4);
    round_of(fx, 2, &z.rd); /* A goes on from where it believes it is */
    hc_store_cassandra_set_test_hooks(z.st, NULL);
    assert_int_equal(hc_store_apply(z.st, &z.rd.b, z.errstr, sizeof(z.errstr)), HC_ERR_CONFLICT);
    check_counts(fx, b, 4);
    read_offsets(fx, b, off);
    assert_int_equal(off[0], 40);
    assert_int_equal(off[1], 40);
    hc_store_close(b);
    hc_store_close(z.st);
    pthread_mutex_destroy(&pp.mu);
    pthread_cond_destroy(&pp.cv);
}

/* A zombie paused before its claim: B takes over from the same offsets and applies the same
 * round; A's claim then fails (the partitions' seq and offsets moved) and nothing of A's batch
 * counts. Mutant: the claim without its IF conditions: A's round counts twice; this fails. */
static void zombie_before_its_claim_conflicts(void **state)
{
    fixture_t *fx = *state;
    pause_point_t pp = {.step = HC_CASS_R3_CLAIM, .nth = 1};
    hc_cass_test_hooks_t hooks = {.before = pause_before, .opaque = &pp};
    zombie_t z = {.fx = fx};
    hc_store_t *b;
    pthread_t th;
    round_t rd;
    int64_t off[2];

    pthread_mutex_init(&pp.mu, NULL);
    pthread_cond_init(&pp.cv, NULL);
    z.st = open_store(fx);
    round_of(fx, 0, &rd);
    assert_int_equal(hc_store_apply(z.st, &rd.b, fx->errstr, sizeof(fx->errstr)), HC_OK);
    hc_store_cassandra_set_test_hooks(z.st, &hooks);
    round_of(fx, 1, &z.rd);
    assert_int_equal(pthread_create(&th, NULL, zombie_apply, &z), 0);
    wait_paused(&pp);

    b = open_store(fx);
    read_offsets(fx, b, off);
    assert_int_equal(off[0], 10);
    round_of(fx, 1, &rd);
    assert_int_equal(hc_store_apply(b, &rd.b, fx->errstr, sizeof(fx->errstr)), HC_OK);
    release(&pp);
    pthread_join(th, NULL);
    assert_int_equal(z.err, HC_ERR_CONFLICT);
    check_counts(fx, b, 2);
    hc_store_close(b);
    hc_store_close(z.st);
    pthread_mutex_destroy(&pp.mu);
    pthread_cond_destroy(&pp.cv);
}

/* ---- the node hangs or dies under an apply ---- */

static void ctl(const char *verb)
{
    const char *path = getenv("HC_TEST_CASSANDRA_CTL");
    char cmd[1024];

    assert_non_null(path);
    snprintf(cmd, sizeof(cmd), "'%s' %s >/dev/null", path, verb);
    if (system(cmd) != 0) {
        fail_msg("%s %s failed", path, verb);
    }
}

typedef struct node_fault {
    hc_cass_step_t step;
    int nth;
    int seen;
    const char *verb; /* "pause" or "kill" */
} node_fault_t;

static void fault_before(void *opaque, hc_cass_step_t step)
{
    node_fault_t *f = opaque;

    if (step == f->step && ++f->seen == f->nth) {
        ctl(f->verb);
    }
}

/* Short bounds, so that an apply against a hung node gives up in seconds, not the derived 90 s. */
static void short_bounds(fixture_t *fx)
{
    assert_int_equal(hc_config_validate(&fx->cfg, fx->errstr, sizeof(fx->errstr)), HC_OK);
    fx->cfg.timeouts.store_statement_ms = 1500;
    fx->cfg.timeouts.store_batch_ms = 5000;
}

/* read_offsets until it answers (the driver reconnects to a restarted node in the background). */
static void read_offsets_patiently(fixture_t *fx, hc_store_t *st, int64_t out[2])
{
    const int32_t parts[2] = {0, 1};
    time_t until = time(NULL) + 90;
    hc_err_t err;

    while ((err = hc_store_read_offsets(st, fx->group, TOPIC, parts, 2, out, fx->errstr,
                                        sizeof(fx->errstr))) == HC_ERR_TRANSIENT &&
           time(NULL) < until) {
        struct timespec ts = {.tv_nsec = 200000000L};
        nanosleep(&ts, NULL);
    }
    if (err != HC_OK) {
        fail_msg("read_offsets: %s: %s", hc_err_name(err), fx->errstr);
    }
}

/* The node hangs (SIGSTOP) before the claim, and separately inside the count writes: the apply
 * returns HC_ERR_TRANSIENT within its deadline (an unknown outcome is never reported as done or
 * as nothing-happened); resumed, the retry of the same batch lands or conflicts, read_offsets
 * recovers whatever claim landed, and every post is counted once.
 * Mutant: a count write that timed out treated as written (run_many's status ignored): the
 * apply returns HC_OK with posts missing; this fails on the counts. */
static void hung_node_gives_transient_then_exact(void **state)
{
    fixture_t *fx = *state;
    const struct {
        hc_cass_step_t step;
        int nth;
    } where[] = {{HC_CASS_R3_CLAIM, 1}, {HC_CASS_R4_COUNTS, 3}};
    hc_store_t *st;
    round_t rd;
    int64_t off[2];
    int r = 0;

    short_bounds(fx);
    st = open_store(fx);
    round_of(fx, r++, &rd);
    assert_int_equal(hc_store_apply(st, &rd.b, fx->errstr, sizeof(fx->errstr)), HC_OK);
    for (size_t w = 0; w < sizeof(where) / sizeof(where[0]); w++, r++) {
        node_fault_t f = {.step = where[w].step, .nth = where[w].nth, .verb = "pause"};
        hc_cass_test_hooks_t hooks = {.group_size = 1, .before = fault_before, .opaque = &f};
        time_t t0 = time(NULL);
        hc_err_t err;

        hc_store_cassandra_set_test_hooks(st, &hooks);
        round_of(fx, r, &rd);
        err = hc_store_apply(st, &rd.b, fx->errstr, sizeof(fx->errstr));
        ctl("resume");
        hc_store_cassandra_set_test_hooks(st, NULL);
        if (err != HC_ERR_TRANSIENT) {
            fail_msg("paused at step %d: %s: %s", (int)where[w].step, hc_err_name(err), fx->errstr);
        }
        assert_true(time(NULL) - t0 <= 30); /* the batch deadline held */
        /* stage 2 retries the same batch: it lands, or conflicts when the first one did */
        err = hc_store_apply(st, &rd.b, fx->errstr, sizeof(fx->errstr));
        for (time_t until = time(NULL) + 60; err == HC_ERR_TRANSIENT && time(NULL) < until;) {
            err = hc_store_apply(st, &rd.b, fx->errstr, sizeof(fx->errstr));
        }
        if (err != HC_OK && err != HC_ERR_CONFLICT) {
            fail_msg("retry after step %d: %s: %s", (int)where[w].step, hc_err_name(err),
                     fx->errstr);
        }
        read_offsets_patiently(fx, st, off);
        assert_int_equal(off[0], 10 * (r + 1));
        assert_int_equal(off[1], 10 * (r + 1));
        check_counts(fx, st, r + 1);
    }
    hc_store_close(st);
}

/* The node is killed (kill -9) in the middle of an apply's count writes and started again
 * (commit log replay): the apply fails, and after the restart read_offsets recovers the open
 * claim; counts and offsets are exact. One round: a restart costs 10-20 s.
 * Mutant: as for the kill of the writer (recovery skipped): posts stay short. */
static void node_killed_inside_an_apply_then_exact(void **state)
{
    fixture_t *fx = *state;
    node_fault_t f = {.step = HC_CASS_R4_COUNTS, .nth = 3, .verb = "kill"};
    hc_cass_test_hooks_t hooks = {.group_size = 1, .before = fault_before, .opaque = &f};
    hc_store_t *st;
    round_t rd;
    int64_t off[2];
    hc_err_t err;

    short_bounds(fx);
    st = open_store(fx);
    round_of(fx, 0, &rd);
    assert_int_equal(hc_store_apply(st, &rd.b, fx->errstr, sizeof(fx->errstr)), HC_OK);
    hc_store_cassandra_set_test_hooks(st, &hooks);
    round_of(fx, 1, &rd);
    err = hc_store_apply(st, &rd.b, fx->errstr, sizeof(fx->errstr));
    hc_store_cassandra_set_test_hooks(st, NULL);
    ctl("start");
    if (err != HC_ERR_TRANSIENT) {
        fail_msg("node killed in R4: %s: %s", hc_err_name(err), fx->errstr);
    }
    read_offsets_patiently(fx, st, off);
    assert_int_equal(off[0], 20);
    assert_int_equal(off[1], 20);
    check_counts(fx, st, 2);
    round_of(fx, 2, &rd);
    assert_int_equal(hc_store_apply(st, &rd.b, fx->errstr, sizeof(fx->errstr)), HC_OK);
    check_counts(fx, st, 3);
    hc_store_close(st);
}

/* ---- a store that forgets ---- */

static void cql(const char *statement)
{
    const char *contact = getenv("HC_TEST_CASSANDRA_CONTACT");
    hc_cql_config_t cc = {.contact_points = contact, .user = "cassandra", .password = "cassandra"};
    hc_cql_session_t *s = NULL;
    hc_cql_error_t e;

    assert_non_null(contact);
    if (hc_cql_session_open(&cc, &s, &e) != HC_CQL_OK) {
        fail_msg("session: %s", e.message);
    }
    if (hc_cql_query(s, statement, &e) != HC_CQL_OK) {
        fail_msg("%s: %s", statement, e.message);
    }
    hc_cql_session_close(s);
}

static void keyspace_of(char *out, size_t size)
{
    const char *slash = strrchr(store_uri, '/');
    size_t len = strcspn(slash + 1, "?");

    snprintf(out, size, "%.*s", (int)len, slash + 1);
}

/* Identity changes when the meta row is lost (and init writes a new one) and when a table is
 * dropped and created again; it names no secret. */
static void forgetting_changes_the_identity(void **state)
{
    fixture_t *fx = *state;
    char ks[64];
    char stmt[256];
    char id1[HC_STORE_IDENTITY_MAX];
    char id2[HC_STORE_IDENTITY_MAX];
    char id3[HC_STORE_IDENTITY_MAX];
    char again[HC_STORE_IDENTITY_MAX];
    hc_store_t *st = open_store(fx);

    keyspace_of(ks, sizeof(ks));
    assert_int_equal(hc_store_identity(st, id1, sizeof(id1), fx->errstr, sizeof(fx->errstr)),
                     HC_OK);
    assert_int_equal(hc_store_identity(st, again, sizeof(again), fx->errstr, sizeof(fx->errstr)),
                     HC_OK);
    assert_string_equal(id1, again);
    assert_true(strlen(id1) > 60);
    assert_null(strstr(id1, "cassandra:"));

    snprintf(stmt, sizeof(stmt), "TRUNCATE %s.hotcount_meta", ks);
    cql(stmt);
    assert_int_equal(hc_store_identity(st, id2, sizeof(id2), fx->errstr, sizeof(fx->errstr)),
                     HC_ERR_FATAL);
    assert_non_null(strstr(fx->errstr, "hotcount init"));
    assert_int_equal(hc_store_init_schema(st, fx->errstr, sizeof(fx->errstr)), HC_OK);
    assert_int_equal(hc_store_identity(st, id2, sizeof(id2), fx->errstr, sizeof(fx->errstr)),
                     HC_OK);
    assert_string_not_equal(id1, id2);

    hc_store_close(st);
    snprintf(stmt, sizeof(stmt), "DROP TABLE %s.hotcount_counts", ks);
    cql(stmt);
    st = open_store(fx);
    assert_int_equal(hc_store_init_schema(st, fx->errstr, sizeof(fx->errstr)), HC_OK);
    assert_int_equal(hc_store_identity(st, id3, sizeof(id3), fx->errstr, sizeof(fx->errstr)),
                     HC_OK);
    assert_string_not_equal(id2, id3);
    hc_store_close(st);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(killed_after_every_request_counts_once, setup, teardown),
        cmocka_unit_test_setup_teardown(open_claim_of_many_parts_is_recovered, setup, teardown),
        cmocka_unit_test_setup_teardown(zombie_inside_its_count_writes_changes_nothing, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(zombie_before_its_claim_conflicts, setup, teardown),
        cmocka_unit_test_setup_teardown(hung_node_gives_transient_then_exact, setup, teardown),
        cmocka_unit_test_setup_teardown(node_killed_inside_an_apply_then_exact, setup, teardown),
        /* last: it drops and recreates hotcount_counts */
        cmocka_unit_test_setup_teardown(forgetting_changes_the_identity, setup, teardown),
    };
    struct timespec now;

    store_uri = getenv("HC_TEST_STORE_URI");
    if (store_uri == NULL || strncmp(store_uri, "cassandra://", 12) != 0 ||
        getenv("HC_TEST_CASSANDRA_CONTACT") == NULL) {
        fprintf(stderr, "test_store_cassandra: run it through tests/integration/with-store.sh "
                        "cassandra under with-servers --cassandra. Not skipping: that would be "
                        "a pass.\n");
        return 1;
    }
    clock_gettime(CLOCK_REALTIME, &now);
    snprintf(run_id, sizeof(run_id), "%x-%lx", (unsigned int)getpid(), (long)now.tv_sec);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
