/* Layer: core. The dead-letter record of topic.dlq (docs/FORMATS.md, "Dead letters"), beside the
 * partial, packed and manifest codecs: its header names, the view a reader gets of one record,
 * and the headers a writer attaches. Key and value are the original message's (cut when the
 * producer refuses them whole, each cut named by a header); the headers say why and whence.
 *
 * The Kafka glue is thin and holds no name of its own: hc_dead_letters_read
 * (hotcount/group_admin.h) feeds each record's headers to hc_dead_letter_take_header, and
 * hc_kafka_dead_letter_headers (hotcount/kafka.h) turns hc_dead_letter_headers' list into
 * librdkafka's.
 *
 * Pure (no I/O, no allocation); any thread. */
#ifndef HOTCOUNT_DEAD_LETTER_H
#define HOTCOUNT_DEAD_LETTER_H

#include <stddef.h>
#include <stdint.h>

/* The header names: part of the contract (kcat -f '%h' shows them to operators). */
#define HC_DLQ_HDR_ERROR "hotcount-error"   /* the reason (hc_event_reason_str, ...) */
#define HC_DLQ_HDR_SOURCE "hotcount-source" /* "topic/partition/offset" of the original */
/* a record `hotcount dlq replay` put back: "<dlq topic>/<partition>/<offset>" it came from */
#define HC_DLQ_HDR_REPLAYED_FROM "hotcount-replayed-from"
#define HC_DLQ_HDR_TRUNCATED_FROM "hotcount-truncated-from" /* the original value's length */
#define HC_DLQ_HDR_KEY_TRUNCATED_FROM "hotcount-key-truncated-from" /* the original key's */

/* One dead letter as a reader sees it. Every pointer is borrowed from the record and valid as
 * long as it is; a header that is absent is NULL (length 0), one without a value "". */
typedef struct hc_dead_letter {
    int32_t partition;
    int64_t offset;
    int64_t timestamp_ms; /* the record's timestamp, -1 when it has none */
    const char *reason;   /* HC_DLQ_HDR_ERROR */
    size_t reason_len;
    const char *source; /* HC_DLQ_HDR_SOURCE: topic/partition/offset in topic.raw */
    size_t source_len;
    const char *replayed_from; /* HC_DLQ_HDR_REPLAYED_FROM: set on a replayed record */
    size_t replayed_from_len;
    const char *truncated_from; /* HC_DLQ_HDR_TRUNCATED_FROM: the original value length */
    size_t truncated_from_len;
    const char *key_truncated_from; /* HC_DLQ_HDR_KEY_TRUNCATED_FROM: the original key length */
    size_t key_truncated_from_len;
    const void *key;
    size_t key_len;
    const void *value;
    size_t value_len;
} hc_dead_letter_t;

/* Reads one header of the record into dl: the field its name stands for (a later header of the
 * same name replaces an earlier one, as Kafka's "last" header does); other names are ignored.
 * Call it for every header in the record's order. */
void hc_dead_letter_take_header(hc_dead_letter_t *dl, const char *name, const void *value,
                                size_t len);

#define HC_DLQ_HEADERS_MAX 5

typedef struct hc_dead_letter_header {
    const char *name;
    const void *value;
    size_t len;
} hc_dead_letter_header_t;

/* A writer's headers, in the order they go on the record. The two length headers' text lives
 * in the struct itself: use it where it was built, never a copy. */
typedef struct hc_dead_letter_headers {
    hc_dead_letter_header_t hdr[HC_DLQ_HEADERS_MAX];
    size_t count;
    char value_len_text[24];
    char key_len_text[24];
} hc_dead_letter_headers_t;

/* The headers of a dead letter: HC_DLQ_HDR_ERROR (reason) and HC_DLQ_HDR_SOURCE (both
 * NUL-terminated), a replay's mark when mark is not NULL (mark_len bytes), and the two
 * truncated-from headers (decimal lengths) when the value or key sent (sent_value, sent_key
 * bytes) is shorter than the original's (value_len, key_len). Borrows reason, source, mark. */
void hc_dead_letter_headers(hc_dead_letter_headers_t *out, const char *reason, const char *source,
                            const void *mark, size_t mark_len, size_t value_len, size_t sent_value,
                            size_t key_len, size_t sent_key);

#endif
