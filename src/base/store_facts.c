/* Reading the store backends' facts (hotcount/store_facts.h). */
#include "hotcount/store_facts.h"

#include <stdio.h>
#include <string.h>

const hc_store_facts_t *hc_store_facts_find(const hc_store_facts_t *const *stores, const char *uri)
{
    for (size_t i = 0; stores != NULL && uri != NULL && stores[i] != NULL; i++) {
        for (const char *const *s = stores[i]->schemes; *s != NULL; s++) {
            if (strncmp(uri, *s, strlen(*s)) == 0) {
                return stores[i];
            }
        }
    }
    return NULL;
}

/* Appends item to buf as the n-th of a list whose last one is last: ", " between, " or " before
 * the last. */
static void append_item(char *buf, size_t size, size_t *used, const char *item, size_t n, bool last)
{
    int w;

    if (*used >= size) {
        return;
    }
    w = snprintf(buf + *used, size - *used, "%s%s", n == 0 ? "" : last ? " or " : ", ", item);
    *used = w < 0 ? *used : *used + (size_t)w;
}

void hc_store_facts_list(const hc_store_facts_t *const *stores, hc_store_list_t what, char *buf,
                         size_t size)
{
    const char *items[64];
    size_t count = 0;
    size_t used = 0;

    if (size == 0) {
        return;
    }
    buf[0] = '\0';
    for (size_t i = 0; stores != NULL && stores[i] != NULL; i++) {
        if (what == HC_STORE_LIST_PASSWORD_SCHEMES) {
            for (const char *const *s = stores[i]->schemes;
                 stores[i]->takes_password_file && *s != NULL; s++) {
                if (count < sizeof(items) / sizeof(items[0])) {
                    items[count++] = *s;
                }
            }
        } else if (count < sizeof(items) / sizeof(items[0])) {
            items[count++] = what == HC_STORE_LIST_FORMS ? stores[i]->uri_form : stores[i]->title;
        }
    }
    for (size_t i = 0; i < count; i++) {
        append_item(buf, size, &used, items[i], i, i + 1 == count);
    }
}
