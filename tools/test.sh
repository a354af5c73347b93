#!/usr/bin/env bash
# Second command of the README: install what is missing, build, run the whole test suite, then say
# which test cases were skipped and why (tools/check_test_results.py; .ci/run makes that check
# strict: there, everything that can run on the machine must have run).
#   tools/test.sh [meson test arguments, e.g. ops nn]
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install_deps.sh
[ -f build/build.ninja ] || meson setup build --buildtype=release
ninja -C build
# Each test binary writes one JSON line per test case here (tests/test_main.cpp).
rm -rf build/test-results
export TAPEGRAD_TEST_RESULTS="$PWD/build/test-results"
rc=0
meson test -C build --print-errorlogs "$@" || rc=$?
[ $# -gt 0 ] || tools/check_test_results.py build --report-only
exit "$rc"
