/* Test-only: the Cassandra store's fault seam (cassandra_testing.h). */
#include <assert.h>
#include <string.h>

#include "cassandra_impl.h"
#include "cassandra_testing.h"

void hc_store_cassandra_set_test_hooks(hc_store_t *st, const hc_cass_test_hooks_t *hooks)
{
    assert(strcmp(hc_store_kind(st), "cassandra") == 0);
    cass_store(st)->hooks = hooks;
}
