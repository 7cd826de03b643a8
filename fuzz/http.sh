#!/usr/bin/env bash
# Fuzzes the read API's request parsing (fuzz/fuzz_http.c: serve_parse.c's routing, percent-
# decoding, ?ids= and ?n=, and http_guard.c's framing rule) with libFuzzer, ASan and UBSan:
#
#   fuzz/http.sh [SECONDS]            build into build-fuzz/, fuzz SECONDS (default 30), report
#   fuzz/http.sh --ctest [SECONDS]    the same, quiet, for CTest (default 20 s; fuzz_http_short)
#   fuzz/http.sh --run FILE...        replay inputs through the target
#
# Like tools/fuzz (the event fuzzer): clang with libFuzzer (Debian: clang, libclang-rt-14-dev),
# a fresh copy of the seeds fuzz/corpus/http/ per run, the dictionary fuzz/http.dict, findings
# left in build-fuzz/artifacts-http/ and a non-zero exit status.
set -euo pipefail
cd "$(dirname "$0")/.."
out=$PWD/build-fuzz
bin=$out/fuzz_http
mode=fuzz
case ${1:-} in
--ctest) mode=ctest; shift ;;
--run) mode=run; shift ;;
esac
seconds=${1:-}
if [ "$mode" != run ]; then
    [ -n "$seconds" ] || { [ "$mode" = ctest ] && seconds=20 || seconds=30; }
    [[ $seconds =~ ^[1-9][0-9]*$ ]] || { echo "fuzz/http.sh: SECONDS must be a positive integer" >&2; exit 2; }
fi
cc=${HC_FUZZ_CC:-clang}
command -v "$cc" >/dev/null || { echo "fuzz/http.sh: $cc not found (clang, libclang-rt-14-dev)" >&2; exit 1; }

mkdir -p "$out/artifacts-http"
srcs=(src/serve/serve_parse.c src/core/event.c src/core/err.c src/base/clock.c src/base/log.c
      src/obs/http_guard.c fuzz/fuzz_http.c)
read -r -a mhd_cflags <<<"$(pkg-config --cflags libmicrohttpd)"
read -r -a mhd_libs <<<"$(pkg-config --libs libmicrohttpd)"
# shellcheck disable=SC2054 # the commas belong to -fsanitize=
flags=(-std=c11 -D_GNU_SOURCE -g -O1 -fno-omit-frame-pointer
       -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
       -Wall -Wextra -Wpedantic -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wformat=2
       -Wvla -Werror -Iinclude/core -Iinclude/base -Iinclude/obs -Iinclude/serve)
tmp_bin=$bin.tmp.$$
if ! "$cc" "${flags[@]}" "${mhd_cflags[@]}" "${srcs[@]}" -o "$tmp_bin" "${mhd_libs[@]}" \
    -lpthread -lm 2>"$out/build-http.log"; then
    cat "$out/build-http.log" >&2
    rm -f "$tmp_bin"
    echo "fuzz/http.sh: build failed" >&2
    exit 1
fi
mv -f "$tmp_bin" "$bin"
export ASAN_OPTIONS=detect_leaks=1:strict_string_checks=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
if [ "$mode" = run ]; then
    exec "$bin" -runs=1 "$@"
fi
corpus=$(mktemp -d "$out/http-corpus.XXXXXX")
log=$corpus.log
trap 'rm -rf "$corpus" "$log"' EXIT
cp fuzz/corpus/http/* "$corpus/"
before=$(find "$out/artifacts-http" -type f | wc -l)
status=0
"$bin" "$corpus" -dict=fuzz/http.dict -max_len=4096 -timeout=5 -rss_limit_mb=2048 \
    -max_total_time="$seconds" -print_final_stats=1 -artifact_prefix="$out/artifacts-http/" \
    -error_exitcode=77 -timeout_exitcode=78 >"$log" 2>&1 || status=$?
execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
echo "fuzz_http: ${execs:-?} executions in $seconds s"
after=$(find "$out/artifacts-http" -type f | wc -l)
if [ "$status" -ne 0 ] || [ "$after" -ne "$before" ] ||
    grep -qE 'ERROR: (AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer|libFuzzer)|==== fuzz_http:|runtime error:' "$log"; then
    echo "fuzz_http: FAILED (exit status $status)"
    sed -n '/==== fuzz_http:\|ERROR: \|runtime error:/,$p' "$log" | grep -vE '^#[0-9]+ ' | head -n 60
    echo "replay: fuzz/http.sh --run build-fuzz/artifacts-http/<file>"
    [ "$status" -ne 0 ] || status=1
    exit "$status"
fi
echo "fuzz_http: no findings"
