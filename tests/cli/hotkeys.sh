#!/usr/bin/env bash
# `hotcount hotkeys` against `hotcount mock-broker` (in-process, no real server): a declared post
# is in the hot set before any like, from its start to its expiry; a later declaration is
# "scheduled"; undeclare ends it; bad times and keys exit 2. The listing is read as JSON.
set -u
hc=${1:?usage: hotkeys.sh path/to/hotcount}
tmp=$(mktemp -d)
broker_pid=
serve_pid=
cleanup() {
    [ -n "$serve_pid" ] && kill "$serve_pid" 2>/dev/null && wait "$serve_pid" 2>/dev/null
serve_pid=
    [ -n "$broker_pid" ] && kill "$broker_pid" 2>/dev/null && wait "$broker_pid" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
fails=0

"$hc" mock-broker >"$tmp/broker" 2>"$tmp/broker.err" &
broker_pid=$!
for _ in $(seq 100); do
    [ -s "$tmp/broker" ] && break
    sleep 0.1
done
brokers=$(head -1 "$tmp/broker")
[ -n "$brokers" ] || { echo "FAIL mock broker did not start"; cat "$tmp/broker.err"; exit 1; }
hk() { "$hc" hotkeys -X "brokers=$brokers" "$@"; }

check() { # name expected_status expected_output_regex -- command...
    local name=$1 want=$2 pattern=$3
    shift 4
    "$@" >"$tmp/out" 2>"$tmp/err"
    local got=$?
    if [ "$got" != "$want" ]; then
        echo "FAIL $name: exit $got, want $want"; cat "$tmp/out" "$tmp/err"; fails=$((fails + 1)); return
    fi
    if [ -n "$pattern" ] && ! grep -Eq -- "$pattern" "$tmp/out" "$tmp/err"; then
        echo "FAIL $name: output lacks /$pattern/"; cat "$tmp/out" "$tmp/err"; fails=$((fails + 1)); return
    fi
    echo "ok   $name"
}

# state of POST in the JSON listing ("none" when absent): state/source/salts
state_of() {
    hk list --json | python3 -c '
import json, sys
doc = json.load(sys.stdin)
rows = [r for r in doc["hot"] if r["post"] == sys.argv[1]]
print("none" if not rows else "%s/%s/%s" % (rows[0]["state"], rows[0]["source"], rows[0].get("salts", "-")))
' "$1"
}

expect_state() { # name post want
    local got
    got=$(state_of "$2")
    if [ "$got" = "$3" ]; then echo "ok   $1"; else echo "FAIL $1: $2 is $got, want $3"; fails=$((fails + 1)); fi
}

check help_names_the_verbs 0 'usage: hotcount hotkeys .*declare POST' -- "$hc" hotkeys --help
check main_help_lists_hotkeys 0 'hotkeys +list the hot posts' -- "$hc" --help
now_ms=$(date +%s%3N)
check empty_set_lists_nothing 0 '0 hot or scheduled' -- hk
check declare_needs_until 2 'always expires' -- hk declare p1
check declare_rejects_bad_time 2 'a time is ms since the epoch' -- hk declare p1 --until tomorrow
check declare_rejects_past_until 2 'in the future' -- hk declare p1 --until 1000
check declare_rejects_bad_salts 2 'salts' -- hk declare p1 --until 2099-01-01 --salts 0
check declare_rejects_bad_post 2 'POST' -- hk declare "$(printf 'a\tb')" --until 2099-01-01
check leave_rate_over_enter_rate_exits_2 2 'hotkeys.leave.rate .* hotkeys.enter.rate' -- \
    hk -X hotkeys.enter.rate=100 -X hotkeys.leave.rate=100

# no like of "final" was ever produced: the declaration alone makes it hot
check declare_now 0 'declared final hot' -- hk declare final --until "$((now_ms + 3600000))" --salts 32
expect_state declared_post_is_hot_before_any_like final hot/declared/32
check declare_later 0 'declared later' -- hk declare later --from 2098-01-01T20:00Z --until 2098-01-01T23:00Z
expect_state later_declaration_is_scheduled later scheduled/declared/-
# expires in 5 s: hot now, gone once its --until has passed (and not before)
short_until=$(($(date +%s%3N) + 5000))
check declare_short 0 'declared short' -- hk declare short --until "$short_until"
expect_state short_declaration_is_hot short hot/declared/-
for _ in $(seq 30); do
    [ "$(state_of short)" = none ] && break
    sleep 0.5
done
gone_at=$(date +%s%3N)
if [ "$(state_of short)" = none ] && [ "$gone_at" -ge "$short_until" ]; then
    echo "ok   expired_declaration_is_dropped"
else
    echo "FAIL expired_declaration_is_dropped: $(state_of short) at $gone_at, until $short_until"
    fails=$((fails + 1))
fi
check undeclare 0 'undeclared later' -- hk undeclare later
expect_state undeclared_post_is_dropped later none
# issue 25, item 4: the undeclared post's key ends with a tombstone, so compaction forgets it
if kcat -C -b "$brokers" -t likes.hotkeys -e -q -f '%k %S\n' 2>/dev/null | tail -n 1 |
    grep -qx 'declared:later -1'; then
    echo "ok   undeclare_writes_a_tombstone"
else
    echo "FAIL undeclare_writes_a_tombstone: $(kcat -C -b "$brokers" -t likes.hotkeys -e -q -f '%k %S\n' 2>&1 | tail -n 3)"
    fails=$((fails + 1))
fi
expect_state others_stay final hot/declared/32
check text_listing_shows_source 0 '^final	hot	declared	0	' -- hk list
check unknown_verb_is_usage 2 'subcommand' -- hk frobnicate
# --watch: a JSON object per refresh until SIGINT, each with the declared post
timeout -s INT 4 "$hc" hotkeys -X "brokers=$brokers" --watch --json --interval 200 >"$tmp/watch" 2>"$tmp/watch.err"
if python3 -c '
import json, sys
docs = [json.loads(l) for l in open(sys.argv[1])]
assert len(docs) >= 2, len(docs)
assert all(any(r["post"] == "final" for r in d["hot"]) for d in docs)
' "$tmp/watch"; then echo "ok   watch_refreshes"; else echo "FAIL watch_refreshes"; cat "$tmp/watch.err"; fails=$((fails + 1)); fi

# serve follows topic.hotkeys (brokers set): the declared post is read-hot from a read, before
# any read rate could make it so (source "topic"); a post the topic does not name is not.
"$hc" init --no-topics -X store=sqlite:"$tmp/serve.db" >/dev/null 2>&1 ||
    { echo "FAIL init_for_serve"; fails=$((fails + 1)); }
"$hc" serve -X "brokers=$brokers" -X store=sqlite:"$tmp/serve.db" -X serve.listen=127.0.0.1:0 \
    >"$tmp/serve.url" 2>"$tmp/serve.err" &
serve_pid=$!
for _ in $(seq 100); do [ -s "$tmp/serve.url" ] && break; sleep 0.1; done
url=$(head -1 "$tmp/serve.url")
# before any read: GET /v1/hotkeys already names the declared post (from the topic, with its
# source and expiry), and /v1/stats' hot set shows it as declared (no stage runs here)
unread=
for _ in $(seq 50); do # until the follower has caught up
    curl -s "${url}v1/hotkeys" >"$tmp/hotkeys0.json"
    curl -s "${url}v1/stats" >"$tmp/stats0.json"
    if python3 -c '
import json, sys
doc = json.load(open(sys.argv[1]))
rows = {r["post_id"]: r for r in doc["posts"]}
r = rows["final"]
assert r["source"] == "topic" and r["topic_source"] == "declared" and r["expires"] > r["since"]
assert doc["topic_total"] == 1 and doc["total"] == 0  # nothing read-hot yet
st = json.load(open(sys.argv[2]))
d = [p for p in st["hot_set"] if p["post_id"] == "final"]
assert len(d) == 1 and d[0]["source"] == "declared" and d[0]["likes_per_second"] is None
' "$tmp/hotkeys0.json" "$tmp/stats0.json" 2>/dev/null; then unread=1; break; fi
    sleep 0.2
done
if [ -n "$unread" ]; then
    echo "ok   serve_lists_a_declared_post_before_its_first_read"
else
    echo "FAIL serve_lists_a_declared_post_before_its_first_read"
    cat "$tmp/hotkeys0.json" "$tmp/stats0.json" "$tmp/serve.err"
    fails=$((fails + 1))
fi
listed=
for _ in $(seq 50); do # until the follower has caught up
    curl -s "${url}v1/likes/final" "${url}v1/likes/cold" >/dev/null
    curl -s "${url}v1/hotkeys" >"$tmp/hotkeys.json"
    if python3 -c '
import json, sys
doc = json.load(open(sys.argv[1]))
rows = {r["post_id"]: r for r in doc["posts"]}
assert rows["final"]["source"] == "topic" and rows["final"]["ttl_ms"] == doc["hot_ttl_ms"] == 1000
assert "cold" not in rows and doc["enter_rate"] == 200 and doc["leave_rate"] == 100
' "$tmp/hotkeys.json" 2>/dev/null; then listed=1; break; fi
    sleep 0.2
done
curl -s "${url}metrics" >"$tmp/serve.metrics"
if [ -n "$listed" ] && grep -q '^hotcount_serve_hot_promotions_total{source="topic"} 1$' "$tmp/serve.metrics" &&
    grep -q '^hotcount_serve_hot_posts 1$' "$tmp/serve.metrics"; then
    echo "ok   serve_promotes_a_declared_post_up_front"
else
    echo "FAIL serve_promotes_a_declared_post_up_front"; cat "$tmp/hotkeys.json" "$tmp/serve.err"
    fails=$((fails + 1))
fi
kill "$serve_pid" 2>/dev/null && wait "$serve_pid" 2>/dev/null
serve_pid=

[ "$fails" = 0 ] || { echo "$fails failed"; exit 1; }
echo "all passed"
