#!/usr/bin/python3
"""transformers' side of the Hugging Face GPT-2 parity test (tests/nn/test_hf_gpt2.cpp).

Run with the Hugging Face venv (tools/setup_hf.sh: transformers over Debian's torch). Nothing is
downloaded: every model is made here, GPT2LMHeadModel(GPT2Config(...)), and written with
save_pretrained.

usage:
  hf_gpt2_parity.py make DIR
      For each shape in SHAPES, a random model in DIR/<name> (save_pretrained: config.json and
      model.safetensors), its fp16 and bf16 copies in DIR/<name>_f16 and DIR/<name>_bf16, and
      DIR/<name>.json: the batch (ids [B, T], targets [B, T]), the loss, a greedy continuation of a
      prompt, the logits as raw float32 in DIR/<name>.logits (of the fp32 model) and
      DIR/<name>_f16.logits / _bf16.logits (the same model with its weights rounded as those files
      hold them), and DIR/<name>_stepped: the model after one AdamW step on the batch as lm train
      takes it (clip to norm 1; lr 1e-3, betas 0.9 / 0.99, eps 1e-8, weight decay 0.1 on tensors of
      2 or more dimensions only), with the clipped gradients in DIR/<name>_grads.safetensors (the
      parameters' names and layout).
  hf_gpt2_parity.py check-export DIR IDS LOGITS
      GPT2LMHeadModel.from_pretrained(DIR) (a folder tapegrad wrote) must load with no missing or
      unexpected weights and give, on the ids in IDS (JSON [B, T]), the logits in LOGITS (raw
      float32, ours) to 1e-5 relative to the largest; prints the largest difference.
"""
import copy
import json
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F
import transformers
from safetensors.torch import save_file
from transformers import GPT2Config, GPT2LMHeadModel

# name: GPT2Config keys, and the batch B x T (T <= n_positions; the prompt + continuation too).
SHAPES = {
    # d_head 9 (odd), tied, GPT-2's tanh GELU, a batch shorter than the positions
    "tied_odd": dict(cfg=dict(vocab_size=97, n_positions=32, n_embd=36, n_layer=2, n_head=4,
                              activation_function="gelu_new"), B=3, T=20, prompt=5, new=20),
    # untied head, the exact GELU, another epsilon, a batch as long as the positions
    "untied_exact": dict(cfg=dict(vocab_size=101, n_positions=16, n_embd=20, n_layer=3, n_head=5,
                                  activation_function="gelu", tie_word_embeddings=False,
                                  layer_norm_epsilon=1e-4), B=2, T=16, prompt=3, new=13),
    # an odd width (33 = 3 x 11), one layer, torch's name for the tanh GELU
    "odd_width": dict(cfg=dict(vocab_size=64, n_positions=48, n_embd=33, n_layer=1, n_head=3,
                               activation_function="gelu_pytorch_tanh"), B=2, T=40, prompt=8, new=30),
}
LR, BETAS, EPS, WD = 1e-3, (0.9, 0.99), 1e-8, 0.1


def make_model(cfg, seed):
    torch.manual_seed(seed)
    config = GPT2Config(**cfg, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)
    model = GPT2LMHeadModel(config)
    # Weights large enough that the GELU is not linear (pre-activations of order 1: the exact and
    # the tanh forms differ), layer norms and biases away from 1 and 0.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.2)
            elif name.endswith("weight"):
                p.uniform_(0.5, 1.5)
            else:
                p.uniform_(-0.3, 0.3)
    return model


def logits_of(model, ids):
    with torch.no_grad():
        return model(ids).logits.float()


def write_raw(path, t):
    t.detach().contiguous().numpy().astype("<f4").tofile(path)


def greedy(model, prompt, new):
    """Argmax continuation, the whole window recomputed each step; the smallest top-1 / top-2 gap."""
    ids, gap = list(prompt), float("inf")
    with torch.no_grad():
        for _ in range(new):
            last = model(torch.tensor([ids])).logits[0, -1]
            top = torch.topk(last, 2).values
            gap = min(gap, float(top[0] - top[1]))
            ids.append(int(torch.argmax(last)))
    return ids[len(prompt):], gap


def make(out):
    for i, (name, s) in enumerate(SHAPES.items()):
        model = make_model(s["cfg"], 100 + i).eval()
        d = os.path.join(out, name)
        model.save_pretrained(d)
        g = torch.Generator().manual_seed(200 + i)
        V = s["cfg"]["vocab_size"]
        x = torch.randint(0, V, (s["B"], s["T"]), generator=g)
        y = torch.randint(0, V, (s["B"], s["T"]), generator=g)
        logits = logits_of(model, x)
        write_raw(d + ".logits", logits)
        loss = F.cross_entropy(logits.view(-1, V), y.view(-1))
        prompt = torch.randint(0, V, (s["prompt"],), generator=g).tolist()
        cont, gap = greedy(model, prompt, s["new"])
        for dtype, suffix in ((torch.float16, "_f16"), (torch.bfloat16, "_bf16")):
            low = copy.deepcopy(model).to(dtype)
            low.save_pretrained(d + suffix)
            write_raw(d + suffix + ".logits", logits_of(low.float(), x))

        # One step as lm train takes it (no dropout: the *_pdrop are 0).
        model.train()
        model.zero_grad()
        step_loss = F.cross_entropy(model(x).logits.view(-1, V), y.view(-1))
        step_loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        # The clipped gradients, under the parameters' names and in their (Conv1D) layout.
        save_file({n: p.grad.contiguous() for n, p in model.named_parameters()}, d + "_grads.safetensors",
                  metadata={"format": "pt"})
        params = list(model.parameters())  # a tied wte once
        opt = torch.optim.AdamW([{"params": [p for p in params if p.dim() >= 2], "weight_decay": WD},
                                 {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}],
                                lr=LR, betas=BETAS, eps=EPS)
        opt.step()
        model.save_pretrained(d + "_stepped")
        with open(d + ".json", "w") as f:
            json.dump({"ids": x.tolist(), "targets": y.tolist(), "loss": float(loss),
                       "prompt": prompt, "greedy": cont, "greedy_gap": gap,
                       "lr": LR, "weight_decay": WD, "versions": {"torch": torch.__version__,
                                                                  "transformers": transformers.__version__}}, f)
        print(f"{name}: loss {float(loss):.6f}, greedy gap {gap:.2e}")


def check_export(d, ids_path, logits_path):
    model, info = GPT2LMHeadModel.from_pretrained(d, output_loading_info=True)
    problems = {k: v for k, v in info.items() if v}
    if problems:
        sys.exit(f"from_pretrained({d}): {problems}")
    ids = torch.tensor(json.load(open(ids_path)))
    theirs = logits_of(model.eval(), ids)
    ours = torch.from_numpy(np.fromfile(logits_path, dtype="<f4")).view(theirs.shape)
    diff = float((theirs - ours).abs().max())
    scale = max(1.0, float(theirs.abs().max()))
    print(f"{d}: from_pretrained logits vs ours: largest difference {diff:.2e} (largest logit {scale:.2f})")
    if diff > 1e-5 * scale:
        sys.exit("export: logits differ")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "make":
        make(sys.argv[2])
    elif len(sys.argv) == 5 and sys.argv[1] == "check-export":
        check_export(*sys.argv[2:])
    else:
        sys.exit(__doc__)
