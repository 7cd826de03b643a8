/* The backends' shared toolkit (src/store/store_util.h): the post-id order every backend sorts
 * by, the merge of a batch's deltas, the top-N heap against a full sort, the seen-set across its
 * growth and against ids colliding under an unkeyed hash, FNV-1a's published vectors and
 * percent-decoding. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka.h needs the four above first; the blank line keeps clang-format from sorting it up. */

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_util.h"

static void post_ids_sort_by_bytes_shorter_first(void **state)
{
    (void)state;
    assert_true(hc_store_post_id_cmp("a", 1, "b", 1) < 0);
    assert_true(hc_store_post_id_cmp("ab", 2, "a", 1) > 0);
    assert_true(hc_store_post_id_cmp("a", 1, "ab", 2) < 0);
    assert_int_equal(hc_store_post_id_cmp("a\0b", 3, "a\0b", 3), 0);
    /* bytes are unsigned: 0xff sorts after 'z', as PostgreSQL's "C" collation has it */
    assert_true(hc_store_post_id_cmp("\xff", 1, "z", 1) > 0);
}

static void merge_sums_repeated_ids_in_order(void **state)
{
    hc_store_delta_t d[] = {{"b", 1, 2}, {"a", 1, 1}, {"b", 1, 5}, {"ab", 2, -1}, {"a", 1, 3}};
    size_t n = 0;
    size_t bad = 99;

    (void)state;
    assert_true(hc_store_deltas_merge(d, 5, &n, &bad));
    assert_int_equal(n, 3);
    assert_string_equal(d[0].post_id, "a");
    assert_int_equal(d[0].delta, 4);
    assert_string_equal(d[1].post_id, "ab");
    assert_int_equal(d[1].delta, -1);
    assert_string_equal(d[2].post_id, "b");
    assert_int_equal(d[2].delta, 7);
    assert_int_equal(bad, 99);
}

static void merge_refuses_an_overflowing_sum(void **state)
{
    hc_store_delta_t d[] = {{"x", 1, INT64_MAX}, {"y", 1, 1}, {"x", 1, 1}};
    size_t n = 0;
    size_t bad = 99;

    (void)state;
    assert_false(hc_store_deltas_merge(d, 3, &n, &bad));
    assert_string_equal(d[bad].post_id, "x");
    assert_int_equal(d[bad].delta, 1);
}

static int rank_qsort(const void *a, const void *b)
{
    return hc_store_row_rank(a, b);
}

static void top_keeps_the_best_n_in_rank_order(void **state)
{
    enum { ROWS = 2000 };
    static hc_store_row_t all[ROWS];
    hc_store_row_t best[17];
    hc_store_top_t top;

    (void)state;
    srand(7);
    hc_store_top_init(&top, best, 17);
    for (size_t i = 0; i < ROWS; i++) {
        int len = snprintf(all[i].post_id, sizeof(all[i].post_id), "p%d", rand() % 5000);
        all[i].post_id_len = (size_t)len;
        all[i].likes = rand() % 50 - 10; /* many ties: the id breaks them */
        assert_true(hc_store_top_offer(all[i].post_id, all[i].post_id_len, all[i].likes, &top));
    }
    assert_int_equal(hc_store_top_finish(&top), 17);
    qsort(all, ROWS, sizeof(all[0]), rank_qsort);
    for (size_t i = 0; i < 17; i++) {
        assert_string_equal(best[i].post_id, all[i].post_id);
        assert_int_equal(best[i].likes, all[i].likes);
    }
}

static void top_holds_fewer_rows_than_n(void **state)
{
    hc_store_row_t best[4];
    hc_store_top_t top;

    (void)state;
    hc_store_top_init(&top, best, 4);
    hc_store_top_offer("a", 1, 1, &top);
    hc_store_top_offer("b", 1, 3, &top);
    assert_int_equal(hc_store_top_finish(&top), 2);
    assert_string_equal(best[0].post_id, "b");
    assert_string_equal(best[1].post_id, "a");
}

static void seen_reports_each_id_once_across_growth(void **state)
{
    hc_store_seen_t seen = {0};
    char id[32];
    bool fresh;

    (void)state;
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < 5000; i++) {
            int len = snprintf(id, sizeof(id), "post-%d", i);
            assert_true(hc_store_seen_add(&seen, id, (size_t)len, &fresh));
            assert_int_equal(fresh, round == 0);
        }
    }
    assert_int_equal(seen.count, 5000);
    /* a prefix of a known id is another id */
    assert_true(hc_store_seen_add(&seen, "post-1", 5, &fresh));
    assert_true(fresh);
    hc_store_seen_fini(&seen);
    hc_store_seen_fini(&seen); /* twice is harmless */
}

/* FNV-1a 64, the seen-set's hash before issue 25 (item 6), to compute ids an attacker would. */
static uint64_t old_hash(const char *p, size_t len)
{
    uint64_t h = 14695981039346656037ULL;

    for (size_t i = 0; i < len; i++) {
        h = (h ^ (unsigned char)p[i]) * 0x100000001b3ULL;
    }
    return h;
}

/* Ids whose FNV-1a 64 hashes share their low 12 bits land in one probe run of any table up to
 * 4096 slots (the set holds 1 500 ids in 4096): with that hash each add walked the whole run,
 * about n^2/2 probes (1 124 250 for 1 500 ids). Keyed, they cost what random ids cost. */
static void seen_resists_ids_colliding_under_fnv1a64(void **state)
{
    enum { IDS = 1500 };
    hc_store_seen_t seen = {0};
    hc_store_seen_t plain = {0};
    char id[32];
    bool fresh;
    int found = 0;

    (void)state;
    for (unsigned long c = 0; found < IDS; c++) {
        int len = snprintf(id, sizeof(id), "flood-%lu", c);
        if ((old_hash(id, (size_t)len) & 0xfff) != 0x5a5) {
            continue;
        }
        assert_true(hc_store_seen_add(&seen, id, (size_t)len, &fresh));
        assert_true(fresh);
        found++;
    }
    for (int i = 0; i < IDS; i++) {
        int len = snprintf(id, sizeof(id), "post-%d", i);
        assert_true(hc_store_seen_add(&plain, id, (size_t)len, &fresh));
    }
    assert_int_equal(seen.count, IDS);
    print_message("probes: colliding ids %llu, ordinary ids %llu\n",
                  (unsigned long long)seen.probes, (unsigned long long)plain.probes);
    /* Half full at most: a few probes per add on average; 10 per add leaves room for chance. */
    assert_true(seen.probes < 10 * IDS);
    assert_true(plain.probes < 10 * IDS);
    hc_store_seen_fini(&seen);
    hc_store_seen_fini(&plain);
}

static void percent_decode_decodes_and_refuses_broken_escapes(void **state)
{
    bool bad = false;
    char *out;

    (void)state;
    out = hc_store_percent_decode("p%40ss%2fw%3Ad", 14, &bad);
    assert_non_null(out);
    assert_string_equal(out, "p@ss/w:d");
    free(out);
    out = hc_store_percent_decode("ab%41", 5, &bad);
    assert_string_equal(out, "abA");
    free(out);
    assert_false(bad);
    const char *broken[] = {"%", "%4", "a%zz", "%00", "x%0"};
    for (size_t i = 0; i < sizeof(broken) / sizeof(broken[0]); i++) {
        bad = false;
        assert_null(hc_store_percent_decode(broken[i], strlen(broken[i]), &bad));
        assert_true(bad);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(post_ids_sort_by_bytes_shorter_first),
        cmocka_unit_test(merge_sums_repeated_ids_in_order),
        cmocka_unit_test(merge_refuses_an_overflowing_sum),
        cmocka_unit_test(top_keeps_the_best_n_in_rank_order),
        cmocka_unit_test(top_holds_fewer_rows_than_n),
        cmocka_unit_test(seen_reports_each_id_once_across_growth),
        cmocka_unit_test(seen_resists_ids_colliding_under_fnv1a64),
        cmocka_unit_test(percent_decode_decodes_and_refuses_broken_escapes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
