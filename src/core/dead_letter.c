/* The dead-letter record's format (include/core/hotcount/dead_letter.h). */
#include "hotcount/dead_letter.h"

#include <stdio.h>
#include <string.h>

void hc_dead_letter_take_header(hc_dead_letter_t *dl, const char *name, const void *value,
                                size_t len)
{
    const char **field;
    size_t *field_len;
    if (strcmp(name, HC_DLQ_HDR_ERROR) == 0) {
        field = &dl->reason, field_len = &dl->reason_len;
    } else if (strcmp(name, HC_DLQ_HDR_SOURCE) == 0) {
        field = &dl->source, field_len = &dl->source_len;
    } else if (strcmp(name, HC_DLQ_HDR_REPLAYED_FROM) == 0) {
        field = &dl->replayed_from, field_len = &dl->replayed_from_len;
    } else if (strcmp(name, HC_DLQ_HDR_TRUNCATED_FROM) == 0) {
        field = &dl->truncated_from, field_len = &dl->truncated_from_len;
    } else if (strcmp(name, HC_DLQ_HDR_KEY_TRUNCATED_FROM) == 0) {
        field = &dl->key_truncated_from, field_len = &dl->key_truncated_from_len;
    } else {
        return;
    }
    *field = value ? value : "";
    *field_len = value ? len : 0;
}

static void add(hc_dead_letter_headers_t *out, const char *name, const void *value, size_t len)
{
    out->hdr[out->count++] = (hc_dead_letter_header_t){name, value, len};
}

void hc_dead_letter_headers(hc_dead_letter_headers_t *out, const char *reason, const char *source,
                            const void *mark, size_t mark_len, size_t value_len, size_t sent_value,
                            size_t key_len, size_t sent_key)
{
    out->count = 0;
    add(out, HC_DLQ_HDR_ERROR, reason, strlen(reason));
    add(out, HC_DLQ_HDR_SOURCE, source, strlen(source));
    if (mark != NULL) {
        add(out, HC_DLQ_HDR_REPLAYED_FROM, mark, mark_len);
    }
    if (sent_value < value_len) {
        int n = snprintf(out->value_len_text, sizeof(out->value_len_text), "%zu", value_len);
        add(out, HC_DLQ_HDR_TRUNCATED_FROM, out->value_len_text, (size_t)n);
    }
    if (sent_key < key_len) {
        int n = snprintf(out->key_len_text, sizeof(out->key_len_text), "%zu", key_len);
        add(out, HC_DLQ_HDR_KEY_TRUNCATED_FROM, out->key_len_text, (size_t)n);
    }
}
