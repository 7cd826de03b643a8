#!/usr/bin/env bash
# Fuzzes the read API's request parsing (fuzz/fuzz_http.c: serve_parse.c's routing, percent-
# decoding, ?ids= and ?n=, and http_guard.c's framing rule): fuzz/run.sh http, under the name
# CTest (fuzz_http_short) and the docs use.
#
#   fuzz/http.sh [SECONDS]            build into build-fuzz/, fuzz SECONDS (default 30), report
#   fuzz/http.sh --ctest [SECONDS]    the same, quiet, for CTest (default 20 s; fuzz_http_short)
#   fuzz/http.sh --run FILE...        replay inputs through the target
set -euo pipefail
exec "$(dirname "$0")/run.sh" http "$@"
