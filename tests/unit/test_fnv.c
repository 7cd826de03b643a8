/* FNV-1a's one home (src/core/fnv.c): the FNV reference's vectors, and a differential test
 * against the three 64-bit copies it replaced (serve's ETag hash, the source check's writer tag
 * over a C string, the store toolkit's), which must agree on every input, chunked or not. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "hotcount/fnv.h"

/* ---- the copies as they were (src/serve/serve_http.c, src/stage/source_check.c,
 * src/store/store_util.c before the move) ---- */
static uint64_t old_serve_fnv64(uint64_t h, const void *data, size_t n)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) {
        h = (h ^ p[i]) * 1099511628211ull;
    }
    return h;
}

static uint64_t old_source_fnv1a64(const char *s)
{
    uint64_t h = 14695981039346656037ULL;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ULL;
    }
    return h;
}

static uint64_t old_store_fnv1a64(uint64_t h, const void *data, size_t len)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < len; i++) {
        h = (h ^ p[i]) * 0x100000001b3ULL;
    }
    return h;
}

/* mutant: a wrong prime or basis, xor and multiply swapped (FNV-1 instead of FNV-1a) */
static void reference_vectors(void **state)
{
    (void)state;
    static const struct {
        const char *s;
        uint32_t h32;
        uint64_t h64;
    } v[] = {
        {"", 0x811c9dc5u, 0xcbf29ce484222325ULL},
        {"a", 0xe40c292cu, 0xaf63dc4c8601ec8cULL},
        {"foobar", 0xbf9cf968u, 0x85944171f73967e8ULL},
    };
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
        assert_int_equal(hc_fnv1a32(v[i].s, strlen(v[i].s)), v[i].h32);
        assert_true(hc_fnv1a64(HC_FNV1A64_BASIS, v[i].s, strlen(v[i].s)) == v[i].h64);
    }
    assert_int_equal(HC_FNV1A32_OFFSET_BASIS, 2166136261u);
    assert_int_equal(HC_FNV1A32_PRIME, 16777619u);
    assert_true(HC_FNV1A64_BASIS == 0xcbf29ce484222325ULL);
    assert_true(HC_FNV1A64_PRIME == 0x100000001b3ULL);
}

/* mutant: a chunked hash that restarts from the basis (an ETag of several rows) */
static void same_as_the_copies_it_replaced(void **state)
{
    (void)state;
    srand(28);
    for (int round = 0; round < 2000; round++) {
        unsigned char buf[300];
        size_t len = (size_t)(rand() % (int)sizeof(buf));
        for (size_t i = 0; i < len; i++) {
            buf[i] = (unsigned char)(1 + rand() % 255); /* no NUL: the C-string copy stops */
        }
        size_t cut = len ? (size_t)rand() % len : 0;
        uint64_t want =
            old_serve_fnv64(old_serve_fnv64(HC_FNV1A64_BASIS, buf, cut), buf + cut, len - cut);
        uint64_t got = hc_fnv1a64(hc_fnv1a64(HC_FNV1A64_BASIS, buf, cut), buf + cut, len - cut);
        assert_true(got == want);
        assert_true(got == old_store_fnv1a64(HC_FNV1A64_BASIS, buf, len));
        char s[sizeof(buf) + 1];
        memcpy(s, buf, len);
        s[len] = '\0';
        assert_true(got == old_source_fnv1a64(s));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(reference_vectors),
        cmocka_unit_test(same_as_the_copies_it_replaced),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
