/* The Redis store against a real server (HC_TEST_REDIS_URI, redis://[[user]:password@]host:port
 * [/db], credentials not percent-encoded): what the contract suite cannot see through store.h.
 * The layout that GET/HGET readers rely on, split batches that fail or conflict changing
 * nothing, NOSCRIPT recovery, connections that die under the handle, URI handling. Unset is a
 * failure, not a skip.
 *
 * The server may be shared with other tests running at once, so everything here is confined to
 * this run's key prefix, consumer groups and client name, and a killed connection is only ever
 * one of this process's own (found by its CLIENT SETNAME). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka.h needs the four above first; the blank line keeps clang-format from sorting it up. */

#include <cmocka.h>

#include <arpa/inet.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "hotcount/config.h"
#include "hotcount/store.h"

#define TOPIC "likes.partials"
/* Big enough to be cut into parts (10 000 deltas each): two staged parts and the commit. */
#define SPLIT_BATCH 25000

static const char *server_uri;
static struct server {
    char host[256];
    int port;
    char userinfo[256]; /* "user:password@", ":password@" or "" */
    int db;
} srv;
static char run_id[48];
static char prefix[96];      /* this run's store.redis.prefix */
static char instance_id[64]; /* names our connections: CLIENT SETNAME hotcount-<instance_id> */
static int test_seq;

typedef struct fixture {
    hc_config_t cfg;
    hc_store_t *st;
    redisContext *raw; /* a plain connection, to look behind the store's back */
    char group[128];
    char ns[64]; /* this test's post ids start with it */
    char errstr[512];
} fixture_t;

static void parse_server_uri(const char *uri)
{
    char buf[512];
    char *rest;
    char *at;
    char *p;

    if (strncmp(uri, "redis://", 8) != 0) {
        fprintf(stderr, "HC_TEST_REDIS_URI must start with redis://\n");
        exit(1);
    }
    snprintf(buf, sizeof(buf), "%s", uri + 8);
    rest = buf;
    at = strrchr(rest, '@');
    if (at != NULL) {
        snprintf(srv.userinfo, sizeof(srv.userinfo), "%.*s@", (int)(at - rest), rest);
        rest = at + 1;
    }
    srv.port = 6379;
    p = strchr(rest, '/');
    if (p != NULL) {
        *p = '\0';
        srv.db = atoi(p + 1);
    }
    p = strchr(rest, ':');
    if (p != NULL) {
        *p = '\0';
        srv.port = atoi(p + 1);
    }
    snprintf(srv.host, sizeof(srv.host), "%.255s", rest);
}

/* A plain connection to the test server, authenticated, on its database; NULL and why when that
 * fails. Asserts nothing, so that the killer thread can use it too. */
static redisContext *raw_connect_quiet(char *why, size_t why_size)
{
    redisContext *c = redisConnect(srv.host, srv.port);
    redisReply *r = NULL;
    char user[256];
    char *colon;

    if (c == NULL || c->err != 0) {
        hc_errstr_set(why, why_size, "raw connect to %s:%d: %s", srv.host, srv.port,
                      c != NULL ? c->errstr : "out of memory");
        goto fail_free;
    }
    if (srv.userinfo[0] != '\0') {
        snprintf(user, sizeof(user), "%.*s", (int)strlen(srv.userinfo) - 1, srv.userinfo);
        colon = strchr(user, ':');
        if (colon == NULL) {
            snprintf(why, why_size, "HC_TEST_REDIS_URI: credentials without ':'");
            goto fail_free;
        }
        *colon = '\0';
        r = user[0] != '\0' ? redisCommand(c, "AUTH %s %s", user, colon + 1)
                            : redisCommand(c, "AUTH %s", colon + 1);
        if (r == NULL || r->type == REDIS_REPLY_ERROR) {
            snprintf(why, why_size, "raw AUTH refused");
            goto fail_free;
        }
        freeReplyObject(r);
    }
    r = redisCommand(c, "SELECT %d", srv.db);
    if (r == NULL || r->type == REDIS_REPLY_ERROR) {
        snprintf(why, why_size, "raw SELECT %d refused", srv.db);
        goto fail_free;
    }
    freeReplyObject(r);
    return c;

fail_free:
    freeReplyObject(r);
    redisFree(c);
    return NULL;
}

static redisContext *raw_connect(void)
{
    char why[300];
    redisContext *c = raw_connect_quiet(why, sizeof(why));

    if (c == NULL) {
        fail_msg("%s", why);
    }
    return c;
}

/* Runs a command on the raw connection; the caller frees the reply. */
static redisReply *raw(redisContext *c, const char *fmt, ...)
{
    va_list ap;
    redisReply *r;

    va_start(ap, fmt);
    r = redisvCommand(c, fmt, ap);
    va_end(ap);
    if (r == NULL) {
        fail_msg("raw command: %s", c->errstr);
    }
    return r;
}

static void raw_ok(redisContext *c, const char *fmt, ...)
{
    va_list ap;
    redisReply *r;

    va_start(ap, fmt);
    r = redisvCommand(c, fmt, ap);
    va_end(ap);
    if (r == NULL || r->type == REDIS_REPLY_ERROR) {
        fail_msg("raw command: %s", r != NULL ? r->str : c->errstr);
    }
    freeReplyObject(r);
}

/* "redis://[userinfo]host:port<tail>" for the test server. */
static void server_uri_with(char *out, size_t out_size, const char *userinfo, const char *tail)
{
    snprintf(out, out_size, "redis://%s%s:%d%s", userinfo != NULL ? userinfo : srv.userinfo,
             srv.host, srv.port, tail);
}

static void config_with(hc_config_t *cfg, const char *uri, const char *key_prefix)
{
    char errstr[256];

    assert_int_equal(hc_config_init(cfg, hc_store_facts()), HC_OK);
    assert_int_equal(hc_config_set(cfg, "store", uri, errstr, sizeof(errstr)), HC_OK);
    assert_int_equal(hc_config_set(cfg, "store.redis.prefix", key_prefix, errstr, sizeof(errstr)),
                     HC_OK);
    assert_int_equal(hc_config_set(cfg, "instance.id", instance_id, errstr, sizeof(errstr)), HC_OK);
}

static int setup(void **state)
{
    fixture_t *fx = calloc(1, sizeof(*fx));
    char tail[32];
    hc_err_t err;
    int n = ++test_seq;

    assert_non_null(fx);
    snprintf(tail, sizeof(tail), "/%d", srv.db);
    {
        char uri[600];

        server_uri_with(uri, sizeof(uri), NULL, tail);
        config_with(&fx->cfg, uri, prefix);
    }
    snprintf(fx->group, sizeof(fx->group), "hctest-%s-%d", run_id, n);
    snprintf(fx->ns, sizeof(fx->ns), "%d/", n);
    err = hc_store_open(&fx->cfg, &fx->st, fx->errstr, sizeof(fx->errstr));
    if (err != HC_OK) {
        fail_msg("open: %s: %s", hc_err_name(err), fx->errstr);
    }
    assert_int_equal(hc_store_init_schema(fx->st, fx->errstr, sizeof(fx->errstr)), HC_OK);
    fx->raw = raw_connect();
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *fx = *state;

    hc_store_close(fx->st);
    redisFree(fx->raw);
    hc_config_fini(&fx->cfg);
    free(fx);
    return 0;
}

/* A batch of n deltas "<ns>p<i>" += delta, ids kept in *ids_out (free both). */
static hc_store_delta_t *make_deltas(const fixture_t *fx, size_t n, int64_t delta, char **ids_out)
{
    hc_store_delta_t *d = calloc(n, sizeof(*d));
    char *ids = calloc(n, 32);
    size_t i;

    assert_non_null(d);
    assert_non_null(ids);
    for (i = 0; i < n; i++) {
        d[i].post_id = ids + i * 32;
        d[i].post_id_len = (size_t)snprintf(ids + i * 32, 32, "%sp%zu", fx->ns, i);
        d[i].delta = delta;
    }
    *ids_out = ids;
    return d;
}

static hc_store_batch_t batch_of(const fixture_t *fx, hc_store_offset_t *off, size_t offset_count,
                                 const hc_store_delta_t *d, size_t delta_count)
{
    hc_store_batch_t b = {.group = fx->group,
                          .topic = TOPIC,
                          .offsets = off,
                          .offset_count = offset_count,
                          .deltas = d,
                          .delta_count = delta_count};

    return b;
}

static void apply_expect(fixture_t *fx, hc_store_t *st, const hc_store_batch_t *b, hc_err_t want)
{
    hc_err_t err = hc_store_apply(st, b, fx->errstr, sizeof(fx->errstr));

    if (err != want) {
        fail_msg("apply: want %s, got %s: %s", hc_err_name(want), hc_err_name(err), fx->errstr);
    }
}

/* Keys matching pattern, counted with SCAN. */
static long count_keys(redisContext *c, const char *pattern)
{
    char cursor[32] = "0";
    long n = 0;
    redisReply *r;

    do {
        r = raw(c, "SCAN %s MATCH %s COUNT 1000", cursor, pattern);
        assert_int_equal(r->type, REDIS_REPLY_ARRAY);
        snprintf(cursor, sizeof(cursor), "%s", r->element[0]->str);
        n += (long)r->element[1]->elements;
        freeReplyObject(r);
    } while (strcmp(cursor, "0") != 0);
    return n;
}

static long count_ns_keys(fixture_t *fx)
{
    char pattern[200];

    snprintf(pattern, sizeof(pattern), "%s%s*", prefix, fx->ns);
    return count_keys(fx->raw, pattern);
}

/* The staging lists that exist now (orphans of batches cut short may linger for minutes). */
static redisReply *staging_lists(redisContext *c)
{
    redisReply *r = raw(c, "KEYS hotcount:staging:*");

    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    return r;
}

/* Waits (up to 2 s, for batches of concurrent tests to commit) until every staging list is one
 * of `before`: the batches of this test left none behind. */
static void assert_no_new_staging_lists(redisContext *c, const redisReply *before)
{
    redisReply *now = NULL;
    size_t fresh = 1;
    size_t i;
    size_t j;
    int tries;

    for (tries = 0; tries < 100 && fresh > 0; tries++) {
        if (tries > 0) {
            usleep(20000);
        }
        freeReplyObject(now);
        now = staging_lists(c);
        fresh = 0;
        for (i = 0; i < now->elements; i++) {
            for (j = 0; j < before->elements; j++) {
                if (strcmp(now->element[i]->str, before->element[j]->str) == 0) {
                    break;
                }
            }
            fresh += j == before->elements;
        }
    }
    freeReplyObject(now);
    assert_int_equal(fresh, 0);
}

static long long raw_int(redisContext *c, const char *fmt, ...)
{
    va_list ap;
    redisReply *r;
    long long v;

    va_start(ap, fmt);
    r = redisvCommand(c, fmt, ap);
    va_end(ap);
    assert_non_null(r);
    if (r->type == REDIS_REPLY_NIL) {
        v = -1;
    } else if (r->type == REDIS_REPLY_INTEGER) {
        v = r->integer;
    } else {
        assert_int_equal(r->type, REDIS_REPLY_STRING);
        v = strtoll(r->str, NULL, 10);
    }
    freeReplyObject(r);
    return v;
}

static int64_t stored_offset(fixture_t *fx, int32_t partition)
{
    int64_t off = 0;

    assert_int_equal(hc_store_read_offsets(fx->st, fx->group, TOPIC, &partition, 1, &off,
                                           fx->errstr, sizeof(fx->errstr)),
                     HC_OK);
    return off;
}

/* Kills this process's store connections (by client name), as a server restart would. */
static int kill_our_connections(redisContext *c)
{
    char name[96];
    redisReply *r;
    char *line;
    char *save = NULL;
    int killed = 0;

    snprintf(name, sizeof(name), " name=hotcount-%s ", instance_id);
    r = raw(c, "CLIENT LIST TYPE normal");
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    for (line = strtok_r(r->str, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save)) {
        if (strstr(line, name) != NULL && strncmp(line, "id=", 3) == 0) {
            freeReplyObject(raw(c, "CLIENT KILL ID %lld", strtoll(line + 3, NULL, 10)));
            killed++;
        }
    }
    freeReplyObject(r);
    return killed;
}

/* ---- the tests ---- */

static void counts_and_offsets_read_with_plain_commands(void **state)
{
    fixture_t *fx = *state;
    char *ids;
    hc_store_delta_t *d = make_deltas(fx, 3, 5, &ids);
    hc_store_offset_t off = {.partition = 3, .expected = HC_OFFSET_NONE, .next = 10};
    hc_store_batch_t b = batch_of(fx, &off, 1, d, 3);
    redisReply *r;

    apply_expect(fx, fx->st, &b, HC_OK);
    r = raw(fx->raw, "GET %s%s", prefix, d[1].post_id);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    assert_string_equal(r->str, "5");
    freeReplyObject(r);
    r = raw(fx->raw, "HGET hotcount:offsets:%s %s/3", fx->group, TOPIC);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    assert_string_equal(r->str, "10");
    freeReplyObject(r);
    /* Nothing else: no updated_at keys, no staging left behind. */
    assert_int_equal(count_ns_keys(fx), 3);

    /* A count written by someone else with INCRBY is just as good. */
    raw_ok(fx->raw, "INCRBY %s%s 7", prefix, d[1].post_id);
    {
        const char *id = d[1].post_id;
        size_t len = d[1].post_id_len;
        int64_t likes = 0;

        assert_int_equal(hc_store_get(fx->st, &id, &len, 1, &likes, NULL, 0), HC_OK);
        assert_int_equal(likes, 12);
    }

    /* An offsets field that is not a number is reported, not guessed at. */
    raw_ok(fx->raw, "HSET hotcount:offsets:%s %s/4 banana", fx->group, TOPIC);
    {
        int32_t part = 4;
        int64_t got = 0;

        assert_int_equal(hc_store_read_offsets(fx->st, fx->group, TOPIC, &part, 1, &got, fx->errstr,
                                               sizeof(fx->errstr)),
                         HC_ERR_FATAL);
    }
    free(ids);
    free(d);
}

static void split_batch_conflict_changes_nothing(void **state)
{
    fixture_t *fx = *state;
    char *ids;
    hc_store_delta_t *d = make_deltas(fx, SPLIT_BATCH, 1, &ids);
    hc_store_offset_t off = {.partition = 0, .expected = HC_OFFSET_NONE, .next = 10};
    hc_store_batch_t b = batch_of(fx, &off, 1, d, 1);
    redisReply *before = staging_lists(fx->raw);
    char pattern[200];

    apply_expect(fx, fx->st, &b, HC_OK); /* p0 = 1, offset 10 */

    off.next = 20; /* still expects none: stale */
    b = batch_of(fx, &off, 1, d, SPLIT_BATCH);
    apply_expect(fx, fx->st, &b, HC_ERR_CONFLICT);
    assert_non_null(strstr(fx->errstr, "10"));
    assert_non_null(strstr(fx->errstr, "none"));
    assert_int_equal(count_ns_keys(fx), 1);
    assert_int_equal(raw_int(fx->raw, "GET %s%s", prefix, d[0].post_id), 1);
    assert_int_equal(stored_offset(fx, 0), 10);

    /* No staging list survives a lost batch. */
    assert_no_new_staging_lists(fx->raw, before);

    off.expected = 10;
    apply_expect(fx, fx->st, &b, HC_OK);
    assert_int_equal(count_ns_keys(fx), SPLIT_BATCH);
    assert_int_equal(raw_int(fx->raw, "GET %s%s", prefix, d[0].post_id), 2);
    assert_int_equal(raw_int(fx->raw, "GET %s%s", prefix, d[SPLIT_BATCH - 1].post_id), 1);
    assert_int_equal(stored_offset(fx, 0), 20);
    snprintf(pattern, sizeof(pattern), "hotcount:offsets:%s", fx->group);
    assert_int_equal(count_keys(fx->raw, pattern), 1);
    assert_no_new_staging_lists(fx->raw, before);
    freeReplyObject(before);
    free(ids);
    free(d);
}

/* A key that INCRBY would refuse, in a staged part or in the committing one: the batch fails
 * before its first write, staged parts included. */
static void split_batch_failing_at_commit_changes_nothing(void **state)
{
    fixture_t *fx = *state;
    char *ids;
    hc_store_delta_t *d = make_deltas(fx, SPLIT_BATCH, 1, &ids);
    hc_store_offset_t off = {.partition = 0, .expected = HC_OFFSET_NONE, .next = 10};
    hc_store_batch_t b = batch_of(fx, &off, 1, d, SPLIT_BATCH);
    const size_t where[] = {0, SPLIT_BATCH - 1};
    redisReply *before = staging_lists(fx->raw);
    size_t i;

    for (i = 0; i < 2; i++) {
        /* Not an integer. */
        raw_ok(fx->raw, "SET %s%s banana", prefix, d[where[i]].post_id);
        size_t refused = SIZE_MAX;
        b.refused_out = &refused;
        /* one post is refused (stage 2 sets it aside), the store is not down */
        apply_expect(fx, fx->st, &b, HC_ERR_RECORD);
        assert_int_equal(refused, where[i]);
        assert_non_null(strstr(fx->errstr, d[where[i]].post_id));
        assert_int_equal(count_ns_keys(fx), 1);
        assert_true(stored_offset(fx, 0) == HC_OFFSET_NONE);

        /* Another type. */
        raw_ok(fx->raw, "DEL %s%s", prefix, d[where[i]].post_id);
        raw_ok(fx->raw, "HSET %s%s f v", prefix, d[where[i]].post_id);
        apply_expect(fx, fx->st, &b, HC_ERR_RECORD);
        assert_int_equal(count_ns_keys(fx), 1);

        /* An add that would overflow. */
        raw_ok(fx->raw, "DEL %s%s", prefix, d[where[i]].post_id);
        raw_ok(fx->raw, "SET %s%s 9223372036854775000", prefix, d[where[i]].post_id);
        d[where[i]].delta = 1000;
        refused = SIZE_MAX;
        apply_expect(fx, fx->st, &b, HC_ERR_RECORD);
        assert_int_equal(refused, where[i]);
        assert_int_equal(count_ns_keys(fx), 1);
        assert_true(stored_offset(fx, 0) == HC_OFFSET_NONE);
        d[where[i]].delta = 1;
        raw_ok(fx->raw, "DEL %s%s", prefix, d[where[i]].post_id);
        b.refused_out = NULL;
    }
    /* The failed batches dropped their staging lists. */
    assert_no_new_staging_lists(fx->raw, before);
    freeReplyObject(before);

    /* Once the cause is gone the same batch applies, each post once. */
    apply_expect(fx, fx->st, &b, HC_OK);
    assert_int_equal(count_ns_keys(fx), SPLIT_BATCH);
    assert_int_equal(raw_int(fx->raw, "GET %s%s", prefix, d[0].post_id), 1);
    assert_int_equal(raw_int(fx->raw, "GET %s%s", prefix, d[SPLIT_BATCH - 1].post_id), 1);
    assert_int_equal(stored_offset(fx, 0), 10);
    free(ids);
    free(d);
}

static void noscript_after_script_flush_recovers(void **state)
{
    fixture_t *fx = *state;
    char *ids;
    hc_store_delta_t *d = make_deltas(fx, SPLIT_BATCH, 2, &ids);
    hc_store_offset_t off = {.partition = 0, .expected = HC_OFFSET_NONE, .next = 1};
    hc_store_batch_t b = batch_of(fx, &off, 1, d, 1);

    apply_expect(fx, fx->st, &b, HC_OK);
    raw_ok(fx->raw, "SCRIPT FLUSH");
    off.expected = 1;
    off.next = 2;
    apply_expect(fx, fx->st, &b, HC_OK);
    assert_int_equal(raw_int(fx->raw, "GET %s%s", prefix, d[0].post_id), 4);

    /* A split batch, whose first part meets the empty cache. */
    raw_ok(fx->raw, "SCRIPT FLUSH");
    off.expected = 2;
    off.next = 3;
    b = batch_of(fx, &off, 1, d, SPLIT_BATCH);
    apply_expect(fx, fx->st, &b, HC_OK);
    assert_int_equal(raw_int(fx->raw, "GET %s%s", prefix, d[0].post_id), 6);
    assert_int_equal(raw_int(fx->raw, "GET %s%s", prefix, d[SPLIT_BATCH - 1].post_id), 2);
    assert_int_equal(stored_offset(fx, 0), 3);
    free(ids);
    free(d);
}

static void lost_connection_is_transient_then_recovers(void **state)
{
    fixture_t *fx = *state;
    char *ids;
    hc_store_delta_t *d = make_deltas(fx, 2, 1, &ids);
    hc_store_offset_t off = {.partition = 0, .expected = HC_OFFSET_NONE, .next = 5};
    hc_store_batch_t b = batch_of(fx, &off, 1, d, 2);
    const char *id = d[0].post_id;
    size_t len = d[0].post_id_len;
    int64_t likes = 0;
    int32_t part = 0;
    int64_t got = 0;
    hc_store_row_t rows[2];
    size_t count = 0;

    assert_int_equal(kill_our_connections(fx->raw), 1);
    apply_expect(fx, fx->st, &b, HC_ERR_TRANSIENT);
    assert_true(fx->errstr[0] != '\0');
    /* Nothing landed; the next call reconnects by itself and the same batch applies. */
    apply_expect(fx, fx->st, &b, HC_OK);
    assert_int_equal(raw_int(fx->raw, "GET %s%s", prefix, id), 1);

    assert_int_equal(kill_our_connections(fx->raw), 1);
    assert_int_equal(hc_store_get(fx->st, &id, &len, 1, &likes, fx->errstr, sizeof(fx->errstr)),
                     HC_ERR_TRANSIENT);
    assert_int_equal(hc_store_get(fx->st, &id, &len, 1, &likes, fx->errstr, sizeof(fx->errstr)),
                     HC_OK);
    assert_int_equal(likes, 1);

    assert_int_equal(kill_our_connections(fx->raw), 1);
    assert_int_equal(hc_store_read_offsets(fx->st, fx->group, TOPIC, &part, 1, &got, fx->errstr,
                                           sizeof(fx->errstr)),
                     HC_ERR_TRANSIENT);
    assert_int_equal(hc_store_read_offsets(fx->st, fx->group, TOPIC, &part, 1, &got, fx->errstr,
                                           sizeof(fx->errstr)),
                     HC_OK);
    assert_int_equal(got, 5);

    assert_int_equal(kill_our_connections(fx->raw), 1);
    assert_int_equal(hc_store_top(fx->st, 2, rows, &count, fx->errstr, sizeof(fx->errstr)),
                     HC_ERR_TRANSIENT);
    assert_int_equal(hc_store_top(fx->st, 2, rows, &count, fx->errstr, sizeof(fx->errstr)), HC_OK);
    free(ids);
    free(d);
}

/* Connections die at random moments under split batches, while the batches are retried the
 * way stage 2 does (TRANSIENT: the same batch again; CONFLICT: re-read, and an offset already
 * at `next` means an earlier attempt landed). Every batch must count exactly once. */
#define CHAOS_ROUNDS 6

typedef struct killer {
    volatile bool stop;
    int kills;
    char failure[256]; /* no cmocka assertions off the main thread: it would longjmp across */
} killer_t;

/* kill_our_connections without assertions, for the killer thread. */
static int kill_quietly(redisContext *c, killer_t *k)
{
    char name[96];
    redisReply *r = redisCommand(c, "CLIENT LIST TYPE normal");
    char *line;
    char *save = NULL;
    int killed = 0;

    if (r == NULL || r->type != REDIS_REPLY_STRING) {
        snprintf(k->failure, sizeof(k->failure), "CLIENT LIST failed");
        freeReplyObject(r);
        return 0;
    }
    snprintf(name, sizeof(name), " name=hotcount-%s ", instance_id);
    for (line = strtok_r(r->str, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save)) {
        if (strstr(line, name) != NULL && strncmp(line, "id=", 3) == 0) {
            freeReplyObject(redisCommand(c, "CLIENT KILL ID %lld", strtoll(line + 3, NULL, 10)));
            killed++;
        }
    }
    freeReplyObject(r);
    return killed;
}

static void *kill_loop(void *arg)
{
    killer_t *k = arg;
    redisContext *c = raw_connect_quiet(k->failure, sizeof(k->failure));
    unsigned int seed = (unsigned int)getpid();

    while (c != NULL && k->failure[0] == '\0' && !k->stop) {
        usleep(20000 + (useconds_t)(rand_r(&seed) % 150000));
        k->kills += kill_quietly(c, k);
    }
    redisFree(c);
    return NULL;
}

/* Applies b until it has landed once, as stage 2 would; "" on success, else why not. */
static void apply_like_stage2(fixture_t *fx, hc_store_batch_t *b, int *attempts, int *transients,
                              int *landed, char *why, size_t why_size)
{
    int32_t part = b->offsets[0].partition;
    int64_t stored = 0;
    hc_err_t err;

    why[0] = '\0';
    for (;;) {
        if (++*attempts > 500) {
            snprintf(why, why_size, "no progress after 500 attempts");
            return;
        }
        err = hc_store_apply(fx->st, b, fx->errstr, sizeof(fx->errstr));
        if (err == HC_OK) {
            return;
        }
        if (err == HC_ERR_TRANSIENT) {
            ++*transients;
            continue;
        }
        if (err != HC_ERR_CONFLICT) {
            snprintf(why, why_size, "apply: %s: %s", hc_err_name(err), fx->errstr);
            return;
        }
        do {
            err = hc_store_read_offsets(fx->st, fx->group, TOPIC, &part, 1, &stored, fx->errstr,
                                        sizeof(fx->errstr));
        } while (err == HC_ERR_TRANSIENT);
        if (err != HC_OK || stored != b->offsets[0].next) {
            snprintf(why, why_size, "conflict, and the stored offset is %lld, not %lld: %s",
                     (long long)stored, (long long)b->offsets[0].next, fx->errstr);
        }
        ++*landed; /* an earlier attempt landed; its reply was lost */
        return;
    }
}

static void batches_count_once_through_dying_connections(void **state)
{
    fixture_t *fx = *state;
    char *ids;
    hc_store_delta_t *d = make_deltas(fx, SPLIT_BATCH, 1, &ids);
    hc_store_offset_t off = {.partition = 0};
    hc_store_batch_t b = batch_of(fx, &off, 1, d, SPLIT_BATCH);
    killer_t k = {0};
    pthread_t killer;
    int round;
    int attempts = 0;
    int transients = 0;
    int landed = 0;
    int32_t part = 0;
    int64_t stored = 0;
    char why[600] = "";
    redisReply *r;
    size_t i;

    assert_int_equal(pthread_create(&killer, NULL, kill_loop, &k), 0);
    for (round = 0; round < CHAOS_ROUNDS && why[0] == '\0'; round++) {
        off.expected = round == 0 ? HC_OFFSET_NONE : round;
        off.next = round + 1;
        apply_like_stage2(fx, &b, &attempts, &transients, &landed, why, sizeof(why));
    }
    k.stop = true;
    assert_int_equal(pthread_join(killer, NULL), 0);
    if (why[0] != '\0' || k.failure[0] != '\0') {
        fail_msg("round %d: %s%s", round, why, k.failure);
    }
    print_message("%d kills, %d attempts, %d transient, %d landed without a reply\n", k.kills,
                  attempts, transients, landed);
    /* The last kill may still be pending on the handle: the first call after it reconnects. */
    if (hc_store_read_offsets(fx->st, fx->group, TOPIC, &part, 1, &stored, NULL, 0) != HC_OK) {
        assert_int_equal(
            hc_store_read_offsets(fx->st, fx->group, TOPIC, &part, 1, &stored, NULL, 0), HC_OK);
    }

    for (i = 0; i < SPLIT_BATCH; i += 4999) {
        assert_int_equal(raw_int(fx->raw, "GET %s%s", prefix, d[i].post_id), CHAOS_ROUNDS);
    }
    assert_int_equal(count_ns_keys(fx), SPLIT_BATCH);
    assert_int_equal(stored_offset(fx, 0), CHAOS_ROUNDS);

    /* Batches cut short left staging lists behind: each must be on its way out. */
    r = staging_lists(fx->raw);
    for (i = 0; i < r->elements; i++) {
        long long ttl = raw_int(fx->raw, "PTTL %s", r->element[i]->str);

        assert_true(ttl == -2 || (ttl > 0 && ttl <= 120000));
    }
    freeReplyObject(r);
    free(ids);
    free(d);
}

static void open_expect(const char *uri, const char *key_prefix, hc_err_t want,
                        const char *want_in_errstr)
{
    hc_config_t cfg;
    hc_store_t *st = NULL;
    char errstr[512] = "";
    hc_err_t err;

    config_with(&cfg, uri, key_prefix);
    err = hc_store_open(&cfg, &st, errstr, sizeof(errstr));
    if (err != want) {
        fail_msg("open(%s): want %s, got %s: %s", uri, hc_err_name(want), hc_err_name(err), errstr);
    }
    if (want_in_errstr != NULL && strstr(errstr, want_in_errstr) == NULL) {
        fail_msg("open(%s): \"%s\" lacks \"%s\"", uri, errstr, want_in_errstr);
    }
    /* The password used throughout these URIs never shows. */
    assert_null(strstr(errstr, "s3cret"));
    hc_store_close(st);
    hc_config_fini(&cfg);
}

static void bad_uris_and_prefixes_are_invalid(void **state)
{
    static const char *const bad[] = {
        "redis://",
        "redis://:s3cret@",
        "redis://:s3cret@host:0",
        "redis://:s3cret@host:65536",
        "redis://:s3cret@host:63x",
        "redis://:s3cret@host:",
        "redis://:s3cret@host:6379/x",
        "redis://:s3cret@host:6379/0?timeout=1",
        "redis://s3cret@host:6379",
        "redis://:s3cr%zzet@host:6379",
        "redis://:s3cr%00et@host:6379",
        "redis://[::1:6379",
    };
    size_t i;
    char uri[600];

    (void)state;
    for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        open_expect(bad[i], "likes:", HC_ERR_INVALID, "store");
    }
    server_uri_with(uri, sizeof(uri), NULL, "");
    open_expect(uri, "", HC_ERR_INVALID, "store.redis.prefix");
    open_expect(uri, "hotcount:", HC_ERR_INVALID, "store.redis.prefix");
    open_expect(uri, "hotcount:offsets:x", HC_ERR_INVALID, "store.redis.prefix");
    open_expect(uri, "hotcount:staging", HC_ERR_INVALID, "store.redis.prefix");
    open_expect(uri, "hotcount:likes:", HC_OK, NULL);
    open_expect(uri, prefix, HC_OK, NULL);
    server_uri_with(uri, sizeof(uri), NULL, "/");
    open_expect(uri, prefix, HC_OK, NULL);
}

static void unreachable_server_is_transient(void **state)
{
    (void)state;
    open_expect("redis://:s3cret@127.0.0.1:1", "likes:", HC_ERR_TRANSIENT, "127.0.0.1:1");
    open_expect("redis://:s3cret@127.0.0.1:1/3", "likes:", HC_ERR_TRANSIENT, "127.0.0.1:1");
}

/* A server that accepts and never answers (stopped, wedged): a command timeout, not a hang. */
static void unresponsive_server_times_out(void **state)
{
    struct sockaddr_in addr = {.sin_family = AF_INET};
    socklen_t addr_len = sizeof(addr);
    struct timespec t0;
    struct timespec t1;
    double secs;
    char uri[64];
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    (void)state;
    assert_true(fd >= 0);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fd, (struct sockaddr *)&addr, sizeof(addr)), 0);
    assert_int_equal(listen(fd, 4), 0); /* the kernel completes the handshake; we never reply */
    assert_int_equal(getsockname(fd, (struct sockaddr *)&addr, &addr_len), 0);
    snprintf(uri, sizeof(uri), "redis://127.0.0.1:%d", ntohs(addr.sin_port));
    clock_gettime(CLOCK_MONOTONIC, &t0);
    open_expect(uri, "likes:", HC_ERR_TRANSIENT, "no reply");
    clock_gettime(CLOCK_MONOTONIC, &t1);
    secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    assert_true(secs > 5 && secs < 30);
    close(fd);
}

static void acl_user_and_percent_encoded_password(void **state)
{
    fixture_t *fx = *state;
    char user[96];
    char userinfo[160];
    char uri[600];
    hc_config_t cfg;
    hc_store_t *st = NULL;
    hc_store_delta_t d = {.post_id = "acl", .post_id_len = 3, .delta = 1};
    hc_store_batch_t b = batch_of(fx, NULL, 0, &d, 1);

    snprintf(user, sizeof(user), "hctest-%s", run_id);
    raw_ok(fx->raw, "ACL SETUSER %s on >p@ss:w/rd%% ~* &* +@all", user);

    snprintf(userinfo, sizeof(userinfo), "%s:p%%40ss%%3Aw%%2Frd%%25@", user);
    server_uri_with(uri, sizeof(uri), userinfo, "");
    config_with(&cfg, uri, prefix);
    if (hc_store_open(&cfg, &st, fx->errstr, sizeof(fx->errstr)) != HC_OK) {
        fail_msg("open as ACL user: %s", fx->errstr);
    }
    apply_expect(fx, st, &b, HC_OK);
    hc_store_close(st);
    hc_config_fini(&cfg);

    /* A wrong password is a configuration mistake, and never echoed. */
    snprintf(userinfo, sizeof(userinfo), "%s:s3cret@", user);
    server_uri_with(uri, sizeof(uri), userinfo, "");
    open_expect(uri, prefix, HC_ERR_INVALID, "store");

    raw_ok(fx->raw, "ACL DELUSER %s", user);
}

static void database_number_selects_the_database(void **state)
{
    fixture_t *fx = *state;
    int db = srv.db == 5 ? 6 : 5;
    char tail[16];
    char uri[600];
    hc_config_t cfg;
    hc_store_t *st = NULL;
    hc_store_delta_t d = {.post_id = fx->ns, .post_id_len = strlen(fx->ns), .delta = 3};
    hc_store_batch_t b = batch_of(fx, NULL, 0, &d, 1);

    snprintf(tail, sizeof(tail), "/%d", db);
    server_uri_with(uri, sizeof(uri), NULL, tail);
    config_with(&cfg, uri, prefix);
    assert_int_equal(hc_store_open(&cfg, &st, fx->errstr, sizeof(fx->errstr)), HC_OK);
    apply_expect(fx, st, &b, HC_OK);
    hc_store_close(st);
    hc_config_fini(&cfg);

    assert_int_equal(raw_int(fx->raw, "GET %s%s", prefix, fx->ns), -1); /* not in ours */
    raw_ok(fx->raw, "SELECT %d", db);
    assert_int_equal(raw_int(fx->raw, "GET %s%s", prefix, fx->ns), 3);
    raw_ok(fx->raw, "DEL %s%s", prefix, fx->ns);
    raw_ok(fx->raw, "SELECT %d", srv.db);

    /* A database the server does not have is a configuration mistake. */
    server_uri_with(uri, sizeof(uri), NULL, "/100000");
    open_expect(uri, prefix, HC_ERR_INVALID, "SELECT");
}

static bool count_row(const char *post_id, size_t post_id_len, int64_t likes, void *opaque)
{
    long *n = opaque;

    (void)post_id;
    (void)post_id_len;
    (void)likes;
    (*n)++;
    return true;
}

/* SCAN's MATCH would read a '*' or '[' in the prefix as a wildcard. */
static void glob_characters_in_prefix_are_literal(void **state)
{
    fixture_t *fx = *state;
    char glob_prefix[128];
    char uri[600];
    char tail[16];
    hc_config_t cfg;
    hc_store_t *st = NULL;
    hc_store_delta_t d = {.post_id = "p", .post_id_len = 1, .delta = 4};
    hc_store_batch_t b = batch_of(fx, NULL, 0, &d, 1);
    hc_store_row_t rows[4];
    size_t count = 0;
    long n = 0;

    snprintf(glob_prefix, sizeof(glob_prefix), "hctest-%s-[g]*?\\:", run_id);
    /* Both would match the unescaped pattern "<...>-[g]*?\:*". */
    raw_ok(fx->raw, "SET hctest-%s-gXY:q 100", run_id);
    raw_ok(fx->raw, "SET hctest-%s-g:Zp 100", run_id);
    snprintf(tail, sizeof(tail), "/%d", srv.db);
    server_uri_with(uri, sizeof(uri), NULL, tail);
    config_with(&cfg, uri, glob_prefix);
    assert_int_equal(hc_store_open(&cfg, &st, fx->errstr, sizeof(fx->errstr)), HC_OK);
    apply_expect(fx, st, &b, HC_OK);
    assert_int_equal(hc_store_foreach(st, count_row, &n, fx->errstr, sizeof(fx->errstr)), HC_OK);
    assert_int_equal(n, 1);
    assert_int_equal(hc_store_top(st, 4, rows, &count, fx->errstr, sizeof(fx->errstr)), HC_OK);
    assert_int_equal(count, 1);
    assert_string_equal(rows[0].post_id, "p");
    assert_int_equal(rows[0].likes, 4);
    hc_store_close(st);
    hc_config_fini(&cfg);
    raw_ok(fx->raw, "DEL hctest-%s-gXY:q hctest-%s-g:Zp %sp", run_id, run_id, glob_prefix);
}

/* Keys under the prefix that hotcount did not write: another type is not a count (skipped);
 * a string that is not an integer is corruption (reported by a scan). */
static void scans_skip_other_types_and_report_bad_counts(void **state)
{
    fixture_t *fx = *state;
    char *ids;
    hc_store_delta_t *d = make_deltas(fx, 3000, 1, &ids);
    hc_store_batch_t b = batch_of(fx, NULL, 0, d, 3000);
    hc_store_row_t rows[5];
    size_t count = 0;
    char bad_id[64];
    const char *id = bad_id;
    size_t len;
    int64_t likes;
    size_t i;

    for (i = 0; i < 3000; i++) {
        d[i].delta = (int64_t)((i * 7919) % 3000) + 1; /* 1..3000, shuffled */
    }
    apply_expect(fx, fx->st, &b, HC_OK);
    raw_ok(fx->raw, "HSET %s%shash f 99999999", prefix, fx->ns);
    assert_int_equal(hc_store_top(fx->st, 5, rows, &count, fx->errstr, sizeof(fx->errstr)), HC_OK);
    assert_int_equal(count, 5);
    for (i = 0; i < 5; i++) {
        assert_int_equal(rows[i].likes, 3000 - (int64_t)i);
    }

    raw_ok(fx->raw, "SET %s%sbad x", prefix, fx->ns);
    long n = 0;
    assert_int_equal(hc_store_foreach(fx->st, count_row, &n, fx->errstr, sizeof(fx->errstr)),
                     HC_ERR_FATAL);
    assert_non_null(strstr(fx->errstr, "bad"));
    /* top reads the index, which only the commit fills: a key hotcount never wrote is in no
     * top (it used to be reported here when top scanned). */
    assert_int_equal(hc_store_top(fx->st, 5, rows, &count, fx->errstr, sizeof(fx->errstr)), HC_OK);
    assert_int_equal(count, 5);
    assert_int_equal(rows[0].likes, 3000);
    len = (size_t)snprintf(bad_id, sizeof(bad_id), "%sbad", fx->ns);
    assert_int_equal(hc_store_get(fx->st, &id, &len, 1, &likes, fx->errstr, sizeof(fx->errstr)),
                     HC_ERR_FATAL);
    raw_ok(fx->raw, "DEL %s%sbad %s%shash", prefix, fx->ns, prefix, fx->ns);
    free(ids);
    free(d);
}

/* "cmdstat_scan:calls=N" of INFO commandstats (0 before the server's first SCAN). */
static long long scan_calls(redisContext *c)
{
    redisReply *r = raw(c, "INFO commandstats");
    const char *p = strstr(r->str, "cmdstat_scan:calls=");
    long long n = p != NULL ? atoll(p + strlen("cmdstat_scan:calls=")) : 0;

    freeReplyObject(r);
    return n;
}

static void delete_matching(redisContext *c, const char *pattern);

/* A store whose counts predate the top index (written here with SET, as an older hotcount
 * left them): top scans until `init` has built the index, then reads it (no SCAN), keeps it
 * through later commits, and the index holds K = 1000 of the 2 500 posts. Mutants: init not
 * building it (top keeps scanning); top reading an index not built (a wrong top before init is
 * caught by store_redis_commit_diff's "top answered from an index not built"). */
static void init_builds_the_index_of_counts_written_before_it(void **state)
{
    fixture_t *fx = *state;
    char pre[128];
    char pattern[160];
    char uri[600];
    char tail[16];
    hc_config_t cfg;
    hc_store_t *st = NULL;
    hc_store_row_t rows[3];
    size_t count = 0;
    long long before;
    int i;

    snprintf(pre, sizeof(pre), "hctest-%s-pre:", run_id);
    for (i = 1; i <= 2500; i++) {
        raw_ok(fx->raw, "SET %sp%d %d", pre, i, i);
    }
    snprintf(tail, sizeof(tail), "/%d", srv.db);
    server_uri_with(uri, sizeof(uri), NULL, tail);
    config_with(&cfg, uri, pre);
    assert_int_equal(hc_store_open(&cfg, &st, fx->errstr, sizeof(fx->errstr)), HC_OK);

    before = scan_calls(fx->raw);
    assert_int_equal(hc_store_top(st, 3, rows, &count, fx->errstr, sizeof(fx->errstr)), HC_OK);
    assert_int_equal(count, 3);
    assert_string_equal(rows[0].post_id, "p2500");
    assert_int_equal(rows[2].likes, 2498);
    assert_true(scan_calls(fx->raw) > before); /* not built yet: scanned */

    assert_int_equal(hc_store_init_schema(st, fx->errstr, sizeof(fx->errstr)), HC_OK);
    assert_int_equal(raw_int(fx->raw, "ZCARD hotcount:top:%s", pre), 1000);
    assert_int_equal(raw_int(fx->raw, "HEXISTS hotcount:top-meta:%s built", pre), 1);
    before = scan_calls(fx->raw);
    assert_int_equal(hc_store_top(st, 3, rows, &count, fx->errstr, sizeof(fx->errstr)), HC_OK);
    assert_int_equal(count, 3);
    assert_string_equal(rows[0].post_id, "p2500");
    assert_string_equal(rows[1].post_id, "p2499");
    assert_int_equal(rows[2].likes, 2498);

    /* a commit moves a post from far below the index to its top */
    hc_store_delta_t d = {.post_id = "p7", .post_id_len = 2, .delta = 10000};
    hc_store_batch_t b = batch_of(fx, NULL, 0, &d, 1);
    apply_expect(fx, st, &b, HC_OK);
    assert_int_equal(hc_store_top(st, 3, rows, &count, fx->errstr, sizeof(fx->errstr)), HC_OK);
    assert_string_equal(rows[0].post_id, "p7");
    assert_int_equal(rows[0].likes, 10007);
    assert_string_equal(rows[1].post_id, "p2500");
    assert_int_equal(scan_calls(fx->raw), before); /* both tops from the index */

    hc_store_close(st);
    hc_config_fini(&cfg);
    snprintf(pattern, sizeof(pattern), "%s*", pre);
    delete_matching(fx->raw, pattern);
    raw_ok(fx->raw, "DEL hotcount:top:%s hotcount:top-meta:%s", pre, pre);
}

/* ---- clean-up ---- */

static void delete_matching(redisContext *c, const char *pattern)
{
    char cursor[32] = "0";
    redisReply *r;
    size_t i;

    do {
        r = raw(c, "SCAN %s MATCH %s COUNT 1000", cursor, pattern);
        snprintf(cursor, sizeof(cursor), "%s", r->element[0]->str);
        for (i = 0; i < r->element[1]->elements; i++) {
            freeReplyObject(raw(c, "UNLINK %b", r->element[1]->element[i]->str,
                                r->element[1]->element[i]->len));
        }
        freeReplyObject(r);
    } while (strcmp(cursor, "0") != 0);
}

static int cleanup_run(void **state)
{
    redisContext *c = raw_connect();
    char pattern[160];

    (void)state;
    snprintf(pattern, sizeof(pattern), "%s*", prefix);
    delete_matching(c, pattern);
    snprintf(pattern, sizeof(pattern), "hotcount:offsets:hctest-%s-*", run_id);
    delete_matching(c, pattern);
    redisFree(c);
    return 0;
}

/* ---- "not now": BUSY, LOADING, MASTERDOWN, TRYAGAIN, timeouts ----
 *
 * The shared server refuses DEBUG (enable-debug-command no) and must not be made BUSY under the
 * tests running beside this one, so these use a redis-server of their own (HC_REDIS_SERVER or
 * redis-server, on a free loopback port, for the test's duration), or a fake one. */

static double mono_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A listening socket on 127.0.0.1, its port in *port. */
static int listen_loopback(int *port)
{
    struct sockaddr_in addr = {.sin_family = AF_INET};
    socklen_t addr_len = sizeof(addr);
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    assert_true(fd >= 0);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fd, (struct sockaddr *)&addr, sizeof(addr)), 0);
    assert_int_equal(listen(fd, 8), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&addr, &addr_len), 0);
    *port = ntohs(addr.sin_port);
    return fd;
}

/* A command on a connection of its own, in a thread: the server is busy with it meanwhile. */
typedef struct blocker {
    int port;
    const char *cmd;    /* a command without quoted arguments, or NULL: */
    const char *script; /* EVAL of this script */
    bool started;
    pthread_t thread;
} blocker_t;

typedef struct private_redis {
    pid_t pid;
    int port;
    char dir[64];
    redisContext *raw;
    blocker_t blocker;
} private_redis_t;

static void private_redis_start(private_redis_t *pr)
{
    const char *bin = getenv("HC_REDIS_SERVER");
    char port[16];
    char log[128];
    int fd;
    int i;

    if (bin == NULL || bin[0] == '\0') {
        bin = "redis-server";
    }
    snprintf(pr->dir, sizeof(pr->dir), "/tmp/hctest-redis-XXXXXX");
    assert_non_null(mkdtemp(pr->dir));
    fd = listen_loopback(&pr->port); /* a free port: the kernel's pick, let go just before */
    close(fd);
    snprintf(port, sizeof(port), "%d", pr->port);
    snprintf(log, sizeof(log), "%s/redis.log", pr->dir);
    pr->pid = fork();
    assert_true(pr->pid >= 0);
    if (pr->pid == 0) {
        /* never outlives the test, whatever ends it; and holds none of its output */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (freopen("/dev/null", "w", stdout) == NULL ||
            freopen("/dev/null", "w", stderr) == NULL) {
            _exit(126);
        }
        execlp(bin, bin, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
               "--daemonize", "no", "--dir", pr->dir, "--logfile", log, "--enable-debug-command",
               "local", (char *)NULL);
        _exit(127);
    }
    for (i = 0; i < 500; i++) {
        redisContext *c = redisConnect("127.0.0.1", pr->port);
        if (c != NULL && c->err == 0) {
            redisReply *r = redisCommand(c, "PING");
            bool up = r != NULL && r->type == REDIS_REPLY_STATUS;
            freeReplyObject(r);
            if (up) {
                pr->raw = c;
                return;
            }
        }
        redisFree(c);
        usleep(20000);
    }
    fail_msg("%s did not start on port %d (see %s)", bin, pr->port, log);
}

/* Also after a failed test: a blocked command ends with the server. */
static void private_redis_stop(private_redis_t *pr)
{
    char cmd[128];
    int status;

    redisFree(pr->raw);
    kill(pr->pid, SIGKILL);
    waitpid(pr->pid, &status, 0);
    if (pr->blocker.started) {
        pthread_join(pr->blocker.thread, NULL);
    }
    snprintf(cmd, sizeof(cmd), "rm -rf %s", pr->dir);
    if (system(cmd) != 0) {
        fprintf(stderr, "could not remove %s\n", pr->dir);
    }
}

static int private_setup(void **state)
{
    private_redis_t *pr = calloc(1, sizeof(*pr));

    assert_non_null(pr);
    private_redis_start(pr);
    *state = pr;
    return 0;
}

static int private_teardown(void **state)
{
    private_redis_stop(*state);
    free(*state);
    return 0;
}

/* A store on the private server, its commands bounded by statement_ms and its batches by
 * batch_ms. */
static hc_store_t *private_store(const private_redis_t *pr, hc_config_t *cfg, int64_t statement_ms,
                                 int64_t batch_ms)
{
    char uri[64];
    char errstr[256];
    hc_store_t *st = NULL;

    snprintf(uri, sizeof(uri), "redis://127.0.0.1:%d", pr->port);
    config_with(cfg, uri, prefix);
    cfg->timeouts.store_statement_ms = statement_ms;
    cfg->timeouts.store_batch_ms = batch_ms;
    if (hc_store_open(cfg, &st, errstr, sizeof(errstr)) != HC_OK) {
        fail_msg("open on the private server: %s", errstr);
    }
    return st;
}

static void *block_run(void *arg)
{
    blocker_t *b = arg;
    redisContext *c = redisConnect("127.0.0.1", b->port);

    if (c != NULL && c->err == 0) {
        freeReplyObject(b->cmd != NULL ? redisCommand(c, b->cmd)
                                       : redisCommand(c, "EVAL %s 0", b->script));
    }
    redisFree(c);
    return NULL;
}

/* Runs cmd (or, NULL, the script) on the private server until it ends; joined by
 * private_redis_stop at the latest. */
static void block_start(private_redis_t *pr, const char *cmd, const char *script)
{
    blocker_t *b = &pr->blocker;

    b->port = pr->port;
    b->cmd = cmd;
    b->script = script;
    assert_int_equal(pthread_create(&b->thread, NULL, block_run, b), 0);
    b->started = true;
}

static void block_join(private_redis_t *pr)
{
    pthread_join(pr->blocker.thread, NULL);
    pr->blocker.started = false;
}

/* The batch's one post counted `times` times, its offset at `next`. */
static void assert_counted(redisContext *c, const hc_store_batch_t *b, long long times)
{
    assert_int_equal(raw_int(c, "GET %s%s", prefix, b->deltas[0].post_id),
                     b->deltas[0].delta * times);
    assert_int_equal(
        raw_int(c, "HGET hotcount:offsets:%s %s/%d", b->group, TOPIC, (int)b->offsets[0].partition),
        b->offsets[0].next);
}

static void count_progress(void *opaque)
{
    (*(int *)opaque)++;
}

/* DEBUG SLEEP 1.5 holds the server past the command bound (300 ms): the batch is
 * HC_ERR_TRANSIENT within the bound, not after the sleep. Its EVALSHA was sent and runs once the
 * server wakes, so the retry (stage 2 retries the same batch) must count it exactly once: HC_OK
 * if it came first, HC_ERR_CONFLICT if the first attempt had landed. Mutants caught: a reply
 * timeout classified HC_ERR_FATAL, or no reply timeout (the apply waits out the sleep). */
static void debug_sleep_is_transient_then_counts_once(void **state)
{
    private_redis_t *pr = *state;
    hc_config_t cfg;
    hc_store_t *st;
    hc_store_delta_t d = {.post_id = "slept", .post_id_len = 5, .delta = 3};
    hc_store_offset_t off = {.partition = 2, .expected = HC_OFFSET_NONE, .next = 40};
    hc_store_batch_t b = {.group = "hctest-sleep",
                          .topic = TOPIC,
                          .offsets = &off,
                          .offset_count = 1,
                          .deltas = &d,
                          .delta_count = 1};
    char errstr[256];
    double t0;
    double took;
    hc_err_t err;

    st = private_store(pr, &cfg, 300, 1000);
    block_start(pr, "DEBUG SLEEP 1.5", NULL);
    usleep(200000); /* the sleep has begun */
    t0 = mono_s();
    err = hc_store_apply(st, &b, errstr, sizeof(errstr));
    took = mono_s() - t0;
    if (err != HC_ERR_TRANSIENT) {
        fail_msg("apply during DEBUG SLEEP: %s (%s), want HC_ERR_TRANSIENT", hc_err_name(err),
                 errstr);
    }
    if (took > 1.0) {
        fail_msg("apply during DEBUG SLEEP took %.2f s, past its 300 ms bound", took);
    }
    block_join(pr);
    err = hc_store_apply(st, &b, errstr, sizeof(errstr));
    if (err != HC_OK && err != HC_ERR_CONFLICT) {
        fail_msg("retry after DEBUG SLEEP: %s: %s", hc_err_name(err), errstr);
    }
    assert_counted(pr->raw, &b, 1);
    hc_store_close(st);
    hc_config_fini(&cfg);
}

/* A script running past busy-reply-threshold makes the server answer BUSY: the batch is
 * HC_ERR_TRANSIENT at once (nothing ran), changes nothing, and once the script is killed the
 * same batch applies, once, a split one (3 parts) calling on_progress per part.
 * Mutant caught: BUSY classified HC_ERR_FATAL. */
static void busy_script_is_transient_then_counts_once(void **state)
{
    private_redis_t *pr = *state;
    hc_config_t cfg;
    hc_store_t *st;
    fixture_t fx = {0};
    char *ids;
    hc_store_delta_t *d;
    hc_store_offset_t off = {.partition = 1, .expected = HC_OFFSET_NONE, .next = 7};
    hc_store_batch_t b;
    char errstr[256];
    int progress = 0;
    double t0;
    hc_err_t err;
    int i;

    st = private_store(pr, &cfg, 10000, 30000);
    snprintf(fx.group, sizeof(fx.group), "hctest-busy");
    snprintf(fx.ns, sizeof(fx.ns), "busy/");
    d = make_deltas(&fx, SPLIT_BATCH, 2, &ids);
    b = batch_of(&fx, &off, 1, d, SPLIT_BATCH);
    b.on_progress = count_progress;
    b.progress_opaque = &progress;
    raw_ok(pr->raw, "CONFIG SET busy-reply-threshold 100");
    block_start(pr, NULL, "while true do end");
    for (i = 0; i < 100; i++) { /* until the server says BUSY */
        redisReply *r = raw(pr->raw, "PING");
        bool busy = r->type == REDIS_REPLY_ERROR && strncmp(r->str, "BUSY", 4) == 0;
        freeReplyObject(r);
        if (busy) {
            break;
        }
        usleep(50000);
    }
    t0 = mono_s();
    err = hc_store_apply(st, &b, errstr, sizeof(errstr));
    if (err != HC_ERR_TRANSIENT || strstr(errstr, "BUSY") == NULL) {
        fail_msg("apply while a script runs: %s (%s), want HC_ERR_TRANSIENT (BUSY)",
                 hc_err_name(err), errstr);
    }
    assert_true(mono_s() - t0 < 2.0); /* at once: no waiting inside the store */
    assert_int_equal(progress, 0);
    raw_ok(pr->raw, "SCRIPT KILL");
    block_join(pr);
    assert_int_equal(raw_int(pr->raw, "HGET hotcount:offsets:%s %s/1", fx.group, TOPIC), -1);
    assert_int_equal(raw_int(pr->raw, "GET %s%s", prefix, d[0].post_id), -1);

    err = hc_store_apply(st, &b, errstr, sizeof(errstr));
    if (err != HC_OK) {
        fail_msg("apply after SCRIPT KILL: %s: %s", hc_err_name(err), errstr);
    }
    assert_int_equal(progress, 3); /* two staged parts and the commit */
    for (i = 0; i < SPLIT_BATCH; i += 4999) {
        assert_int_equal(raw_int(pr->raw, "GET %s%s", prefix, d[i].post_id), 2);
    }
    assert_int_equal(raw_int(pr->raw, "HGET hotcount:offsets:%s %s/1", fx.group, TOPIC), 7);
    hc_store_close(st);
    hc_config_fini(&cfg);
    free(ids);
    free(d);
}

/* A fake server that answers the handshake and SCRIPT LOAD as Redis does and every other
 * command with one error reply. */
typedef struct fake_redis {
    int listen_fd;
    int port;
    const char *reply;       /* for EVALSHA (and everything but the handshake) */
    const char *every_reply; /* NULL, or the answer to every command, the handshake's too */
    atomic_int commands;
    atomic_bool stop;
    pthread_t thread;
} fake_redis_t;

/* One command of a RESP request in buf[0..len): its length in bytes, 0 when incomplete; its
 * name (the first argument, upper case) in name. */
static size_t resp_command(const char *buf, size_t len, char *name, size_t name_size)
{
    const char *p = buf;
    const char *end = buf + len;
    long n;
    long i;

    if (len < 4 || *p != '*') {
        return 0;
    }
    n = strtol(p + 1, NULL, 10);
    p = memchr(p, '\n', (size_t)(end - p));
    if (p == NULL) {
        return 0;
    }
    p++;
    name[0] = '\0';
    for (i = 0; i < n; i++) {
        long blen;
        const char *nl;
        if (p >= end || *p != '$') {
            return 0;
        }
        blen = strtol(p + 1, NULL, 10);
        nl = memchr(p, '\n', (size_t)(end - p));
        if (nl == NULL || end - (nl + 1) < blen + 2) {
            return 0;
        }
        if (i == 0) {
            size_t k;
            for (k = 0; k < (size_t)blen && k + 1 < name_size; k++) {
                char c = nl[1 + k];
                name[k] = c >= 'a' && c <= 'z' ? (char)(c - 'a' + 'A') : c;
            }
            name[k] = '\0';
        }
        p = nl + 1 + blen + 2;
    }
    return (size_t)(p - buf);
}

static void *fake_redis_run(void *arg)
{
    fake_redis_t *fr = arg;
    static const char sha[] = "$40\r\n0123456789012345678901234567890123456789\r\n";

    while (!atomic_load(&fr->stop)) {
        struct pollfd pfd = {.fd = fr->listen_fd, .events = POLLIN};
        char buf[65536];
        size_t used = 0;
        int c;

        if (poll(&pfd, 1, 50) <= 0) {
            continue;
        }
        c = accept(fr->listen_fd, NULL, NULL);
        if (c < 0) {
            continue;
        }
        for (;;) {
            char name[32];
            size_t n;
            ssize_t got;
            while ((n = resp_command(buf, used, name, sizeof(name))) > 0) {
                const char *r = fr->every_reply != NULL        ? fr->every_reply
                                : strcmp(name, "SCRIPT") == 0  ? sha
                                : strcmp(name, "EVALSHA") == 0 ? fr->reply
                                                               : "+OK\r\n";
                atomic_fetch_add(&fr->commands, 1);
                if (send(c, r, strlen(r), MSG_NOSIGNAL) < 0) {
                    break;
                }
                memmove(buf, buf + n, used - n);
                used -= n;
            }
            pfd = (struct pollfd){.fd = c, .events = POLLIN};
            if (atomic_load(&fr->stop) || poll(&pfd, 1, 50) < 0) {
                break;
            }
            if (!(pfd.revents & (POLLIN | POLLHUP))) {
                continue;
            }
            if (used == sizeof(buf)) {
                used = 0; /* a command this fake does not need to read whole */
            }
            got = recv(c, buf + used, sizeof(buf) - used, 0);
            if (got <= 0) {
                break;
            }
            used += (size_t)got;
        }
        close(c);
    }
    return NULL;
}

static void fake_redis_start(fake_redis_t *fr, const char *reply, const char *every_reply)
{
    fr->reply = reply;
    fr->every_reply = every_reply;
    atomic_store(&fr->stop, false);
    atomic_store(&fr->commands, 0);
    fr->listen_fd = listen_loopback(&fr->port);
    assert_int_equal(pthread_create(&fr->thread, NULL, fake_redis_run, fr), 0);
}

static void fake_redis_stop(fake_redis_t *fr)
{
    atomic_store(&fr->stop, true);
    pthread_join(fr->thread, NULL);
    close(fr->listen_fd);
}

/* Each reply that means "not now" is HC_ERR_TRANSIENT at once, with the server's words; an
 * error that a retry cannot fix stays HC_ERR_FATAL; a server that refuses new clients
 * (maxclients) is HC_ERR_TRANSIENT at open.
 * Mutants caught: any of BUSY, LOADING, MASTERDOWN, TRYAGAIN or the maxclients refusal left out
 * of error_reply_class. */
static void not_now_replies_are_transient(void **state)
{
    static const struct {
        const char *reply;
        hc_err_t want;
    } cases[] = {
        {"-BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN "
         "NOSAVE.\r\n",
         HC_ERR_TRANSIENT},
        {"-LOADING Redis is loading the dataset in memory\r\n", HC_ERR_TRANSIENT},
        {"-MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.\r\n",
         HC_ERR_TRANSIENT},
        {"-TRYAGAIN Multiple keys request during rehashing of slot\r\n", HC_ERR_TRANSIENT},
        {"-ERR max number of clients reached\r\n", HC_ERR_TRANSIENT},
        {"-ERR Error running script (call to f_0123): user_script:1: oops\r\n", HC_ERR_FATAL},
    };
    hc_store_delta_t d = {.post_id = "x", .post_id_len = 1, .delta = 1};
    hc_store_offset_t off = {.partition = 0, .expected = HC_OFFSET_NONE, .next = 1};
    hc_store_batch_t b = {.group = "hctest-fake",
                          .topic = TOPIC,
                          .offsets = &off,
                          .offset_count = 1,
                          .deltas = &d,
                          .delta_count = 1};
    char errstr[256];
    char uri[64];
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        fake_redis_t fr;
        hc_config_t cfg;
        hc_store_t *st = NULL;
        double t0;
        hc_err_t err;
        char words[40];

        fake_redis_start(&fr, cases[i].reply, NULL);
        snprintf(uri, sizeof(uri), "redis://127.0.0.1:%d", fr.port);
        config_with(&cfg, uri, "likes:");
        if (hc_store_open(&cfg, &st, errstr, sizeof(errstr)) != HC_OK) {
            fail_msg("open on the fake server: %s", errstr);
        }
        t0 = mono_s();
        err = hc_store_apply(st, &b, errstr, sizeof(errstr));
        snprintf(words, sizeof(words), "%.*s", (int)strcspn(cases[i].reply + 1, " \r"),
                 cases[i].reply + 1);
        if (err != cases[i].want || strstr(errstr, words) == NULL) {
            fail_msg("reply %s: %s (%s), want %s", words, hc_err_name(err), errstr,
                     hc_err_name(cases[i].want));
        }
        assert_true(mono_s() - t0 < 2.0);
        hc_store_close(st);
        fake_redis_stop(&fr);
        hc_config_fini(&cfg);
    }

    /* maxclients refuses the connection's first command, before the store ever runs one. */
    {
        fake_redis_t fr;
        hc_config_t cfg;
        hc_store_t *st = NULL;
        hc_err_t err;

        fake_redis_start(&fr, NULL, "-ERR max number of clients reached\r\n");
        snprintf(uri, sizeof(uri), "redis://127.0.0.1:%d", fr.port);
        config_with(&cfg, uri, "likes:");
        err = hc_store_open(&cfg, &st, errstr, sizeof(errstr));
        if (err != HC_ERR_TRANSIENT) {
            fail_msg("open refused by maxclients: %s (%s), want HC_ERR_TRANSIENT", hc_err_name(err),
                     errstr);
        }
        fake_redis_stop(&fr);
        hc_config_fini(&cfg);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(counts_and_offsets_read_with_plain_commands, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(split_batch_conflict_changes_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(split_batch_failing_at_commit_changes_nothing, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(noscript_after_script_flush_recovers, setup, teardown),
        cmocka_unit_test_setup_teardown(lost_connection_is_transient_then_recovers, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(batches_count_once_through_dying_connections, setup,
                                        teardown),
        cmocka_unit_test(bad_uris_and_prefixes_are_invalid),
        cmocka_unit_test(unreachable_server_is_transient),
        cmocka_unit_test(unresponsive_server_times_out),
        cmocka_unit_test_setup_teardown(acl_user_and_percent_encoded_password, setup, teardown),
        cmocka_unit_test_setup_teardown(database_number_selects_the_database, setup, teardown),
        cmocka_unit_test_setup_teardown(glob_characters_in_prefix_are_literal, setup, teardown),
        cmocka_unit_test_setup_teardown(init_builds_the_index_of_counts_written_before_it, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(scans_skip_other_types_and_report_bad_counts, setup,
                                        teardown),
        cmocka_unit_test(not_now_replies_are_transient),
        cmocka_unit_test_setup_teardown(debug_sleep_is_transient_then_counts_once, private_setup,
                                        private_teardown),
        cmocka_unit_test_setup_teardown(busy_script_is_transient_then_counts_once, private_setup,
                                        private_teardown),
    };
    struct timespec now;
    unsigned int seed;

    server_uri = getenv("HC_TEST_REDIS_URI");
    if (server_uri == NULL || server_uri[0] == '\0') {
        fprintf(stderr, "test_store_redis: HC_TEST_REDIS_URI is not set (redis://host:port); run "
                        "it under tests/harness/with-servers. Not skipping: that would be a "
                        "pass.\n");
        return 1;
    }
    parse_server_uri(server_uri);
    /* hiredis writes with write(2): a connection killed under it must not kill the test. */
    signal(SIGPIPE, SIG_IGN);
    clock_gettime(CLOCK_REALTIME, &now);
    seed = (unsigned int)now.tv_nsec ^ (unsigned int)getpid();
    snprintf(run_id, sizeof(run_id), "%x-%lx-%x", (unsigned int)getpid(), (long)now.tv_sec,
             (unsigned int)rand_r(&seed));
    snprintf(prefix, sizeof(prefix), "hctest-r:%s:", run_id);
    snprintf(instance_id, sizeof(instance_id), "hctest-%s", run_id);
    return cmocka_run_group_tests(tests, NULL, cleanup_run);
}
