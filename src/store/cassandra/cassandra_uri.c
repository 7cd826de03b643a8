/* Layer: store. The Cassandra backend's URI (cassandra_impl.h). NOT BUILT YET: see
 * src/store/cassandra/README.md. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cassandra_impl.h"
#include "hc_cql.h"
#include "store_util.h"

#define CASS_URI_PREFIX "cassandra://"
#define CASS_DEFAULT_PORT 9042
#define CASS_STAGING_TTL_S 604800 /* 7 days: docs/CASSANDRA.md, recovery of an open claim */

void hc_cass_uri_fini(hc_cass_uri_t *u)
{
    if (u == NULL) {
        return;
    }
    free(u->user);
    free(u->password);
    free(u->contact_points);
    free(u->tls_ca);
    free(u->tls_cert);
    free(u->tls_key);
    free(u->local_dc);
    memset(u, 0, sizeof(*u));
}

static bool parse_port(const char *p, size_t len, long *port)
{
    long v = 0;
    if (len == 0 || len > 5) {
        return false;
    }
    for (size_t i = 0; i < len; i++) {
        if (!isdigit((unsigned char)p[i])) {
            return false;
        }
        v = v * 10 + (p[i] - '0');
    }
    if (v < 1 || v > 65535) {
        return false;
    }
    *port = v;
    return true;
}

/* host[:port] or [v6][:port], [p, end): appended to buf as host:port. */
static bool add_host(const char *p, const char *end, char *buf, size_t size, size_t *used,
                     const char **why)
{
    const char *host = p;
    const char *host_end;
    const char *q;
    long port = CASS_DEFAULT_PORT;
    bool v6 = false;

    if (p < end && *p == '[') {
        host = p + 1;
        host_end = memchr(host, ']', (size_t)(end - host));
        if (host_end == NULL) {
            *why = "unclosed '[' in a host";
            return false;
        }
        q = host_end + 1;
        v6 = true;
    } else {
        host_end = p;
        while (host_end < end && *host_end != ':') {
            host_end++;
        }
        q = host_end;
    }
    if (host_end == host) {
        *why = "an empty host";
        return false;
    }
    for (const char *c = host; c < host_end; c++) {
        /* Host names, IPv4 and (inside brackets) IPv6 literals only. */
        if (!(isalnum((unsigned char)*c) || *c == '.' || *c == '-' || *c == '_' ||
              (v6 && *c == ':'))) {
            *why = "a host with a character a host name cannot hold";
            return false;
        }
    }
    if (q < end) {
        if (*q != ':' || !parse_port(q + 1, (size_t)(end - q - 1), &port)) {
            *why = "a port that is not 1-65535";
            return false;
        }
    }
    int n = snprintf(buf + *used, size - *used, "%s%s%.*s%s:%ld", *used > 0 ? "," : "",
                     v6 ? "[" : "", (int)(host_end - host), host, v6 ? "]" : "", port);
    if (n < 0 || (size_t)n >= size - *used) {
        *why = "too long a host list";
        return false;
    }
    *used += (size_t)n;
    return true;
}

static bool flag_value(const char *v, size_t len, bool *out)
{
    if (len == 1 && (v[0] == '0' || v[0] == '1')) {
        *out = v[0] == '1';
        return true;
    }
    return false;
}

static const struct {
    const char *name;
    int code;
} consistencies[] = {
    {"local_quorum", HC_CQL_LOCAL_QUORUM}, {"quorum", HC_CQL_QUORUM},
    {"each_quorum", HC_CQL_EACH_QUORUM},   {"all", HC_CQL_ALL},
    {"local_one", HC_CQL_LOCAL_ONE},       {"one", HC_CQL_ONE},
};

/* replication=simple:N or DC:N[,DC:N...] into u->replication_cql. */
static bool parse_replication(const char *v, size_t len, hc_cass_uri_t *u)
{
    char *out = u->replication_cql;
    size_t size = sizeof(u->replication_cql);
    size_t used = 0;
    int n;

    if (len > 7 && strncmp(v, "simple:", 7) == 0) {
        long rf;
        if (!parse_port(v + 7, len - 7, &rf) || rf > 99) {
            return false;
        }
        n = snprintf(out, size, "{'class': 'SimpleStrategy', 'replication_factor': %ld}", rf);
        u->replication = HC_CASS_REPLICATION_SIMPLE;
        u->replicas_total = u->replicas_most = (int)rf;
        return n > 0 && (size_t)n < size;
    }
    n = snprintf(out, size, "{'class': 'NetworkTopologyStrategy'");
    used = (size_t)n;
    const char *p = v;
    const char *end = v + len;
    while (p < end) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        const char *item_end = comma != NULL ? comma : end;
        const char *colon = memchr(p, ':', (size_t)(item_end - p));
        long rf;
        if (colon == NULL || colon == p ||
            !parse_port(colon + 1, (size_t)(item_end - colon - 1), &rf) || rf > 99) {
            return false;
        }
        for (const char *c = p; c < colon; c++) {
            /* A datacenter name goes between quotes in CQL: no quote, nothing odd. */
            if (!(isalnum((unsigned char)*c) || *c == '-' || *c == '_' || *c == '.')) {
                return false;
            }
        }
        n = snprintf(out + used, size - used, ", '%.*s': %ld", (int)(colon - p), p, rf);
        if (n < 0 || (size_t)n >= size - used) {
            return false;
        }
        used += (size_t)n;
        u->replicas_total += (int)rf;
        u->replicas_most = (int)rf > u->replicas_most ? (int)rf : u->replicas_most;
        p = comma != NULL ? comma + 1 : end;
        if (comma != NULL && p == end) {
            return false;
        }
    }
    n = snprintf(out + used, size - used, "}");
    if (n < 0 || (size_t)n >= size - used) {
        return false;
    }
    u->replication = HC_CASS_REPLICATION_NETWORK;
    return true;
}

/* One option name=value; *why names what was wrong (the option's name, never its value). */
static hc_err_t parse_option(const char *name, size_t name_len, const char *v, size_t v_len,
                             hc_cass_uri_t *u, unsigned *seen, char *errstr, size_t errstr_size)
{
    static const char *const names[] = {
        "tls",         "tls_verify",         "tls_ca",   "tls_cert",    "tls_key",
        "consistency", "serial_consistency", "local_dc", "replication", "staging_ttl"};
    size_t which = sizeof(names) / sizeof(names[0]);
    bool bad = false;
    char **str = NULL;

    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (strlen(names[i]) == name_len && memcmp(names[i], name, name_len) == 0) {
            which = i;
        }
    }
    if (which == sizeof(names) / sizeof(names[0])) {
        hc_errstr_set(errstr, errstr_size,
                      "store: bad cassandra URI: unknown option '%.*s' (tls, tls_verify, tls_ca, "
                      "tls_cert, tls_key, consistency, serial_consistency, local_dc, replication, "
                      "staging_ttl)",
                      (int)(name_len > 40 ? 40 : name_len), name);
        return HC_ERR_INVALID;
    }
    if (*seen & (1u << which)) {
        hc_errstr_set(errstr, errstr_size, "store: bad cassandra URI: option %s given twice",
                      names[which]);
        return HC_ERR_INVALID;
    }
    *seen |= 1u << which;
    switch (which) {
    case 0:
        bad = !flag_value(v, v_len, &u->tls);
        break;
    case 1:
        bad = !flag_value(v, v_len, &u->tls_verify);
        break;
    case 2:
        str = &u->tls_ca;
        break;
    case 3:
        str = &u->tls_cert;
        break;
    case 4:
        str = &u->tls_key;
        break;
    case 5:
        bad = true;
        for (size_t i = 0; i < sizeof(consistencies) / sizeof(consistencies[0]); i++) {
            if (strlen(consistencies[i].name) == v_len &&
                memcmp(consistencies[i].name, v, v_len) == 0) {
                u->consistency = consistencies[i].code;
                bad = false;
            }
        }
        break;
    case 6:
        if (v_len == 12 && memcmp(v, "local_serial", 12) == 0) {
            u->serial_consistency = HC_CQL_LOCAL_SERIAL;
        } else if (v_len == 6 && memcmp(v, "serial", 6) == 0) {
            u->serial_consistency = HC_CQL_SERIAL;
        } else {
            bad = true;
        }
        break;
    case 7:
        str = &u->local_dc;
        break;
    case 8:
        bad = !parse_replication(v, v_len, u);
        break;
    default: {
        long ttl = 0;
        bad = v_len == 0 || v_len > 9;
        for (size_t i = 0; !bad && i < v_len; i++) {
            bad = !isdigit((unsigned char)v[i]);
            ttl = ttl * 10 + (v[i] - '0');
        }
        /* At least an hour: a claim must outlive a rebalance and a restart by far. */
        bad = bad || ttl < 3600;
        u->staging_ttl_s = ttl;
        break;
    }
    }
    if (str != NULL) {
        *str = hc_store_percent_decode(v, v_len, &bad);
        if (*str == NULL && !bad) {
            hc_errstr_set(errstr, errstr_size, "cassandra store: out of memory");
            return HC_ERR_FATAL;
        }
        bad = bad || (*str != NULL && (*str)[0] == '\0');
    }
    if (bad) {
        hc_errstr_set(errstr, errstr_size, "store: bad cassandra URI: bad value for option %s",
                      names[which]);
        return HC_ERR_INVALID;
    }
    return HC_OK;
}

hc_err_t hc_cass_uri_parse(const char *uri, hc_cass_uri_t *u, char *errstr, size_t errstr_size)
{
    const char *why = NULL;
    const char *rest;
    const char *at;
    const char *slash;
    const char *query;
    char hosts[1024];
    size_t used = 0;
    bool bad = false;
    hc_err_t err;

    memset(u, 0, sizeof(*u));
    u->tls_verify = true;
    u->consistency = HC_CQL_LOCAL_QUORUM;
    u->serial_consistency = HC_CQL_LOCAL_SERIAL;
    u->staging_ttl_s = CASS_STAGING_TTL_S;
    if (strncmp(uri, CASS_URI_PREFIX, strlen(CASS_URI_PREFIX)) != 0) {
        why = "it does not start with cassandra://";
        goto fail_invalid;
    }
    rest = uri + strlen(CASS_URI_PREFIX);
    slash = strchr(rest, '/');
    if (slash == NULL) {
        why = "no /KEYSPACE after the hosts";
        goto fail_invalid;
    }
    /* The user part ends at the last '@' before the path (a password may hold '@' only
     * percent-encoded, but be lenient as libpq is). */
    at = NULL;
    for (const char *c = rest; c < slash; c++) {
        if (*c == '@') {
            at = c;
        }
    }
    if (at != NULL) {
        const char *colon = memchr(rest, ':', (size_t)(at - rest));
        const char *user_end = colon != NULL ? colon : at;
        if (user_end == rest) {
            why = "an empty user name before '@'";
            goto fail_invalid;
        }
        u->user = hc_store_percent_decode(rest, (size_t)(user_end - rest), &bad);
        if (u->user == NULL) {
            goto fail_decode;
        }
        if (colon != NULL) {
            u->password = hc_store_percent_decode(colon + 1, (size_t)(at - colon - 1), &bad);
            if (u->password == NULL) {
                goto fail_decode;
            }
        }
        rest = at + 1;
    }
    /* host[:port][,host[:port]...] */
    while (rest < slash) {
        const char *comma = rest;
        bool in_brackets = false;
        while (comma < slash && (in_brackets || *comma != ',')) {
            in_brackets = *comma == '[' ? true : *comma == ']' ? false : in_brackets;
            comma++;
        }
        if (u->host_count == HC_CASS_HOSTS_MAX) {
            why = "more than 16 hosts";
            goto fail_invalid;
        }
        if (!add_host(rest, comma, hosts, sizeof(hosts), &used, &why)) {
            goto fail_invalid;
        }
        u->host_count++;
        rest = comma < slash ? comma + 1 : slash;
        if (comma < slash && rest == slash) {
            why = "an empty host after ','";
            goto fail_invalid;
        }
    }
    if (u->host_count == 0) {
        why = "no host";
        goto fail_invalid;
    }
    u->contact_points = strdup(hosts);
    if (u->contact_points == NULL) {
        goto fail_oom;
    }
    /* /KEYSPACE */
    query = strchr(slash + 1, '?');
    {
        const char *ks = slash + 1;
        size_t len = query != NULL ? (size_t)(query - ks) : strlen(ks);
        if (len == 0 || len > HC_CASS_KEYSPACE_MAX || !isalpha((unsigned char)ks[0])) {
            why = "the keyspace must be a letter, then letters, digits or '_', at most 48";
            goto fail_invalid;
        }
        for (size_t i = 0; i < len; i++) {
            if (!isalnum((unsigned char)ks[i]) && ks[i] != '_') {
                why = "the keyspace must be a letter, then letters, digits or '_', at most 48";
                goto fail_invalid;
            }
            u->keyspace[i] = (char)tolower((unsigned char)ks[i]);
        }
        u->keyspace[len] = '\0';
    }
    if (query != NULL) {
        unsigned seen = 0;
        const char *p = query + 1;
        while (*p != '\0') {
            const char *amp = strchr(p, '&');
            const char *end = amp != NULL ? amp : p + strlen(p);
            const char *eq = memchr(p, '=', (size_t)(end - p));
            if (eq == NULL) {
                why = "an option without '=value'";
                goto fail_invalid;
            }
            err = parse_option(p, (size_t)(eq - p), eq + 1, (size_t)(end - eq - 1), u, &seen,
                               errstr, errstr_size);
            if (err != HC_OK) {
                hc_cass_uri_fini(u);
                return err;
            }
            p = amp != NULL ? amp + 1 : end;
        }
    }
    if ((u->tls_ca != NULL || u->tls_cert != NULL || u->tls_key != NULL) && !u->tls) {
        why = "tls_ca, tls_cert or tls_key without tls=1";
        goto fail_invalid;
    }
    if ((u->tls_cert == NULL) != (u->tls_key == NULL)) {
        why = "tls_cert and tls_key go together";
        goto fail_invalid;
    }
    /* The URI's own contradiction, refused before anything is created (init would make the
     * keyspace, then refuse it: hc_cass_consistency_check). */
    if ((u->consistency == HC_CQL_ONE && u->replicas_total > 1) ||
        (u->consistency == HC_CQL_LOCAL_ONE && u->replicas_most > 1)) {
        why = "consistency one or local_one with a replication that keeps more than one replica "
              "of each row (a read at one replica may miss a write another acknowledged; use "
              "local_quorum, the default, or quorum)";
        goto fail_invalid;
    }
    return HC_OK;

fail_decode:
    if (!bad) {
        goto fail_oom;
    }
    why = "bad percent-encoding in the user or password";
fail_invalid:
    hc_errstr_set(errstr, errstr_size,
                  "store: bad cassandra URI: %s (expected "
                  "cassandra://[user[:password]@]host[:port][,host...]/KEYSPACE[?options])",
                  why);
    hc_cass_uri_fini(u);
    return HC_ERR_INVALID;
fail_oom:
    hc_errstr_set(errstr, errstr_size, "cassandra store: out of memory");
    hc_cass_uri_fini(u);
    return HC_ERR_FATAL;
}

/* One replica count of the replication map ("3"); -1 when it is not a count. */
static long replica_count(json_t *v)
{
    const char *s = json_string_value(v);
    char *end;
    long n;

    if (s == NULL || !isdigit((unsigned char)s[0])) {
        return -1;
    }
    errno = 0;
    n = strtol(s, &end, 10);
    return errno != 0 || *end != '\0' || n > 1000 ? -1 : n;
}

hc_err_t hc_cass_consistency_check(int consistency, const char *keyspace,
                                   const char *replication_json, char *errstr, size_t errstr_size)
{
    json_t *root;
    json_t *map;
    json_t *v;
    const char *key;
    const char *cls;
    long total = 0;
    long most = 0;
    hc_err_t err = HC_OK;

    if (consistency != HC_CQL_ONE && consistency != HC_CQL_LOCAL_ONE) {
        return HC_OK; /* the QUORUM levels and ALL overlap with themselves at any replication */
    }
    root = json_loads(replication_json, 0, NULL);
    map = json_object_get(root, "replication");
    cls = json_string_value(json_object_get(map, "class"));
    if (cls == NULL) {
        hc_errstr_set(errstr, errstr_size,
                      "cassandra store: the replication of keyspace %s is unreadable: "
                      "consistency=%s needs it to be one replica",
                      keyspace, consistency == HC_CQL_ONE ? "one" : "local_one");
        json_decref(root);
        return HC_ERR_INVALID;
    }
    json_object_foreach(map, key, v)
    {
        long n;

        if (strcmp(key, "class") == 0) {
            continue;
        }
        /* SimpleStrategy: replication_factor; NetworkTopologyStrategy: one count per
         * datacenter. A non-count value (a transient-replica "3/1") is refused below. */
        n = replica_count(v);
        if (n < 0) {
            total = most = 1000;
            break;
        }
        total += n;
        most = n > most ? n : most;
    }
    if ((consistency == HC_CQL_ONE && total > 1) || (consistency == HC_CQL_LOCAL_ONE && most > 1)) {
        hc_errstr_set(errstr, errstr_size,
                      "cassandra store: consistency=%s on keyspace %s, which keeps more than one "
                      "replica of each row: a read at %s may miss a write another replica "
                      "acknowledged, and a count built on it would lose likes; use local_quorum "
                      "(the default) or quorum",
                      consistency == HC_CQL_ONE ? "one" : "local_one", keyspace,
                      consistency == HC_CQL_ONE ? "ONE" : "LOCAL_ONE");
        err = HC_ERR_INVALID;
    }
    json_decref(root);
    return err;
}
