#!/usr/bin/env bash
# Builds and runs one of the libFuzzer targets below with ASan and UBSan:
#
#   fuzz/run.sh TARGET [SECONDS]          build build-fuzz/fuzz_TARGET, fuzz SECONDS (default 30)
#   fuzz/run.sh TARGET --ctest [SECONDS]  the same, quiet, for CTest (default 20 s)
#   fuzz/run.sh TARGET --run FILE...      replay inputs through the target
#
#   http  fuzz/fuzz_http.c: the read API's request parsing and the listeners' framing rule
#         (also as fuzz/http.sh)
#   prom  fuzz/fuzz_prom.c: the reader of Prometheus text (status, serve's stats, the hot-keys
#         scrape)
#   pack  fuzz/fuzz_pack.c: the packed partials decoder; after the run, every input of the
#         corpus it grew is decoded by the Python reference too (tests/unit/
#         test_partial_pack_diff.py --corpus), and any difference fails the run
#
# The event parser has its own script, tools/fuzz. Like it: clang with libFuzzer (Debian:
# clang, libclang-rt-14-dev), a fresh copy of the seeds fuzz/corpus/TARGET/ per run, the
# dictionary fuzz/TARGET.dict when there is one, findings left in build-fuzz/artifacts-TARGET/
# and a non-zero exit status.
set -euo pipefail
cd "$(dirname "$0")/.."
usage() {
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
    exit 2
}
[ $# -ge 1 ] || usage
target=$1
shift
me="fuzz/run.sh $target"
out=$PWD/build-fuzz
bin=$out/fuzz_$target
mode=fuzz
case ${1:-} in
--ctest) mode=ctest; shift ;;
--run) mode=run; shift ;;
esac
seconds=${1:-}
if [ "$mode" != run ]; then
    [ -n "$seconds" ] || { [ "$mode" = ctest ] && seconds=20 || seconds=30; }
    [[ $seconds =~ ^[1-9][0-9]*$ ]] || { echo "$me: SECONDS must be a positive integer" >&2; exit 2; }
fi
cc=${HC_FUZZ_CC:-clang}
command -v "$cc" >/dev/null || { echo "$me: $cc not found (clang, libclang-rt-14-dev)" >&2; exit 1; }

cflags=()
libs=()
case $target in
http)
    srcs=(src/serve/serve_parse.c src/core/percent.c src/core/event.c src/core/utf8.c
          src/core/siphash.c src/core/err.c src/base/clock.c src/base/log.c src/obs/http_guard.c
          fuzz/fuzz_http.c)
    includes=(-Iinclude/core -Iinclude/base -Iinclude/obs -Iinclude/serve)
    # The libmicrohttpd CMake links: with HC_DEPS=debian-testing (tools/install-deps) Debian
    # testing's 1.0 from the cache when the system's is older.
    mhd_prefix=''
    if [ "${HC_DEPS:-debian-testing}" != system ] &&
        ! pkg-config --atleast-version=1.0 libmicrohttpd 2>/dev/null; then
        mhd_prefix=$(tools/debian-source --prefix libmicrohttpd)
    fi
    [ -z "$mhd_prefix" ] || export PKG_CONFIG_PATH=$mhd_prefix/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
    read -r -a cflags <<<"$(pkg-config --cflags libmicrohttpd)"
    read -r -a libs <<<"$(pkg-config --libs libmicrohttpd)"
    [ -z "$mhd_prefix" ] || libs+=("-Wl,-rpath,$mhd_prefix/lib")
    max_len=4096
    ;;
prom)
    srcs=(src/obs/prom_text.c fuzz/fuzz_prom.c)
    includes=(-Iinclude/obs)
    max_len=65536
    ;;
pack)
    # the table too: hc_pack_encode takes table entries
    core=(src/core/partial_pack.c src/core/partial_check.c src/core/partial.c src/core/event.c
          src/core/utf8.c src/core/table.c src/core/siphash.c src/core/err.c)
    srcs=("${core[@]}" fuzz/fuzz_pack.c)
    includes=(-Iinclude/core)
    libs=(-ljansson)
    # Inputs well below HC_PACK_MAX_BYTES: re-encoding accepted entries with another
    # timestamp base can grow a record by up to 9 bytes an entry.
    max_len=65536
    ;;
*) usage ;;
esac

mkdir -p "$out/artifacts-$target"
# shellcheck disable=SC2054 # the commas belong to -fsanitize=
flags=(-std=c11 -D_GNU_SOURCE -g -O1 -fno-omit-frame-pointer
       -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
       -Wall -Wextra -Wpedantic -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wformat=2
       -Wvla -Werror "${includes[@]}")
tmp_bin=$bin.tmp.$$
if ! "$cc" "${flags[@]}" "${cflags[@]}" "${srcs[@]}" -o "$tmp_bin" "${libs[@]}" \
    -lpthread -lm 2>"$out/build-$target.log"; then
    cat "$out/build-$target.log" >&2
    rm -f "$tmp_bin"
    echo "$me: build failed" >&2
    exit 1
fi
mv -f "$tmp_bin" "$bin"
export ASAN_OPTIONS=detect_leaks=1:strict_string_checks=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
if [ "$mode" = run ]; then
    exec "$bin" -runs=1 "$@"
fi
corpus=$(mktemp -d "$out/$target-corpus.XXXXXX")
log=$corpus.log
trap 'rm -rf "$corpus" "$log"' EXIT
cp "fuzz/corpus/$target"/* "$corpus/"
dict=()
[ ! -f "fuzz/$target.dict" ] || dict=(-dict="fuzz/$target.dict")
before=$(find "$out/artifacts-$target" -type f | wc -l)
status=0
"$bin" "$corpus" "${dict[@]}" -max_len="$max_len" -timeout=5 -rss_limit_mb=2048 \
    -max_total_time="$seconds" -print_final_stats=1 -artifact_prefix="$out/artifacts-$target/" \
    -error_exitcode=77 -timeout_exitcode=78 >"$log" 2>&1 || status=$?
execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
echo "fuzz_$target: ${execs:-?} executions in $seconds s"
after=$(find "$out/artifacts-$target" -type f | wc -l)
if [ "$status" -ne 0 ] || [ "$after" -ne "$before" ] ||
    grep -qE "ERROR: (AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer|libFuzzer)|==== fuzz_$target:|runtime error:" "$log"; then
    echo "fuzz_$target: FAILED (exit status $status)"
    sed -n "/==== fuzz_$target:\|ERROR: \|runtime error:/,\$p" "$log" | grep -vE '^#[0-9]+ ' | head -n 60
    echo "replay: $me --run build-fuzz/artifacts-$target/<file>"
    [ "$status" -ne 0 ] || status=1
    exit "$status"
fi
if [ "$target" = pack ]; then
    # the grown corpus against the Python reference, through the differential test's C side
    tool=$out/pack_decode_tool
    "$cc" -std=c11 -D_GNU_SOURCE -O1 -Wall -Wextra -Werror -Iinclude/core "${core[@]}" \
        tests/support/pack_decode_tool.c -o "$tool" -ljansson -lm
    python3 tests/unit/test_partial_pack_diff.py "$tool" --corpus "$corpus" ||
        { echo "fuzz_$target: FAILED (the corpus against the Python reference)"; exit 1; }
fi
echo "fuzz_$target: no findings"
