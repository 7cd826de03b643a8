/* A consumer made with own_main_queue, its main queue served by hc_kafka_main_queue (src/kafka/
 * main_queue.c), on librdkafka's mock cluster. The statistics must keep coming while the
 * consumer's own thread does not poll and its queue holds fetched messages: forwarded to that
 * queue, the reports waited behind the messages, and a stage behind on its input or in a slow
 * store call showed no consumer lag at all (tests/faults/overload.sh, 2026-12-05). The thread
 * must take no message from the consumer: every one arrives, in order, at the consumer's poll. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka.h needs the four above first; the blank line keeps clang-format from sorting it up. */

#include <cmocka.h>

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hotcount/admin.h"
#include "hotcount/clock.h"
#include "hotcount/config.h"
#include "hotcount/kafka.h"
#include "hotcount/log.h"
#include "hotcount/store.h"

#define MESSAGES 2000
#define STATS_MS 100 /* statistics.interval.ms */

typedef struct fixture {
    hc_config_t cfg;
    hc_mock_t mock;
    rd_kafka_t *consumer;
    hc_kafka_main_queue_t *mq;
    atomic_int reports;       /* statistics reports so far */
    atomic_int fetched_shown; /* reports that show messages fetched ahead of the consumer */
} fixture_t;

static int on_stats(rd_kafka_t *rk, char *json, size_t json_len, void *opaque)
{
    (void)rk;
    (void)json_len;
    fixture_t *f = opaque;
    atomic_fetch_add(&f->reports, 1);
    /* a partition's fetched messages waiting for the consumer (librdkafka's fetchq_cnt) */
    static const char key[] = "\"fetchq_cnt\":";
    for (const char *at = strstr(json, key); at; at = strstr(at + 1, key)) {
        if (strtol(at + strlen(key), NULL, 10) > 0) {
            atomic_fetch_add(&f->fetched_shown, 1);
            break;
        }
    }
    return 0;
}

static void produce(fixture_t *f)
{
    char errstr[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    assert_int_equal(
        rd_kafka_conf_set(conf, "bootstrap.servers", f->mock.bootstraps, errstr, sizeof(errstr)),
        RD_KAFKA_CONF_OK);
    rd_kafka_t *p = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
    assert_non_null(p);
    for (int i = 0; i < MESSAGES; i++) {
        char value[32];
        int len = snprintf(value, sizeof(value), "%d", i);
        assert_int_equal(rd_kafka_producev(p, RD_KAFKA_V_TOPIC(f->cfg.topic_partials),
                                           RD_KAFKA_V_PARTITION(0), RD_KAFKA_V_VALUE(value, len),
                                           RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                                           RD_KAFKA_V_END),
                         RD_KAFKA_RESP_ERR_NO_ERROR);
    }
    assert_int_equal(rd_kafka_flush(p, 10000), RD_KAFKA_RESP_ERR_NO_ERROR);
    rd_kafka_destroy(p);
}

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof(*f));
    char errstr[512];
    assert_non_null(f);
    hc_log_setup(getenv("HC_TEST_LOG") ? HC_LOG_INFO : HC_LOG_ERROR, HC_LOG_TEXT);
    assert_int_equal(hc_config_init(&f->cfg, hc_store_facts()), HC_OK);
    assert_int_equal(hc_mock_start(&f->mock, &f->cfg, 1, errstr, sizeof(errstr)), HC_OK);
    assert_int_equal(hc_config_set(&f->cfg, "brokers", f->mock.bootstraps, errstr, sizeof(errstr)),
                     HC_OK);
    assert_int_equal(hc_config_set(&f->cfg, "kafka.consumer.statistics.interval.ms", "100", errstr,
                                   sizeof(errstr)),
                     HC_OK);
    produce(f);
    hc_kafka_opts_t opts = {
        .group_id = "main-queue", .stats_cb = on_stats, .opaque = f, .own_main_queue = true};
    f->consumer =
        hc_kafka_new(&f->cfg, HC_KAFKA_ROLE_STAGE2_CONSUMER, &opts, errstr, sizeof(errstr));
    if (!f->consumer) {
        fail_msg("consumer: %s", errstr);
    }
    f->mq = hc_kafka_main_queue_start(f->consumer);
    assert_non_null(f->mq);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    hc_kafka_main_queue_stop(f->mq);
    rd_kafka_consumer_close(f->consumer);
    rd_kafka_destroy(f->consumer);
    hc_mock_stop(&f->mock);
    hc_config_fini(&f->cfg);
    free(f);
    return 0;
}

/* The next message of the consumer, within 5 s, as the number it carries; -1: none. Consumer
 * errors (a partition's end, a broker connection's) carry no message and are skipped, as the
 * stages log and skip them. */
static long next_value(rd_kafka_t *rk)
{
    int64_t until = hc_now_ms() + 5000;
    while (hc_now_ms() < until) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 100);
        if (m && m->err) {
            rd_kafka_message_destroy(m);
            continue;
        }
        if (!m) {
            continue;
        }
        long v = -1;
        if (m->len > 0 && m->len < 32) {
            char text[32];
            memcpy(text, m->payload, m->len);
            text[m->len] = '\0';
            v = strtol(text, NULL, 10);
        }
        rd_kafka_message_destroy(m);
        return v;
    }
    return -1;
}

static void statistics_come_while_the_consumer_is_busy(void **state)
{
    fixture_t *f = *state;
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(l, f->cfg.topic_partials, 0)->offset =
        RD_KAFKA_OFFSET_BEGINNING;
    assert_int_equal(rd_kafka_assign(f->consumer, l), RD_KAFKA_RESP_ERR_NO_ERROR);
    rd_kafka_topic_partition_list_destroy(l);
    /* one message taken: the fetcher runs and fills the queue with the rest */
    assert_int_equal(next_value(f->consumer), 0);

    /* busy: the consumer's thread does not poll while 5 reports show messages waiting for it
     * (a report every 100 ms; 10 s is the bound for a loaded machine, not the expectation) */
    int shown_before = atomic_load(&f->fetched_shown);
    int64_t until = hc_now_ms() + 10000;
    while (atomic_load(&f->fetched_shown) - shown_before < 5 && hc_now_ms() < until) {
        hc_sleep_ms(STATS_MS / 2);
    }
    int shown = atomic_load(&f->fetched_shown) - shown_before;
    if (shown < 5) {
        fail_msg("%d statistics reports with messages waiting in 10 s while the consumer did not "
                 "poll (%d reports in all), want 5 at statistics.interval.ms=%d",
                 shown, atomic_load(&f->reports), STATS_MS);
    }

    /* every message still comes to the consumer, in order: the thread took none */
    for (long want = 1; want < MESSAGES; want++) {
        long got = next_value(f->consumer);
        if (got != want) {
            fail_msg("message %ld: got %ld", want, got);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(statistics_come_while_the_consumer_is_busy, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
