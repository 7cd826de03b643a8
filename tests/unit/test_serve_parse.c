/* Unit tests for the read API's request parsing (src/serve/serve_parse.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* cmocka.h needs the four headers above first. */
#include <cmocka.h>

#include <string.h>

#include "hotcount/serve_parse.h"

static hc_serve_uri_t u;

static hc_serve_route_t route(const char *uri)
{
    hc_serve_parse_uri(uri, &u);
    return u.route;
}

static void routes_raw_uris(void **state)
{
    (void)state;
    assert_int_equal(route("/v1/likes/abc"), HC_ROUTE_ONE);
    assert_int_equal(u.tail_len, 3);
    assert_memory_equal(u.tail, "abc", 3);
    assert_int_equal(route("/v1/likes/a%00b?x=1#f"), HC_ROUTE_ONE);
    assert_int_equal(u.tail_len, 5);
    assert_string_equal(u.query, "x=1");
    assert_int_equal(route("/v1/likes?ids=a"), HC_ROUTE_MANY);
    assert_string_equal(u.query, "ids=a");
    assert_int_equal(route("/v1/top"), HC_ROUTE_TOP);
    assert_int_equal(route("/v1/stats"), HC_ROUTE_STATS);
    assert_int_equal(route("/v1/hotkeys"), HC_ROUTE_HOTKEYS);
    assert_int_equal(route("/"), HC_ROUTE_PAGE);
    assert_int_equal(route("/index.html"), HC_ROUTE_PAGE);
    assert_int_equal(route("/metrics"), HC_ROUTE_METRICS);
    assert_int_equal(route("/healthz"), HC_ROUTE_HEALTHZ);
    assert_int_equal(route("/healthz/"), HC_ROUTE_NOT_FOUND);
    assert_int_equal(route("/v1/topx"), HC_ROUTE_NOT_FOUND);
    static char long_uri[HC_SERVE_QUERY_MAX + 16];
    memset(long_uri, 'a', sizeof(long_uri) - 1);
    memcpy(long_uri, "/v1/top?", 8);
    long_uri[sizeof(long_uri) - 1] = '\0';
    assert_int_equal(route(long_uri), HC_ROUTE_QUERY_TOO_LONG);
}

static void one_post_id_follows_the_event_rule(void **state)
{
    (void)state;
    char id[HC_POST_ID_MAX + 1];
    size_t len;
    assert_true(hc_serve_parse_one("a%2Cb%20c", 9, id, &len));
    assert_string_equal(id, "a,b c");
    assert_true(hc_serve_parse_one("caf%C3%A9", 9, id, &len));
    assert_true(hc_serve_parse_one("a+b", 3, id, &len)); /* '+' is literal in a path */
    assert_string_equal(id, "a+b");
    assert_false(hc_serve_parse_one("a%00b", 5, id, &len));  /* C0 */
    assert_false(hc_serve_parse_one("a%7F", 4, id, &len));   /* DEL */
    assert_false(hc_serve_parse_one("%C2%85", 6, id, &len)); /* C1 (NEL) */
    assert_false(hc_serve_parse_one("%C2%9B", 6, id, &len)); /* C1 (CSI) */
    assert_true(hc_serve_parse_one("%C2%A0", 6, id, &len));  /* U+00A0 is no control */
    assert_false(hc_serve_parse_one("%FF", 3, id, &len));    /* not UTF-8 */
    assert_false(hc_serve_parse_one("%4", 2, id, &len));     /* broken escape */
    assert_false(hc_serve_parse_one("", 0, id, &len));
    char big[3 * 257];
    for (int i = 0; i < 257; i++) {
        memcpy(big + 3 * i, "%41", 3);
    }
    assert_true(hc_serve_parse_one(big, 3 * 256, id, &len));
    assert_int_equal(len, 256);
    assert_false(hc_serve_parse_one(big, 3 * 257, id, &len));
}

/* route_top judged the decoded digits with strspn before terminating them (valgrind: an
 * uninitialised read): the verdict must depend on the value's bytes only. */
static void top_n_is_a_whole_number_given_once(void **state)
{
    (void)state;
    uint64_t n;
    assert_true(hc_serve_parse_top_n("", 100, &n));
    assert_int_equal(n, 10);
    assert_true(hc_serve_parse_top_n("n=12", 100, &n));
    assert_int_equal(n, 12);
    assert_true(hc_serve_parse_top_n("x=1&n=%31%32", 100, &n));
    assert_int_equal(n, 12);
    assert_true(hc_serve_parse_top_n("n=100", 100, &n));
    assert_false(hc_serve_parse_top_n("n=101", 100, &n));
    assert_false(hc_serve_parse_top_n("n=0", 100, &n));
    assert_false(hc_serve_parse_top_n("n=", 100, &n));
    assert_false(hc_serve_parse_top_n("n", 100, &n));
    assert_false(hc_serve_parse_top_n("n=1a", 100, &n));
    assert_false(hc_serve_parse_top_n("n=1%00", 100, &n));
    assert_false(hc_serve_parse_top_n("n=1+2", 100, &n));
    assert_false(hc_serve_parse_top_n("n=-1", 100, &n));
    assert_true(hc_serve_parse_top_n("n=1234567", 10000000, &n));
    assert_false(hc_serve_parse_top_n("n=12345678", 100000000, &n)); /* 8 digits: too long */
    assert_false(hc_serve_parse_top_n("n=5&n=5", 100, &n));
}

static void ids_split_at_literal_commas(void **state)
{
    (void)state;
    hc_serve_ids_t it;
    char id[HC_POST_ID_MAX + 1];
    size_t len;
    bool ok;
    assert_int_equal(hc_serve_parse_ids("ids=a,b%2Cc,d+e", 10, &it), HC_IDS_OK);
    assert_true(hc_serve_next_id(&it, id, &len, &ok) && ok);
    assert_string_equal(id, "a");
    assert_true(hc_serve_next_id(&it, id, &len, &ok) && ok);
    assert_string_equal(id, "b,c");
    assert_true(hc_serve_next_id(&it, id, &len, &ok) && ok);
    assert_string_equal(id, "d e");
    assert_false(hc_serve_next_id(&it, id, &len, &ok));
    assert_int_equal(hc_serve_parse_ids("ids=a,,b", 10, &it), HC_IDS_OK);
    assert_true(hc_serve_next_id(&it, id, &len, &ok) && ok);
    assert_true(hc_serve_next_id(&it, id, &len, &ok) && !ok); /* the empty one */
    assert_int_equal(hc_serve_parse_ids("ids=a,%C2%80", 10, &it), HC_IDS_OK);
    assert_true(hc_serve_next_id(&it, id, &len, &ok) && ok);
    assert_true(hc_serve_next_id(&it, id, &len, &ok) && !ok); /* C1 */
    assert_int_equal(hc_serve_parse_ids("ids=a,b,c", 2, &it), HC_IDS_TOO_MANY);
    assert_int_equal(hc_serve_parse_ids("ids=", 2, &it), HC_IDS_MISSING);
    assert_int_equal(hc_serve_parse_ids("x=1", 2, &it), HC_IDS_MISSING);
    assert_int_equal(hc_serve_parse_ids("ids=a&ids=b", 2, &it), HC_IDS_MISSING);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(routes_raw_uris),
        cmocka_unit_test(one_post_id_follows_the_event_rule),
        cmocka_unit_test(top_n_is_a_whole_number_given_once),
        cmocka_unit_test(ids_split_at_literal_commas),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
