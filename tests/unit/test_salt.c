/* Producer keying: FNV-1a 32 against published vectors, the salt, the "<post_id>#<salt>" key. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* cmocka.h needs the four headers above; keep it in its own include block */
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "hotcount/salt.h"

/* From the FNV reference test suite (Landon Curt Noll's test_fnv.c, public domain: entries
 * 0-23 and 39 of fnv1a_32_vector); the first twelve also appear in draft-eastlake-fnv. The
 * second group hashes the trailing NUL too, which checks that the length, not a terminator,
 * decides what is hashed. */
static void fnv1a32_matches_published_vectors(void **state)
{
    static const struct {
        const char *data;
        size_t len;
        uint32_t want;
    } vectors[] = {
        {"", 0, 0x811c9dc5u},
        {"a", 1, 0xe40c292cu},
        {"b", 1, 0xe70c2de5u},
        {"c", 1, 0xe60c2c52u},
        {"d", 1, 0xe10c2473u},
        {"e", 1, 0xe00c22e0u},
        {"f", 1, 0xe30c2799u},
        {"fo", 2, 0x6222e842u},
        {"foo", 3, 0xa9f37ed7u},
        {"foob", 4, 0x3f5076efu},
        {"fooba", 5, 0x39aaa18au},
        {"foobar", 6, 0xbf9cf968u},
        {"", 1, 0x050c5d1fu},
        {"a", 2, 0x2b24d044u},
        {"b", 2, 0x9d2c3f7fu},
        {"c", 2, 0x7729c516u},
        {"d", 2, 0xb91d6109u},
        {"e", 2, 0x931ae6a0u},
        {"f", 2, 0x052255dbu},
        {"fo", 3, 0xbef39fe6u},
        {"foo", 4, 0x6150ac75u},
        {"foob", 5, 0x9aab3a3du},
        {"fooba", 6, 0x519c4c3eu},
        {"foobar", 7, 0x0c1c9eb8u},
        {"chongo was here!\n", 17, 0xd49930d5u},
    };
    (void)state;

    for (size_t i = 0; i < sizeof(vectors) / sizeof(vectors[0]); i++) {
        if (hc_fnv1a32(vectors[i].data, vectors[i].len) != vectors[i].want) {
            print_message("vector %zu (\"%s\", %zu bytes): got 0x%08x want 0x%08x\n", i,
                          vectors[i].data, vectors[i].len,
                          (unsigned)hc_fnv1a32(vectors[i].data, vectors[i].len),
                          (unsigned)vectors[i].want);
            fail();
        }
    }
}

static void fnv1a32_hashes_500_nul_bytes_like_the_reference(void **state)
{
    char zeros[500];
    (void)state;

    memset(zeros, 0, sizeof(zeros));
    assert_int_equal(hc_fnv1a32(zeros, sizeof(zeros)), 0xfa823dd5u);
}

static void fnv1a32_uses_the_contract_constants(void **state)
{
    (void)state;
    assert_int_equal(HC_FNV1A32_OFFSET_BASIS, 2166136261u);
    assert_int_equal(HC_FNV1A32_PRIME, 16777619u);
    assert_int_equal(hc_fnv1a32(NULL, 0), HC_FNV1A32_OFFSET_BASIS);
}

static void salt_is_the_hash_modulo_salts(void **state)
{
    static const char *const users[] = {"", "u98765", "foobar", "42", "\xc3\xa9t\xc3\xa9"};
    (void)state;

    for (size_t i = 0; i < sizeof(users) / sizeof(users[0]); i++) {
        size_t n = strlen(users[i]);
        uint32_t h = hc_fnv1a32(users[i], n);
        for (uint32_t salts = 1; salts <= 64; salts++) {
            assert_int_equal(hc_salt(users[i], n, salts), h % salts);
        }
        assert_int_equal(hc_salt(users[i], n, UINT32_MAX), h % UINT32_MAX);
    }
    /* worked example: fnv1a32("foobar") = 0xbf9cf968 = 3214735720, 3214735720 % 16 = 8 */
    assert_int_equal(hc_salt("foobar", 6, 16), 8);
    assert_int_equal(hc_salt("foobar", 6, 1), 0);
}

static void salt_of_zero_salts_is_zero_not_a_crash(void **state)
{
    (void)state;
    assert_int_equal(hc_salt("foobar", 6, 0), 0);
}

static void salt_spreads_users_over_every_salt(void **state)
{
    unsigned seen[16] = {0};
    char uid[16];
    (void)state;

    for (int i = 0; i < 1600; i++) {
        int n = snprintf(uid, sizeof(uid), "u%d", i);
        seen[hc_salt(uid, (size_t)n, 16)]++;
    }
    for (int s = 0; s < 16; s++) {
        assert_in_range(seen[s], 50, 150); /* 100 expected */
    }
}

static void key_is_post_id_hash_salt(void **state)
{
    char buf[64];
    (void)state;

    memset(buf, 'X', sizeof(buf));
    assert_int_equal(hc_salt_key(buf, sizeof(buf), "p123456", 7, 8), 9);
    assert_string_equal(buf, "p123456#8");
    assert_int_equal(hc_salt_key(buf, sizeof(buf), "p1", 2, 15), 5);
    assert_string_equal(buf, "p1#15");
    assert_int_equal(hc_salt_key(buf, sizeof(buf), "p1", 2, 0), 4);
    assert_string_equal(buf, "p1#0");
    assert_int_equal(hc_salt_key(buf, sizeof(buf), "p1", 2, UINT32_MAX), 13);
    assert_string_equal(buf, "p1#4294967295");
    assert_int_equal(hc_salt_key(buf, sizeof(buf), "", 0, 3), 2);
    assert_string_equal(buf, "#3");
}

static void key_copies_post_id_bytes_verbatim(void **state)
{
    char buf[32];
    (void)state;

    /* post ids are bytes: NUL-free by contract, but '#' and UTF-8 pass through untouched */
    assert_int_equal(hc_salt_key(buf, sizeof(buf), "a#b\xc3\xa9", 5, 7), 7);
    assert_memory_equal(buf, "a#b\xc3\xa9#7", 8);
    /* only post_id_len bytes are read */
    assert_int_equal(hc_salt_key(buf, sizeof(buf), "p12345", 2, 1), 4);
    assert_string_equal(buf, "p1#1");
}

static void key_fills_buffer_exactly_without_terminator(void **state)
{
    char buf[8];
    (void)state;

    memset(buf, 'X', sizeof(buf));
    assert_int_equal(hc_salt_key(buf, 5, "p1", 2, 15), 5);
    assert_memory_equal(buf, "p1#15XXX", 8);
    assert_int_equal(hc_salt_key(buf, 6, "p1", 2, 15), 5);
    assert_memory_equal(buf, "p1#15\0XX", 8);
}

static void key_reports_too_small_buffer_and_writes_nothing(void **state)
{
    char buf[8];
    (void)state;

    memset(buf, 'X', sizeof(buf));
    assert_int_equal(hc_salt_key(buf, 4, "p1", 2, 15), 0);
    assert_int_equal(hc_salt_key(buf, 2, "p1", 2, 1), 0);
    assert_int_equal(hc_salt_key(buf, 0, "p1", 2, 1), 0);
    assert_int_equal(hc_salt_key(NULL, 0, "p1", 2, 1), 0);
    assert_int_equal(hc_salt_key(buf, 1, "", 0, 1), 0);
    assert_memory_equal(buf, "XXXXXXXX", 8);
    /* a length that would wrap size_t arithmetic is still just too big */
    assert_int_equal(hc_salt_key(buf, sizeof(buf), "p1", SIZE_MAX, 1), 0);
    assert_int_equal(hc_salt_key(buf, sizeof(buf), "p1", SIZE_MAX - 1, 1), 0);
    assert_memory_equal(buf, "XXXXXXXX", 8);
}

static void key_fits_longest_post_id_and_salt(void **state)
{
    char post_id[256];
    char buf[256 + 1 + 10];
    (void)state;

    memset(post_id, 'p', sizeof(post_id));
    assert_int_equal(hc_salt_key(buf, sizeof(buf), post_id, sizeof(post_id), UINT32_MAX),
                     sizeof(buf));
    assert_memory_equal(buf + 256, "#4294967295", 11);
    assert_int_equal(hc_salt_key(buf, sizeof(buf) - 1, post_id, sizeof(post_id), UINT32_MAX), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(fnv1a32_matches_published_vectors),
        cmocka_unit_test(fnv1a32_hashes_500_nul_bytes_like_the_reference),
        cmocka_unit_test(fnv1a32_uses_the_contract_constants),
        cmocka_unit_test(salt_is_the_hash_modulo_salts),
        cmocka_unit_test(salt_of_zero_salts_is_zero_not_a_crash),
        cmocka_unit_test(salt_spreads_users_over_every_salt),
        cmocka_unit_test(key_is_post_id_hash_salt),
        cmocka_unit_test(key_copies_post_id_bytes_verbatim),
        cmocka_unit_test(key_fills_buffer_exactly_without_terminator),
        cmocka_unit_test(key_reports_too_small_buffer_and_writes_nothing),
        cmocka_unit_test(key_fits_longest_post_id_and_salt),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
