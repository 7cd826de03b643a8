/* Wrong way at link time: librdkafka's header sits on the system include path, so a core file
 * could include it and compile; what keeps the core pure is that hc_core links no server
 * library. An executable of this file linked with exactly hc_core must fail to link with an
 * undefined reference to rd_kafka_version. The prototype is declared here (it is librdkafka's,
 * int rd_kafka_version(void)) so that the probe does not depend on where the header lives. */
#include <stdio.h>

#include "hotcount/event.h"

int rd_kafka_version(void);

int main(void)
{
    hc_event_t ev;
    /* something of the core, so the probe links the layer it claims to */
    hc_event_reason_t r = hc_event_parse("{\"post_id\":\"1\"}", 15, 4096, &ev);
    printf("%s %x\n", hc_event_reason_str(r), (unsigned)rd_kafka_version());
    return 0;
}
