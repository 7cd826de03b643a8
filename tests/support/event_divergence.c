/* The differential check and its divergence classifier; see event_divergence.h. */
#include "event_divergence.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "event_ref.h"

static bool is_wellformedness_reason(hc_event_reason_t r)
{
    return r == HC_EVENT_NOT_JSON || r == HC_EVENT_NOT_OBJECT || r == HC_EVENT_BAD_UTF8 ||
           r == HC_EVENT_DUPLICATE_KEY || r == HC_EVENT_TRAILING_GARBAGE || r == HC_EVENT_TOO_DEEP;
}

static bool same_event(const hc_event_t *a, const hc_event_t *b)
{
    return a->post_id_len == b->post_id_len &&
           memcmp(a->post_id, b->post_id, a->post_id_len + 1) == 0 && a->delta == b->delta &&
           a->has_ts == b->has_ts && (!a->has_ts || a->ts == b->ts) &&
           a->has_user_id == b->has_user_id && a->user_id_len == b->user_id_len &&
           memcmp(a->user_id, b->user_id, a->user_id_len) == 0;
}

bool hc_event_run_both(const char *buf, size_t n, size_t max_bytes, hc_event_both_t *b)
{
    bool ref_loaded;

    /* different garbage in each, so that a field neither parser wrote never compares equal */
    memset(&b->fast, 0xa5, sizeof(b->fast));
    memset(&b->ref, 0x5a, sizeof(b->ref));
    b->fast_r = hc_event_parse(buf, n, max_bytes, &b->fast);
    b->ref_r = hc_event_parse_ref(buf, n, max_bytes, &b->ref);
    ref_loaded = !is_wellformedness_reason(b->ref_r) || b->ref_r == HC_EVENT_NOT_OBJECT;
    if (ref_loaded) {
        return b->fast_r == b->ref_r && (b->fast_r != HC_EVENT_OK || same_event(&b->fast, &b->ref));
    }
    return is_wellformedness_reason(b->fast_r);
}

static bool is_num_char(unsigned char c)
{
    return (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E';
}

unsigned hc_event_divergence_of(const unsigned char *s, size_t n, char *norm, size_t *norm_len)
{
    unsigned flags = 0;
    bool in_str = false;
    int depth = 0;
    int max_depth = 0;
    size_t m = 0;

    for (size_t i = 0; i < n; i++) {
        unsigned char c = s[i];
        if (in_str) {
            norm[m++] = (char)c;
            if (c == '\\') {
                if (i + 5 < n && s[i + 1] == 'u' && memcmp(s + i + 2, "0000", 4) == 0) {
                    flags |= HC_DIV_FLAG(HC_DIV_NUL_KEY);
                }
                if (i + 1 < n) {
                    norm[m++] = (char)s[++i];
                }
            } else if (c == '"') {
                in_str = false;
            }
            continue;
        }
        if (c == '-' || (c >= '0' && c <= '9')) {
            char tok[2048];
            const char *subst = NULL;
            size_t j = i;
            size_t k;
            while (j < n && is_num_char(s[j])) {
                j++;
            }
            k = j - i < sizeof(tok) - 1 ? j - i : sizeof(tok) - 1;
            memcpy(tok, s + i, k);
            tok[k] = '\0';
            if (strcmp(tok, "-0") == 0) {
                flags |= HC_DIV_FLAG(HC_DIV_MINUS_ZERO);
                subst = " 0";
            } else if (k > 0 && strspn(tok + (tok[0] == '-'), "0123456789") ==
                                    strlen(tok + (tok[0] == '-'))) {
                errno = 0;
                (void)strtoll(tok, NULL, 10);
                if (errno == ERANGE) {
                    flags |= HC_DIV_FLAG(HC_DIV_BIG_NUMBER);
                    subst = tok[0] == '-' ? "-1" : "1";
                }
            } else if (isinf(strtod(tok, NULL))) {
                flags |= HC_DIV_FLAG(HC_DIV_BIG_NUMBER);
                subst = "1.5";
            }
            /* Never longer than the token: -0 stays 2 bytes, an integer outside int64 has 19
             * digits or more, and the shortest real that overflows a double is 1e309. */
            if (subst != NULL) {
                memcpy(norm + m, subst, strlen(subst));
                m += strlen(subst);
            } else {
                memcpy(norm + m, s + i, j - i);
                m += j - i;
            }
            i = j - 1;
            continue;
        }
        norm[m++] = (char)c;
        if (c == '"') {
            in_str = true;
        } else if (c == '[' || c == '{') {
            if (++depth > max_depth) {
                max_depth = depth;
            }
        } else if (c == ']' || c == '}') {
            depth--;
        } else if (c == 0 && i > 0 &&
                   ((s[i - 1] >= '0' && s[i - 1] <= '9') || s[i - 1] == 'e' || s[i - 1] == 'l')) {
            flags |= HC_DIV_FLAG(HC_DIV_NUL_TOKEN);
        }
    }
    if (max_depth > HC_EVENT_MAX_DEPTH) {
        flags |= HC_DIV_FLAG(HC_DIV_DEPTH);
    }
    *norm_len = m;
    return flags;
}

/* An id that normalisation rewrites: an integer beyond int64, or -0. */
static bool is_normalised_id(const char *s, size_t n)
{
    size_t neg = n > 0 && s[0] == '-';
    if (n == neg || strspn(s + neg, "0123456789") != n - neg) {
        return false;
    }
    return n - neg >= 19 || (neg && n == 2 && s[1] == '0');
}

/* Equal but for ids that normalisation rewrote; ts and delta must match exactly. */
static bool same_event_but_normalised_ids(const hc_event_t *orig, const hc_event_t *norm)
{
    hc_event_t a = *orig;
    if (is_normalised_id(a.post_id, a.post_id_len)) {
        memcpy(&a.post_id, norm->post_id, sizeof(a.post_id));
        a.post_id_len = norm->post_id_len;
    }
    if (a.has_user_id && is_normalised_id(a.user_id, a.user_id_len)) {
        memcpy(&a.user_id, norm->user_id, sizeof(a.user_id));
        a.user_id_len = norm->user_id_len;
    }
    return same_event(&a, norm);
}

/* jansson's load error code for the text, or -1 when it loads. */
static int jansson_error(const char *buf, size_t n)
{
    json_error_t jerr;
    json_t *root =
        json_loadb(buf, n, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL | JSON_DECODE_ANY, &jerr);
    if (root != NULL) {
        json_decref(root);
        return -1;
    }
    return (int)json_error_code(&jerr);
}

/* D2, D4, D5: divergences that no rewrite of the input removes; forgiven on their symptom. */
static int explain_unnormalisable(unsigned flags, int jerr, hc_event_reason_t fast_r)
{
    if ((flags & HC_DIV_FLAG(HC_DIV_DEPTH)) && fast_r == HC_EVENT_TOO_DEEP) {
        return HC_DIV_DEPTH;
    }
    if ((flags & HC_DIV_FLAG(HC_DIV_NUL_KEY)) && jerr == json_error_null_byte_in_key) {
        return HC_DIV_NUL_KEY;
    }
    /* The NUL that jansson dropped is a syntax error inside a container, and trailing garbage
     * after a top-level scalar ("1<NUL>": jansson says not_object). */
    if ((flags & HC_DIV_FLAG(HC_DIV_NUL_TOKEN)) &&
        (fast_r == HC_EVENT_NOT_JSON || fast_r == HC_EVENT_TRAILING_GARBAGE) && jerr < 0) {
        return HC_DIV_NUL_TOKEN;
    }
    return -1;
}

/* The D1/D3 half of hc_event_divergence_explain, given the normalised text. */
static int explain_normalised(unsigned flags, const char *norm, size_t nn,
                              const hc_event_both_t *orig, char *scratch)
{
    hc_event_both_t nb;
    size_t unused;
    int why;

    /* Size was never the issue (both check it first and agree), so no limit here. The
     * normalised text may still carry a divergence that no rewrite removes. */
    if (!hc_event_run_both(norm, nn, (size_t)-1, &nb) &&
        explain_unnormalisable(
            hc_event_divergence_of((const unsigned char *)norm, nn, scratch, &unused),
            jansson_error(norm, nn), nb.fast_r) < 0) {
        return -1; /* the rest of the document disagrees: not explained */
    }
    why = (flags & HC_DIV_FLAG(HC_DIV_BIG_NUMBER)) ? HC_DIV_BIG_NUMBER : HC_DIV_MINUS_ZERO;
    if (orig->fast_r == nb.fast_r &&
        (orig->fast_r != HC_EVENT_OK || same_event_but_normalised_ids(&orig->fast, &nb.fast))) {
        return why;
    }
    /* what the fast parser rightly says about the token that normalisation replaced */
    if ((flags & HC_DIV_FLAG(HC_DIV_BIG_NUMBER)) &&
        (orig->fast_r == HC_EVENT_BAD_TS || orig->fast_r == HC_EVENT_POST_ID_TOO_LONG)) {
        return HC_DIV_BIG_NUMBER;
    }
    if ((flags & HC_DIV_FLAG(HC_DIV_MINUS_ZERO)) && orig->fast_r == HC_EVENT_BAD_POST_ID_TYPE) {
        return HC_DIV_MINUS_ZERO;
    }
    return -1;
}

int hc_event_divergence_explain(const char *buf, size_t n, const hc_event_both_t *orig)
{
    char *norm = malloc(n + 1);
    char *scratch = malloc(n + 1);
    size_t nn;
    unsigned flags;
    int why = -1;

    if (norm == NULL || scratch == NULL) {
        goto out;
    }
    flags = hc_event_divergence_of((const unsigned char *)buf, n, norm, &nn);
    why = explain_unnormalisable(flags, jansson_error(buf, n), orig->fast_r);
    if (why < 0 &&
        (flags & (HC_DIV_FLAG(HC_DIV_BIG_NUMBER) | HC_DIV_FLAG(HC_DIV_MINUS_ZERO))) != 0) {
        why = explain_normalised(flags, norm, nn, orig, scratch);
    }
out:
    free(scratch);
    free(norm);
    return why;
}

const char *hc_event_divergence_name(int kind)
{
    static const char *const names[HC_DIV_KINDS] = {
        [HC_DIV_BIG_NUMBER] = "big numbers",
        [HC_DIV_DEPTH] = "depth",
        [HC_DIV_MINUS_ZERO] = "-0",
        [HC_DIV_NUL_KEY] = "NUL key",
        [HC_DIV_NUL_TOKEN] = "NUL after token",
    };

    if (kind < 0 || kind >= HC_DIV_KINDS) {
        return "?";
    }
    return names[kind];
}
