"""safetensors interop with Python, using numpy + struct + json only (no `safetensors` package).

  safetensors_interop.py write PATH   writes a file the C++ test loads and checks
  safetensors_interop.py check PATH   reads a file the C++ test wrote; exit 0 if everything matches

The values follow formulas both sides compute exactly: v[i] = ((i * 37) % 101) / 8 - 6 (+ offset).
"""
import json
import struct
import sys

import numpy as np


def values(n, offset=0.0):
    i = np.arange(n, dtype=np.int64)
    return (((i * 37) % 101) / 8.0 - 6.0 + offset).astype(np.float32)


def expected():
    # name -> (dtype on disk, shape, float32 values)
    return {
        "encoder.weight": ("F32", (3, 4), values(12)),
        "encoder.bias": ("F32", (4,), values(4, 1.0)),
        "half": ("F16", (2, 3), values(6, 0.5)),  # exactly representable in half
        "double": ("F64", (5,), values(5, 2.0)),
        "scalar": ("F32", (), values(1, 3.0)),
    }


NP = {"F32": np.float32, "F16": np.float16, "F64": np.float64}


def write(path):
    header, blobs, offset = {"__metadata__": {"source": "python", "note": "h\u00e9llo"}}, [], 0
    for name, (dtype, shape, v) in expected().items():
        blob = v.astype(NP[dtype]).astype("<" + np.dtype(NP[dtype]).str[1:]).tobytes()
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def check(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n].decode("utf-8"))
    meta = header.pop("__metadata__", {})
    assert meta == {"source": "c++", "vocab": '["<pad>","\u00e9t\u00e9"]'}, meta
    body = data[8 + n :]
    spans = sorted(tuple(e["data_offsets"]) for e in header.values())
    assert spans[0][0] == 0 and spans[-1][1] == len(body), spans
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:])), spans
    want = {"w": ((2, 3), values(6)), "b": ((3,), values(3, 1.0)), "s": ((), values(1, 3.0))}
    assert set(header) == set(want), sorted(header)
    for name, (shape, v) in want.items():
        e = header[name]
        assert e["dtype"] == "F32", e
        assert tuple(e["shape"]) == shape, (name, e["shape"])
        b, end = e["data_offsets"]
        got = np.frombuffer(body[b:end], dtype="<f4").reshape(shape)
        assert np.array_equal(got, v.reshape(shape)), (name, got)
    try:  # the same bytes as a torch tensor, when torch is there
        import torch

        b, end = header["w"]["data_offsets"]
        t = torch.frombuffer(bytearray(body[b:end]), dtype=torch.float32).reshape(2, 3)
        assert torch.equal(t, torch.from_numpy(values(6).reshape(2, 3)))
    except ImportError:
        pass
    print("ok")


# ---- whole checkpoints against torch.nn.Transformer (docs/ARCHITECTURE.md: a state_dict maps one to one) ----

CONFIG = {"src_vocab": 9, "tgt_vocab": 7, "d_model": 8, "heads": 2, "enc_layers": 2, "dec_layers": 1, "d_ff": 16,
          "dropout": 0.0, "norm_first": False, "activation": "relu", "max_len": 64}
SPECIALS = ["<pad>", "<bos>", "<eos>", "<unk>"]


def torch_model(cfg):
    import torch.nn as nn

    class Model(nn.Module):  # the module names are the contract
        def __init__(self):
            super().__init__()
            self.src_embed = nn.Embedding(cfg["src_vocab"], cfg["d_model"])
            self.tgt_embed = nn.Embedding(cfg["tgt_vocab"], cfg["d_model"])
            self.transformer = nn.Transformer(cfg["d_model"], cfg["heads"], cfg["enc_layers"], cfg["dec_layers"],
                                              cfg["d_ff"], cfg["dropout"], activation=cfg["activation"],
                                              batch_first=True, norm_first=cfg["norm_first"])
            self.generator = nn.Linear(cfg["d_model"], cfg["tgt_vocab"])

    return Model()


def torch_checkpoint(path):
    """A torch.nn.Transformer state_dict written as a tapegrad checkpoint."""
    import torch

    torch.manual_seed(0)
    state = torch_model(CONFIG).state_dict()
    header, blobs, offset = {}, [], 0
    for name, t in state.items():
        blob = t.detach().numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    header["__metadata__"] = {
        "format": "tapegrad.transformer.v1", "config": json.dumps(CONFIG), "tokenizer": "word",
        "src_vocab": json.dumps(SPECIALS + [f"s{i}" for i in range(CONFIG["src_vocab"] - 4)]),
        "tgt_vocab": json.dumps(SPECIALS + [f"t{i}" for i in range(CONFIG["tgt_vocab"] - 4)])}
    text = json.dumps(header).encode("utf-8")
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
    # a value the C++ side checks after loading
    print(float(state["transformer.decoder.layers.0.multihead_attn.in_proj_weight"][5, 3]))


def torch_load(path):
    """Loads our checkpoint into torch.nn.Transformer with load_state_dict(strict=True)."""
    import torch

    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n].decode("utf-8"))
    meta = header.pop("__metadata__")
    cfg = json.loads(meta["config"])
    body = data[8 + n :]
    state = {}
    for name, e in header.items():
        b, end = e["data_offsets"]
        state[name] = torch.from_numpy(np.frombuffer(body[b:end], dtype="<f4").copy().reshape(e["shape"]))
    model = torch_model(cfg)
    model.load_state_dict(state, strict=True)  # raises on any missing/unexpected/mis-shaped name
    assert len(json.loads(meta["src_vocab"])) == cfg["src_vocab"]
    print("ok")


if __name__ == "__main__":
    modes = {"write": write, "check": check, "torch-checkpoint": torch_checkpoint, "torch-load": torch_load}
    modes[sys.argv[1]](sys.argv[2])
