#!/usr/bin/env bash
# Second command of the README: install what is missing, build, run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install_deps.sh
[ -f build/build.ninja ] || meson setup build --buildtype=release
ninja -C build
meson test -C build --print-errorlogs "$@"
