#!/usr/bin/env bash
# A mutant must be caught: runs COMMAND (a test program built with one HC_MUTANT, or a test
# script given such a binary) and passes only when COMMAND fails and its output matches every
# PATTERN (extended regexes naming the checks that must catch the mutant), so that a crash, a
# timeout or a failure of some other check does not count as the catch.
#   expect_fail.sh PATTERN... -- COMMAND...
set -u
pats=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do
    pats+=("$1")
    shift
done
[ $# -gt 1 ] && [ ${#pats[@]} -gt 0 ] || {
    echo "usage: expect_fail.sh PATTERN... -- COMMAND..." >&2
    exit 2
}
shift
out=$(mktemp)
trap 'rm -f "$out"' EXIT
status=0
"$@" >"$out" 2>&1 </dev/null || status=$?
if [ "$status" -eq 0 ]; then
    tail -20 "$out"
    echo "FAIL: the mutant was not caught: $* passed"
    exit 1
fi
if [ "$status" -gt 128 ]; then
    tail -20 "$out"
    echo "FAIL: $* died of signal $((status - 128)), which is no catch"
    exit 1
fi
for pat in "${pats[@]}"; do
    if ! grep -Eq -- "$pat" "$out"; then
        tail -20 "$out"
        echo "FAIL: $* failed (exit $status) but its output has no /$pat/"
        exit 1
    fi
done
grep -E -- "${pats[0]}" "$out" | head -5
echo "caught: exit $status, every pattern found (${pats[*]})"
