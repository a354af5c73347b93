#!/usr/bin/env bash
# llm.c's CPU training step (karpathy/llm.c, train_gpt2.c: the reference C implementation of GPT-2
# training) beside tapegrad's (bench_lm) on GPT-2 124M's shape, random weights and tokens, batch 4 x
# 64 (--config gpt2) or 4 x 1024 (gpt2-1024), for each thread count in turn, then a markdown table.
#
#   tools/bench_llmc.sh --llmc DIR                         # 1 and 2 threads, ~5 min on 2 cores
#   tools/bench_llmc.sh --llmc DIR --threads 2 --steps 3 --config gpt2-1024
#   tools/bench_llmc.sh --llmc DIR --threads 2 --precisions fp32,bf16   # tapegrad in both precisions
#
# DIR is an llm.c checkout (git clone https://github.com/karpathy/llm.c): only train_gpt2.c and llmc/
# are read; no data, tokenizer or model download is needed. bench/llmc_step.c includes train_gpt2.c
# (with TESTING defined, as llm.c's test_gpt2.c does, so that its main is left out), writes an llm.c
# checkpoint of random weights and times forward, zero_grad, backward and AdamW as llm.c's main loop
# calls them; it is compiled as llm.c's Makefile compiles train_gpt2 on Linux (gcc -Ofast
# -march=native -fopenmp). Medians of --steps timed steps after one warm-up; each measurement in its
# own process. Raw lines: $BUILD/bench_llmc.jsonl.
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD=${BUILD:-build}
llmc="" threads="1,2" steps=5 config=gpt2 precisions=fp32
while [ $# -gt 0 ]; do
  case "$1" in
    --llmc) llmc=${2:?--llmc needs an llm.c checkout}; shift ;;
    --threads) threads=${2:?--threads needs a value, e.g. 1,2}; shift ;;
    --steps) steps=${2:?--steps needs a number}; shift ;;
    --config) config=${2:?--config needs gpt2 or gpt2-1024}; shift ;;
    --precisions) precisions=${2:?--precisions needs a value, e.g. fp32,bf16}; shift ;;
    -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench_llmc.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[ -n "$llmc" ] || { echo "bench_llmc.sh: --llmc DIR is required (an llm.c checkout)" >&2; exit 2; }
[ -f "$llmc/train_gpt2.c" ] || { echo "bench_llmc.sh: $llmc/train_gpt2.c not found" >&2; exit 1; }
case "$config" in
  gpt2) T=64 ;;
  gpt2-1024) T=1024 ;;
  *) echo "bench_llmc.sh: --config must be gpt2 or gpt2-1024, got '$config'" >&2; exit 2 ;;
esac
B=4

ninja -C "$BUILD" bench/bench_lm >/dev/null
run_dir="$BUILD/llmc-run"
mkdir -p "$run_dir"
gcc -Ofast -march=native -fopenmp -DOMP -Wno-unused-result -I"$llmc" -o "$run_dir/llmc_step" bench/llmc_step.c -lm
out="$BUILD/bench_llmc.jsonl"
: >"$out"
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-) ($(nproc) cores); llm.c at $(git -C "$llmc" rev-parse --short HEAD 2>/dev/null || echo 'an unknown commit'), train_gpt2.c sha256 $(sha256sum "$llmc/train_gpt2.c" | cut -c1-16)"
log="$run_dir/last.log"
for t in ${threads//,/ }; do
  echo "+ llm.c train_gpt2.c step, $t threads, batch $B x $T"
  (cd "$run_dir" && OMP_NUM_THREADS=$t ./llmc_step "$B" "$T" "$steps" 1) | tee "$log"
  tail -1 "$log" |
    /usr/bin/python3 -c "import json, sys; r = json.load(sys.stdin); r['threads'] = $t; print(json.dumps(r))" >>"$out"
  for p in ${precisions//,/ }; do
    echo "+ $BUILD/bench/bench_lm --config $config --threads $t --steps $steps --warmup 1 --sample-tokens 1 --precision $p --json"
    "$BUILD/bench/bench_lm" --config "$config" --threads "$t" --steps "$steps" --warmup 1 --sample-tokens 1 \
      --precision "$p" --json | tee "$log"
    tail -1 "$log" >>"$out"
  done
done
/usr/bin/python3 - "$out" "$config" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(f"\n{sys.argv[2]} (GPT-2 124M, batch 4): ms per training step (AdamW), median; ratio = llm.c / tapegrad\n")
print("| threads | llm.c ms/step | tapegrad --precision (products) | tapegrad ms/step | ratio |")
print("|---|---|---|---|---|")
for t in sorted({r["threads"] for r in rows}):
    l = next(r for r in rows if r["threads"] == t and r["impl"] == "llm.c")
    for g in (r for r in rows if r["threads"] == t and r["impl"] == "tapegrad"):
        print(f"| {t} | {l['ms_per_step']:.0f} ({l['ms_min']:.0f}..{l['ms_max']:.0f}) | {g['mode']} ({g['products']}) | "
              f"{g['ms_per_step']:.0f} ({g['ms_min']:.0f}..{g['ms_max']:.0f}) | {l['ms_per_step'] / g['ms_per_step']:.2f}x |")
EOF
