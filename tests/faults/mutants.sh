#!/usr/bin/env bash
# Proves that the fault suite's checkers bite: builds of hotcount broken on purpose must fail the
# same check that the product passes.
#
#   mutants.sh HOTCOUNT [--build-root DIR] [MUTANT...]
#   mutants.sh HOTCOUNT [--build-root DIR] --build-only [MUTANT...]
#
# HOTCOUNT is the product binary. Each MUTANT (default: all three) is built from this source
# tree with cmake -DHC_MUTANT=<name> (RelWithDebInfo, target hotcount only) in
# DIR/build-mutant-<name> (DIR: the source tree):
#   drop_partial      stage 1 silently skips the first partial with likes of its third window
#   double_apply      the third store batch with deltas is applied twice (src/store/store.c)
#   read_uncommitted  stage 2 consumes the partials with isolation.level=read_uncommitted
# The check (one run per binary, the product first; needs tests/harness/with-servers --kafka):
# a SQLite store, one stage-1 and one stage-2 process, topic.manifest set, `hotcount produce`
# sending 60 000 Zipfian events (5 % unlikes, 0.2 % malformed) at 15 000/s; while they flow,
# tests/faults/aborted_partials.py leaves an aborted transaction of 50 partials (+1000 likes
# each) in the partials topic, as a stage 1 killed between producing its partials and committing
# would. Afterwards each checker runs and its verdict is recorded: `hotcount verify`, the oracle
# (tests/oracle/oracle.py), tests/faults/tally.py (lost, duplicated) and tests/faults/tiling.py.
# The product must pass all of them; each mutant must fail at least one. One line per binary:
#   mutant NAME: caught by CHECKERS (verify …, oracle …, tally lost=L duplicated=D, tiling …)
# Exit 0 only when the product is exact and every mutant was caught; a check that could not run
# (a stage that did not start, a timeout) is a failure, never a catch.
# --build-only builds the mutants (here also hang_store, tests/integration/watchdog.sh's) and
# runs nothing: the suite's build_mutants fixture, so the compiling happens beside the broker
# tests instead of inside their serial chain (a later build of the same tree is a no-op).
#
# Environment: HC_FAULT_KEEP=1 keeps every check's work directory (a check whose outcome was not
# the expected one always keeps it); HC_MUTANT_EVENTS (60000), HC_MUTANT_RATE (15000);
# HC_FAULT_TIMEOUT (each check's bound, 240 s).
set -Eeuo pipefail

here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
all_mutants=(drop_partial double_apply read_uncommitted)
events=${HC_MUTANT_EVENTS:-60000}
rate=${HC_MUTANT_RATE:-15000}

usage() {
    sed -n '2,/^set -/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2
    exit 2
}

# --- one check: mutants.sh --check BINARY NAME exact|inexact --------------------------------
# Prints "check NAME: verify V, oracle O, tally T, tiling G"; exit 0 when all four are exact, 1
# when a checker found a fault, other (lib.sh's fail) when the check itself could not run.
check() {
    local bin=$1 name=$2 expect=$3 verify oracle tally tiling exact=1
    # shellcheck source-path=SCRIPTDIR source=lib.sh
    . "$here/lib.sh"
    HCF_TILING=1 # topic.manifest on; this check runs tiling.py itself, below
    hcf_init "mutant-$name" "$bin" sqlite
    hcf_deadline "${HC_FAULT_TIMEOUT:-240}"
    start_stage stage1 s1-a
    start_stage stage2 s2-a
    wait_assigned s1-a 60 || fail "s1-a holds no partitions 60 s after its start"
    wait_assigned s2-a 60 || fail "s2-a holds no partitions 60 s after its start"
    start_producer "$events" "$rate" 4242
    run_waiting python3 "$here/aborted_partials.py" --brokers "$HC_TEST_BROKERS" \
        --topic "f$run.partials" || fail "aborted_partials.py"
    producer_done

    run_waiting "$hc" verify "${cfg[@]}" --timeout 120 >"$work/verify.log" 2>&1 || true
    verify=$(sed -n 's/^verify: //p' "$work/verify.log" | tail -n 1)
    [[ "$verify" == exact* ]] || exact=''
    verify=${verify:-"no verdict"}
    stop_stage s1-a
    stop_stage s2-a
    run_waiting "$hc" get --all "${cfg[@]}" >"$work/store.tsv" || fail "hotcount get --all"
    run_waiting python3 "$here/../oracle/oracle.py" --brokers "$HC_TEST_BROKERS" \
        --raw "f$run.raw" --dlq "f$run.dlq" --group "g$run-stage1" \
        --store-dump "$work/store.tsv" --min-events "$events" >"$work/oracle.log" || exact=''
    oracle=exact
    grep -q '^oracle: exact$' "$work/oracle.log" ||
        oracle="FAILED ($(sed -n 's/^oracle: store: .*, \([0-9]*\) mismatches$/\1 posts differ/p' \
            "$work/oracle.log"))"
    run_waiting python3 "$here/tally.py" --brokers "$HC_TEST_BROKERS" --raw "f$run.raw" \
        --store-dump "$work/store.tsv" >"$work/tally.log" || exact=''
    tally=$(sed -n 's/^tally: \(lost=[0-9]* duplicated=[0-9]*\).*/\1/p' "$work/tally.log")
    run_waiting python3 "$here/tiling.py" --brokers "$HC_TEST_BROKERS" --raw "f$run.raw" \
        --manifest "f$run.manifest" --partials "f$run.partials" >"$work/tiling.log" || exact=''
    tiling=$(head -n 1 "$work/tiling.log" | sed 's/^tiling: \([A-Za-z]*\).*/\1/')
    # the first 40 lines; sed reads to the end (head would leave the pipe's writers a SIGPIPE,
    # status 141 under pipefail, once the checks print more than 40 lines)
    cat "$work/verify.log" "$work/oracle.log" "$work/tally.log" "$work/tiling.log" |
        grep -v '^recounted' | sed -n 's/^/  /; 1,40p'
    say "check $name: verify ${verify%% (*}, oracle $oracle, tally ${tally:-no verdict}, tiling ${tiling:-no verdict}"
    # the run's namespace and logs go unless its outcome was a surprise
    if { [ -n "$exact" ] && [ "$expect" = exact ]; } || { [ -z "$exact" ] && [ "$expect" = inexact ]; }; then
        hcf_pass
    fi
    # exit, not return: lib.sh's EXIT trap cleans up with this status
    if [ -n "$exact" ]; then exit 0; fi
    exit 1
}

if [ "${1:-}" = --check ]; then
    [ $# -eq 4 ] || usage
    check "$2" "$3" "$4"
fi

# --- the driver ----------------------------------------------------------------------------
[ $# -ge 1 ] || usage
product=$(realpath "$1")
shift
root=$src
if [ "${1:-}" = --build-root ]; then
    root=${2:?--build-root DIR}
    shift 2
fi
build_only=0
if [ "${1:-}" = --build-only ]; then
    build_only=1
    all_mutants+=(hang_store)
    shift
fi
mutants=("$@")
[ ${#mutants[@]} -gt 0 ] || mutants=("${all_mutants[@]}")
for m in "${mutants[@]}"; do
    [[ " ${all_mutants[*]} " == *" $m "* ]] || usage
done
[ "$build_only" -eq 1 ] || : "${HC_TEST_BROKERS:?run under tests/harness/with-servers --kafka}"
t0=$SECONDS

for m in "${mutants[@]}"; do
    dir=$root/build-mutant-$m
    gen=()
    [ -f "$dir/CMakeCache.txt" ] || ! command -v ninja >/dev/null || gen=(-G Ninja)
    mkdir -p "$dir"
    cmake -S "$src" -B "$dir" "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHC_MUTANT="$m" \
        >"$dir/configure.log" 2>&1 || { cat "$dir/configure.log"; exit 1; }
    cmake --build "$dir" --target hotcount -j"$(nproc)" >/dev/null ||
        { echo "mutants: building $m failed"; exit 1; }
done
echo "mutants: built ${mutants[*]} in $((SECONDS - t0)) s"
[ "$build_only" -eq 0 ] || exit 0

failed=0
run_check() { # binary name expect: sets $line and $rc
    local log
    log=$(mktemp)
    rc=0
    "${BASH_SOURCE[0]}" --check "$1" "$2" "$3" >"$log" 2>&1 || rc=$?
    line=$(sed -n "s/^check $2: //p" "$log")
    if [ -z "$line" ] || { [ "$rc" -ne 0 ] && [ "$rc" -ne 1 ]; }; then
        echo "mutants: the check of $2 could not run (exit $rc):"
        cat "$log"
        rm -f "$log"
        exit 1
    fi
    if { [ "$rc" -eq 0 ] && [ "$3" = inexact ]; } || { [ "$rc" -eq 1 ] && [ "$3" = exact ]; }; then
        cat "$log"
    fi
    rm -f "$log"
}

run_check "$product" product exact
if [ "$rc" -eq 0 ]; then
    echo "product: exact ($line)"
else
    echo "product: NOT exact ($line)"
    failed=1
fi
for m in "${mutants[@]}"; do
    run_check "$root/build-mutant-$m/hotcount" "$m" inexact
    by=()
    [[ "$line" == "verify exact"* ]] || by+=(verify)
    [[ "$line" == *"oracle exact"* ]] || by+=(oracle)
    [[ "$line" == *"lost=0 duplicated=0"* ]] || by+=(tally)
    [[ "$line" == *"tiling exact"* ]] || by+=(tiling)
    if [ "$rc" -eq 1 ] && [ ${#by[@]} -gt 0 ]; then
        echo "mutant $m: caught by ${by[*]} ($line)"
    else
        echo "mutant $m: NOT caught ($line)"
        failed=1
    fi
done
echo "mutants: wall time $((SECONDS - t0)) s"
[ "$failed" -eq 0 ] && echo "mutants: every mutant caught, product exact"
exit "$failed"
