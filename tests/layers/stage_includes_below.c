/* The right way: the stage layer sees its own headers and those of the layers below it
 * (kafka, store, obs, base, core). Must compile and link with exactly hc_stage's usage
 * requirements; it also shows that the headers the wrong-way probes reach for exist, so their
 * "No such file" is the layering's doing, not a renamed header's. */
#include <stdio.h>

#include "hotcount/clock.h"
#include "hotcount/event.h"
#include "hotcount/kafka.h"
#include "hotcount/metrics.h"
#include "hotcount/stage.h"
#include "hotcount/store.h"

int main(void)
{
    hc_store_close(NULL); /* accepts NULL: links the store layer without a server */
    printf("librdkafka %s, %s, %lld ms\n", rd_kafka_version_str(), hc_event_reason_str(HC_EVENT_OK),
           (long long)hc_now_ms());
    return 0;
}
