#!/usr/bin/env python3
"""Token ids from the Python `sentencepiece` package, for tests/nn/test_spm.cpp.

  spm_parity.py MODEL TEXT LAYOUT OUT

Loads the serialized model MODEL (the bytes SpmTokenizer::model_bytes() gives), reads TEXT (UTF-8)
and writes one line of space-separated ids to OUT per piece of text: LAYOUT "lm", one per line of
TEXT with its "\\n" (what SpmTokenizer's lm layout encodes separately); "translate", one per line
without it (a sentence). The first line of OUT is the package's version.
"""
import sys

import sentencepiece as spm

model, text, layout, out = sys.argv[1:5]
sp = spm.SentencePieceProcessor()
sp.LoadFromSerializedProto(open(model, "rb").read())
s = open(text, encoding="utf-8", newline="").read()
parts = s.split("\n")
if layout == "lm":
    pieces = [p + "\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])
elif layout == "translate":
    pieces = parts[:-1] if parts and parts[-1] == "" else parts
else:
    sys.exit(f"spm_parity.py: unknown layout {layout}")
with open(out, "w") as f:
    f.write(spm.__version__ + "\n")
    for p in pieces:
        f.write(" ".join(str(i) for i in sp.encode(p)) + "\n")
