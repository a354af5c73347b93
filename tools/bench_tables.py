#!/usr/bin/env python3
"""Markdown tables (as in the README) from bench_kernels' JSON output.

    build/bench/bench_kernels --json bench_kernels.json
    tools/bench_tables.py bench_kernels.json

Prints the GEMM table (every arch on 1 thread, avx512 and OpenBLAS on 1 and 2 threads, ratios,
fraction of the FMA peak, 2-thread scaling) and the row-wise table (avx512 and PyTorch on 1 and 2
threads, ratio, fraction of the triad bandwidth). The best arch is the one named by --arch.
"""
import argparse
import json
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json_file")
    ap.add_argument("--arch", default="avx512", help="the arch compared with the references (default avx512)")
    args = ap.parse_args()
    with open(args.json_file) as f:
        data = json.load(f)
    res = data["results"]
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
