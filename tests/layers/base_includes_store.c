/* Wrong way: the base layer (configuration, timeouts) reaching up into the store layer for a
 * backend's facts, which it must be handed instead (hotcount/store_facts.h). Must fail to
 * compile under hc_base's usage requirements with "hotcount/store.h: No such file". */
#include "hotcount/store.h"

int hc_layers_probe(void);
int hc_layers_probe(void)
{
    return 0;
}
