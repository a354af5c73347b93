// translate's word and char tokenizers: text split into words (ASCII whitespace) or code points
// (whitespace runs as one " " token, the ends trimmed), each piece looked up in a vocabulary whose
// first four ids are the specials <pad>, <bos>, <eos>, <unk>. A piece the vocabulary lacks becomes
// <unk>. Checkpoint metadata: "<prefix>vocab", a JSON array of the tokens (index = id).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "nn/tokenizers/tokenizer.hpp"

namespace tg::nn {

enum class TokenizerKind { word, character };
TokenizerKind parse_tokenizer(const std::string& s);  // "word" | "char", else std::invalid_argument
const char* tokenizer_name(TokenizerKind k);

// word: split on ASCII whitespace. char: one token per UTF-8 code point, with runs of whitespace
// collapsed to one " " token and the ends trimmed (so detokenize(tokenize(s)) is s normalised).
std::vector<std::string> tokenize(std::string_view text, TokenizerKind kind);
// word: tokens joined by single spaces; char: tokens concatenated.
std::string detokenize(const std::vector<std::string>& tokens, TokenizerKind kind);

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

class VocabTokenizer : public Tokenizer {
 public:
  VocabTokenizer(TokenizerKind split, Vocab vocab);
  // The vocabulary saved under "<prefix>vocab" (else io::DataError naming `path`).
  static VocabTokenizer load(TokenizerKind split, const io::Metadata& md, const std::string& prefix,
                             const std::string& path);

  std::string kind() const override { return tokenizer_name(split_); }
  int64_t vocab_size() const override { return vocab_.size(); }
  SpecialIds specials() const override { return {kPad, kBos, kEos, kUnk}; }
  std::vector<int32_t> encode(std::string_view text, UnknownTokens* unknown = nullptr,
                              const std::string& where = "input") const override;
  // Up to the first <eos>, <pad> and <bos> left out, detokenized (word: joined by spaces).
  std::string decode(std::span<const int32_t> ids) const override;
  std::string label(int32_t id) const override;
  void save(io::Metadata& md, const std::string& prefix) const override;

  TokenizerKind split() const { return split_; }
  const Vocab& vocab() const { return vocab_; }

 private:
  TokenizerKind split_;
  Vocab vocab_;
};

// A shared VocabTokenizer (CheckpointInfo::src and ::tgt), and the vocabulary of one (std::bad_cast
// when `t` is another kind).
std::shared_ptr<const Tokenizer> vocab_tokenizer(TokenizerKind split, Vocab vocab);
const Vocab& vocab_of(const Tokenizer& t);

}  // namespace tg::nn
