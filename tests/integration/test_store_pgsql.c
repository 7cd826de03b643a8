/* The PostgreSQL store against a real server: what only PostgreSQL can get wrong (quoting of
 * ids, READ COMMITTED compare-and-set under real concurrency, lost connections, timeouts,
 * concurrent schema creation). The backend-agnostic behaviour is the contract test's.
 *
 * Needs HC_TEST_PG_URI (a postgresql:// URI of a database we may create schemas in); without it
 * every test fails: a skipped integration test is not a pass. Each run works in a schema of its
 * own (hc_test_<pid>_<time>, reached through search_path in the store's URI), uses a unique
 * consumer group and post-id prefix besides, and drops the schema at the end. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka.h needs the four above first; the blank line keeps clang-format from sorting it up. */

#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <libpq-fe.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "hotcount/store.h"
#include "hotcount/timeouts.h"

#define TOPIC "likes.partials"
#define NOW_MS 1700000000123LL

/* Per run, set up once in main. */
static const char *base_uri;
static char run_id[48]; /* hc_test_<pid>_<time>: schema name and prefix of the others */
static char group[64];  /* the consumer group of every batch */
static char prefix[64]; /* of every post id that is not a deliberately odd one */
static PGconn *admin;   /* a plain libpq connection that checks, kills and cleans up */

typedef struct fixture {
    char uri[1024];
    hc_config_t cfg;
    hc_store_t *st;
    char errstr[512];
} fixture_t;

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The store's URI: the base one with search_path set to `schema`, plus any extra query
 * parameters ("application_name=x", ...), each already URI-encoded. libpq keeps only the last
 * `options`, so a test that needs more server options passes them as "%20-c%20name%3Dvalue" in
 * extra_options. */
static void uri_for(char *buf, size_t size, const char *schema, const char *extra_options,
                    const char *extra)
{
    int n = snprintf(buf, size, "%s%coptions=-c%%20search_path%%3D%s%s%s%s", base_uri,
                     strchr(base_uri, '?') != NULL ? '&' : '?', schema,
                     extra_options != NULL ? extra_options : "", extra != NULL ? "&" : "",
                     extra != NULL ? extra : "");

    assert_true(n > 0 && (size_t)n < size);
}

/* Built by hand: config.c is not what is under test here. */
static void config_for(hc_config_t *cfg, char *uri)
{
    static char redis_prefix[] = "likes:";

    memset(cfg, 0, sizeof(*cfg));
    cfg->store = uri;
    cfg->store_redis_prefix = redis_prefix;
    cfg->stores = hc_store_facts(); /* for a hand-run hc_timeouts_derive: the backends' bounds */
}

static void open_store(fixture_t *fx, const char *schema, const char *extra_options,
                       const char *extra)
{
    uri_for(fx->uri, sizeof(fx->uri), schema, extra_options, extra);
    config_for(&fx->cfg, fx->uri);
    if (hc_store_open(&fx->cfg, &fx->st, fx->errstr, sizeof(fx->errstr)) != HC_OK) {
        fail_msg("open: %s", fx->errstr);
    }
}

/* Runs SQL on the admin connection; params are text. Returns the result for the caller to
 * PQclear. */
static PGresult *admin_exec(const char *sql, int nparams, const char *const *params)
{
    PGresult *res = PQexecParams(admin, sql, nparams, NULL, params, NULL, NULL, 0);

    if (PQresultStatus(res) != PGRES_COMMAND_OK && PQresultStatus(res) != PGRES_TUPLES_OK) {
        fail_msg("admin: %s: %s", sql, PQresultErrorMessage(res));
    }
    return res;
}

static void admin_cmd(const char *sql)
{
    PQclear(admin_exec(sql, 0, NULL));
}

/* The one value of a one-row, one-column query, as an integer; -1 when there is no row. */
static int64_t admin_int(const char *sql, int nparams, const char *const *params)
{
    PGresult *res = admin_exec(sql, nparams, params);
    int64_t v = -1;

    if (PQntuples(res) == 1 && !PQgetisnull(res, 0, 0)) {
        v = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
    }
    PQclear(res);
    return v;
}

static void drop_schema(const char *schema)
{
    char sql[256];

    snprintf(sql, sizeof(sql), "DROP SCHEMA IF EXISTS %s CASCADE", schema);
    admin_cmd(sql);
}

static void create_schema(const char *schema)
{
    char sql[256];

    drop_schema(schema);
    snprintf(sql, sizeof(sql), "CREATE SCHEMA %s", schema);
    admin_cmd(sql);
}

static int setup(void **state)
{
    fixture_t *fx = calloc(1, sizeof(*fx));
    char sql[256];

    assert_non_null(fx);
    open_store(fx, run_id, NULL, NULL);
    if (hc_store_init_schema(fx->st, fx->errstr, sizeof(fx->errstr)) != HC_OK) {
        fail_msg("init_schema: %s", fx->errstr);
    }
    /* Each test starts from empty tables in this run's schema. */
    snprintf(sql, sizeof(sql), "TRUNCATE %s.hotcount_counts, %s.hotcount_offsets", run_id, run_id);
    admin_cmd(sql);
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *fx = *state;

    hc_store_close(fx->st);
    free(fx);
    return 0;
}

static hc_store_delta_t delta_n(const char *post_id, size_t len, int64_t d)
{
    hc_store_delta_t out = {.post_id = post_id, .post_id_len = len, .delta = d};
    return out;
}

static hc_store_delta_t delta(const char *post_id, int64_t d)
{
    return delta_n(post_id, strlen(post_id), d);
}

static hc_store_batch_t batch_of(const hc_store_offset_t *offsets, size_t offset_count,
                                 const hc_store_delta_t *deltas, size_t delta_count)
{
    hc_store_batch_t b = {
        .group = group,
        .topic = TOPIC,
        .offsets = offsets,
        .offset_count = offset_count,
        .deltas = deltas,
        .delta_count = delta_count,
        .now_ms = NOW_MS,
    };
    return b;
}

static void apply_ok(fixture_t *fx, const hc_store_batch_t *b)
{
    hc_err_t err = hc_store_apply(fx->st, b, fx->errstr, sizeof(fx->errstr));

    if (err != HC_OK) {
        fail_msg("apply: %s: %s", hc_err_name(err), fx->errstr);
    }
}

static int64_t likes_n(hc_store_t *st, const char *post_id, size_t len)
{
    char errstr[512];
    int64_t likes = -12345;

    if (hc_store_get(st, &post_id, &len, 1, &likes, errstr, sizeof(errstr)) != HC_OK) {
        fail_msg("get: %s", errstr);
    }
    return likes;
}

static int64_t likes_of(hc_store_t *st, const char *post_id)
{
    return likes_n(st, post_id, strlen(post_id));
}

static int64_t offset_of(hc_store_t *st, int32_t partition)
{
    char errstr[512];
    int64_t off = 0;

    if (hc_store_read_offsets(st, group, TOPIC, &partition, 1, &off, errstr, sizeof(errstr)) !=
        HC_OK) {
        fail_msg("read_offsets: %s", errstr);
    }
    return off;
}

static void prefixed(char *buf, size_t size, const char *name)
{
    snprintf(buf, size, "%s%s", prefix, name);
}

static int64_t row_count(void)
{
    char sql[256];

    snprintf(sql, sizeof(sql), "SELECT count(*) FROM %s.hotcount_counts", run_id);
    return admin_int(sql, 0, NULL);
}

/* ---- tests ---- */

static void kind_is_postgresql(void **state)
{
    fixture_t *fx = *state;

    assert_string_equal(hc_store_kind(fx->st), "postgresql");
}

static void schema_matches_contract_layout(void **state)
{
    static const struct {
        const char *table;
        const char *column;
        const char *type;
    } want[] = {
        {"hotcount_counts", "post_id", "text"},
        {"hotcount_counts", "likes", "bigint"},
        {"hotcount_counts", "updated_at", "timestamp with time zone"},
        {"hotcount_offsets", "consumer_group", "text"},
        {"hotcount_offsets", "topic", "text"},
        {"hotcount_offsets", "partition", "integer"},
        {"hotcount_offsets", "next_offset", "bigint"},
    };
    char sql[512];
    const char *params[3];
    PGresult *res;
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        params[0] = run_id;
        params[1] = want[i].table;
        params[2] = want[i].column;
        res = admin_exec("SELECT data_type FROM information_schema.columns"
                         " WHERE table_schema = $1 AND table_name = $2 AND column_name = $3",
                         3, params);
        assert_int_equal(PQntuples(res), 1);
        assert_string_equal(PQgetvalue(res, 0, 0), want[i].type);
        PQclear(res);
    }
    snprintf(sql, sizeof(sql),
             "SELECT string_agg(a.attname, ',' ORDER BY k.n) FROM pg_index i"
             " CROSS JOIN unnest(i.indkey) WITH ORDINALITY AS k(attnum, n)"
             " JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum"
             " WHERE i.indrelid = '%s.hotcount_offsets'::regclass AND i.indisprimary",
             run_id);
    res = admin_exec(sql, 0, NULL);
    assert_string_equal(PQgetvalue(res, 0, 0), "consumer_group,topic,partition");
    PQclear(res);
}

/* Ids that break text array literals, COPY text, LIKE patterns or naive quoting. */
static const char *const nasty_ids[] = {
    "\"",
    "\\",
    "\\\\\"",
    "\\N",
    "{",
    "}",
    "{}",
    "{\"a\",\"b\"}",
    "[1:2]={1,2}",
    ",",
    "a,b",
    " ",
    "  leading",
    "trailing  ",
    "NULL",
    "null",
    "'",
    "it's",
    "''; DROP TABLE hotcount_counts; --",
    "$1",
    "%_",
    "(1,2)",
    "a\xc2\xa0"
    "b",                        /* no-break space */
    "\xc3\xa9t\xc3\xa9",        /* été */
    "\xe6\x97\xa5\xe6\x9c\xac", /* 日本 */
    "\xf0\x9f\x8e\x89",         /* U+1F389 */
    "\xef\xbb\xbf"
    "bom", /* U+FEFF first */
};

static void nasty_post_ids_round_trip(void **state)
{
    fixture_t *fx = *state;
    enum { N_FIXED = sizeof(nasty_ids) / sizeof(nasty_ids[0]), N = N_FIXED + 3 };
    char ascii256[HC_POST_ID_MAX + 1];
    char emoji256[HC_POST_ID_MAX + 1];
    char mixed256[HC_POST_ID_MAX + 1];
    const char *ids[N];
    size_t lens[N];
    hc_store_delta_t deltas[N];
    int64_t likes[N];
    hc_store_row_t *rows;
    size_t count = 0;
    hc_store_offset_t off = {.partition = 0, .expected = HC_OFFSET_NONE, .next = 1};
    hc_store_batch_t b;
    char sql[256];
    const char *params[1];
    size_t i;
    size_t j;

    memset(ascii256, 'x', HC_POST_ID_MAX);
    ascii256[HC_POST_ID_MAX] = '\0';
    for (i = 0; i < HC_POST_ID_MAX; i += 4) {
        memcpy(emoji256 + i, "\xf0\x9f\x98\x80", 4); /* U+1F600, 64 of them */
    }
    emoji256[HC_POST_ID_MAX] = '\0';
    for (i = 0; i + 3 <= HC_POST_ID_MAX - 1; i += 3) {
        memcpy(mixed256 + i, "\xe6\x97\xa5", 3); /* 85 x U+65E5, then one byte */
    }
    mixed256[i] = '"';
    mixed256[HC_POST_ID_MAX] = '\0';
    assert_int_equal(strlen(emoji256), HC_POST_ID_MAX);
    assert_int_equal(strlen(mixed256), HC_POST_ID_MAX);

    for (i = 0; i < N_FIXED; i++) {
        ids[i] = nasty_ids[i];
    }
    ids[N_FIXED] = ascii256;
    ids[N_FIXED + 1] = emoji256;
    ids[N_FIXED + 2] = mixed256;
    for (i = 0; i < N; i++) {
        lens[i] = strlen(ids[i]);
        deltas[i] = delta_n(ids[i], lens[i], (int64_t)i + 1);
    }
    b = batch_of(&off, 1, deltas, N);
    apply_ok(fx, &b);
    /* Again, through the update path. */
    off.expected = 1;
    off.next = 2;
    apply_ok(fx, &b);

    assert_int_equal(hc_store_get(fx->st, ids, lens, N, likes, fx->errstr, sizeof(fx->errstr)),
                     HC_OK);
    for (i = 0; i < N; i++) {
        assert_int_equal(likes[i], 2 * ((int64_t)i + 1));
    }
    assert_int_equal(row_count(), N);

    /* The stored bytes are the ids' bytes, as psql would show them. */
    snprintf(sql, sizeof(sql), "SELECT likes FROM %s.hotcount_counts WHERE post_id = $1", run_id);
    for (i = 0; i < N; i++) {
        params[0] = ids[i];
        assert_int_equal(admin_int(sql, 1, params), 2 * ((int64_t)i + 1));
    }

    /* top hands back the exact bytes. */
    rows = calloc(N, sizeof(*rows));
    assert_non_null(rows);
    assert_int_equal(hc_store_top(fx->st, N, rows, &count, fx->errstr, sizeof(fx->errstr)), HC_OK);
    assert_int_equal(count, N);
    for (i = 0; i < N; i++) {
        j = N - 1 - i; /* largest delta first */
        assert_int_equal(rows[i].post_id_len, lens[j]);
        assert_memory_equal(rows[i].post_id, ids[j], lens[j]);
        assert_int_equal(rows[i].post_id[lens[j]], '\0');
        assert_int_equal(rows[i].likes, 2 * ((int64_t)j + 1));
    }
    free(rows);
}

typedef struct seen {
    const char *const *ids;
    const size_t *lens;
    size_t n;
    int found[64];
    size_t rows;
    int64_t sum;
    size_t stop_after; /* 0: never stop */
} seen_t;

static bool collect(const char *post_id, size_t post_id_len, int64_t likes, void *opaque)
{
    seen_t *s = opaque;
    size_t i;

    s->rows++;
    s->sum += likes;
    for (i = 0; i < s->n; i++) {
        if (post_id_len == s->lens[i] && memcmp(post_id, s->ids[i], post_id_len) == 0) {
            s->found[i]++;
        }
    }
    return s->stop_after == 0 || s->rows < s->stop_after;
}

static void foreach_hands_back_exact_bytes(void **state)
{
    fixture_t *fx = *state;
    enum { N = sizeof(nasty_ids) / sizeof(nasty_ids[0]) };
    hc_store_delta_t deltas[N];
    size_t lens[N];
    seen_t seen;
    hc_store_batch_t b;
    size_t i;

    for (i = 0; i < N; i++) {
        lens[i] = strlen(nasty_ids[i]);
        deltas[i] = delta_n(nasty_ids[i], lens[i], 1);
    }
    b = batch_of(NULL, 0, deltas, N);
    apply_ok(fx, &b);

    memset(&seen, 0, sizeof(seen));
    seen.ids = nasty_ids;
    seen.lens = lens;
    seen.n = N;
    assert_int_equal(hc_store_foreach(fx->st, collect, &seen, fx->errstr, sizeof(fx->errstr)),
                     HC_OK);
    assert_int_equal(seen.rows, N);
    for (i = 0; i < N; i++) {
        assert_int_equal(seen.found[i], 1);
    }

    /* Stopping early ends the walk and leaves the handle usable. */
    memset(&seen, 0, sizeof(seen));
    seen.stop_after = 3;
    assert_int_equal(hc_store_foreach(fx->st, collect, &seen, fx->errstr, sizeof(fx->errstr)),
                     HC_OK);
    assert_int_equal(seen.rows, 3);
    assert_int_equal(likes_of(fx->st, "{}"), 1);
}

static void get_answers_zero_for_what_cannot_be_stored(void **state)
{
    fixture_t *fx = *state;
    char known[80];
    char unknown[80];
    char too_long[HC_POST_ID_MAX + 2];
    const char *ids[7];
    size_t lens[7];
    int64_t likes[7];
    hc_store_delta_t d;
    hc_store_batch_t b;
    size_t i;

    prefixed(known, sizeof(known), "known");
    prefixed(unknown, sizeof(unknown), "unknown");
    memset(too_long, 'x', sizeof(too_long) - 1);
    too_long[sizeof(too_long) - 1] = '\0';
    d = delta(known, 7);
    b = batch_of(NULL, 0, &d, 1);
    apply_ok(fx, &b);

    ids[0] = unknown;
    ids[1] = "a\0b"; /* NUL inside */
    ids[2] = "\xff\xfe";
    ids[3] = "\xed\xa0\x80"; /* a surrogate */
    ids[4] = too_long;
    ids[5] = "";
    ids[6] = known; /* after the odd ones: positions must still line up */
    for (i = 0; i < 7; i++) {
        lens[i] = strlen(ids[i]);
    }
    lens[1] = 3;
    assert_int_equal(hc_store_get(fx->st, ids, lens, 7, likes, fx->errstr, sizeof(fx->errstr)),
                     HC_OK);
    for (i = 0; i < 6; i++) {
        assert_int_equal(likes[i], 0);
    }
    assert_int_equal(likes[6], 7);
}

static void invalid_utf8_delta_is_a_bad_record_and_changes_nothing(void **state)
{
    fixture_t *fx = *state;
    char good[80];
    hc_store_offset_t off = {.partition = 0, .expected = HC_OFFSET_NONE, .next = 3};
    hc_store_delta_t deltas[2];
    hc_store_batch_t b;

    size_t refused = 99;

    prefixed(good, sizeof(good), "good");
    deltas[0] = delta(good, 1);
    deltas[1] = delta("bad\xc3", 1);
    b = batch_of(&off, 1, deltas, 2);
    b.refused_out = &refused;
    /* a bad record (stage 2 sets the post aside), not a broken store */
    assert_int_equal(hc_store_apply(fx->st, &b, fx->errstr, sizeof(fx->errstr)), HC_ERR_RECORD);
    assert_non_null(strstr(fx->errstr, "delta 1"));
    assert_int_equal(refused, 1);
    /* a NUL byte likewise */
    deltas[1].post_id = "bad\0id";
    deltas[1].post_id_len = 6;
    refused = 99;
    assert_int_equal(hc_store_apply(fx->st, &b, fx->errstr, sizeof(fx->errstr)), HC_ERR_RECORD);
    assert_int_equal(refused, 1);
    assert_int_equal(likes_of(fx->st, good), 0);
    assert_true(offset_of(fx->st, 0) == HC_OFFSET_NONE);
}

static void stale_batch_changes_nothing(void **state)
{
    fixture_t *fx = *state;
    char a[80];
    char bb[80];
    char c[80];
    hc_store_offset_t offs[2] = {
        {.partition = 0, .expected = HC_OFFSET_NONE, .next = 10},
        {.partition = 1, .expected = HC_OFFSET_NONE, .next = 5},
    };
    hc_store_delta_t deltas[3];
    hc_store_batch_t b;
    char sql[256];
    int64_t stamp;

    prefixed(a, sizeof(a), "a");
    prefixed(bb, sizeof(bb), "b");
    prefixed(c, sizeof(c), "c");
    deltas[0] = delta(a, 3);
    deltas[1] = delta(bb, 4);
    b = batch_of(offs, 2, deltas, 2);
    apply_ok(fx, &b);
    snprintf(sql, sizeof(sql),
             "SELECT sum(extract(epoch FROM updated_at) * 1000)::bigint FROM %s.hotcount_counts",
             run_id);
    stamp = admin_int(sql, 0, NULL);

    /* Partition 0 matches, partition 1 is stale: nothing at all may move. */
    offs[0].expected = 10;
    offs[0].next = 20;
    offs[1].expected = 0;
    offs[1].next = 7;
    deltas[0] = delta(a, 100);
    deltas[1] = delta(c, 1);
    b = batch_of(offs, 2, deltas, 2);
    b.now_ms = NOW_MS + 60000;
    assert_int_equal(hc_store_apply(fx->st, &b, fx->errstr, sizeof(fx->errstr)), HC_ERR_CONFLICT);
    assert_non_null(strstr(fx->errstr, "stored next_offset 5"));
    assert_non_null(strstr(fx->errstr, "expected 0"));

    assert_int_equal(offset_of(fx->st, 0), 10);
    assert_int_equal(offset_of(fx->st, 1), 5);
    assert_int_equal(likes_of(fx->st, a), 3);
    assert_int_equal(likes_of(fx->st, bb), 4);
    assert_int_equal(likes_of(fx->st, c), 0);
    assert_int_equal(row_count(), 2);
    assert_int_equal(admin_int(sql, 0, NULL), stamp);

    /* The same batch with the true offsets lands. */
    offs[1].expected = 5;
    apply_ok(fx, &b);
    assert_int_equal(likes_of(fx->st, a), 103);
    assert_int_equal(likes_of(fx->st, c), 1);
    assert_int_equal(offset_of(fx->st, 0), 20);
    assert_int_equal(offset_of(fx->st, 1), 7);
}

static void offset_none_conflicts_when_row_exists(void **state)
{
    fixture_t *fx = *state;
    char a[80];
    hc_store_offset_t off = {.partition = 4, .expected = HC_OFFSET_NONE, .next = 8};
    hc_store_delta_t d;
    hc_store_batch_t b;

    prefixed(a, sizeof(a), "a");
    d = delta(a, 1);
    b = batch_of(&off, 1, &d, 1);
    apply_ok(fx, &b);

    /* A second "first" batch for the partition: the row exists now. */
    off.next = 9;
    assert_int_equal(hc_store_apply(fx->st, &b, fx->errstr, sizeof(fx->errstr)), HC_ERR_CONFLICT);
    assert_non_null(strstr(fx->errstr, "stored next_offset 8"));
    assert_int_equal(offset_of(fx->st, 4), 8);
    assert_int_equal(likes_of(fx->st, a), 1);

    /* And an expected offset where no row exists. */
    off.partition = 5;
    off.expected = 0;
    assert_int_equal(hc_store_apply(fx->st, &b, fx->errstr, sizeof(fx->errstr)), HC_ERR_CONFLICT);
    assert_non_null(strstr(fx->errstr, "stored next_offset none"));
    assert_true(offset_of(fx->st, 5) == HC_OFFSET_NONE);
    assert_int_equal(likes_of(fx->st, a), 1);
}

static void post_listed_twice_is_summed(void **state)
{
    fixture_t *fx = *state;
    char a[80];
    char bb[80];
    hc_store_delta_t deltas[3];
    hc_store_batch_t b;

    prefixed(a, sizeof(a), "a");
    prefixed(bb, sizeof(bb), "b");
    deltas[0] = delta(a, 1);
    deltas[1] = delta(bb, 10);
    deltas[2] = delta(a, 2);
    b = batch_of(NULL, 0, deltas, 3);
    apply_ok(fx, &b);
    assert_int_equal(likes_of(fx->st, a), 3);
    assert_int_equal(likes_of(fx->st, bb), 10);
}

static void updated_at_is_the_batch_time(void **state)
{
    fixture_t *fx = *state;
    char a[80];
    char sql[256];
    const char *params[1];
    hc_store_delta_t d;
    hc_store_batch_t b;

    prefixed(a, sizeof(a), "a");
    d = delta(a, 1);
    b = batch_of(NULL, 0, &d, 1);
    apply_ok(fx, &b);
    snprintf(sql, sizeof(sql),
             "SELECT round(extract(epoch FROM updated_at) * 1000)::bigint"
             " FROM %s.hotcount_counts WHERE post_id = $1",
             run_id);
    params[0] = a;
    assert_int_equal(admin_int(sql, 1, params), NOW_MS);
    b.now_ms = NOW_MS + 5000;
    apply_ok(fx, &b);
    assert_int_equal(admin_int(sql, 1, params), NOW_MS + 5000);
}

static void top_breaks_ties_in_byte_order(void **state)
{
    fixture_t *fx = *state;
    hc_store_delta_t deltas[6] = {
        delta("b", 5),        delta("a", 5), delta("B", 5),
        delta("\xc3\xa9", 5), delta("c", 9), delta("a ", 5),
    };
    static const char *const want[] = {"c", "B", "a", "a ", "b", "\xc3\xa9"};
    hc_store_row_t rows[8];
    size_t count = 0;
    hc_store_batch_t b = batch_of(NULL, 0, deltas, 6);
    size_t i;

    apply_ok(fx, &b);
    assert_int_equal(hc_store_top(fx->st, 8, rows, &count, fx->errstr, sizeof(fx->errstr)), HC_OK);
    assert_int_equal(count, 6);
    for (i = 0; i < 6; i++) {
        assert_string_equal(rows[i].post_id, want[i]);
    }
    assert_int_equal(hc_store_top(fx->st, 2, rows, &count, fx->errstr, sizeof(fx->errstr)), HC_OK);
    assert_int_equal(count, 2);
    assert_string_equal(rows[1].post_id, "B");
}

/* ---- two handles racing on one partition ---- */

#define RACE_COMMITS 150

typedef struct racer {
    const char *uri;
    const char *shared; /* post both racers add to */
    char own[80];       /* post only this racer adds to */
    int64_t added;      /* sum of the deltas this racer committed */
    int commits;
    int conflicts;
    char failure[600]; /* cmocka asserts only on the main thread */
    pthread_barrier_t *start;
} racer_t;

static void *race(void *arg)
{
    racer_t *r = arg;
    hc_config_t cfg;
    hc_store_t *st = NULL;
    char uri[1024];
    char errstr[512];
    int32_t partition = 0;
    int64_t expected;
    hc_store_offset_t off;
    hc_store_delta_t deltas[2];
    hc_store_batch_t b;
    hc_err_t err;
    int attempts = 0;
    int64_t k;

    snprintf(uri, sizeof(uri), "%s", r->uri);
    config_for(&cfg, uri);
    err = hc_store_open(&cfg, &st, errstr, sizeof(errstr));
    pthread_barrier_wait(r->start);
    if (err != HC_OK) {
        snprintf(r->failure, sizeof(r->failure), "open: %s", errstr);
        return NULL;
    }
    while (r->commits < RACE_COMMITS && attempts++ < RACE_COMMITS * 50) {
        err = hc_store_read_offsets(st, group, TOPIC, &partition, 1, &expected, errstr,
                                    sizeof(errstr));
        if (err != HC_OK) {
            snprintf(r->failure, sizeof(r->failure), "read_offsets: %s", errstr);
            break;
        }
        k = 1 + attempts % 7;
        off.partition = 0;
        off.expected = expected;
        off.next = (expected == HC_OFFSET_NONE ? 0 : expected) + k;
        deltas[0] = delta(r->shared, k);
        deltas[1] = delta(r->own, k);
        b = batch_of(&off, 1, deltas, 2);
        err = hc_store_apply(st, &b, errstr, sizeof(errstr));
        if (err == HC_OK) {
            r->commits++;
            r->added += k;
        } else if (err == HC_ERR_CONFLICT) {
            r->conflicts++;
        } else {
            snprintf(r->failure, sizeof(r->failure), "apply: %s: %s", hc_err_name(err), errstr);
            break;
        }
    }
    hc_store_close(st);
    return NULL;
}

static void racing_handles_count_each_commit_once(void **state)
{
    fixture_t *fx = *state;
    enum { RACERS = 3 };
    racer_t racers[RACERS];
    pthread_t threads[RACERS];
    pthread_barrier_t start;
    char shared[80];
    int64_t total = 0;
    int conflicts = 0;
    int i;

    prefixed(shared, sizeof(shared), "shared");
    assert_int_equal(pthread_barrier_init(&start, NULL, RACERS), 0);
    for (i = 0; i < RACERS; i++) {
        memset(&racers[i], 0, sizeof(racers[i]));
        racers[i].uri = fx->uri;
        racers[i].shared = shared;
        racers[i].start = &start;
        snprintf(racers[i].own, sizeof(racers[i].own), "%sown-%d", prefix, i);
        assert_int_equal(pthread_create(&threads[i], NULL, race, &racers[i]), 0);
    }
    for (i = 0; i < RACERS; i++) {
        pthread_join(threads[i], NULL);
    }
    pthread_barrier_destroy(&start);
    for (i = 0; i < RACERS; i++) {
        if (racers[i].failure[0] != '\0') {
            fail_msg("racer %d: %s", i, racers[i].failure);
        }
        assert_int_equal(racers[i].commits, RACE_COMMITS);
        assert_int_equal(likes_of(fx->st, racers[i].own), racers[i].added);
        total += racers[i].added;
        conflicts += racers[i].conflicts;
    }
    print_message("%d racers, %d commits each, %d lost compare-and-sets\n", RACERS, RACE_COMMITS,
                  conflicts);
    assert_int_equal(likes_of(fx->st, shared), total);
    assert_int_equal(offset_of(fx->st, 0), total);
}

/* ---- large batches ---- */

static void count_progress(void *opaque)
{
    (*(int *)opaque)++;
}

static void large_batch_applies(void **state)
{
    fixture_t *fx = *state;
    enum { N = 100000 };
    char(*names)[80] = calloc(N, sizeof(*names));
    hc_store_delta_t *deltas = calloc(N, sizeof(*deltas));
    const char **ids = calloc(N, sizeof(*ids));
    size_t *lens = calloc(N, sizeof(*lens));
    int64_t *likes = calloc(N, sizeof(*likes));
    hc_store_offset_t off = {.partition = 0, .expected = HC_OFFSET_NONE, .next = N};
    hc_store_batch_t b;
    seen_t seen;
    int64_t sum = 0;
    int progress = 0;
    double t0;
    double t_insert;
    double t_update;
    size_t i;

    assert_true(names != NULL && deltas != NULL && ids != NULL && lens != NULL && likes != NULL);
    for (i = 0; i < N; i++) {
        /* Not in key order, so that the backend's own ordering is what the server sees. */
        snprintf(names[i], sizeof(names[i]), "%s%06zu", prefix, (i * 7919) % N);
        ids[i] = names[i];
        lens[i] = strlen(names[i]);
        deltas[i] = delta_n(names[i], lens[i], (int64_t)(i % 13) - 3);
        sum += deltas[i].delta;
    }
    b = batch_of(&off, 1, deltas, N);
    b.on_progress = count_progress;
    b.progress_opaque = &progress;
    t0 = now_s();
    apply_ok(fx, &b);
    t_insert = now_s() - t0;
    assert_int_equal(progress, 2); /* one call per upsert of 65 536 posts */
    off.expected = N;
    off.next = 2 * N;
    t0 = now_s();
    apply_ok(fx, &b);
    t_update = now_s() - t0;
    assert_int_equal(progress, 4);
    print_message("100k-delta batch: %.3f s as inserts, %.3f s as updates\n", t_insert, t_update);

    /* get in one call, more ids than one statement takes. */
    assert_int_equal(hc_store_get(fx->st, ids, lens, N, likes, fx->errstr, sizeof(fx->errstr)),
                     HC_OK);
    for (i = 0; i < N; i++) {
        assert_int_equal(likes[i], 2 * deltas[i].delta);
    }
    /* foreach over more rows than one FETCH brings. */
    memset(&seen, 0, sizeof(seen));
    assert_int_equal(hc_store_foreach(fx->st, collect, &seen, fx->errstr, sizeof(fx->errstr)),
                     HC_OK);
    assert_int_equal(seen.rows, N);
    assert_int_equal(seen.sum, 2 * sum);
    assert_int_equal(offset_of(fx->st, 0), 2 * N);

    free(names);
    free(deltas);
    free(ids);
    free(lens);
    free(likes);
}

/* ---- lost connections and timeouts ---- */

/* Terminates the store's backend (found by its application_name) and waits until it is gone. */
static void kill_backend(const char *app_name)
{
    const char *params[1] = {app_name};
    int i;

    assert_int_equal(admin_int("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                               " WHERE application_name = $1",
                               1, params),
                     1);
    for (i = 0; i < 500; i++) {
        if (admin_int("SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", 1,
                      params) == 0) {
            return;
        }
        usleep(10000);
    }
    fail_msg("backend %s still there", app_name);
}

static void killed_connection_is_transient_then_reconnects(void **state)
{
    fixture_t *fx = *state;
    fixture_t victim;
    char app_name[80];
    char extra[100];
    char a[80];
    int32_t partition = 0;
    int64_t off_out;
    hc_store_offset_t off = {.partition = 0, .expected = HC_OFFSET_NONE, .next = 5};
    hc_store_delta_t d;
    hc_store_batch_t b;

    memset(&victim, 0, sizeof(victim));
    snprintf(app_name, sizeof(app_name), "%s_victim", run_id);
    snprintf(extra, sizeof(extra), "application_name=%s", app_name);
    open_store(&victim, run_id, NULL, extra);
    prefixed(a, sizeof(a), "a");
    d = delta(a, 1);
    b = batch_of(&off, 1, &d, 1);

    /* A read on a dead connection: transient, then the next call reconnects. */
    assert_true(offset_of(victim.st, 0) == HC_OFFSET_NONE);
    kill_backend(app_name);
    assert_int_equal(hc_store_read_offsets(victim.st, group, TOPIC, &partition, 1, &off_out,
                                           victim.errstr, sizeof(victim.errstr)),
                     HC_ERR_TRANSIENT);
    assert_true(offset_of(victim.st, 0) == HC_OFFSET_NONE);

    /* A batch on a dead connection: transient, nothing written; the retry lands once. */
    kill_backend(app_name);
    assert_int_equal(hc_store_apply(victim.st, &b, victim.errstr, sizeof(victim.errstr)),
                     HC_ERR_TRANSIENT);
    assert_null(strstr(victim.errstr, base_uri));
    assert_int_equal(likes_of(fx->st, a), 0);
    assert_true(offset_of(fx->st, 0) == HC_OFFSET_NONE);
    if (hc_store_apply(victim.st, &b, victim.errstr, sizeof(victim.errstr)) != HC_OK) {
        fail_msg("apply after reconnect: %s", victim.errstr);
    }
    assert_int_equal(likes_of(fx->st, a), 1);
    assert_int_equal(offset_of(fx->st, 0), 5);
    /* The statements were prepared again: every kind of call works. */
    assert_int_equal(likes_of(victim.st, a), 1);
    hc_store_close(victim.st);
}

static void statement_timeout_is_transient(void **state)
{
    fixture_t *fx = *state;
    fixture_t waiter;
    char a[80];
    char sql[256];
    const char *params[1] = {group};
    hc_store_offset_t off = {.partition = 0, .expected = HC_OFFSET_NONE, .next = 5};
    hc_store_delta_t d;
    hc_store_batch_t b;
    double t0;
    double waited;
    hc_err_t err;

    prefixed(a, sizeof(a), "a");
    d = delta(a, 1);
    b = batch_of(&off, 1, &d, 1);
    apply_ok(fx, &b);

    /* The URI's own statement_timeout wins over the backend's default of 30 s. */
    memset(&waiter, 0, sizeof(waiter));
    open_store(&waiter, run_id, "%20-c%20statement_timeout%3D700", NULL);
    off.expected = 5;
    off.next = 6;

    /* Someone else holds the offsets row: the batch waits for it, up to the timeout. */
    admin_cmd("BEGIN");
    snprintf(sql, sizeof(sql),
             "SELECT next_offset FROM %s.hotcount_offsets WHERE consumer_group = $1 FOR UPDATE",
             run_id);
    PQclear(admin_exec(sql, 1, params));
    t0 = now_s();
    err = hc_store_apply(waiter.st, &b, waiter.errstr, sizeof(waiter.errstr));
    waited = now_s() - t0;
    admin_cmd("ROLLBACK");
    if (err != HC_ERR_TRANSIENT) {
        fail_msg("apply while the row is locked: %s: %s", hc_err_name(err), waiter.errstr);
    }
    assert_non_null(strstr(waiter.errstr, "57014"));
    assert_true(waited >= 0.6 && waited < 10);

    /* Nothing moved, and the same handle goes on. */
    assert_int_equal(offset_of(fx->st, 0), 5);
    assert_int_equal(likes_of(fx->st, a), 1);
    if (hc_store_apply(waiter.st, &b, waiter.errstr, sizeof(waiter.errstr)) != HC_OK) {
        fail_msg("apply after timeout: %s", waiter.errstr);
    }
    assert_int_equal(likes_of(fx->st, a), 2);
    hc_store_close(waiter.st);
}

/* ---- "not now": every SQLSTATE that a retry cures ---- */

/* Makes every upsert into this run's counts table fail with SQLSTATE code (NULL: stops it). */
static void counts_fail_with(const char *code)
{
    char sql[512];

    snprintf(sql, sizeof(sql), "DROP TRIGGER IF EXISTS hc_inject ON %s.hotcount_counts", run_id);
    admin_cmd(sql);
    if (code == NULL) {
        return;
    }
    snprintf(sql, sizeof(sql),
             "CREATE OR REPLACE FUNCTION %s.hc_inject() RETURNS trigger LANGUAGE plpgsql AS $f$"
             " BEGIN RAISE EXCEPTION 'injected by the test' USING ERRCODE = '%s'; END $f$",
             run_id, code);
    admin_cmd(sql);
    snprintf(sql, sizeof(sql),
             "CREATE TRIGGER hc_inject BEFORE INSERT ON %s.hotcount_counts"
             " FOR EACH STATEMENT EXECUTE FUNCTION %s.hc_inject()",
             run_id, run_id);
    admin_cmd(sql);
}

/* Each SQLSTATE that means "not now" (statement and lock timeouts, too many connections,
 * serialization failure, deadlock, shutdown and start-up, a connection failure) makes a batch
 * HC_ERR_TRANSIENT at once, naming the code, with nothing changed: the offsets it had already
 * moved in its transaction are back, the count untouched; once the cause is gone the same batch
 * applies exactly once (on_progress once, for its one chunk). An error no retry cures stays
 * HC_ERR_FATAL. Mutants caught: any of those codes left out of sqlstate_class. */
static void not_now_sqlstates_are_transient_and_change_nothing(void **state)
{
    static const struct {
        const char *code;
        hc_err_t want;
    } cases[] = {
        {"57014", HC_ERR_TRANSIENT}, {"55P03", HC_ERR_TRANSIENT}, {"53300", HC_ERR_TRANSIENT},
        {"40001", HC_ERR_TRANSIENT}, {"40P01", HC_ERR_TRANSIENT}, {"57P01", HC_ERR_TRANSIENT},
        {"57P02", HC_ERR_TRANSIENT}, {"57P03", HC_ERR_TRANSIENT}, {"08006", HC_ERR_TRANSIENT},
        {"22012", HC_ERR_FATAL},
    };
    fixture_t *fx = *state;
    hc_store_offset_t off = {.partition = 0, .expected = HC_OFFSET_NONE, .next = 5};
    char a[80];
    hc_store_delta_t d;
    hc_store_batch_t b;
    int progress = 0;
    size_t i;

    prefixed(a, sizeof(a), "a");
    d = delta(a, 1);
    b = batch_of(&off, 1, &d, 1);
    apply_ok(fx, &b);
    b.on_progress = count_progress;
    b.progress_opaque = &progress;
    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        hc_err_t err;

        off.expected = (int64_t)i + 5;
        off.next = (int64_t)i + 6;
        counts_fail_with(cases[i].code);
        progress = 0;
        err = hc_store_apply(fx->st, &b, fx->errstr, sizeof(fx->errstr));
        if (err != cases[i].want || strstr(fx->errstr, cases[i].code) == NULL) {
            fail_msg("SQLSTATE %s: %s (%s), want %s", cases[i].code, hc_err_name(err), fx->errstr,
                     hc_err_name(cases[i].want));
        }
        assert_int_equal(progress, 0);
        assert_int_equal(offset_of(fx->st, 0), (int64_t)i + 5);
        assert_int_equal(likes_of(fx->st, a), (int64_t)i + 1);
        counts_fail_with(NULL);
        apply_ok(fx, &b);
        assert_int_equal(progress, 1);
        assert_int_equal(offset_of(fx->st, 0), (int64_t)i + 6);
        assert_int_equal(likes_of(fx->st, a), (int64_t)i + 2);
    }
}

/* Runs a batch on a store whose statements are bounded as `options` say (URI options) and whose
 * whole batch by batch_ms (0: the default) while another session holds the row of post `a`:
 * the batch must be HC_ERR_TRANSIENT naming `want` within `bound` seconds and change nothing;
 * once the row is free it applies exactly once. */
static void blocked_batch_case(fixture_t *fx, const char *options, int64_t batch_ms,
                               const char *want, double bound)
{
    fixture_t waiter;
    char a[80];
    char sql[256];
    const char *params[1];
    hc_store_offset_t off = {.partition = 0, .expected = HC_OFFSET_NONE, .next = 5};
    hc_store_delta_t d;
    hc_store_batch_t b;
    double t0;
    double waited;
    hc_err_t err;
    int i;

    prefixed(a, sizeof(a), "a");
    d = delta(a, 1);
    b = batch_of(&off, 1, &d, 1);
    apply_ok(fx, &b);

    memset(&waiter, 0, sizeof(waiter));
    uri_for(waiter.uri, sizeof(waiter.uri), run_id, options, NULL);
    config_for(&waiter.cfg, waiter.uri);
    if (batch_ms > 0) {
        char ignored[256];
        (void)hc_timeouts_derive(&waiter.cfg, &waiter.cfg.timeouts, ignored, sizeof(ignored));
        waiter.cfg.timeouts.store_batch_ms = batch_ms;
    }
    if (hc_store_open(&waiter.cfg, &waiter.st, waiter.errstr, sizeof(waiter.errstr)) != HC_OK) {
        fail_msg("open: %s", waiter.errstr);
    }
    off.expected = 5;
    off.next = 6;

    /* Another session holds the post's row: the batch moves its offset, then waits in the
     * upsert, past its bound. */
    admin_cmd("BEGIN");
    snprintf(sql, sizeof(sql), "SELECT likes FROM %s.hotcount_counts WHERE post_id = $1 FOR UPDATE",
             run_id);
    params[0] = a;
    PQclear(admin_exec(sql, 1, params));
    t0 = now_s();
    err = hc_store_apply(waiter.st, &b, waiter.errstr, sizeof(waiter.errstr));
    waited = now_s() - t0;
    if (err != HC_ERR_TRANSIENT || strstr(waiter.errstr, want) == NULL) {
        admin_cmd("ROLLBACK");
        fail_msg("apply while the count's row is locked: %s (%s), want HC_ERR_TRANSIENT (%s)",
                 hc_err_name(err), waiter.errstr, want);
    }
    /* Nothing moved, as the lock holder sees it too (an uncommitted offset would show here
     * only to its own session; what matters is that it never commits). */
    assert_int_equal(offset_of(fx->st, 0), 5);
    assert_int_equal(likes_of(fx->st, a), 1);
    admin_cmd("ROLLBACK");
    if (waited > bound) {
        fail_msg("the blocked batch gave up after %.2f s, past %.1f s", waited, bound);
    }
    /* The same batch once the row is free: exactly once (a backend left behind by a dropped
     * connection rolls back when it finds its client gone, so the retry may wait for it). */
    for (i = 0; i < 50; i++) {
        err = hc_store_apply(waiter.st, &b, waiter.errstr, sizeof(waiter.errstr));
        if (err != HC_ERR_TRANSIENT) {
            break;
        }
        usleep(100000);
    }
    if (err != HC_OK) {
        fail_msg("apply after the lock: %s: %s", hc_err_name(err), waiter.errstr);
    }
    assert_int_equal(offset_of(fx->st, 0), 6);
    assert_int_equal(likes_of(fx->st, a), 2);
    hc_store_close(waiter.st);
}

/* A batch blocked on a count's row held by another session past the statement bound: the
 * server's statement_timeout (57014), its lock_timeout (55P03), or, with neither set low, the
 * store's own bound on the whole batch (store_batch_ms: the connection dropped) ends it with
 * HC_ERR_TRANSIENT, the offset it had moved rolled back, the count untouched. Mutants caught:
 * 57014 or 55P03 classified HC_ERR_FATAL; the batch deadline not applied to its statements
 * (the wait would last the 30 s statement_timeout). */
static void batch_blocked_on_a_count_changes_nothing(void **state)
{
    fixture_t *fx = *state;
    char sql[256];

    blocked_batch_case(fx, "%20-c%20statement_timeout%3D700", 0, "57014", 10.0);
    snprintf(sql, sizeof(sql), "TRUNCATE %s.hotcount_counts, %s.hotcount_offsets", run_id, run_id);
    admin_cmd(sql);
    blocked_batch_case(fx, "%20-c%20lock_timeout%3D300", 0, "55P03", 10.0);
    admin_cmd(sql);
    blocked_batch_case(fx, "", 800, "store_batch_ms", 5.0);
}

/* ---- a server that stops answering ----
 *
 * A TCP proxy between the store and the real server that can freeze: it keeps the connections
 * open and forwards nothing, like a server stuck on a dead disk. The kernel still acknowledges
 * everything, so neither TCP nor the server's statement_timeout ends the wait: only the
 * store's own deadline can. */

#define PROXY_PAIRS 8

typedef struct proxy {
    int listen_fd;
    int port;
    const char *up_host; /* the real server, as the admin connection reached it */
    const char *up_port;
    atomic_bool frozen;
    atomic_bool stop;
    int pair[PROXY_PAIRS][2]; /* client, upstream; -1 when free */
    pthread_t thread;
} proxy_t;

static int connect_upstream(const proxy_t *px)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM};
    struct addrinfo *ai = NULL;
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    int fd = -1;

    if (px->up_host[0] == '/') { /* a Unix socket directory */
        snprintf(sun.sun_path, sizeof(sun.sun_path), "%s/.s.PGSQL.%s", px->up_host, px->up_port);
        fd = socket(AF_UNIX, SOCK_STREAM, 0);
        if (fd >= 0 && connect(fd, (struct sockaddr *)&sun, sizeof(sun)) != 0) {
            close(fd);
            fd = -1;
        }
        return fd;
    }
    if (getaddrinfo(px->up_host, px->up_port, &hints, &ai) != 0) {
        return -1;
    }
    fd = socket(ai->ai_family, SOCK_STREAM, 0);
    if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        close(fd);
        fd = -1;
    }
    freeaddrinfo(ai);
    return fd;
}

static void pair_close(proxy_t *px, int i)
{
    close(px->pair[i][0]);
    close(px->pair[i][1]);
    px->pair[i][0] = -1;
    px->pair[i][1] = -1;
}

/* Copies what one side sent to the other; false when the pair is done. */
static bool forward(int from, int to)
{
    char buf[65536];
    ssize_t n = read(from, buf, sizeof(buf));
    ssize_t off = 0;
    ssize_t w;

    if (n <= 0) {
        return false;
    }
    while (off < n) {
        w = write(to, buf + off, (size_t)(n - off));
        if (w <= 0) {
            return false;
        }
        off += w;
    }
    return true;
}

/* Pairs an accepted client with a new upstream connection, or closes it. */
static void proxy_adopt(proxy_t *px, int fd)
{
    int i;

    for (i = 0; i < PROXY_PAIRS; i++) {
        if (px->pair[i][0] < 0) {
            px->pair[i][1] = connect_upstream(px);
            if (px->pair[i][1] >= 0) {
                px->pair[i][0] = fd;
                return;
            }
            break;
        }
    }
    close(fd);
}

static void *proxy_run(void *arg)
{
    proxy_t *px = arg;
    struct pollfd pfd[1 + 2 * PROXY_PAIRS];
    int idx[1 + 2 * PROXY_PAIRS];
    bool frozen;
    int n;
    int i;
    int fd;

    while (!atomic_load(&px->stop)) {
        frozen = atomic_load(&px->frozen);
        n = 0;
        pfd[n].fd = px->listen_fd;
        pfd[n++].events = POLLIN;
        for (i = 0; i < PROXY_PAIRS && !frozen; i++) {
            if (px->pair[i][0] >= 0) {
                idx[n] = i;
                pfd[n].fd = px->pair[i][0];
                pfd[n++].events = POLLIN;
                idx[n] = i;
                pfd[n].fd = px->pair[i][1];
                pfd[n++].events = POLLIN;
            }
        }
        if (poll(pfd, (nfds_t)n, 20) <= 0) {
            continue;
        }
        if ((pfd[0].revents & POLLIN) && (fd = accept(px->listen_fd, NULL, NULL)) >= 0) {
            proxy_adopt(px, fd);
        }
        for (i = 1; i < n; i++) {
            if (pfd[i].revents != 0 && px->pair[idx[i]][0] == pfd[i].fd &&
                !forward(pfd[i].fd, px->pair[idx[i]][1])) {
                pair_close(px, idx[i]);
            } else if (pfd[i].revents != 0 && px->pair[idx[i]][1] == pfd[i].fd &&
                       !forward(pfd[i].fd, px->pair[idx[i]][0])) {
                pair_close(px, idx[i]);
            }
        }
    }
    for (i = 0; i < PROXY_PAIRS; i++) {
        if (px->pair[i][0] >= 0) {
            pair_close(px, i);
        }
    }
    return NULL;
}

static void proxy_start(proxy_t *px)
{
    struct sockaddr_in sin = {.sin_family = AF_INET};
    socklen_t len = sizeof(sin);
    int i;

    memset(px, 0, sizeof(*px));
    for (i = 0; i < PROXY_PAIRS; i++) {
        px->pair[i][0] = -1;
        px->pair[i][1] = -1;
    }
    px->up_host = PQhost(admin);
    px->up_port = PQport(admin);
    atomic_init(&px->frozen, false);
    atomic_init(&px->stop, false);
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    px->listen_fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(px->listen_fd >= 0);
    assert_int_equal(bind(px->listen_fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
    assert_int_equal(listen(px->listen_fd, 8), 0);
    assert_int_equal(getsockname(px->listen_fd, (struct sockaddr *)&sin, &len), 0);
    px->port = ntohs(sin.sin_port);
    assert_int_equal(pthread_create(&px->thread, NULL, proxy_run, px), 0);
}

static void proxy_stop(proxy_t *px)
{
    atomic_store(&px->stop, true);
    pthread_join(px->thread, NULL);
    close(px->listen_fd);
}

static void hung_server_is_transient_then_reconnects(void **state)
{
    fixture_t victim;
    proxy_t px;
    char extra[80];
    int32_t partition = 0;
    int64_t off_out;
    double t0;
    double waited;
    hc_err_t err;

    (void)state; /* setup created the tables */
    proxy_start(&px);
    memset(&victim, 0, sizeof(victim));
    snprintf(extra, sizeof(extra), "host=127.0.0.1&port=%d", px.port);
    /* A short statement_timeout, so the client-side bound (it plus a grace of 15 s) comes
     * soon. */
    open_store(&victim, run_id, "%20-c%20statement_timeout%3D300", extra);
    assert_true(offset_of(victim.st, 0) == HC_OFFSET_NONE);

    atomic_store(&px.frozen, true);
    t0 = now_s();
    err = hc_store_read_offsets(victim.st, group, TOPIC, &partition, 1, &off_out, victim.errstr,
                                sizeof(victim.errstr));
    waited = now_s() - t0;
    atomic_store(&px.frozen, false);
    if (err != HC_ERR_TRANSIENT) {
        fail_msg("read_offsets on a frozen server: %s: %s", hc_err_name(err), victim.errstr);
    }
    assert_non_null(strstr(victim.errstr, "no answer"));
    print_message("frozen server: gave up after %.1f s\n", waited);
    assert_true(waited > 15.0 && waited < 30.0);

    /* The next call drops the stuck connection and starts a new one. */
    assert_true(offset_of(victim.st, 0) == HC_OFFSET_NONE);
    hc_store_close(victim.st);
    proxy_stop(&px);
}

/* ---- schema ---- */

typedef struct initer {
    const char *uri;
    pthread_barrier_t *start;
    hc_err_t err;
    char errstr[512];
} initer_t;

static void *init_concurrently(void *arg)
{
    initer_t *in = arg;
    hc_config_t cfg;
    hc_store_t *st = NULL;
    char uri[1024];

    snprintf(uri, sizeof(uri), "%s", in->uri);
    config_for(&cfg, uri);
    in->err = hc_store_open(&cfg, &st, in->errstr, sizeof(in->errstr));
    pthread_barrier_wait(in->start); /* every handle connected: the CREATEs collide */
    if (in->err == HC_OK) {
        in->err = hc_store_init_schema(st, in->errstr, sizeof(in->errstr));
    }
    hc_store_close(st);
    return NULL;
}

static void init_schema_repeated_and_concurrent(void **state)
{
    enum { INITERS = 8, ROUNDS = 5 };
    initer_t initers[INITERS];
    pthread_t threads[INITERS];
    pthread_barrier_t start;
    char schema[80];
    char uri[1024];
    fixture_t fx;
    hc_store_delta_t d = delta("x", 1);
    hc_store_batch_t b = batch_of(NULL, 0, &d, 1);
    int round;
    int i;

    (void)state;
    snprintf(schema, sizeof(schema), "%s_init", run_id);
    uri_for(uri, sizeof(uri), schema, NULL, NULL);
    /* Fresh, empty schemas: each round races to create the tables for real. */
    for (round = 0; round < ROUNDS; round++) {
        create_schema(schema);
        assert_int_equal(pthread_barrier_init(&start, NULL, INITERS), 0);
        for (i = 0; i < INITERS; i++) {
            memset(&initers[i], 0, sizeof(initers[i]));
            initers[i].uri = uri;
            initers[i].start = &start;
            assert_int_equal(pthread_create(&threads[i], NULL, init_concurrently, &initers[i]), 0);
        }
        for (i = 0; i < INITERS; i++) {
            pthread_join(threads[i], NULL);
        }
        pthread_barrier_destroy(&start);
        for (i = 0; i < INITERS; i++) {
            if (initers[i].err != HC_OK) {
                fail_msg("round %d, initer %d: %s: %s", round, i, hc_err_name(initers[i].err),
                         initers[i].errstr);
            }
        }
    }

    /* Repeating it keeps the data. */
    memset(&fx, 0, sizeof(fx));
    open_store(&fx, schema, NULL, NULL);
    apply_ok(&fx, &b);
    assert_int_equal(hc_store_init_schema(fx.st, fx.errstr, sizeof(fx.errstr)), HC_OK);
    assert_int_equal(hc_store_init_schema(fx.st, fx.errstr, sizeof(fx.errstr)), HC_OK);
    assert_int_equal(likes_of(fx.st, "x"), 1);
    hc_store_close(fx.st);
    drop_schema(schema);
}

static void calls_before_init_schema_are_fatal(void **state)
{
    char schema[80];
    fixture_t fx;
    int32_t partition = 0;
    int64_t off_out;

    (void)state;
    snprintf(schema, sizeof(schema), "%s_empty", run_id);
    create_schema(schema);
    memset(&fx, 0, sizeof(fx));
    open_store(&fx, schema, NULL, NULL);
    assert_int_equal(hc_store_read_offsets(fx.st, group, TOPIC, &partition, 1, &off_out, fx.errstr,
                                           sizeof(fx.errstr)),
                     HC_ERR_FATAL);
    assert_non_null(strstr(fx.errstr, "hotcount init"));
    /* Another process runs `hotcount init`: this handle then works without reopening. */
    {
        fixture_t other;

        memset(&other, 0, sizeof(other));
        open_store(&other, schema, NULL, NULL);
        assert_int_equal(hc_store_init_schema(other.st, other.errstr, sizeof(other.errstr)), HC_OK);
        hc_store_close(other.st);
    }
    assert_true(offset_of(fx.st, 0) == HC_OFFSET_NONE);
    hc_store_close(fx.st);
    drop_schema(schema);
}

/* ---- opening ---- */

static void open_expect(const char *uri, hc_err_t want)
{
    char buf[256];
    hc_config_t cfg;
    hc_store_t *st = (hc_store_t *)&cfg; /* must come back NULL */
    char errstr[512] = "";
    hc_err_t err;

    snprintf(buf, sizeof(buf), "%s", uri);
    config_for(&cfg, buf);
    err = hc_store_open(&cfg, &st, errstr, sizeof(errstr));
    if (err != want) {
        fail_msg("open: got %s, want %s: %s", hc_err_name(err), hc_err_name(want), errstr);
    }
    assert_null(st);
    assert_true(errstr[0] != '\0');
    assert_null(strstr(errstr, "s3cret"));
    assert_non_null(strstr(errstr, "`store`"));
}

static void open_refuses_bad_uris_without_the_password(void **state)
{
    (void)state;
    open_expect("postgresql://u:s3cret@[::1/db", HC_ERR_INVALID);
    open_expect("postgresql://u:s3cret%zz@localhost/db", HC_ERR_INVALID);
    open_expect("postgres://u:s3cret@localhost/db?no_such_option=s3cret", HC_ERR_INVALID);
    /* Nothing listens on port 1: an outage, worth a retry. */
    open_expect("postgresql://u:s3cret@127.0.0.1:1/db?connect_timeout=2", HC_ERR_TRANSIENT);
}

static void close_accepts_null(void **state)
{
    (void)state;
    hc_store_close(NULL);
}

/* ---- run ---- */

static int group_setup(void **state)
{
    (void)state;
    admin = PQconnectdb(base_uri);
    if (PQstatus(admin) != CONNECTION_OK) {
        fprintf(stderr, "cannot connect to HC_TEST_PG_URI: %s", PQerrorMessage(admin));
        return -1;
    }
    PQclear(PQexec(admin, "SET client_min_messages = warning"));
    create_schema(run_id);
    return 0;
}

static int group_teardown(void **state)
{
    char schema[80];

    (void)state;
    /* Also the schemas of tests that failed before their own cleanup. */
    snprintf(schema, sizeof(schema), "%s_init", run_id);
    drop_schema(schema);
    snprintf(schema, sizeof(schema), "%s_empty", run_id);
    drop_schema(schema);
    drop_schema(run_id);
    PQfinish(admin);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(kind_is_postgresql, setup, teardown),
        cmocka_unit_test_setup_teardown(schema_matches_contract_layout, setup, teardown),
        cmocka_unit_test_setup_teardown(nasty_post_ids_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(foreach_hands_back_exact_bytes, setup, teardown),
        cmocka_unit_test_setup_teardown(get_answers_zero_for_what_cannot_be_stored, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(invalid_utf8_delta_is_a_bad_record_and_changes_nothing,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(stale_batch_changes_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(offset_none_conflicts_when_row_exists, setup, teardown),
        cmocka_unit_test_setup_teardown(post_listed_twice_is_summed, setup, teardown),
        cmocka_unit_test_setup_teardown(updated_at_is_the_batch_time, setup, teardown),
        cmocka_unit_test_setup_teardown(top_breaks_ties_in_byte_order, setup, teardown),
        cmocka_unit_test_setup_teardown(racing_handles_count_each_commit_once, setup, teardown),
        cmocka_unit_test_setup_teardown(large_batch_applies, setup, teardown),
        cmocka_unit_test_setup_teardown(killed_connection_is_transient_then_reconnects, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(statement_timeout_is_transient, setup, teardown),
        cmocka_unit_test_setup_teardown(hung_server_is_transient_then_reconnects, setup, teardown),
        cmocka_unit_test_setup_teardown(not_now_sqlstates_are_transient_and_change_nothing, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(batch_blocked_on_a_count_changes_nothing, setup, teardown),
        cmocka_unit_test(init_schema_repeated_and_concurrent),
        cmocka_unit_test(calls_before_init_schema_are_fatal),
        cmocka_unit_test(open_refuses_bad_uris_without_the_password),
        cmocka_unit_test(close_accepts_null),
    };

    base_uri = getenv("HC_TEST_PG_URI");
    if (base_uri == NULL || base_uri[0] == '\0') {
        fprintf(stderr, "test_store_pgsql: HC_TEST_PG_URI is not set (a postgresql:// URI); "
                        "a skipped integration test is a failure\n");
        return 1;
    }
    snprintf(run_id, sizeof(run_id), "hc_test_%ld_%ld", (long)getpid(), (long)time(NULL));
    snprintf(group, sizeof(group), "%s-stage2", run_id);
    snprintf(prefix, sizeof(prefix), "%s-", run_id);
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
