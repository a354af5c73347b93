#!/usr/bin/env bash
# The training benchmark in one command: bench/bench_train (tapegrad) and tools/bench_torch_train.py
# (the same model in PyTorch) on configs S and M, 1 and 2 threads, then a markdown table.
#
#   tools/bench_train.sh                      # S and M: ~8-12 min on an idle 2-core machine
#   tools/bench_train.sh --quick              # S only, few steps: a smoke test, ~1 min
#   tools/bench_train.sh --time-to-accuracy   # also steps/seconds to 99% exact match on copy task S
#   tools/bench_train.sh --configs M --no-torch
#   BUILD=build-bench tools/bench_train.sh    # build directory (default: build)
#   tools/bench_train.sh --profile            # also print tapegrad's per-op profile table per run
#   tools/bench_train.sh --precisions fp32,bf16   # also bf16 products (tapegrad --precision bf16,
#                                                 # torch bf16 autocast); default fp32
#   PYTHON=/root/.cache/tapegrad-torch2/bin/python tools/bench_train.sh   # PyTorch 2.x (tools/setup_torch2.sh)
#
# Every measurement runs in its own process (peak RSS is per process). PyTorch runs three settings:
# torch 1 thread; torch 2 threads; torch 1 thread with OpenBLAS 2 threads. The table compares
# tapegrad at 1 thread with torch's 1-thread setting, and tapegrad at 2 threads with the faster of
# torch's two 2-core settings, each in the same precision; "vs best" compares with torch's fastest
# row of that config and thread count in any precision. Raw JSON lines go to $BUILD/bench_train.jsonl.
#
# OpenBLAS 0.3.21 (which Debian's torch calls for matmuls) does not know recent CPUs and then runs
# its SSE3 "Prescott" kernels; unless BENCH_OPENBLAS_CORETYPE is set, this script picks SkylakeX
# (AVX-512) or Haswell (AVX2) from /proc/cpuinfo so that torch gets its fast kernels.
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD=${BUILD:-build}
PYTHON=${PYTHON:-/usr/bin/python3}
quick=0 tta=0 torch=1 configs="" profile_flag=() precisions=fp32
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1 ;;
    --time-to-accuracy) tta=1 ;;
    --no-torch) torch=0 ;;
    --profile) profile_flag=(--profile) ;;
    --configs) configs=${2:?--configs needs a value, e.g. S,M}; shift ;;
    --precisions) precisions=${2:?--precisions needs a value, e.g. fp32,bf16}; shift ;;
    -h|--help) sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench_train.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[ -n "$configs" ] || { [ $quick = 1 ] && configs=S || configs=S,M; }
quick_flag=(); [ $quick = 1 ] && quick_flag=(--quick)

# An OPENBLAS_CORETYPE inherited from the environment is not trusted (machines here preset Haswell,
# which makes torch ~25% slower on S than SkylakeX): BENCH_OPENBLAS_CORETYPE overrides the choice.
if [ -n "${BENCH_OPENBLAS_CORETYPE:-}" ]; then export OPENBLAS_CORETYPE=$BENCH_OPENBLAS_CORETYPE
elif grep -qw avx512f /proc/cpuinfo; then export OPENBLAS_CORETYPE=SkylakeX
elif grep -qw avx2 /proc/cpuinfo; then export OPENBLAS_CORETYPE=Haswell
fi
if [ $torch = 1 ] && ! "$PYTHON" -c 'import torch' 2>/dev/null; then
  echo "bench_train.sh: $PYTHON cannot import torch (apt-get install python3-torch); running without it" >&2
  torch=0
fi

. tools/bench_run.sh
bench_setup bench_train bench/bench_train  # builds it; out=$BUILD/bench_train.jsonl; run CMD...

start=$(date +%s)
load=$(cut -d" " -f1-3 /proc/loadavg)
for c in ${configs//,/ }; do
  for p in ${precisions//,/ }; do
    for t in 1 2; do
      run "$BUILD/bench/bench_train" --config "$c" --threads "$t" --precision "$p" --json "${quick_flag[@]}" \
        "${profile_flag[@]}"
    done
    if [ $torch = 1 ]; then
      for s in 1 2 1+blas2; do
        run "$PYTHON" tools/bench_torch_train.py --config "$c" --setting "$s" --precision "$p" "${quick_flag[@]}"
      done
    fi
  done
done
if [ $tta = 1 ]; then
  # --quick: one evaluation on 1 thread, to check that the mode runs.
  tta_args=(--threads 2); [ $quick = 1 ] && tta_args=(--threads 1 --max-steps 25)
  run "$BUILD/bench/bench_train" --time-to-accuracy --json "${tta_args[@]}"
fi

cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')
echo
"$PYTHON" - "$out" "$cpu" "$(nproc)" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$quick" "$(( $(date +%s) - start ))" \
  "${OPENBLAS_CORETYPE:-default}" "$load" <<'EOF'
import json, sys
path, cpu, ncpu, date, quick, secs, coretype, load = sys.argv[1:9]
rows = [json.loads(l) for l in open(path) if l.strip()]
ours = {(r["config"], r["threads"], r.get("precision", "fp32")): r
        for r in rows if r["impl"] == "tapegrad" and "mode" not in r}
torch = [r for r in rows if r["impl"] == "torch"]
tta = [r for r in rows if r.get("mode") == "time_to_accuracy"]

def fmt(x, spec=".0f"):
    return "-" if x is None else format(x, spec)

def best_torch(config, threads, precision=None):
    # 1 thread: torch's 1-thread setting; 2 threads: the faster of its two 2-core settings; in
    # `precision`, or in any precision when None.
    cands = [r for r in torch if r["config"] == config and r["threads"] == threads
             and precision in (None, r.get("precision", "fp32"))]
    return min(cands, key=lambda r: r["ms_per_step"]) if cands else None

print(f"## Training step: tapegrad vs PyTorch ({date})\n")
print(f"CPU: {cpu}, {ncpu} cores; kernels: {next(iter(ours.values()))['arch'] if ours else '-'}; "
      f"torch {torch[0]['torch'] if torch else 'not run'} (OPENBLAS_CORETYPE={coretype})"
      f"{'; --quick (few steps: smoke test, not a measurement)' if quick == '1' else ''}; took {secs} s; "
      f"load average before the run {load}\n")
# The FMA loop measures what the cores give right now: if 2 threads do not nearly double it,
# another process holds a core and every 2-thread number below is meaningless.
for config, precision in sorted({(c, p) for c, _, p in ours}):
    one, two = ours.get((config, 1, precision)), ours.get((config, 2, precision))
    if one and two and one.get("peak_gflops") and two.get("peak_gflops") and \
            two["peak_gflops"] < 1.5 * one["peak_gflops"]:
        print(f"**Warning**: the FMA peak at 2 threads ({two['peak_gflops']:.0f} GFLOP/s) is not ~2x that at 1 "
              f"thread ({one['peak_gflops']:.0f}) during config {config}: a core was busy with other work, "
              "so its 2-thread rows are not a measurement. Rerun on an idle machine.\n")
def bf16_frac(r):
    # the bf16 dot-product peak bench_train measured beside the FMA peak: absent (null) on a CPU
    # without a bf16 dot-product unit
    f = r.get("frac_bf16_peak")
    return f"; {100 * f:.1f}% of the bf16 peak {r['peak_bf16_gflops']:.0f}" if f is not None else ""
def probe_frac(r):
    # each step against the FMA loop run right after it (bench/README.md, "The peak beside each step")
    f = r.get("frac_probe_peak")
    return f"; {100 * f:.1f}% of the peak probed after each step, {r['probe_peak_gflops']:.0f}" if f is not None else ""
print("| config | threads | precision | tapegrad ms/step | tapegrad tok/s | PyTorch ms/step (setting) "
      "| PyTorch tok/s | speedup | vs best | RSS MiB tapegrad / torch | GFLOP/s (% of FMA peak; of the bf16 dot-product peak where the CPU has one) "
      "| decode tok/s b64: ours / torch | decode tok/s b1: ours / torch |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for (config, threads, precision), r in sorted(ours.items()):
    t = best_torch(config, threads, precision)
    speedup = t["ms_per_step"] / r["ms_per_step"] if t else None
    tb = best_torch(config, threads)
    vs_best = tb["ms_per_step"] / r["ms_per_step"] if tb else None
    frac = r.get("frac_peak")
    print(f"| {config} | {threads} | {precision} | {fmt(r['ms_per_step'], '.1f')} | {fmt(r['tokens_per_s'])} "
          f"| {fmt(t and t['ms_per_step'], '.1f')} ({t['setting'] if t else '-'}) | {fmt(t and t['tokens_per_s'])} "
          f"| {fmt(speedup, '.2f') + 'x' if speedup else '-'} | {fmt(vs_best, '.2f') + 'x' if vs_best else '-'} "
          f"| {fmt(r['peak_rss_mib'])} / {fmt(t and t['peak_rss_mib'])} "
          f"| {fmt(r['gflops'], '.1f')} ({fmt(frac and 100 * frac, '.1f')}% of {fmt(r.get('peak_gflops'))}"
          f"{bf16_frac(r)}{probe_frac(r)}) "
          f"| {fmt(r['decode_batch_tok_s'])} / {fmt(t and t['decode_batch_tok_s'])} "
          f"| {fmt(r['decode_b1_tok_s'])} / {fmt(t and t['decode_b1_tok_s'])} |")
print("\nspeedup = PyTorch ms/step / tapegrad ms/step (> 1: tapegrad faster). Tokens = target (label) tokens. "
      "GFLOP/s counts the model's matmuls, forward + backward (bench/bench_train.cpp, forward_matmul_flops), "
      "against the fp32 FMA peak also for bf16 rows, and against the bf16 dot-product peak where the CPU has one. vs best = PyTorch's fastest ms/step at that config and "
      "thread count in any precision / tapegrad ms/step. "
      "Decoding: greedy, 32 new tokens per row with <eos> ignored, encoder included; tapegrad uses its K/V "
      "cache, PyTorch's nn.Transformer re-runs the decoder on the whole prefix each step.")

LOW_SPEEDUP = (" (LOW: expected ~1.6-1.9x on 2 idle cores. Far below 1x means another process held a core while "
               "OpenMP threads spin-waited at barriers (compare torch's OpenMP 2-thread setting); "
               "OMP_WAIT_POLICY=passive avoids that collapse on a busy machine)")
print("\n2-thread / 1-thread speedup (ms/step at 1 thread / ms/step at 2 threads):")
for config, precision in sorted({(c, p) for c, _, p in ours}):
    one, two = ours.get((config, 1, precision)), ours.get((config, 2, precision))
    parts = []
    if one and two:
        s = one["ms_per_step"] / two["ms_per_step"]
        parts.append(f"tapegrad {s:.2f}x" + ("" if s >= 1.3 else LOW_SPEEDUP))
    t1, t2 = best_torch(config, 1, precision), best_torch(config, 2, precision)
    if t1 and t2:
        parts.append(f"PyTorch {t1['ms_per_step'] / t2['ms_per_step']:.2f}x ({t2['setting']})")
    print(f"- {config} {precision}: " + ", ".join(parts))

if torch:
    print("\nAll PyTorch settings (ms/step): " + "; ".join(
        f"{r['config']} {r['setting']}: {r['ms_per_step']:.1f}" for r in torch))
for r in tta:
    print(f"\nTime to 99% exact match (copy task S, {r['threads']} threads): "
          + (f"{r['steps']} steps, {r['train_s']:.1f} s training ({r['wall_s']:.1f} s with evaluations)"
             if r["reached"] else
             f"NOT reached after {r['steps']} steps ({r['accuracy'] * 100:.1f}% exact, {r['wall_s']:.1f} s)"))
EOF
