/* Test-only (the library hc_store_testing, src/store/testing/, in a build with the Cassandra
 * backend): the Cassandra store's fault seam (src/store/cassandra/cass_seam.h) for
 * tests/integration/test_store_cassandra.c. Never linked into hotcount. */
#ifndef HOTCOUNT_CASSANDRA_TESTING_H
#define HOTCOUNT_CASSANDRA_TESTING_H

#include "cass_seam.h"
#include "hotcount/store.h"

/* Sets (or, with NULL, clears) st's hooks; st must be a Cassandra store. Borrowed: *hooks must
 * outlive its use by st. */
void hc_store_cassandra_set_test_hooks(hc_store_t *st, const hc_cass_test_hooks_t *hooks);

#endif
