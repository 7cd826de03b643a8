/* Secrets out of every message (include/base/hotcount/redact.h). */
#include "hotcount/redact.h"

#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "hotcount/config.h"
#include "hotcount/percent.h"

/* -DHC_MUTANT_NO_REDACT: everything passes through unchanged, so that tests/unit/test_redact.c
 * and tests/cli/secrets.sh show they would catch a lost redaction (CTest's mutant_no_redact_unit
 * and mutant_no_redact_secrets run them on such a build). Never in a product. */
#ifdef HC_MUTANT_NO_REDACT
#define MUTANT_PASS_THROUGH 1
#else
#define MUTANT_PASS_THROUGH 0
#endif

typedef struct span {
    size_t begin, end; /* [begin, end) of the secret */
} span_t;

#define MAX_SPANS 16

static bool ends_with_ci(const char *s, size_t len, const char *suffix)
{
    size_t n = strlen(suffix);
    return len >= n && strncasecmp(s + len - n, suffix, n) == 0;
}

/* The password of a URI's userinfo: between the first ':' after "://" (or the start, for text
 * with a mistyped or missing scheme) and the last '@', which is how the Redis backend and libpq
 * split "user:password@host" even when the password holds '/', ':' or '@'. */
static bool userinfo_span(const char *s, span_t *sp)
{
    const char *sep = strstr(s, "://");
    const char *start = sep ? sep + 3 : s;
    const char *at = strrchr(start, '@');
    if (!at) {
        return false;
    }
    const char *colon = memchr(start, ':', (size_t)(at - start));
    if (!colon) {
        return false;
    }
    sp->begin = (size_t)(colon + 1 - s);
    sp->end = (size_t)(at - s);
    return true;
}

/* "password=VALUE", "sslpassword = 'VALUE'", "?password=VALUE&...": a key ending in "password"
 * at a word boundary, an '=' (libpq allows blanks around it), then the value up to a blank, '&'
 * or '#', or a single-quoted value (libpq's quoting, with backslash escapes). */
static bool keyword_span(const char *s, size_t i, span_t *sp)
{
    if (i > 0 && !strchr("?&; \t'\"", s[i - 1])) {
        return false;
    }
    size_t k = i;
    while (isalnum((unsigned char)s[k]) || s[k] == '_' || s[k] == '.' || s[k] == '-') {
        k++;
    }
    if (k == i || !ends_with_ci(s + i, k - i, "password")) {
        return false;
    }
    while (s[k] == ' ' || s[k] == '\t') {
        k++;
    }
    if (s[k] != '=') {
        return false;
    }
    k++;
    while (s[k] == ' ' || s[k] == '\t') {
        k++;
    }
    sp->begin = k;
    if (s[k] == '\'') {
        k++;
        while (s[k] && s[k] != '\'') {
            k += s[k] == '\\' && s[k + 1] ? 2 : 1;
        }
        k += s[k] == '\'';
    } else {
        k += strcspn(s + k, " \t&#\"'");
    }
    sp->end = k;
    return sp->end > sp->begin;
}

/* Every secret span of s in order, at most max. */
static size_t secret_spans(const char *s, span_t *spans, size_t max)
{
    span_t user = {0, 0};
    bool has_user = userinfo_span(s, &user);
    size_t n = 0;
    size_t len = strlen(s);
    for (size_t i = 0; i < len && n < max;) {
        span_t sp;
        if (has_user && i == user.begin) {
            spans[n++] = user;
            i = user.end;
        } else if ((!has_user || i < user.begin || i >= user.end) && keyword_span(s, i, &sp) &&
                   (!has_user || sp.end <= user.begin || sp.begin >= user.end)) {
            spans[n++] = sp;
            i = sp.end;
        } else {
            i++;
        }
    }
    return n;
}

typedef struct out {
    char *buf;
    size_t size, len;
} out_t;

static void out_add(out_t *o, const char *s, size_t n)
{
    if (o->size == 0) {
        return;
    }
    size_t room = o->size - 1 - o->len;
    n = n < room ? n : room;
    memcpy(o->buf + o->len, s, n);
    o->len += n;
    o->buf[o->len] = '\0';
}

void hc_redact_uri(const char *uri, char *out, size_t out_size)
{
    out_t o = {out, out_size, 0};
    span_t spans[MAX_SPANS];
    if (out_size == 0) {
        return;
    }
    out[0] = '\0';
    if (!uri) {
        return;
    }
    size_t n = MUTANT_PASS_THROUGH ? 0 : secret_spans(uri, spans, MAX_SPANS);
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        out_add(&o, uri + at, spans[i].begin - at);
        out_add(&o, HC_REDACTED, strlen(HC_REDACTED));
        at = spans[i].end;
    }
    if (n == MAX_SPANS) {
        return; /* more than we track: show nothing more rather than a secret */
    }
    out_add(&o, uri + at, strlen(uri + at));
}

bool hc_redact_is_secret_key(const char *key)
{
    static const char *const prefixes[] = {"kafka.consumer.", "kafka.producer.", "kafka."};
    const char *prop = key;
    for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++) {
        size_t n = strlen(prefixes[i]);
        if (strncmp(key, prefixes[i], n) == 0) {
            prop = key + n;
            break;
        }
    }
    size_t len = strlen(prop);
    return !MUTANT_PASS_THROUGH &&
           (strncmp(prop, "sasl.", 5) == 0 || ends_with_ci(prop, len, "password") ||
            ends_with_ci(prop, len, "secret") || strcmp(prop, "ssl.key.pem") == 0 ||
            strcmp(prop, "ssl_key") == 0);
}

void hc_redact_kv(const char *key, const char *value, char *out, size_t out_size)
{
    if (out_size == 0) {
        return;
    }
    if (hc_redact_is_secret_key(key)) {
        snprintf(out, out_size, "%s", HC_REDACTED);
        return;
    }
    hc_redact_uri(value, out, out_size);
}

void hc_redact_assignment(const char *kv, char *out, size_t out_size)
{
    out_t o = {out, out_size, 0};
    if (out_size == 0) {
        return;
    }
    out[0] = '\0';
    const char *eq = strchr(kv, '=');
    if (!eq) {
        /* No '=': "key value" or "key:value" (a properties file's other separators) hides the
         * value after a secret key; anything else may still hold a whole URI. */
        size_t lead = strspn(kv, " \t");
        size_t klen = strcspn(kv + lead, " \t:");
        char key[256];
        if (klen > 0 && klen < sizeof(key) && kv[lead + klen] != '\0') {
            memcpy(key, kv + lead, klen);
            key[klen] = '\0';
            if (hc_redact_is_secret_key(key)) {
                out_add(&o, kv, lead + klen + 1);
                out_add(&o, HC_REDACTED, strlen(HC_REDACTED));
                return;
            }
        }
        hc_redact_uri(kv, out, out_size);
        return;
    }
    char key[256];
    const char *kb = kv;
    const char *ke = eq;
    while (kb < ke && isspace((unsigned char)*kb)) {
        kb++;
    }
    while (ke > kb && isspace((unsigned char)ke[-1])) {
        ke--;
    }
    size_t klen = (size_t)(ke - kb) < sizeof(key) ? (size_t)(ke - kb) : sizeof(key) - 1;
    memcpy(key, kb, klen);
    key[klen] = '\0';
    out_add(&o, kv, (size_t)(eq + 1 - kv));
    if (o.len + 1 < out_size) {
        hc_redact_kv(key, eq + 1, out + o.len, out_size - o.len);
    }
}

void hc_redact_secret_in(char *text, size_t text_size, const char *secret)
{
    size_t slen = secret ? strlen(secret) : 0;
    size_t rlen = strlen(HC_REDACTED);
    /* 4 and more: longer than HC_REDACTED, so the text only ever gets shorter */
    if (slen < 4 || text_size == 0 || MUTANT_PASS_THROUGH) {
        return;
    }
    char *p = text;
    while ((p = strstr(p, secret)) != NULL) {
        memmove(p + rlen, p + slen, strlen(p + slen) + 1);
        memcpy(p, HC_REDACTED, rlen);
        p += rlen;
    }
}

/* s[begin, end) percent-decoded into out (the form a library may quote back): a broken escape
 * kept as written, cut to what fits. */
static void percent_decode(const char *s, size_t begin, size_t end, char *out, size_t out_size)
{
    size_t n = 0;
    hc_percent_decode(s + begin, end - begin, HC_PCT_LENIENT | HC_PCT_TRUNCATE, out, out_size - 1,
                      &n);
    out[n] = '\0';
}

void hc_redact_config_secrets(char *text, size_t text_size, const struct hc_config *cfg)
{
    if (!cfg || text_size == 0) {
        return;
    }
    if (cfg->store) {
        span_t spans[MAX_SPANS];
        size_t n = secret_spans(cfg->store, spans, MAX_SPANS);
        for (size_t i = 0; i < n; i++) {
            char secret[512];
            size_t len = spans[i].end - spans[i].begin;
            if (len >= sizeof(secret)) {
                len = sizeof(secret) - 1;
            }
            memcpy(secret, cfg->store + spans[i].begin, len);
            secret[len] = '\0';
            hc_redact_secret_in(text, text_size, secret);
            percent_decode(cfg->store, spans[i].begin, spans[i].end, secret, sizeof(secret));
            hc_redact_secret_in(text, text_size, secret);
        }
    }
    /* read from store.password.file (hotcount/secret_file.h) */
    hc_redact_secret_in(text, text_size, cfg->store_password);
    for (size_t i = 0; i < cfg->kafka_prop_count; i++) {
        if (hc_redact_is_secret_key(cfg->kafka_props[i].name)) {
            hc_redact_secret_in(text, text_size, cfg->kafka_props[i].value);
        }
    }
}
