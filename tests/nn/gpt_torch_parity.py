#!/usr/bin/python3
"""PyTorch side of the GPT parity test (tests/nn/test_gpt_parity.cpp), and the recipes of nn/gpt.md.

Reads a checkpoint written by tapegrad (`lm train`'s format) the way nn/gpt.md tells a PyTorch user
to, into a GPT built like nanoGPT's model.py (the same modules, names and forward pass, written
out here so that the test needs nothing but torch), then for the batch in BATCH: the loss, every
parameter's gradient, clipping to norm 1 and one AdamW step with nanoGPT's two parameter groups
(weight decay on parameters of 2 or more dimensions only). Writes the loss and the gradients to
OUT, and the stepped model as a tapegrad checkpoint to OUT_MODEL (the other direction of nn/gpt.md).

usage: gpt_torch_parity.py MODEL BATCH OUT OUT_MODEL
"""
import json
import math
import struct
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class GPTConfig:
    def __init__(self, block_size, vocab_size, n_layer, n_head, n_embd, dropout, bias):
        self.block_size, self.vocab_size = block_size, vocab_size
        self.n_layer, self.n_head, self.n_embd = n_layer, n_head, n_embd
        self.dropout, self.bias = dropout, bias


class CausalSelfAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_attn = nn.Linear(c.n_embd, 3 * c.n_embd, bias=c.bias)
        self.c_proj = nn.Linear(c.n_embd, c.n_embd, bias=c.bias)
        self.attn_dropout = nn.Dropout(c.dropout)
        self.resid_dropout = nn.Dropout(c.dropout)
        self.n_head, self.n_embd, self.dropout = c.n_head, c.n_embd, c.dropout
        self.flash = hasattr(F, "scaled_dot_product_attention")
        if not self.flash:  # as nanoGPT: the causal mask as a buffer named "bias" (PyTorch < 2)
            self.register_buffer("bias", torch.tril(torch.ones(c.block_size, c.block_size))
                                 .view(1, 1, c.block_size, c.block_size))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        if self.flash:
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0,
                                               is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
            y = self.attn_dropout(F.softmax(att, dim=-1)) @ v
        return self.resid_dropout(self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C)))


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_fc = nn.Linear(c.n_embd, 4 * c.n_embd, bias=c.bias)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * c.n_embd, c.n_embd, bias=c.bias)
        self.dropout = nn.Dropout(c.dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.ln_1 = nn.LayerNorm(c.n_embd)
        self.attn = CausalSelfAttention(c)
        self.ln_2 = nn.LayerNorm(c.n_embd)
        self.mlp = MLP(c)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.config = c
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(c.vocab_size, c.n_embd), wpe=nn.Embedding(c.block_size, c.n_embd),
            drop=nn.Dropout(c.dropout), h=nn.ModuleList([Block(c) for _ in range(c.n_layer)]),
            ln_f=nn.LayerNorm(c.n_embd)))
        self.lm_head = nn.Linear(c.n_embd, c.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # tied

    def forward(self, idx, targets=None):
        pos = torch.arange(0, idx.size(1), dtype=torch.long)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        if targets is None:  # generation: the last position's logits only
            return self.lm_head(x[:, [-1], :]), None
        logits = self.lm_head(x)
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)


def load(path):
    """nn/gpt.md, "Reading a checkpoint into PyTorch", line for line."""
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n]); meta = header.pop("__metadata__")
    body = data[8 + n:]
    state = {k: torch.from_numpy(np.frombuffer(body[e["data_offsets"][0]:e["data_offsets"][1]], "<f4")
                                 .copy().reshape(e["shape"]))
             for k, e in header.items() if not k.startswith("optim.")}
    model = GPT(GPTConfig(**json.loads(meta["config"])))
    state["lm_head.weight"] = state["transformer.wte.weight"]  # the tied head: one tensor, two names
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and all(k.endswith(".attn.bias") for k in missing), (missing, unexpected)
    return model, meta


def save(model, meta, path):
    """nn/gpt.md, "Writing one from PyTorch": the parameters (the tied head once), the metadata."""
    tensors = {k: p.detach().contiguous().numpy().astype("<f4") for k, p in model.named_parameters()}
    header, offset = {}, 0
    for k, a in tensors.items():
        header[k] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
    header["__metadata__"] = {"format": "tapegrad.gpt.v1", "tokenizer": meta["tokenizer"], "config": json.dumps(
        {k: getattr(model.config, k) for k in ("vocab_size", "block_size", "n_layer", "n_head", "n_embd",
                                               "dropout", "bias")})}
    if meta["tokenizer"] == "char":
        header["__metadata__"]["vocab"] = meta["vocab"]
    text = json.dumps(header).encode(); text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(a.tobytes() for a in tensors.values()))


def main():
    model_path, batch_path, out_path, out_model = sys.argv[1:5]
    model, meta = load(model_path)
    with open(batch_path) as f:
        words = f.read().split()
    B, T, lr, wd = int(words[0]), int(words[1]), float(words[2]), float(words[3])
    ids = torch.tensor([int(w) for w in words[4:4 + B * T]]).view(B, T)
    targets = torch.tensor([int(w) for w in words[4 + B * T:4 + 2 * B * T]]).view(B, T)
    model.train()  # dropout is 0
    _, loss = model(ids, targets)
    loss.backward()
    grads = {k: p.grad.clone() for k, p in model.named_parameters()}
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    # nanoGPT's configure_optimizers: decay the parameters of 2 or more dimensions only.
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": wd},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.99), eps=1e-8).step()
    with open(out_path, "w") as f:
        f.write(f"torch {torch.__version__}\n")
        f.write(f"loss {loss.item():.9g}\n")
        for k, g in grads.items():
            f.write(f"grad {k} {g.numel()} " + " ".join(f"{v:.9g}" for v in g.reshape(-1).tolist()) + "\n")
    save(model, meta, out_model)


if __name__ == "__main__":
    main()
