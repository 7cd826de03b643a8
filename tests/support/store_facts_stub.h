/* A stand-in for the store layer's backend list (hc_store_facts() of hotcount/store.h) for the
 * base layer's unit tests, which may not link the store layer: base knows no backend and is
 * handed whatever list its caller has. The entries mimic the real backends' schemes and bounds so
 * that the base tests read like the configurations users write; test_store_backends.c checks the
 * real descriptors, and that they say what this stand-in says. */
#ifndef HOTCOUNT_TEST_STORE_FACTS_STUB_H
#define HOTCOUNT_TEST_STORE_FACTS_STUB_H

#include "hotcount/store_facts.h"

static inline int64_t stub_two_statements(int64_t max_keys)
{
    (void)max_keys;
    return 2;
}

static inline int64_t stub_parts_of_10000(int64_t max_keys)
{
    return (max_keys + 9999) / 10000 + 1;
}

static inline int64_t stub_chunks_of_65536(int64_t max_keys)
{
    return (max_keys + 65535) / 65536 + 4;
}

static inline int64_t stub_requests_of_100(int64_t max_keys)
{
    return (max_keys + 99) / 100 + 1;
}

static const char *const stub_sqlite_schemes[] = {"sqlite:", NULL};
static const char *const stub_redis_schemes[] = {"redis://", "rediss://", NULL};
static const char *const stub_pgsql_schemes[] = {"postgresql://", "postgres://", NULL};
static const char *const stub_dynamodb_schemes[] = {"dynamodb://", NULL};

static const hc_store_facts_t stub_store_sqlite = {
    "sqlite", "SQLite", stub_sqlite_schemes, "sqlite:PATH", "a file path", false, 10000,
    5000,     0,        stub_two_statements};
static const hc_store_facts_t stub_store_redis = {
    "redis", "Redis", stub_redis_schemes, "redis[s]://[user:pw@]host:port[/db]", NULL, true, 10000,
    10000,   0,       stub_parts_of_10000};
static const hc_store_facts_t stub_store_pgsql = {
    "postgresql", "PostgreSQL", stub_pgsql_schemes,  "postgresql://...", NULL, true, 10000,
    45000,        30000,        stub_chunks_of_65536};
static const hc_store_facts_t stub_store_dynamodb = {
    "dynamodb",
    "DynamoDB",
    stub_dynamodb_schemes,
    "dynamodb://REGION[/PREFIX][?endpoint=URL&profile=NAME]",
    NULL,
    false,
    10000,
    10000,
    0,
    stub_requests_of_100};

static const hc_store_facts_t *const stub_stores[] = {
    &stub_store_sqlite, &stub_store_redis, &stub_store_pgsql, &stub_store_dynamodb, NULL};

#endif
