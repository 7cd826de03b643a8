#!/usr/bin/env python3
"""Python reference of the likes.partials records (docs/FORMATS.md, "Partials").

Written from the format's description, not from the C code (src/core/partial_pack.c), so that
the differential test (tests/unit/test_partial_pack_diff.py) holds the two to one reading.
Also the one decoder the Python fault tools use (tests/faults/tiling.py, tally.py):

    import partials_pack
    for post_id, delta, events, ts_min, ts_max in partials_pack.entries(value): ...

decode(value) -> ("ok", [entry, ...]) or (reason, None) for a packed record, with reason one
of partial_undecodable, partial_bad_post_id, partial_delta_exceeds_events (the dead-letter
reasons stage 2 gives). An entry is (post_id bytes, delta, events, ts_min, ts_max), ts None
when absent. encode(entries) -> bytes for entries already in the format's order.
"""
import json

MAGIC = 0xC1
MAX_BYTES = 256 * 1024
MAX_POSTS = 1024
POST_ID_MAX = 256
INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
MASK64 = (1 << 64) - 1


class Refused(Exception):
    pass


def _wrap64(u):
    """uint64 -> int64, two's complement"""
    u &= MASK64
    return u - (1 << 64) if u >> 63 else u


def _zigzag(v):
    return ((v << 1) ^ (v >> 63)) & MASK64


def _unzigzag(u):
    return (u >> 1) ^ -(u & 1)


def _varint(u):
    out = bytearray()
    while u >= 0x80:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)
    return bytes(out)


def post_id_valid(raw):
    """The event rules on a post id's bytes: 1..256 bytes of UTF-8 without a control
    character (C0, DEL, C1)."""
    if not 1 <= len(raw) <= POST_ID_MAX:
        return False
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return all(not (ord(ch) < 0x20 or 0x7F <= ord(ch) <= 0x9F) for ch in text)


def sort_key(post_id):
    return (len(post_id), post_id)


def encode(entries):
    """entries: (post_id bytes, delta, events, ts_min, ts_max) in sort_key order."""
    base = next((e[3] for e in entries if e[3] is not None), 0)
    out = bytearray([MAGIC])
    out += _varint(len(entries))
    out += _varint(_zigzag(base))
    for post_id, delta, events, ts_min, ts_max in entries:
        out += _varint(len(post_id)) + post_id + _varint(_zigzag(delta)) + _varint(events)
        if ts_min is None:
            out.append(0)
        else:
            out.append(1)
            out += _varint(_zigzag(_wrap64(ts_min - base)))
            out += _varint((ts_max - ts_min) & MASK64)
    return bytes(out)


class _Reader:
    def __init__(self, data):
        self.data = data
        self.pos = 0

    def left(self):
        return len(self.data) - self.pos

    def byte(self, what):
        if self.pos >= len(self.data):
            raise Refused(f"truncated {what}")
        b = self.data[self.pos]
        self.pos += 1
        return b

    def varint(self):
        u = 0
        for i in range(10):
            b = self.byte("varint")
            if i == 9 and b > 1:
                raise Refused("varint past 64 bits")
            u |= (b & 0x7F) << (7 * i)
            if not b & 0x80:
                if b == 0 and i > 0:
                    raise Refused("overlong varint")
                return u
        raise Refused("varint longer than 10 bytes")


def _structure(value):
    r = _Reader(value)
    if not value or value[0] != MAGIC:
        raise Refused("not version 1")
    if len(value) > MAX_BYTES:
        raise Refused("over the bound")
    r.pos = 1
    count = r.varint()
    if not 1 <= count <= MAX_POSTS or count > r.left() // 5:
        raise Refused("count")
    base = _unzigzag(r.varint())
    entries = []
    for _ in range(count):
        n = r.varint()
        if not 1 <= n <= POST_ID_MAX:
            raise Refused("post id length")
        if r.left() < n:
            raise Refused("truncated post id")
        post_id = bytes(value[r.pos:r.pos + n])
        r.pos += n
        delta = _unzigzag(r.varint())
        events = r.varint()
        if not 1 <= events <= INT64_MAX:
            raise Refused("events")
        flags = r.byte("flags")
        if flags == 0:
            ts_min = ts_max = None
        elif flags == 1:
            ts_min = _wrap64(base + _unzigzag(r.varint()))
            if ts_min == INT64_MIN:
                raise Refused("ts_min is -2^63")
            span = r.varint()
            ts_max = ts_min + span
            if ts_max > INT64_MAX:
                raise Refused("ts_max")
        else:
            raise Refused("flags")
        if entries and sort_key(entries[-1][0]) >= sort_key(post_id):
            raise Refused("post ids not strictly ascending")
        entries.append((post_id, delta, events, ts_min, ts_max))
    if r.left():
        raise Refused("trailing bytes")
    return entries


def decode(value):
    """A packed record -> ("ok", entries) or (reason, None), stage 2's reading of it."""
    try:
        entries = _structure(bytes(value))
    except Refused:
        return "partial_undecodable", None
    for post_id, delta, events, _, _ in entries:
        if not post_id_valid(post_id):
            return "partial_bad_post_id", None
        if abs(delta) > events:
            return "partial_delta_exceeds_events", None
    return "ok", entries


def is_packed(value):
    return bool(value) and value[0] == MAGIC


def entries(value):
    """The partials a likes.partials value carries, in either format, as (post_id bytes, delta,
    events, ts_min, ts_max). Raises ValueError on a record stage 2 would dead-letter as
    undecodable (the fault tools read only what stage 1 wrote)."""
    if is_packed(value):
        reason, got = decode(value)
        if got is None:
            raise ValueError(f"packed partial refused: {reason}")
        return got
    rec = json.loads(value)
    return [(rec["post_id"].encode("utf-8", "surrogatepass"), rec["delta"], rec["events"],
             rec["ts_min"], rec["ts_max"])]
