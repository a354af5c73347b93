#!/usr/bin/env python3
"""Markdown tables (as in the README) from bench_kernels' JSON output.

    build/bench/bench_kernels --json bench_kernels.json
    tools/bench_tables.py bench_kernels.json            # or several runs' JSON: medians over the runs

Prints the GEMM table (every arch on 1 thread, avx512 and OpenBLAS on 1 and 2 threads, ratios,
fraction of the FMA peak, 2-thread scaling), the bf16 GEMM table (bf16 operands on the arch's best
path beside our fp32 GEMM, PyTorch's bf16 and fp32 matmul and the bf16 dot-product peak; fp32
operands (bf16f) and the widen path (bf16w) for reference) and the row-wise table (avx512 and PyTorch on 1 and 2
threads, ratio, fraction of the triad bandwidth). The best arch is the one named by --arch.
"""
import argparse
import json
import statistics
import sys


def merge(result_lists):
    """One result per (kernel, shape, impl, threads): the median of each number over the runs."""
    groups = {}
    for results in result_lists:
        for r in results:
            groups.setdefault((r["kernel"], r["shape"], r["impl"], r["threads"]), []).append(r)
    merged = []
    for rows in groups.values():
        m = dict(rows[0])
        for field in ("rate_median", "rate_best", "rate_worst", "of_peak"):
            vals = [r[field] for r in rows if r.get(field) is not None]
            m[field] = statistics.median(vals) if vals else None
        merged.append(m)
    return merged


def bf16_table(res, best, cases, get, rate, ratio, pct):
    """The bf16 GEMM beside our fp32 GEMM, PyTorch's bf16 and fp32 matmul, per thread count."""
    impl = f"{best} bf16"
    if not any(r["impl"] == impl for r in res):
        return
    peaks = {}
    for r in res:
        if r["kernel"] == "bf16dot" and r["impl"] == best:
            peaks[r["threads"]] = max(peaks.get(r["threads"], 0.0), r["rate_best"])
    if peaks:
        print("\nbf16 dot-product peak (best chain count): " +
              ", ".join(f"{v:.0f} GFLOP/s on {t} thread{'s' if t > 1 else ''}" for t, v in sorted(peaks.items())))
    threads = sorted({r["threads"] for r in res if r["impl"] == impl})
    head = ["bf16 GEMM case", "shape (M N K, op)"]
    for t in threads:
        head += [f"{best} fp32 {t}t", f"**{impl} {t}t**", f"bf16 / fp32 {t}t", f"torch bf16 {t}t",
                 f"ours / torch bf16 {t}t", f"torch fp32 {t}t", f"%bf16 peak {t}t", f"{best} bf16f {t}t",
                 f"{best} bf16w {t}t"]
    print("\n| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for kernel, shape in cases:
        if not kernel.startswith("gemm ") or not get(kernel, shape, impl, threads[0]):
            continue
        cells = [kernel[5:], shape]
        for t in threads:
            ours, f32 = get(kernel, shape, impl, t), get(kernel, shape, best, t)
            tb, tf = get(kernel, shape, "torch bf16", t), get(kernel, shape, "torch fp32", t)
            cells += [rate(f32), f"**{rate(ours)}**", ratio(ours, f32), rate(tb), ratio(ours, tb), rate(tf),
                      pct(ours), rate(get(kernel, shape, f"{best} bf16f", t)),
                      rate(get(kernel, shape, f"{best} bf16w", t))]
        print("| " + " | ".join(cells) + " |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json_file", nargs="+",
                    help="one run's JSON, or several: each figure is then the median over the runs")
    ap.add_argument("--arch", default="avx512", help="the arch compared with the references (default avx512)")
    args = ap.parse_args()
    runs = []
    for path in args.json_file:
        with open(path) as f:
            runs.append(json.load(f))
    data = runs[0]
    res = merge([r["results"] for r in runs]) if len(runs) > 1 else data["results"]
    if len(runs) > 1:
        print(f"Median over {len(runs)} runs ({', '.join(r['info']['date'] for r in runs)}) of each run's figures.")
    best = args.arch

    def get(kernel, shape, impl, threads):
        for r in res:
            if r["kernel"] == kernel and r["shape"] == shape and r["impl"] == impl and r["threads"] == threads:
                return r
        return None

    def rate(r, fmt="{:.0f}"):
        return fmt.format(r["rate_median"]) if r else "-"

    def ratio(a, b):
        return f"{a['rate_median'] / b['rate_median']:.2f}x" if a and b else "-"

    def pct(r):
        return f"{100 * r['of_peak']:.0f}%" if r and r.get("of_peak") is not None else "-"

    cases = []  # (kernel, shape) in the order measured
    for r in res:
        key = (r["kernel"], r["shape"])
        if key not in cases:
            cases.append(key)

    print(f"Measured {data['info']['date']}; {data['info']['openblas']}; torch {data['info'].get('torch', '-')}\n")
    # the lesser archs, each on one thread, then the compared one in bold (not listed twice)
    lesser = [a for a in ("scalar", "sse2", "avx2") if a != best]
    head = ["GEMM case", "shape (M N K, op)"] + [f"{a} 1t" for a in lesser]
    head += [f"{best} 1t", "OpenBLAS 1t", f"{best} / OpenBLAS 1t", f"{best} 2t", "OpenBLAS 2t",
             f"{best} / OpenBLAS 2t", f"{best} %peak 1t / 2t", "2t / 1t"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for kernel, shape in cases:
        if not kernel.startswith("gemm "):
            continue
        b1, b2 = get(kernel, shape, best, 1), get(kernel, shape, best, 2)
        o1, o2 = get(kernel, shape, "openblas", 1), get(kernel, shape, "openblas", 2)
        cells = [kernel[5:], shape]
        cells += [rate(get(kernel, shape, a, 1)) for a in lesser]
        cells += [f"**{rate(b1)}**", rate(o1), ratio(b1, o1), f"**{rate(b2)}**", rate(o2), ratio(b2, o2)]
        cells += [f"{pct(b1)} / {pct(b2)}", ratio(b2, b1)]
        print("| " + " | ".join(cells) + " |")

    bf16_table(res, best, cases, get, rate, ratio, pct)

    print()
    print(f"| row-wise kernel | rows x cols | {best} 1t | torch 1t | {best} 2t | torch 2t | {best} / torch 2t "
          f"| {best} 2t % of triad |")
    print("|---|---|---|---|---|---|---|---|")
    for kernel, shape in cases:
        if kernel.startswith("gemm ") or kernel in ("fma", "triad"):
            continue
        b1, b2 = get(kernel, shape, best, 1), get(kernel, shape, best, 2)
        t1, t2 = get(kernel, shape, "torch", 1), get(kernel, shape, "torch", 2)
        cells = [kernel, shape, rate(b1, "{:.1f}"), rate(t1, "{:.1f}"), f"**{rate(b2, '{:.1f}')}**",
                 rate(t2, "{:.1f}"), ratio(b2, t2), pct(b2)]
        print("| " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
