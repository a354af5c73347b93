#!/usr/bin/env python3
"""Reference ids from Hugging Face's `tokenizers` (and transformers) for tests/nn/test_gpt2_bpe.cpp.

  gpt2_bpe_parity.py reference DIR CORPUS       train a ByteLevelBPETokenizer on the licences in
      /usr/share/common-licenses (vocabulary 800, special token <|endoftext|>), save vocab.json +
      merges.txt (save_model) and tokenizer.json into DIR, and two variants of tokenizer.json
      (tokenizer_prefix.json: add_prefix_space; tokenizer_ignore_merges.json: ignore_merges); write
      the ids of every corpus line under each: DIR/ids_<variant>.txt
  gpt2_bpe_parity.py transformers HF_DIR CORPUS OUT   the ids AutoTokenizer.from_pretrained(HF_DIR)
      gives (fast, from tokenizer.json; then slow GPT2Tokenizer from vocab.json + merges.txt): OUT_fast,
      OUT_slow

CORPUS has one test string per line, hex-encoded (they hold newlines and invalid UTF-8). The ids
file has one line per corpus line: the ids, space-separated.

Valid UTF-8 lines are encoded by the library itself (Tokenizer.encode, or the transformers
tokenizer). A line with invalid UTF-8 cannot be given to it (it takes Python str; Rust strings are
UTF-8); for those the reference is the library's own steps on the text where each invalid byte is
U+FFFD -- the literal split on <|endoftext|>, `pre_tokenizer.pre_tokenize_str` -- with each piece's
original bytes then given to `model.tokenize` in the byte-to-unicode form: what gpt2_bpe.hpp
promises. The same steps are run on every valid line too, and must give what encode() gives
(checked here), so that the steps are known to be the library's pipeline.
"""
import glob
import json
import os
import sys

EOT = "<|endoftext|>"


def byte_table():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


B2U = byte_table()
U2B = {c: b for b, c in B2U.items()}


def read_corpus(path):
    with open(path) as f:
        return [bytes.fromhex(line.strip()) for line in f]


def units(segment):
    """(character of the U+FFFD text, original bytes) per character; an invalid byte is one."""
    out = []
    for ch in segment.decode("utf-8", "surrogateescape"):
        if 0xDC80 <= ord(ch) <= 0xDCFF:  # surrogateescape's stand-in for an invalid byte
            out.append(("\ufffd", bytes([ord(ch) - 0xDC00])))
        else:
            out.append((ch, ch.encode("utf-8")))
    return out


def pipeline_ids(tok, line):
    """The library's steps by hand: split on <|endoftext|>, pre-tokenize, BPE per piece."""
    eot = tok.token_to_id(EOT)
    ids = []
    segments = line.split(EOT.encode()) if eot is not None else [line]
    for k, seg in enumerate(segments):
        if k > 0:
            ids.append(eot)
        if not seg:
            continue
        us = units(seg)
        pieces = tok.pre_tokenizer.pre_tokenize_str("".join(c for c, _ in us))
        # Each piece's length in characters of the U+FFFD text (its byte-to-unicode form has one
        # character per byte of that text).
        lengths = [len(bytes(U2B[c] for c in p).decode("utf-8")) for p, _ in pieces]
        if sum(lengths) == len(us) + 1:  # add_prefix_space put a " " in front
            us = [(" ", b" ")] + us
        assert sum(lengths) == len(us), (line, pieces)
        at = 0
        for length in lengths:
            orig = b"".join(o for _, o in us[at:at + length])
            at += length
            ids += [t.id for t in tok.model.tokenize("".join(B2U[b] for b in orig))]
    return ids


def reference_ids(tok, lines, encode):
    out, checked = [], 0
    for line in lines:
        manual = pipeline_ids(tok, line)
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError:
            out.append(manual)
            continue
        ids = encode(text)
        if ids != manual:
            sys.exit(f"gpt2_bpe_parity.py: the library's steps by hand give {manual} but encode gives {ids} "
                     f"for {line!r}")
        checked += 1
        out.append(ids)
    return out, checked


def write_ids(path, all_ids):
    with open(path, "w") as f:
        for ids in all_ids:
            f.write(" ".join(map(str, ids)) + "\n")


def reference(out_dir, corpus):
    import tokenizers
    from tokenizers import ByteLevelBPETokenizer, Tokenizer

    files = sorted(f for f in glob.glob("/usr/share/common-licenses/*") if os.path.isfile(f) and not os.path.islink(f))
    if not files:
        sys.exit("gpt2_bpe_parity.py: no files in /usr/share/common-licenses to train on")
    trained = ByteLevelBPETokenizer()
    trained.train(files, vocab_size=800, min_frequency=2, special_tokens=[EOT], show_progress=False)
    trained.save_model(out_dir)
    trained.save(os.path.join(out_dir, "tokenizer.json"))
    with open(os.path.join(out_dir, "tokenizer.json")) as f:
        spec = json.load(f)
    variants = {"files": trained._tokenizer, "tokenizer": Tokenizer.from_file(os.path.join(out_dir, "tokenizer.json"))}
    for name, change in [("prefix", lambda s: s["pre_tokenizer"].update(add_prefix_space=True)),
                         ("ignore_merges", lambda s: s["model"].update(ignore_merges=True))]:
        s = json.loads(json.dumps(spec))
        change(s)
        path = os.path.join(out_dir, f"tokenizer_{name}.json")
        with open(path, "w") as f:
            json.dump(s, f, ensure_ascii=False)
        variants[name] = Tokenizer.from_file(path)
    lines = read_corpus(corpus)
    for name, tok in variants.items():
        ids, checked = reference_ids(tok, lines, lambda t, tok=tok: tok.encode(t).ids)
        write_ids(os.path.join(out_dir, f"ids_{name}.txt"), ids)
    print(f"tokenizers {tokenizers.__version__}: vocabulary {trained.get_vocab_size()}, {len(lines)} lines "
          f"({checked} valid UTF-8: encode() = the steps by hand)")


def transformers_ids(hf_dir, corpus, out):
    import transformers
    from transformers import AutoTokenizer

    lines = read_corpus(corpus)
    fast = AutoTokenizer.from_pretrained(hf_dir)
    if not fast.is_fast or type(fast).__name__ != "GPT2TokenizerFast":
        sys.exit(f"gpt2_bpe_parity.py: AutoTokenizer gave {type(fast).__name__}, expected GPT2TokenizerFast")
    ids, checked = reference_ids(fast.backend_tokenizer, lines,
                                 lambda t: fast.encode(t, add_special_tokens=False))
    write_ids(out + "_fast", ids)
    slow = AutoTokenizer.from_pretrained(hf_dir, use_fast=False)
    # The slow tokenizer reads vocab.json + merges.txt; valid lines only (it takes str).
    with open(out + "_slow", "w") as f:
        for line in lines:
            try:
                text = line.decode("utf-8")
            except UnicodeDecodeError:
                f.write("-\n")
                continue
            f.write(" ".join(map(str, slow.encode(text, add_special_tokens=False))) + "\n")
    print(f"transformers {transformers.__version__}: {type(fast).__name__} and {type(slow).__name__} "
          f"loaded {hf_dir}; eos {fast.eos_token!r} = {fast.eos_token_id}")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "reference":
        reference(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 5 and sys.argv[1] == "transformers":
        transformers_ids(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        sys.exit(__doc__)
