/* Unit tests for src/base/redact.c: every form of secret the configuration can carry comes out
 * as "***", and everything around it (scheme, user, host, other options) stays readable. */
#if !defined(_GNU_SOURCE) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L
#endif

/* cmocka.h needs these first. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "hotcount/config.h"
#include "hotcount/redact.h"
#include "store_facts_stub.h"

#define SECRET "s3cr3t-PW"

static void uri_is(const char *in, const char *want)
{
    char out[512];
    hc_redact_uri(in, out, sizeof(out));
    assert_string_equal(out, want);
}

/* Mutant: the userinfo split at the first '@' or the password kept. */
static void uri_userinfo_password_is_redacted(void **state)
{
    (void)state;
    uri_is("redis://user:" SECRET "@host:6379/0", "redis://user:***@host:6379/0");
    uri_is("redis://:" SECRET "@host", "redis://:***@host");
    uri_is("postgresql://hc:" SECRET "@db:5432/likes", "postgresql://hc:***@db:5432/likes");
    uri_is("postgres://hc:p@ss/w:rd@db/likes", "postgres://hc:***@db/likes");
    /* a mistyped scheme is still a URI with a password (issue 16) */
    uri_is("redsi://user:" SECRET "@host:1/0", "redsi://user:***@host:1/0");
    uri_is("user:" SECRET "@host", "user:***@host");
}

/* Mutant: only the userinfo form handled. */
static void uri_password_options_are_redacted(void **state)
{
    (void)state;
    uri_is("postgresql://db/likes?user=hc&password=" SECRET "&sslmode=require",
           "postgresql://db/likes?user=hc&password=***&sslmode=require");
    uri_is("redis://host?password=" SECRET, "redis://host?password=***");
    uri_is("host=db user=hc password=" SECRET " dbname=likes",
           "host=db user=hc password=*** dbname=likes");
    uri_is("host=db password = '" SECRET " with \\' quote' dbname=likes",
           "host=db password = *** dbname=likes");
    uri_is("host=db sslpassword=" SECRET, "host=db sslpassword=***");
    uri_is("host=db PASSWORD=" SECRET, "host=db PASSWORD=***");
}

/* Mutant: harmless text changed. */
static void uri_without_secret_is_unchanged(void **state)
{
    (void)state;
    uri_is("sqlite:hotcount.db", "sqlite:hotcount.db");
    uri_is("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0");
    uri_is("postgresql://hc@db/likes", "postgresql://hc@db/likes");
    uri_is("host=db user=hc", "host=db user=hc");
    uri_is("", "");
}

/* Mutant: a cut output buffer leaks the secret, or writes past it. */
static void uri_cut_to_a_short_buffer_stays_terminated(void **state)
{
    char out[16];
    (void)state;
    memset(out, 'x', sizeof(out));
    hc_redact_uri("redis://user:" SECRET "@host", out, sizeof(out));
    assert_int_equal(strlen(out), sizeof(out) - 1);
    assert_null(strstr(out, "s3cr"));
    hc_redact_uri("redis://u:" SECRET "@h", out, 1);
    assert_string_equal(out, "");
}

/* Mutant: a secret kafka key shown, or an ordinary one hidden. */
static void secret_keys_are_recognised(void **state)
{
    (void)state;
    assert_true(hc_redact_is_secret_key("kafka.sasl.password"));
    assert_true(hc_redact_is_secret_key("kafka.consumer.sasl.password"));
    assert_true(hc_redact_is_secret_key("kafka.producer.sasl.username"));
    assert_true(hc_redact_is_secret_key("kafka.sasl.jaas.config"));
    assert_true(hc_redact_is_secret_key("kafka.ssl.key.password"));
    assert_true(hc_redact_is_secret_key("kafka.ssl.keystore.password"));
    assert_true(hc_redact_is_secret_key("kafka.sasl.oauthbearer.client.secret"));
    assert_true(hc_redact_is_secret_key("kafka.ssl.key.pem"));
    assert_true(hc_redact_is_secret_key("sasl.password"));
    assert_true(hc_redact_is_secret_key("ssl.key.password"));
    assert_false(hc_redact_is_secret_key("kafka.linger.ms"));
    assert_false(hc_redact_is_secret_key("kafka.security.protocol"));
    assert_false(hc_redact_is_secret_key("store"));
    assert_false(hc_redact_is_secret_key("brokers"));
}

static void assignment_is(const char *in, const char *want)
{
    char out[512];
    hc_redact_assignment(in, out, sizeof(out));
    assert_string_equal(out, want);
}

/* Mutant: -X text or a properties line quoted as given. */
static void assignments_redact_by_key_and_by_uri(void **state)
{
    (void)state;
    assignment_is("kafka.sasl.password=" SECRET, "kafka.sasl.password=***");
    assignment_is(" kafka.ssl.key.password = " SECRET, " kafka.ssl.key.password =***");
    assignment_is("store=redis://:" SECRET "@h", "store=redis://:***@h");
    assignment_is("store:redis://u:" SECRET "@h", "store:redis://u:***@h"); /* no '=' */
    assignment_is("store redis://u:" SECRET "@h", "store redis://u:***@h");
    assignment_is("flush.ms=1000", "flush.ms=1000");
    assignment_is("kafka.sasl.password " SECRET, "kafka.sasl.password ***");
    assignment_is("kafka.sasl.password:" SECRET, "kafka.sasl.password:***");
    assignment_is("flush.ms 1000", "flush.ms 1000");
}

/* Mutant: an occurrence after the first left, or a short secret blanking ordinary words. */
static void secret_in_text_replaces_every_occurrence(void **state)
{
    char text[128] = "a " SECRET " b " SECRET " c";
    (void)state;
    hc_redact_secret_in(text, sizeof(text), SECRET);
    assert_string_equal(text, "a *** b *** c");
    char plain[] = "an error at the store";
    hc_redact_secret_in(plain, sizeof(plain), "e");
    assert_string_equal(plain, "an error at the store");
}

/* Mutant: the safety net misses the store's password or a sasl value, or its decoded form. */
static void config_secrets_are_scrubbed_from_any_text(void **state)
{
    hc_config_t cfg;
    char errstr[256];
    (void)state;
    assert_int_equal(hc_config_init(&cfg, stub_stores), HC_OK);
    assert_int_equal(
        hc_config_set(&cfg, "store", "redis://u:pa%21ss" SECRET "@h:1/0", errstr, sizeof(errstr)),
        HC_OK);
    assert_int_equal(
        hc_config_set(&cfg, "kafka.sasl.password", "kafka-" SECRET, errstr, sizeof(errstr)), HC_OK);
    char text[256] = "auth pa!ss" SECRET " failed; raw pa%21ss" SECRET "; sasl kafka-" SECRET;
    hc_redact_config_secrets(text, sizeof(text), &cfg);
    assert_null(strstr(text, SECRET));
    assert_string_equal(text, "auth *** failed; raw ***; sasl ***");
    hc_config_fini(&cfg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(uri_userinfo_password_is_redacted),
        cmocka_unit_test(uri_password_options_are_redacted),
        cmocka_unit_test(uri_without_secret_is_unchanged),
        cmocka_unit_test(uri_cut_to_a_short_buffer_stays_terminated),
        cmocka_unit_test(secret_keys_are_recognised),
        cmocka_unit_test(assignments_redact_by_key_and_by_uri),
        cmocka_unit_test(secret_in_text_replaces_every_occurrence),
        cmocka_unit_test(config_secrets_are_scrubbed_from_any_text),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
