#!/usr/bin/env bash
# First command of the README: install what is missing, configure, build, train the copy task.
# Idempotent: a second run skips the installs and the configure step and rebuilds only what changed.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install_deps.sh
[ -f build/build.ninja ] || meson setup build --buildtype=release
ninja -C build
exec build/examples/copy_task "$@"
