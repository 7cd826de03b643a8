/* Wrong way: the store reaching up into the stage layer that uses it. Under hc_store's usage
 * requirements this must fail with "hotcount/stage.h: No such file". */
#include "hotcount/stage.h"

int hc_layers_probe(void);
int hc_layers_probe(void)
{
    return 0;
}
