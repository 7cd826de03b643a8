/* For tests/unit/test_partial_auth.py: reads lines "<key hex> <message hex>" (either may be
 * "-" for empty) and prints HMAC-SHA256 (core/partial_auth.h) of each as hex, a line each. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hotcount/partial_auth.h"

static size_t unhex(const char *s, uint8_t *out)
{
    size_t n = 0;
    if (strcmp(s, "-") == 0) {
        return 0;
    }
    for (; s[0] && s[1]; s += 2) {
        unsigned v;
        sscanf(s, "%2x", &v);
        out[n++] = (uint8_t)v;
    }
    return n;
}

int main(void)
{
    static char line[1 << 16];
    static char khex[1 << 15], mhex[1 << 15];
    static uint8_t key[1 << 14], msg[1 << 14];
    while (fgets(line, sizeof(line), stdin)) {
        if (sscanf(line, "%32767s %32767s", khex, mhex) != 2) {
            return 2;
        }
        size_t kl = unhex(khex, key), ml = unhex(mhex, msg);
        const void *parts[1] = {msg};
        size_t lens[1] = {ml};
        uint8_t mac[32];
        hc_hmac_sha256(key, kl, parts, lens, 1, mac);
        for (int i = 0; i < 32; i++) {
            printf("%02x", mac[i]);
        }
        printf("\n");
    }
    return 0;
}
