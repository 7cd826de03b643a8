/* Wrong way: the core (pure, no I/O) reaching up into the kafka layer. Compiled with exactly
 * hc_core's usage requirements, it must fail with "hotcount/kafka.h: No such file". */
#include "hotcount/kafka.h"

int hc_layers_probe(void);
int hc_layers_probe(void)
{
    return 0;
}
