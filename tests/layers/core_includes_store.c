/* Wrong way: the core reaching up into the store layer. Must fail to compile under hc_core's
 * usage requirements with "hotcount/store.h: No such file". */
#include "hotcount/store.h"

int hc_layers_probe(void);
int hc_layers_probe(void)
{
    return 0;
}
