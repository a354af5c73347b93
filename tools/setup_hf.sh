#!/usr/bin/env bash
# Creates (once) the Hugging Face virtualenv the GPT-2 tokenizer parity test runs its Python with:
# Debian's /usr/bin/python3 with --system-site-packages (so python3-torch 1.13, numpy and, where
# installed, python3-sentencepiece stay visible) plus tokenizers, transformers and safetensors from PyPI.
#   tools/setup_hf.sh [DIR]     DIR defaults to $TAPEGRAD_HF_VENV, else ~/.cache/tapegrad-hf
# Idempotent: a venv whose pinned versions import (and whose transformers runs a tiny GPT2LMHeadModel
# on torch 1.13) is left as it is. The tests find DIR/bin/python there, or $TAPEGRAD_HF_PYTHON.
#
# The versions, and why (pinned, so that every machine compares with the same library):
# - transformers 4.46.3: GPT2LMHeadModel, GPT2Config and AutoTokenizer import and a tiny
#   GPT2LMHeadModel runs its forward pass on Debian's python3-torch 1.13 (checked below, every run);
#   later releases were not tried on torch 1.13.
# - tokenizers 0.20.3: the series transformers 4.46 asks for (>=0.20,<0.21); manylinux wheels.
# - safetensors 0.4.5: transformers 4.46 needs >=0.4.1; a manylinux wheel for Python 3.11.
# - huggingface-hub: what transformers 4.46 pulls (pinned below 1.0); nothing is downloaded from the
#   hub: the tests make their tokenizers and models locally.
# numpy is Debian's (1.24, the one python3-torch is built against): pip keeps it, as it satisfies
# transformers. First run: 59 s on an idle-ish 2-core Xeon, 130 s beside a build (pip downloads the
# wheels; the venv takes 161 MB); afterwards only the check runs: 3.5 s.
set -euo pipefail
dir="${1:-${TAPEGRAD_HF_VENV:-$HOME/.cache/tapegrad-hf}}"
pins=(transformers==4.46.3 tokenizers==0.20.3 safetensors==0.4.5 "huggingface-hub>=0.23.2,<1.0")
py=/usr/bin/python3

check() {
  "$dir/bin/python" - <<'PY'
import sys
import tokenizers, transformers, safetensors
want = {"tokenizers": "0.20.3", "transformers": "4.46.3", "safetensors": "0.4.5"}
got = {m: sys.modules[m].__version__ for m in want}
if got != want:
    sys.exit(f"versions {got}, want {want}")
import torch
from transformers import GPT2LMHeadModel, GPT2Config, AutoTokenizer  # noqa: F401
torch.manual_seed(0)
m = GPT2LMHeadModel(GPT2Config(vocab_size=50, n_positions=16, n_embd=8, n_layer=1, n_head=2)).eval()
with torch.no_grad():
    logits = m(torch.tensor([[1, 2, 3]])).logits
assert logits.shape == (1, 3, 50) and torch.isfinite(logits).all()
print(f"tokenizers {got['tokenizers']}, transformers {got['transformers']}, safetensors {got['safetensors']}, "
      f"torch {torch.__version__}")
PY
}

if [ -x "$dir/bin/python" ] && out=$(check 2>/dev/null); then
  echo "setup_hf: $dir already has $out"
  exit 0
fi
[ -x "$py" ] || { echo "setup_hf: $py not found (apt-get install python3)" >&2; exit 2; }
"$py" -c 'import torch' 2>/dev/null ||
  echo "setup_hf: $py cannot import torch: the check below will fail (apt-get install python3-torch)" >&2
[ -x "$dir/bin/python" ] || "$py" -m venv --system-site-packages "$dir" || {
  echo "setup_hf: $py -m venv failed (Debian: apt-get install python3-venv)" >&2
  exit 2
}
"$dir/bin/python" -m pip install --quiet --disable-pip-version-check "${pins[@]}"
if ! out=$(check); then
  echo "setup_hf: the venv in $dir does not pass its check (above)" >&2
  exit 1
fi
echo "setup_hf: $dir has $out"
