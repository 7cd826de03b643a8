/* The CQL driver shim (src/store/cassandra/shim/hc_cql.h) against a real Apache Cassandra: the
 * one HC_TEST_CASSANDRA_CONTACT names (tests/integration/with-cassandra.sh starts one through
 * tests/harness/with-servers --cassandra when it is unset). Unset is a failure, not a skip.
 *
 * Everything the backend will stand on (docs/CASSANDRA.md): prepared statements with typed
 * binds, a client timestamp that makes an older write lose whenever it arrives, batches, a
 * conditional batch's [applied] answer, paging, many statements at once, and the error classes
 * the backend maps to hc_err_t, a write to a hung node (HC_TEST_CASSANDRA_CTL pause) included. A
 * keyspace of this run's own, dropped at the end. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka.h needs the four above first; the blank line keeps clang-format from sorting it up. */

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hc_cql.h"

/* The harness's node runs PasswordAuthenticator with Cassandra's default superuser. */
#define USER "cassandra"
#define PASSWORD "cassandra"

static const char *contact;
static char ks[64];
static hc_cql_session_t *sess;

static void ok_or_fail(int status, const hc_cql_error_t *err, const char *what)
{
    if (status != HC_CQL_OK) {
        fail_msg("%s: status %d code 0x%x: %s", what, status, (unsigned)err->code, err->message);
    }
}

static void query(const char *fmt, ...)
{
    char cql[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cql, sizeof(cql), fmt, ap);
    va_end(ap);
    hc_cql_error_t err;
    ok_or_fail(hc_cql_query(sess, cql, &err), &err, cql);
}

static hc_cql_prepared_t *prepare(const char *fmt, ...)
{
    char cql[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cql, sizeof(cql), fmt, ap);
    va_end(ap);
    hc_cql_prepared_t *p = NULL;
    hc_cql_error_t err;
    ok_or_fail(hc_cql_prepare(sess, cql, &p, &err), &err, cql);
    assert_non_null(p);
    return p;
}

static hc_cql_config_t config(const char *user, const char *password)
{
    hc_cql_config_t cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.contact_points = contact;
    cfg.user = user;
    cfg.password = password;
    cfg.connect_timeout_ms = 10000;
    cfg.request_timeout_ms = 20000; /* a loaded 2-core machine: schema changes take seconds */
    return cfg;
}

static int setup_run(void **state)
{
    (void)state;
    contact = getenv("HC_TEST_CASSANDRA_CONTACT");
    if (contact == NULL || *contact == '\0') {
        fprintf(stderr, "test_cql_shim: HC_TEST_CASSANDRA_CONTACT is not set (HOST:PORT); run "
                        "under tests/integration/with-cassandra.sh\n");
        return -1;
    }
    snprintf(ks, sizeof(ks), "hct_shim_%ld_%ld", (long)getpid(), (long)time(NULL));
    hc_cql_config_t cfg = config(USER, PASSWORD);
    hc_cql_error_t err;
    if (hc_cql_session_open(&cfg, &sess, &err) != HC_CQL_OK) {
        fprintf(stderr, "test_cql_shim: connect to %s: %s\n", contact, err.message);
        return -1;
    }
    char cql[256];
    snprintf(cql, sizeof(cql),
             "CREATE KEYSPACE %s WITH replication = {'class': 'SimpleStrategy', "
             "'replication_factor': 1}",
             ks);
    if (hc_cql_query(sess, cql, &err) != HC_CQL_OK) {
        fprintf(stderr, "test_cql_shim: %s: %s\n", cql, err.message);
        return -1;
    }
    return 0;
}

static int teardown_run(void **state)
{
    (void)state;
    if (sess != NULL) {
        char cql[128];
        hc_cql_error_t err;
        snprintf(cql, sizeof(cql), "DROP KEYSPACE IF EXISTS %s", ks);
        if (hc_cql_query(sess, cql, &err) != HC_CQL_OK) {
            fprintf(stderr, "test_cql_shim: %s: %s\n", cql, err.message);
        }
        hc_cql_session_close(sess);
        sess = NULL;
    }
    return 0;
}

static void reads_system_local(void **state)
{
    (void)state;
    hc_cql_prepared_t *p = prepare("SELECT release_version FROM system.local WHERE key = 'local'");
    hc_cql_stmt_t *st = hc_cql_stmt_new(p);
    hc_cql_rows_t *rows = NULL;
    hc_cql_error_t err;
    ok_or_fail(hc_cql_execute(sess, st, &rows, &err), &err, "system.local");
    assert_int_equal(hc_cql_rows_count(rows), 1);
    const uint8_t *v = NULL;
    size_t len = 0;
    assert_int_equal(hc_cql_rows_bytes(rows, 0, 0, &v, &len), HC_CQL_OK);
    assert_true(len >= 3 && v[0] >= '4' && v[0] <= '9'); /* 5.0.6 on the harness */
    hc_cql_rows_free(rows);
    hc_cql_stmt_free(st);
    hc_cql_prepared_free(p);
}

/* likes of post_id in table t (-1: no row), and its write time. */
static int64_t read_likes(const char *table, const char *post, int64_t *writetime)
{
    hc_cql_prepared_t *p =
        prepare("SELECT likes, writetime(likes) FROM %s.%s WHERE post_id = ?", ks, table);
    hc_cql_stmt_t *st = hc_cql_stmt_new(p);
    assert_int_equal(hc_cql_bind_text(st, 0, post, strlen(post)), HC_CQL_OK);
    hc_cql_rows_t *rows = NULL;
    hc_cql_error_t err;
    ok_or_fail(hc_cql_execute(sess, st, &rows, &err), &err, "read likes");
    int64_t likes = -1;
    if (hc_cql_rows_count(rows) == 1) {
        assert_int_equal(hc_cql_rows_int64(rows, 0, 0, &likes), HC_CQL_OK);
        if (writetime != NULL) {
            assert_int_equal(hc_cql_rows_int64(rows, 0, 1, writetime), HC_CQL_OK);
        }
    }
    hc_cql_rows_free(rows);
    hc_cql_stmt_free(st);
    hc_cql_prepared_free(p);
    return likes;
}

static void write_likes(hc_cql_prepared_t *p, const char *post, int64_t likes, int64_t ts_us)
{
    hc_cql_stmt_t *st = hc_cql_stmt_new(p);
    assert_non_null(st);
    assert_int_equal(hc_cql_bind_int64(st, 0, likes), HC_CQL_OK);
    assert_int_equal(hc_cql_bind_text(st, 1, post, strlen(post)), HC_CQL_OK);
    hc_cql_stmt_set_timestamp(st, ts_us);
    assert_int_equal(hc_cql_stmt_set_consistency(st, HC_CQL_LOCAL_QUORUM), HC_CQL_OK);
    hc_cql_error_t err;
    ok_or_fail(hc_cql_execute(sess, st, NULL, &err), &err, "write likes");
    hc_cql_stmt_free(st);
}

static void prepared_write_then_read(void **state)
{
    (void)state;
    query("CREATE TABLE %s.counts (post_id text PRIMARY KEY, likes bigint)", ks);
    hc_cql_prepared_t *w = prepare("UPDATE %s.counts SET likes = ? WHERE post_id = ?", ks);
    write_likes(w, "p\xc3\xa9", 42, HC_CQL_NO_TIMESTAMP);
    assert_int_equal(read_likes("counts", "p\xc3\xa9", NULL), 42);
    assert_int_equal(read_likes("counts", "absent", NULL), -1);
    hc_cql_prepared_free(w);
}

/* The heart of docs/CASSANDRA.md: a write with an older client timestamp loses, whenever it
 * arrives; the same write again (a retry) changes nothing. */
static void older_client_timestamp_loses(void **state)
{
    (void)state;
    query("CREATE TABLE %s.ts (post_id text PRIMARY KEY, likes bigint)", ks);
    hc_cql_prepared_t *w =
        prepare("UPDATE %s.ts USING TIMESTAMP ? SET likes = ? WHERE post_id = ?", ks);
    /* The timestamp as a bind value here; the backend sets it per request (below). */
    hc_cql_stmt_t *st = hc_cql_stmt_new(w);
    hc_cql_bind_int64(st, 0, 2000000);
    hc_cql_bind_int64(st, 1, 5);
    hc_cql_bind_text(st, 2, "a", 1);
    hc_cql_error_t err;
    ok_or_fail(hc_cql_execute(sess, st, NULL, &err), &err, "ts 2000000");
    hc_cql_stmt_free(st);
    hc_cql_prepared_free(w);

    hc_cql_prepared_t *u = prepare("UPDATE %s.ts SET likes = ? WHERE post_id = ?", ks);
    write_likes(u, "a", 3, 1000000); /* older: loses */
    int64_t wt = 0;
    assert_int_equal(read_likes("ts", "a", &wt), 5);
    assert_int_equal(wt, 2000000);
    write_likes(u, "a", 7, 3000000); /* newer: wins */
    write_likes(u, "a", 7, 3000000); /* the same write again: nothing changes */
    assert_int_equal(read_likes("ts", "a", &wt), 7);
    assert_int_equal(wt, 3000000);
    hc_cql_prepared_free(u);
}

static void batches_apply_with_their_timestamp(void **state)
{
    (void)state;
    query("CREATE TABLE %s.b (post_id text PRIMARY KEY, likes bigint)", ks);
    hc_cql_prepared_t *u = prepare("UPDATE %s.b SET likes = ? WHERE post_id = ?", ks);
    static const int kinds[] = {HC_CQL_BATCH_UNLOGGED, HC_CQL_BATCH_LOGGED};
    for (size_t k = 0; k < 2; k++) {
        hc_cql_batch_t *b = hc_cql_batch_new(kinds[k]);
        assert_non_null(b);
        for (int i = 0; i < 3; i++) {
            char post[16];
            snprintf(post, sizeof(post), "k%zu-%d", k, i);
            hc_cql_stmt_t *st = hc_cql_stmt_new(u);
            hc_cql_bind_int64(st, 0, 10 * (i + 1));
            hc_cql_bind_text(st, 1, post, strlen(post));
            assert_int_equal(hc_cql_batch_add(b, st), HC_CQL_OK);
            hc_cql_stmt_free(st); /* the batch holds a copy */
        }
        hc_cql_batch_set_timestamp(b, 5000000);
        assert_int_equal(hc_cql_batch_set_consistency(b, HC_CQL_LOCAL_QUORUM), HC_CQL_OK);
        hc_cql_error_t err;
        ok_or_fail(hc_cql_batch_execute(sess, b, NULL, &err), &err, "batch");
        hc_cql_batch_free(b);
        for (int i = 0; i < 3; i++) {
            char post[16];
            int64_t wt = 0;
            snprintf(post, sizeof(post), "k%zu-%d", k, i);
            assert_int_equal(read_likes("b", post, &wt), 10 * (i + 1));
            assert_int_equal(wt, 5000000);
        }
    }
    assert_null(hc_cql_batch_new(7));
    hc_cql_prepared_free(u);
}

/* The claim of docs/CASSANDRA.md: one conditional batch over one partition, all or nothing. */
static void conditional_batch_reports_applied(void **state)
{
    (void)state;
    query("CREATE TABLE %s.claims (g text, p int, next bigint, PRIMARY KEY ((g), p))", ks);
    hc_cql_prepared_t *ins = prepare("INSERT INTO %s.claims (g, p, next) VALUES (?, ?, ?) "
                                     "IF NOT EXISTS",
                                     ks);
    hc_cql_prepared_t *cas =
        prepare("UPDATE %s.claims SET next = ? WHERE g = ? AND p = ? IF next = ?", ks);
    hc_cql_error_t err;
    hc_cql_rows_t *rows = NULL;
    int applied = -1;

    hc_cql_batch_t *b = hc_cql_batch_new(HC_CQL_BATCH_LOGGED);
    for (int p = 0; p < 2; p++) {
        hc_cql_stmt_t *st = hc_cql_stmt_new(ins);
        hc_cql_bind_text(st, 0, "g", 1);
        hc_cql_bind_int32(st, 1, p);
        hc_cql_bind_int64(st, 2, 10);
        hc_cql_batch_add(b, st);
        hc_cql_stmt_free(st);
    }
    assert_int_equal(hc_cql_batch_set_serial_consistency(b, HC_CQL_LOCAL_SERIAL), HC_CQL_OK);
    ok_or_fail(hc_cql_batch_execute(sess, b, &rows, &err), &err, "claim insert");
    assert_int_equal(hc_cql_rows_bool(rows, 0, 0, &applied), HC_CQL_OK);
    assert_int_equal(applied, 1);
    hc_cql_rows_free(rows);
    hc_cql_batch_free(b);

    /* Both partitions from 10 to 20, then a stale claim (expects 10 on p=1): not applied,
     * nothing changes, and the answer carries the current values. */
    for (int round = 0; round < 2; round++) {
        b = hc_cql_batch_new(HC_CQL_BATCH_LOGGED);
        for (int p = 0; p < 2; p++) {
            hc_cql_stmt_t *st = hc_cql_stmt_new(cas);
            hc_cql_bind_int64(st, 0, round == 0 ? 20 : 30);
            hc_cql_bind_text(st, 1, "g", 1);
            hc_cql_bind_int32(st, 2, p);
            hc_cql_bind_int64(st, 3, round == 0 || p == 1 ? 10 : 20);
            hc_cql_batch_add(b, st);
            hc_cql_stmt_free(st);
        }
        ok_or_fail(hc_cql_batch_execute(sess, b, &rows, &err), &err, "claim");
        assert_true(hc_cql_rows_count(rows) >= 1);
        assert_int_equal(hc_cql_rows_bool(rows, 0, 0, &applied), HC_CQL_OK);
        assert_int_equal(applied, round == 0);
        hc_cql_rows_free(rows);
        hc_cql_batch_free(b);
    }
    hc_cql_prepared_t *sel = prepare("SELECT next FROM %s.claims WHERE g = 'g'", ks);
    hc_cql_stmt_t *st = hc_cql_stmt_new(sel);
    ok_or_fail(hc_cql_execute(sess, st, &rows, &err), &err, "claims");
    assert_int_equal(hc_cql_rows_count(rows), 2);
    for (size_t r = 0; r < 2; r++) {
        int64_t next = 0;
        assert_int_equal(hc_cql_rows_int64(rows, r, 0, &next), HC_CQL_OK);
        assert_int_equal(next, 20); /* the stale claim changed neither partition */
    }
    hc_cql_rows_free(rows);
    hc_cql_stmt_free(st);
    hc_cql_prepared_free(sel);
    hc_cql_prepared_free(ins);
    hc_cql_prepared_free(cas);
}

static void pages_through_a_partition(void **state)
{
    (void)state;
    query("CREATE TABLE %s.pg (k int, c int, v text, PRIMARY KEY ((k), c))", ks);
    hc_cql_prepared_t *ins = prepare("INSERT INTO %s.pg (k, c, v) VALUES (0, ?, 'x')", ks);
    hc_cql_stmt_t *many[25];
    for (int i = 0; i < 25; i++) {
        many[i] = hc_cql_stmt_new(ins);
        hc_cql_bind_int32(many[i], 0, i);
    }
    hc_cql_error_t err;
    ok_or_fail(hc_cql_execute_many(sess, many, 25, 8, NULL, NULL, &err), &err, "inserts");
    for (int i = 0; i < 25; i++) {
        hc_cql_stmt_free(many[i]);
    }
    hc_cql_prepared_t *sel = prepare("SELECT c FROM %s.pg WHERE k = 0", ks);
    hc_cql_stmt_t *st = hc_cql_stmt_new(sel);
    assert_int_equal(hc_cql_stmt_set_page_size(st, 10), HC_CQL_OK);
    int pages = 0, seen = 0;
    do {
        hc_cql_rows_t *rows = NULL;
        ok_or_fail(hc_cql_execute(sess, st, &rows, &err), &err, "page");
        for (size_t r = 0; r < hc_cql_rows_count(rows); r++) {
            int64_t c = -1;
            assert_int_equal(hc_cql_rows_int64(rows, r, 0, &c), HC_CQL_OK);
            assert_int_equal(c, seen); /* clustering order */
            seen++;
        }
        hc_cql_rows_free(rows);
        pages++;
    } while (hc_cql_stmt_has_more_pages(st) && pages < 10);
    assert_int_equal(seen, 25);
    assert_true(pages >= 3);
    hc_cql_stmt_free(st);
    hc_cql_prepared_free(sel);
    hc_cql_prepared_free(ins);
}

static void executes_many_at_once(void **state)
{
    (void)state;
    enum { N = 300 };
    query("CREATE TABLE %s.many (post_id text PRIMARY KEY, likes bigint)", ks);
    hc_cql_prepared_t *w = prepare("UPDATE %s.many SET likes = ? WHERE post_id = ?", ks);
    hc_cql_prepared_t *r = prepare("SELECT likes FROM %s.many WHERE post_id = ?", ks);
    static hc_cql_stmt_t *st[N];
    static int statuses[N];
    static hc_cql_rows_t *rows[N];
    char post[32];
    for (int i = 0; i < N; i++) {
        st[i] = hc_cql_stmt_new(w);
        snprintf(post, sizeof(post), "m%d", i);
        hc_cql_bind_int64(st[i], 0, (int64_t)i * 1000);
        hc_cql_bind_text(st[i], 1, post, strlen(post));
    }
    hc_cql_error_t err;
    ok_or_fail(hc_cql_execute_many(sess, st, N, 64, statuses, NULL, &err), &err, "writes");
    for (int i = 0; i < N; i++) {
        assert_int_equal(statuses[i], HC_CQL_OK);
        hc_cql_stmt_free(st[i]);
        st[i] = hc_cql_stmt_new(r);
        snprintf(post, sizeof(post), "m%d", i);
        hc_cql_bind_text(st[i], 0, post, strlen(post));
    }
    ok_or_fail(hc_cql_execute_many(sess, st, N, 64, statuses, rows, &err), &err, "reads");
    for (int i = 0; i < N; i++) {
        int64_t v = -1;
        assert_int_equal(hc_cql_rows_count(rows[i]), 1);
        assert_int_equal(hc_cql_rows_int64(rows[i], 0, 0, &v), HC_CQL_OK);
        assert_int_equal(v, (int64_t)i * 1000);
        hc_cql_rows_free(rows[i]);
        hc_cql_stmt_free(st[i]);
    }
    hc_cql_prepared_free(w);
    hc_cql_prepared_free(r);
}

static void errors_are_classified(void **state)
{
    (void)state;
    hc_cql_error_t err;
    hc_cql_prepared_t *p = NULL;
    assert_int_equal(hc_cql_query(sess, "SELEC nothing", &err), HC_CQL_INVALID);
    assert_int_equal(err.status, HC_CQL_INVALID);
    assert_int_equal(err.code, 0x2000);
    assert_int_equal(
        hc_cql_prepare(sess, "SELECT likes FROM no_such_ks.t WHERE post_id = ?", &p, &err),
        HC_CQL_SCHEMA);
    assert_null(p);
    char cql[128];
    snprintf(cql, sizeof(cql), "SELECT likes FROM %s.no_such_table WHERE post_id = ?", ks);
    assert_int_equal(hc_cql_prepare(sess, cql, &p, &err), HC_CQL_SCHEMA);

    /* Text must be UTF-8; an index past the statement's markers is refused. */
    query("CREATE TABLE %s.e (post_id text PRIMARY KEY, likes bigint)", ks);
    p = prepare("SELECT likes FROM %s.e WHERE post_id = ?", ks);
    hc_cql_stmt_t *st = hc_cql_stmt_new(p);
    assert_int_equal(hc_cql_bind_text(st, 0, "\xff", 1), HC_CQL_INVALID);
    assert_int_equal(hc_cql_bind_text(st, 1, "a", 1), HC_CQL_INVALID);
    /* A value of the wrong type: the driver refuses it before sending. */
    assert_int_equal(hc_cql_bind_int64(st, 0, 1), HC_CQL_OK);
    assert_int_equal(hc_cql_execute(sess, st, NULL, &err), HC_CQL_INVALID);
    hc_cql_stmt_free(st);
    hc_cql_prepared_free(p);

    /* A wrong password: auth, no session. */
    hc_cql_config_t cfg = config(USER, "not-the-password");
    hc_cql_session_t *other = NULL;
    assert_int_equal(hc_cql_session_open(&cfg, &other, &err), HC_CQL_AUTH);
    assert_null(other);
    /* Nobody listening: transient. A port of this host that no server uses (port 9 is
     * "discard", never served here). */
    cfg = config(USER, PASSWORD);
    cfg.contact_points = "127.0.0.1:9";
    cfg.connect_timeout_ms = 2000;
    assert_int_equal(hc_cql_session_open(&cfg, &other, &err), HC_CQL_TRANSIENT);
    assert_null(other);
    cfg.contact_points = NULL;
    assert_int_equal(hc_cql_session_open(&cfg, &other, &err), HC_CQL_INVALID);
    hc_cql_session_close(NULL); /* accepted */
}

/* A node that stops answering (SIGSTOP through the harness's control script): a write past the
 * client's timeout is HC_CQL_UNKNOWN (it may still be applied), and the session works again once
 * the node is back. */
static void write_to_a_hung_node_is_unknown(void **state)
{
    (void)state;
    const char *ctl = getenv("HC_TEST_CASSANDRA_CTL");
    if (ctl == NULL || *ctl == '\0') {
        fail_msg("HC_TEST_CASSANDRA_CTL is not set: run under tests/integration/with-cassandra.sh");
    }
    query("CREATE TABLE %s.hung (post_id text PRIMARY KEY, likes bigint)", ks);
    hc_cql_prepared_t *w = prepare("UPDATE %s.hung SET likes = ? WHERE post_id = ?", ks);
    hc_cql_stmt_t *st = hc_cql_stmt_new(w);
    hc_cql_bind_int64(st, 0, 1);
    hc_cql_bind_text(st, 1, "h", 1);
    hc_cql_stmt_set_timeout_ms(st, 1500);
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "'%s' pause", ctl);
    assert_int_equal(system(cmd), 0);
    hc_cql_error_t err;
    int status = hc_cql_execute(sess, st, NULL, &err);
    snprintf(cmd, sizeof(cmd), "'%s' resume", ctl);
    int resumed = system(cmd);
    assert_int_equal(resumed, 0);
    assert_int_equal(status, HC_CQL_UNKNOWN);
    assert_int_equal(err.status, HC_CQL_UNKNOWN);
    hc_cql_stmt_set_timeout_ms(st, 0);
    ok_or_fail(hc_cql_execute(sess, st, NULL, &err), &err, "the same write after resume");
    assert_int_equal(read_likes("hung", "h", NULL), 1);
    hc_cql_stmt_free(st);
    hc_cql_prepared_free(w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(reads_system_local),
        cmocka_unit_test(prepared_write_then_read),
        cmocka_unit_test(older_client_timestamp_loses),
        cmocka_unit_test(batches_apply_with_their_timestamp),
        cmocka_unit_test(conditional_batch_reports_applied),
        cmocka_unit_test(pages_through_a_partition),
        cmocka_unit_test(executes_many_at_once),
        cmocka_unit_test(errors_are_classified),
        cmocka_unit_test(write_to_a_hung_node_is_unknown),
    };
    return cmocka_run_group_tests(tests, setup_run, teardown_run);
}
