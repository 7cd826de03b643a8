/* What only the SQLite store has: its URIs, its file layout, rollback inside one SQLite
 * transaction, an in-memory database. The behaviour every store shares (sums, offsets,
 * compare-and-set, racing handles, top, foreach, post-id bytes) is tests/integration/
 * test_store_contract.c, which runs against SQLite without any server too. Driven through
 * store.h (plus one raw look at the file to check the layout readers script against). Each
 * test gets a fresh database file under /tmp. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka.h needs the four above first; the blank line keeps clang-format from sorting it up. */

#include <cmocka.h>

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
    open_expect("mongodb://:s3cret@host:27017", HC_ERR_INVALID, "mongodb");
    /* A refused connection is an outage to wait out, not a configuration mistake. */
    open_expect("redis://127.0.0.1:1", HC_ERR_TRANSIENT, "127.0.0.1:1");
}

static void open_never_echoes_password(void **state)
{
    char uri[] = "mongodb://:s3cret@host:27017";
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
        cmocka_unit_test_setup_teardown(failed_batch_rolls_back_everything, setup, teardown),
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
