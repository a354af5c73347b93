#!/usr/bin/env bash
# Cross-builds tapegrad for aarch64 and runs the kernel tests (NEON vs the scalar reference) under
# qemu-user. Needs g++-aarch64-linux-gnu and qemu-user (tools/install_deps.sh --ci). qemu runs with
# -cpu max, a core with FEAT_BF16 (HWCAP2_BF16), so the BFMMLA bf16 GEMM is tested too, beside the
# widen path; its speed on real hardware is not measured here.
#   tools/test_neon.sh                 configure build-aarch64 once, build the ops tests, run them
#   tools/test_neon.sh -tc='gemm.*'    extra arguments go to the doctest binary
# qemu runs NEON code ~90x slower than native, so the qemu run trims the largest shapes
# (TAPEGRAD_TEST_QUICK=1: about half the time of the full ops suite there); the trimmed
# GEMM shapes still cross every NEON cache block (MC 128, KC 256 / 512 for bf16, NC 2048) with
# partial blocks. TAPEGRAD_TEST_QUICK=0 tools/test_neon.sh runs the full shapes.
set -euo pipefail
cd "$(dirname "$0")/.."
for tool in aarch64-linux-gnu-g++ qemu-aarch64; do
  command -v "$tool" >/dev/null || { echo "test_neon.sh: $tool not found (run tools/install_deps.sh --ci)" >&2; exit 2; }
done
build=build-aarch64
[ -f "$build/build.ninja" ] ||
  meson setup "$build" --cross-file tools/aarch64-cross.txt -Dapps=false -Dexamples=false -Dbench=false --buildtype=release
ninja -C "$build" tests/ops/test_ops
# The BFMMLA peak loop of bench_kernels (bench/ is not part of the cross build): compiled with the
# flags of ops/arch_neon_bf16.cpp, never run here (qemu's speed says nothing about real cores).
aarch64-linux-gnu-g++ -std=c++20 -O2 -march=armv8.2-a+bf16 -Wall -Wextra -Wpedantic -Werror -I. \
  -c bench/peak_neon_bf16.cpp -o "$build/peak_neon_bf16.o"
export OMP_NUM_THREADS=2
export TAPEGRAD_TEST_QUICK="${TAPEGRAD_TEST_QUICK-1}"
# qemu-user shows the host's /proc/cpuinfo: say what the emulated CPU has (dispatch.available.matches_the_cpu
# fails unless neon is offered). The x86 archs' cases (not compiled into this build) are left out.
export TAPEGRAD_TEST_EXPECT_ARCHS=scalar,neon
# A core without FEAT_BF16 first: the dispatcher must keep the bf16 GEMM on the widen path there
# (dispatch.bf16.paths checks it against the CPU's HWCAP2_BF16).
qemu-aarch64 -cpu cortex-a72 -L /usr/aarch64-linux-gnu "$build/tests/ops/test_ops" --test-case='dispatch.*'
[ $# -gt 0 ] || set -- '--test-case-exclude=*.sse2.*,*.avx2.*,*.avx512.*'
exec qemu-aarch64 -cpu max -L /usr/aarch64-linux-gnu "$build/tests/ops/test_ops" "$@"
