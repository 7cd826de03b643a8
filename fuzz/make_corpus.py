#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_event into fuzz/corpus/event/ (one file per seed, named for
what it shows). Re-run after editing; files it does not write (e.g. regression inputs that a
fuzzing run found, named regress-*) are kept.

Seeds cover valid events of every field shape, every invalid reason of include/core/hotcount/event.h,
the documented divergences from the jansson reference (D1..D5) and the boundaries (256-byte post
id, 64 levels, the int64 range, 4096 bytes). Every seed is at most 8192 bytes (tools/fuzz runs
with -max_len=8192).
"""
import os
import sys

SEEDS = {}


def seed(name, data):
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogatepass")
    assert len(data) <= 8192, name
    assert name not in SEEDS, name
    SEEDS[name] = data


def deep(levels, top_array=False):
    """An event whose unknown field x nests `levels` containers in all (the event included)."""
    if top_array:
        return "[" * levels + "]" * levels
    inner = levels - 1
    return '{"post_id":"p","x":' + "[" * inner + "]" * inner + "}"


# ---- valid: every field in every accepted shape ----------------------------------------------
seed("ok-typical", '{"post_id":"p123456","user_id":"u98765","op":"like","ts":1732950000000,'
     '"event_id":"e-abc"}')
seed("ok-minimal", '{"post_id":"p1"}')
seed("ok-unlike", '{"op":"unlike","post_id":"p1"}')
seed("ok-int-post-id", '{"post_id":42,"user_id":7}')
seed("ok-int-post-id-zero", '{"post_id":0}')
seed("ok-int-post-id-256-digits", '{"post_id":1' + "7" * 255 + "}")
seed("ok-string-post-id-256-bytes", '{"post_id":"' + "a" * 256 + '","op":"like"}')
seed("ok-post-id-256-escapes", '{"post_id":"' + "\\u0041" * 256 + '"}')
seed("ok-post-id-128-two-byte-chars", '{"post_id":"' + "\u00e9" * 128 + '"}')
seed("ok-post-id-escapes", '{"post_id":"p\\u0031\\"x\\\\y\\/z\\u00e9\\u20AC\\ud83d\\ude00"}')
seed("ok-post-id-utf8", '{"post_id":"caf\u00e9 \U0001F44D"}')
seed("ok-utf8-boundaries", '{"post_id":"\u00a0\u07ff\u0800\ud7ff\ue000\uffff\U00010000'
     '\U0010ffff"}')
# C1 controls U+0080..U+009F are control characters (post_id_control_char), raw or escaped
seed("post-id-c1-raw-80", '{"post_id":"\u0080"}')
seed("post-id-c1-raw-9b", '{"post_id":"a\u009b[31m"}')
seed("post-id-c1-escaped-85", '{"post_id":"\\u0085"}')
seed("ok-user-id-negative-int", '{"post_id":"p","user_id":-12345}')
seed("ok-user-id-minus-zero-d3", '{"post_id":"p","user_id":-0}')
seed("ok-user-id-huge-int-d1", '{"post_id":"p","user_id":123456789012345678901234567890}')
seed("ok-user-id-empty", '{"post_id":"p","user_id":""}')
seed("ok-user-id-nul-escape", '{"post_id":"p","user_id":"a\\u0000b\\n"}')
seed("ok-user-id-500-bytes", '{"post_id":"p","user_id":"' + "abcdefghij" * 50 + '"}')
seed("ok-ts-int64-max", '{"post_id":"p","ts":9223372036854775807}')
seed("ok-ts-int64-min", '{"post_id":"p","ts":-9223372036854775808}')
seed("ok-ts-zero-and-minus-zero", '{"post_id":"p","ts":-0}')
seed("ok-event-id-empty", '{"post_id":"p","event_id":""}')
seed("ok-escaped-op", '{"post_id":"p","op":"\\u0075nlik\\u0065"}')
seed("ok-escaped-keys", '{"\\u0070ost_id":"p","\\u006fp":"unlike","u\\u0073er_id":1}')
seed("ok-unknown-fields-any-shape",
     '{"meta":{"a":[1,2.5,-3e-7,true,false,null,{"post_id":"inner"},[]],"b":{}},'
     '"post_id":"p9","tags":["x","y"],"n":null,"op":"unlike","f":-0.0E+0,'
     '"":"","k\\u00e9y":"\\ud83d\\ude00","event_id":"e"}')
seed("ok-whitespace-everywhere", ' \t\r\n{ "post_id" :\t"p" ,\r\n"op"\n:"unlike" , "x" : [ 1 , '
     '{ } , [ ] ] }\r\n\t ')
seed("ok-huge-numbers-unknown-d1", '{"post_id":"p","a":1e999,"b":-1E-999,'
     '"c":18446744073709551616,"d":-' + "9" * 300 + ".5e-99999999999999999999}")
seed("ok-nul-key-d4", '{"post_id":"p","x":"\\u0000","\\u0000":1}')
seed("ok-depth-64", deep(64))
seed("ok-depth-64-objects", '{"post_id":"p","x":' + '{"k":' * 63 + "1" + "}" * 63 + "}")
seed("ok-many-keys", '{"post_id":"p",' + ",".join(f'"k{i}":{i}' for i in range(600)) + "}")
seed("ok-many-keys-nested", '{"post_id":"p","o":{' +
     ",".join(f'"k{i}":[{i},{{"a":"]"}}]' for i in range(300)) + "}}")
seed("ok-same-key-in-sibling-objects", '{"post_id":"a","m":{"k":1},"n":{"k":1},'
     '"k":{"k":{"k":1}}}')
seed("ok-over-4096-bytes", '{"post_id":"p","blob":"' + "x" * 5000 + '"}')
seed("ok-exactly-4096-bytes", '{"post_id":"p","blob":"' + "y" * (4096 - 25) + '"}')
seed("ok-noncharacters", '{"post_id":"\ufdd0\ufffe\U0010fffe"}')
seed("ok-del-in-unknown", '{"post_id":"p","x":"\x7f"}')

# ---- invalid: every reason --------------------------------------------------------------------
seed("empty-one-space-is-not-json", " ")
seed("too-large-4097-bytes", '{"post_id":"p","blob":"' + "z" * (4097 - 25) + '"}')
seed("not-json-truncated", '{"post_id":"p"')
seed("not-json-trailing-comma", '{"post_id":"p",}')
seed("not-json-single-quotes", "{'post_id':'p'}")
seed("not-json-bare-key", '{post_id:"p"}')
seed("not-json-nan", '{"post_id":"p","n":NaN}')
seed("not-json-leading-zero", '{"post_id":01}')
seed("not-json-bad-numbers", '{"post_id":"p","n":[1.,.5,-,+1,1e,1e+,0x10,--1]}')
seed("not-json-bad-escape", '{"post_id":"\\x41"}')
seed("not-json-short-u-escape", '{"post_id":"\\u12G4"}')
seed("not-json-raw-newline-in-string", '{"post_id":"a\nb"}')
seed("not-json-raw-nul-in-string", b'{"post_id":"a\x00b"}')
seed("not-json-nul-after-number-d5", b'{"post_id":"p","n":1\x00}')
seed("not-json-nul-after-literal-d5", b'{"post_id":"p","n":true\x00}')
seed("not-json-bom", b'\xef\xbb\xbf{"post_id":"p"}')
seed("not-json-form-feed", b'\x0c{"post_id":"p"}')
seed("not-json-comment", '{"post_id":"p" // c\n}')
seed("not-json-truncated-surrogate", '{"post_id":"\\ud800')
seed("not-object-array", '[{"post_id":"p"}]')
seed("not-object-number", " -1.5e3 ")
seed("not-object-string", '"post_id"')
seed("not-object-dup-inside", '[{"a":1,"a":2}]')
seed("bad-utf8-continuation", b'{"post_id":"\x80"}')
seed("bad-utf8-overlong-c0af", b'{"post_id":"\xc0\xaf"}')
seed("bad-utf8-overlong-3", b'{"post_id":"\xe0\x80\xaf"}')
seed("bad-utf8-overlong-4", b'{"post_id":"\xf0\x8f\xbf\xbf"}')
seed("bad-utf8-surrogate-eda080", b'{"post_id":"\xed\xa0\x80"}')
seed("bad-utf8-above-10ffff", b'{"post_id":"\xf4\x90\x80\x80"}')
seed("bad-utf8-f8", b'{"post_id":"\xf8\x88\x80\x80\x80"}')
seed("bad-utf8-truncated-by-quote", b'{"post_id":"\xe2\x82"}')
seed("bad-utf8-truncated-by-end", b'{"post_id":"\xc3')
seed("bad-utf8-in-key", b'{"post_id":"p","\xff":1}')
seed("bad-utf8-outside-strings", b'{\xff"post_id":"p"}')
seed("bad-utf8-after-number", b'{"post_id":"p","n":1\xff}')
seed("bad-utf8-lone-high-surrogate", '{"post_id":"\\ud800"}')
seed("bad-utf8-lone-low-surrogate", '{"post_id":"\\udc00"}')
seed("bad-utf8-misordered-surrogates", '{"post_id":"\\udc00\\ud800"}')
seed("bad-utf8-high-then-bmp", '{"post_id":"\\ud800\\u0041"}')
seed("dup-post-id", '{"post_id":"a","post_id":"b"}')
seed("dup-post-id-escaped", '{"post_id":"a","post\\u005fid":"b"}')
seed("dup-unknown-utf8-vs-escape", '{"\u00e9":1,"post_id":"a","\\u00e9":2}')
seed("dup-pair-vs-raw", '{"\\ud83d\\ude00":1,"post_id":"a","\U0001F600":2}')
seed("dup-nested", '{"post_id":"a","m":[[{"a":{},"b":1,"\\u0061":[]}]]}')
seed("dup-after-33-keys", '{"post_id":"p",' + ",".join(f'"k{i}":1' for i in range(40)) +
     ',"k3":2}')
seed("dup-known-after-many-keys", '{"post_id":"p",' + ",".join(f'"k{i}":1' for i in range(40)) +
     ',"op":"like","op":"like"}')
seed("trailing-garbage-x", '{"post_id":"p"}x')
seed("trailing-garbage-second-object", '{"post_id":"p"}\n{"post_id":"q"}\n')
seed("trailing-garbage-nul", b'{"post_id":"p"}\x00')
seed("too-deep-65", deep(65))
seed("too-deep-65-top-array", deep(65, top_array=True))
seed("too-deep-3000-d2", deep(3000))
seed("too-deep-unterminated", "[" * 65)
seed("missing-post-id", '{"user_id":"u","op":"like"}')
seed("missing-post-id-nested", '{"x":{"post_id":"p"}}')
seed("missing-post-id-empty-object", "{}")
seed("empty-post-id", '{"post_id":""}')
seed("post-id-too-long-257", '{"post_id":"' + "a" * 257 + '"}')
seed("post-id-too-long-257-digits", '{"post_id":1' + "7" * 256 + "}")
seed("post-id-too-long-86-euros", '{"post_id":"' + "\\u20ac" * 86 + '"}')
seed("post-id-too-long-before-control", '{"post_id":"' + "\\n" * 300 + '"}')
seed("post-id-control-nul-escape", '{"post_id":"a\\u0000"}')
seed("post-id-control-newline-escape", '{"post_id":"a\\nb"}')
seed("post-id-control-raw-del", '{"post_id":"a\x7f"}')
seed("post-id-control-del-escape", '{"post_id":"\\u007f"}')
seed("bad-post-id-negative", '{"post_id":-1}')
seed("bad-post-id-minus-zero-d3", '{"post_id":-0,"user_id":-0}')
seed("bad-post-id-float", '{"post_id":1.0}')
seed("bad-post-id-exponent", '{"post_id":1e3}')
seed("bad-post-id-bool", '{"post_id":true}')
seed("bad-post-id-null", '{"post_id":null}')
seed("bad-post-id-array", '{"post_id":["p"]}')
seed("bad-post-id-object", '{"post_id":{"id":"p"}}')
seed("bad-user-id-float", '{"post_id":"p","user_id":1.5}')
seed("bad-user-id-null", '{"post_id":"p","user_id":null}')
seed("bad-user-id-object", '{"post_id":"p","user_id":{}}')
seed("bad-op-type-number", '{"post_id":"p","op":1}')
seed("bad-op-type-array", '{"post_id":"p","op":["like"]}')
seed("unknown-op-case", '{"post_id":"p","op":"Like"}')
seed("unknown-op-nul", '{"post_id":"p","op":"like\\u0000"}')
seed("unknown-op-empty", '{"post_id":"p","op":""}')
seed("bad-ts-float", '{"post_id":"p","ts":1.5}')
seed("bad-ts-exponent", '{"post_id":"p","ts":1e12}')
seed("bad-ts-over-int64-d1", '{"post_id":"p","ts":9223372036854775808}')
seed("bad-ts-under-int64-d1", '{"post_id":"p","ts":-9223372036854775809}')
seed("bad-ts-string", '{"post_id":"p","ts":"1732950000000"}')
seed("bad-event-id-number", '{"post_id":"p","event_id":1}')
seed("bad-event-id-null", '{"post_id":"p","event_id":null}')
seed("field-order-all-bad", '{"event_id":1,"ts":1.5,"op":1,"user_id":[],"post_id":"a"}')
seed("binary-garbage", bytes(range(256)))
seed("binary-garbage-brace", b"{" + bytes((i * 37 + 11) % 256 for i in range(200)))


def write_seeds(seeds, target):
    """Writes seeds ({name: bytes}) into fuzz/corpus/TARGET/, leaving other files there alone."""
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", target)
    os.makedirs(out, exist_ok=True)
    for name, data in seeds.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
    print(f"{len(seeds)} seeds in {out}", file=sys.stderr)


if __name__ == "__main__":
    write_seeds(SEEDS, "event")
