#!/usr/bin/env bash
# Runs the dispatch tests and the autograd suite under qemu-x86_64, whose CPU model ("max" in
# QEMU 7.2) has AVX2 and FMA but no AVX-512. The release build holds an AVX-512 table; on a CPU
# without those instructions it must be skipped (and refused with a message when forced), never
# entered. This checks that on every CI machine, AVX-512 or not. Needs qemu-user (install_deps --ci).
#   tools/test_x86_without_avx512.sh [build dir, default build]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
[ "$(uname -m)" = x86_64 ] || { echo "test_x86_without_avx512.sh: x86_64 only" >&2; exit 2; }
command -v qemu-x86_64 >/dev/null || { echo "test_x86_without_avx512.sh: qemu-x86_64 not found (run tools/install_deps.sh --ci)" >&2; exit 2; }
ninja -C "$build" tests/ops/test_ops tests/autograd/test_autograd
export OMP_NUM_THREADS=2
qemu-x86_64 -cpu max "$build/tests/ops/test_ops" --test-case='dispatch.*'
qemu-x86_64 -cpu max "$build/tests/autograd/test_autograd"
