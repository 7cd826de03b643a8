/* Wrong way: a layer above the store reaching behind its door into the backends' seam (the
 * descriptors and ops tables of src/store/store_impl.h, private to the store layer). Must fail
 * to compile under hc_stage's usage requirements with "store_impl.h: No such file". */
#include "store_impl.h"

int hc_layers_probe(void);
int hc_layers_probe(void)
{
    return 0;
}
