#!/usr/bin/python3
"""The PyTorch baseline of bench/bench_lm.cpp: the same GPT, the same configs, random tokens, AdamW
with nanoGPT's two parameter groups (matrices decayed, vectors not), clipping at 1, no dropout;
printed as one JSON line with the same fields. The model is nanoGPT's for small and nano (as the
parity test builds it: tests/nn/gpt_torch_parity.py, byte tokens) and transformers'
GPT2LMHeadModel for gpt2 and gpt2-1024 (GPT-2 124M with random weights, vocabulary 50,257).

  /root/.cache/tapegrad-torch2/bin/python tools/bench_torch_lm.py --config small --threads 2 --mode fp32
  /root/.cache/tapegrad-torch2/bin/python tools/bench_torch_lm.py --config nano --threads 2 --mode bf16
  /usr/bin/python3 tools/bench_torch_lm.py --config small --mode fp32 --quick       # Debian's torch 1.13
  /root/.cache/tapegrad-torch2/bin/python tools/bench_torch_lm.py --config gpt2 --threads 2   # needs transformers
  python3 tools/bench_torch_lm.py --config gpt2 --threads 2 --nanogpt --mode bf16   # the same shapes, torch only

Modes: fp32 (eager), bf16 (eager under torch.autocast("cpu", torch.bfloat16), the usual mixed
precision: matmuls in bf16, weights and optimizer in fp32), compile (torch.compile of the model,
fp32; reported as failed when it does not run). One process per measurement, so that thread counts
and peak RSS belong to that run alone; the thread variables are set before torch is imported.

Sampling at batch 1 from a one-token prompt, at most block - 1 new tokens: for nanoGPT's model its
own way, no key/value cache (every new token runs the model over the whole context, as nanoGPT's
generate does); for GPT2LMHeadModel transformers' generate(do_sample=True, top_k=0, use_cache=True),
which keeps a key/value cache like tapegrad. The JSON's sample_cache says which.

The gpt2 configs compute the loss the way transformers is used for fine-tuning, labels=input_ids
(the model shifts them: T - 1 predicted positions per window against tapegrad's T; the FLOP count
below uses T for both), and report the attention implementation transformers picked (sdpa on
PyTorch >= 2.1.1, else eager). With --nanogpt they run nanoGPT's model as the other configs do (targets the
next tokens, T positions; exact GELU; sampling without a cache).
"""
import argparse
import json
import os
import sys

CONFIGS = {  # bench/bench_lm.cpp's table
    "small": dict(n_layer=4, n_head=4, n_embd=256, block_size=128, batch=32, steps=7),
    "nano": dict(n_layer=6, n_head=6, n_embd=384, block_size=256, batch=16, steps=5),
    "d768": dict(n_layer=12, n_head=12, n_embd=768, block_size=256, batch=8, steps=5),
    "d768-64": dict(n_layer=12, n_head=12, n_embd=768, block_size=64, batch=4, steps=7, sample_tokens=63),
    "gpt2": dict(n_layer=12, n_head=12, n_embd=768, block_size=64, batch=4, steps=7, vocab=50257, hf=True,
                 sample_tokens=63),
    "gpt2-1024": dict(n_layer=12, n_head=12, n_embd=768, block_size=1024, batch=4, steps=3, warmup=1,
                      vocab=50257, hf=True),
}

p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
p.add_argument("--config", choices=list(CONFIGS), default="small")
p.add_argument("--threads", type=int, default=1)
p.add_argument("--mode", choices=["fp32", "bf16", "compile"], default="fp32")
p.add_argument("--warmup", type=int, help="untimed steps (default 2, gpt2-1024 1; compile: + 1 for the compilation)")
p.add_argument("--steps", type=int, help="timed steps, the median reported (default: small 7, nano 5, gpt2 7, "
               "gpt2-1024 3)")
p.add_argument("--sample-tokens", type=int, help="default: gpt2 63, others 200")
p.add_argument("--quick", action="store_true", help="1 warm-up + 2 timed steps")
p.add_argument("--nanogpt", action="store_true", help="the gpt2 configs on nanoGPT's model (the same shapes, exact "
               "GELU, no key/value cache) instead of transformers' GPT2LMHeadModel: for a machine without transformers")
p.add_argument("--seed", type=int, default=1)
args = p.parse_args()
for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = str(args.threads)

import contextlib  # noqa: E402
import math  # noqa: E402
import resource  # noqa: E402

import torch  # noqa: E402

from bench_common import timed  # noqa: E402

torch.set_num_threads(args.threads)
torch.manual_seed(args.seed)


def rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def nanogpt_model(c):
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "nn"))
    from gpt_torch_parity import GPT, GPTConfig

    cfg = GPTConfig(block_size=c["block_size"], vocab_size=c.get("vocab", 256), n_layer=c["n_layer"],
                    n_head=c["n_head"], n_embd=c["n_embd"], dropout=0.0, bias=True)
    model = GPT(cfg)
    for name, q in model.named_parameters():  # nanoGPT's initialisation
        if q.dim() >= 2:
            std = 0.02 / math.sqrt(2 * cfg.n_layer) if name.endswith("c_proj.weight") else 0.02
            torch.nn.init.normal_(q, 0.0, std)
        else:
            torch.nn.init.zeros_(q) if name.endswith("bias") else torch.nn.init.ones_(q)
    return model


def hf_model(c):
    """GPT-2 124M's GPT2LMHeadModel (transformers' own initialisation: nanoGPT's), no dropout, and no
    end-of-text token, so that generate never stops early on random weights."""
    import transformers
    from transformers import GPT2Config, GPT2LMHeadModel

    transformers.logging.set_verbosity_error()
    cfg = GPT2Config(n_layer=c["n_layer"], n_head=c["n_head"], n_embd=c["n_embd"], n_positions=1024,
                     vocab_size=c["vocab"], activation_function="gelu_new", layer_norm_epsilon=1e-5,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, tie_word_embeddings=True,
                     bos_token_id=None, eos_token_id=None)
    return GPT2LMHeadModel(cfg), transformers.__version__


def main():
    c = CONFIGS[args.config]
    B, T, V, hf = c["batch"], c["block_size"], c.get("vocab", 256), c.get("hf", False) and not args.nanogpt
    warmup = 1 if args.quick else (args.warmup or c.get("warmup", 2))
    steps = 2 if args.quick else (args.steps or c["steps"])
    if hf:
        model, hf_version = hf_model(c)
    else:
        model = nanogpt_model(c)
    model.train()
    params = list(model.parameters())
    groups = [{"params": [q for q in params if q.dim() >= 2], "weight_decay": 0.1},
              {"params": [q for q in params if q.dim() < 2], "weight_decay": 0.0}]
    optim = torch.optim.AdamW(groups, lr=1e-4, betas=(0.9, 0.99), eps=1e-8)
    run = model
    compiled = None
    if args.mode == "compile":
        try:
            run = torch.compile(model)
            warmup += 1
        except Exception as e:  # noqa: BLE001 -- any failure is reported as such
            compiled = f"torch.compile failed: {type(e).__name__}: {e}"
    amp = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if args.mode == "bf16" else contextlib.nullcontext
    gen = torch.Generator().manual_seed(args.seed * 1000003 + 17)
    text = torch.randint(0, V, (1 << 16,), generator=gen)
    batches = []
    for _ in range(4):
        o = torch.randint(0, len(text) - T - 1, (B,), generator=gen)
        batches.append((torch.stack([text[i:i + T] for i in o]), torch.stack([text[i + 1:i + T + 1] for i in o])))
    print(f"torch {torch.__version__} config {args.config} mode {args.mode}: "
          f"{sum(q.numel() for q in params)} parameters, {torch.get_num_threads()} threads"
          + (f"; transformers {hf_version} GPT2LMHeadModel, attention {model.config._attn_implementation}"
             if hf else "; nanoGPT's model"), file=sys.stderr)
    losses, state = [], {"next": 0}

    def step():
        x, y = batches[state["next"] % len(batches)]
        state["next"] += 1
        optim.zero_grad(set_to_none=True)
        with amp():
            loss = run(input_ids=x, labels=x).loss if hf else run(x, y)[1]
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optim.step()
        losses.append(loss.item())

    result = {"impl": "torch", "mode": args.mode, "config": args.config, "threads": args.threads,
              "torch": torch.__version__, "model": "transformers GPT2LMHeadModel" if hf else "nanoGPT",
              "sample_cache": hf, "quick": args.quick}
    if hf:
        result.update(transformers=hf_version, attention=model.config._attn_implementation)
    try:
        if compiled:
            raise RuntimeError(compiled)
        for _ in range(warmup):
            step()
        med, lo, hi = timed(step, steps, warm=False)
    except Exception as e:  # noqa: BLE001 -- torch.compile fails in many ways on a machine without a compiler
        result.update(failed=f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300],
                      peak_rss_mib=rss_mib())
        print(json.dumps(result))
        return
    flops = 3 * (c["n_layer"] * (24 * B * T * c["n_embd"] ** 2 + 4 * B * T * T * c["n_embd"]) +
                 2 * B * T * c["n_embd"] * V)
    train_rss = rss_mib()
    print(f"  train: {med * 1e3:.1f} ms/step (median of {steps}), {B * T / med:.0f} tokens/s; loss "
          f"{losses[0]:.3f} -> {losses[-1]:.3f}; peak RSS {train_rss:.1f} MiB", file=sys.stderr)

    # Sampling at batch 1 in eval mode: nanoGPT's generate (full recompute per token, no cache), or
    # transformers' generate with its key/value cache.
    model.eval()
    n = min(args.sample_tokens or c.get("sample_tokens", 200), T - 1)
    g = torch.Generator().manual_seed(args.seed + 99)

    @torch.no_grad()
    def sample():
        idx = torch.tensor([[10]])
        if hf:
            with amp():
                out = model.generate(idx, attention_mask=torch.ones_like(idx), max_new_tokens=n, do_sample=True,
                                     top_k=0, use_cache=True, pad_token_id=0)
            assert out.shape == (1, n + 1), out.shape  # no early stop
            return
        for _ in range(n):
            with amp():
                logits, _ = model(idx[:, -T:])
            probs = torch.softmax(logits[:, -1, :].float(), dim=-1)
            idx = torch.cat([idx, torch.multinomial(probs, 1, generator=g)], dim=1)

    sample_s = timed(sample, 1 if args.quick else 3)[0]
    result.update(steps=steps, ms_per_step=med * 1e3, ms_min=lo * 1e3, ms_max=hi * 1e3, tokens_per_s=B * T / med,
                  gflops=flops / med * 1e-9, train_rss_mib=train_rss, peak_rss_mib=rss_mib(), sample_tokens=n,
                  sample_tok_s=n / sample_s, loss_first=losses[0], loss_last=losses[-1])
    print(f"  sample batch 1 ({'generate, key/value cache' if hf else 'no cache'}): {n} tokens in {sample_s * 1e3:.1f} ms, {n / sample_s:.0f} tokens/s; "
          f"peak RSS {result['peak_rss_mib']:.1f} MiB", file=sys.stderr)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
