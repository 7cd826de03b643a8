# shellcheck shell=bash
# The fault tests' common part, sourced by tests/faults/*.sh (never run by itself): a namespace
# of its own per run, the store, the stages as children of the calling script, their metrics,
# bounded waits, the deadline, and the end-of-run checks (hotcount verify, clean SIGTERM exits,
# the oracle, tally.py, tiling.py).
#
#   . "$here/lib.sh"
#   hcf_init NAME HOTCOUNT STORE      # STORE sqlite|redis|postgresql|dynamodb; after any of the
#                                     # HCF_* knobs below; sets the globals listed next
#   hcf_deadline SECONDS              # SIGALRM (a failed run) after SECONDS
#   start_stage stage1|stage2 ID [-X key=value]...   stop_stage ID   wait_assigned ID SECONDS
#   wait_all_assigned ID...           # each within 60 s, or the run fails
#   windows ID   windowed_since ID N  # windows an instance finished (commits or stored batches)
#   unflushed_ms ID                   # how long its consumed input has waited for a flush (0: none)
#   sample_of ID NAME [LABELS]        # one metric of an instance (docs/EVENTS.md), as an integer
#   events ID NAME                    # its log's events NAME (docs/EVENTS.md), one JSON per line
#   event_field ID NAME FIELD         # that field of each of those events, one per line
#   start_producer EVENTS RATE SEED [produce options]   producer_done (reaps it, must exit 0)
#   wait_for SECONDS STEP COMMAND...  # a bounded wait on a condition
#   hcf_finish EVENTS                 # every check; sets $lost, $duplicated; fails the run
#                                     # unless they are 0 and the oracle (and tiling) exact
#   hcf_pass                          # the run passed: its namespace and work dir are removed
#   hcf_status FILE [opts]  hcf_status_start FILE [opts]  hcf_status_says FILE [CAUSE]...
#                                     # `hotcount status --json` of the run, and its causes
#
# Globals after hcf_init: hc (the binary), run (unique id), work (a work directory), schema
# (PostgreSQL), store (the store URI), cfg (-c PROPS), store_kind, t0, raw_partitions and
# partials_partitions (read from the broker after `hotcount init`). Per instance id: pid_of,
# log_of (current incarnation's log, log.format=json), url_of (metrics URL, on a port this
# script chose), kind_of, gen_of; live maps every unreaped child pid to what it is.
#
# The scripts read state, never log sentences: the stages' metrics (/metrics) and JSON log
# events, by the fixed names of docs/EVENTS.md; partition counts come from the broker.
#
# Hooks (function names): hcf_pre_store runs in hcf_init before the store is set up (it may
# start a private server and export HC_TEST_REDIS_URI / HC_TEST_PG_URI); hcf_on_exit runs on
# every exit once our processes are gone; hcf_private_store=1: the store is private to the run
# (its namespace is not cleaned up separately).
#
# Group knobs (for any script): HC_GROUP_PROTOCOL=classic|consumer, HC_GROUP_STATIC=1 (see
# group_props below).
# Knobs: HCF_FLUSH_MS (300), HCF_PARTIALS_PARTITIONS (8), HCF_PROPS (extra lines for the
# properties file), HCF_CHANGELOG=strict|report|off (topic.counts checked by the oracle / only
# reported by tally.py / not read), HCF_TILING=1 (topic.manifest on, and tests/faults/tiling.py
# must find that stage 1's committed offset ranges tile every raw partition exactly once).
# HC_FAULT_KEEP=1 keeps the work directory, which a failing run always keeps (every
# incarnation's log: ID.N.log) and prints.

# hc_store_uri: the store of a namespace, as the integration tests make it
# shellcheck source-path=SCRIPTDIR source=../integration/namespace.sh
. "$(dirname "${BASH_SOURCE[0]}")/../integration/namespace.sh"
# hc_free_port: a port for each stage's metrics endpoint
# shellcheck source-path=SCRIPTDIR source=../harness/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../harness/lib.sh"

hcf_name=${hcf_name:-faults}
ok=''     # set by hcf_pass
guard=''  # the deadline's pid
status=0
declare -A live=() pid_of=() log_of=() url_of=() kind_of=() gen_of=()

say() { printf '%s\n' "$*"; }
usage() { # the calling script's header comment (line 2 up to `set -`), then exit 2
    sed -n '2,/^set -/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
    exit 2
}
hcf_stream() { # default-events default-seconds: sets events, seconds, rate (events/s), seed
    events=${HC_FAULT_EVENTS:-$1}
    seconds=${HC_FAULT_SECONDS:-$2}
    rate=$(((events + seconds - 1) / seconds))
    seed=${HC_FAULT_SEED:-$(((RANDOM << 15 | RANDOM) + 1))}
}
elapsed() { # seconds since hcf_init, one decimal
    local ms=$(($(date +%s%3N) - t0))
    printf '%d.%d' $((ms / 1000)) $((ms % 1000 / 100))
}

# bash reaps exited children by itself and keeps their status for `wait`, so an exited child's
# pid may already belong to someone else: signal a pid only while it is still our child.
ours() { # pid
    [ "$(ps -o ppid= -p "$1" 2>/dev/null | tr -d ' ')" = "$$" ]
}
reap() { # pid: waits for it, forgets it, sets $status
    status=0
    wait "$1" 2>/dev/null || status=$?
    unset "live[$1]"
}

# Runs a command in the background and waits for it, so that the deadline's signal interrupts
# the wait at once (bash runs traps only between foreground commands).
run_waiting() {
    "$@" &
    local pid=$!
    live[$pid]="$1"
    reap "$pid"
    return "$status"
}

# Waits for a condition (a command) every STEP seconds for at most SECONDS; status 1 on timeout.
wait_for() { # seconds step command...
    local limit=$(($(date +%s%3N) + $1 * 1000)) step=$2
    shift 2
    until "$@"; do
        [ "$(date +%s%3N)" -lt "$limit" ] || return 1
        sleep "$step"
    done
}

hcf_cleanup() {
    local rc=$? pid n
    trap - EXIT TERM INT HUP ALRM
    [ -z "$guard" ] || { kill -TERM "$guard" 2>/dev/null || true; wait "$guard" 2>/dev/null || true; }
    for pid in "${!live[@]}"; do # a SIGSTOPped stage must be able to act on SIGTERM
        ! ours "$pid" || { kill -CONT "$pid" 2>/dev/null; kill -TERM "$pid" 2>/dev/null; } || true
    done
    # up to 15 s for a clean exit, then SIGKILL whatever of ours is left
    for ((n = 0; n < 150; n++)); do
        for pid in "${!live[@]}"; do
            ours "$pid" || reap "$pid"
        done
        [ ${#live[@]} -gt 0 ] || break
        sleep 0.1
    done
    for pid in "${!live[@]}"; do
        ! ours "$pid" || kill -KILL "$pid" 2>/dev/null || true
        reap "$pid"
    done
    if [ -n "$ok" ] && [ -z "${HC_FAULT_KEEP:-}" ]; then
        [ -n "${hcf_private_store:-}" ] || case "$store_kind" in # a private server goes whole
        postgresql) psql -q "$HC_TEST_PG_URI" -c "DROP SCHEMA IF EXISTS $schema CASCADE" >/dev/null 2>&1 || true ;;
        redis)
            redis-cli -u "$HC_TEST_REDIS_URI" --scan --pattern "f$run:*" |
                xargs -r -n 1000 redis-cli -u "$HC_TEST_REDIS_URI" del >/dev/null 2>&1 || true
            redis-cli -u "$HC_TEST_REDIS_URI" del "hotcount:offsets:g$run-stage2" >/dev/null 2>&1 || true
            ;;
        esac
        [ -z "${hcf_on_exit:-}" ] || "$hcf_on_exit" || true
        rm -rf "$work"
    else
        [ -z "${hcf_on_exit:-}" ] || "$hcf_on_exit" || true
        say "$hcf_name: work directory with every log kept: $work"
    fi
    exit "$rc"
}

# Kafka's transaction coordinator, loading its state just after the broker restarted, can find
# a transaction of ours half-way through its commit (PREPARE_COMMIT) and send its markers before
# the broker's metadata knows the partitions: it then takes them for deleted topics, skips their
# markers and calls the transaction complete ("Couldn't find leader endpoint for partitions ...
# likely deleted already"). The transaction hangs on partitions that exist: every read_committed
# reader of them (stage 2 on partials, a stage 1 reading its group's committed offsets) stands
# still until an operator aborts it (docs/RUNBOOK.md, "A hanging transaction"); no client can.
# hotcount reports it (partition_stalled, with the reason) but cannot move, so a run that meets
# it judges nothing: fail reports it as skipped (exit 77, CTest's SKIP_RETURN_CODE), never as
# passed. True when the broker's log (next to HC_TEST_KAFKA_CTL: the harness's broker, or
# chaos.sh's private one) has that line for this run's topics.
hcf_broker_skipped_markers() {
    local log
    [ -n "${HC_TEST_KAFKA_CTL:-}" ] && [ -n "${run:-}" ] || return 1
    log=$(dirname "$HC_TEST_KAFKA_CTL")/server.log
    [ -f "$log" ] && grep -q "Couldn't find leader endpoint for partitions.*f$run\." "$log"
}

fail() {
    say "FAIL: $*"
    local id
    for id in "${!log_of[@]}"; do
        say "--- last lines of $id (${log_of[$id]}):"
        # for the reader only: the per-window lines left out are noise here
        grep -v 'committed window\|stored batch\| is hot\|cooled down' "${log_of[$id]}" | tail -n 15 || true
    done
    if hcf_broker_skipped_markers; then
        say "SKIPPED, not judged: the broker skipped the markers of a transaction after its restart (Kafka's defect, hcf_broker_skipped_markers):"
        grep "Couldn't find leader endpoint for partitions.*f$run\." \
            "$(dirname "$HC_TEST_KAFKA_CTL")/server.log" | cut -c1-400 >&2
        exit 77
    fi
    exit 1
}

hcf_deadline() { # seconds: the whole run's bound; SIGALRM to this script, which then stops all
    local s=$1
    trap 'say "FAIL: no result within '"$s"' s (HC_FAULT_TIMEOUT)"; exit 1' ALRM
    (
        trap 'kill -TERM "$p" 2>/dev/null; exit 0' TERM
        sleep "$s" &
        p=$!
        wait "$p" && kill -ALRM $$
    ) &
    guard=$!
}

# The stages' group settings: HC_GROUP_PROTOCOL=classic (default) or consumer (KIP-848, where
# the broker times sessions: group.consumer.session.timeout.ms=6000 in tests/harness/kafka-ctl),
# HC_GROUP_STATIC=1 for static membership (group.instance.id = instance.id).
group_props() {
    case "${HC_GROUP_PROTOCOL:-classic}" in
    classic) printf '%s\n' group.protocol=classic kafka.consumer.session.timeout.ms=6000 \
        kafka.consumer.heartbeat.interval.ms=1000 ;;
    consumer) printf '%s\n' group.protocol=consumer ;;
    *) fail "HC_GROUP_PROTOCOL=${HC_GROUP_PROTOCOL}: classic or consumer" ;;
    esac
    [ -z "${HC_GROUP_STATIC:-}" ] || printf '%s\n' group.static=1
}

hcf_init() { # name hotcount store-kind
    hcf_name=$1
    hc=$(realpath "$2")
    store_kind=$3
    : "${HC_TEST_BROKERS:?run under tests/harness/with-servers --kafka}"
    flush_ms=${HCF_FLUSH_MS:-300}
    local partials_wanted=${HCF_PARTIALS_PARTITIONS:-8}
    run=$(date +%s%N | tail -c 9)-$$
    schema=hc_${run//-/_}
    work=$(mktemp -d "${TMPDIR:-/tmp}/hc-$hcf_name.XXXXXX")
    t0=$(date +%s%3N)
    trap hcf_cleanup EXIT
    trap 'say "FAIL: unexpected status $? at line $LINENO: $BASH_COMMAND"' ERR
    trap 'say "FAIL: interrupted"; exit 130' INT HUP
    trap 'say "FAIL: terminated"; exit 143' TERM

    [ -z "${hcf_pre_store:-}" ] || "$hcf_pre_store" # e.g. a private store server in $work
    hc_store_uri "$store_kind" || fail "unknown store $store_kind" # schema: $schema

    cat >"$work/hotcount.properties" <<PROPS
brokers=$HC_TEST_BROKERS
topic.raw=f$run.raw
topic.partials=f$run.partials
topic.dlq=f$run.dlq
topic.counts=f$run.counts
topic.hotkeys=f$run.hotkeys
topic.partials.partitions=$partials_wanted
group.stage1=g$run-stage1
group.stage2=g$run-stage2
store=$store
store.redis.prefix=f$run:
flush.ms=$flush_ms
$(group_props)
log.level=warn
${HCF_PROPS:-}
PROPS
    # Stage 1 writes one manifest record (its consumed offset ranges) into each transaction;
    # tiling.py checks at the end that the committed ones tile every raw partition exactly once.
    [ -z "${HCF_TILING:-}" ] || echo "topic.manifest=f$run.manifest" >>"$work/hotcount.properties"
    cfg=(-c "$work/hotcount.properties")
    txn_record run "g$run-stage1"
    run_waiting "$hc" init "${cfg[@]}" >/dev/null || fail "hotcount init"
    raw_partitions=$(topic_partitions "f$run.raw") || fail "the broker does not list f$run.raw"
    partials_partitions=$(topic_partitions "f$run.partials") ||
        fail "the broker does not list f$run.partials"
}

# The partition count of a topic, as the broker's metadata says; status 1 when it has none.
topic_partitions() { # topic
    local n
    n=$(kcat -L -J -b "$HC_TEST_BROKERS" -t "$1" -m 10 2>/dev/null | python3 -c '
import json, sys
t = [t for t in json.load(sys.stdin).get("topics", []) if t.get("topic") == sys.argv[1]]
print(len(t[0].get("partitions", [])) if t and not t[0].get("error") else 0)' "$1") || n=0
    [ "${n:-0}" -gt 0 ] || return 1
    printf '%s\n' "$n"
}

# Records for tests/faults/txn_ids.sh, in the harness's directory that the fault tests of one
# with-servers run share: this run's group.stage1, and each stage-1 instance.id it starts.
txn_record() { # run|stage1 group [instance-id]
    [ -z "${HC_TEST_SERVERS_DIR:-}" ] || printf '%s\n' "$*" >>"$HC_TEST_SERVERS_DIR/fault-txn-ids"
}

# --- stages --------------------------------------------------------------------------------
start_stage() { # kind instance-id [-X key=value]...: a new incarnation, logging JSON at info
    local kind=$1 id=$2 log port pid attempt
    shift 2
    [ "$kind" != stage1 ] || txn_record stage1 "g$run-stage1" "$id"
    # The metrics port is ours to choose (hc_free_port), so nothing is read from the log. A port
    # taken between the choice and the stage's bind makes the stage exit 2 at once: pick again.
    for ((attempt = 1; ; attempt++)); do
        gen_of[$id]=$((${gen_of[$id]:-0} + 1))
        log=$work/$id.${gen_of[$id]}.log
        port=$(hc_free_port)
        "$hc" "$kind" "${cfg[@]}" -X instance.id="$id" -X metrics.listen="127.0.0.1:$port" \
            -X log.level=info -X log.format=json "$@" 2>"$log" &
        pid=$!
        live[$pid]="$kind $id"
        log_of[$id]=$log
        wait_listening "$pid" "$port" && break
        reap "$pid"
        [ "$status" -eq 2 ] && [ "$attempt" -lt 3 ] && continue
        fail "$id (pid $pid) exited $status before it served metrics on port $port"
    done
    pid_of[$id]=$pid
    kind_of[$id]=$kind
    url_of[$id]=http://127.0.0.1:$port/metrics
}

# Waits until process PID listens on 127.0.0.1:PORT (its own socket, found through /proc, so a
# stranger on that port does not count); status 1 when PID exits first, fails after 60 s.
wait_listening() { # pid port
    local hex inode n
    hex=$(printf '0100007F:%04X' "$2")
    for ((n = 0; n < 1200; n++)); do
        ours "$1" || return 1
        inode=$(awk -v a="$hex" '$2 == a && $4 == "0A" { print $10; exit }' /proc/net/tcp)
        if [ -n "$inode" ] && [ "$inode" != 0 ] &&
            find "/proc/$1/fd" -lname "socket:\[$inode\]" 2>/dev/null | grep -q .; then
            return 0
        fi
        sleep 0.05
    done
    fail "pid $1 does not listen on port $2 after 60 s"
}

# Waits until process PID runs the binary EXE and catches SIGTERM (bit 15 of SigCgt in
# /proc/PID/status): from then on a SIGTERM reaches hotcount's own handler. Before it, between
# fork, exec and main, the default action ends the process (status 143) with nothing opened.
# Status 1 when PID exits first; fails after 30 s.
wait_catching_term() { # pid exe
    local mask limit=$(($(date +%s) + 30))
    while [ "$(date +%s)" -le "$limit" ]; do
        ours "$1" || return 1
        if [ "$(readlink "/proc/$1/exe" 2>/dev/null)" = "$2" ]; then
            mask=$(awk '$1 == "SigCgt:" { print $2 }' "/proc/$1/status" 2>/dev/null)
            if [ -n "$mask" ] && (((16#$mask >> 14) & 1)); then return 0; fi
        fi
        sleep 0.002
    done
    fail "pid $1 does not catch SIGTERM 30 s after its start"
}

stop_stage() { # instance-id: SIGTERM; it must exit 0
    local pid=${pid_of[$1]}
    kill -TERM "$pid"
    reap "$pid"
    [ "$status" -eq 0 ] || fail "$1 (pid $pid) exited $status on SIGTERM, want 0"
    unset "pid_of[$1]"
}

running() { # the instance ids with a live process, sorted
    local id
    for id in "${!pid_of[@]}"; do printf '%s\n' "$id"; done | sort
}

scrape() { # instance-id: the metrics text, or nothing
    curl -s --max-time 2 "${url_of[$1]}" 2>/dev/null || true
}
scrape_sure() { # instance-id: the metrics text; status 1 when the live instance does not answer
    local n text
    for ((n = 0; n < 10; n++)); do
        text=$(curl -sf --max-time 2 "${url_of[$1]}" 2>/dev/null) && {
            printf '%s\n' "$text"
            return 0
        }
        ours "${pid_of[$1]}" || return 1
        sleep 0.2
    done
    return 1
}
metric() { # text name-with-labels: the sample's value as an integer (0 when absent)
    awk -v n="$2" '$1 == n { v = $2 } END { printf "%d\n", v + 0 }' <<<"$1"
}
metric_sum() { # text name-prefix: the sum of every sample whose name starts with it
    awk -v n="$2" 'index($1, n) == 1 { v += $2 } END { printf "%d\n", v + 0 }' <<<"$1"
}
assigned() { # instance-id: partitions its stage holds now
    local s=1
    [ "${kind_of[$1]}" = stage2 ] && s=2
    metric "$(scrape "$1")" "hotcount_assigned_partitions{stage=\"$s\"}"
}
wait_assigned() { # instance-id seconds: until it holds partitions; status 1 on timeout
    local n
    for ((n = 0; n < $2 * 5; n++)); do
        ours "${pid_of[$1]}" || fail "$1 (pid ${pid_of[$1]}) exited"
        [ "$(assigned "$1")" -gt 0 ] && return 0
        sleep 0.2
    done
    return 1
}
wait_all_assigned() { # instance-id...: until each holds partitions (60 s each), or the run fails
    local id
    for id; do
        wait_assigned "$id" 60 || fail "$id holds no partitions 60 s after its start"
    done
}
sample_of() { # instance-id name [labels]: one sample of its metrics as an integer (0 when absent);
    # status 1 (and no output) when it does not answer: a baseline must not silently be 0
    local text
    text=$(scrape_sure "$1") || return 1
    metric "$text" "$2${3:-}"
}
windows() { # instance-id: windows it finished (committed transactions or stored batches)
    if [ "${kind_of[$1]}" = stage1 ]; then
        sample_of "$1" hotcount_transactions_total '{outcome="commit"}'
    else
        sample_of "$1" hotcount_store_batches_total '{outcome="commit"}'
    fi
}
windowed_since() { # instance-id count: it finished more windows than count
    local n
    n=$(windows "$1") || return 1
    [ "$n" -gt "$2" ]
}
unflushed_ms() { # instance-id: how long its consumed input has waited for a successful flush
    local s=1
    [ "${kind_of[$1]}" = stage2 ] && s=2
    scrape_sure "$1" | awk -v n="hotcount_unflushed_input_seconds{stage=\"$s\"}" \
        '$1 == n { v = $2 } END { printf "%d\n", v * 1000 }'
}
# The events NAME (docs/EVENTS.md) in an instance's current log, one JSON object per line. Lines
# that are not JSON (a sanitizer report, say) are skipped.
events() { # instance-id event-name
    python3 -c '
import json, sys
for line in open(sys.argv[1], errors="replace"):
    try:
        ev = json.loads(line)
    except ValueError:
        continue
    if isinstance(ev, dict) and ev.get("event") == sys.argv[2]:
        print(json.dumps(ev))' "${log_of[$1]}" "$2"
}
event_field() { # instance-id event-name field: that field of each such event, one per line
    events "$1" "$2" | python3 -c '
import json, sys
for line in sys.stdin:
    print(json.loads(line).get(sys.argv[1], ""))' "$3"
}
log_lines_of_area() { # instance-id area: how many JSON log lines its current log has from area
    python3 -c '
import json, sys
n = 0
for line in open(sys.argv[1], errors="replace"):
    try:
        n += json.loads(line).get("area") == sys.argv[2]
    except (ValueError, AttributeError):
        pass
print(n)' "${log_of[$1]}" "$2"
}
vmrss_kb() { # pid: its resident set in kB (0 when gone)
    awk '/^VmRSS:/ { print $2; f = 1 } END { if (!f) print 0 }' "/proc/$1/status" 2>/dev/null || echo 0
}

# --- the stream ----------------------------------------------------------------------------
start_producer() { # events rate seed [produce options]: Zipfian, 5 % unlikes, 0.2 % malformed
    local events=$1 rate=$2 seed=$3
    shift 3
    "$hc" produce "${cfg[@]}" --events "$events" --rate "$rate" --posts 100000 --zipf 1.1 \
        --unlike-ratio 0.05 --invalid-ratio 0.002 --seed "$seed" "$@" >"$work/produce.log" 2>&1 &
    producer=$!
    live[$producer]=produce
}
producer_done() { # reaps the producer; fails the run unless it exited 0
    reap "$producer"
    [ "$status" -eq 0 ] || { cat "$work/produce.log"; fail "hotcount produce exited $status"; }
    say "producer done at +$(elapsed) s: $(tail -n 1 "$work/produce.log")"
}

# --- the checks ----------------------------------------------------------------------------
# verify exact; every running stage exits 0 on SIGTERM; `get --all`; the oracle exact (counts,
# dead letters, stage 1's offsets, the changelog per HCF_CHANGELOG); tally.py 0 lost and 0
# duplicated; with HCF_TILING, tiling.py exact. Sets lost, duplicated, oracle_status,
# tally_status, tiling_status; fails the run on any miss unless HCF_FINISH_REPORT_ONLY=1 (the
# caller then prints its summary first and calls hcf_check_exact).
hcf_finish() { # events
    local events=$1 id here_
    here_=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
    local verify_status=0
    run_waiting "$hc" verify "${cfg[@]}" --timeout 300 >"$work/verify.log" 2>"$work/verify.err" ||
        verify_status=$?
    tail -n 3 "$work/verify.log"
    # exit 0 only when every count matches (docs/FORMATS.md, "Exit status")
    [ "$verify_status" -eq 0 ] || fail "hotcount verify exited $verify_status, not 0 (exact counts)"
    say "verify exact at +$(elapsed) s"
    for id in $(running); do
        kill -CONT "${pid_of[$id]}" 2>/dev/null || true
        kill -TERM "${pid_of[$id]}"
    done
    for id in $(running); do
        reap "${pid_of[$id]}"
        [ "$status" -eq 0 ] || fail "$id exited $status on SIGTERM, want 0"
        unset "pid_of[$id]"
    done
    say "every stage exited 0 on SIGTERM"

    run_waiting "$hc" get --all "${cfg[@]}" >"$work/store.tsv" || fail "hotcount get --all"
    local changelog=() tally_changelog=()
    case "${HCF_CHANGELOG:-strict}" in
    strict) changelog=(--counts-topic "f$run.counts") ;;
    report) tally_changelog=(--counts-topic "f$run.counts") ;;
    esac
    oracle_status=0
    # DynamoDB, Cassandra: the oracle reads the counts table itself (boto3, the Python driver),
    # not hotcount's dump
    local store_arg=(--store-dump "$work/store.tsv")
    [ "$store_kind" != dynamodb ] || store_arg=(--store-dynamodb "$store")
    [ "$store_kind" != cassandra ] || store_arg=(--store-cassandra "$store")
    run_waiting python3 "$here_/../oracle/oracle.py" --brokers "$HC_TEST_BROKERS" --raw "f$run.raw" \
        --dlq "f$run.dlq" --group "g$run-stage1" "${store_arg[@]}" \
        --min-events "$events" "${changelog[@]}" || oracle_status=$?
    tally_status=0
    run_waiting python3 "$here_/tally.py" --brokers "$HC_TEST_BROKERS" --raw "f$run.raw" \
        --store-dump "$work/store.tsv" "${tally_changelog[@]}" >"$work/tally.log" || tally_status=$?
    cat "$work/tally.log"
    lost=$(sed -n 's/^tally: lost=\([0-9]*\) .*/\1/p' "$work/tally.log")
    duplicated=$(sed -n 's/^tally: .*duplicated=\([0-9]*\) .*/\1/p' "$work/tally.log")
    lost=${lost:-?} duplicated=${duplicated:-?}
    tiling_status=0
    if [ -n "${HCF_TILING:-}" ]; then
        run_waiting python3 "$here_/tiling.py" --brokers "$HC_TEST_BROKERS" --raw "f$run.raw" \
            --manifest "f$run.manifest" --partials "f$run.partials" >"$work/tiling.log" ||
            tiling_status=$?
        head -n 5 "$work/tiling.log"
    fi
    [ -n "${HCF_FINISH_REPORT_ONLY:-}" ] || hcf_check_exact
}
hcf_check_exact() {
    [ "$oracle_status" -eq 0 ] || fail "the oracle found the counts inexact"
    [ "$tally_status" -eq 0 ] || fail "tally: likes lost or double-counted"
    [ "$tiling_status" -eq 0 ] || fail "tiling: committed offset ranges do not tile the raw topic"
}
hcf_pass() { ok=1; }

# --- hotcount status of this run's pipeline (docs/RUNBOOK.md) -------------------------------
hcf_status_start() { # file [status options]...: `hotcount status --json` into file, in the
    local file=$1 #    background: status_pid (`reap "$status_pid"` sets $status, its exit)
    shift
    "$hc" status "${cfg[@]}" --json "$@" >"$file" 2>>"$work/status.err" &
    status_pid=$!
    live[$status_pid]=status
}
hcf_status() { # file [status options]...: the same in the foreground
    hcf_status_start "$@"
    reap "$status_pid"
}
# The report in file (exit status $status) says healthy when no cause is given, else degraded
# with exactly the causes given; a group named NAME_no_members (stage1|stage2) lists no member.
hcf_status_says() { # file cause...
    python3 - "$status" "$@" <<'EOF'
import json, sys
rc, path, want = int(sys.argv[1]), sys.argv[2], sorted(sys.argv[3:])
try:
    r = json.load(open(path))
except ValueError:
    sys.exit(f"status exited {rc} with no JSON report")
got = sorted(r.get("causes", []))
ok = got == want and rc == (1 if want else 0) and r.get("healthy") is (not want)
for c in want:
    if c.endswith("_no_members"):
        ok = ok and r.get(c[: -len("_no_members")], {}).get("members") == []
if not ok:
    sys.exit(f"status exited {rc} with causes {got}, want {want}")
EOF
}
