/* A store that forgets (issue 16, item 5): stage 2 checks every store.check.ms, idle or not,
 * that the store still holds the offsets it last wrote and is the same server, and rebuilds
 * the counts from the partials still in Kafka without waiting for traffic. A real stage 2 on
 * librdkafka's mock cluster over the fake store (tests/support/fake_store.c), which loses every
 * count and offset on hc_fake_store_forget, as Redis without persistence does on a restart.
 *
 * No partial is produced after the store forgets: only the check can repair it. The retention
 * gap is tested on the real broker (tests/faults/forgetting_store.sh): the mock cluster has no
 * DeleteRecords ("Required feature not supported by broker", librdkafka 2.14.2). Waits are for
 * a condition (offsets reached), bounded; the bound is the claim ("within seconds"). Each test
 * names the mutant it was seen to fail on. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fake_store.h"
#include "hotcount/clock.h"
#include "hotcount/stage.h"
#include "hotcount/store.h"
#include "stage2_impl.h"
#include "stage2_run.h"

#define PARTITIONS 2
#define WAIT_MS 30000
/* store.check.ms of the tests, and how soon after the loss the counts must be exact again: a
 * few checks, with room for a loaded machine, far below the 30 s a wait may take otherwise */
#define CHECK_MS "200"
#define REPAIRED_WITHIN_MS 5000

typedef struct fixture {
    hc_stage2_env_t env;
    hc_metrics_t metrics;
    int64_t produced[PARTITIONS];
    int64_t want_a, want_b; /* the two posts' counts: every delta once */
    hc_stage2_run_t run;
} fixture_t;

static int setup_with(void **state, const char *check_ms)
{
    fixture_t *f = calloc(1, sizeof(*f));
    const char *const kv[][2] = {{"flush.ms", "100"},
                                 {"instance.id", "t"},
                                 {"topic.partials.partitions", "2"},
                                 {"store.check.ms", check_ms}};
    hc_stage2_env_start(&f->env, kv, sizeof(kv) / sizeof(kv[0]), 1);
    hc_stage2_env_ready(&f->env);
    *state = f;
    return 0;
}

static int setup(void **state)
{
    return setup_with(state, CHECK_MS);
}

/* The check off: the mutant "no store check", through the product's own switch. */
static int setup_unchecked(void **state)
{
    return setup_with(state, "0");
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    hc_stage2_env_fini(&f->env);
    hc_metrics_fini(&f->metrics);
    free(f);
    return 0;
}

static void produce(fixture_t *f, int32_t partition, const char *post, int64_t delta)
{
    hc_stage2_run_produce(f->env.producer, f->env.cfg.topic_partials, partition, post, delta);
    f->produced[partition]++;
    *(post[0] == 'a' ? &f->want_a : &f->want_b) += delta;
}

static bool all_stored(fixture_t *f, int64_t timeout_ms)
{
    int64_t want[PARTITIONS];
    for (int p = 0; p < PARTITIONS; p++) {
        want[p] = f->produced[p] ? f->produced[p] : HC_OFFSET_NONE;
    }
    return hc_fake_store_wait_offsets(f->env.fake, f->env.cfg.group_stage2,
                                      f->env.cfg.topic_partials, want, PARTITIONS, timeout_ms);
}

static void assert_exact(fixture_t *f)
{
    assert_int_equal(hc_fake_store_likes(f->env.fake, "a", 1), f->want_a);
    assert_int_equal(hc_fake_store_likes(f->env.fake, "b", 1), f->want_b);
    assert_int_equal(hc_fake_store_posts(f->env.fake), 2);
}

/* Counts a..b over both partitions, stored exact, then the store forgets everything. */
static void count_then_forget(fixture_t *f, bool new_identity)
{
    assert_int_equal(hc_metrics_init(&f->metrics), HC_OK);
    produce(f, 0, "a", 3);
    produce(f, 1, "b", 2);
    produce(f, 0, "b", -1);
    hc_stage2_run_start(&f->run, &f->env.cfg, "t", &f->metrics);
    assert_true(all_stored(f, WAIT_MS));
    assert_exact(f);
    hc_fake_store_forget(f->env.fake, new_identity);
    assert_int_equal(hc_fake_store_posts(f->env.fake), 0);
}

/* The offsets alone tell (a store without identity, or one whose identity did not change).
 * Mutant seen failing: store.check.ms=0 (forgot_unchecked_stays_empty below) and check_store
 * comparing nothing (its `stored[i] == start` test always true): the store stays empty. */
static void forgot_offsets_rebuilt_without_traffic(void **state)
{
    fixture_t *f = *state;
    count_then_forget(f, false);
    int64_t t0 = hc_now_ms();
    assert_true(all_stored(f, REPAIRED_WITHIN_MS));
    assert_exact(f);
    assert_true(hc_now_ms() - t0 < REPAIRED_WITHIN_MS);
    assert_true(hc_metric_get(f->metrics.store_forgot) >= 1);
    hc_stage2_run_stop(&f->run);
    hc_stage2_run_destroy(&f->run);
    assert_exact(f);
}

/* A restart the identity shows (a new run_id), the handle reopened. Mutant seen failing:
 * reopen_store leaving the old handle open (a leak under ASan). */
static void forgot_new_identity_rebuilt(void **state)
{
    fixture_t *f = *state;
    count_then_forget(f, true);
    assert_true(all_stored(f, REPAIRED_WITHIN_MS));
    assert_exact(f);
    assert_true(hc_metric_get(f->metrics.store_forgot) >= 1);
    /* and it keeps counting on the new store */
    produce(f, 1, "a", 4);
    assert_true(all_stored(f, WAIT_MS));
    hc_stage2_run_stop(&f->run);
    hc_stage2_run_destroy(&f->run);
    assert_exact(f);
}

/* The control: without the check nothing repairs a store that forgot while idle, so the test
 * above shows the check's work, not something else's. */
static void forgot_unchecked_stays_empty(void **state)
{
    fixture_t *f = *state;
    count_then_forget(f, false);
    assert_false(all_stored(f, 1500));
    assert_int_equal(hc_fake_store_posts(f->env.fake), 0);
    assert_int_equal(hc_metric_get(f->metrics.store_forgot), 0);
    hc_stage2_run_stop(&f->run);
    hc_stage2_run_destroy(&f->run);
}

/* hc_store_identity of a real backend: stable while the store is the same, other once it is
 * replaced. SQLite here (the file replaced under the same path, as a restore would); Redis and
 * PostgreSQL only when tests/harness/with-servers provides them (HC_TEST_REDIS_URI,
 * HC_TEST_PG_URI): stable across calls and not empty (their restart is the fault script's). */
static void store_identity_of(const char *uri, char *id, size_t id_size)
{
    hc_config_t cfg;
    hc_store_t *st = NULL;
    char errstr[512];
    assert_int_equal(hc_config_init(&cfg, hc_store_facts()), HC_OK);
    free(cfg.store);
    cfg.store = strdup(uri);
    assert_non_null(cfg.store);
    if (hc_store_open(&cfg, &st, errstr, sizeof(errstr)) != HC_OK ||
        hc_store_init_schema(st, errstr, sizeof(errstr)) != HC_OK ||
        hc_store_identity(st, id, id_size, errstr, sizeof(errstr)) != HC_OK) {
        fail_msg("%s", errstr);
    }
    char again[HC_STORE_IDENTITY_MAX];
    assert_int_equal(hc_store_identity(st, again, sizeof(again), errstr, sizeof(errstr)), HC_OK);
    assert_string_equal(id, again);
    hc_store_close(st);
    hc_config_fini(&cfg);
}

static void store_identity_changes_with_the_store(void **state)
{
    (void)state;
    char path[] = "/tmp/hc-identity-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    char uri[64];
    snprintf(uri, sizeof(uri), "sqlite:%s", path);
    char first[HC_STORE_IDENTITY_MAX];
    char second[HC_STORE_IDENTITY_MAX];
    store_identity_of(uri, first, sizeof(first));
    assert_true(first[0] != '\0');
    /* another file under the same path: keep the old one linked, so its inode is not reused */
    char old[sizeof(path) + 4];
    snprintf(old, sizeof(old), "%s.old", path);
    assert_int_equal(rename(path, old), 0);
    store_identity_of(uri, second, sizeof(second));
    assert_string_not_equal(first, second);
    unlink(path);
    unlink(old);
    const char *const envs[] = {"HC_TEST_REDIS_URI", "HC_TEST_PG_URI"};
    for (size_t i = 0; i < sizeof(envs) / sizeof(envs[0]); i++) {
        const char *server = getenv(envs[i]);
        if (server && server[0]) {
            store_identity_of(server, first, sizeof(first));
            assert_true(first[0] != '\0');
            print_message("%s: identity %s\n", envs[i], first);
        }
    }
}

/* The transition the check takes. Mutant: IDLE refusing STORE_MOVED (the stage would fail),
 * or a window taking it (its batch would be dropped: the check runs without one only). */
static void store_moved_rereads_from_idle_only(void **state)
{
    (void)state;
    assert_int_equal(hc_stage2_next(HC_STAGE2_IDLE, HC_STAGE2_EV_STORE_MOVED, HC_OK, NULL, 0),
                     HC_STAGE2_REREAD);
    assert_int_equal(hc_stage2_next(HC_STAGE2_OPEN, HC_STAGE2_EV_STORE_MOVED, HC_OK, NULL, 0),
                     HC_STAGE2_FAILED);
    assert_int_equal(hc_stage2_next(HC_STAGE2_RETRY, HC_STAGE2_EV_STORE_MOVED, HC_OK, NULL, 0),
                     HC_STAGE2_FAILED);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(store_moved_rereads_from_idle_only),
        cmocka_unit_test(store_identity_changes_with_the_store),
        cmocka_unit_test_setup_teardown(forgot_offsets_rebuilt_without_traffic, setup, teardown),
        cmocka_unit_test_setup_teardown(forgot_new_identity_rebuilt, setup, teardown),
        cmocka_unit_test_setup_teardown(forgot_unchecked_stays_empty, setup_unchecked, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
