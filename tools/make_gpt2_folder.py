#!/usr/bin/env python3
"""A Hugging Face GPT-2 folder with random weights, made offline: for measuring lm on GPT-2's shapes
on a machine that cannot download the real model.

  tools/make_gpt2_folder.py --out DIR [--text FILE ...] [--n-layer 12 --n-embd 768 --n-head 12
                            --n-positions 1024 --vocab 50257] [--seed 0]

Run with the Hugging Face venv (tools/setup_hf.sh: ~/.cache/tapegrad-hf/bin/python). Writes DIR
with save_pretrained: config.json and model.safetensors of a GPT2LMHeadModel of that shape
(transformers' random initialisation), and vocab.json + merges.txt of a byte-level BPE
(tokenizers' ByteLevelBPETokenizer, with <|endoftext|>) trained on the --text files to
exactly --vocab tokens. The defaults are GPT-2 124M. Reaching GPT-2's 50,257 tokens needs about
100 MB of text; without --text it takes the licences and the Python sources of a Debian system
(/usr/share/common-licenses, /usr/lib/python3*: 96 MB, about 2 minutes of training on 2 cores).
The tokenizer is not GPT-2's, only of its size: the folder is for timing and memory, not for text.
"""
import argparse
import glob
import os
import sys
import tempfile


def local_text(out):
    files = sorted(glob.glob("/usr/share/common-licenses/*")) + sorted(
        glob.glob("/usr/lib/python3*/**/*.py", recursive=True) +
        glob.glob("/usr/lib/python3/dist-packages/**/*.py", recursive=True))
    with open(out, "wb") as f:
        for p in files:
            if os.path.isfile(p):
                f.write(open(p, "rb").read())
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--text", nargs="*")
    ap.add_argument("--n-layer", type=int, default=12)
    ap.add_argument("--n-embd", type=int, default=768)
    ap.add_argument("--n-head", type=int, default=12)
    ap.add_argument("--n-positions", type=int, default=1024)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()

    import torch
    from tokenizers import ByteLevelBPETokenizer
    from transformers import GPT2Config, GPT2LMHeadModel

    os.makedirs(a.out, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        texts = a.text or [local_text(os.path.join(tmp, "text.txt"))]
        bpe = ByteLevelBPETokenizer()
        bpe.train(texts, vocab_size=a.vocab, min_frequency=2, special_tokens=["<|endoftext|>"], show_progress=False)
    if bpe.get_vocab_size() != a.vocab:
        sys.exit(f"the text gave {bpe.get_vocab_size()} tokens, not {a.vocab}: give more --text")
    bpe.save_model(a.out)
    eot = bpe.token_to_id("<|endoftext|>")
    torch.manual_seed(a.seed)
    config = GPT2Config(vocab_size=a.vocab, n_positions=a.n_positions, n_embd=a.n_embd, n_layer=a.n_layer,
                        n_head=a.n_head, bos_token_id=eot, eos_token_id=eot)
    model = GPT2LMHeadModel(config)
    model.save_pretrained(a.out)
    print(f"{a.out}: GPT-2 of {sum(p.numel() for p in model.parameters())} parameters, vocabulary {a.vocab}")


if __name__ == "__main__":
    main()
