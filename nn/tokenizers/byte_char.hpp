// lm's two tokenizers without a trained vocabulary of pieces:
//   byte  the 256 byte values, id = the byte; any text encodes, and decoding gives the bytes back
//   char  one id per distinct code point of the training text, in code-point order (nanoGPT's
//         shakespeare_char); it has no <unk>, so a character outside the set is an error
// Checkpoint metadata: none for byte; "<prefix>vocab" for char, a JSON array of the characters.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "nn/tokenizers/tokenizer.hpp"

namespace tg::nn {

class ByteTokenizer : public Tokenizer {
 public:
  std::string kind() const override { return "byte"; }
  int64_t vocab_size() const override { return 256; }
  std::vector<int32_t> encode(std::string_view text, UnknownTokens* unknown = nullptr,
                              const std::string& where = "input") const override;
  std::string decode(std::span<const int32_t> ids) const override;
  int64_t byte_count(std::span<const int32_t> ids) const override { return static_cast<int64_t>(ids.size()); }
  std::string label(int32_t id) const override;
  void save(io::Metadata&, const std::string&) const override {}
};

class CharTokenizer : public Tokenizer {
 public:
  // The characters of `texts` (valid UTF-8).
  static CharTokenizer from_texts(const std::vector<std::string_view>& texts);
  // From a saved list: each entry one code point, strictly increasing; else io::DataError.
  static CharTokenizer from_symbols(std::vector<std::string> symbols);
  // The list saved under "<prefix>vocab" of checkpoint `path` (else io::SafetensorsError naming
  // the file and the key).
  static CharTokenizer load(const io::Metadata& md, const std::string& prefix, const std::string& path);

  std::string kind() const override { return "char"; }
  int64_t vocab_size() const override { return static_cast<int64_t>(symbols_.size()); }
  // A code point outside the vocabulary throws io::DataError naming `where`, the line and column,
  // and the character (there is no <unk> to map it to).
  std::vector<int32_t> encode(std::string_view text, UnknownTokens* unknown = nullptr,
                              const std::string& where = "input") const override;
  std::string decode(std::span<const int32_t> ids) const override;
  int64_t byte_count(std::span<const int32_t> ids) const override;
  std::string label(int32_t id) const override;
  void save(io::Metadata& md, const std::string& prefix) const override;

  const std::vector<std::string>& symbols() const { return symbols_; }

 private:
  const std::string& piece(int32_t id) const;
  std::vector<std::string> symbols_;                // id -> UTF-8 of the code point
  std::unordered_map<std::string, int32_t> index_;  // the reverse
};

}  // namespace tg::nn
