/* Layer: store (private to src/store/cassandra/). The Cassandra backend's shared parts
 * (docs/CASSANDRA.md). NOT BUILT YET: nothing here is in CMakeLists.txt or HC_STORE_BACKENDS
 * (src/store/cassandra/README.md says where it stands).
 *
 * One thread at a time per handle, as every store handle (hotcount/store.h). */
#ifndef HOTCOUNT_CASSANDRA_IMPL_H
#define HOTCOUNT_CASSANDRA_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hotcount/err.h"

/* A keyspace name as CQL takes it unquoted: a letter, then letters, digits and '_', at most 48
 * (Cassandra's limit), folded to lower case. */
#define HC_CASS_KEYSPACE_MAX 48
/* Contact points one URI may list. */
#define HC_CASS_HOSTS_MAX 16

typedef enum hc_cass_replication_kind {
    HC_CASS_REPLICATION_NONE, /* not given: `hotcount init` refuses to create the keyspace */
    HC_CASS_REPLICATION_SIMPLE,
    HC_CASS_REPLICATION_NETWORK,
} hc_cass_replication_kind_t;

/* What `cassandra://[user[:password]@]host[:port][,host[:port]...]/KEYSPACE[?options]` says.
 * Options (each at most once; an unknown one is an error naming it, never its value):
 *   tls=0|1, tls_verify=0|1 (default 1), tls_ca=PATH, tls_cert=PATH, tls_key=PATH
 *   consistency=local_quorum|quorum|each_quorum|all|local_one|one (default local_quorum)
 *   serial_consistency=local_serial|serial (default local_serial)
 *   local_dc=NAME (routing stays in that datacenter)
 *   replication=simple:N | DC:N[,DC:N...] (for `hotcount init` only: SimpleStrategy only when
 *     asked for by name; DC:N is NetworkTopologyStrategy)
 *   staging_ttl=SECONDS (the staged batches' TTL, default 604800: docs/CASSANDRA.md) */
typedef struct hc_cass_uri {
    char *user;     /* owned, percent-decoded; NULL: none */
    char *password; /* owned, percent-decoded; NULL: none (store.password.file may give one) */
    char *contact_points; /* owned: "host:port,host:port" as the shim takes it */
    size_t host_count;
    char keyspace[HC_CASS_KEYSPACE_MAX + 1];
    bool tls;
    bool tls_verify;
    char *tls_ca;           /* owned, NULL: none */
    char *tls_cert;         /* owned */
    char *tls_key;          /* owned */
    int consistency;        /* HC_CQL_* consistency code (hc_cql.h) */
    int serial_consistency; /* HC_CQL_SERIAL or HC_CQL_LOCAL_SERIAL */
    char *local_dc;         /* owned, NULL: none */
    hc_cass_replication_kind_t replication;
    /* the CQL replication map for CREATE KEYSPACE, e.g. {'class': 'SimpleStrategy',
     * 'replication_factor': 1}; "" when replication is NONE */
    char replication_cql[256];
    int64_t staging_ttl_s;
} hc_cass_uri_t;

/* Parses uri into *u (zeroed first). HC_ERR_INVALID with the reason in errstr (never a
 * password, never an option's value) on a bad URI; HC_ERR_FATAL when out of memory. On error
 * *u holds nothing to free. */
hc_err_t hc_cass_uri_parse(const char *uri, hc_cass_uri_t *u, char *errstr, size_t errstr_size);
void hc_cass_uri_fini(hc_cass_uri_t *u); /* accepts a zeroed or parsed u */

#endif
