// Parallel text for translation: tokenizers, vocabularies and padded batches (reading the files:
// io/text.hpp).
//
// Sequences (docs/ARCHITECTURE.md): source ids = tokens + <eos>; decoder input = <bos> + target; labels =
// target + <eos>; all padded on the right with <pad> = 0.
#pragma once

#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "autograd/random.hpp"
#include "io/text.hpp"
#include "nn/transformer.hpp"

namespace tg::nn {

// ---- tokenizers -----------------------------------------------------------------------------

enum class TokenizerKind { word, character };
TokenizerKind parse_tokenizer(const std::string& s);  // "word" | "char", else std::invalid_argument
const char* tokenizer_name(TokenizerKind k);

// word: split on ASCII whitespace. char: one token per UTF-8 code point, with runs of whitespace
// collapsed to one " " token and the ends trimmed (so detokenize(tokenize(s)) is s normalised).
std::vector<std::string> tokenize(std::string_view text, TokenizerKind kind);
// word: tokens joined by single spaces; char: tokens concatenated.
std::string detokenize(const std::vector<std::string>& tokens, TokenizerKind kind);

// ---- vocabulary -----------------------------------------------------------------------------

inline constexpr const char* kSpecialTokens[] = {"<pad>", "<bos>", "<eos>", "<unk>"};

class Vocab {
 public:
  Vocab();  // just the four specials
  // Tokens seen at least min_freq times, most frequent first (ties by byte order, so the result
  // does not depend on the input order of equally frequent tokens), after the specials; at most
  // max_size entries in total including the specials (0 = no limit).
  static Vocab build(const std::vector<std::vector<std::string>>& sentences, int64_t min_freq = 1,
                     int64_t max_size = 0);
  // From a saved list: the four specials first, in order, and no duplicates (else DataError).
  static Vocab from_tokens(std::vector<std::string> tokens);

  int64_t size() const { return static_cast<int64_t>(tokens_.size()); }
  int32_t id(std::string_view token) const;  // kUnk when absent
  const std::string& token(int32_t id) const;
  const std::vector<std::string>& tokens() const { return tokens_; }

  std::vector<int32_t> encode(const std::vector<std::string>& tokens) const;
  // Token strings of ids, stopping at <eos> and leaving out <pad>/<bos>.
  std::vector<std::string> decode(std::span<const int32_t> ids) const;

 private:
  std::vector<std::string> tokens_;
  std::unordered_map<std::string, int32_t> index_;
};

// ---- batches --------------------------------------------------------------------------------

// A tokenised pair: source and target ids without any specials.
struct EncodedPair {
  std::vector<int32_t> src, tgt;
};

std::vector<EncodedPair> encode_pairs(const io::ParallelText& text, TokenizerKind kind,
                                      const Vocab& src_vocab, const Vocab& tgt_vocab);

// Groups pair indices into batches of at most batch_size pairs.
//  - shuffle (rng given): shuffle all indices, sort windows of 100 batches by length, cut them
//    into batches, shuffle the batch order; the same rng state gives the same batches.
//  - by_length without rng: all pairs sorted by length (stable), then cut (eval, decoding).
//  - neither: consecutive pairs in file order.
std::vector<std::vector<int64_t>> make_batches(const std::vector<EncodedPair>& pairs, int64_t batch_size,
                                               Generator* shuffle_rng, bool by_length = true);

// The padded batch of these pairs: src [B, S] = ids + <eos>, tgt_in [B, T] = <bos> + ids,
// labels [B, T] = ids + <eos>, <pad> elsewhere.
Batch make_batch(const std::vector<EncodedPair>& pairs, std::span<const int64_t> indices);

// Only the source side (decoding): src [B, S] with <eos>, padded.
std::vector<int32_t> pad_sources(const std::vector<std::vector<int32_t>>& sources, int64_t& src_len);

}  // namespace tg::nn
