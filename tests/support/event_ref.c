/* The jansson-based reference parser; see event_ref.h for what it is for and where it differs
 * from the fast scanner. */
#include "event_ref.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

static hc_event_reason_t reason_of_load_error(const json_error_t *jerr)
{
    switch (json_error_code(jerr)) {
    case json_error_invalid_utf8:
        return HC_EVENT_BAD_UTF8;
    case json_error_duplicate_key:
        return HC_EVENT_DUPLICATE_KEY;
    case json_error_end_of_input_expected:
        return HC_EVENT_TRAILING_GARBAGE;
    case json_error_stack_overflow:
        return HC_EVENT_TOO_DEEP;
    default:
        return HC_EVENT_NOT_JSON;
    }
}

static bool has_control_byte(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7f) {
            return true;
        }
        /* C1 controls U+0080..U+009F: jansson hands out valid UTF-8, where they are C2 80..9F */
        if (c == 0xc2 && i + 1 < n && (unsigned char)s[i + 1] >= 0x80 &&
            (unsigned char)s[i + 1] <= 0x9f) {
            return true;
        }
    }
    return false;
}

static hc_event_reason_t ref_post_id(const json_t *v, hc_event_t *ev)
{
    if (v == NULL) {
        return HC_EVENT_MISSING_POST_ID;
    }
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        size_t n = json_string_length(v);
        if (n == 0) {
            return HC_EVENT_EMPTY_POST_ID;
        }
        if (n > HC_POST_ID_MAX) {
            return HC_EVENT_POST_ID_TOO_LONG;
        }
        if (has_control_byte(s, n)) {
            return HC_EVENT_POST_ID_CONTROL;
        }
        memcpy(ev->post_id, s, n);
        ev->post_id[n] = '\0';
        ev->post_id_len = n;
        return HC_EVENT_OK;
    }
    if (json_is_integer(v) && json_integer_value(v) >= 0) {
        int n = snprintf(ev->post_id, sizeof(ev->post_id), "%" JSON_INTEGER_FORMAT,
                         json_integer_value(v));
        ev->post_id_len = (size_t)n;
        return HC_EVENT_OK;
    }
    return HC_EVENT_BAD_POST_ID_TYPE;
}

static hc_event_reason_t ref_user_id(const json_t *v, hc_event_t *ev)
{
    char text[32];
    const char *s;
    size_t n;

    if (v == NULL) {
        return HC_EVENT_OK;
    }
    if (json_is_string(v)) {
        s = json_string_value(v);
        n = json_string_length(v);
    } else if (json_is_integer(v)) {
        n = (size_t)snprintf(text, sizeof(text), "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        s = text;
    } else {
        return HC_EVENT_BAD_USER_ID_TYPE;
    }
    if (n > HC_USER_ID_MAX) {
        n = HC_USER_ID_MAX;
    }
    memcpy(ev->user_id, s, n);
    ev->user_id[n] = '\0';
    ev->user_id_len = n;
    ev->has_user_id = true;
    return HC_EVENT_OK;
}

static hc_event_reason_t ref_op(const json_t *v, hc_event_t *ev)
{
    const char *s;
    size_t n;

    if (v == NULL) {
        return HC_EVENT_OK;
    }
    if (!json_is_string(v)) {
        return HC_EVENT_BAD_OP_TYPE;
    }
    s = json_string_value(v);
    n = json_string_length(v);
    if (n == 4 && memcmp(s, "like", 4) == 0) {
        ev->delta = 1;
    } else if (n == 6 && memcmp(s, "unlike", 6) == 0) {
        ev->delta = -1;
    } else {
        return HC_EVENT_UNKNOWN_OP;
    }
    return HC_EVENT_OK;
}

static hc_event_reason_t ref_ts(const json_t *v, hc_event_t *ev)
{
    if (v == NULL) {
        return HC_EVENT_OK;
    }
    if (!json_is_integer(v)) {
        return HC_EVENT_BAD_TS;
    }
    ev->ts = json_integer_value(v);
    ev->has_ts = true;
    return HC_EVENT_OK;
}

static hc_event_reason_t ref_fields(const json_t *root, hc_event_t *ev)
{
    const json_t *eid = json_object_get(root, "event_id");
    hc_event_reason_t r;

    r = ref_post_id(json_object_get(root, "post_id"), ev);
    if (r == HC_EVENT_OK) {
        r = ref_user_id(json_object_get(root, "user_id"), ev);
    }
    if (r == HC_EVENT_OK) {
        r = ref_op(json_object_get(root, "op"), ev);
    }
    if (r == HC_EVENT_OK) {
        r = ref_ts(json_object_get(root, "ts"), ev);
    }
    if (r == HC_EVENT_OK && eid != NULL && !json_is_string(eid)) {
        r = HC_EVENT_BAD_EVENT_ID;
    }
    return r;
}

hc_event_reason_t hc_event_parse_ref(const char *buf, size_t len, size_t max_bytes, hc_event_t *ev)
{
    json_error_t jerr;
    json_t *root;
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
    root = json_loadb(buf, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL | JSON_DECODE_ANY, &jerr);
    if (root == NULL) {
        return reason_of_load_error(&jerr);
    }
    memset(ev, 0, sizeof(*ev));
    ev->delta = 1;
    if (json_is_object(root)) {
        r = ref_fields(root, ev);
    } else {
        r = HC_EVENT_NOT_OBJECT;
    }
    json_decref(root);
    return r;
}
