/* Layer: base. What the configuration and the timeouts need to know of a store backend, without
 * knowing any: each backend states these facts once, in its descriptor (src/store/store_impl.h),
 * and the store layer hands the list in (hc_store_facts(), to hc_config_init). No URI scheme,
 * backend name or backend constant is written below src/store/.
 *
 * Plain constant data, any thread. */
#ifndef HOTCOUNT_STORE_FACTS_H
#define HOTCOUNT_STORE_FACTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct hc_store_facts {
    const char *name;           /* "redis": hc_store_kind(), logs, tests */
    const char *title;          /* "Redis": for sentences (usage, docs) */
    const char *const *schemes; /* the URI prefixes it answers to, NULL-terminated ("redis://") */
    const char *uri_form;       /* for --help and messages: "redis[s]://[user:pw@]host:port[/db]" */
    /* NULL, or what must follow the scheme, for the message when nothing does ("a file path") */
    const char *after_scheme;
    bool takes_password_file;    /* store.password.file may hold its password */
    int64_t connect_ms;          /* bound on one connection attempt */
    int64_t statement_ms;        /* bound on one statement, command or request (the client's) */
    int64_t server_statement_ms; /* the server's own bound, below statement_ms; 0: none */
    /* the most statements one batch of up to max_keys posts issues (max_keys >= 1) */
    int64_t (*statements_per_batch)(int64_t max_keys);
} hc_store_facts_t;

/* The backend of stores (NULL-terminated; NULL: none) whose scheme starts uri, or NULL. */
const hc_store_facts_t *hc_store_facts_find(const hc_store_facts_t *const *stores, const char *uri);

/* Lists, for sentences, into buf (always terminated, cut at size): "sqlite:PATH, redis://... or
 * dynamodb://..." (what: HC_STORE_LIST_FORMS), the schemes of the backends that take
 * store.password.file ("redis://, rediss:// or postgresql://", HC_STORE_LIST_PASSWORD_SCHEMES),
 * or the titles ("SQLite, Redis or PostgreSQL", HC_STORE_LIST_TITLES). */
typedef enum hc_store_list {
    HC_STORE_LIST_FORMS,
    HC_STORE_LIST_PASSWORD_SCHEMES,
    HC_STORE_LIST_TITLES,
} hc_store_list_t;
void hc_store_facts_list(const hc_store_facts_t *const *stores, hc_store_list_t what, char *buf,
                         size_t size);

#endif
