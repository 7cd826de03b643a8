/* The Cassandra store's URI (src/store/cassandra/cassandra_uri.c, hc_cass_uri_parse):
 * `cassandra://[user[:password]@]host[:port][,host...]/KEYSPACE[?options]`. Good URIs give the
 * fields the backend hands the driver; bad ones are HC_ERR_INVALID with a message that names
 * what is wrong and never repeats a password or an option's value (messages reach logs). And
 * the store.password.file rule: a password in the URI and one in the file is refused, by the
 * configuration and by the backend's open, before any connection. No sockets. */
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

#include "cassandra_impl.h"
#include "hc_cql.h"
#include "hotcount/config.h"
#include "hotcount/store.h"

#define SECRET "s3cr3tPW"

static void parse_ok(const char *uri, hc_cass_uri_t *u)
{
    char errstr[512] = "";
    hc_err_t err = hc_cass_uri_parse(uri, u, errstr, sizeof(errstr));

    if (err != HC_OK) {
        fail_msg("%s: %s: %s", uri, hc_err_name(err), errstr);
    }
}

/* hc_cass_consistency_check: ONE and LOCAL_ONE only where one replica (in all, or in every
 * datacenter) holds each row; the QUORUM levels and ALL at any replication. */
static const char *const SIMPLE1 =
    "{\"replication\": {\"class\": \"org.apache.cassandra.locator.SimpleStrategy\", "
    "\"replication_factor\": \"1\"}}";
static const char *const SIMPLE3 =
    "{\"replication\": {\"class\": \"org.apache.cassandra.locator.SimpleStrategy\", "
    "\"replication_factor\": \"3\"}}";
static const char *const NTS_1_1 =
    "{\"replication\": {\"class\": "
    "\"org.apache.cassandra.locator.NetworkTopologyStrategy\", \"dc1\": \"1\", \"dc2\": "
    "\"1\"}}";
static const char *const NTS_3 =
    "{\"replication\": {\"class\": "
    "\"org.apache.cassandra.locator.NetworkTopologyStrategy\", \"dc1\": \"3\"}}";
static const char *const TRANSIENT =
    "{\"replication\": {\"class\": "
    "\"org.apache.cassandra.locator.NetworkTopologyStrategy\", \"dc1\": \"3/1\"}}";

static hc_err_t check(int consistency, const char *json, char *errstr, size_t size)
{
    errstr[0] = '\0';
    return hc_cass_consistency_check(consistency, "likes", json, errstr, size);
}

static void consistency_one_only_with_one_replica(void **state)
{
    char errstr[512];

    (void)state;
    assert_int_equal(check(HC_CQL_ONE, SIMPLE1, errstr, sizeof(errstr)), HC_OK);
    assert_int_equal(check(HC_CQL_LOCAL_ONE, SIMPLE1, errstr, sizeof(errstr)), HC_OK);
    assert_int_equal(check(HC_CQL_LOCAL_ONE, NTS_1_1, errstr, sizeof(errstr)), HC_OK);

    assert_int_equal(check(HC_CQL_ONE, SIMPLE3, errstr, sizeof(errstr)), HC_ERR_INVALID);
    assert_non_null(strstr(errstr, "consistency=one on keyspace likes"));
    assert_non_null(strstr(errstr, "local_quorum"));
    assert_int_equal(check(HC_CQL_LOCAL_ONE, NTS_3, errstr, sizeof(errstr)), HC_ERR_INVALID);
    assert_non_null(strstr(errstr, "consistency=local_one"));
    /* one replica in each of two datacenters: two in all */
    assert_int_equal(check(HC_CQL_ONE, NTS_1_1, errstr, sizeof(errstr)), HC_ERR_INVALID);
    /* not a count: not provably one replica */
    assert_int_equal(check(HC_CQL_ONE, TRANSIENT, errstr, sizeof(errstr)), HC_ERR_INVALID);
    assert_int_equal(check(HC_CQL_ONE, "{}", errstr, sizeof(errstr)), HC_ERR_INVALID);
    assert_non_null(strstr(errstr, "unreadable"));
    assert_int_equal(check(HC_CQL_ONE, "not json", errstr, sizeof(errstr)), HC_ERR_INVALID);
}

static void quorum_levels_at_any_replication(void **state)
{
    static const int levels[] = {HC_CQL_LOCAL_QUORUM, HC_CQL_QUORUM, HC_CQL_EACH_QUORUM,
                                 HC_CQL_ALL};
    char errstr[512];

    (void)state;
    for (size_t i = 0; i < sizeof(levels) / sizeof(levels[0]); i++) {
        assert_int_equal(check(levels[i], SIMPLE3, errstr, sizeof(errstr)), HC_OK);
        assert_int_equal(check(levels[i], NTS_3, errstr, sizeof(errstr)), HC_OK);
        assert_int_equal(check(levels[i], "not json", errstr, sizeof(errstr)), HC_OK);
    }
}

static void defaults_for_the_shortest_uri(void **state)
{
    hc_cass_uri_t u;

    (void)state;
    parse_ok("cassandra://127.0.0.1/likes", &u);
    assert_string_equal(u.contact_points, "127.0.0.1:9042");
    assert_int_equal(u.host_count, 1);
    assert_string_equal(u.keyspace, "likes");
    assert_null(u.user);
    assert_null(u.password);
    assert_false(u.tls);
    assert_true(u.tls_verify);
    assert_int_equal(u.consistency, HC_CQL_LOCAL_QUORUM);
    assert_int_equal(u.serial_consistency, HC_CQL_LOCAL_SERIAL);
    assert_null(u.local_dc);
    /* No replication given: init will refuse to create the keyspace. */
    assert_int_equal(u.replication, HC_CASS_REPLICATION_NONE);
    assert_string_equal(u.replication_cql, "");
    assert_int_equal(u.staging_ttl_s, 604800);
    hc_cass_uri_fini(&u);
    hc_cass_uri_fini(&u); /* a zeroed one too */
}

static void every_field_of_a_full_uri(void **state)
{
    hc_cass_uri_t u;

    (void)state;
    parse_ok("cassandra://app%20user:p%40ss%3Aw@h1.example:9043,h-2,[::1]:9044/Likes_1"
             "?tls=1&tls_verify=0&tls_ca=%2Fetc%2Fca.pem&tls_cert=c.pem&tls_key=k.pem"
             "&consistency=quorum&serial_consistency=serial&local_dc=dc1"
             "&replication=dc1:3,dc-2:2&staging_ttl=7200",
             &u);
    assert_string_equal(u.user, "app user");
    assert_string_equal(u.password, "p@ss:w");
    assert_string_equal(u.contact_points, "h1.example:9043,h-2:9042,[::1]:9044");
    assert_int_equal(u.host_count, 3);
    assert_string_equal(u.keyspace, "likes_1"); /* CQL folds unquoted names */
    assert_true(u.tls);
    assert_false(u.tls_verify);
    assert_string_equal(u.tls_ca, "/etc/ca.pem");
    assert_string_equal(u.tls_cert, "c.pem");
    assert_string_equal(u.tls_key, "k.pem");
    assert_int_equal(u.consistency, HC_CQL_QUORUM);
    assert_int_equal(u.serial_consistency, HC_CQL_SERIAL);
    assert_string_equal(u.local_dc, "dc1");
    assert_int_equal(u.replication, HC_CASS_REPLICATION_NETWORK);
    assert_string_equal(u.replication_cql,
                        "{'class': 'NetworkTopologyStrategy', 'dc1': 3, 'dc-2': 2}");
    assert_int_equal(u.staging_ttl_s, 7200);
    hc_cass_uri_fini(&u);

    parse_ok("cassandra://u@h/ks?replication=simple:1&consistency=local_one", &u);
    assert_string_equal(u.user, "u");
    assert_null(u.password); /* store.password.file gives it */
    assert_int_equal(u.replication, HC_CASS_REPLICATION_SIMPLE);
    assert_string_equal(u.replication_cql, "{'class': 'SimpleStrategy', 'replication_factor': 1}");
    assert_int_equal(u.consistency, HC_CQL_LOCAL_ONE);
    hc_cass_uri_fini(&u);

    /* one replica in each datacenter: local_one reads the replica of its own */
    parse_ok("cassandra://h/ks?replication=dc1:1,dc2:1&consistency=local_one", &u);
    assert_int_equal(u.replicas_total, 2);
    assert_int_equal(u.replicas_most, 1);
    hc_cass_uri_fini(&u);
}

/* Each bad URI carries SECRET as its password, and the cases about an option's value carry it as
 * that value: the message must name the fault and repeat neither. */
static void bad_uris_are_refused_without_secrets(void **state)
{
    static const struct {
        const char *uri;
        const char *says; /* a part of the message */
    } cases[] = {
        {"cassandra:/u:" SECRET "@h/ks", "does not start with cassandra://"},
        {"redis://u:" SECRET "@h/ks", "does not start with cassandra://"},
        {"cassandra://u:" SECRET "@h", "no /KEYSPACE"},
        {"cassandra://u:" SECRET "@h/", "the keyspace must be"},
        {"cassandra://u:" SECRET "@h/1ks", "the keyspace must be"},
        {"cassandra://u:" SECRET "@h/k-s", "the keyspace must be"},
        {"cassandra://u:" SECRET "@h/k%22s", "the keyspace must be"},
        {"cassandra://u:" SECRET "@h/"
         "a234567890123456789012345678901234567890123456789",
         "the keyspace must be"},
        {"cassandra://:" SECRET "@h/ks", "empty user name"},
        {"cassandra://u:" SECRET "%zz@h/ks", "bad percent-encoding"},
        {"cassandra://u:" SECRET "%00@h/ks", "bad percent-encoding"},
        {"cassandra://u:" SECRET "@/ks", "no host"},
        {"cassandra://u:" SECRET "@h1,,h2/ks", "an empty host"},
        {"cassandra://u:" SECRET "@h1,/ks", "an empty host after ','"},
        {"cassandra://u:" SECRET "@h:0/ks", "a port that is not 1-65535"},
        {"cassandra://u:" SECRET "@h:65536/ks", "a port that is not 1-65535"},
        {"cassandra://u:" SECRET "@h:9x/ks", "a port that is not 1-65535"},
        {"cassandra://u:" SECRET "@h:/ks", "a port that is not 1-65535"},
        {"cassandra://u:" SECRET "@[::1/ks", "unclosed '['"},
        {"cassandra://u:" SECRET "@h'x/ks", "a host with a character"},
        {"cassandra://u:" SECRET "@h/ks?tls", "an option without '=value'"},
        {"cassandra://u:" SECRET "@h/ks?password=" SECRET, "unknown option 'password'"},
        {"cassandra://u:" SECRET "@h/ks?tls=1&tls=1", "option tls given twice"},
        {"cassandra://u:" SECRET "@h/ks?tls=yes" SECRET, "bad value for option tls"},
        {"cassandra://u:" SECRET "@h/ks?tls_verify=2", "bad value for option tls_verify"},
        {"cassandra://u:" SECRET "@h/ks?consistency=" SECRET, "bad value for option consistency"},
        {"cassandra://u:" SECRET "@h/ks?consistency=serial", "bad value for option consistency"},
        {"cassandra://u:" SECRET "@h/ks?serial_consistency=quorum",
         "bad value for option serial_consistency"},
        {"cassandra://u:" SECRET "@h/ks?replication=simple:x" SECRET,
         "bad value for option replication"},
        {"cassandra://u:" SECRET "@h/ks?replication=simple:100",
         "bad value for option replication"},
        {"cassandra://u:" SECRET "@h/ks?replication=dc'1:3", "bad value for option replication"},
        {"cassandra://u:" SECRET "@h/ks?replication=dc1:3,", "bad value for option replication"},
        {"cassandra://u:" SECRET "@h/ks?replication=dc1", "bad value for option replication"},
        {"cassandra://u:" SECRET "@h/ks?consistency=one&replication=simple:3",
         "consistency one or local_one with a replication that keeps more than one replica"},
        {"cassandra://u:" SECRET "@h/ks?replication=dc1:1,dc2:1&consistency=one",
         "consistency one or local_one with a replication that keeps more than one replica"},
        {"cassandra://u:" SECRET "@h/ks?consistency=local_one&replication=dc1:1,dc2:2",
         "consistency one or local_one with a replication that keeps more than one replica"},
        {"cassandra://u:" SECRET "@h/ks?staging_ttl=60", "bad value for option staging_ttl"},
        {"cassandra://u:" SECRET "@h/ks?staging_ttl=1234567890",
         "bad value for option staging_ttl"},
        {"cassandra://u:" SECRET "@h/ks?local_dc=", "bad value for option local_dc"},
        {"cassandra://u:" SECRET "@h/ks?local_dc=%zz" SECRET, "bad value for option local_dc"},
        {"cassandra://u:" SECRET "@h/ks?tls_ca=ca.pem", "without tls=1"},
        {"cassandra://u:" SECRET "@h/ks?tls=1&tls_cert=c.pem", "tls_cert and tls_key go together"},
        {"cassandra://u:" SECRET "@h1,h2,h3,h4,h5,h6,h7,h8,h9,h10,h11,h12,h13,h14,h15,h16,h17/ks",
         "more than 16 hosts"},
    };

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        hc_cass_uri_t u;
        char errstr[512] = "";
        hc_err_t err = hc_cass_uri_parse(cases[i].uri, &u, errstr, sizeof(errstr));

        if (err != HC_ERR_INVALID) {
            fail_msg("%s: want invalid, got %s", cases[i].uri, hc_err_name(err));
        }
        if (strstr(errstr, cases[i].says) == NULL) {
            fail_msg("%s: message \"%s\" does not say \"%s\"", cases[i].uri, errstr, cases[i].says);
        }
        if (strstr(errstr, SECRET) != NULL) {
            fail_msg("%s: message \"%s\" holds the secret", cases[i].uri, errstr);
        }
        /* On error nothing is left to free: every pointer is NULL. */
        assert_null(u.user);
        assert_null(u.password);
        assert_null(u.contact_points);
        assert_null(u.tls_ca);
        assert_null(u.local_dc);
    }
}

/* A keyspace name is at most 48 characters; 48 passes. */
static void longest_keyspace_passes(void **state)
{
    hc_cass_uri_t u;
    char uri[128];
    char ks[49];

    (void)state;
    memset(ks, 'k', 48);
    ks[48] = '\0';
    snprintf(uri, sizeof(uri), "cassandra://h/%s", ks);
    parse_ok(uri, &u);
    assert_string_equal(u.keyspace, ks);
    hc_cass_uri_fini(&u);
}

static void set_ok(hc_config_t *cfg, const char *key, const char *value)
{
    char errstr[512] = "";

    if (hc_config_set(cfg, key, value, errstr, sizeof(errstr)) != HC_OK) {
        fail_msg("%s: %s", key, errstr);
    }
}

/* store.password.file and a password in the URI: refused by the configuration (as for Redis and
 * PostgreSQL) and by the backend's own open (a configuration built by hand skips validation),
 * in both cases before any connection and without either password in the message. A user
 * without a password in the URI takes the file's. */
static void password_file_and_uri_password_refused(void **state)
{
    hc_config_t cfg;
    hc_store_t *st = (hc_store_t *)0x1;
    char errstr[512] = "";
    hc_err_t err;

    (void)state;
    assert_int_equal(hc_config_init(&cfg, hc_store_facts()), HC_OK);
    set_ok(&cfg, "store", "cassandra://u:" SECRET "@127.0.0.1:1/ks");
    free(cfg.store_password);
    cfg.store_password = strdup("filePW42");
    assert_non_null(cfg.store_password);

    err = hc_config_validate(&cfg, errstr, sizeof(errstr));
    assert_int_equal(err, HC_ERR_INVALID);
    assert_non_null(strstr(errstr, "give only one"));
    assert_null(strstr(errstr, SECRET));
    assert_null(strstr(errstr, "filePW42"));

    errstr[0] = '\0';
    err = hc_store_open(&cfg, &st, errstr, sizeof(errstr));
    assert_int_equal(err, HC_ERR_INVALID);
    assert_null(st);
    assert_non_null(strstr(errstr, "give only one"));
    assert_null(strstr(errstr, SECRET));
    assert_null(strstr(errstr, "filePW42"));

    /* user@ with the file's password passes the configuration's check. */
    set_ok(&cfg, "store", "cassandra://u@127.0.0.1:1/ks");
    errstr[0] = '\0';
    err = hc_config_validate(&cfg, errstr, sizeof(errstr));
    if (err != HC_OK) {
        fail_msg("validate: %s", errstr);
    }
    hc_config_fini(&cfg);
}

/* A user without any password (neither in the URI nor in the file) is refused at open: the
 * slip "cassandra://PASSWORD@host" would otherwise go out as a user name. */
static void user_without_password_refused(void **state)
{
    hc_config_t cfg;
    hc_store_t *st = NULL;
    char errstr[512] = "";

    (void)state;
    assert_int_equal(hc_config_init(&cfg, hc_store_facts()), HC_OK);
    set_ok(&cfg, "store", "cassandra://" SECRET "@127.0.0.1:1/ks");
    assert_int_equal(hc_store_open(&cfg, &st, errstr, sizeof(errstr)), HC_ERR_INVALID);
    assert_null(st);
    assert_non_null(strstr(errstr, "a user without a password"));
    assert_null(strstr(errstr, SECRET));
    hc_config_fini(&cfg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(defaults_for_the_shortest_uri),
        cmocka_unit_test(every_field_of_a_full_uri),
        cmocka_unit_test(bad_uris_are_refused_without_secrets),
        cmocka_unit_test(longest_keyspace_passes),
        cmocka_unit_test(password_file_and_uri_password_refused),
        cmocka_unit_test(user_without_password_refused),
        cmocka_unit_test(consistency_one_only_with_one_replica),
        cmocka_unit_test(quorum_levels_at_any_replication),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
