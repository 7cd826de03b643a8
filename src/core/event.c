/* One likes.raw message -> hc_event_t: a single-pass, allocation-free, strict RFC 8259 scanner.
 *
 * Why not jansson on this path: a generic parser builds a tree (one malloc per value and per
 * key) only for us to read five fields out of it and free it again; that caps a core well
 * below the rate a hot post produces. This scanner validates the whole text in one pass,
 * decodes only the fields it keeps, and touches no heap. tests/unit/test_event.c holds it to
 * a jansson-based reference (tests/support/event_ref.c) on a few hundred thousand generated
 * and mutated messages.
 *
 * Reason precedence, when a message has several problems (tested in test_event.c):
 *   1. too_large, then empty: decided from the length alone, before any byte is read.
 *   2. The first problem in document order that makes the bytes not a JSON text: not_json
 *      (syntax, raw control byte in a string, bad escape, truncation), bad_utf8 (invalid
 *      UTF-8 or a lone/mis-ordered surrogate escape), too_deep (opening container 65), or
 *      trailing_garbage (a non-whitespace byte after the top-level value). When the offending
 *      byte also starts an invalid UTF-8 sequence, bad_utf8 wins: the message is not text.
 *   3. not_object: a well-formed JSON text whose top-level value is not an object.
 *   4. duplicate_key: anywhere in the document, compared on decoded key bytes.
 *   5. Field rules, field by field in this fixed order (not document order, so that the verdict
 *      does not depend on member order): post_id (missing, bad type, empty, too long, control
 *      byte), user_id, op (bad type, unknown), ts, event_id.
 *
 * Choices where RFC 8259 leaves room: a UTF-8 byte order mark is not whitespace, so a message
 * starting with EF BB BF is not_json (RFC 8259 section 8.1 forbids emitting one; we do not
 * ignore it either, because a BOM-prefixed message is almost always a producer bug). Numbers
 * have no range limit in unknown fields (RFC 8259 section 6 allows any magnitude); only ts is
 * bounded, by int64. Duplicate keys are rejected in nested objects too, because a message that
 * one JSON reader interprets differently from another must not be counted.
 */
#include "hotcount/event.h"

#include <string.h>

#include "hotcount/siphash.h"
#include "hotcount/utf8.h"

/* Keys checked inline for duplicates, per parse (shared by all open objects). Events carry a
 * handful of keys, so 32 (1 KiB of records) covers them; an object with more keys gets the
 * rest checked once it closes (object_has_duplicate), in batches, never byte-by-byte
 * quadratically. */
#define KEY_SLOTS 32

/* The deferred check's batch: keys per hash table, and the table's slot count (a power of two,
 * twice the batch, for short probe chains). Each batch costs one scan of the rest of the
 * object, so an object of n keys costs about n / DEFER_BATCH scans of itself. */
#define DEFER_BATCH 512
#define DEFER_SLOTS 1024

/* The string scanner runs ~10 times per event; inlining it into each caller lets the cursor
 * stay in a register, which the compiler's own heuristics decline for a function this size. */
#if defined(__GNUC__)
#define HOT_INLINE inline __attribute__((always_inline))
#else
#define HOT_INLINE inline
#endif

/* str_class: what a byte means inside a JSON string. Anything non-zero leaves the fast loop. */
enum { SC_PLAIN = 0, SC_QUOTE, SC_ESCAPE, SC_CONTROL, SC_HIGH };

/* clang-format off */
#define X16(v) v, v, v, v, v, v, v, v, v, v, v, v, v, v, v, v
static const unsigned char str_class[256] = {
    X16(SC_CONTROL), X16(SC_CONTROL),                        /* 0x00-0x1f: raw control */
    0, 0, SC_QUOTE, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,   /* 0x20-0x2f */
    X16(SC_PLAIN), X16(SC_PLAIN),                            /* 0x30-0x4f */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, SC_ESCAPE, 0, 0, 0,  /* 0x50-0x5f */
    X16(SC_PLAIN), X16(SC_PLAIN),                            /* 0x60-0x7f: DEL is legal raw */
    X16(SC_HIGH), X16(SC_HIGH), X16(SC_HIGH), X16(SC_HIGH),  /* 0x80-0xff: UTF-8 */
    X16(SC_HIGH), X16(SC_HIGH), X16(SC_HIGH), X16(SC_HIGH),
};
/* clang-format on */
#undef X16

enum field {
    F_UNKNOWN = 0,
    F_POST_ID = 1u << 0,
    F_USER_ID = 1u << 1,
    F_OP = 1u << 2,
    F_TS = 1u << 3,
    F_EVENT_ID = 1u << 4,
};

/* The raw bytes of a string token, between its quotes. */
struct span {
    const unsigned char *start;
    size_t len;
    bool escaped; /* contains a backslash; else the raw bytes are the decoded bytes */
};

struct num {
    const unsigned char *start;
    const unsigned char *end;
    uint64_t mag; /* the integer part's value, exact up to 19 digits (wraps beyond) */
    bool integer; /* no fraction, no exponent */
    bool negative;
};

struct key_rec {
    const unsigned char *start;
    size_t raw_len;
    size_t dec_len; /* < raw_len exactly when the key has escapes: every escape shrinks */
    uint32_t hash;
};

struct scan {
    const unsigned char *p;
    const unsigned char *end;
    bool dup; /* reported only once the whole text is known to be well-formed */
    unsigned nrec;
    /* Per open object, indexed by nesting level (top-level object = 1). */
    unsigned rec_base[HC_EVENT_MAX_DEPTH + 1];
    const unsigned char *obj_start[HC_EVENT_MAX_DEPTH + 1];
    const unsigned char *unchecked[HC_EVENT_MAX_DEPTH + 1]; /* first key left to close time */
    bool overflowed[HC_EVENT_MAX_DEPTH + 1];
    struct key_rec rec[KEY_SLOTS];
};

static inline bool is_digit(unsigned c)
{
    return c - '0' < 10u;
}

static inline void skip_ws(struct scan *sc)
{
    const unsigned char *p = sc->p;

    if (p < sc->end && (unsigned)*p > 0x20u) {
        return; /* producers send compact JSON: usually nothing to skip */
    }
    while (p < sc->end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) {
        p++;
    }
    sc->p = p;
}

/* Length of the well-formed UTF-8 sequence at p, or 0 when it is invalid or truncated. */
static size_t utf8_seq_len(const unsigned char *p, const unsigned char *end)
{
    return hc_utf8_char_len(p, (size_t)(end - p));
}

/* The byte at p is not what the grammar allows here. If it also starts invalid UTF-8, the
 * message is not even text, which is the more useful reason for the dead-letter header. */
static hc_event_reason_t unexpected(const unsigned char *p, const unsigned char *end,
                                    hc_event_reason_t syntax)
{
    if (p < end && *p >= 0x80 && utf8_seq_len(p, end) == 0) {
        return HC_EVENT_BAD_UTF8;
    }
    return syntax;
}

static inline int hex_digit(unsigned c)
{
    if (c - '0' < 10u) {
        return (int)(c - '0');
    }
    c |= 0x20;
    if (c - 'a' < 6u) {
        return (int)(c - 'a' + 10);
    }
    return -1;
}

/* Four hex digits at p; on failure *bad is where the first non-hex byte (or the end) is. */
static long hex4(const unsigned char *p, const unsigned char *end, const unsigned char **bad)
{
    long v = 0;

    for (int i = 0; i < 4; i++) {
        int d = (p + i < end) ? hex_digit(p[i]) : -1;
        if (d < 0) {
            *bad = p + i;
            return -1;
        }
        v = v << 4 | d;
    }
    return v;
}

/* Validates the escape at *pp (a backslash) and moves past it. */
static hc_event_reason_t scan_escape(const unsigned char **pp, const unsigned char *end)
{
    const unsigned char *p = *pp + 1;
    const unsigned char *bad = p;
    long cp;
    long lo;

    if (p == end) {
        return HC_EVENT_NOT_JSON;
    }
    switch (*p) {
    case '"':
    case '\\':
    case '/':
    case 'b':
    case 'f':
    case 'n':
    case 'r':
    case 't':
        *pp = p + 1;
        return HC_EVENT_OK;
    case 'u':
        break;
    default:
        return unexpected(p, end, HC_EVENT_NOT_JSON);
    }
    cp = hex4(p + 1, end, &bad);
    if (cp < 0) {
        return unexpected(bad, end, HC_EVENT_NOT_JSON);
    }
    p += 5;
    if (cp >= 0xdc00 && cp <= 0xdfff) {
        return HC_EVENT_BAD_UTF8; /* low surrogate first */
    }
    if (cp >= 0xd800 && cp <= 0xdbff) {
        /* A high surrogate is only text together with a following \u low surrogate. A message
         * that ends here is truncated (not_json); anything else makes the high one lone. */
        if (p == end || (p[0] == '\\' && p + 1 == end)) {
            return HC_EVENT_NOT_JSON;
        }
        if (p[0] != '\\' || p[1] != 'u') {
            return HC_EVENT_BAD_UTF8;
        }
        lo = hex4(p + 2, end, &bad);
        if (lo < 0) {
            return unexpected(bad, end, HC_EVENT_NOT_JSON);
        }
        if (lo < 0xdc00 || lo > 0xdfff) {
            return HC_EVENT_BAD_UTF8;
        }
        p += 6;
    }
    *pp = p;
    return HC_EVENT_OK;
}

#if defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define HAVE_SWAR 1
/* High bit set in every byte of w that is '"', '\\', < 0x20 or >= 0x80. The classic
 * "has zero byte" trick may also flag bytes above a true hit (borrows travel upwards), never
 * below one, so the lowest flagged byte is always the first special byte. */
static inline uint64_t special_bytes(uint64_t w)
{
    const uint64_t ones = 0x0101010101010101u;
    const uint64_t q = w ^ (ones * '"');
    const uint64_t b = w ^ (ones * '\\');

    return (w | ((q - ones) & ~q) | ((b - ones) & ~b) | ((w - ones * 0x20) & ~w)) &
           0x8080808080808080u;
}

/* All eight bytes of w are ASCII digits. A carry out of the +6 only starts at a byte that is
 * itself no digit, so it cannot turn a failing word into a passing one. */
static inline bool eight_digits(uint64_t w)
{
    return ((w & 0xf0f0f0f0f0f0f0f0u) | (((w + 0x0606060606060606u) & 0xf0f0f0f0f0f0f0f0u) >> 4)) ==
           0x3333333333333333u;
}

/* The value of eight ASCII digits, first digit in the lowest byte: pairs, then quads, then
 * the whole, each step a multiply that combines neighbouring lanes. */
static inline uint64_t eight_digits_value(uint64_t w)
{
    w -= 0x3030303030303030u;
    w = w * 10 + (w >> 8);
    return (((w & 0x000000ff000000ffu) * (100 + (1000000ull << 32))) +
            (((w >> 16) & 0x000000ff000000ffu) * (1 + (10000ull << 32)))) >>
           32;
}
#endif

/* Scans the string token at sc->p (the opening quote): validates it and records its raw span.
 * Plain ASCII runs go 8 bytes a step; only quote, backslash, control and non-ASCII bytes
 * leave the fast loop. */
static HOT_INLINE hc_event_reason_t scan_string(struct scan *sc, struct span *sp)
{
    const unsigned char *p = sc->p + 1;
    const unsigned char *end = sc->end;
    hc_event_reason_t r;

    sp->start = p;
    sp->escaped = false;
    for (;;) {
#ifdef HAVE_SWAR
        while (end - p >= 8) {
            uint64_t w;
            uint64_t m;
            memcpy(&w, p, 8);
            m = special_bytes(w);
            if (m != 0) {
                p += __builtin_ctzll(m) >> 3;
                goto special;
            }
            p += 8;
        }
#endif
        while (p < end && str_class[*p] == SC_PLAIN) {
            p++;
        }
        if (p == end) {
            return HC_EVENT_NOT_JSON; /* unterminated */
        }
#ifdef HAVE_SWAR
    special:
#endif
        if (*p == '"') { /* by far the most common way out; skip the table load */
            sp->len = (size_t)(p - sp->start);
            sc->p = p + 1;
            return HC_EVENT_OK;
        }
        switch (str_class[*p]) {
        case SC_ESCAPE:
            r = scan_escape(&p, end);
            if (r != HC_EVENT_OK) {
                return r;
            }
            sp->escaped = true;
            break;
        case SC_CONTROL:
            return HC_EVENT_NOT_JSON;
        case SC_HIGH: {
            size_t n = utf8_seq_len(p, end);
            if (n == 0) {
                return HC_EVENT_BAD_UTF8;
            }
            p += n;
            break;
        }
        default:
            p++; /* SC_PLAIN after the SWAR jump cannot happen; keep the loop total anyway */
            break;
        }
    }
}

/* Number grammar: -? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?  The caller has seen
 * '-' or a digit at sc->p. What follows the number is the container's business, so "01" fails
 * there (as "0" followed by an unexpected "1"). */
static HOT_INLINE hc_event_reason_t scan_number(struct scan *sc, struct num *nm)
{
    const unsigned char *p = sc->p;
    const unsigned char *end = sc->end;

    nm->start = p;
    nm->negative = false;
    nm->integer = true;
    if (*p == '-') {
        nm->negative = true;
        p++;
    }
    if (p == end) {
        return HC_EVENT_NOT_JSON;
    }
    if (*p == '0') {
        p++;
        nm->mag = 0;
    } else if (is_digit(*p)) {
        /* accumulate while scanning: ts needs the value, and a second pass costs as much */
        uint64_t mag = 0;
#ifdef HAVE_SWAR
        while (end - p >= 8) {
            uint64_t w;
            memcpy(&w, p, 8);
            if (!eight_digits(w)) {
                break;
            }
            mag = mag * 100000000u + eight_digits_value(w);
            p += 8;
        }
#endif
        while (p < end && is_digit(*p)) {
            mag = mag * 10 + (uint64_t)(*p - '0');
            p++;
        }
        nm->mag = mag;
    } else {
        return unexpected(p, end, HC_EVENT_NOT_JSON);
    }
    if (p < end && *p == '.') {
        nm->integer = false;
        p++;
        if (p == end || !is_digit(*p)) {
            return unexpected(p, end, HC_EVENT_NOT_JSON);
        }
        do {
            p++;
        } while (p < end && is_digit(*p));
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        nm->integer = false;
        p++;
        if (p < end && (*p == '+' || *p == '-')) {
            p++;
        }
        if (p == end || !is_digit(*p)) {
            return unexpected(p, end, HC_EVENT_NOT_JSON);
        }
        do {
            p++;
        } while (p < end && is_digit(*p));
    }
    nm->end = p;
    sc->p = p;
    return HC_EVENT_OK;
}

static hc_event_reason_t scan_literal(struct scan *sc)
{
    const char *lit = *sc->p == 't' ? "true" : *sc->p == 'f' ? "false" : "null";
    size_t n = strlen(lit);

    for (size_t i = 1; i < n; i++) {
        if (sc->p + i == sc->end || sc->p[i] != (unsigned char)lit[i]) {
            return unexpected(sc->p + i, sc->end, HC_EVENT_NOT_JSON);
        }
    }
    sc->p += n;
    return HC_EVENT_OK;
}

/* Decoded bytes of a validated string token, one at a time. Only escaped strings (rare) come
 * here; plain ones are used in place. */
struct dec {
    const unsigned char *p;
    const unsigned char *end;
    unsigned char pend[4];
    unsigned npend;
    unsigned ipend;
};

static void dec_init(struct dec *d, const unsigned char *start, size_t len)
{
    d->p = start;
    d->end = start + len;
    d->npend = 0;
    d->ipend = 0;
}

static int dec_next(struct dec *d)
{
    unsigned c;
    long cp;
    const unsigned char *unused = NULL;

    if (d->ipend < d->npend) {
        return d->pend[d->ipend++];
    }
    if (d->p == d->end) {
        return -1;
    }
    c = *d->p++;
    if (c != '\\') {
        return (int)c;
    }
    c = *d->p++;
    switch (c) {
    case 'b':
        return '\b';
    case 'f':
        return '\f';
    case 'n':
        return '\n';
    case 'r':
        return '\r';
    case 't':
        return '\t';
    case 'u':
        break;
    default:
        return (int)c; /* '"', '\\', '/' */
    }
    cp = hex4(d->p, d->end, &unused);
    d->p += 4;
    if (cp >= 0xd800 && cp <= 0xdbff) {
        long lo = hex4(d->p + 2, d->end, &unused);
        d->p += 6;
        cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
    }
    if (cp < 0x80) {
        return (int)cp;
    }
    if (cp < 0x800) {
        d->pend[0] = (unsigned char)(0xc0 | cp >> 6);
        d->pend[1] = (unsigned char)(0x80 | (cp & 0x3f));
        d->npend = 2;
    } else if (cp < 0x10000) {
        d->pend[0] = (unsigned char)(0xe0 | cp >> 12);
        d->pend[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
        d->pend[2] = (unsigned char)(0x80 | (cp & 0x3f));
        d->npend = 3;
    } else {
        d->pend[0] = (unsigned char)(0xf0 | cp >> 18);
        d->pend[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3f));
        d->pend[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
        d->pend[3] = (unsigned char)(0x80 | (cp & 0x3f));
        d->npend = 4;
    }
    d->ipend = 1;
    return d->pend[0];
}

/* memcpy for the short ids of typical events: fixed-size moves the compiler emits inline,
 * overlapping where n is not a power of two, instead of a library call per field. */
static HOT_INLINE void copy_bytes(unsigned char *out, const unsigned char *in, size_t n)
{
    if (n >= 8 && n <= 16) {
        memcpy(out, in, 8);
        memcpy(out + n - 8, in + n - 8, 8);
    } else if (n >= 4 && n < 8) {
        memcpy(out, in, 4);
        memcpy(out + n - 4, in + n - 4, 4);
    } else if (n > 0 && n < 4) {
        out[0] = in[0];
        out[n / 2] = in[n / 2];
        out[n - 1] = in[n - 1];
    } else if (n > 16) {
        memcpy(out, in, n);
    }
}

/* Writes up to cap decoded bytes to out; returns the full decoded length. */
static HOT_INLINE size_t decode_into(const struct span *sp, unsigned char *out, size_t cap)
{
    struct dec d;
    size_t n = 0;
    int c;

    if (!sp->escaped) {
        copy_bytes(out, sp->start, sp->len < cap ? sp->len : cap);
        return sp->len;
    }
    dec_init(&d, sp->start, sp->len);
    while ((c = dec_next(&d)) >= 0) {
        if (n < cap) {
            out[n] = (unsigned char)c;
        }
        n++;
    }
    return n;
}

static bool keys_equal(const unsigned char *a, size_t alen, bool aesc, const unsigned char *b,
                       size_t blen, bool besc)
{
    struct dec da;
    struct dec db;
    int ca;

    if (!aesc && !besc) {
        return alen == blen && memcmp(a, b, alen) == 0;
    }
    dec_init(&da, a, alen);
    dec_init(&db, b, blen);
    do {
        ca = dec_next(&da);
        if (ca != dec_next(&db)) {
            return false;
        }
    } while (ca >= 0);
    return true;
}

/* The keys of one object are untrusted input, and an object with more than KEY_SLOTS keys goes
 * through the hash table of object_has_duplicate: with an unkeyed hash (this was FNV-1a 32)
 * a producer could send ids whose digests share one probe run, and every key of the event
 * would then compare against every other (DEFER_BATCH times the work). SipHash-1-3 under the
 * process key (hotcount/siphash.h) over the decoded bytes, so "a" and "\u0061" still meet. */
static uint32_t key_digest(const struct span *key, size_t *dec_len)
{
    hc_hash_key_t hkey = hc_hash_process_key();
    uint64_t h;

    if (!key->escaped) {
        *dec_len = key->len;
        h = hc_siphash13(&hkey, key->start, key->len);
    } else {
        hc_siphash13_stream_t st;
        struct dec d;
        int c;
        size_t n = 0;
        hc_siphash13_init(&st, &hkey);
        dec_init(&d, key->start, key->len);
        while ((c = dec_next(&d)) >= 0) {
            hc_siphash13_byte(&st, (unsigned char)c);
            n++;
        }
        *dec_len = n;
        h = hc_siphash13_final(&st);
    }
    return (uint32_t)(h ^ (h >> 32));
}

/* Moves past a validated string body starting after its opening quote; returns the closing
 * quote. Only used on text this scan has already accepted. */
static const unsigned char *skip_string_body(const unsigned char *p, bool *escaped)
{
    while (*p != '"') {
        if (*p == '\\') {
            *escaped = true;
            p += 2;
        } else {
            p++;
        }
    }
    return p;
}

static const unsigned char *skip_ws_raw(const unsigned char *p)
{
    while (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t') {
        p++;
    }
    return p;
}

/* Moves past one validated value. */
static const unsigned char *skip_value_raw(const unsigned char *p)
{
    bool esc;

    if (*p == '"') {
        return skip_string_body(p + 1, &esc) + 1;
    }
    if (*p == '{' || *p == '[') {
        unsigned depth = 0;
        for (;;) {
            if (*p == '"') {
                p = skip_string_body(p + 1, &esc) + 1;
                continue;
            }
            if (*p == '{' || *p == '[') {
                depth++;
            } else if (*p == '}' || *p == ']') {
                if (--depth == 0) {
                    return p + 1;
                }
            }
            p++;
        }
    }
    /* Number or literal: in validated text a delimiter always follows inside the object, so
     * this cannot run past it. */
    while (*p != ',' && *p != '}' && *p != ']' && *p != ' ' && *p != '\n' && *p != '\r' &&
           *p != '\t') {
        p++;
    }
    return p;
}

static struct key_rec key_rec_of(const struct span *key)
{
    struct key_rec r;

    r.start = key->start;
    r.raw_len = key->len;
    r.hash = key_digest(key, &r.dec_len);
    return r;
}

static bool same_key(const struct key_rec *a, const struct key_rec *b)
{
    return a->hash == b->hash && a->dec_len == b->dec_len &&
           keys_equal(a->start, a->raw_len, a->dec_len < a->raw_len, b->start, b->raw_len,
                      b->dec_len < b->raw_len);
}

/* Moves *pp (inside a validated object) to the next member and returns its key; false at the
 * closing brace. */
static bool next_key(const unsigned char **pp, struct span *key)
{
    const unsigned char *p = skip_ws_raw(*pp);

    if (*p == ',') {
        p = skip_ws_raw(p + 1);
    }
    if (*p == '}') {
        return false;
    }
    key->start = p + 1;
    key->escaped = false;
    p = skip_string_body(p + 1, &key->escaped);
    key->len = (size_t)(p - key->start);
    p = skip_ws_raw(p + 1) + 1; /* past ':' */
    *pp = skip_value_raw(skip_ws_raw(p));
    return true;
}

/* A set of up to DEFER_BATCH distinct keys. */
struct key_table {
    struct key_rec keys[DEFER_BATCH];
    uint16_t slot[DEFER_SLOTS]; /* 0 empty, else index + 1 into keys */
    unsigned n;
};

/* True if k is in t; otherwise adds it when add is set. */
static bool table_has(struct key_table *t, const struct key_rec *k, bool add)
{
    /* the top bits of a keyed hash: any ten bits of SipHash are as good as any other */
    uint32_t i = k->hash >> (32 - 10);

    for (;; i = (i + 1) & (DEFER_SLOTS - 1)) {
        if (t->slot[i] == 0) {
            if (add) {
                t->keys[t->n] = *k;
                t->slot[i] = (uint16_t)(++t->n);
            }
            return false;
        }
        if (same_key(&t->keys[t->slot[i] - 1], k)) {
            return true;
        }
    }
}

/* The deferred duplicate check for an object whose keys outran KEY_SLOTS, run once it has
 * closed (so its text is validated). Its first keys were recorded and checked inline; for the
 * rest this is the classic time/space trade-off without allocation: load a batch of keys into
 * a table, check every later key against it, move on to the next batch. Every pair of keys
 * meets once: inside a batch when it is loaded, or as (batch, later key). */
static bool object_has_duplicate(const struct scan *sc, unsigned level)
{
    struct key_table t;
    struct span key;
    struct key_rec k;
    const unsigned char *start = sc->unchecked[level];
    const unsigned char *q;

    /* The recorded keys are distinct already: they are the first table. (Known top-level
     * fields are not among them; their repeats were caught by their seen bits, and they
     * cannot equal an unknown key.) */
    memset(t.slot, 0, sizeof(t.slot));
    t.n = 0;
    for (unsigned i = sc->rec_base[level]; i < sc->nrec; i++) {
        (void)table_has(&t, &sc->rec[i], true);
    }
    for (;;) {
        /* the table holds distinct keys that all come before start */
        for (q = start; next_key(&q, &key);) {
            k = key_rec_of(&key);
            if (table_has(&t, &k, false)) {
                return true;
            }
        }
        memset(t.slot, 0, sizeof(t.slot));
        t.n = 0;
        for (q = start; t.n < DEFER_BATCH && next_key(&q, &key);) {
            k = key_rec_of(&key);
            if (table_has(&t, &k, true)) {
                return true;
            }
        }
        if (t.n == 0) {
            return false;
        }
        start = q;
    }
}

static void open_object(struct scan *sc, unsigned level)
{
    sc->rec_base[level] = sc->nrec;
    sc->obj_start[level] = sc->p;
    sc->overflowed[level] = false;
}

/* At the object's closing brace. */
static void close_object(struct scan *sc, unsigned level)
{
    if (sc->overflowed[level] && !sc->dup) {
        sc->dup = object_has_duplicate(sc, level);
    }
    sc->nrec = sc->rec_base[level];
}

/* Records key as a member of the object open at level; sets sc->dup on a repeat. */
static void check_key(struct scan *sc, unsigned level, const struct span *key)
{
    struct key_rec k;

    if (sc->dup || sc->overflowed[level]) {
        return; /* one duplicate is enough; an overflowed object is checked when it closes */
    }
    k = key_rec_of(key);
    for (unsigned i = sc->rec_base[level]; i < sc->nrec; i++) {
        if (same_key(&sc->rec[i], &k)) {
            sc->dup = true;
            return;
        }
    }
    if (sc->nrec == KEY_SLOTS) {
        sc->overflowed[level] = true; /* this key and later ones: object_has_duplicate */
        sc->unchecked[level] = key->start - 1;
        return;
    }
    sc->rec[sc->nrec++] = k;
}

static inline uint64_t level_bit(unsigned level)
{
    return (uint64_t)1 << (level - 1);
}

/* Validates one value of any kind at sc->p (whitespace already skipped). level is the number
 * of containers open around it. Iterative, with a bit per level saying object or array, so
 * the C stack does not grow with the message's nesting. */
static hc_event_reason_t scan_value(struct scan *sc, unsigned level)
{
    const unsigned base = level;
    uint64_t objects = 0;
    hc_event_reason_t r;
    struct span sp;
    struct num nm;
    unsigned c;

value:
    if (sc->p == sc->end) {
        return HC_EVENT_NOT_JSON;
    }
    c = *sc->p;
    switch (c) {
    case '"':
        r = scan_string(sc, &sp);
        if (r != HC_EVENT_OK) {
            return r;
        }
        break;
    case '{':
    case '[':
        if (level == HC_EVENT_MAX_DEPTH) {
            return HC_EVENT_TOO_DEEP;
        }
        level++;
        if (c == '{') {
            objects |= level_bit(level);
            open_object(sc, level);
            sc->p++;
            skip_ws(sc);
            if (sc->p < sc->end && *sc->p == '}') {
                sc->p++;
                level--;
                break;
            }
            goto member;
        }
        objects &= ~level_bit(level);
        sc->p++;
        skip_ws(sc);
        if (sc->p < sc->end && *sc->p == ']') {
            sc->p++;
            level--;
            break;
        }
        goto value;
    case 't':
    case 'f':
    case 'n':
        r = scan_literal(sc);
        if (r != HC_EVENT_OK) {
            return r;
        }
        break;
    default:
        if (c != '-' && !is_digit(c)) {
            return unexpected(sc->p, sc->end, HC_EVENT_NOT_JSON);
        }
        r = scan_number(sc, &nm);
        if (r != HC_EVENT_OK) {
            return r;
        }
        break;
    }

next: /* a value has just ended */
    if (level == base) {
        return HC_EVENT_OK;
    }
    skip_ws(sc);
    if (sc->p == sc->end) {
        return HC_EVENT_NOT_JSON;
    }
    c = *sc->p;
    if (c == ',') {
        sc->p++;
        skip_ws(sc);
        if (objects & level_bit(level)) {
            goto member;
        }
        goto value;
    }
    if (c == ((objects & level_bit(level)) ? '}' : ']')) {
        if (objects & level_bit(level)) {
            close_object(sc, level);
        }
        sc->p++;
        level--;
        goto next;
    }
    return unexpected(sc->p, sc->end, HC_EVENT_NOT_JSON);

member:
    if (sc->p == sc->end) {
        return HC_EVENT_NOT_JSON;
    }
    if (*sc->p != '"') {
        return unexpected(sc->p, sc->end, HC_EVENT_NOT_JSON);
    }
    r = scan_string(sc, &sp);
    if (r != HC_EVENT_OK) {
        return r;
    }
    check_key(sc, level, &sp);
    skip_ws(sc);
    if (sc->p == sc->end) {
        return HC_EVENT_NOT_JSON;
    }
    if (*sc->p != ':') {
        return unexpected(sc->p, sc->end, HC_EVENT_NOT_JSON);
    }
    sc->p++;
    skip_ws(sc);
    goto value;
}

static enum field field_of(const struct span *key)
{
    unsigned char tmp[9];
    const unsigned char *k = key->start;
    size_t n = key->len;

    if (key->escaped) {
        n = decode_into(key, tmp, sizeof(tmp));
        k = tmp;
    }
    switch (n) {
    case 2:
        if (k[0] == 'o' && k[1] == 'p') {
            return F_OP;
        }
        if (k[0] == 't' && k[1] == 's') {
            return F_TS;
        }
        break;
    case 7:
        if (memcmp(k, "post_id", 7) == 0) {
            return F_POST_ID;
        }
        if (memcmp(k, "user_id", 7) == 0) {
            return F_USER_ID;
        }
        break;
    case 8:
        if (memcmp(k, "event_id", 8) == 0) {
            return F_EVENT_ID;
        }
        break;
    default:
        break;
    }
    return F_UNKNOWN;
}

/* A C1 control (U+0080..U+009F) in valid UTF-8: the two bytes C2 80..C2 9F. 0xC2 is never a
 * continuation byte, so a match is always a whole character. memchr keeps ASCII ids fast. */
static bool has_c1_control(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    const unsigned char *end = p + n;
    while ((p = memchr(p, 0xc2, (size_t)(end - p))) != NULL) {
        if (p + 1 < end && p[1] >= 0x80 && p[1] <= 0x9f) {
            return true;
        }
        p++;
    }
    return false;
}

static bool has_control_byte(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7f) {
            return true;
        }
    }
    return false;
}

/* A field value that is neither string nor number: validate it, report the type. */
static hc_event_reason_t other_value(struct scan *sc, hc_event_reason_t *field_r,
                                     hc_event_reason_t type_r)
{
    *field_r = type_r;
    return scan_value(sc, 1);
}

static hc_event_reason_t parse_post_id(struct scan *sc, hc_event_t *ev, hc_event_reason_t *fr)
{
    hc_event_reason_t r;

    if (*sc->p == '"') {
        struct span sp;
        size_t n;
        r = scan_string(sc, &sp);
        if (r != HC_EVENT_OK) {
            return r;
        }
        n = decode_into(&sp, (unsigned char *)ev->post_id, HC_POST_ID_MAX);
        if (n == 0) {
            *fr = HC_EVENT_EMPTY_POST_ID;
        } else if (n > HC_POST_ID_MAX) {
            *fr = HC_EVENT_POST_ID_TOO_LONG;
        } else if ((sp.escaped ? has_control_byte(ev->post_id, n)
                               : memchr(ev->post_id, 0x7f, n) != NULL) ||
                   has_c1_control(ev->post_id, n)) {
            /* raw bytes < 0x20 were already syntax errors, so only DEL can be left; C1
             * controls arrive raw (C2 80..9F) or escaped (\u0080..\u009f), decoded alike */
            *fr = HC_EVENT_POST_ID_CONTROL;
        } else {
            *fr = HC_EVENT_OK;
            ev->post_id[n] = '\0';
            ev->post_id_len = n;
        }
        return HC_EVENT_OK;
    }
    if (*sc->p == '-' || is_digit(*sc->p)) {
        struct num nm;
        size_t n;
        r = scan_number(sc, &nm);
        if (r != HC_EVENT_OK) {
            return r;
        }
        n = (size_t)(nm.end - nm.start);
        if (!nm.integer || nm.negative) {
            *fr = HC_EVENT_BAD_POST_ID_TYPE;
        } else if (n > HC_POST_ID_MAX) {
            *fr = HC_EVENT_POST_ID_TOO_LONG;
        } else {
            /* JSON forbids leading zeros, so the literal already is the canonical decimal
             * string: 42 and "42" name the same post. */
            *fr = HC_EVENT_OK;
            copy_bytes((unsigned char *)ev->post_id, nm.start, n);
            ev->post_id[n] = '\0';
            ev->post_id_len = n;
        }
        return HC_EVENT_OK;
    }
    return other_value(sc, fr, HC_EVENT_BAD_POST_ID_TYPE);
}

static hc_event_reason_t parse_user_id(struct scan *sc, hc_event_t *ev, hc_event_reason_t *fr)
{
    hc_event_reason_t r;
    size_t n;

    if (*sc->p == '"') {
        struct span sp;
        r = scan_string(sc, &sp);
        if (r != HC_EVENT_OK) {
            return r;
        }
        n = decode_into(&sp, (unsigned char *)ev->user_id, HC_USER_ID_MAX);
    } else if (*sc->p == '-' || is_digit(*sc->p)) {
        /* scan_number sets it; GCC cannot see that once hc_utf8_char_len inlines */
        struct num nm = {0};
        r = scan_number(sc, &nm);
        if (r != HC_EVENT_OK) {
            return r;
        }
        if (!nm.integer) {
            *fr = HC_EVENT_BAD_USER_ID_TYPE;
            return HC_EVENT_OK;
        }
        n = (size_t)(nm.end - nm.start);
        copy_bytes((unsigned char *)ev->user_id, nm.start, n < HC_USER_ID_MAX ? n : HC_USER_ID_MAX);
    } else {
        return other_value(sc, fr, HC_EVENT_BAD_USER_ID_TYPE);
    }
    if (n > HC_USER_ID_MAX) {
        n = HC_USER_ID_MAX;
    }
    *fr = HC_EVENT_OK;
    ev->user_id[n] = '\0';
    ev->user_id_len = n;
    ev->has_user_id = true;
    return HC_EVENT_OK;
}

static hc_event_reason_t parse_op(struct scan *sc, hc_event_t *ev, hc_event_reason_t *fr)
{
    unsigned char tmp[7];
    const unsigned char *op;
    struct span sp;
    hc_event_reason_t r;
    size_t n;

    if (*sc->p != '"') {
        return other_value(sc, fr, HC_EVENT_BAD_OP_TYPE);
    }
    r = scan_string(sc, &sp);
    if (r != HC_EVENT_OK) {
        return r;
    }
    op = sp.start;
    n = sp.len;
    if (sp.escaped) {
        n = decode_into(&sp, tmp, sizeof(tmp));
        op = tmp;
    }
    if (n == 4 && memcmp(op, "like", 4) == 0) {
        ev->delta = 1;
        *fr = HC_EVENT_OK;
    } else if (n == 6 && memcmp(op, "unlike", 6) == 0) {
        ev->delta = -1;
        *fr = HC_EVENT_OK;
    } else {
        *fr = HC_EVENT_UNKNOWN_OP;
    }
    return HC_EVENT_OK;
}

/* An integer literal as int64, or false when it does not fit. The scan already has the value:
 * exact up to 19 digits (below 2^64), and JSON has no leading zeros, so 20 digits or more is
 * at least 10^19 and out of range. */
static bool int64_of(const struct num *nm, int64_t *out)
{
    const size_t ndigits = (size_t)(nm->end - nm->start) - nm->negative;
    const uint64_t limit = nm->negative ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;

    if (ndigits > 19 || nm->mag > limit) {
        return false;
    }
    if (!nm->negative) {
        *out = (int64_t)nm->mag;
    } else if (nm->mag == (uint64_t)INT64_MAX + 1) {
        *out = INT64_MIN;
    } else {
        *out = -(int64_t)nm->mag;
    }
    return true;
}

static hc_event_reason_t parse_ts(struct scan *sc, hc_event_t *ev, hc_event_reason_t *fr)
{
    /* scan_number sets it; GCC cannot see that once hc_utf8_char_len inlines */
    struct num nm = {0};
    hc_event_reason_t r;

    if (*sc->p != '-' && !is_digit(*sc->p)) {
        return other_value(sc, fr, HC_EVENT_BAD_TS);
    }
    r = scan_number(sc, &nm);
    if (r != HC_EVENT_OK) {
        return r;
    }
    if (nm.integer && int64_of(&nm, &ev->ts)) {
        ev->has_ts = true;
        *fr = HC_EVENT_OK;
    } else {
        *fr = HC_EVENT_BAD_TS;
    }
    return HC_EVENT_OK;
}

static hc_event_reason_t parse_event_id(struct scan *sc, hc_event_reason_t *fr)
{
    struct span sp;

    if (*sc->p != '"') {
        return other_value(sc, fr, HC_EVENT_BAD_EVENT_ID);
    }
    *fr = HC_EVENT_OK;
    return scan_string(sc, &sp);
}

/* The top-level object, sc->p at its '{'. */
static hc_event_reason_t parse_event(struct scan *sc, hc_event_t *ev)
{
    hc_event_reason_t post_r = HC_EVENT_MISSING_POST_ID;
    hc_event_reason_t user_r = HC_EVENT_OK;
    hc_event_reason_t op_r = HC_EVENT_OK;
    hc_event_reason_t ts_r = HC_EVENT_OK;
    hc_event_reason_t eid_r = HC_EVENT_OK;
    hc_event_reason_t r;
    unsigned seen = 0;

    open_object(sc, 1);
    sc->p++;
    skip_ws(sc);
    if (sc->p < sc->end && *sc->p == '}') {
        sc->p++;
        goto done;
    }
    for (;;) {
        struct span key;
        enum field f;

        if (sc->p == sc->end) {
            return HC_EVENT_NOT_JSON;
        }
        if (*sc->p != '"') {
            return unexpected(sc->p, sc->end, HC_EVENT_NOT_JSON);
        }
        r = scan_string(sc, &key);
        if (r != HC_EVENT_OK) {
            return r;
        }
        f = field_of(&key);
        if (f == F_UNKNOWN) {
            check_key(sc, 1, &key);
        } else if (seen & f) {
            sc->dup = true;
        } else {
            seen |= f;
        }
        if (sc->p == sc->end || *sc->p != ':') { /* compact JSON has it right here */
            skip_ws(sc);
            if (sc->p == sc->end) {
                return HC_EVENT_NOT_JSON;
            }
            if (*sc->p != ':') {
                return unexpected(sc->p, sc->end, HC_EVENT_NOT_JSON);
            }
        }
        sc->p++;
        skip_ws(sc);
        if (sc->p == sc->end) {
            return HC_EVENT_NOT_JSON;
        }
        switch (f) {
        case F_POST_ID:
            r = parse_post_id(sc, ev, &post_r);
            break;
        case F_USER_ID:
            r = parse_user_id(sc, ev, &user_r);
            break;
        case F_OP:
            r = parse_op(sc, ev, &op_r);
            break;
        case F_TS:
            r = parse_ts(sc, ev, &ts_r);
            break;
        case F_EVENT_ID:
            r = parse_event_id(sc, &eid_r);
            break;
        default:
            r = scan_value(sc, 1);
            break;
        }
        if (r != HC_EVENT_OK) {
            return r;
        }
        skip_ws(sc);
        if (sc->p == sc->end) {
            return HC_EVENT_NOT_JSON;
        }
        if (*sc->p == ',') {
            sc->p++;
            if (sc->p < sc->end && *sc->p == '"') {
                continue; /* the next key, compact */
            }
            skip_ws(sc);
            continue;
        }
        if (*sc->p == '}') {
            close_object(sc, 1);
            sc->p++;
            break;
        }
        return unexpected(sc->p, sc->end, HC_EVENT_NOT_JSON);
    }

done:
    skip_ws(sc);
    if (sc->p != sc->end) {
        return unexpected(sc->p, sc->end, HC_EVENT_TRAILING_GARBAGE);
    }
    if (sc->dup) {
        return HC_EVENT_DUPLICATE_KEY;
    }
    if (post_r != HC_EVENT_OK) {
        return post_r;
    }
    if (user_r != HC_EVENT_OK) {
        return user_r;
    }
    if (op_r != HC_EVENT_OK) {
        return op_r;
    }
    if (ts_r != HC_EVENT_OK) {
        return ts_r;
    }
    return eid_r;
}

hc_event_reason_t hc_event_parse(const char *buf, size_t len, size_t max_bytes, hc_event_t *ev)
{
    struct scan sc;
    hc_event_reason_t r;

    if (buf == NULL) {
        len = 0;
    }
    if (len > max_bytes) {
        return HC_EVENT_TOO_LARGE;
    }
    if (len == 0) {
        return HC_EVENT_EMPTY;
    }
    sc.p = (const unsigned char *)buf;
    sc.end = sc.p + len;
    sc.dup = false;
    sc.nrec = 0;

    ev->post_id[0] = '\0';
    ev->post_id_len = 0;
    ev->delta = 1;
    ev->has_ts = false;
    ev->ts = 0;
    ev->has_user_id = false;
    ev->user_id[0] = '\0';
    ev->user_id_len = 0;

    skip_ws(&sc);
    if (sc.p == sc.end) {
        return HC_EVENT_NOT_JSON;
    }
    if (*sc.p == '{') {
        return parse_event(&sc, ev);
    }
    r = scan_value(&sc, 0);
    if (r != HC_EVENT_OK) {
        return r;
    }
    skip_ws(&sc);
    if (sc.p != sc.end) {
        return unexpected(sc.p, sc.end, HC_EVENT_TRAILING_GARBAGE);
    }
    return HC_EVENT_NOT_OBJECT;
}

const char *hc_event_reason_str(hc_event_reason_t reason)
{
    static const char *const names[HC_EVENT_REASON_COUNT] = {
        [HC_EVENT_OK] = "ok",
        [HC_EVENT_TOO_LARGE] = "too_large",
        [HC_EVENT_EMPTY] = "empty",
        [HC_EVENT_NOT_JSON] = "not_json",
        [HC_EVENT_NOT_OBJECT] = "not_object",
        [HC_EVENT_BAD_UTF8] = "bad_utf8",
        [HC_EVENT_DUPLICATE_KEY] = "duplicate_key",
        [HC_EVENT_TRAILING_GARBAGE] = "trailing_garbage",
        [HC_EVENT_TOO_DEEP] = "too_deep",
        [HC_EVENT_MISSING_POST_ID] = "missing_post_id",
        [HC_EVENT_EMPTY_POST_ID] = "empty_post_id",
        [HC_EVENT_POST_ID_TOO_LONG] = "post_id_too_long",
        [HC_EVENT_POST_ID_CONTROL] = "post_id_control_char",
        [HC_EVENT_BAD_POST_ID_TYPE] = "bad_post_id_type",
        [HC_EVENT_BAD_USER_ID_TYPE] = "bad_user_id_type",
        [HC_EVENT_BAD_OP_TYPE] = "bad_op_type",
        [HC_EVENT_UNKNOWN_OP] = "unknown_op",
        [HC_EVENT_BAD_TS] = "bad_ts",
        [HC_EVENT_BAD_EVENT_ID] = "bad_event_id_type",
    };

    if ((unsigned)reason >= HC_EVENT_REASON_COUNT || names[reason] == NULL) {
        return "unknown";
    }
    return names[reason];
}

bool hc_post_id_valid(const char *id, size_t len)
{
    if (len == 0 || len > HC_POST_ID_MAX || has_control_byte(id, len)) {
        return false;
    }
    return hc_utf8_valid(id, len) && !has_c1_control(id, len);
}
