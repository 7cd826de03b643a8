/* The backend descriptors (src/store/store_impl.h) and what is derived from them: the list
 * hc_store_facts() hands to the configuration, the `store` check, the store.password.file rule,
 * the store's timeouts (the numbers the backends held before they became descriptors), --help,
 * hc_store_open's messages; and that the base tests' stand-in (tests/support/store_facts_stub.h)
 * says what the real backends say. No sockets: nothing here opens a server's store. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka.h needs the four above first; the blank line keeps clang-format from sorting it up. */

#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hotcount/config.h"
#include "hotcount/store.h"
#include "store_facts_stub.h"
#include "store_impl.h"

#define ERRSTR_SIZE 1024

static int setup(void **state)
{
    hc_config_t *cfg = malloc(sizeof(*cfg));

    if (cfg == NULL || hc_config_init(cfg, hc_store_facts()) != HC_OK) {
        free(cfg);
        return -1;
    }
    *state = cfg;
    return 0;
}

static int teardown(void **state)
{
    hc_config_fini(*state);
    free(*state);
    return 0;
}

static void set_ok(hc_config_t *cfg, const char *key, const char *value)
{
    char errstr[ERRSTR_SIZE] = "";

    if (hc_config_set(cfg, key, value, errstr, sizeof(errstr)) != HC_OK) {
        fail_msg("%s=%s: %s", key, value, errstr);
    }
}

static size_t count_facts(const hc_store_facts_t *const *f)
{
    size_t n = 0;

    while (f[n] != NULL) {
        n++;
    }
    return n;
}

static void every_descriptor_is_complete_and_named_like_its_ops(void **state)
{
#define ONE(b) &hc_store_##b##_backend,
    static const hc_store_backend_t *const all[] = {HC_STORE_BACKENDS(ONE) NULL};
#undef ONE
    const hc_store_facts_t *const *facts = hc_store_facts();

    (void)state;
    assert_int_equal(count_facts(facts), sizeof(all) / sizeof(all[0]) - 1);
    for (size_t i = 0; all[i] != NULL; i++) {
        const hc_store_backend_t *be = all[i];

        assert_ptr_equal(facts[i], &be->facts);
        assert_non_null(be->ops);
        assert_string_equal(be->facts.name, be->ops->kind);
        assert_non_null(be->facts.title);
        assert_non_null(be->facts.uri_form);
        assert_non_null(be->facts.schemes[0]);
        assert_true(be->facts.connect_ms > 0 && be->facts.statement_ms > 0);
        assert_true(be->facts.server_statement_ms < be->facts.statement_ms);
        assert_true(be->facts.statements_per_batch(1) >= 1);
        assert_true(be->facts.statements_per_batch(1000000) >= be->facts.statements_per_batch(1));
        /* no scheme answers for two backends */
        for (const char *const *s = be->facts.schemes; *s != NULL; s++) {
            assert_ptr_equal(hc_store_facts_find(facts, *s), &be->facts);
        }
    }
}

static void config_accepts_every_backends_uris(void **state)
{
    static const char *const stores[] = {
        "sqlite:/var/lib/hotcount.db",
        "sqlite::memory:",
        "redis://127.0.0.1:6379/0",
        "redis://:secret@redis:6379",
        "rediss://h:1/0",
        "postgresql://user@db/hotcount",
        "postgres://db",
        "postgresql://",
        "dynamodb://eu-west-1",
        "dynamodb://us-east-1/p_?endpoint=http://127.0.0.1:1",
    };
    hc_config_t *cfg = *state;

    for (size_t i = 0; i < sizeof(stores) / sizeof(stores[0]); i++) {
        set_ok(cfg, "store", stores[i]);
        assert_string_equal(cfg->store, stores[i]);
    }
}

static void config_refuses_others_listing_every_form(void **state)
{
    const hc_store_facts_t *const *facts = hc_store_facts();
    char errstr[ERRSTR_SIZE] = "";

    assert_int_equal(hc_config_set(*state, "store", "mongodb://h", errstr, sizeof(errstr)),
                     HC_ERR_INVALID);
    assert_non_null(strstr(errstr, "store: \"mongodb://h\" is not a supported store (use "));
    for (size_t i = 0; facts[i] != NULL; i++) {
        if (strstr(errstr, facts[i]->uri_form) == NULL) {
            fail_msg("%s's form missing from: %s", facts[i]->name, errstr);
        }
    }
    assert_int_equal(hc_config_set(*state, "store", "sqlite:", errstr, sizeof(errstr)),
                     HC_ERR_INVALID);
    assert_string_equal(errstr, "store: \"sqlite:\" needs a file path (sqlite:PATH)");
}

/* The config checks against the list it was handed, not a list of its own. */
static void config_knows_only_the_backends_it_is_handed(void **state)
{
    static const hc_store_facts_t *const only_sqlite[] = {&hc_store_sqlite_backend.facts, NULL};
    hc_config_t cfg;
    char errstr[ERRSTR_SIZE] = "";

    (void)state;
    assert_int_equal(hc_config_init(&cfg, only_sqlite), HC_OK);
    assert_int_equal(hc_config_set(&cfg, "store", "redis://h:1", errstr, sizeof(errstr)),
                     HC_ERR_INVALID);
    assert_non_null(strstr(errstr, "(use sqlite:PATH)"));
    hc_config_fini(&cfg);
}

static void password_file_only_for_the_backends_that_take_one(void **state)
{
    const hc_store_facts_t *const *facts = hc_store_facts();
    char path[] = "/tmp/hc-store-backends-XXXXXX";
    int fd = mkstemp(path);
    char errstr[ERRSTR_SIZE] = "";

    (void)state;
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "pw\n", 3), 3);
    close(fd);
    for (size_t i = 0; facts[i] != NULL; i++) {
        hc_config_t cfg;
        char uri[128];

        assert_int_equal(hc_config_init(&cfg, facts), HC_OK);
        snprintf(uri, sizeof(uri), "%s%s", facts[i]->schemes[0], "h");
        set_ok(&cfg, "store", uri);
        set_ok(&cfg, "store.password.file", path);
        hc_err_t err = hc_config_validate(&cfg, errstr, sizeof(errstr));
        if (facts[i]->takes_password_file) {
            assert_int_equal(err, HC_OK);
        } else {
            assert_int_equal(err, HC_ERR_INVALID);
            /* the list of the backends that take one, from their descriptors (the Cassandra
             * backend adds cassandra:// in a build with cargo) */
            char want[256];
            char schemes[200];

            hc_store_facts_list(facts, HC_STORE_LIST_PASSWORD_SCHEMES, schemes, sizeof(schemes));
            snprintf(want, sizeof(want), "store.password.file is for a %s store", schemes);
            assert_non_null(strstr(errstr, want));
            assert_non_null(strstr(schemes, "redis://, rediss://, postgresql://"));
        }
        hc_config_fini(&cfg);
    }
    unlink(path);
}

/* The bounds each backend had when base/timeouts.c still held them (commit 58fcfcb). */
static void timeouts_come_from_the_backend(void **state)
{
    hc_config_t *cfg = *state;
    const hc_timeouts_t *t = &cfg->timeouts;

    assert_int_equal(t->store_connect_ms, 10000); /* sqlite, the default */
    assert_int_equal(t->store_statement_ms, 5000);
    assert_int_equal(t->store_statements_per_batch, 2);
    assert_int_equal(t->store_batch_ms, 10000);

    set_ok(cfg, "store", "rediss://h:1/0");
    assert_int_equal(t->store_statement_ms, 10000);
    assert_int_equal(t->store_statements_per_batch, 1000000 / 10000 + 1);
    assert_int_equal(t->store_batch_ms, 90000); /* capped */

    set_ok(cfg, "store", "postgres://h/db");
    assert_int_equal(t->store_statement_ms, 45000);
    assert_int_equal(t->store_server_statement_ms, 30000);
    assert_int_equal(t->store_statements_per_batch, 16 + 4); /* 1 000 000 posts / 65 536 */
    set_ok(cfg, "max.keys", "65537");
    assert_int_equal(t->store_statements_per_batch, 2 + 4);

    set_ok(cfg, "store", "dynamodb://eu-west-1");
    assert_int_equal(t->store_server_statement_ms, 0);
    assert_int_equal(t->store_statement_ms, 10000);
    assert_int_equal(t->store_statements_per_batch, 656 + 1); /* 65 537 posts / 100 */
    assert_int_equal(t->store_connect_ms, 10000);
}

/* A configuration built by hand (no hc_config_init: no facts, nothing derived) still gets its
 * backend's bounds in the store layer. */
static void hand_built_config_gets_its_backends_bounds(void **state)
{
    hc_config_t cfg;
    hc_timeouts_t scratch;

    (void)state;
    memset(&cfg, 0, sizeof(cfg));
    cfg.store = "redis://h:1";
    cfg.max_keys = 20000;
    const hc_timeouts_t *t = hc_store_timeouts(&cfg, &scratch);
    assert_int_equal(t->store_statement_ms, 10000);
    assert_int_equal(t->store_statements_per_batch, 3);
    assert_int_equal(t->store_connect_ms, 10000);
}

/* The base tests' stand-in must not drift from what it stands for: each of its entries says what
 * the real backend of that name says (a new backend needs no entry there). */
static void the_base_tests_stand_in_says_what_the_backends_say(void **state)
{
    const hc_store_facts_t *const *facts = hc_store_facts();
    static const int64_t keys[] = {1, 99, 100, 101, 9999, 10000, 10001, 65536, 65537, 1000000};

    (void)state;
    for (size_t i = 0; stub_stores[i] != NULL; i++) {
        const hc_store_facts_t *stub = stub_stores[i];
        const hc_store_facts_t *real = NULL;

        for (size_t j = 0; facts[j] != NULL; j++) {
            if (strcmp(facts[j]->name, stub->name) == 0) {
                real = facts[j];
            }
        }
        if (real == NULL) {
            fail_msg("the stand-in's %s is no backend of this build", stub->name);
        }
        assert_string_equal(stub->title, real->title);
        assert_string_equal(stub->uri_form, real->uri_form);
        assert_int_equal(stub->takes_password_file, real->takes_password_file);
        assert_int_equal(stub->after_scheme == NULL, real->after_scheme == NULL);
        assert_int_equal(stub->connect_ms, real->connect_ms);
        assert_int_equal(stub->statement_ms, real->statement_ms);
        assert_int_equal(stub->server_statement_ms, real->server_statement_ms);
        for (size_t k = 0; real->schemes[k] != NULL || stub->schemes[k] != NULL; k++) {
            assert_non_null(real->schemes[k]);
            assert_non_null(stub->schemes[k]);
            assert_string_equal(stub->schemes[k], real->schemes[k]);
        }
        for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++) {
            assert_int_equal(stub->statements_per_batch(keys[k]),
                             real->statements_per_batch(keys[k]));
        }
    }
}

static void help_and_open_list_every_backend(void **state)
{
    const hc_store_facts_t *const *facts = hc_store_facts();
    char *text = NULL;
    size_t size = 0;
    FILE *out = open_memstream(&text, &size);
    hc_config_t *cfg = *state;
    hc_store_t *st = NULL;
    char errstr[ERRSTR_SIZE] = "";

    assert_non_null(out);
    hc_config_print_help(out, facts);
    assert_int_equal(fclose(out), 0);
    free(cfg->store);
    cfg->store = strdup("nosuch://x"); /* past the config's check: hc_store_open's own */
    assert_int_equal(hc_store_open(cfg, &st, errstr, sizeof(errstr)), HC_ERR_INVALID);
    assert_null(st);
    assert_non_null(strstr(errstr, "unsupported store URI scheme \"nosuch\""));
    for (size_t i = 0; facts[i] != NULL; i++) {
        if (strstr(text, facts[i]->uri_form) == NULL ||
            strstr(errstr, facts[i]->uri_form) == NULL) {
            fail_msg("%s's form missing from --help or from: %s", facts[i]->name, errstr);
        }
    }
    free(text);
}

/* The README's row of the `store` key names every scheme (the docs' list, checked against the
 * descriptors: a new backend must be documented there). */
static void readme_names_every_scheme(void **state)
{
    const hc_store_facts_t *const *facts = hc_store_facts();
    FILE *f = fopen(HC_SOURCE_DIR "/README.md", "r");
    char *line = NULL;
    size_t cap = 0;
    bool found = false;

    (void)state;
    assert_non_null(f);
    while (!found && getline(&line, &cap, f) > 0) {
        found = strncmp(line, "| `store` |", 11) == 0;
    }
    fclose(f);
    assert_true(found);
    for (size_t i = 0; facts[i] != NULL; i++) {
        for (const char *const *s = facts[i]->schemes; *s != NULL; s++) {
            char quoted[64];

            snprintf(quoted, sizeof(quoted), "`%s", *s);
            if (strstr(line, quoted) == NULL) {
                fail_msg("README's `store` row does not name %s", *s);
            }
        }
    }
    free(line);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_descriptor_is_complete_and_named_like_its_ops),
        cmocka_unit_test_setup_teardown(config_accepts_every_backends_uris, setup, teardown),
        cmocka_unit_test_setup_teardown(config_refuses_others_listing_every_form, setup, teardown),
        cmocka_unit_test(config_knows_only_the_backends_it_is_handed),
        cmocka_unit_test(password_file_only_for_the_backends_that_take_one),
        cmocka_unit_test_setup_teardown(timeouts_come_from_the_backend, setup, teardown),
        cmocka_unit_test(hand_built_config_gets_its_backends_bounds),
        cmocka_unit_test(the_base_tests_stand_in_says_what_the_backends_say),
        cmocka_unit_test_setup_teardown(help_and_open_list_every_backend, setup, teardown),
        cmocka_unit_test(readme_names_every_scheme),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
