/* Unit tests for src/base/secret_file.c and the `*.file` keys of src/base/config.c: a secret
 * comes out of its file whole, less its line end; a bad file is refused naming the key and the
 * path and never a byte of the content; the configuration keeps the content as the secret and
 * base/redact.h hides it. */
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
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hotcount/config.h"
#include "hotcount/redact.h"
#include "hotcount/secret_file.h"
#include "store_facts_stub.h"

#define SECRET "Sf7-secret-VALUE"

static char dir[64];
static char path[128];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof(dir), "/tmp/hc-secret-file.XXXXXX");
    if (mkdtemp(dir) == NULL) {
        return -1;
    }
    snprintf(path, sizeof(path), "%s/secret", dir);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    unlink(path);
    rmdir(dir);
    return 0;
}

static void write_file(const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

static void reads_as(const char *content, const char *want)
{
    char errstr[256] = "";
    char *secret = NULL;

    write_file(content, strlen(content));
    assert_int_equal(hc_secret_file_read("k.file", path, &secret, errstr, sizeof(errstr)), HC_OK);
    assert_string_equal(secret, want);
    free(secret);
}

/* Mutant: the line end kept (a password that never matches), or inner bytes cut. */
static void read_drops_only_trailing_line_ends(void **state)
{
    (void)state;
    reads_as(SECRET, SECRET);
    reads_as(SECRET "\n", SECRET);
    reads_as(SECRET "\r\n", SECRET);
    reads_as(SECRET "\n\n", SECRET);
    reads_as(" " SECRET " ", " " SECRET " "); /* blanks may belong to a password */
    reads_as("-----BEGIN KEY-----\nabc\n-----END KEY-----\n",
             "-----BEGIN KEY-----\nabc\n-----END KEY-----");
}

/* errstr names key and path, says why, and holds nothing of the content */
static void refused(const void *content, size_t len, const char *why)
{
    char errstr[256] = "";
    char *secret = (char *)1;

    write_file(content, len);
    assert_int_equal(hc_secret_file_read("k.file", path, &secret, errstr, sizeof(errstr)),
                     HC_ERR_INVALID);
    assert_null(secret);
    assert_non_null(strstr(errstr, "k.file: "));
    assert_non_null(strstr(errstr, path));
    assert_non_null(strstr(errstr, why));
    assert_null(strstr(errstr, "Sf7"));
}

static void read_refuses_empty_nul_and_oversized_files(void **state)
{
    (void)state;
    refused("", 0, "is empty");
    refused("\n\r\n", 3, "is empty");
    refused(SECRET "\0" SECRET, sizeof(SECRET) * 2 - 1, "NUL byte");
    char *big = malloc(HC_SECRET_FILE_MAX + 1);
    assert_non_null(big);
    memset(big, 'S', HC_SECRET_FILE_MAX + 1);
    memcpy(big, "Sf7", 3);
    refused(big, HC_SECRET_FILE_MAX + 1, "larger than");
    memset(big, 'x', HC_SECRET_FILE_MAX); /* exactly the maximum is fine */
    write_file(big, HC_SECRET_FILE_MAX);
    char errstr[256];
    char *secret = NULL;
    assert_int_equal(hc_secret_file_read("k.file", path, &secret, errstr, sizeof(errstr)), HC_OK);
    assert_int_equal(strlen(secret), HC_SECRET_FILE_MAX);
    free(secret);
    free(big);
}

static void read_refuses_missing_files_and_directories(void **state)
{
    char errstr[256] = "";
    char *secret = NULL;
    (void)state;

    assert_int_equal(
        hc_secret_file_read("k.file", "/nonexistent/x", &secret, errstr, sizeof(errstr)),
        HC_ERR_INVALID);
    assert_non_null(strstr(errstr, "k.file: /nonexistent/x: No such file"));
    assert_int_equal(hc_secret_file_read("k.file", dir, &secret, errstr, sizeof(errstr)),
                     HC_ERR_INVALID);
    assert_non_null(strstr(errstr, "not a regular file"));
    assert_int_equal(hc_secret_file_read("k.file", "", &secret, errstr, sizeof(errstr)),
                     HC_ERR_INVALID);
    assert_null(secret);
}

static const hc_kafka_prop_t *prop(const hc_config_t *cfg, hc_kafka_scope_t scope, const char *name)
{
    for (size_t i = 0; i < cfg->kafka_prop_count; i++) {
        if (cfg->kafka_props[i].scope == scope && strcmp(cfg->kafka_props[i].name, name) == 0) {
            return &cfg->kafka_props[i];
        }
    }
    return NULL;
}

/* Mutant: the path passed to librdkafka as the password, or the scope lost. */
static void kafka_file_key_sets_the_secret_property(void **state)
{
    hc_config_t cfg;
    char errstr[256] = "";
    (void)state;

    write_file(SECRET "\n", strlen(SECRET) + 1);
    assert_int_equal(hc_config_init(&cfg, stub_stores), HC_OK);
    assert_int_equal(hc_config_set(&cfg, "kafka.sasl.password.file", path, errstr, sizeof(errstr)),
                     HC_OK);
    assert_int_equal(
        hc_config_set(&cfg, "kafka.producer.ssl.key.password.file", path, errstr, sizeof(errstr)),
        HC_OK);
    const hc_kafka_prop_t *kp = prop(&cfg, HC_KAFKA_ALL, "sasl.password");
    assert_non_null(kp);
    assert_string_equal(kp->value, SECRET);
    kp = prop(&cfg, HC_KAFKA_PRODUCER, "ssl.key.password");
    assert_non_null(kp);
    assert_string_equal(kp->value, SECRET);
    assert_null(prop(&cfg, HC_KAFKA_ALL, "sasl.password.file"));
    /* librdkafka's own *.file properties name files it reads: passed through */
    assert_int_equal(
        hc_config_set(&cfg, "kafka.sasl.oauthbearer.assertion.file", path, errstr, sizeof(errstr)),
        HC_OK);
    kp = prop(&cfg, HC_KAFKA_ALL, "sasl.oauthbearer.assertion.file");
    assert_non_null(kp);
    assert_string_equal(kp->value, path);
    /* the content is a secret wherever it could show */
    char text[256];
    snprintf(text, sizeof(text), "librdkafka said %s", SECRET);
    hc_redact_config_secrets(text, sizeof(text), &cfg);
    assert_string_equal(text, "librdkafka said ***");
    hc_config_fini(&cfg);
}

static void kafka_file_key_refuses_a_property_that_is_no_secret(void **state)
{
    hc_config_t cfg;
    char errstr[256] = "";
    (void)state;

    write_file(SECRET, strlen(SECRET));
    assert_int_equal(hc_config_init(&cfg, stub_stores), HC_OK);
    assert_int_equal(hc_config_set(&cfg, "kafka.client.id.file", path, errstr, sizeof(errstr)),
                     HC_ERR_INVALID);
    assert_non_null(strstr(errstr, "kafka.client.id.file: only a secret property"));
    assert_int_equal(cfg.kafka_prop_count, 0);
    assert_int_equal(
        hc_config_set(&cfg, "kafka.sasl.password.file", "/nonexistent/pw", errstr, sizeof(errstr)),
        HC_ERR_INVALID);
    assert_non_null(strstr(errstr, "kafka.sasl.password.file: /nonexistent/pw:"));
    assert_int_equal(cfg.kafka_prop_count, 0); /* nothing changed */
    hc_config_fini(&cfg);
}

/* Mutant: store.password.file's content not kept, kept but not redacted, or a second password
 * in the URI let through. */
static void store_password_file_is_read_checked_and_redacted(void **state)
{
    hc_config_t cfg;
    char errstr[256] = "";
    (void)state;

    write_file(SECRET "\r\n", strlen(SECRET) + 2);
    assert_int_equal(hc_config_init(&cfg, stub_stores), HC_OK);
    assert_string_equal(cfg.store_password, "");
    assert_int_equal(hc_config_set(&cfg, "store.password.file", path, errstr, sizeof(errstr)),
                     HC_OK);
    assert_string_equal(cfg.store_password, SECRET);
    assert_string_equal(cfg.store_password_file, path);
    /* a file that does not read changes nothing */
    assert_int_equal(hc_config_set(&cfg, "store.password.file", dir, errstr, sizeof(errstr)),
                     HC_ERR_INVALID);
    assert_string_equal(cfg.store_password, SECRET);

    /* the store must take a password, and only one */
    assert_int_equal(hc_config_validate(&cfg, errstr, sizeof(errstr)), HC_ERR_INVALID);
    assert_non_null(strstr(errstr, "store.password.file is for"));
    assert_int_equal(hc_config_set(&cfg, "store", "rediss://u:other@h:1/0", errstr, sizeof(errstr)),
                     HC_OK);
    assert_int_equal(hc_config_validate(&cfg, errstr, sizeof(errstr)), HC_ERR_INVALID);
    assert_non_null(strstr(errstr, "give only one"));
    assert_null(strstr(errstr, "other"));
    assert_int_equal(hc_config_set(&cfg, "store", "rediss://u@h:1/0", errstr, sizeof(errstr)),
                     HC_OK);
    assert_int_equal(hc_config_validate(&cfg, errstr, sizeof(errstr)), HC_OK);

    char text[256];
    snprintf(text, sizeof(text), "the server quoted %s back", SECRET);
    hc_redact_config_secrets(text, sizeof(text), &cfg);
    assert_string_equal(text, "the server quoted *** back");

    /* a properties file is applied to a copy: the secret must survive it */
    char props[160];
    snprintf(props, sizeof(props), "%s/hc.properties", dir);
    FILE *f = fopen(props, "w");
    assert_non_null(f);
    fprintf(f, "flush.ms=500\n");
    fclose(f);
    assert_int_equal(hc_config_load_file(&cfg, props, errstr, sizeof(errstr)), HC_OK);
    unlink(props);
    assert_string_equal(cfg.store_password, SECRET);

    /* empty turns it off */
    assert_int_equal(hc_config_set(&cfg, "store.password.file", "", errstr, sizeof(errstr)), HC_OK);
    assert_string_equal(cfg.store_password, "");
    hc_config_fini(&cfg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(read_drops_only_trailing_line_ends, setup, teardown),
        cmocka_unit_test_setup_teardown(read_refuses_empty_nul_and_oversized_files, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(read_refuses_missing_files_and_directories, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(kafka_file_key_sets_the_secret_property, setup, teardown),
        cmocka_unit_test_setup_teardown(kafka_file_key_refuses_a_property_that_is_no_secret, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(store_password_file_is_read_checked_and_redacted, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
