/* Authenticated partials (core/partial_auth.h): HMAC-SHA256 on RFC 4231's test vectors, the key
 * file's rules, and sign/verify, which must refuse every change to the signed bytes. The
 * differential test against Python's hmac on random inputs is test_partial_auth.py. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* cmocka.h needs the four headers above first. */
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "hotcount/partial_auth.h"

static void hex_of(const uint8_t *b, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++) {
        snprintf(out + 2 * i, 3, "%02x", b[i]);
    }
}

static void expect_hmac(const uint8_t *key, size_t key_len, const void *msg, size_t msg_len,
                        const char *want)
{
    uint8_t mac[32];
    const void *parts[1] = {msg};
    size_t lens[1] = {msg_len};
    hc_hmac_sha256(key, key_len, parts, lens, 1, mac);
    char hex[65];
    hex_of(mac, 32, hex);
    assert_string_equal(hex, want);
}

/* RFC 4231, section 4: test cases 1, 2, 3, 4, 6 and 7 (5 truncates the output). */
static void hmac_matches_rfc_4231(void **state)
{
    (void)state;
    uint8_t k[131];
    memset(k, 0x0b, 20);
    expect_hmac(k, 20, "Hi There", 8,
                "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
    expect_hmac((const uint8_t *)"Jefe", 4, "what do ya want for nothing?", 28,
                "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    uint8_t d[50];
    memset(k, 0xaa, 20);
    memset(d, 0xdd, 50);
    expect_hmac(k, 20, d, 50, "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
    for (int i = 0; i < 25; i++) {
        k[i] = (uint8_t)(i + 1);
    }
    memset(d, 0xcd, 50);
    expect_hmac(k, 25, d, 50, "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b");
    memset(k, 0xaa, 131);
    expect_hmac(k, 131, "Test Using Larger Than Block-Size Key - Hash Key First", 54,
                "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
    const char *m7 = "This is a test using a larger than block-size key and a larger than "
                     "block-size data. The key needs to be hashed before being used by the HMAC "
                     "algorithm.";
    expect_hmac(k, 131, m7, strlen(m7),
                "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
    /* parts are concatenated: the same MAC as one buffer */
    uint8_t one[32], split[32];
    const void *p1[1] = {m7};
    size_t l1[1] = {strlen(m7)};
    hc_hmac_sha256(k, 131, p1, l1, 1, one);
    const void *p3[3] = {m7, m7 + 10, m7 + 70};
    size_t l3[3] = {10, 60, strlen(m7) - 70};
    hc_hmac_sha256(k, 131, p3, l3, 3, split);
    assert_memory_equal(one, split, 32);
}

#define SECRET1 "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
#define SECRET2 "ff0102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"

static void key_file_rules(void **state)
{
    (void)state;
    hc_auth_keyring_t kr;
    char err[256];
    const char *good = "# comment\n\n  k1 " SECRET1 "  \r\nk-2.b\t" SECRET2 "\n";
    assert_int_equal(hc_auth_keyring_parse(&kr, good, strlen(good), err, sizeof(err)), HC_OK);
    assert_int_equal(kr.count, 2);
    assert_string_equal(kr.keys[0].id, "k1");
    assert_string_equal(kr.keys[1].id, "k-2.b");
    assert_int_equal(kr.keys[0].secret_len, 32);
    assert_int_equal(kr.keys[0].secret[31], 0x1f);
    static const char *const bad[] = {
        "",
        "# only a comment\n",
        "k1\n",
        "k1 abc\n",                                         /* odd, short */
        "k1 " SECRET1 "0\n",                                /* odd */
        "k1 0001\n",                                        /* short */
        "k1 " SECRET1 "\nk2 " SECRET2 "\nk3 " SECRET1 "\n", /* three */
        "k1 " SECRET1 "\nk1 " SECRET2 "\n",                 /* one id twice */
        "k/1 " SECRET1 "\n",                                /* id character */
        "k1 " SECRET1 "zz\n",                               /* not hex */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = '\0';
        assert_int_equal(hc_auth_keyring_parse(&kr, bad[i], strlen(bad[i]), err, sizeof(err)),
                         HC_ERR_INVALID);
        assert_true(err[0] != '\0');
        /* no error quotes a secret */
        assert_null(strstr(err, "0102030405"));
    }
}

static void keyring(hc_auth_keyring_t *kr, const char *text)
{
    char err[256];
    assert_int_equal(hc_auth_keyring_parse(kr, text, strlen(text), err, sizeof(err)), HC_OK);
}

/* mutant: verify that ignores the window header, or the length prefix (a byte moved from the
 * window to the value keeps the MAC) */
static void verify_refuses_every_change(void **state)
{
    (void)state;
    hc_auth_keyring_t kr;
    keyring(&kr, "k1 " SECRET1 "\n");
    const char *win = "1 0123456789abcdef 1000 5 0:100+10";
    const char *val =
        "{\"post_id\":\"p\",\"delta\":1,\"events\":1,\"ts_min\":null,\"ts_max\":null}";
    char sig[HC_AUTH_VALUE_MAX + 1];
    size_t n = hc_auth_sign(&kr, win, strlen(win), val, strlen(val), sig);
    assert_int_equal(n, 3 + 64);
    assert_int_equal(strncmp(sig, "k1:", 3), 0);
    char err[256];
    assert_true(hc_auth_verify(&kr, sig, n, win, strlen(win), val, strlen(val), err, sizeof(err)));
    /* the value, the window, a byte moved between them, no window */
    char v2[128];
    snprintf(v2, sizeof(v2), "%s", val);
    v2[27] = '2';
    assert_false(hc_auth_verify(&kr, sig, n, win, strlen(win), v2, strlen(v2), err, sizeof(err)));
    assert_non_null(strstr(err, "does not match"));
    assert_false(hc_auth_verify(&kr, sig, n, "1 0123456789abcdef 1000 5 0:100+11", strlen(win), val,
                                strlen(val), err, sizeof(err)));
    char moved[256];
    snprintf(moved, sizeof(moved), "4%s", val);
    assert_false(
        hc_auth_verify(&kr, sig, n, win, strlen(win) - 1, moved, strlen(moved), err, sizeof(err)));
    assert_false(hc_auth_verify(&kr, sig, n, NULL, 0, val, strlen(val), err, sizeof(err)));
    /* missing, malformed, upper-case hex, another key id, the right id with another secret */
    assert_false(
        hc_auth_verify(&kr, NULL, 0, win, strlen(win), val, strlen(val), err, sizeof(err)));
    assert_non_null(strstr(err, "no hotcount-auth"));
    assert_false(
        hc_auth_verify(&kr, sig, n - 1, win, strlen(win), val, strlen(val), err, sizeof(err)));
    char upper[HC_AUTH_VALUE_MAX + 1];
    memcpy(upper, sig, n + 1);
    for (size_t i = 3; i < n; i++) {
        upper[i] = (char)(upper[i] >= 'a' && upper[i] <= 'f' ? upper[i] - 32 : upper[i]);
    }
    if (memcmp(upper, sig, n) != 0) {
        assert_false(
            hc_auth_verify(&kr, upper, n, win, strlen(win), val, strlen(val), err, sizeof(err)));
    }
    char other[HC_AUTH_VALUE_MAX + 1];
    memcpy(other, sig, n + 1);
    other[1] = '9';
    assert_false(
        hc_auth_verify(&kr, other, n, win, strlen(win), val, strlen(val), err, sizeof(err)));
    hc_auth_keyring_t kr2;
    keyring(&kr2, "k1 " SECRET2 "\n");
    assert_false(
        hc_auth_verify(&kr2, sig, n, win, strlen(win), val, strlen(val), err, sizeof(err)));
    assert_null(strstr(err, "000102")); /* never a secret, never a MAC */
}

/* A rotation: the new key listed second verifies; listed first it signs, and the old one still
 * verifies what was signed before. mutant: only the first key verifies */
static void rotation_accepts_both_keys(void **state)
{
    (void)state;
    hc_auth_keyring_t old_only, both_old_first, both_new_first, new_only;
    keyring(&old_only, "old " SECRET1 "\n");
    keyring(&both_old_first, "old " SECRET1 "\nnew " SECRET2 "\n");
    keyring(&both_new_first, "new " SECRET2 "\nold " SECRET1 "\n");
    keyring(&new_only, "new " SECRET2 "\n");
    char s_old[HC_AUTH_VALUE_MAX + 1], s_new[HC_AUTH_VALUE_MAX + 1], err[256];
    size_t n_old = hc_auth_sign(&old_only, "w", 1, "v", 1, s_old);
    size_t n_new = hc_auth_sign(&both_new_first, "w", 1, "v", 1, s_new);
    assert_int_equal(strncmp(s_new, "new:", 4), 0);
    assert_true(hc_auth_verify(&both_old_first, s_old, n_old, "w", 1, "v", 1, err, sizeof(err)));
    assert_true(hc_auth_verify(&both_old_first, s_new, n_new, "w", 1, "v", 1, err, sizeof(err)));
    assert_true(hc_auth_verify(&both_new_first, s_old, n_old, "w", 1, "v", 1, err, sizeof(err)));
    assert_true(hc_auth_verify(&new_only, s_new, n_new, "w", 1, "v", 1, err, sizeof(err)));
    assert_false(hc_auth_verify(&new_only, s_old, n_old, "w", 1, "v", 1, err, sizeof(err)));
    /* a generated key file parses and signs */
    uint8_t rnd[32];
    for (int i = 0; i < 32; i++) {
        rnd[i] = (uint8_t)(i * 7);
    }
    char text[200];
    size_t len = hc_auth_key_file_text("k20261205", rnd, text, sizeof(text));
    assert_true(len > 0);
    hc_auth_keyring_t gen;
    keyring(&gen, text);
    assert_int_equal(gen.count, 1);
    assert_memory_equal(gen.keys[0].secret, rnd, 32);
    hc_auth_keyring_wipe(&gen);
    assert_int_equal(gen.keys[0].secret[5], 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(hmac_matches_rfc_4231),
        cmocka_unit_test(key_file_rules),
        cmocka_unit_test(verify_refuses_every_change),
        cmocka_unit_test(rotation_accepts_both_keys),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
