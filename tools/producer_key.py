#!/usr/bin/env python3
"""Reference implementation of adaptive salting for producers (docs/FORMATS.md, "Adaptive
salting"): a producer in any language keys a post "<post>#<salt>" over N ways only while the post
is in the hot set of topic.hotkeys, else "<post>#0". The C implementation is
src/core/producer_key.c; both are checked against tests/unit/producer_key_vectors.json.

Use: feed every topic.hotkeys record value, in log order per partition, to HotView.apply, and
ask HotView.key(post, user, now_ms) for each event's Kafka key. Standard library only.
"""

import json

FNV1A32_OFFSET_BASIS = 2166136261
FNV1A32_PRIME = 16777619


def fnv1a32(data: bytes) -> int:
    h = FNV1A32_OFFSET_BASIS
    for b in data:
        h ^= b
        h = (h * FNV1A32_PRIME) & 0xFFFFFFFF
    return h


def salt(user_id: bytes, ways: int) -> int:
    """The salt of docs/FORMATS.md "Events": fnv1a32(user_id bytes) % ways (0 for ways <= 1)."""
    return 0 if ways <= 1 else fnv1a32(user_id) % ways


def _no_duplicates(pairs):
    obj = {}
    for k, v in pairs:
        if k in obj:
            raise ValueError("duplicate key %r" % k)
        obj[k] = v
    return obj


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _post_id_valid(post: str) -> bool:
    raw = post.encode("utf-8", "surrogatepass")
    try:
        raw.decode("utf-8")  # lone surrogates are not UTF-8
    except UnicodeDecodeError:
        return False
    return 1 <= len(raw) <= 256 and all(b >= 0x20 and b != 0x7F for b in raw)


def parse_record(value: bytes) -> dict:
    """A topic.hotkeys value as a dict (post, hot, source, since, expires, salts); ValueError
    for a value that is not a record (readers skip it)."""
    obj = json.loads(value, object_pairs_hook=_no_duplicates)
    if not isinstance(obj, dict):
        raise ValueError("not a JSON object")
    post, state, source = obj.get("post"), obj.get("state"), obj.get("source")
    since, expires, rate, salts = obj.get("since"), obj.get("expires"), obj.get("rate"), obj.get("salts")
    if not isinstance(post, str) or not _post_id_valid(post):
        raise ValueError("post")
    if state not in ("hot", "cool") or source not in ("detected", "declared"):
        raise ValueError("state or source")
    if not _is_int(since) or not (expires is None or _is_int(expires)):
        raise ValueError("since or expires")
    if "rate" in obj and (isinstance(rate, bool) or not isinstance(rate, (int, float))):
        raise ValueError("rate")
    if "salts" in obj and not (_is_int(salts) and 1 <= salts <= 65536):
        raise ValueError("salts")
    return {"post": post, "hot": state == "hot", "source": source, "since": since,
            "expires": expires, "salts": salts if "salts" in obj else 0}


def is_hot(rec: dict, now_ms: int) -> bool:
    if not rec["hot"]:
        return False
    if rec["expires"] is not None and now_ms >= rec["expires"]:
        return False
    return rec["source"] != "declared" or now_ms >= rec["since"]


class HotView:
    """The last record per (source, post), as compaction keeps them."""

    def __init__(self, default_salts: int):
        self.default_salts = max(1, default_salts)
        self.records = {}
        self.invalid = 0

    def apply(self, value: bytes) -> bool:
        try:
            rec = parse_record(value)
        except ValueError:  # json.JSONDecodeError is a ValueError
            self.invalid += 1
            return False
        self.records[(rec["source"], rec["post"])] = rec
        return True

    def salts(self, post: str, now_ms: int) -> int:
        """0 when post is not hot at now_ms, else the ways to salt it over."""
        hot = [r for r in (self.records.get((s, post)) for s in ("detected", "declared"))
               if r is not None and is_hot(r, now_ms)]
        if not hot:
            return 0
        asked = max(r["salts"] for r in hot)
        return asked if asked > 0 else self.default_salts

    def key(self, post: str, user_id: str, now_ms: int) -> str:
        ways = self.salts(post, now_ms)
        return "%s#%d" % (post, salt(user_id.encode("utf-8"), ways))
