/* Stage 1 computes each post's likes.partials partition itself for packed partials
 * (hc_pack_partition, include/core/hotcount/partial_pack.h); it must be the partition
 * librdkafka's default partitioner (consistent_random) gave the one-post records keyed by the
 * post id, so that a post keeps its partition across the upgrade. Compared here against
 * librdkafka's own function, and against fixed CRC-32 vectors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include <librdkafka/rdkafka.h>

#include "hotcount/partial_pack.h"

static void same_as_librdkafka(void **state)
{
    (void)state;
    static const int32_t counts[] = {1, 2, 3, 7, 8, 12, 16, 64, 100, 1000};
    char key[300];
    uint64_t x = 88172645463325252u; /* xorshift: fixed keys of every length and byte */
    int compared = 0;
    for (int i = 0; i < 4000; i++) {
        size_t len;
        if (i % 2 == 0) {
            len = (size_t)snprintf(key, sizeof(key), "post-%d", i);
        } else {
            len = 1 + (size_t)(i % 256);
            for (size_t b = 0; b < len; b++) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                key[b] = (char)(x & 0xff);
            }
        }
        for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
            /* a keyed message never reaches the random fallback, the one use of rkt */
            int32_t want =
                rd_kafka_msg_partitioner_consistent_random(NULL, key, len, counts[c], NULL, NULL);
            int32_t got = hc_pack_partition(key, len, counts[c]);
            if (want != got) {
                fail_msg("key %d (%zu bytes), %d partitions: librdkafka %d, hotcount %d", i, len,
                         counts[c], want, got);
            }
            compared++;
        }
    }
    assert_int_equal(compared, 40000);
}

/* CRC-32 check values: "123456789" is 0xCBF43926, "a" is 0xE8B7BE43. */
static void crc32_vectors(void **state)
{
    (void)state;
    assert_int_equal(hc_pack_partition("123456789", 9, 1000003), 0xCBF43926u % 1000003u);
    assert_int_equal(hc_pack_partition("a", 1, 65521), 0xE8B7BE43u % 65521u);
    assert_int_equal(hc_pack_partition("a", 1, 1), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(same_as_librdkafka),
        cmocka_unit_test(crc32_vectors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
