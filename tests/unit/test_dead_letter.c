/* The dead-letter format (src/core/dead_letter.c): the header names as the contract spells
 * them, the headers a writer attaches (a table of the cases stage 1 and stage 2 write, each
 * row the list hc_stage_dlq_headers in src/stage/stage_loop.c produced before the format moved
 * to core), and the view a reader builds from a record's headers (as hc_dead_letters_read's
 * get_last per name did). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "hotcount/dead_letter.h"

/* mutant: a name respelled (the contract's names, docs/FORMATS.md) */
static void names_are_the_contracts(void **state)
{
    (void)state;
    assert_string_equal(HC_DLQ_HDR_ERROR, "hotcount-error");
    assert_string_equal(HC_DLQ_HDR_SOURCE, "hotcount-source");
    assert_string_equal(HC_DLQ_HDR_REPLAYED_FROM, "hotcount-replayed-from");
    assert_string_equal(HC_DLQ_HDR_TRUNCATED_FROM, "hotcount-truncated-from");
    assert_string_equal(HC_DLQ_HDR_KEY_TRUNCATED_FROM, "hotcount-key-truncated-from");
}

typedef struct row {
    const char *mark; /* NULL: none */
    size_t mark_len;
    size_t value_len, sent_value, key_len, sent_key;
    const char *want; /* the headers as "name=value;" in order, after error and source */
} row_t;

static void render(const hc_dead_letter_headers_t *h, char *out, size_t size)
{
    size_t o = 0;
    for (size_t i = 2; i < h->count; i++) {
        o += (size_t)snprintf(out + o, size - o, "%s=%.*s;", h->hdr[i].name, (int)h->hdr[i].len,
                              (const char *)h->hdr[i].value);
    }
    out[o] = '\0';
}

/* mutant: a cut header when nothing was cut, the mark's length ignored, the key's header
 * keyed on the value's length, the headers' order changed */
static void writer_headers_as_before(void **state)
{
    (void)state;
    static const row_t rows[] = {
        {NULL, 0, 100, 100, 10, 10, ""},                                /* stage 1, sent whole */
        {NULL, 0, 0, 0, 0, 0, ""},                                      /* empty message */
        {NULL, 0, 5000, 4096, 10, 10, "hotcount-truncated-from=5000;"}, /* value cut */
        {NULL, 0, 5000, 0, 2000, 0,
         "hotcount-truncated-from=5000;hotcount-key-truncated-from=2000;"}, /* both, to nothing */
        {NULL, 0, 10, 10, 3000, 1024, "hotcount-key-truncated-from=3000;"}, /* key cut */
        {"likes.dlq/2/77xxx", 14, 10, 10, 0, 0, "hotcount-replayed-from=likes.dlq/2/77;"},
        {"likes.dlq/0/1", 13, 9000, 1792, 9000, 1792,
         "hotcount-replayed-from=likes.dlq/0/1;hotcount-truncated-from=9000;"
         "hotcount-key-truncated-from=9000;"},
        {"", 0, 1, 1, 1, 1, "hotcount-replayed-from=;"}, /* an empty mark is still a mark */
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        const row_t *r = &rows[i];
        hc_dead_letter_headers_t h;
        memset(&h, 0xa5, sizeof(h));
        hc_dead_letter_headers(&h, "too_large", "likes.raw/3/1041", r->mark, r->mark_len,
                               r->value_len, r->sent_value, r->key_len, r->sent_key);
        assert_true(h.count >= 2 && h.count <= HC_DLQ_HEADERS_MAX);
        assert_string_equal(h.hdr[0].name, "hotcount-error");
        assert_int_equal(h.hdr[0].len, strlen("too_large"));
        assert_memory_equal(h.hdr[0].value, "too_large", h.hdr[0].len);
        assert_string_equal(h.hdr[1].name, "hotcount-source");
        assert_int_equal(h.hdr[1].len, strlen("likes.raw/3/1041"));
        assert_memory_equal(h.hdr[1].value, "likes.raw/3/1041", h.hdr[1].len);
        char got[512];
        render(&h, got, sizeof(got));
        assert_string_equal(got, r->want);
    }
}

/* mutant: the first header of a name kept (Kafka's get_last reads the last), an absent
 * header read as "", a header without a value read as absent, an unknown name taken */
static void reader_view_as_before(void **state)
{
    (void)state;
    hc_dead_letter_t dl;
    memset(&dl, 0, sizeof(dl));
    hc_dead_letter_take_header(&dl, "hotcount-error", "not_json", 8);
    hc_dead_letter_take_header(&dl, "hotcount-source", "likes.raw/0/5", 13);
    hc_dead_letter_take_header(&dl, "hotcount-error", "too_large", 9); /* the last wins */
    hc_dead_letter_take_header(&dl, "hotcount-replayed-from", NULL, 0);
    hc_dead_letter_take_header(&dl, "hotcount-other", "x", 1);
    hc_dead_letter_take_header(&dl, "Hotcount-Error", "case", 4); /* names are exact */
    hc_dead_letter_take_header(&dl, "hotcount-key-truncated-from", "2000", 4);
    assert_int_equal(dl.reason_len, 9);
    assert_memory_equal(dl.reason, "too_large", 9);
    assert_int_equal(dl.source_len, 13);
    assert_memory_equal(dl.source, "likes.raw/0/5", 13);
    assert_non_null(dl.replayed_from); /* present without a value: "" */
    assert_string_equal(dl.replayed_from, "");
    assert_int_equal(dl.replayed_from_len, 0);
    assert_null(dl.truncated_from); /* absent */
    assert_int_equal(dl.truncated_from_len, 0);
    assert_int_equal(dl.key_truncated_from_len, 4);
    assert_memory_equal(dl.key_truncated_from, "2000", 4);
}

/* What a writer builds, a reader reads back. mutant: a name mismatched between the two */
static void round_trip(void **state)
{
    (void)state;
    hc_dead_letter_headers_t h;
    hc_dead_letter_headers(&h, "store_refused", "likes.partials/1/9", "likes.dlq/1/2", 13, 5000,
                           1792, 3000, 1792);
    hc_dead_letter_t dl;
    memset(&dl, 0, sizeof(dl));
    for (size_t i = 0; i < h.count; i++) {
        hc_dead_letter_take_header(&dl, h.hdr[i].name, h.hdr[i].value, h.hdr[i].len);
    }
    assert_memory_equal(dl.reason, "store_refused", dl.reason_len);
    assert_memory_equal(dl.source, "likes.partials/1/9", dl.source_len);
    assert_memory_equal(dl.replayed_from, "likes.dlq/1/2", dl.replayed_from_len);
    assert_int_equal(dl.truncated_from_len, 4);
    assert_memory_equal(dl.truncated_from, "5000", 4);
    assert_int_equal(dl.key_truncated_from_len, 4);
    assert_memory_equal(dl.key_truncated_from, "3000", 4);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(names_are_the_contracts),
        cmocka_unit_test(writer_headers_as_before),
        cmocka_unit_test(reader_view_as_before),
        cmocka_unit_test(round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
