#!/usr/bin/env bash
# Runs the dispatch tests and the autograd suite under qemu-x86_64, whose CPU model ("max" in
# QEMU 7.2) has AVX2 and FMA but no AVX-512. The release build holds an AVX-512 table; on a CPU
# without those instructions it must be left out (and refused with a message when forced), never
# entered. This checks that on every CI machine, AVX-512 or not. Needs qemu-user (install_deps --ci).
# TAPEGRAD_TEST_EXPECT_ARCHS tells dispatch.available.matches_the_cpu what the emulated CPU has
# (qemu-user shows the host's /proc/cpuinfo): the test fails unless exactly scalar, sse2 and avx2 are
# offered and avx512 is refused as "this CPU lacks its instructions".
#   tools/test_x86_without_avx512.sh [build dir, default build]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
[ "$(uname -m)" = x86_64 ] || { echo "test_x86_without_avx512.sh: x86_64 only" >&2; exit 2; }
command -v qemu-x86_64 >/dev/null || { echo "test_x86_without_avx512.sh: qemu-x86_64 not found (run tools/install_deps.sh --ci)" >&2; exit 2; }
ninja -C "$build" tests/ops/test_ops tests/autograd/test_autograd
export OMP_NUM_THREADS=2
TAPEGRAD_TEST_EXPECT_ARCHS=scalar,sse2,avx2 qemu-x86_64 -cpu max "$build/tests/ops/test_ops" --test-case='dispatch.*'
qemu-x86_64 -cpu max "$build/tests/autograd/test_autograd"
