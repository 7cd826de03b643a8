#!/usr/bin/env python3
"""Writes tests/hostile/corpus.jsonl: malformed and adversarial likes.raw messages, each with the
Kafka key it is sent with and what stage 1 must make of it (include/core/hotcount/event.h).

One JSON object per line:
  name        unique, says what the message is
  key_hex     the Kafka key's bytes in hex ("" is an empty key), or null for no key
  key_gen     instead of key_hex for big keys: {"fill_hex", "count"}, the key being fill * count
              (a dead letter cuts such a key to its first 1024 bytes, hotcount-key-truncated-from)
  value_hex   the value's bytes in hex ("" is an empty value), or null for no value (tombstone);
  value_gen   instead of value_hex for big values: {"prefix_hex", "fill_hex", "count",
              "suffix_hex"}, the value being prefix + fill * count + suffix
  expect      the hotcount-error reason, or "ok" for a valid event
  post_hex    (ok only) the post id it counts for, as bytes in hex
  delta       (ok only) +1 or -1
The expectations come from the contract (docs/FORMATS.md "Events") and the reason
precedence in event.h, never from running hotcount. Valid events use post ids that
`hotcount produce` never generates (its ids are "1".."N"), so their counts can be checked.

Re-run after editing: python3 tests/hostile/make_corpus.py
"""
import json
import os

ENTRIES = []
SALTS = 16


def fnv1a32(data):
    h = 2166136261
    for b in data:
        h = ((h ^ b) * 16777619) & 0xFFFFFFFF
    return h


def raw_key(post, user=b""):
    """The contract's producer key: <post_id>#<fnv1a32(user_id) % salts>."""
    return post + b"#" + str(fnv1a32(user) % SALTS).encode()


def b(x):
    return x.encode("utf-8", "surrogatepass") if isinstance(x, str) else x


def add(name, value, expect, key=b"hostile#0", post=None, delta=None, gen=None, key_gen=None):
    assert all(e["name"] != name for e in ENTRIES), name
    e = {"name": name, "key_hex": None if key is None else b(key).hex()}
    if key_gen is not None:
        e["key_gen"] = key_gen
    if gen is not None:
        e["value_gen"] = gen
    else:
        e["value_hex"] = None if value is None else b(value).hex()
    e["expect"] = expect
    if expect == "ok":
        e["post_hex"] = b(post).hex()
        e["delta"] = delta
    ENTRIES.append(e)


def big(total, post=b"hostile-big"):
    """A value of exactly `total` bytes: a valid event but for its size."""
    prefix = b'{"post_id":"' + post + b'","blob":"'
    suffix = b'"}'
    return {"prefix_hex": prefix.hex(), "fill_hex": b"a".hex(),
            "count": total - len(prefix) - len(suffix), "suffix_hex": suffix.hex()}


def nested(levels):
    """An event whose unknown field nests containers to `levels` in all (the event is 1)."""
    inner = levels - 1
    return '{"post_id":"hostile-deep","x":' + "[" * inner + "]" * inner + "}"


# ---- size and emptiness -----------------------------------------------------------------------
# 1 000 000 bytes: over event.max.bytes, and over what stage 1's producer may send with the
# headers added, so the dead letter is cut to its first 4096 bytes (hotcount-truncated-from).
add("too_large_1mb", None, "too_large", gen=big(1000000))
add("too_large_500kb", None, "too_large", gen=big(500000))
add("too_large_4097_bytes", None, "too_large", gen=big(4097))
add("empty_value", b"", "empty")
add("null_value_tombstone", None, "empty")
add("empty_key_empty_value", b"", "empty", key=b"")
add("null_key_empty_value", b"", "empty", key=None)

# ---- not JSON -----------------------------------------------------------------------------------
add("not_json_truncated", '{"post_id":"p"', "not_json")
add("not_json_single_quotes", "{'post_id':'p'}", "not_json")
add("not_json_nan", '{"post_id":"p","n":NaN}', "not_json")
add("not_json_infinity", '{"post_id":"p","n":-Infinity}', "not_json")
add("not_json_utf8_bom", b'\xef\xbb\xbf{"post_id":"p"}', "not_json")
add("not_json_nul_in_string", b'{"post_id":"a\x00b"}', "not_json")
add("not_json_nul_between_members", b'{"post_id":"p",\x00"op":"like"}', "not_json")
add("not_json_nul_after_number", b'{"post_id":"p","n":1\x00}', "not_json")
add("not_json_leading_nul", b'\x00{"post_id":"p"}', "not_json")
add("not_json_raw_control_in_post_id", b'{"post_id":"a\x01b"}', "not_json")
add("not_json_leading_zero_post_id", '{"post_id":01}', "not_json")
add("not_json_trailing_comma", '{"post_id":"p",}', "not_json")
add("not_json_comment", '{"post_id":"p" /* c */}', "not_json")
add("not_json_form_feed_whitespace", b'\x0c{"post_id":"p"}', "not_json")
add("not_json_nbsp_whitespace", b'{"post_id":\xc2\xa0"p"}', "not_json")
add("not_json_bad_escape", '{"post_id":"\\x41"}', "not_json")
add("not_json_binary_garbage_nul_first", bytes(range(0, 256, 3)), "not_json", key=b"\x00\xff\x01")

# ---- not UTF-8 ----------------------------------------------------------------------------------
add("bad_utf8_overlong_c0af", b'{"post_id":"\xc0\xaf"}', "bad_utf8")
add("bad_utf8_overlong_3_bytes", b'{"post_id":"\xe0\x80\xaf"}', "bad_utf8")
add("bad_utf8_encoded_surrogate_eda080", b'{"post_id":"\xed\xa0\x80"}', "bad_utf8")
add("bad_utf8_above_10ffff", b'{"post_id":"\xf4\x90\x80\x80"}', "bad_utf8")
add("bad_utf8_truncated_sequence", b'{"post_id":"\xe2\x82"}', "bad_utf8")
add("bad_utf8_in_unknown_key", b'{"post_id":"p","\xff":1}', "bad_utf8")
add("bad_utf8_lone_high_surrogate_escape", '{"post_id":"\\ud800"}', "bad_utf8")
add("bad_utf8_lone_low_surrogate_escape", '{"post_id":"p","x":"\\udc00"}', "bad_utf8")
add("bad_utf8_misordered_surrogates", '{"post_id":"\\udc00\\ud800"}', "bad_utf8")
add("bad_utf8_binary_garbage_ff_first", bytes(255 - i for i in range(0, 256, 5)), "bad_utf8")
add("bad_utf8_png_header", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "bad_utf8")

# ---- structure ----------------------------------------------------------------------------------
add("not_object_array", '[{"post_id":"p"}]', "not_object")
add("not_object_string", '"post_id"', "not_object")
add("not_object_number", "42", "not_object")
add("not_object_null", "null", "not_object")
add("duplicate_key_post_id", '{"post_id":"a","post_id":"b"}', "duplicate_key")
add("duplicate_key_escaped_post_id", '{"post_id":"a","post\\u005fid":"b"}', "duplicate_key")
add("duplicate_key_escaped_unknown", '{"\u00e9":1,"post_id":"a","\\u00e9":2}', "duplicate_key")
add("duplicate_key_nested", '{"post_id":"p","m":{"k":1,"k":2}}', "duplicate_key")
add("duplicate_key_after_40_keys",
    '{"post_id":"p",' + ",".join(f'"k{i}":{i}' for i in range(40)) + ',"k7":0}', "duplicate_key")
add("trailing_garbage_text", '{"post_id":"p"} x', "trailing_garbage")
add("trailing_garbage_two_events", '{"post_id":"p"}\n{"post_id":"q"}\n', "trailing_garbage")
add("trailing_garbage_nul", b'{"post_id":"p"}\x00', "trailing_garbage")
add("too_deep_65_levels", nested(65), "too_deep")
add("too_deep_100_levels", nested(100), "too_deep")
add("too_deep_2000_levels", nested(2000), "too_deep")
add("too_deep_unterminated", "[" * 100, "too_deep")

# ---- field rules --------------------------------------------------------------------------------
add("missing_post_id", '{"user_id":"u","op":"like"}', "missing_post_id")
add("missing_post_id_wrong_case", '{"Post_id":"p"}', "missing_post_id")
add("missing_post_id_only_nested", '{"x":{"post_id":"p"}}', "missing_post_id")
add("empty_post_id", '{"post_id":""}', "empty_post_id")
add("post_id_too_long_257_bytes", '{"post_id":"' + "h" * 257 + '"}', "post_id_too_long")
add("post_id_too_long_257_digits", '{"post_id":9' + "0" * 256 + "}", "post_id_too_long")
add("post_id_too_long_after_unescaping", '{"post_id":"' + "\\u20ac" * 86 + '"}',
    "post_id_too_long")
add("post_id_control_newline_escape", '{"post_id":"a\\nb"}', "post_id_control_char")
add("post_id_control_nul_escape", '{"post_id":"a\\u0000"}', "post_id_control_char")
add("post_id_control_1f_escape", '{"post_id":"\\u001F"}', "post_id_control_char")
add("post_id_control_raw_del", b'{"post_id":"a\x7f"}', "post_id_control_char")
# C1 controls (U+0080-U+009F) are control characters too: raw UTF-8 and escaped
add("post_id_control_c1_raw_85", b'{"post_id":"a\xc2\x85b"}', "post_id_control_char")
add("post_id_control_c1_escape_9b", '{"post_id":"\\u009b[31m"}', "post_id_control_char")
add("bad_post_id_type_negative", '{"post_id":-1}', "bad_post_id_type")
add("bad_post_id_type_minus_zero", '{"post_id":-0}', "bad_post_id_type")
add("bad_post_id_type_float", '{"post_id":1.5}', "bad_post_id_type")
add("bad_post_id_type_integral_float", '{"post_id":1.0}', "bad_post_id_type")
add("bad_post_id_type_exponent", '{"post_id":1e3}', "bad_post_id_type")
add("bad_post_id_type_bool", '{"post_id":true}', "bad_post_id_type")
add("bad_post_id_type_null", '{"post_id":null}', "bad_post_id_type")
add("bad_post_id_type_array", '{"post_id":["p"]}', "bad_post_id_type")
add("bad_user_id_type_float", '{"post_id":"p","user_id":1.5}', "bad_user_id_type")
add("bad_user_id_type_bool", '{"post_id":"p","user_id":false}', "bad_user_id_type")
add("bad_user_id_type_object", '{"post_id":"p","user_id":{"id":1}}', "bad_user_id_type")
add("bad_op_type_number", '{"post_id":"p","op":1}', "bad_op_type")
add("bad_op_type_null", '{"post_id":"p","op":null}', "bad_op_type")
add("bad_op_type_array", '{"post_id":"p","op":["like"]}', "bad_op_type")
add("unknown_op_capital", '{"post_id":"p","op":"Like"}', "unknown_op")
add("unknown_op_dislike", '{"post_id":"p","op":"dislike"}', "unknown_op")
add("unknown_op_empty", '{"post_id":"p","op":""}', "unknown_op")
add("unknown_op_nul_suffix", '{"post_id":"p","op":"like\\u0000"}', "unknown_op")
add("bad_ts_huge_number", '{"post_id":"p","ts":' + "9" * 400 + "}", "bad_ts")
add("bad_ts_over_int64", '{"post_id":"p","ts":9223372036854775808}', "bad_ts")
add("bad_ts_float", '{"post_id":"p","ts":1732950000000.5}', "bad_ts")
add("bad_ts_string", '{"post_id":"p","ts":"1732950000000"}', "bad_ts")
add("bad_event_id_type_number", '{"post_id":"p","event_id":12345}', "bad_event_id_type")
add("bad_event_id_type_null", '{"post_id":"p","event_id":null}', "bad_event_id_type")
add("field_order_every_field_bad",
    '{"event_id":1,"ts":1.5,"op":1,"user_id":[],"post_id":"a"}', "bad_user_id_type")
add("duplicate_before_field_errors", '{"post_id":1.5,"x":1,"x":2}', "duplicate_key")

# ---- tricky but valid -------------------------------------------------------------------------
P = "hostile-"
add("ok_huge_integer_in_unknown_field",
    '{"post_id":"' + P + 'bignum","n":' + "1234567890" * 30 + ',"op":"like"}', "ok",
    key=raw_key(b(P + "bignum")), post=P + "bignum", delta=1)
add("ok_huge_reals_in_unknown_fields",
    '{"post_id":"' + P + 'bignum","a":1e400,"b":-1E-400,"c":18446744073709551616}', "ok",
    key=raw_key(b(P + "bignum")), post=P + "bignum", delta=1)
add("ok_escaped_post_id", '{"post_id":"h\\u00e9stile-esc\\ud83d\\ude00\\/x"}', "ok",
    key=raw_key(b("h\u00e9stile-esc\U0001F600/x")), post="h\u00e9stile-esc\U0001F600/x", delta=1)
add("ok_escaped_keys_and_op", '{"\\u0070ost_id":"' + P + 'esc-keys","o\\u0070":"\\u0075nlike"}',
    "ok", key=raw_key(b(P + "esc-keys")), post=P + "esc-keys", delta=-1)
add("ok_integer_post_id", '{"post_id":9900000001,"user_id":42}', "ok",
    key=raw_key(b"9900000001", b"42"), post="9900000001", delta=1)
add("ok_string_post_id_same_as_integer", '{"post_id":"9900000001","user_id":"42"}', "ok",
    key=raw_key(b"9900000001", b"42"), post="9900000001", delta=1)
add("ok_unlike_integer_post_id", '{"post_id":9900000002,"op":"unlike"}', "ok",
    key=raw_key(b"9900000002"), post="9900000002", delta=-1)
add("ok_post_id_256_bytes", '{"post_id":"' + "H" * 256 + '"}', "ok",
    key=raw_key(b"H" * 256), post="H" * 256, delta=1)
add("ok_post_id_256_digit_integer", '{"post_id":8' + "1" * 255 + "}", "ok",
    key=raw_key(b"8" + b"1" * 255), post="8" + "1" * 255, delta=1)
add("ok_depth_64", '{"post_id":"' + P + 'depth64","x":' + "[" * 63 + "]" * 63 + "}", "ok",
    key=raw_key(b(P + "depth64")), post=P + "depth64", delta=1)
add("ok_whitespace_everywhere", ' \t\r\n{ "post_id" :\t"' + P + 'ws" ,\r\n"op"\n:"like" } \n',
    "ok", key=raw_key(b(P + "ws")), post=P + "ws", delta=1)
add("ok_boundary_numbers", '{"post_id":"' + P + 'nums","ts":-9223372036854775808,'
    '"user_id":-0,"n":-0.0e-0}', "ok", key=raw_key(b(P + "nums"), b"-0"), post=P + "nums",
    delta=1)
add("ok_nul_key_and_nul_string_in_unknown", '{"post_id":"' + P + 'nul","\\u0000":"\\u0000"}',
    "ok", key=raw_key(b(P + "nul")), post=P + "nul", delta=1)
add("ok_empty_kafka_key", '{"post_id":"' + P + 'nokey"}', "ok", key=b"", post=P + "nokey",
    delta=1)
add("ok_null_kafka_key", '{"post_id":"' + P + 'nokey","op":"like"}', "ok", key=None,
    post=P + "nokey", delta=1)
add("ok_utf8_boundaries_post_id", '{"post_id":"\u00a0\u07ff\u0800\ud7ff\ue000\ufffd\U0010ffff"}',
    "ok", key=raw_key(b("\u00a0\u07ff\u0800\ud7ff\ue000\ufffd\U0010ffff")),
    post="\u00a0\u07ff\u0800\ud7ff\ue000\ufffd\U0010ffff", delta=1)
add("ok_key_lies_about_post", '{"post_id":"' + P + 'truth"}', "ok", key=b"someone-else#3",
    post=P + "truth", delta=1)
# A key of 1 MB: over what stage 1's producer may send in a dead letter, so the dead letter
# carries its first 1024 bytes; a valid value with it is simply counted (the key is not read).
add("not_json_1mb_key", "not json", "not_json", key=None,
    key_gen={"fill_hex": "6b", "count": 1000000})
add("ok_1mb_key", '{"post_id":"' + P + 'hugekey"}', "ok", key=None,
    key_gen={"fill_hex": "6b", "count": 1000000}, post=P + "hugekey", delta=1)


def main():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus.jsonl")
    with open(path, "w") as f:
        for e in ENTRIES:
            f.write(json.dumps(e, separators=(",", ":")) + "\n")
    n_ok = sum(e["expect"] == "ok" for e in ENTRIES)
    reasons = {e["expect"] for e in ENTRIES} - {"ok"}
    print(f"{len(ENTRIES)} entries ({len(ENTRIES) - n_ok} invalid over {len(reasons)} reasons, "
          f"{n_ok} valid) in {path}")


if __name__ == "__main__":
    main()
