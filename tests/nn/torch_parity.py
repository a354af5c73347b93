#!/usr/bin/python3
"""PyTorch side of the parity test (tests/nn/test_parity.cpp).

Reads a model description written by the C++ test (config, a padded batch, every parameter by its
tapegrad name), builds the same model from PyTorch parts -- nn.Embedding * sqrt(d) + sinusoidal
positions, nn.Transformer(batch_first=True), nn.Linear generator -- loads the weights with
load_state_dict(strict=True) (so the parameter names must match one to one), and writes the
label-smoothed cross-entropy loss and every parameter's gradient.

usage: torch_parity.py IN OUT
"""
import math
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

PAD = 0


def read_input(path):
    cfg, batch, params = {}, {}, {}
    with open(path) as f:
        for line in f:
            tok = line.split()
            if not tok:
                continue
            if tok[0] == "config":
                keys = ["src_vocab", "tgt_vocab", "d_model", "heads", "enc_layers", "dec_layers", "d_ff"]
                cfg = {k: int(v) for k, v in zip(keys, tok[1:8])}
                cfg["norm_first"] = tok[8] == "1"
                cfg["activation"] = tok[9]
                cfg["label_smoothing"] = float(tok[10])
            elif tok[0] == "batch":
                batch["shape"] = tuple(int(v) for v in tok[1:4])
            elif tok[0] in ("src", "tgt_in", "labels"):
                batch[tok[0]] = [int(v) for v in tok[1:]]
            elif tok[0] == "param":
                name, ndim = tok[1], int(tok[2])
                shape = [int(v) for v in tok[3:3 + ndim]]
                values = [float(v) for v in tok[3 + ndim:]]
                params[name] = torch.tensor(values, dtype=torch.float32).reshape(shape)
    return cfg, batch, params


class Model(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d = cfg["d_model"]
        self.d = d
        self.src_embed = nn.Embedding(cfg["src_vocab"], d)
        self.tgt_embed = nn.Embedding(cfg["tgt_vocab"], d)
        self.transformer = nn.Transformer(
            d_model=d, nhead=cfg["heads"], num_encoder_layers=cfg["enc_layers"],
            num_decoder_layers=cfg["dec_layers"], dim_feedforward=cfg["d_ff"], dropout=0.0,
            activation=cfg["activation"], batch_first=True, norm_first=cfg["norm_first"])
        self.generator = nn.Linear(d, cfg["tgt_vocab"])

    def positions(self, n):
        pe = torch.zeros(n, self.d, dtype=torch.float64)
        pos = torch.arange(n, dtype=torch.float64)[:, None]
        i = torch.arange(0, self.d, 2, dtype=torch.float64)
        angle = pos * torch.exp(-math.log(10000.0) * i / self.d)
        pe[:, 0::2] = torch.sin(angle)
        pe[:, 1::2] = torch.cos(angle)[:, : self.d // 2]
        return pe.float()

    def forward(self, src, tgt):
        S, T = src.shape[1], tgt.shape[1]
        scale = math.sqrt(self.d)
        x = self.src_embed(src) * scale + self.positions(S)
        y = self.tgt_embed(tgt) * scale + self.positions(T)
        causal = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
        out = self.transformer(x, y, tgt_mask=causal, src_key_padding_mask=src == PAD,
                               tgt_key_padding_mask=tgt == PAD, memory_key_padding_mask=src == PAD)
        return self.generator(out)


def main():
    cfg, batch, params = read_input(sys.argv[1])
    torch.manual_seed(0)
    model = Model(cfg)
    model.load_state_dict(params, strict=True)
    model.train()  # dropout is 0; training mode keeps PyTorch off its inference fast path
    B, S, T = batch["shape"]
    src = torch.tensor(batch["src"]).reshape(B, S)
    tgt = torch.tensor(batch["tgt_in"]).reshape(B, T)
    labels = torch.tensor(batch["labels"]).reshape(B * T)
    logits = model(src, tgt).reshape(B * T, -1)
    loss = F.cross_entropy(logits, labels, ignore_index=PAD, label_smoothing=cfg["label_smoothing"])
    loss.backward()
    with open(sys.argv[2], "w") as f:
        f.write(f"torch {torch.__version__}\n")
        f.write(f"loss {loss.item():.9g}\n")
        for name, p in model.named_parameters():
            g = p.grad if p.grad is not None else torch.zeros_like(p)
            f.write(f"grad {name} {g.numel()} " + " ".join(f"{v:.9g}" for v in g.reshape(-1).tolist()) + "\n")


if __name__ == "__main__":
    main()
