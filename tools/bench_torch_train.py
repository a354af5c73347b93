#!/usr/bin/python3
"""The PyTorch baseline of bench/bench_train.cpp: the same encoder-decoder Transformer, copy task,
optimizer, loss, step counts and measurements, printed as one JSON line with the same fields.

  /usr/bin/python3 tools/bench_torch_train.py --config S --setting 1        # torch 1 thread
  /usr/bin/python3 tools/bench_torch_train.py --config M --setting 2 --quick
  /root/.cache/tapegrad-torch2/bin/python tools/bench_torch_train.py --config M --setting 2 --precision bf16

Settings (one process each, so thread counts and peak RSS belong to that run alone):
  1       torch.set_num_threads(1), OMP and OpenBLAS 1 thread
  2       torch.set_num_threads(2), OMP and OpenBLAS 2 threads
  1+blas2 torch.set_num_threads(1), OpenBLAS 2 threads (Debian's torch sends matmuls to OpenBLAS,
          whose threads torch.set_num_threads does not control)
The environment is set before torch is imported: OpenBLAS and OpenMP read it when they load.

Model: nn.Embedding * sqrt(d) + sinusoidal positions (sin even / cos odd dims) + dropout, then
nn.Transformer(batch_first=True, post-norm, ReLU, dropout 0.1) + nn.Linear generator; Adam(betas
0.9/0.98, eps 1e-9), CrossEntropyLoss(label_smoothing=0.1, ignore_index=0). Masks as tapegrad
builds them: causal target mask, and key-padding masks for source, target and memory.

--precision bf16: the forward and the loss under torch.autocast("cpu", dtype=torch.bfloat16), backward
outside it (as the autocast documentation recommends); weights, gradients and Adam stay fp32.
Decoding runs under the same autocast, without nn.TransformerEncoder's inference fast path (its fused
kernel rejects autocast's bf16 activations: "expected scalar type Float but found BFloat16"); a torch
that cannot turn the fast path off (1.13: no torch.backends.mha) reports no bf16 decoding figures.

Greedy decoding: nn.Transformer has no KV cache, so every step re-runs the decoder on the whole
prefix (encoder once); 32 steps forced (<eos> ignored), tokens/s = batch * 32 / time. That is what
a PyTorch user gets from nn.Transformer, so it is the honest baseline for the incremental decoder.
"""
import argparse
import json
import math
import os
import sys

SETTINGS = {"1": (1, 1), "2": (2, 2), "1+blas2": (1, 2)}  # setting -> (torch threads, OpenBLAS threads)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", choices=["S", "M"], default="S")
    p.add_argument("--setting", choices=list(SETTINGS), default="1")
    p.add_argument("--warmup", type=int, help="untimed steps (default 3 for S, 2 for M)")
    p.add_argument("--steps", type=int, help="timed steps, median reported (default 15 for S, 7 for M)")
    p.add_argument("--quick", action="store_true", help="1 warm-up + 3 timed steps, fewer decode reps")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                   help="bf16: torch.autocast('cpu', dtype=torch.bfloat16) around forward and loss")
    return p.parse_args()


args = parse_args()
torch_threads, blas_threads = SETTINGS[args.setting]
os.environ["OMP_NUM_THREADS"] = str(torch_threads)
os.environ["OPENBLAS_NUM_THREADS"] = str(blas_threads)
os.environ["MKL_NUM_THREADS"] = str(torch_threads)

import resource  # noqa: E402
import warnings  # noqa: E402

# nn.TransformerEncoder's inference fast path (used by decoding) warns that nested tensors are a prototype.
warnings.filterwarnings("ignore", message="The PyTorch API of nested tensors")

import contextlib  # noqa: E402

import torch  # noqa: E402
from torch import nn  # noqa: E402

from bench_common import timed  # noqa: E402

torch.set_num_threads(torch_threads)
torch.manual_seed(args.seed)

PAD, BOS, EOS, UNK = 0, 1, 2, 3
CONFIGS = {
    # d_model, heads, d_ff, enc/dec layers, vocab, batch, length (src_len = tgt_len), warmup, steps
    "S": dict(d=128, heads=4, ff=512, layers=2, vocab=32, batch=64, length=32, warmup=3, steps=15),
    "M": dict(d=256, heads=8, ff=1024, layers=3, vocab=1000, batch=64, length=64, warmup=2, steps=7),
}
NEW_TOKENS = 32


class Seq2Seq(nn.Module):
    def __init__(self, vocab, d, heads, ff, layers, dropout=0.1, max_len=512):
        super().__init__()
        self.d = d
        self.src_embed = nn.Embedding(vocab, d)
        self.tgt_embed = nn.Embedding(vocab, d)
        pos = torch.arange(max_len).unsqueeze(1)
        div = torch.exp(torch.arange(0, d, 2) * (-math.log(10000.0) / d))
        pe = torch.zeros(max_len, d)
        pe[:, 0::2] = torch.sin(pos * div)
        pe[:, 1::2] = torch.cos(pos * div)
        self.register_buffer("pe", pe)
        self.dropout = nn.Dropout(dropout)
        self.transformer = nn.Transformer(d, heads, layers, layers, ff, dropout, batch_first=True)
        self.generator = nn.Linear(d, vocab)

    def embed(self, emb, ids):
        return self.dropout(emb(ids) * math.sqrt(self.d) + self.pe[: ids.size(1)])

    def encode(self, src):
        return self.transformer.encoder(self.embed(self.src_embed, src), src_key_padding_mask=src == PAD)

    def decode(self, tgt_in, memory, src):
        causal = self.transformer.generate_square_subsequent_mask(tgt_in.size(1))
        return self.transformer.decoder(self.embed(self.tgt_embed, tgt_in), memory, tgt_mask=causal,
                                        tgt_key_padding_mask=tgt_in == PAD, memory_key_padding_mask=src == PAD)

    def forward(self, src, tgt_in):
        return self.generator(self.decode(tgt_in, self.encode(src), src))


def make_batch(n, length, vocab, gen):
    """length-1 random symbols: src = x + <eos>, tgt_in = <bos> + x, labels = x + <eos>."""
    x = torch.randint(UNK + 1, vocab, (n, length - 1), generator=gen)
    eos = torch.full((n, 1), EOS)
    return torch.cat([x, eos], 1), torch.cat([torch.full((n, 1), BOS), x], 1), torch.cat([x, eos], 1)


def forward_matmul_flops(c):
    """The formula of bench/bench_train.cpp (forward_matmul_flops): matmul FLOPs of one forward."""
    d, f, B, S, T, V, L = c["d"], c["ff"], c["batch"], c["length"], c["length"], c["vocab"], c["layers"]
    ns, nt = B * S, B * T
    enc = 8 * ns * d * d + 4 * B * S * S * d + 4 * ns * d * f
    dec = 8 * nt * d * d + 4 * B * T * T * d + 4 * nt * d * d + 4 * ns * d * d + 4 * B * T * S * d + 4 * nt * d * f
    return L * enc + L * dec + 2 * nt * d * V


def autocast():
    """The compute precision of --precision: bf16 autocast on the CPU, or nothing."""
    if args.precision == "bf16":
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()


@torch.inference_mode()
def decode_forced(model, src):
    """Greedy, NEW_TOKENS steps on every row, full-prefix recompute (no KV cache in nn.Transformer)."""
    with autocast():
        memory = model.encode(src)
        ys = torch.full((src.size(0), 1), BOS)
        for _ in range(NEW_TOKENS):
            logits = model.generator(model.decode(ys, memory, src)[:, -1])
            ys = torch.cat([ys, logits.argmax(-1, keepdim=True)], 1)
    return ys


def main():
    c = CONFIGS[args.config]
    warmup = args.warmup if args.warmup is not None else (1 if args.quick else c["warmup"])
    steps = args.steps if args.steps is not None else (3 if args.quick else c["steps"])
    decode_reps = 2 if args.quick else 5

    model = Seq2Seq(c["vocab"], c["d"], c["heads"], c["ff"], c["layers"])
    model.train()
    optim = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.98), eps=1e-9)
    loss_fn = nn.CrossEntropyLoss(label_smoothing=0.1, ignore_index=PAD)
    gen = torch.Generator().manual_seed(args.seed * 1000003 + 17)
    batches = [make_batch(c["batch"], c["length"], c["vocab"], gen) for _ in range(4)]
    tokens_per_step = int((batches[0][2] != PAD).sum())
    flops_per_step = 3 * forward_matmul_flops(c)
    print(f"torch {torch.__version__} config {args.config} setting {args.setting}: "
          f"{sum(p.numel() for p in model.parameters())} parameters, precision {args.precision}, "
          f"torch threads {torch.get_num_threads()}, "
          f"OPENBLAS_NUM_THREADS={blas_threads}, OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '-')}",
          file=sys.stderr)

    losses = []
    state = {"next": 0}

    def step():
        src, tgt_in, labels = batches[state["next"] % len(batches)]
        state["next"] += 1
        optim.zero_grad(set_to_none=True)
        with autocast():
            logits = model(src, tgt_in)
            loss = loss_fn(logits.reshape(-1, c["vocab"]), labels.reshape(-1))
        loss.backward()
        optim.step()
        losses.append(loss.item())
        if not math.isfinite(losses[-1]):
            raise RuntimeError(f"bench_torch_train: the loss is {losses[-1]}")

    for _ in range(warmup - 1):  # timed() adds one more untimed call
        step()
    med, lo, hi = timed(step, steps)
    train_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0

    model.eval()
    decode = {c["batch"]: None, 1: None}
    if args.precision == "bf16" and not hasattr(torch.backends, "mha"):
        print(f"torch {torch.__version__} cannot turn off the encoder's fast path, which fails under bf16 autocast: "
              "no decoding figures", file=sys.stderr)
    else:
        if args.precision == "bf16":
            torch.backends.mha.set_fastpath_enabled(False)
        for batch in (c["batch"], 1):
            src = make_batch(batch, c["length"], c["vocab"], torch.Generator().manual_seed(args.seed + 99))[0]
            decode[batch] = batch * NEW_TOKENS / timed(lambda: decode_forced(model, src), decode_reps)[0]
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0

    print(json.dumps({
        "impl": "torch", "config": args.config, "threads": max(torch_threads, blas_threads),
        "setting": f"torch {torch_threads} thr, blas {blas_threads}, {args.precision}", "torch": torch.__version__,
        "precision": args.precision,
        "steps": steps, "ms_per_step": med * 1e3, "ms_min": lo * 1e3, "ms_max": hi * 1e3,
        "tokens_per_s": tokens_per_step / med, "flops_per_step": flops_per_step,
        "gflops": flops_per_step / med * 1e-9, "train_rss_mib": train_rss, "peak_rss_mib": rss,
        "decode_new_tokens": NEW_TOKENS, "decode_batch": c["batch"], "decode_batch_tok_s": decode[c["batch"]],
        "decode_b1_tok_s": decode[1], "loss_first": losses[0], "loss_last": losses[-1], "quick": args.quick,
    }))


if __name__ == "__main__":
    main()
