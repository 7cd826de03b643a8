/* See include/stage/hotcount/partials_key.h. */
#include "hotcount/partials_key.h"

#include <stdlib.h>
#include <string.h>

#include "hotcount/secret_file.h"

hc_err_t hc_partials_key_load(const hc_config_t *cfg, hc_auth_keyring_t *kr, bool *on, char *errstr,
                              size_t errstr_size)
{
    memset(kr, 0, sizeof(*kr));
    *on = false;
    const char *path = cfg->partials_auth_key_file;
    if (!path || !path[0]) {
        return HC_OK;
    }
    char *text = NULL;
    hc_err_t err = hc_secret_file_read("partials.auth.key.file", path, &text, errstr, errstr_size);
    if (err != HC_OK) {
        return err;
    }
    size_t len = strlen(text);
    char why[256];
    err = hc_auth_keyring_parse(kr, text, len, why, sizeof(why));
    /* volatile: the compiler may not drop a store to memory about to be freed */
    volatile char *wipe = text;
    for (size_t i = 0; i < len; i++) {
        wipe[i] = 0;
    }
    free(text);
    if (err != HC_OK) {
        hc_errstr_set(errstr, errstr_size, "partials.auth.key.file %s: %s", path, why);
        return HC_ERR_INVALID;
    }
    *on = true;
    return HC_OK;
}
