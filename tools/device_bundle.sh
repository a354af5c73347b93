#!/usr/bin/env bash
# Packs what the AMX / many-core checks need into .devbundle/ (git-ignored), for a machine without this
# project's build: the test and benchmark binaries of BUILD_DIR, stripped, with Debian's loader and the
# libraries they link, as one xz tarball (under 10 MB), and tools/device_check.sh beside it.
#   tools/device_bundle.sh [BUILD_DIR]      (default build; build it first: ninja -C build)
# Then, on the other machine, from a copy of the repository with .devbundle/ in it:
#   bash tools/device_check.sh [quick]      (the results in $OUT or /tmp/out: log.txt, kernels.json)
# The programs run there as lib/ld-linux-x86-64.so.2 --library-path lib bin/<program>: nothing of
# Debian's needs installing there, only python3 with torch for the PyTorch comparisons.
set -euo pipefail
build=${1:-build}
cd "$(dirname "$0")/.."
bins=("$build/tests/ops/test_ops" "$build/tests/autograd/test_autograd" "$build/tests/nn/test_nn" "$build/bench/bench_kernels"
      "$build/bench/bench_train" "$build/bench/bench_lm")
for b in "${bins[@]}"; do [ -x "$b" ] || { echo "device_bundle.sh: $b missing (ninja -C $build)" >&2; exit 1; }; done
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib" .devbundle
cp "${bins[@]}" "$stage/bin/"
strip "$stage"/bin/*
for l in $(ldd "${bins[@]}" | awk '/=>/ {print $3}' | sort -u) /lib64/ld-linux-x86-64.so.2; do cp -L "$l" "$stage/lib/"; done
# The checkout the tests were built in: they find their Python scripts there (TG_SOURCE_DIR)
pwd > "$stage/source_dir"
tar -C "$stage" -cf - bin lib source_dir | xz -T2 -6 > .devbundle/b.tar.xz
echo "device_bundle.sh: .devbundle/b.tar.xz, $(du -h .devbundle/b.tar.xz | cut -f1) ($(git rev-parse --short HEAD))"
