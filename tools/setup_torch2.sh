#!/usr/bin/env bash
# Creates (once) the PyTorch 2.x virtualenv bench_kernels compares the bf16 GEMM with: PyTorch 2.x
# runs bf16 matmul on oneDNN's AVX512_BF16 / AMX kernels, which Debian's torch 1.13 does not.
#   tools/setup_torch2.sh [DIR]     DIR defaults to $TAPEGRAD_TORCH_VENV, else ~/.cache/tapegrad-torch2
# Idempotent: an existing venv that imports torch >= 2 is left as it is. The wheel from PyPI pulls
# about 3 GB of CUDA libraries; the CPU path needs no GPU. bench_kernels uses DIR/bin/python when it
# exists (or pass --python DIR/bin/python); tools/bench_torch_kernels.py runs under it.
set -euo pipefail
dir="${1:-${TAPEGRAD_TORCH_VENV:-$HOME/.cache/tapegrad-torch2}}"
has_torch2() {
  "$dir/bin/python" -c 'import sys, torch; sys.exit(0 if int(torch.__version__.split(".")[0]) >= 2 else 1)' \
    >/dev/null 2>&1
}
if [ -x "$dir/bin/python" ] && has_torch2; then
  echo "setup_torch2: $dir already has torch $("$dir/bin/python" -c 'import torch; print(torch.__version__)')"
  exit 0
fi
command -v python3 >/dev/null || { echo "setup_torch2: python3 not found" >&2; exit 2; }
[ -x "$dir/bin/python" ] || python3 -m venv "$dir" || {
  echo "setup_torch2: python3 -m venv failed (Debian: apt-get install python3-venv)" >&2
  exit 2
}
"$dir/bin/pip" install torch numpy
has_torch2 || { echo "setup_torch2: torch >= 2 does not import in $dir" >&2; exit 1; }
echo "setup_torch2: $dir has torch $("$dir/bin/python" -c 'import torch; print(torch.__version__)')"
