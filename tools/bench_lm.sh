#!/usr/bin/env bash
# The language-model benchmark in one command: bench/bench_lm (tapegrad, fp32 and --precision bf16) and tools/bench_torch_lm.py
# (the same GPT in PyTorch: eager fp32, bf16 autocast, torch.compile) on configs small and nano,
# 1 and 2 threads, then a markdown table of ratios. Configs gpt2 and gpt2-1024 (GPT-2 124M, block 64
# or 1024, batch 4) set tapegrad beside transformers' GPT2LMHeadModel instead, and its generate
# (with a key/value cache) for sampling: a table of their own.
#
#   tools/bench_lm.sh                            # ~10 min on an idle 2-core machine
#   tools/bench_lm.sh --quick                    # few steps: a smoke test, ~3 min
#   tools/bench_lm.sh --configs small --threads 2 --no-compile
#   tools/bench_lm.sh --configs gpt2 --threads 1,2          # GPT-2 124M beside transformers, ~15 min
#   tools/bench_lm.sh --configs gpt2-1024 --threads 2 --precisions fp32   # ~15 min
#   tools/bench_lm.sh --python /usr/bin/python3  # Debian's torch 1.13 instead of the PyTorch 2.x venv
#   tools/bench_lm.sh --torch-modes fp32         # PyTorch fp32 only: on a CPU without AVX512_BF16 its bf16
#                                                # matmuls run at 1-20 GFLOP/s (AMD Zen 3, bench_kernels, 2026-11-25)
#   tools/bench_lm.sh --precisions fp32          # tapegrad fp32 only (on a CPU without a bf16 dot unit its
#                                                # --precision bf16 runs fp32 products anyway)
#   BUILD=build-bench tools/bench_lm.sh          # build directory (default: build)
#
# The PyTorch interpreter defaults to the virtualenv /root/.cache/tapegrad-torch2 (PyTorch 2.x, made
# by tools/setup_torch2.sh) when it imports torch, else /usr/bin/python3. The gpt2 configs need
# transformers as well: the same venv when it imports transformers (pip install transformers==4.46.3
# there, tools/setup_hf.sh's pin), else the Hugging Face venv ~/.cache/tapegrad-hf (transformers
# 4.46.3 over Debian's PyTorch 1.13, made by tools/setup_hf.sh). Every measurement runs in
# its own process (peak RSS is per process); for one config and thread count the four run back to
# back, so their ratios are measured under the same load. Raw JSON lines: $BUILD/bench_lm.jsonl.
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD=${BUILD:-build}
PYTHON=""
quick=() configs="small,nano" threads="1,2" compile=1 torch_modes="fp32,bf16" precisions="fp32,bf16"
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=(--quick) ;;
    --python) PYTHON=${2:?--python needs an interpreter}; shift ;;
    --configs) configs=${2:?--configs needs a value, e.g. small,nano}; shift ;;
    --threads) threads=${2:?--threads needs a value, e.g. 1,2}; shift ;;
    --no-compile) compile=0 ;;
    --torch-modes) torch_modes=${2:?--torch-modes needs a value, e.g. fp32,bf16}; shift ;;
    --precisions) precisions=${2:?--precisions needs a value, e.g. fp32,bf16}; shift ;;
    -h|--help) sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench_lm.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
venv=/root/.cache/tapegrad-torch2/bin/python hf_venv=${TAPEGRAD_HF_VENV:-$HOME/.cache/tapegrad-hf}/bin/python
if [ -n "$PYTHON" ]; then
  HF_PYTHON=$PYTHON
else
  PYTHON=/usr/bin/python3 HF_PYTHON=$hf_venv
  if [ -x "$venv" ] && "$venv" -c 'import torch' 2>/dev/null; then PYTHON=$venv; fi
  if [ -x "$venv" ] && "$venv" -c 'import torch, transformers' 2>/dev/null; then HF_PYTHON=$venv; fi
fi
case ",$configs," in *,small,*|*,nano,*)
  "$PYTHON" -c 'import torch' 2>/dev/null || { echo "bench_lm.sh: $PYTHON cannot import torch" >&2; exit 1; } ;;
esac
case ",$configs," in *,gpt2*)
  "$HF_PYTHON" -c 'import torch, transformers' 2>/dev/null || {
    echo "bench_lm.sh: $HF_PYTHON cannot import torch and transformers (tools/setup_hf.sh, or --python)" >&2
    exit 1
  } ;;
esac

. tools/bench_run.sh
bench_setup bench_lm bench/bench_lm  # builds it; out=$BUILD/bench_lm.jsonl; run CMD...

modes=${torch_modes//,/ }
[ $compile = 1 ] && modes="$modes compile"
load_before=$(cut -d" " -f1-3 /proc/loadavg)
start=$(date +%s)
for c in ${configs//,/ }; do
  for t in ${threads//,/ }; do
    for p in ${precisions//,/ }; do
      run "$BUILD/bench/bench_lm" --config "$c" --threads "$t" --precision "$p" --json "${quick[@]}"
    done
    py=$PYTHON
    case $c in gpt2*) py=$HF_PYTHON ;; esac
    for m in $modes; do
      run "$py" tools/bench_torch_lm.py --config "$c" --threads "$t" --mode "$m" "${quick[@]}"
    done
  done
done
echo "bench_lm.sh: $(( $(date +%s) - start )) s; load average before $load_before, after $(cut -d" " -f1-3 /proc/loadavg)" >&2

/usr/bin/python3 - "$out" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def get(impl, mode, c, t):
    return next((r for r in rows if r["impl"] == impl and r["mode"] == mode and r["config"] == c and r["threads"] == t), None)
def ms(r):
    return "-" if r is None else "failed" if "ms_per_step" not in r else f"{r['ms_per_step']:.0f}"
def ratio(a, b, key="ms_per_step"):
    if a is None or b is None or key not in a or key not in b: return "-"
    return f"{b[key] / a[key]:.2f}x" if key == "ms_per_step" else f"{a[key] / b[key]:.1f}x"
def table(configs, hf):
    # The baseline: nanoGPT's model in PyTorch, sampling without a cache; or transformers'
    # GPT2LMHeadModel, sampling with its generate (key/value cache, like tapegrad's).
    base = "transformers" if hf else "PyTorch"
    bases = "transformers'" if hf else "PyTorch's"
    r0 = next((r for r in rows if r["impl"] == "torch" and r["config"] in configs), {})
    lib = f"transformers {r0.get('transformers', '?')} GPT2LMHeadModel (attention {r0.get('attention', '?')}) on " if hf else ""
    print(f"\n{lib}PyTorch {r0.get('torch', '?')}; ratios = {base} time / tapegrad time (sampling: tapegrad's faster tokens/s / {bases} fastest);")
    print(f"tapegrad fp32 against {base} fp32 and torch.compile, tapegrad bf16 (--precision bf16; its products run in")
    print(f"the precision in brackets: fp32 where the CPU's bf16 unit does not pay) against {bases} bf16 autocast\n")
    samp_head = ("sampling b1 tok/s tapegrad fp32 / bf16 weights / int8 weights quantized per generation (copies kept) / transformers generate, its fastest mode (all with a key/value cache)" if hf else
                 "sampling b1 tok/s tapegrad fp32 / bf16 weights / int8 weights quantized per generation (copies kept), all with a key/value cache / PyTorch, its fastest mode (no cache)")
    print(f"| config | threads | tapegrad fp32 ms/step | {base} fp32 | ratio | tapegrad bf16 (products) | {base} bf16 autocast | ratio | torch.compile fp32 | ratio | peak RSS MiB tapegrad / {base} fp32 | {samp_head} | tapegrad's step, % of the FMA peak: fp32 / bf16 (of the FMA peak probed after each step); bf16 of the bf16 dot-product peak |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for c in configs:
        rows_c(c)
def rows_c(c):
    for t in sorted({r["threads"] for r in rows if r["config"] == c}):
        tg, f, b, k = (get("tapegrad", "fp32", c, t), get("torch", "fp32", c, t), get("torch", "bf16", c, t),
                       get("torch", "compile", c, t))
        tb = get("tapegrad", "bf16", c, t)
        tbs = f"{ms(tb)} ({tb.get('products', '?')})" if tb and "ms_per_step" in tb else ms(tb)
        rss = f"{tg['peak_rss_mib']:.0f} / {f['peak_rss_mib']:.0f}" if tg and f else "-"
        # tapegrad's bf16 run samples with bf16 copies of the weights (on every CPU); the baseline's
        # fastest of fp32, bf16 autocast and compile
        base_modes = [(m, r) for m, r in (("fp32", f), ("bf16", b), ("compile", k)) if r and "sample_tok_s" in r]
        fast = max(base_modes, key=lambda mr: mr[1]["sample_tok_s"], default=None)
        # (and with int8 copies, lm sample --int8, which both runs measure: the faster; quantized by
        # each generation, and in brackets with the copies kept across generations)
        int8s = [r["sample_tok_s_int8"] for r in (tg, tb) if r and "sample_tok_s_int8" in r]
        t8 = {"sample_tok_s": max(int8s)} if int8s else None
        kept = [r["sample_tok_s_int8_kept"] for r in (tg, tb) if r and "sample_tok_s_int8_kept" in r]
        t8k = {"sample_tok_s": max(kept)} if kept else None
        mine = [r for r in (tg, tb, t8) if r and "sample_tok_s" in r]
        best = max(mine, key=lambda r: r["sample_tok_s"], default=None)
        best_k = max(mine + ([t8k] if t8k else []), key=lambda r: r["sample_tok_s"], default=None)
        tok = lambda r: f"{r['sample_tok_s']:.0f}" if r and "sample_tok_s" in r else "-"
        t8s = f"{tok(t8)} ({tok(t8k)})" if t8k else tok(t8)
        rk = f"; copies kept {ratio(best_k, fast[1], 'sample_tok_s')}" if t8k and fast else ""
        samp = (f"{tok(tg)} / {tok(tb)} / {t8s} / {tok(fast[1])} ({fast[0]}; {ratio(best, fast[1], 'sample_tok_s')}{rk})"
                if fast and best else "-")
        # the fractions of the machine's peaks bench_lm measured in the same process (null: not
        # measured, or no bf16 dot-product unit on this CPU)
        pct = lambda r, key: f"{100 * r[key]:.0f}%" if r and r.get(key) is not None else "-"
        peaks = (f"{pct(tg, 'frac_peak')} / {pct(tb, 'frac_peak')} ({pct(tg, 'frac_probe_peak')} / "
                 f"{pct(tb, 'frac_probe_peak')}); {pct(tb, 'frac_bf16_peak')}")
        print(f"| {c} | {t} | {ms(tg)} | {ms(f)} | {ratio(tg, f)} | {tbs} | {ms(b)} | {ratio(tb, b)} | {ms(k)} | {ratio(tg, k)} | {rss} | {samp} | {peaks} |")
configs = list(dict.fromkeys(r["config"] for r in rows))
for hf in (False, True):
    cs = [c for c in configs if c.startswith("gpt2") == hf]
    if cs:
        table(cs, hf)
for r in rows:
    if "failed" in r:
        print(f"\n{r['impl']} {r['mode']} {r['config']} {r['threads']} threads failed: {r['failed']}")
EOF
