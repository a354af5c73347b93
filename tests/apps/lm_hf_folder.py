#!/usr/bin/python3
"""transformers' side of the lm tests on Hugging Face GPT-2 folders (tests/apps/test_lm_hf.cpp).

Run with the Hugging Face venv (tools/setup_hf.sh). Nothing is downloaded: the tokenizer is a
byte-level BPE trained here on the test's text, the model a random GPT2LMHeadModel.

usage:
  lm_hf_folder.py make DIR TEXT LINES OUT_JSON
      A GPT-2 folder in DIR: vocab.json + merges.txt of a ByteLevelBPETokenizer trained on TEXT (with
      <|endoftext|>), then a random GPT2LMHeadModel of that vocabulary (save_pretrained). OUT_JSON:
      what lm must print for it: the ids of each line of LINES (AutoTokenizer.from_pretrained(DIR)),
      the greedy continuation of "the cat" (20 tokens, as text), and the loss per token of TEXT read
      as lm eval reads it (consecutive chunks of 32 inputs).
  lm_hf_folder.py check DIR TEXT LINES OUT_JSON
      DIR, written by lm export, must load with GPT2LMHeadModel.from_pretrained and
      AutoTokenizer.from_pretrained (no missing or unexpected weights); OUT_JSON gets the same
      three things for it.
"""
import json
import math
import sys

import torch
import torch.nn.functional as F
from tokenizers import ByteLevelBPETokenizer
from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

CHUNK = 32


def reference(d, text_path, lines_path):
    model, info = GPT2LMHeadModel.from_pretrained(d, output_loading_info=True)
    problems = {k: v for k, v in info.items() if v}
    if problems:
        sys.exit(f"from_pretrained({d}): {problems}")
    model.eval()
    tok = AutoTokenizer.from_pretrained(d)
    lines = open(lines_path, encoding="utf-8").read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    ids = [tok.encode(line) for line in lines]
    prompt = tok.encode("the cat")
    out = list(prompt)
    with torch.no_grad():
        for _ in range(20):
            out.append(int(torch.argmax(model(torch.tensor([out])).logits[0, -1])))
    text_ids = tok.encode(open(text_path, encoding="utf-8").read())
    nats, count = 0.0, 0
    with torch.no_grad():
        for k in range(math.ceil((len(text_ids) - 1) / CHUNK)):
            s = k * CHUNK
            n = min(CHUNK, len(text_ids) - 1 - s)
            x = torch.tensor([text_ids[s:s + n]])
            y = torch.tensor(text_ids[s + 1:s + n + 1])
            nats += float(F.cross_entropy(model(x).logits[0], y, reduction="sum"))
            count += n
    return {"tokenizer": type(tok).__name__, "ids": ids, "greedy": tok.decode(out[len(prompt):]),
            "loss": nats / count, "tokens": count}


def make(d, text_path, lines_path):
    bpe = ByteLevelBPETokenizer()
    bpe.train([text_path], vocab_size=400, min_frequency=2, special_tokens=["<|endoftext|>"], show_progress=False)
    bpe.save_model(d)
    vocab = bpe.get_vocab_size()
    eot = bpe.token_to_id("<|endoftext|>")
    torch.manual_seed(7)
    config = GPT2Config(vocab_size=vocab, n_positions=64, n_embd=32, n_layer=2, n_head=4, bos_token_id=eot,
                        eos_token_id=eot)
    model = GPT2LMHeadModel(config)
    with torch.no_grad():  # weights large enough that a greedy continuation is not one token repeated
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.3)
    model.save_pretrained(d)


if __name__ == "__main__":
    if len(sys.argv) != 6 or sys.argv[1] not in ("make", "check"):
        sys.exit(__doc__)
    mode, d, text, lines, out = sys.argv[1:]
    if mode == "make":
        make(d, text, lines)
    json.dump(reference(d, text, lines), open(out, "w"))
