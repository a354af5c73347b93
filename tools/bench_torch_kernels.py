#!/usr/bin/python3
"""PyTorch baseline for bench/bench_kernels.cpp: softmax and layernorm, forward and forward+backward;
matmul in bf16 and fp32 on GEMM shapes; scaled_dot_product_attention on attention shapes.

Usage (Debian's torch 1.13 is importable by /usr/bin/python3; PyTorch 2.x, whose bf16 matmul runs on
oneDNN, by the virtualenv of tools/setup_torch2.sh, which bench_kernels uses when it exists):
  PYTHON tools/bench_torch_kernels.py [--threads 1,2] [--shapes 8192x64,8192x256,...]
      [--kernels softmax.fwd,layernorm.fwd+bwd,...] [--gemm 2048x256x256xnnx1,32x32x64xntx512,...]
      [--gemm-dtypes bf16,fp32] [--attention 64x8x64x64x32xcx0.1,...] [--attention-dtypes fp32,bf16]
      [--reps 11] [--warmup 0.05] [--min-sample 0.002]

Prints JSON on stdout: {"torch_version": ..., "results": [...]}: row-wise results {"kernel", "shape",
"rows", "cols", "threads", "median_s", "min_s", "max_s", "reps", "calls_per_rep", "bytes", "gbps"};
GEMM results {"kernel": "matmul", "m", "n", "k", "op", "batch", "dtype", "threads", "median_s",
"min_s", "max_s", "reps", "calls_per_rep", "flops", "gflops"}; attention results {"kernel":
"attention.fwd" or "attention.fwd+bwd", "case" (index into --attention), "dtype", "threads",
timing as above, "flops", "gflops"}.
Timing and byte counting are those of bench_kernels (bench/timing.hpp, rowwise_bytes in
bench/bench_rowwise.cpp): warm-up, then `reps` samples of `calls_per_rep` calls, median reported;
each tensor a call touches counts once; a GEMM counts 2*M*N*K*batch flops; attention counts the
model's multiply-adds over the (query, key) pairs a query sees (attention_flops in
bench/bench_attention.cpp), q, k, v as [B, H, T, d] tensors (PyTorch's own layout). PyTorch is called as a
user calls it (functional API, fresh output tensors; forward-only under no_grad; backward through
torch.autograd.grad; matmul on transposed views for the transposed operands, as a Linear's
backward does, in the dtype given: bf16 in, bf16 out).
"""
import argparse
import json
import sys
import time

import torch
import torch.nn.functional as F

KERNELS = ["softmax.fwd", "softmax.fwd+bwd", "layernorm.fwd", "layernorm.fwd+bwd"]
SHAPES = "8192x64,8192x256,4096x1024,1024x4096"


def tensor_bytes(kernel, rows, cols):
    """Bytes per call, each tensor counted once (same formulas as rowwise_bytes in C++)."""
    n, r, c = rows * cols, rows, cols
    floats = {
        "softmax.fwd": 2 * n,  # x, y
        "softmax.fwd+bwd": 2 * n + 3 * n,  # + y, dy, dx
        "layernorm.fwd": 2 * n + 2 * c + 2 * r,  # x, y, w, b, mean, rstd
        # backward: dy, x, dx; w, dw, db; mean, rstd
        "layernorm.fwd+bwd": (2 * n + 2 * c + 2 * r) + (3 * n + 3 * c + 2 * r),
    }[kernel]
    return 4 * floats


def make_call(kernel, rows, cols):
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(rows, cols, generator=gen) * 6 - 3
    dy = torch.rand(rows, cols, generator=gen) * 2 - 1
    w = torch.rand(cols, generator=gen) + 0.5
    b = torch.rand(cols, generator=gen) * 2 - 1
    if kernel == "softmax.fwd":
        def call():
            with torch.no_grad():
                torch.softmax(x, dim=-1)
    elif kernel == "softmax.fwd+bwd":
        xg = x.clone().requires_grad_(True)

        def call():
            y = torch.softmax(xg, dim=-1)
            torch.autograd.grad(y, xg, dy)
    elif kernel == "layernorm.fwd":
        def call():
            with torch.no_grad():
                F.layer_norm(x, (cols,), w, b, 1e-5)
    elif kernel == "layernorm.fwd+bwd":
        xg, wg, bg = (t.clone().requires_grad_(True) for t in (x, w, b))

        def call():
            y = F.layer_norm(xg, (cols,), wg, bg, 1e-5)
            torch.autograd.grad(y, (xg, wg, bg), dy)
    else:
        raise ValueError(f"bench_torch_kernels: unknown kernel {kernel!r} (known: {', '.join(KERNELS)})")
    return call


def make_matmul(m, n, k, op, batch, dtype):
    """torch.matmul on op(A) (m x k) and op(B) (k x n), stored as bench_kernels stores them: A is
    k x m when op[0] == 't' (op(A) is then a transposed view), B is n x k when op[1] == 't'."""
    gen = torch.Generator().manual_seed(0)
    dt = {"bf16": torch.bfloat16, "fp32": torch.float32}[dtype]
    lead = (batch,) if batch > 1 else ()
    a = (torch.rand(*lead, *((k, m) if op[0] == "t" else (m, k)), generator=gen) * 2 - 1).to(dt)
    b = (torch.rand(*lead, *((n, k) if op[1] == "t" else (k, n)), generator=gen) * 2 - 1).to(dt)
    if op[0] == "t":
        a = a.transpose(-1, -2)
    if op[1] == "t":
        b = b.transpose(-1, -2)

    def call():
        with torch.no_grad():
            torch.matmul(a, b)
    return call


def attention_flops(kernel, b, h, t, s, d, causal):
    """Model flops (as attention_flops in bench/bench_attention.cpp): 2 per multiply-add of Q K^T and
    P V over the visible (query, key) pairs; fwd+bwd three times that."""
    pairs = sum(min(max(i + 1 + s - t, 0), s) for i in range(t)) if causal else t * s
    fwd = 4 * pairs * d * b * h
    return fwd if kernel == "attention.fwd" else 3 * fwd


def make_attention(kernel, b, h, t, s, d, causal, p, dtype):
    """F.scaled_dot_product_attention on q [B, H, T, d], k, v [B, H, S, d] in dtype; with p > 0 its
    dropout on the probabilities. Causal with T != S uses the explicit mask of kernels.hpp's rule
    (query i sees keys j <= i + S - T), since is_causal aligns the triangle to the top left."""
    gen = torch.Generator().manual_seed(0)
    dt = {"bf16": torch.bfloat16, "fp32": torch.float32}[dtype]
    q = (torch.rand(b, h, t, d, generator=gen) * 2 - 1).to(dt)
    k = (torch.rand(b, h, s, d, generator=gen) * 2 - 1).to(dt)
    v = (torch.rand(b, h, s, d, generator=gen) * 2 - 1).to(dt)
    dout = (torch.rand(b, h, t, d, generator=gen) * 2 - 1).to(dt)
    mask, is_causal = None, False
    if causal and t == s:
        is_causal = True
    elif causal:
        mask = torch.ones(t, s, dtype=torch.bool).tril(diagonal=s - t)

    def attend(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p, is_causal=is_causal)
    if kernel == "attention.fwd":
        def call():
            with torch.no_grad():
                attend(q, k, v)
    else:
        qg, kg, vg = (x.clone().requires_grad_(True) for x in (q, k, v))

        def call():
            torch.autograd.grad(attend(qg, kg, vg), (qg, kg, vg), dout)
    return call


def measure(call, reps, warmup_s, min_sample_s):
    """Seconds per call: median, min, max over reps samples (as bench/timing.hpp)."""
    calls, t0 = 0, time.perf_counter()
    while True:
        call()
        calls += 1
        if time.perf_counter() - t0 >= warmup_s:
            break
    per_call = (time.perf_counter() - t0) / calls
    inner = max(1, int(-(-min_sample_s // per_call)))
    samples = []
    for _ in range(max(1, reps)):
        t = time.perf_counter()
        for _ in range(inner):
            call()
        samples.append((time.perf_counter() - t) / inner)
    samples.sort()
    k = len(samples)
    median = samples[k // 2] if k % 2 else 0.5 * (samples[k // 2 - 1] + samples[k // 2])
    return median, samples[0], samples[-1], k, inner


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    ap.add_argument("--shapes", default=SHAPES, help="comma-separated ROWSxCOLS")
    ap.add_argument("--kernels", default=",".join(KERNELS),
                    help="comma-separated, from: " + ", ".join(KERNELS))
    ap.add_argument("--gemm", default="", help="comma-separated MxNxKxOPxBATCH, e.g. 2048x256x256xnnx1")
    ap.add_argument("--gemm-dtypes", default="bf16,fp32", help="comma-separated, from: bf16, fp32")
    ap.add_argument("--attention", default="",
                    help="comma-separated BxHxTxSxDxCxP (C: c causal or n; P: dropout probability)")
    ap.add_argument("--attention-dtypes", default="fp32", help="comma-separated, from: fp32, bf16")
    ap.add_argument("--reps", type=int, default=11)
    ap.add_argument("--warmup", type=float, default=0.05, help="seconds of warm-up per case")
    ap.add_argument("--min-sample", type=float, default=0.002, help="minimum seconds per sample")
    args = ap.parse_args()

    try:
        threads = [int(t) for t in args.threads.split(",") if t]
        shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",") if s]
        if any(t < 1 for t in threads) or any(len(s) != 2 or min(s) < 1 for s in shapes):
            raise ValueError
    except ValueError:
        sys.exit(f"bench_torch_kernels: bad --threads {args.threads!r} or --shapes {args.shapes!r}")
    try:
        gemms = []
        for g in (x for x in args.gemm.split(",") if x):
            m, n, k, op, batch = g.split("x")
            gemms.append((int(m), int(n), int(k), op, int(batch)))
            if min(gemms[-1][0], gemms[-1][1], gemms[-1][2], gemms[-1][4]) < 1 or len(op) != 2 or \
                    any(c not in "nt" for c in op):
                raise ValueError
    except ValueError:
        sys.exit(f"bench_torch_kernels: bad --gemm {args.gemm!r} (expected MxNxKxOPxBATCH, OP in nn/nt/tn/tt)")
    try:
        attns = []
        for a in (x for x in args.attention.split(",") if x):
            b, h, t, s_len, d, c, p = a.split("x")
            attns.append((int(b), int(h), int(t), int(s_len), int(d), c == "c", float(p)))
            if min(attns[-1][:5]) < 1 or c not in "cn" or not 0 <= attns[-1][6] < 1:
                raise ValueError
    except ValueError:
        sys.exit(f"bench_torch_kernels: bad --attention {args.attention!r} (expected BxHxTxSxDxCxP)")
    attn_dtypes = [d for d in args.attention_dtypes.split(",") if d]
    if any(d not in ("bf16", "fp32") for d in attn_dtypes):
        sys.exit(f"bench_torch_kernels: bad --attention-dtypes {args.attention_dtypes!r} (known: bf16, fp32)")
    dtypes = [d for d in args.gemm_dtypes.split(",") if d]
    if any(d not in ("bf16", "fp32") for d in dtypes):
        sys.exit(f"bench_torch_kernels: bad --gemm-dtypes {args.gemm_dtypes!r} (known: bf16, fp32)")
    kernels = [k for k in args.kernels.split(",") if k]
    unknown = [k for k in kernels if k not in KERNELS]
    if unknown:
        sys.exit(f"bench_torch_kernels: unknown kernel(s) {', '.join(unknown)} (known: {', '.join(KERNELS)})")

    results = []
    for t in threads:
        torch.set_num_threads(t)
        for kernel in kernels:
            for rows, cols in shapes:
                call = make_call(kernel, rows, cols)
                median, lo, hi, reps, inner = measure(call, args.reps, args.warmup, args.min_sample)
                nbytes = tensor_bytes(kernel, rows, cols)
                results.append({"kernel": kernel, "shape": f"{rows}x{cols}", "rows": rows, "cols": cols,
                                "threads": t, "median_s": median, "min_s": lo, "max_s": hi, "reps": reps,
                                "calls_per_rep": inner, "bytes": nbytes, "gbps": nbytes / median * 1e-9})
        for m, n, k, op, batch in gemms:
            for dtype in dtypes:
                call = make_matmul(m, n, k, op, batch, dtype)
                median, lo, hi, reps, inner = measure(call, args.reps, args.warmup, args.min_sample)
                flops = 2 * m * n * k * batch
                results.append({"kernel": "matmul", "m": m, "n": n, "k": k, "op": op, "batch": batch,
                                "dtype": dtype, "threads": t, "median_s": median, "min_s": lo, "max_s": hi,
                                "reps": reps, "calls_per_rep": inner, "flops": flops,
                                "gflops": flops / median * 1e-9})
        for index, (b, h, tq, s_len, d, causal, p) in enumerate(attns):
            for kernel in ("attention.fwd", "attention.fwd+bwd"):
                for dtype in attn_dtypes:
                    call = make_attention(kernel, b, h, tq, s_len, d, causal, p, dtype)
                    median, lo, hi, reps, inner = measure(call, args.reps, args.warmup, args.min_sample)
                    flops = attention_flops(kernel, b, h, tq, s_len, d, causal)
                    results.append({"kernel": kernel, "case": index, "dtype": dtype, "threads": t,
                                    "median_s": median, "min_s": lo, "max_s": hi, "reps": reps,
                                    "calls_per_rep": inner, "flops": flops, "gflops": flops / median * 1e-9})
    json.dump({"torch_version": torch.__version__, "results": results}, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
