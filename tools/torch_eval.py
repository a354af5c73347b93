"""A translate checkpoint in PyTorch: loads it into torch.nn.Transformer (load_state_dict, strict)
and computes `translate eval`'s loss on a TSV file, following nn/checkpoint.md's forward pass
step by step. Needs numpy and torch (Debian's python3-torch 1.13 or PyTorch 2.x), and for a
`--tokenizer spm` checkpoint the sentencepiece package (python3-sentencepiece); nothing else.

  python3 tools/torch_eval.py MODEL.safetensors DATA.tsv   prints {"loss": .., "tokens": ..}

The test checkpoint.interop.torch_eval_matches_translate_eval runs it against `translate eval`.
"""
import base64
import json
import math
import struct
import sys

import numpy as np
import torch
from torch import nn

PAD, BOS, EOS, UNK = 0, 1, 2, 3  # the first four entries of both vocabularies


def read_checkpoint(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n].decode("utf-8"))
    meta = header.pop("__metadata__")
    body = data[8 + n :]
    state = {}
    for name, e in header.items():
        if name.startswith("optim."):  # training checkpoints: the optimizer state
            continue
        assert e["dtype"] == "F32", (name, e["dtype"])
        b, end = e["data_offsets"]
        state[name] = torch.from_numpy(np.frombuffer(body[b:end], dtype="<f4").copy().reshape(e["shape"]))
    return meta, state


class Model(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.d = c["d_model"]
        self.src_embed = nn.Embedding(c["src_vocab"], c["d_model"])
        self.tgt_embed = nn.Embedding(c["tgt_vocab"], c["d_model"])
        self.transformer = nn.Transformer(c["d_model"], c["heads"], c["enc_layers"], c["dec_layers"], c["d_ff"],
                                          dropout=0.0, activation=c["activation"], batch_first=True,
                                          norm_first=c["norm_first"])
        self.generator = nn.Linear(c["d_model"], c["tgt_vocab"])

    def positions(self, n):
        # pe[p, 2i] = sin(p / 10000^(2i/d)), pe[p, 2i+1] = cos(p / 10000^(2i/d)), in double, then float
        pos = torch.arange(n, dtype=torch.float64)[:, None]
        angle = pos * torch.exp(-math.log(10000.0) * torch.arange(0, self.d, 2, dtype=torch.float64) / self.d)
        pe = torch.zeros(n, self.d, dtype=torch.float64)
        pe[:, 0::2] = torch.sin(angle)
        pe[:, 1::2] = torch.cos(angle)[:, : self.d // 2]
        return pe.float()

    def forward(self, src, tgt_in):
        scale = math.sqrt(self.d)
        x = self.src_embed(src) * scale + self.positions(src.shape[1])
        y = self.tgt_embed(tgt_in) * scale + self.positions(tgt_in.shape[1])
        T = tgt_in.shape[1]
        causal = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)  # True = may not attend
        out = self.transformer(x, y, tgt_mask=causal, src_key_padding_mask=src == PAD,
                               tgt_key_padding_mask=tgt_in == PAD, memory_key_padding_mask=src == PAD)
        return self.generator(out)


def tokenize(text, kind):
    if kind == "word":
        return text.split()
    return list(" ".join(text.split()))  # char: code points, whitespace runs as one " ", ends trimmed


def encoders(meta):
    """The source and target encoders, text -> ids (without <eos>), of the checkpoint's tokenizer."""
    kind = meta["tokenizer"]
    if kind == "spm":  # each side's SentencePiece model is in the metadata; its ids are the model's
        import sentencepiece

        def spm(key):
            sp = sentencepiece.SentencePieceProcessor(model_proto=base64.b64decode(meta[key]))
            return lambda text: sp.encode(text, out_type=int)

        return spm("src_spm"), spm("tgt_spm")

    def vocab(key):
        ids = {t: i for i, t in enumerate(json.loads(meta[key]))}
        return lambda text: [ids.get(w, UNK) for w in tokenize(text, kind)]

    return vocab("src_vocab"), vocab("tgt_vocab")


def main(model_path, data_path):
    meta, state = read_checkpoint(model_path)
    cfg = json.loads(meta["config"])
    model = Model(cfg)
    model.load_state_dict(state, strict=True)
    model.train()  # dropout is 0; training mode keeps PyTorch 2.x off its fused inference path
    encode_src, encode_tgt = encoders(meta)
    total, tokens = 0.0, 0
    with torch.no_grad():
        for line in open(data_path, encoding="utf-8"):
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            s, t = line.split("\t")
            src = encode_src(s) + [EOS]  # source + <eos>
            tgt = encode_tgt(t)
            tgt_in, labels = [BOS] + tgt, tgt + [EOS]  # decoder input <bos> + target; labels target + <eos>
            if len(src) > cfg["max_len"] or len(labels) > cfg["max_len"]:
                continue  # eval leaves out pairs longer than max_len - 1 tokens on either side
            logits = model(torch.tensor([src]), torch.tensor([tgt_in]))[0]
            # eval's loss: cross-entropy without label smoothing, a mean over every label token
            total += nn.functional.cross_entropy(logits.double(), torch.tensor(labels), reduction="sum").item()
            tokens += len(labels)
    print(json.dumps({"loss": total / tokens, "tokens": tokens}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
