#!/usr/bin/env python3
"""An independent oracle for hotcount's integration tests.

It reads likes.raw from its first offset with its own Kafka client (confluent-kafka) and applies
the contract's validation rules with Python's json module, never hotcount's parser. Then it checks
what hotcount produced:

  * every post's stored count (a dump from `hotcount get --all`) equals the recount, and no
    other post has a non-zero count;
  * the dead-letter topic holds exactly the malformed raw messages: one record per invalid
    offset, with the original bytes, a `hotcount-error` reason and a matching `hotcount-source`;
  * stage 1's committed offsets, read back from the broker, equal the end of every raw partition.

Exit status 0 when everything holds; 1 with a report otherwise.
"""
import argparse
import os
import json
import sys
import time

from confluent_kafka import Consumer, TopicPartition

MAX_POST_ID = 256
MAX_DEPTH = 64  # hotcount's addition to the contract: deeper messages are "too_deep"

# Integers longer than Python's default 4300-digit limit are still JSON (event.max.bytes may be
# up to 1 MiB).
sys.set_int_max_str_digits(0)


class NegativeZero(int):
    """The literal -0: numerically 0, but written with a minus sign, so not a non-negative
    integer literal for post_id (hotcount's documented reading of the contract)."""


def _parse_int(text):
    return NegativeZero(0) if text.lstrip("-") == "0" and text.startswith("-") else int(text)


def _depth(obj):
    if isinstance(obj, dict):
        return 1 + max((_depth(v) for v in obj.values()), default=0)
    if isinstance(obj, list):
        return 1 + max((_depth(v) for v in obj), default=0)
    return 0


class Invalid(Exception):
    pass


def _no_duplicates(pairs):
    seen = set()
    for k, _ in pairs:
        if k in seen:
            raise Invalid("duplicate_key")
        seen.add(k)
    return dict(pairs)


def _reject_constant(name):
    raise Invalid("not_json")  # NaN, Infinity are not JSON


def _check_strings(obj):
    """Lone surrogates from \\u escapes are not valid Unicode text."""
    if isinstance(obj, str):
        try:
            obj.encode("utf-8")
        except UnicodeEncodeError:
            raise Invalid("bad_utf8")
    elif isinstance(obj, dict):
        for k, v in obj.items():
            _check_strings(k)
            _check_strings(v)
    elif isinstance(obj, list):
        for v in obj:
            _check_strings(v)


def validate(value, max_bytes):
    """Returns (post_id, delta) for a valid event; raises Invalid otherwise."""
    if value is None or len(value) == 0:
        raise Invalid("empty")
    if len(value) > max_bytes:
        raise Invalid("too_large")
    try:
        text = value.decode("utf-8", errors="strict")
    except UnicodeDecodeError:
        raise Invalid("bad_utf8")
    if text.startswith("\ufeff"):
        raise Invalid("not_json")
    try:
        obj = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_reject_constant,
                         parse_int=_parse_int)
    except Invalid:
        raise
    except RecursionError:
        raise Invalid("too_deep")
    except ValueError:
        raise Invalid("not_json")
    if _depth(obj) > MAX_DEPTH:
        raise Invalid("too_deep")
    _check_strings(obj)
    if not isinstance(obj, dict):
        raise Invalid("not_object")
    if "post_id" not in obj:
        raise Invalid("missing_post_id")
    pid = obj["post_id"]
    if isinstance(pid, (bool, NegativeZero)):
        raise Invalid("bad_post_id_type")
    if isinstance(pid, int):  # json.loads makes 1.0 and 1e3 floats: only integer literals
        if pid < 0:
            raise Invalid("bad_post_id_type")
        # an integer counts as its decimal string; JSON allows no leading zeros or '+'
        post = str(pid).encode()
    elif isinstance(pid, str):
        post = pid.encode("utf-8")
        if len(post) == 0:
            raise Invalid("empty_post_id")
        # C0, DEL, and the C1 controls U+0080-U+009F (docs/FORMATS.md, "Events")
        if any(b < 0x20 or b == 0x7F for b in post) or any("\x80" <= c <= "\x9f" for c in pid):
            raise Invalid("post_id_control_char")
    else:
        raise Invalid("bad_post_id_type")
    if len(post) > MAX_POST_ID:
        raise Invalid("post_id_too_long")
    if "user_id" in obj and (isinstance(obj["user_id"], bool) or
                             not isinstance(obj["user_id"], (str, int))):
        raise Invalid("bad_user_id_type")
    op = obj.get("op", "like")
    if not isinstance(op, str):
        raise Invalid("bad_op_type")
    if op not in ("like", "unlike"):
        raise Invalid("unknown_op")
    if "ts" in obj:
        ts = obj["ts"]
        if isinstance(ts, bool) or not isinstance(ts, int) or not -2**63 <= ts < 2**63:
            raise Invalid("bad_ts")
    if "event_id" in obj and not isinstance(obj["event_id"], str):
        raise Invalid("bad_event_id_type")
    return post, (1 if op == "like" else -1)


def read_topic(brokers, topic, fn, isolation="read_committed"):
    """Calls fn(msg) for every message from the first to the current last offset."""
    c = Consumer({"bootstrap.servers": brokers, "group.id": "oracle-reader",
                  "enable.auto.commit": False, "isolation.level": isolation,
                  "enable.partition.eof": True})
    md = c.list_topics(topic, timeout=30)
    if topic not in md.topics or md.topics[topic].error:
        raise SystemExit(f"oracle: topic {topic} not found")
    parts = sorted(md.topics[topic].partitions)
    ends = {}
    assign = []
    for p in parts:
        lo, hi = c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
        if hi > lo:
            ends[p] = hi
            assign.append(TopicPartition(topic, p, lo))
    c.assign(assign)
    remaining = set(ends)
    last_progress = time.monotonic()
    while remaining:
        # consume() waits for a full batch or the timeout: keep the timeout short and bound
        # the time without progress instead
        msgs = c.consume(num_messages=10000, timeout=0.5)
        if msgs:
            last_progress = time.monotonic()
        elif time.monotonic() - last_progress > 30:
            raise SystemExit(f"oracle: no progress reading {topic}; left {sorted(remaining)}")
        for m in msgs:
            if m.error():
                if m.error().code() == -191:  # _PARTITION_EOF
                    remaining.discard(m.partition())
                    continue
                raise SystemExit(f"oracle: {m.error()}")
            if m.partition() in remaining and m.offset() < ends[m.partition()]:
                fn(m)
            if m.offset() + 1 >= ends.get(m.partition(), 0):
                remaining.discard(m.partition())
    c.close()
    return ends


def dynamodb_counts(uri):
    """(post_id bytes, likes) of every item of the store's counts table, read with boto3 (a
    strongly consistent Scan), independently of hotcount's own reader."""
    import urllib.parse

    import boto3

    parsed = urllib.parse.urlsplit(uri)
    region = parsed.netloc or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    prefix = parsed.path.lstrip("/") or "hotcount_"
    endpoint = urllib.parse.parse_qs(parsed.query).get("endpoint", [None])[0]
    client = boto3.client("dynamodb", region_name=region, endpoint_url=endpoint)
    for page in client.get_paginator("scan").paginate(TableName=prefix + "counts",
                                                      ConsistentRead=True):
        for item in page["Items"]:
            yield item["post_id"]["S"].encode(), int(item["likes"]["N"])


def cassandra_counts(uri, problems):
    """(post_id bytes, likes) of every row of the store's hotcount_counts, read with the Python
    driver (cassandra-driver), independently of hotcount's own reader; then the readers' own
    query, `SELECT likes FROM <ks>.hotcount_counts WHERE post_id = ?`, for the 1000 largest
    counts, which must give the same values (docs/CASSANDRA.md: one row per post, one plain
    query)."""
    import urllib.parse

    from cassandra import ConsistencyLevel
    from cassandra.auth import PlainTextAuthProvider
    from cassandra.cluster import Cluster
    from cassandra.query import SimpleStatement

    parsed = urllib.parse.urlsplit(uri)
    userinfo, _, hosts = parsed.netloc.rpartition("@")
    user, _, password = userinfo.partition(":")
    points = []
    port = 9042
    for h in hosts.split(","):
        host, _, p = h.rpartition(":") if h.count(":") == 1 else (h, "", "")
        points.append(host or h)
        port = int(p) if p else port
    ks = parsed.path.lstrip("/")
    auth = PlainTextAuthProvider(urllib.parse.unquote(user), urllib.parse.unquote(password)) \
        if user else None
    cluster = Cluster(points, port=port, auth_provider=auth)
    session = cluster.connect()
    rows = []
    scan = SimpleStatement(f"SELECT post_id, likes FROM {ks}.hotcount_counts", fetch_size=5000,
                           consistency_level=ConsistencyLevel.LOCAL_QUORUM)
    for row in session.execute(scan):
        rows.append((row.post_id.encode(), row.likes))
    one = session.prepare(f"SELECT likes FROM {ks}.hotcount_counts WHERE post_id = ?")
    one.consistency_level = ConsistencyLevel.LOCAL_QUORUM
    for post, n in sorted(rows, key=lambda r: -r[1])[:1000]:
        got = list(session.execute(one, (post.decode(),)))
        if len(got) != 1 or got[0].likes != n:
            problems.append(f"post {post!r}: the readers' query gives {got}, the scan {n}")
    cluster.shutdown()
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--brokers", required=True)
    ap.add_argument("--raw", required=True)
    ap.add_argument("--dlq", required=True)
    ap.add_argument("--group", required=True, help="stage 1's consumer group")
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--store-dump", help="`hotcount get --all` output (TSV)")
    where.add_argument("--store-dynamodb", metavar="URI",
                       help="a dynamodb://REGION/PREFIX?endpoint=URL store: its counts table is "
                       "scanned with boto3, not through hotcount")
    where.add_argument("--store-cassandra", metavar="URI",
                       help="a cassandra://[user:pw@]host:port/KEYSPACE store: hotcount_counts is "
                       "read with the Python driver, not through hotcount")
    ap.add_argument("--max-bytes", type=int, default=4096)
    ap.add_argument("--min-events", type=int, default=0)
    ap.add_argument("--counts-topic", help="the changelog topic: its latest total per post must "
                    "equal the store's")
    args = ap.parse_args()
    problems = []

    counts = {}
    invalid = {}  # source "topic/partition/offset" -> (reason, bytes)
    valid = [0]

    def count(m):
        try:
            post, delta = validate(m.value(), args.max_bytes)
        except Invalid as e:
            invalid[f"{m.topic()}/{m.partition()}/{m.offset()}"] = (str(e), m.value())
            return
        valid[0] += 1
        counts[post] = counts.get(post, 0) + delta

    ends = read_topic(args.brokers, args.raw, count)
    print(f"oracle: {args.raw}: {valid[0]} valid, {len(invalid)} malformed, "
          f"{len(counts)} posts")
    if valid[0] + len(invalid) < args.min_events:
        problems.append(f"only {valid[0] + len(invalid)} events in {args.raw}")

    stored = {}
    if args.store_cassandra:
        for post, n in cassandra_counts(args.store_cassandra, problems):
            if post in stored:
                problems.append(f"hotcount_counts lists {post!r} twice")
            stored[post] = n
    elif args.store_dynamodb:
        for post, n in dynamodb_counts(args.store_dynamodb):
            if post in stored:
                problems.append(f"the counts table lists {post!r} twice")
            stored[post] = n
    else:
        with open(args.store_dump, "rb") as f:
            for line in f:
                post, _, n = line.rstrip(b"\n").rpartition(b"\t")
                if post in stored:
                    problems.append(f"store dump lists {post!r} twice")
                stored[post] = int(n)
    mismatches = 0
    for post in set(counts) | set(stored):
        want, got = counts.get(post, 0), stored.get(post, 0)
        if want != got:
            mismatches += 1
            if mismatches <= 20:
                problems.append(f"post {post.decode(errors='replace')}: recount {want}, store {got}")
    if mismatches:
        problems.append(f"{mismatches} posts differ")
    print(f"oracle: store: {len(stored)} posts, {mismatches} mismatches")

    dlq = {}

    def dead(m):
        hdrs = dict(m.headers() or [])
        src = (hdrs.get("hotcount-source") or b"").decode()
        reason = (hdrs.get("hotcount-error") or b"").decode()
        if src in dlq:
            problems.append(f"dead letter for {src} appears twice")
        dlq[src] = (reason, m.value())

    read_topic(args.brokers, args.dlq, dead)
    missing = set(invalid) - set(dlq)
    extra = set(dlq) - set(invalid)
    for src in sorted(missing)[:10]:
        problems.append(f"malformed {src} ({invalid[src][0]}) is not in {args.dlq}")
    for src in sorted(extra)[:10]:
        problems.append(f"{args.dlq} holds {src}, which is valid or unknown")
    wrong_bytes = sum(1 for s in set(dlq) & set(invalid)
                      if dlq[s][1] != invalid[s][1] and len(invalid[s][1] or b"") <= args.max_bytes)
    no_reason = sum(1 for s in dlq if not dlq[s][0])
    if wrong_bytes:
        problems.append(f"{wrong_bytes} dead letters do not carry the original bytes")
    if no_reason:
        problems.append(f"{no_reason} dead letters lack a hotcount-error reason")
    print(f"oracle: {args.dlq}: {len(dlq)} records, {len(missing)} missing, {len(extra)} extra")

    if args.counts_topic:
        latest = {}

        def changelog(m):
            rec = json.loads(m.value())
            if rec["post_id"].encode() != m.key():
                problems.append(f"changelog record keyed {m.key()!r} holds {rec['post_id']!r}")
            latest[m.key()] = rec["likes"]  # one post, one partition: offsets order its records

        # read_committed, as every reader of topic.counts must (docs/FORMATS.md): each batch's
        # totals are one transaction, and a zombie's, aborted by the group's fence, may land
        # after its successor's committed totals; read_uncommitted takes the aborted record as
        # the latest (a chaos run reported "changelog says 0, store 1" for such a record)
        read_topic(args.brokers, args.counts_topic, changelog)
        stale = [p for p in set(stored) | set(latest) if latest.get(p, 0) != stored.get(p, 0)]
        for p in stale[:10]:
            problems.append(f"changelog says {p!r} has {latest.get(p, 0)}, store {stored.get(p, 0)}")
        print(f"oracle: {args.counts_topic}: {len(latest)} posts, {len(stale)} differ from the store")

    c = Consumer({"bootstrap.servers": args.brokers, "group.id": args.group,
                  "enable.auto.commit": False})
    committed = c.committed([TopicPartition(args.raw, p) for p in sorted(ends)], timeout=30)
    c.close()
    behind = [(tp.partition, tp.offset, ends[tp.partition]) for tp in committed
              if tp.offset != ends[tp.partition]]
    for p, got, want in behind[:10]:
        problems.append(f"{args.group} committed {args.raw}/{p} at {got}, end is {want}")
    print(f"oracle: {args.group}: committed offsets of {len(ends)} partitions, "
          f"{len(behind)} not at the end")

    if problems:
        print("oracle: FAILED")
        for p in problems:
            print("  " + p)
        return 1
    print("oracle: exact")
    return 0


if __name__ == "__main__":
    sys.exit(main())
