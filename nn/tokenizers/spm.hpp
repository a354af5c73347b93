// SentencePiece subwords (BPE or unigram) through Debian's libsentencepiece 0.1.97: the library
// trains the model and encodes; this class picks the settings, checks what the library would abort
// on, stores the model in a checkpoint's metadata and decodes.
//
// Two layouts, fixed when the model is trained and read back from the model itself:
//
//   translate  one sentence per text. Ids <pad> = 0, <bos> = 1, <eos> = 2, <unk> = 3 (the
//              Transformer's kPad..kUnk). Whitespace is normalised as the word tokenizer does:
//              leading and trailing spaces dropped, a run of spaces read as one, each word marked
//              with "▁" (SentencePiece's add_dummy_prefix and remove_extra_whitespaces); only the
//              space U+0020 is whitespace here (a tab or a no-break space is a character like any
//              other). decode gives the words joined by one space.
//   lm         any text, kept exactly: <unk> = 0 and no other specials; no dummy prefix, no
//              whitespace removed, runs of spaces become pieces of their own ("▁▁▁▁"), a newline is
//              a character of the line it ends ("\n", ".\n"). decode(encode(s)) == s for every string
//              s, also invalid UTF-8: bytes the library would alter (a NUL, a byte that is not part of
//              valid UTF-8, and U+2581 "▁", which SentencePiece would read back as a space) are
//              encoded as byte pieces without it.
//
// Both: identity normalisation (no NFKC: text is not rewritten), character_coverage 1.0 and
// byte_fallback, so a character the training text lacked becomes its UTF-8 bytes (<0xE2> <0x82>
// <0xAC>), never <unk>: a model this class trains produces no <unk> at all.
//
// encode() gives the library's ids (what the Python package `sentencepiece` gives for the same model
// bytes; tested): in the lm layout, the concatenation of the library's encoding of each line (each
// with its "\n") and of the byte pieces above; in the translate layout, the library's encoding of
// the text. Called once per line the library encodes 0.7-1.8 MB/s (bench/bench_spm.cpp), so
// instead the text is cut where no piece of the vocabulary can reach across, each distinct part is
// encoded once (in parallel) and the results are put together. The cuts: into words, before a space
// that follows a non-space and after a newline (where no piece has "▁" after another character or
// a character after "\n": checked on the vocabulary when the model loads); in the lm layout each
// word again between two characters that no piece holds side by side (the library normalises each
// text it is given, and in the translate layout it puts "▁" before each). For BPE that is exact:
// every symbol its merges make is a piece. The unigram model's Viterbi search adds float scores
// along the line, so a part whose two best segmentations score within rounding of each other
// ("w"+"ww" against "ww"+"w") can come out either way depending on what precedes it on the line;
// lines with such a part (found with an exact top-2 search of each part, with a margin for float
// rounding) are given to the library whole. Models without byte fallback (not this class's) are
// encoded line by line: the library joins a run of unknown characters into one <unk>.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "nn/tokenizers/tokenizer.hpp"

namespace tg::nn {

enum class SpmType { bpe, unigram };
enum class SpmLayout { translate, lm };

struct SpmOptions {
  SpmType type = SpmType::unigram;
  int64_t vocab_size = 8000;  // the final vocabulary, specials and the 256 byte pieces included
  SpmLayout layout = SpmLayout::translate;
  int threads = 0;  // the trainer's threads; 0: omp_get_max_threads()
};

class SpmTokenizer final : public Tokenizer {
 public:
  // Trains a model on `texts` (translate: one sentence per text, or one per line of a text; lm: the
  // texts' lines, each with its "\n"; lines longer than 4 KB are cut into parts for the trainer).
  // Throws io::DataError when there is nothing to learn from (nothing but ASCII whitespace), when
  // vocab_size is too small for the text's distinct characters plus the 256 byte pieces and the
  // specials (the message says the least size), or larger than the text can fill (the library's
  // message says the largest), for more than 1 GiB of text, and for any other error of the trainer.
  // The process never aborts: what makes libsentencepiece 0.1.97's trainer abort (a unigram model
  // on text with no character it counts; a very long word; 2^31 characters) is excluded first.
  // The same texts and options give the same model. With another number of threads BPE gives the
  // same pieces (the bytes differ: they record the thread count), unigram may not (its trainer sums
  // per thread in float; measured on the licences, 1 thread against 2: other pieces).
  static SpmTokenizer train(std::span<const std::string_view> texts, const SpmOptions& options);

  // A model from its serialized bytes (ModelProto). Throws io::DataError naming `where` when the
  // bytes are not a model this class can use: not a ModelProto, rejected by the library, a
  // normalisation table (precompiled_charsmap: tapegrad's models have none, and the library reads
  // a broken one out of bounds), a model type other than BPE or unigram, whitespace settings of
  // neither layout, a piece with a NUL or invalid UTF-8.
  static SpmTokenizer from_model(std::string bytes, const std::string& where);
  // The model saved by save(md, prefix): the key prefix + "spm" holds it in base64. Throws
  // io::SafetensorsError naming `path` and the key.
  static SpmTokenizer load(const io::Metadata& md, const std::string& prefix, const std::string& path);

  // The serialized model: what save() stores, what the Python package loads.
  const std::string& model_bytes() const;
  SpmType type() const;
  SpmLayout layout() const;

  std::string kind() const override { return "spm"; }
  int64_t vocab_size() const override;
  SpecialIds specials() const override;
  std::vector<int32_t> encode(std::string_view text, UnknownTokens* unknown = nullptr,
                              const std::string& where = "input") const override;
  // Many texts at once, sharing the work on the words they have in common (a training set's
  // sentences): the same ids as encode() on each.
  std::vector<std::vector<int32_t>> encode_batch(std::span<const std::string_view> texts,
                                                 UnknownTokens* unknown = nullptr) const override;
  // encode() without the cuts: the library on each line (lm) or on the text (translate), one call
  // each. The specification encode() is tested against, and what it falls back to.
  std::vector<int32_t> encode_by_library(std::string_view text) const;
  // Specials left out, <unk> as "<unk>", byte pieces as their bytes (also when they are not valid
  // UTF-8), "▁" as a space; in the translate layout the leading space of the first word dropped.
  // Throws std::out_of_range for an id outside [0, vocab_size).
  std::string decode(std::span<const int32_t> ids) const override;
  std::string label(int32_t id) const override;
  void save(io::Metadata& md, const std::string& prefix) const override;

  struct Impl;

 private:
  explicit SpmTokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

}  // namespace tg::nn
