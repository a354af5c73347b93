#!/usr/bin/env bash
# The AMX and many-core checks of issue 29, run on a machine that has the CPU (a lent 16-core Xeon with
# AMX-BF16) from the bundle tools/device_bundle.sh made: the kernel tests that need the CPU, then the
# benchmarks beside PyTorch (python3 with torch; tools/bench_torch_*.py from this checkout).
#   bash tools/device_check.sh          # tests, bench_kernels linear shapes, config M 1-16 threads, d768 vs PyTorch
#   bash tools/device_check.sh quick    # tests and one d768 pair only (about a minute)
#   bash tools/device_check.sh attention  # tests; the two attention forms under bf16 (TAPEGRAD_ATTENTION=fused
#                                         # or rows) on d768 and config M at 16 threads, GPT-2's shape at 2
#   bash tools/device_check.sh goals      # tests; issue 29's AMX goals (d768 16 threads beside PyTorch, three
#                                         # alternated rounds; config M 1 and 16 threads) and GPT-2's shape on 2
#                                         # threads beside transformers, alternated
#   bash tools/device_check.sh weights    # tests; bf16 weights rounded once per step or while packing
#                                         # (TAPEGRAD_BF16_WEIGHTS=step|packing) on d768, M, GPT-2's shape;
#                                         # GPT-2's shape beside transformers on 2 threads
#   bash tools/device_check.sh suites     # the whole test_ops, test_autograd and test_nn (every case the CPU
#                                         # runs: the AVX-512 ones a 2-core machine without it skips); bf16
#                                         # activations saved or left to packing (TAPEGRAD_BF16_ACTIVATIONS=
#                                         # saved|packing) on d768, M, GPT-2's shape; config M's per-op profile
#                                         # at 1-16 threads; attention kernels at 1 and 16 threads
#   bash tools/device_check.sh scaling    # the CPU's topology; the FMA / AMX peak loops and triad at 1-16
#                                         # threads; config M's and d768's per-op profiles at 16 threads,
#                                         # threads placed by the OS or spread over cores (OMP_PROC_BIND);
#                                         # d768 beside PyTorch
# Output: $OUT/log.txt (or /tmp/out), $OUT/kernels.json. Every command is printed with its start time.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
log=$OUT/log.txt
B=$(mktemp -d)
python3 -c "import sys, tarfile; tarfile.open('.devbundle/b.tar.xz').extractall(sys.argv[1])" "$B"
# The tests run Python scripts from the checkout they were built in (TG_SOURCE_DIR, compiled in): where
# that path is missing here, it becomes a link to this checkout, so the PyTorch / transformers parity
# cases run with this machine's python3 instead of skipping.
src=$(cat "$B/source_dir" 2>/dev/null || true)
if [ -n "$src" ] && [ ! -e "$src" ]; then mkdir -p "$(dirname "$src")" && ln -s "$PWD" "$src"; fi
L=("$B/lib/ld-linux-x86-64.so.2" --library-path "$B/lib")
run() {
  local env_set  # the variables the modes vary, where set (a prefix assignment is not in $*)
  env_set=$(env | grep -E '^(TAPEGRAD_[A-Z0-9_]+|OMP_PLACES|OMP_PROC_BIND)=' | sort | tr '\n' ' ')
  echo "=== $(date +%T) ${env_set}$*" | tee -a "$log"; timeout "${T:-150}" "$@" >> "$log" 2>&1; echo "--- rc $?" | tee -a "$log"; }
{ uname -r; lscpu | grep -E "Model name|^CPU\(s\)|Model:|CPU family"; grep -o -E "amx[a-z_0-9]*|avx512_bf16" /proc/cpuinfo | sort -u | tr '\n' ' '; echo; } >> "$log" 2>&1
if [ "${1:-}" = scaling ]; then
  { lscpu; lscpu -e; for c in 0 1 2 8; do echo "cpu$c siblings: $(cat /sys/devices/system/cpu/cpu$c/topology/thread_siblings_list 2>&1)"; done; } >> "$log" 2>&1
  OMP_NUM_THREADS=16 T=60 run "${L[@]}" "$B/bin/test_autograd"
  OMP_NUM_THREADS=16 T=60 run "${L[@]}" "$B/bin/test_ops" --test-case='vector.*,dispatch.*'
  T=120 run "${L[@]}" "$B/bin/bench_kernels" --filter none --arch avx512 --threads 1,2,4,8,16 --reps 3 --no-torch --no-blas
  for i in 1 2; do
    T=60 run "${L[@]}" "$B/bin/bench_train" --config M --threads 16 --precision bf16 --steps 4 --no-peak --profile
    OMP_PLACES=cores OMP_PROC_BIND=spread T=60 run "${L[@]}" "$B/bin/bench_train" --config M --threads 16 --precision bf16 \
      --steps 4 --no-peak --json
  done
  for b in unset spread; do
    if [ $b = spread ]; then export OMP_PLACES=cores OMP_PROC_BIND=spread; fi
    for t in 2 8; do T=60 run "${L[@]}" "$B/bin/bench_train" --config M --threads $t --precision bf16 --steps 4 --no-peak --json; done
    unset OMP_PLACES OMP_PROC_BIND
  done
  T=60 run "${L[@]}" "$B/bin/bench_train" --config M --threads 16 --precision fp32 --steps 3 --no-peak --profile
  TAPEGRAD_PROFILE=1 T=120 run "${L[@]}" "$B/bin/bench_lm" --config d768 --threads 16 --precision bf16 --steps 3 \
    --sample-tokens 5 --no-peak
  for i in 1 2; do
    T=120 run "${L[@]}" "$B/bin/bench_lm" --config d768 --threads 16 --precision bf16 --steps 4 --sample-tokens 10 --no-peak
    T=150 run python3 tools/bench_torch_lm.py --config d768 --threads 16 --mode bf16 --steps 4 --sample-tokens 10
  done
  rm -rf "$B"
  grep -E "^===|train:|test cases:|rc [1-9]|^(fma|triad|bf16dot) " "$log"
  exit 0
fi
if [ "${1:-}" = suites ]; then
  for p in test_ops test_autograd; do OMP_NUM_THREADS=2 T=240 run "${L[@]}" "$B/bin/$p"; done
  OMP_NUM_THREADS=2 TAPEGRAD_TEST_PYTHON=python3 TAPEGRAD_HF_PYTHON=python3 T=240 run "${L[@]}" "$B/bin/test_nn"
  OMP_NUM_THREADS=16 T=60 run "${L[@]}" "$B/bin/test_ops" --test-case='gemm_bf16.avx512.amx.*,attention.*'
  OMP_NUM_THREADS=2 TAPEGRAD_BF16_ACTIVATIONS=packing T=60 run "${L[@]}" "$B/bin/test_autograd" --test-case='precision.*'
  for i in 1 2; do  # alternated: the machine is shared
    for a in saved packing; do
      TAPEGRAD_BF16_ACTIVATIONS=$a T=120 run "${L[@]}" "$B/bin/bench_lm" --config d768 --threads 16 --precision bf16 \
        --steps 4 --sample-tokens 10 --no-peak
      TAPEGRAD_BF16_ACTIVATIONS=$a T=60 run "${L[@]}" "$B/bin/bench_train" --config M --threads 16 --precision bf16 \
        --steps 5 --no-peak --json
      TAPEGRAD_BF16_ACTIVATIONS=$a T=150 run "${L[@]}" "$B/bin/bench_lm" --config gpt2 --threads 2 --precision bf16 \
        --steps 4 --sample-tokens 10 --no-peak
    done
  done
  T=150 run python3 tools/bench_torch_lm.py --config d768 --threads 16 --mode bf16 --steps 4 --sample-tokens 10
  for t in 1 2 4 8 16; do
    T=90 run "${L[@]}" "$B/bin/bench_train" --config M --threads $t --precision bf16 --steps 3 --no-peak --profile
  done
  for t in 1 16; do
    T=90 run "${L[@]}" "$B/bin/bench_train" --config M --threads $t --precision fp32 --steps 3 --no-peak --profile
  done
  T=150 run "${L[@]}" "$B/bin/bench_kernels" --filter attention --arch avx512 --threads 1,16 --reps 3 --no-torch \
    --no-blas --json "$OUT/attention.json"
  rm -rf "$B"
  grep -E "^===|train:|test cases:|rc [1-9]" "$log"
  exit 0
fi
OMP_NUM_THREADS=2 T=120 run "${L[@]}" "$B/bin/test_ops" --test-case='gemm_bf16.avx512.*,gemm_int8.*,quantize_int8_rows.*,dispatch.*,copy.*'
OMP_NUM_THREADS=16 T=60 run "${L[@]}" "$B/bin/test_ops" --test-case='gemm_bf16.avx512.amx.*'
OMP_NUM_THREADS=2 T=60 run "${L[@]}" "$B/bin/test_autograd" --test-case='precision.*'
OMP_NUM_THREADS=2 T=60 run "${L[@]}" "$B/bin/test_nn" --test-case='nn.attention.*,nn.gpt.bf16*,nn.gpt.int8*'
if [ "${1:-}" = goals ]; then
  for i in 1 2 3; do
    T=120 run "${L[@]}" "$B/bin/bench_lm" --config d768 --threads 16 --precision bf16 --steps 4 --sample-tokens 10 --no-peak
    T=150 run python3 tools/bench_torch_lm.py --config d768 --threads 16 --mode bf16 --steps 4 --sample-tokens 10
  done
  T=150 run "${L[@]}" "$B/bin/bench_lm" --config gpt2 --threads 2 --precision bf16 --steps 5 --no-peak
  T=200 run python3 tools/bench_torch_lm.py --config gpt2 --threads 2 --mode bf16 --steps 5
  T=150 run "${L[@]}" "$B/bin/bench_lm" --config gpt2 --threads 2 --precision fp32 --steps 5 --no-peak
  T=200 run python3 tools/bench_torch_lm.py --config gpt2 --threads 2 --mode fp32 --steps 5
  for t in 16 1; do
    T=100 run "${L[@]}" "$B/bin/bench_train" --config M --threads $t --precision bf16 --steps 5 --no-peak --json
  done
  T=100 run "${L[@]}" "$B/bin/bench_train" --config M --threads 16 --precision bf16 --steps 5 --no-peak --json
  T=100 run "${L[@]}" "$B/bin/bench_train" --config M --threads 16 --precision bf16 --steps 3 --no-peak --profile
  rm -rf "$B"
  grep -E "^===|train:|sample batch|test cases:" "$log"
  exit 0
fi
if [ "${1:-}" = weights ]; then
  for i in 1 2; do
    for w in step packing; do
      TAPEGRAD_BF16_WEIGHTS=$w T=120 run "${L[@]}" "$B/bin/bench_lm" --config d768 --threads 16 --precision bf16 \
        --steps 4 --sample-tokens 10 --no-peak
    done
  done
  T=150 run python3 tools/bench_torch_lm.py --config d768 --threads 16 --mode bf16 --steps 4 --sample-tokens 10
  for w in step packing step packing; do
    TAPEGRAD_BF16_WEIGHTS=$w T=100 run "${L[@]}" "$B/bin/bench_train" --config M --threads 16 --precision bf16 \
      --steps 5 --no-peak --json
  done
  for w in step packing step packing; do
    TAPEGRAD_BF16_WEIGHTS=$w T=150 run "${L[@]}" "$B/bin/bench_lm" --config gpt2 --threads 2 --precision bf16 \
      --steps 5 --sample-tokens 10 --no-peak
  done
  TAPEGRAD_PROFILE=1 T=150 run "${L[@]}" "$B/bin/bench_lm" --config gpt2 --threads 2 --precision bf16 --steps 3 \
    --sample-tokens 5 --no-peak
  for m in bf16 fp32; do
    T=200 run python3 tools/bench_torch_lm.py --config gpt2 --threads 2 --mode $m --steps 5 --sample-tokens 10
  done
  rm -rf "$B"
  grep -E "^===|train:|test cases:|transformers" "$log"
  exit 0
fi
if [ "${1:-}" = attention ]; then
  python3 -c "import transformers; print('transformers', transformers.__version__)" >> "$log" 2>&1
  for i in 1 2; do  # alternated: the machine is shared
    for f in fused rows; do
      TAPEGRAD_ATTENTION=$f T=120 run "${L[@]}" "$B/bin/bench_lm" --config d768 --threads 16 --precision bf16 --steps 4 \
        --sample-tokens 20 --no-peak
    done
    T=150 run python3 tools/bench_torch_lm.py --config d768 --threads 16 --mode bf16 --steps 4 --sample-tokens 20
  done
  for f in fused rows; do
    TAPEGRAD_ATTENTION=$f TAPEGRAD_PROFILE=1 T=120 run "${L[@]}" "$B/bin/bench_lm" --config d768 --threads 16 \
      --precision bf16 --steps 3 --sample-tokens 10 --no-peak
  done
  for f in fused rows fused rows; do
    TAPEGRAD_ATTENTION=$f T=100 run "${L[@]}" "$B/bin/bench_train" --config M --threads 16 --precision bf16 --steps 5 --json
  done
  TAPEGRAD_ATTENTION=fused T=100 run "${L[@]}" "$B/bin/bench_train" --config M --threads 1 --precision bf16 --steps 3 --json
  for f in fused rows; do
    TAPEGRAD_ATTENTION=$f T=150 run "${L[@]}" "$B/bin/bench_lm" --config gpt2 --threads 2 --precision bf16 --steps 5 \
      --sample-tokens 30 --no-peak
  done
  T=150 run "${L[@]}" "$B/bin/bench_lm" --config gpt2 --threads 2 --precision fp32 --steps 5 --sample-tokens 30 --no-peak
  for m in bf16 fp32; do
    T=200 run python3 tools/bench_torch_lm.py --config gpt2 --nanogpt --threads 2 --mode $m --steps 5 --sample-tokens 10
  done
  rm -rf "$B"
  grep -E "^===|train:|test cases:|transformers" "$log"
  exit 0
fi
if [ "${1:-}" != quick ]; then
  OPENBLAS_CORETYPE=SkylakeX T=240 run "${L[@]}" "$B/bin/bench_kernels" --filter linear --arch avx512 --threads 1,16 \
    --reps 5 --python python3 --torch-script tools/bench_torch_kernels.py --json "$OUT/kernels.json"
  for t in 16 8 4 2 1; do T=100 run "${L[@]}" "$B/bin/bench_train" --config M --threads $t --precision bf16 --steps 5 --json; done
  for t in 16 1; do T=100 run "${L[@]}" "$B/bin/bench_train" --config M --threads $t --precision fp32 --steps 5 --json; done
  TAPEGRAD_PROFILE=1 T=120 run "${L[@]}" "$B/bin/bench_lm" --config d768 --threads 16 --precision bf16 --steps 4 --no-peak
fi
for i in 1 2; do  # alternated: the machine is shared
  T=120 run "${L[@]}" "$B/bin/bench_lm" --config d768 --threads 16 --precision bf16 --steps 4 --sample-tokens 20 --no-peak
  T=150 run python3 tools/bench_torch_lm.py --config d768 --threads 16 --mode bf16 --steps 4 --sample-tokens 20
done
rm -rf "$B"
grep -E "^===|train:|test cases:" "$log"
