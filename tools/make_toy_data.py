#!/usr/bin/env python3
"""A toy translation task: English-like sentences into an invented verb-final language.

    tools/make_toy_data.py --out data/toy            # writes train.tsv, valid.tsv, test.tsv

Source (subject-verb-object, adjectives before nouns, English agreement):
    the big dog sees a small cat quickly
    those dogs and a cat did not see this king with the old horse
Target (subject-object-verb; nouns first, then "ka" for plural, the adjective, the determiner;
"to" joins coordinated nouns; a "with" phrase ends in "de"; the verb comes last as one word:
stem + "na" when negated + a suffix for tense and the subject's number):
    inu oki ta neko chi e haya mirupo
    inu ka so to neko e ou ko uma furu ta de mirunari

A model has to reorder (the verb moves to the end, adjectives and determiners follow their
noun), carry information across the sentence (past-tense and negated verbs show no number in the
source, yet the target's agreement suffix needs it: it must be read off the subject, and "X and
Y" is plural), and translate word by word. Sentences are 4-19 source words. The splits are
disjoint; the output only depends on --seed.
"""
import argparse
import os
import random
import sys

NOUNS = {"dog": "inu", "cat": "neko", "bird": "tori", "mouse": "nezu", "horse": "uma", "child": "kodomo",
         "teacher": "sensei", "farmer": "nomin", "king": "ou", "girl": "shojo", "boy": "shonen", "friend": "tomo",
         "doctor": "isha", "queen": "joou", "soldier": "heishi", "baker": "panya", "wolf": "ookami", "fox": "kitsu"}
PLURAL = {"child": "children", "mouse": "mice", "wolf": "wolves", "fox": "foxes"}  # the rest add "s"
ADJS = {"big": "oki", "small": "chi", "red": "aka", "old": "furu", "young": "waka", "happy": "ure",
        "quiet": "shizu", "tall": "taka", "clever": "kashi", "angry": "oko", "kind": "yasa", "brave": "yuu"}
# verb: (3rd singular present, plural present, past, target stem)
VERBS = {"see": ("sees", "see", "saw", "miru"), "like": ("likes", "like", "liked", "suki"),
         "help": ("helps", "help", "helped", "tasu"), "follow": ("follows", "follow", "followed", "tsu"),
         "call": ("calls", "call", "called", "yobu"), "find": ("finds", "find", "found", "mitsu"),
         "teach": ("teaches", "teach", "taught", "oshi"), "feed": ("feeds", "feed", "fed", "kuwa"),
         "meet": ("meets", "meet", "met", "au"), "visit": ("visits", "visit", "visited", "tazu"),
         "watch": ("watches", "watch", "watched", "naga"), "thank": ("thanks", "thank", "thanked", "rei")}
ADVS = {"quickly": "haya", "often": "yoku", "today": "kyo", "again": "mata", "quietly": "soto"}
# determiners by number: source word -> target word
DET_SG = {"the": "ta", "a": "e", "this": "ko", "that": "so"}
DET_PL = {"the": "ta", "some": "e", "these": "ko", "those": "so"}
# verb suffix by (tense, number)
SUFFIX = {("present", "sg"): "po", ("present", "pl"): "pi", ("past", "sg"): "ra", ("past", "pl"): "ri"}


def noun_phrase(rng):
    """Returns (source words, target words, number)."""
    number = rng.choice(["sg", "pl"])
    noun = rng.choice(sorted(NOUNS))
    dets = DET_SG if number == "sg" else DET_PL
    det = rng.choice(sorted(dets))
    adj = rng.choice(sorted(ADJS)) if rng.random() < 0.5 else None
    surface = noun if number == "sg" else PLURAL.get(noun, noun + "s")
    src = [det] + ([adj] if adj else []) + [surface]
    tgt = [NOUNS[noun]] + (["ka"] if number == "pl" else []) + ([ADJS[adj]] if adj else []) + [dets[det]]
    return src, tgt, number


def sentence(rng):
    subj_src, subj_tgt, number = noun_phrase(rng)
    if rng.random() < 0.15:  # "X and Y" is plural whatever X and Y are
        more_src, more_tgt, _ = noun_phrase(rng)
        subj_src, subj_tgt, number = subj_src + ["and"] + more_src, subj_tgt + ["to"] + more_tgt, "pl"
    obj_src, obj_tgt, _ = noun_phrase(rng)
    verb = rng.choice(sorted(VERBS))
    tense = rng.choice(["present", "past"])
    negated = rng.random() < 0.2
    sg, pl, past, stem = VERBS[verb]
    if negated:  # "does not see" / "do not see" / "did not see": the bare verb follows
        aux = "did" if tense == "past" else ("does" if number == "sg" else "do")
        verb_src = [aux, "not", pl]
    else:
        verb_src = [past if tense == "past" else (sg if number == "sg" else pl)]
    with_src, with_tgt = [], []
    if rng.random() < 0.25:
        w_src, w_tgt, _ = noun_phrase(rng)
        with_src, with_tgt = ["with"] + w_src, w_tgt + ["de"]
    adv = rng.choice(sorted(ADVS)) if rng.random() < 0.3 else None
    src = subj_src + verb_src + obj_src + with_src + ([adv] if adv else [])
    verb_tgt = stem + ("na" if negated else "") + SUFFIX[(tense, number)]
    tgt = subj_tgt + obj_tgt + with_tgt + ([ADVS[adv]] if adv else []) + [verb_tgt]
    return " ".join(src), " ".join(tgt)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--train", type=int, default=30000)
    ap.add_argument("--valid", type=int, default=1000)
    ap.add_argument("--test", type=int, default=1000)
    args = ap.parse_args()
    for name in ("train", "valid", "test"):
        if getattr(args, name) < 1:
            ap.error(f"--{name} must be at least 1")
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        ap.error(f"--out {args.out}: not a directory (the three .tsv files go into it)")

    rng = random.Random(args.seed)
    wanted = args.train + args.valid + args.test
    seen, pairs = set(), []
    attempts = 0
    while len(pairs) < wanted:
        attempts += 1
        if attempts > 50 * wanted:
            ap.error(f"cannot draw {wanted} distinct sentences; ask for fewer")
        src, tgt = sentence(rng)
        if src not in seen:  # distinct sources keep the splits disjoint
            seen.add(src)
            pairs.append((src, tgt))

    splits = {"valid": pairs[: args.valid], "test": pairs[args.valid : args.valid + args.test],
              "train": pairs[args.valid + args.test :]}
    try:
        os.makedirs(args.out, exist_ok=True)
        for name, rows in splits.items():
            path = os.path.join(args.out, name + ".tsv")
            with open(path, "w", encoding="utf-8", newline="\n") as f:
                for src, tgt in rows:
                    f.write(f"{src}\t{tgt}\n")
            print(f"{path}: {len(rows)} pairs")
    except OSError as e:  # a directory that cannot be made or written: the reason, not a traceback
        sys.exit(f"{ap.prog}: error: {e.filename}: {e.strerror}")


if __name__ == "__main__":
    main()
