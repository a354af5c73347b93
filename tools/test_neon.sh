#!/usr/bin/env bash
# Cross-builds tapegrad for aarch64 and runs the kernel tests (NEON vs the scalar reference) under
# qemu-user. Needs g++-aarch64-linux-gnu and qemu-user (tools/install_deps.sh --ci).
#   tools/test_neon.sh                 configure build-aarch64 once, build the ops tests, run them
#   tools/test_neon.sh -tc='gemm.*'    extra arguments go to the doctest binary
# qemu runs NEON code ~90x slower than native; the full ops suite still takes ~20 s there.
# TAPEGRAD_TEST_QUICK=1 trims the largest test shapes if that ever grows.
set -euo pipefail
cd "$(dirname "$0")/.."
for tool in aarch64-linux-gnu-g++ qemu-aarch64; do
  command -v "$tool" >/dev/null || { echo "test_neon.sh: $tool not found (run tools/install_deps.sh --ci)" >&2; exit 2; }
done
build=build-aarch64
[ -f "$build/build.ninja" ] ||
  meson setup "$build" --cross-file tools/aarch64-cross.txt -Dexamples=false -Dbench=false --buildtype=release
ninja -C "$build" tests/ops/test_ops
export OMP_NUM_THREADS=2
# qemu-user shows the host's /proc/cpuinfo: say what the emulated CPU has (dispatch.available.matches_the_cpu
# fails unless neon is offered). The x86 archs' cases (not compiled into this build) are left out.
export TAPEGRAD_TEST_EXPECT_ARCHS=scalar,neon
[ $# -gt 0 ] || set -- '--test-case-exclude=*.sse2.*,*.avx2.*,*.avx512.*'
exec qemu-aarch64 -L /usr/aarch64-linux-gnu "$build/tests/ops/test_ops" "$@"
