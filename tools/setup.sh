#!/usr/bin/env bash
# First command of the README: install what is missing, configure, build, train the copy task.
# Idempotent: a second run skips the installs and the configure step and rebuilds only what changed.
# With no arguments the copy task keeps its log in copy.jsonl and draws its loss curves into
# copy.loss.svg; arguments go to copy_task instead (e.g. tools/setup.sh --json).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install_deps.sh
[ -f build/build.ninja ] || meson setup build --buildtype=release
ninja -C build
[ $# -gt 0 ] || set -- --log copy.jsonl
exec build/examples/copy_task "$@"
