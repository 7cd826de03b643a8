/* Layer: core. The one offset sentinel the layers pass between them: a partition with no
 * offset known (nothing stored for it yet, or a topic read from its first offset). */
#ifndef HOTCOUNT_OFFSET_H
#define HOTCOUNT_OFFSET_H

#include <stdint.h>

#define HC_OFFSET_NONE INT64_MIN /* no stored offset for this partition */

#endif
