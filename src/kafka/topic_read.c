/* See include/kafka/hotcount/topic_read.h. */
#include "hotcount/topic_read.h"

#include <stdbool.h>
#include <stdlib.h>

#include "hotcount/clock.h"
#include "hotcount/kafka.h"
#include "hotcount/log.h"
#include "hotcount/offset.h"
#include "hotcount/timeouts.h"

hc_err_t hc_topic_read_ranges(rd_kafka_t *rk, const char *topic, const hc_topic_range_t *ranges,
                              size_t count, hc_topic_message_fn fn, void *opaque, char *errstr,
                              size_t errstr_size)
{
    return hc_topic_read_ranges_idle(rk, topic, ranges, count, HC_TIMEOUTS_TOPIC_READ_IDLE_MS, fn,
                                     opaque, errstr, errstr_size);
}

/* a read with no message for idle_ms is stuck: the broker is down or the range is gone */
hc_err_t hc_topic_read_ranges_idle(rd_kafka_t *rk, const char *topic,
                                   const hc_topic_range_t *ranges, size_t count, int64_t idle_ms,
                                   hc_topic_message_fn fn, void *opaque, char *errstr,
                                   size_t errstr_size)
{
    bool *done = calloc(count + 1, sizeof(*done));
    rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new((int)count + 1);
    hc_err_t err = HC_OK;
    size_t remaining = 0;
    if (!done) {
        hc_errstr_set(errstr, errstr_size, "out of memory");
        err = HC_ERR_FATAL;
        goto out;
    }
    for (size_t i = 0; i < count; i++) {
        done[i] = ranges[i].from != HC_OFFSET_NONE && ranges[i].from >= ranges[i].to;
        if (!done[i]) {
            rd_kafka_topic_partition_list_add(list, topic, ranges[i].partition)->offset =
                ranges[i].from == HC_OFFSET_NONE ? RD_KAFKA_OFFSET_BEGINNING : ranges[i].from;
            remaining++;
        }
    }
    if (remaining == 0) {
        goto out;
    }
    rd_kafka_resp_err_t rerr = rd_kafka_assign(rk, list);
    if (rerr) {
        hc_errstr_set(errstr, errstr_size, "reading %s: assign: %s", topic, rd_kafka_err2str(rerr));
        err = HC_ERR_TRANSIENT;
        goto out;
    }
    int64_t idle_since = hc_now_ms();
    while (remaining > 0 && err == HC_OK) {
        rd_kafka_message_t *rkm = rd_kafka_consumer_poll(rk, 500);
        if (!rkm) {
            if (hc_now_ms() - idle_since > idle_ms) {
                hc_errstr_set(errstr, errstr_size, "reading %s: no message for %lld ms", topic,
                              (long long)idle_ms);
                err = HC_ERR_TRANSIENT;
            }
            continue;
        }
        idle_since = hc_now_ms();
        size_t r = 0;
        while (r < count && ranges[r].partition != rkm->partition) {
            r++;
        }
        if (r < count && !done[r]) {
            if (rkm->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
                done[r] = true;
                remaining--;
            } else if (rkm->err) {
                hc_log(HC_LOG_WARN, "kafka", "reading %s: %s", topic, rd_kafka_message_errstr(rkm));
            } else {
                if (rkm->offset < ranges[r].to) {
                    err = fn(rkm, opaque);
                }
                if (rkm->offset + 1 >= ranges[r].to) {
                    done[r] = true;
                    remaining--;
                }
            }
        }
        rd_kafka_message_destroy(rkm);
    }
    rd_kafka_assign(rk, NULL);
out:
    rd_kafka_topic_partition_list_destroy(list);
    free(done);
    return err;
}
