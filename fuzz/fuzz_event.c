/* libFuzzer target for hc_event_parse (src/core/event.c); tools/fuzz builds and runs it.
 *
 * Every input is parsed
 *   - with the production limit (4096) and with a limit far above -max_len, so that inputs over
 *     4096 bytes run the scanner's long paths instead of stopping at too_large;
 *   - with the limit exactly at and one under its length, and twice, to pin down the size rule
 *     and determinism;
 * and then
 *   - checked for event.h's invariants on every HC_EVENT_OK: post_id of 1..256 bytes, NUL-
 *     terminated, without control characters (C0, DEL, C1), well-formed UTF-8; delta +1 or
 *     -1; user_id of at most 256 bytes, NUL-terminated, empty unless has_user_id;
 *   - compared with the jansson reference (tests/support/event_ref.c) through the same check and
 *     divergence classifier (D1..D5, tests/support/event_divergence.c) as the unit test's
 *     differential run: the verdict, the reason whenever jansson loads the text, and every field
 *     of a valid event must agree unless a documented divergence explains the difference.
 * Any failure prints the input and both verdicts and calls abort(), which libFuzzer reports as
 * a crash and saves as an artifact.
 *
 * HC_FUZZ_STATS=1 in the environment prints, at exit, how many inputs each verdict and each
 * forgiven divergence got. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "event_divergence.h"
#include "hotcount/event.h"

#define PROD_MAX_BYTES 4096
#define LARGE_MAX_BYTES ((size_t)1 << 30)

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static unsigned long verdicts[HC_EVENT_REASON_COUNT];
static unsigned long forgiven[HC_DIV_KINDS];

static void print_input(const uint8_t *data, size_t size)
{
    fprintf(stderr, "input (%zu bytes, hex):", size);
    for (size_t i = 0; i < size && i < 2048; i++) {
        fprintf(stderr, "%s%02x", i % 32 ? "" : "\n  ", data[i]);
    }
    fprintf(stderr, "%s\ninput (escaped): ", size > 2048 ? "\n  ..." : "");
    for (size_t i = 0; i < size && i < 2048; i++) {
        if (data[i] >= 0x20 && data[i] < 0x7f && data[i] != '\\') {
            fputc(data[i], stderr);
        } else {
            fprintf(stderr, "\\x%02x", data[i]);
        }
    }
    fputc('\n', stderr);
}

static void print_event(const char *who, hc_event_reason_t r, const hc_event_t *ev)
{
    fprintf(stderr, "%s: %s", who, hc_event_reason_str(r));
    if (r == HC_EVENT_OK) {
        fprintf(stderr, " post_id[%zu]=\"%.*s\" delta=%d ts=%s%lld user_id=%s[%zu]\"%.*s\"",
                ev->post_id_len, (int)(ev->post_id_len <= HC_POST_ID_MAX ? ev->post_id_len : 0),
                ev->post_id, ev->delta, ev->has_ts ? "" : "(none)", (long long)ev->ts,
                ev->has_user_id ? "" : "(none)", ev->user_id_len,
                (int)(ev->user_id_len <= HC_USER_ID_MAX ? ev->user_id_len : 0), ev->user_id);
    }
    fputc('\n', stderr);
}

static void fail(const char *what, const uint8_t *data, size_t size, const hc_event_both_t *b)
{
    fprintf(stderr, "\n==== fuzz_event: %s\n", what);
    print_input(data, size);
    if (b != NULL) {
        print_event("hc_event_parse    ", b->fast_r, &b->fast);
        print_event("hc_event_parse_ref", b->ref_r, &b->ref);
    }
    fflush(stderr);
    abort();
}

/* Well-formed UTF-8 (RFC 3629: no overlongs, no surrogates, nothing above U+10FFFF). Written
 * apart from event.c's scanner on purpose, by code point arithmetic rather than byte ranges. */
static bool is_utf8(const unsigned char *s, size_t n)
{
    size_t i = 0;

    while (i < n) {
        unsigned c = s[i];
        unsigned len;
        uint32_t cp;
        uint32_t min;
        if (c < 0x80) {
            i++;
            continue;
        }
        if ((c & 0xe0) == 0xc0) {
            len = 2;
            min = 0x80;
        } else if ((c & 0xf0) == 0xe0) {
            len = 3;
            min = 0x800;
        } else if ((c & 0xf8) == 0xf0) {
            len = 4;
            min = 0x10000;
        } else {
            return false;
        }
        cp = c & (0x7fu >> len); /* the lead byte's payload bits */
        if (n - i < len) {
            return false;
        }
        for (unsigned k = 1; k < len; k++) {
            if ((s[i + k] & 0xc0) != 0x80) {
                return false;
            }
            cp = cp << 6 | (s[i + k] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
            return false;
        }
        i += len;
    }
    return true;
}

static const char *event_invariant_broken(const hc_event_t *ev)
{
    if (ev->post_id_len < 1 || ev->post_id_len > HC_POST_ID_MAX) {
        return "post_id_len outside 1..256";
    }
    if (ev->post_id[ev->post_id_len] != '\0') {
        return "post_id not NUL-terminated";
    }
    for (size_t i = 0; i < ev->post_id_len; i++) {
        unsigned char c = (unsigned char)ev->post_id[i];
        if (c < 0x20 || c == 0x7f) {
            return "control byte in post_id";
        }
        if (c == 0xc2 && i + 1 < ev->post_id_len && (unsigned char)ev->post_id[i + 1] >= 0x80 &&
            (unsigned char)ev->post_id[i + 1] <= 0x9f) {
            return "C1 control (U+0080..U+009F) in post_id";
        }
    }
    if (!is_utf8((const unsigned char *)ev->post_id, ev->post_id_len)) {
        return "post_id is not well-formed UTF-8";
    }
    if (ev->delta != 1 && ev->delta != -1) {
        return "delta is not +1 or -1";
    }
    if (ev->user_id_len > HC_USER_ID_MAX) {
        return "user_id_len over 256";
    }
    if (ev->user_id[ev->user_id_len] != '\0') {
        return "user_id not NUL-terminated";
    }
    if (!ev->has_user_id && ev->user_id_len != 0) {
        return "user_id_len set without has_user_id";
    }
    return NULL;
}

static bool same_result(hc_event_reason_t ra, const hc_event_t *a, hc_event_reason_t rb,
                        const hc_event_t *b)
{
    if (ra != rb) {
        return false;
    }
    if (ra != HC_EVENT_OK) {
        return true;
    }
    return a->post_id_len == b->post_id_len &&
           memcmp(a->post_id, b->post_id, a->post_id_len + 1) == 0 && a->delta == b->delta &&
           a->has_ts == b->has_ts && (!a->has_ts || a->ts == b->ts) &&
           a->has_user_id == b->has_user_id && a->user_id_len == b->user_id_len &&
           memcmp(a->user_id, b->user_id, a->user_id_len + 1) == 0;
}

/* For the report: what kind of disagreement no documented divergence explains. */
static const char *kind_of_disagreement(const hc_event_both_t *b)
{
    if ((b->fast_r == HC_EVENT_OK) != (b->ref_r == HC_EVENT_OK)) {
        return "VERDICT disagreement with the jansson reference (valid on one side only)";
    }
    if (b->fast_r == HC_EVENT_OK) {
        return "FIELD disagreement with the jansson reference (both valid, events differ)";
    }
    return "REASON disagreement with the jansson reference (both invalid; jansson loaded the "
           "text, or the fast parser found no well-formedness problem)";
}

static void print_stats(void)
{
    fprintf(stderr, "fuzz_event verdicts:");
    for (int r = 0; r < HC_EVENT_REASON_COUNT; r++) {
        if (verdicts[r] != 0) {
            fprintf(stderr, " %s=%lu", hc_event_reason_str((hc_event_reason_t)r), verdicts[r]);
        }
    }
    fprintf(stderr, "\nfuzz_event forgiven divergences:");
    for (int k = 0; k < HC_DIV_KINDS; k++) {
        fprintf(stderr, " D%d (%s)=%lu", k + 1, hc_event_divergence_name(k), forgiven[k]);
    }
    fputc('\n', stderr);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    const char *stats = getenv("HC_FUZZ_STATS");
    (void)argc;
    (void)argv;
    if (stats != NULL && strcmp(stats, "1") == 0) {
        atexit(print_stats);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *buf = (const char *)data;
    hc_event_both_t b;
    hc_event_t prod;
    hc_event_t again;
    hc_event_reason_t prod_r;
    hc_event_reason_t r;
    const char *broken;
    int why;

    /* the production limit: too_large past it, otherwise the same answer as without a limit */
    prod_r = hc_event_parse(buf, size, PROD_MAX_BYTES, &prod);
    if ((unsigned)prod_r >= HC_EVENT_REASON_COUNT) {
        fail("reason outside the enum", data, size, NULL);
    }

    /* both parsers, no effective limit; hc_event_run_both fills b.fast from hc_event_parse */
    bool agreed = hc_event_run_both(buf, size, LARGE_MAX_BYTES, &b);
    if ((unsigned)b.fast_r >= HC_EVENT_REASON_COUNT) {
        fail("reason outside the enum", data, size, &b);
    }
    verdicts[b.fast_r]++;
    if (size > PROD_MAX_BYTES ? prod_r != HC_EVENT_TOO_LARGE
                              : !same_result(prod_r, &prod, b.fast_r, &b.fast)) {
        fail("max_bytes 4096 and a large limit disagree", data, size, &b);
    }
    if (size == 0 ? b.fast_r != HC_EVENT_EMPTY : b.fast_r == HC_EVENT_EMPTY) {
        fail("empty is not exactly the zero-length input", data, size, &b);
    }
    if (b.fast_r == HC_EVENT_TOO_LARGE) {
        fail("too_large under a limit far above the input", data, size, &b);
    }

    /* determinism, and the limit exactly at and one under the length */
    r = hc_event_parse(buf, size, size, &again);
    if (!same_result(r, &again, b.fast_r, &b.fast)) {
        fail("parsing again with max_bytes == length changes the answer", data, size, &b);
    }
    if (size > 0 && hc_event_parse(buf, size, size - 1, &again) != HC_EVENT_TOO_LARGE) {
        fail("max_bytes one under the length is not too_large", data, size, &b);
    }

    if (b.fast_r == HC_EVENT_OK) {
        broken = event_invariant_broken(&b.fast);
        if (broken != NULL) {
            fail(broken, data, size, &b);
        }
    }

    if (!agreed) {
        why = hc_event_divergence_explain(buf, size, &b);
        if (why < 0) {
            fail(kind_of_disagreement(&b), data, size, &b);
        }
        forgiven[why]++;
    }
    return 0;
}
