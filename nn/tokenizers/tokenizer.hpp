// The tokenizer layer: one interface for every way a model turns text into token ids and back.
//
//   word   translate: whitespace-separated words through a vocabulary with the four specials
//   char   translate: code points (whitespace runs as one " ") through such a vocabulary;
//          lm: the code points of the training text, no specials
//   byte   lm: the 256 byte values
//   spm    SentencePiece subwords (BPE or unigram) trained on the task's text
//   gpt2   GPT-2's byte-level BPE (vocab.json + merges.txt)
//
// Where to add a tokenizer: a class here implementing Tokenizer, and a line in the loader of the
// family that uses it (nn/family/*.cpp). The unknown-token policy lives in one place: encode()
// counts what became <unk> in an UnknownTokens, and report_unknown() turns it into one warning or,
// under --strict, an error.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "io/safetensors.hpp"

namespace tg::nn {

// The project's special ids, where a tokenizer has them (translate's vocabularies, SentencePiece
// models trained for translate): padding, start and end of a sequence, an unknown piece.
inline constexpr int32_t kPad = 0, kBos = 1, kEos = 2, kUnk = 3;
inline constexpr const char* kSpecialTokens[] = {"<pad>", "<bos>", "<eos>", "<unk>"};

// The special ids a tokenizer has; -1 where it has none.
struct SpecialIds {
  int32_t pad = -1, bos = -1, eos = -1, unk = -1;
};

// What became <unk> while encoding: how many tokens, and the first few distinct pieces of text.
struct UnknownTokens {
  static constexpr size_t kListed = 5;
  int64_t count = 0;
  std::vector<std::string> first;  // at most kListed, in order of appearance
  void add(std::string_view piece);
  void merge(const UnknownTokens& other);
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Its name in a checkpoint's "tokenizer" metadata and in messages: "word", "char", "byte", "spm",
  // "gpt2".
  virtual std::string kind() const = 0;
  virtual int64_t vocab_size() const = 0;
  virtual SpecialIds specials() const { return {}; }

  // Text -> ids, without specials added. Text the vocabulary lacks becomes <unk>, counted in
  // `unknown` when given; a tokenizer without <unk> (lm's char) throws io::DataError naming `where`
  // (a file, "--prompt"), the line, the column and the character.
  virtual std::vector<int32_t> encode(std::string_view text, UnknownTokens* unknown = nullptr,
                                      const std::string& where = "input") const = 0;
  // Ids -> text: detokenized (SentencePiece's "▁" back to spaces, byte pieces joined), specials left
  // out, except that an <unk> prints as "<unk>".
  virtual std::string decode(std::span<const int32_t> ids) const = 0;
  // The bytes of text the ids stand for (bits per byte = nats / ln 2 / this).
  virtual int64_t byte_count(std::span<const int32_t> ids) const;
  // A short printable label of one token, for heatmaps: the piece with "␣" for a space (and
  // SentencePiece's "▁"), "\n" and "\t" for newline and tab, hex ("\x07", "\xE2") for other control
  // bytes and for bytes that are part of a multi-byte character.
  virtual std::string label(int32_t id) const = 0;

  // Into a checkpoint's metadata, under keys that start with `prefix` ("src_", "tgt_", or ""):
  // everything needed to rebuild it but its kind, which the family writes.
  virtual void save(io::Metadata& md, const std::string& prefix) const = 0;
};

// The unknown-token policy, applied once per run by the commands that read user text (decode,
// attention, eval, sample): nothing when unknown.count is 0; else one line on stderr, "warning:
// <where>: N tokens became <unk>: "a", "b", ..." (what the tokenizer could not read), or, with
// strict, io::DataError with that text.
void report_unknown(const UnknownTokens& unknown, const std::string& where, bool strict);

// A label for heatmaps from a piece of text (the rules of Tokenizer::label).
std::string printable_label(std::string_view piece);

}  // namespace tg::nn
