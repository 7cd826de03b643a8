/* Reading Prometheus text: one sample line at a time, never past its end. */
#include "hotcount/prom_text.h"

#include <stdlib.h>
#include <string.h>

static bool is_name_char(char c, bool first)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' ||
           (!first && c >= '0' && c <= '9');
}

/* The end of the label set that starts at p (after '{'), within [p, end): the '}' outside any
 * quoted value, or NULL. */
static const char *labels_end(const char *p, const char *end)
{
    bool quoted = false;
    for (; p < end; p++) {
        if (quoted && *p == '\\' && p + 1 < end) {
            p++;
        } else if (*p == '"') {
            quoted = !quoted;
        } else if (*p == '}' && !quoted) {
            return p;
        }
    }
    return NULL;
}

bool hc_prom_next(const char **pos, hc_prom_sample_t *s)
{
    const char *line = *pos;
    while (line && *line) {
        const char *eol = strchr(line, '\n');
        const char *end = eol ? eol : line + strlen(line);
        const char *next = eol ? eol + 1 : end;
        const char *p = line;
        if (p < end && is_name_char(*p, true)) {
            while (p < end && is_name_char(*p, false)) {
                p++;
            }
            s->name = line;
            s->name_len = (size_t)(p - line);
            s->labels = p;
            s->labels_len = 0;
            bool ok = true;
            if (p < end && *p == '{') {
                const char *close = labels_end(p + 1, end);
                if (close) {
                    s->labels = p + 1;
                    s->labels_len = (size_t)(close - p - 1);
                    p = close + 1;
                } else {
                    ok = false;
                }
            }
            if (ok && p < end && (*p == ' ' || *p == '\t')) {
                /* the value ends at the line's end or a space: strtod stops at '\n' too */
                char *num_end;
                s->value = strtod(p + 1, &num_end);
                if (num_end != p + 1 && num_end <= end) {
                    *pos = next;
                    return true;
                }
            }
        }
        line = next;
    }
    *pos = line;
    return false;
}

bool hc_prom_is(const hc_prom_sample_t *s, const char *name)
{
    size_t n = strlen(name);
    return s->name_len == n && memcmp(s->name, name, n) == 0;
}

/* Finds key="..." at a label boundary; returns the byte after the opening quote, or NULL. */
static const char *find_label(const hc_prom_sample_t *s, const char *key)
{
    size_t klen = strlen(key);
    const char *p = s->labels;
    const char *end = s->labels + s->labels_len;
    while (p < end) {
        /* p at the start of a label name */
        const char *eq = memchr(p, '=', (size_t)(end - p));
        if (!eq || eq + 1 >= end || eq[1] != '"') {
            return NULL;
        }
        if ((size_t)(eq - p) == klen && memcmp(p, key, klen) == 0) {
            return eq + 2;
        }
        /* skip the quoted value, then a comma */
        const char *v = eq + 2;
        while (v < end && *v != '"') {
            v += *v == '\\' && v + 1 < end ? 2 : 1;
        }
        p = v + 1;
        if (p < end && *p == ',') {
            p++;
        }
    }
    return NULL;
}

bool hc_prom_label(const hc_prom_sample_t *s, const char *key, char *out, size_t out_size,
                   size_t *len)
{
    const char *v = find_label(s, key);
    if (!v) {
        return false;
    }
    const char *end = s->labels + s->labels_len;
    size_t n = 0;
    while (v < end && *v != '"') {
        char c = *v++;
        if (c == '\\' && v < end) {
            c = *v == 'n' ? '\n' : *v;
            v++;
        }
        if (n + 1 < out_size) {
            out[n++] = c;
        }
    }
    if (out_size > 0) {
        out[n] = '\0';
    }
    if (len) {
        *len = n;
    }
    return true;
}

bool hc_prom_has_label(const hc_prom_sample_t *s, const char *key, const char *value)
{
    char buf[256];
    size_t n = 0;
    size_t want = strlen(value);
    if (want >= sizeof(buf) || !hc_prom_label(s, key, buf, sizeof(buf), &n)) {
        return false;
    }
    return n == want && memcmp(buf, value, n) == 0;
}
