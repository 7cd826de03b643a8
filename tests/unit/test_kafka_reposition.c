/* hc_kafka_reposition (src/kafka/kafka.c) on librdkafka's mock cluster. A partition the consumer
 * no longer fetches has nothing to reposition: its next owner (or this consumer, when it is
 * handed back) starts from the committed offsets. A combined-fault run's stage 1 exited on
 * "seek raw/8: Local: Erroneous state" (2026-12-05, seed 208894774, consumer protocol): an
 * abort's rewind sought a partition that the group had just revoked. Such a partition is
 * skipped now; a seek of an assigned partition still succeeds, and one of a partition that does
 * not exist is still an error. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka.h needs the four above first; the blank line keeps clang-format from sorting it up. */

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hotcount/admin.h"
#include "hotcount/clock.h"
#include "hotcount/config.h"
#include "hotcount/kafka.h"
#include "hotcount/log.h"
#include "hotcount/store.h"

typedef struct fixture {
    hc_config_t cfg;
    hc_mock_t mock;
    rd_kafka_t *consumer;
} fixture_t;

static rd_kafka_topic_partition_list_t *one(const char *topic, int32_t partition, int64_t offset)
{
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(l, topic, partition)->offset = offset;
    return l;
}

/* Half a second of polls: the consumer acts on its assignment. */
static void poll_a_while(rd_kafka_t *rk)
{
    for (int i = 0; i < 10; i++) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 50);
        if (m) {
            rd_kafka_message_destroy(m);
        }
    }
}

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof(*f));
    char errstr[512];
    assert_non_null(f);
    hc_log_setup(getenv("HC_TEST_LOG") ? HC_LOG_INFO : HC_LOG_ERROR, HC_LOG_TEXT);
    assert_int_equal(hc_config_init(&f->cfg, hc_store_facts()), HC_OK);
    assert_int_equal(hc_config_set(&f->cfg, "topic.raw.partitions", "2", errstr, sizeof(errstr)),
                     HC_OK);
    assert_int_equal(hc_mock_start(&f->mock, &f->cfg, 1, errstr, sizeof(errstr)), HC_OK);
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    assert_int_equal(
        rd_kafka_conf_set(conf, "bootstrap.servers", f->mock.bootstraps, errstr, sizeof(errstr)),
        RD_KAFKA_CONF_OK);
    assert_int_equal(rd_kafka_conf_set(conf, "group.id", "reposition", errstr, sizeof(errstr)),
                     RD_KAFKA_CONF_OK);
    f->consumer = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof(errstr));
    assert_non_null(f->consumer);
    /* both partitions fetched, then partition 1 given up, as a revoke does */
    rd_kafka_topic_partition_list_t *both = one(f->cfg.topic_raw, 0, RD_KAFKA_OFFSET_BEGINNING);
    rd_kafka_topic_partition_list_add(both, f->cfg.topic_raw, 1)->offset =
        RD_KAFKA_OFFSET_BEGINNING;
    assert_int_equal(rd_kafka_assign(f->consumer, both), RD_KAFKA_RESP_ERR_NO_ERROR);
    rd_kafka_topic_partition_list_destroy(both);
    poll_a_while(f->consumer);
    rd_kafka_topic_partition_list_t *first = one(f->cfg.topic_raw, 0, RD_KAFKA_OFFSET_BEGINNING);
    assert_int_equal(rd_kafka_assign(f->consumer, first), RD_KAFKA_RESP_ERR_NO_ERROR);
    rd_kafka_topic_partition_list_destroy(first);
    poll_a_while(f->consumer);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    rd_kafka_consumer_close(f->consumer);
    rd_kafka_destroy(f->consumer);
    hc_mock_stop(&f->mock);
    hc_config_fini(&f->cfg);
    free(f);
    return 0;
}

/* hc_kafka_reposition of one partition of f's consumer to offset 0; errstr has the reason. */
static hc_err_t seek_one(fixture_t *f, const char *topic, int32_t partition, char *errstr,
                         size_t size)
{
    rd_kafka_topic_partition_list_t *l = one(topic, partition, 0);
    errstr[0] = '\0';
    hc_err_t err = hc_kafka_reposition(f->consumer, l, 5000, errstr, size);
    rd_kafka_topic_partition_list_destroy(l);
    return err;
}

static void a_partition_no_longer_fetched_is_skipped(void **state)
{
    fixture_t *f = *state;
    char errstr[512];
    hc_err_t err = seek_one(f, f->cfg.topic_raw, 1, errstr, sizeof(errstr));
    if (err != HC_OK) {
        fail_msg("seek of a revoked partition: %s: %s", hc_err_name(err), errstr);
    }
}

static void an_assigned_partition_is_sought(void **state)
{
    fixture_t *f = *state;
    char errstr[512];
    hc_err_t err = seek_one(f, f->cfg.topic_raw, 0, errstr, sizeof(errstr));
    if (err != HC_OK) {
        fail_msg("seek of an assigned partition: %s: %s", hc_err_name(err), errstr);
    }
}

static void a_partition_that_does_not_exist_is_an_error(void **state)
{
    fixture_t *f = *state;
    char errstr[512];
    assert_int_not_equal(seek_one(f, "no-such-topic", 0, errstr, sizeof(errstr)), HC_OK);
    assert_non_null(strstr(errstr, "no-such-topic"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(a_partition_no_longer_fetched_is_skipped, setup, teardown),
        cmocka_unit_test_setup_teardown(an_assigned_partition_is_sought, setup, teardown),
        cmocka_unit_test_setup_teardown(a_partition_that_does_not_exist_is_an_error, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
