/* A consumer's main queue (statistics, error callbacks) served on a thread of its own.
 *
 * librdkafka queues its statistics, like its error callbacks, on the client's main queue. A
 * consumer usually forwards that queue to its message queue (rd_kafka_poll_set_consumer), and
 * then each statistics report waits behind every message fetched before it: a stage that is
 * behind (the pre-fetch queue holding thousands of records) or busy (a slow store batch) served
 * its reports seconds late, in bursts, so hotcount_consumer_lag went stale and vanished from
 * /metrics exactly while the lag was growing (tests/faults/overload.sh found it). Served here,
 * a report reaches the metrics within one poll of this thread whatever the stage is doing.
 *
 * Polling the main queue does not count as the application polling the consumer:
 * max.poll.interval.ms still watches the stage thread (librdkafka only counts polls of a queue
 * that holds fetched messages). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "hotcount/kafka.h"

/* How long one poll waits: the longest the stop waits for the thread. */
#define MAIN_QUEUE_POLL_MS 100

struct hc_kafka_main_queue {
    rd_kafka_t *rk; /* borrowed: outlives the thread */
    atomic_bool stop;
    pthread_t thread;
};

static void *serve(void *arg)
{
    hc_kafka_main_queue_t *mq = arg;
    while (!atomic_load(&mq->stop)) {
        rd_kafka_poll(mq->rk, MAIN_QUEUE_POLL_MS);
    }
    return NULL;
}

hc_kafka_main_queue_t *hc_kafka_main_queue_start(rd_kafka_t *rk)
{
    hc_kafka_main_queue_t *mq = calloc(1, sizeof(*mq));
    if (!mq) {
        return NULL;
    }
    mq->rk = rk;
    atomic_init(&mq->stop, false);
    if (pthread_create(&mq->thread, NULL, serve, mq) != 0) {
        free(mq);
        return NULL;
    }
    return mq;
}

void hc_kafka_main_queue_stop(hc_kafka_main_queue_t *mq)
{
    if (!mq) {
        return;
    }
    atomic_store(&mq->stop, true);
    pthread_join(mq->thread, NULL);
    free(mq);
}
