#!/usr/bin/env bash
# The layer guard: builds each probe of tests/layers/CMakeLists.txt in this build tree and checks
# the outcome and the message. A wrong-way include must fail to compile with "No such file", a
# core executable that calls librdkafka must fail to link, the right-way probe must build, and
# the two mutant probes (the layering broken on purpose) must build, which shows that the
# checks above are able to fail.
set -u
cmake=${1:?usage: check_layers.sh CMAKE BUILD_DIR}
build=${2:?usage: check_layers.sh CMAKE BUILD_DIR}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0

build_probe() { # target: the build tool's exit status, its output in $tmp/out
    "$cmake" --build "$build" --target "layers_$1" >"$tmp/out" 2>&1
}

fail() {
    echo "FAIL $1"
    sed 's/^/     /' "$tmp/out" | tail -n 20
    fails=$((fails + 1))
}

must_not_compile() { # probe header
    local probe=$1 header=$2
    if build_probe "$probe"; then
        fail "$probe: built, but its layer must not see $header"
    elif ! grep -q -e "$header: No such file" -e "'$header' file not found" "$tmp/out"; then
        # gcc says "X: No such file or directory", clang "'X' file not found"
        fail "$probe: failed, but not with \"$header: No such file\""
    else
        echo "ok   $probe: $header: No such file"
    fi
}

must_not_link() { # probe symbol
    local probe=$1 symbol=$2
    if build_probe "$probe"; then
        fail "$probe: linked, but its layer must not link $symbol"
    elif grep -Eq "$probe\.c:[0-9]+:[0-9]+: (fatal )?error" "$tmp/out"; then
        fail "$probe: failed to compile, not to link"
    elif ! grep -q -e "undefined reference to \`$symbol'" -e "undefined symbol: $symbol" \
        "$tmp/out"; then
        # GNU ld: "undefined reference to `X'"; lld: "undefined symbol: X"
        fail "$probe: failed, but not with an undefined reference to $symbol"
    else
        echo "ok   $probe: undefined reference to $symbol"
    fi
}

# The test-only library (src/store/testing/: hc_store_testing) and the HC_TEST_ switches stay out
# of the product: none of its functions in the binary, no HC_TEST_ string in it.
test_code_in() { # binary: prints what it finds
    nm "$1" | grep -o -w -e 'hc_store_dynamodb_set_test_hooks' -e 'hc_store_dynamodb_test_peek' \
        -e 'hc_store_dynamodb_meter' -e 'hc_store_dynamodb_usage' | sort -u
    strings "$1" | grep -o 'HC_TEST_[A-Z_]*' | sort -u
}

must_hold_no_test_code() { # binary
    local found
    found=$(test_code_in "$1")
    if [ ! -x "$1" ]; then
        echo "FAIL $1: no such program"
        fails=$((fails + 1))
    elif [ -n "$found" ]; then
        echo "FAIL $1 holds test-only code: $(echo $found)"
        fails=$((fails + 1))
    else
        echo "ok   $(basename "$1"): no test-only function, no HC_TEST_ switch"
    fi
}

must_build() { # probe why
    if build_probe "$1"; then
        echo "ok   $1: builds ($2)"
    else
        fail "$1: does not build ($2)"
    fi
}

must_not_compile core_includes_kafka hotcount/kafka.h
must_not_compile core_includes_store hotcount/store.h
must_not_compile base_includes_store hotcount/store.h
must_not_compile stage_includes_store_impl store_impl.h
must_not_compile kafka_includes_store hotcount/store.h
must_not_compile store_includes_stage hotcount/stage.h
must_not_compile obs_includes_kafka hotcount/kafka.h
must_not_link core_calls_rdkafka rd_kafka_version
must_build stage_includes_below "stage sees kafka.h, store.h and stage.h"
must_build mutant_core_sees_kafka "the core probe compiles once hc_kafka is linked: the check can fail"
must_build mutant_core_links_rdkafka "the core probe links once librdkafka is added: the check can fail"
must_hold_no_test_code "$build/hotcount"
if build_probe mutant_product_links_testing &&
    [ -n "$(test_code_in "$build/tests/layers/layers_mutant_product_links_testing")" ]; then
    echo "ok   mutant_product_links_testing: its test-only code is found (the check can fail)"
else
    fail "mutant_product_links_testing: did not build, or its test-only code went unseen"
fi

if [ "$fails" -ne 0 ]; then
    echo "$fails layer check(s) failed"
    exit 1
fi
echo "every layer check passed"
