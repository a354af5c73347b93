#include "nn/tokenizers/vocab_tokenizer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "io/json.hpp"
#include "io/text.hpp"

namespace tg::nn {

using io::DataError;
using io::is_space;
using io::trim;

// ---- splitting ------------------------------------------------------------------------------

TokenizerKind parse_tokenizer(const std::string& s) {
  if (s == "word") return TokenizerKind::word;
  if (s == "char") return TokenizerKind::character;
  throw std::invalid_argument(fmt::format("unknown tokenizer '{}' (expected word or char)", s));
}

const char* tokenizer_name(TokenizerKind k) {
  return k == TokenizerKind::word ? "word" : "char";
}

std::vector<std::string> tokenize(std::string_view text, TokenizerKind kind) {
  std::vector<std::string> out;
  text = trim(text);
  size_t i = 0;
  while (i < text.size()) {
    if (is_space(text[i])) {
      size_t j = i;
      while (j < text.size() && is_space(text[j])) ++j;
      if (kind == TokenizerKind::character) out.emplace_back(" ");
      i = j;
      continue;
    }
    size_t j = i + 1;
    if (kind == TokenizerKind::word) {
      while (j < text.size() && !is_space(text[j])) ++j;
    } else {  // one code point: a lead byte and its continuation bytes (10xxxxxx)
      while (j < text.size() && (static_cast<unsigned char>(text[j]) & 0xC0) == 0x80) ++j;
    }
    out.emplace_back(text.substr(i, j - i));
    i = j;
  }
  return out;
}

std::string detokenize(const std::vector<std::string>& tokens, TokenizerKind kind) {
  std::string out;
  for (const std::string& t : tokens) {
    if (kind == TokenizerKind::word && !out.empty()) out += ' ';
    out += t;
  }
  return out;
}

// ---- vocabulary -----------------------------------------------------------------------------

Vocab::Vocab() {
  for (const char* s : kSpecialTokens) {
    index_.emplace(s, static_cast<int32_t>(tokens_.size()));
    tokens_.emplace_back(s);
  }
}

Vocab Vocab::build(const std::vector<std::vector<std::string>>& sentences, int64_t min_freq,
                   int64_t max_size) {
  if (min_freq < 1)
    throw std::invalid_argument(fmt::format("Vocab: min_freq must be >= 1, got {}", min_freq));
  if (max_size != 0 && max_size < 4)
    throw std::invalid_argument(fmt::format("Vocab: max_size {} cannot hold the 4 special tokens", max_size));
  std::map<std::string, int64_t> counts;  // ordered: ties break by byte order
  for (const auto& s : sentences)
    for (const auto& t : s) ++counts[t];
  std::vector<std::pair<std::string, int64_t>> sorted;
  Vocab v;
  for (auto& [t, c] : counts)
    if (c >= min_freq && !v.index_.contains(t)) sorted.emplace_back(t, c);
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  for (auto& [t, c] : sorted) {
    if (max_size && v.size() >= max_size) break;
    v.index_.emplace(t, static_cast<int32_t>(v.tokens_.size()));
    v.tokens_.push_back(t);
  }
  return v;
}

Vocab Vocab::from_tokens(std::vector<std::string> tokens) {
  for (size_t i = 0; i < 4; ++i)
    if (i >= tokens.size() || tokens[i] != kSpecialTokens[i])
      throw DataError(fmt::format("vocabulary: entry {} must be {}, got {}", i, kSpecialTokens[i],
                                  i < tokens.size() ? json::quote(tokens[i]) : "nothing"));
  Vocab v;
  for (size_t i = 4; i < tokens.size(); ++i) {
    if (!v.index_.emplace(tokens[i], static_cast<int32_t>(i)).second)
      throw DataError(fmt::format("vocabulary: duplicate token {} at {}", json::quote(tokens[i]), i));
    v.tokens_.push_back(std::move(tokens[i]));
  }
  return v;
}

int32_t Vocab::id(std::string_view token) const {
  auto it = index_.find(std::string(token));
  return it == index_.end() ? kUnk : it->second;
}

const std::string& Vocab::token(int32_t id) const {
  if (id < 0 || id >= size())
    throw std::out_of_range(fmt::format("Vocab: id {} out of range for a vocabulary of {}", id, size()));
  return tokens_[static_cast<size_t>(id)];
}

std::vector<int32_t> Vocab::encode(const std::vector<std::string>& tokens) const {
  std::vector<int32_t> ids;
  ids.reserve(tokens.size());
  for (const auto& t : tokens) ids.push_back(id(t));
  return ids;
}

std::vector<std::string> Vocab::decode(std::span<const int32_t> ids) const {
  std::vector<std::string> out;
  for (int32_t id : ids) {
    if (id == kEos) break;
    if (id == kPad || id == kBos) continue;
    out.push_back(token(id));
  }
  return out;
}

// ---- the tokenizer ---------------------------------------------------------------------------

VocabTokenizer::VocabTokenizer(TokenizerKind split, Vocab vocab) : split_(split), vocab_(std::move(vocab)) {}

VocabTokenizer VocabTokenizer::load(TokenizerKind split, const io::Metadata& md, const std::string& prefix,
                                    const std::string& path) {
  std::vector<std::string> tokens;
  const std::string key = prefix + "vocab";
  io::parse_metadata(
      md, path, key.c_str(), "a word or char tokenizer keeps its vocabulary there",
      [&](const std::string& text) {
        const json::Json list = json::parse(text);
        if (!list.is_array())
          throw std::runtime_error(fmt::format("expected an array of tokens, got {}", list.type_name()));
        tokens.reserve(list.size());
        for (size_t i = 0; i < list.size(); ++i) {
          if (!list[i].is_string())
            throw std::runtime_error(
                fmt::format("token {} is a {}, expected a string", i, list[i].type_name()));
          tokens.push_back(list[i].get<std::string>());
        }
      });
  try {
    return VocabTokenizer(split, Vocab::from_tokens(std::move(tokens)));
  } catch (const std::exception& e) {
    throw io::SafetensorsError(fmt::format("checkpoint {}: __metadata__ \"{}\": {}", path, key, e.what()));
  }
}

std::vector<int32_t> VocabTokenizer::encode(std::string_view text, UnknownTokens* unknown,
                                            const std::string&) const {
  const std::vector<std::string> pieces = tokenize(text, split_);
  std::vector<int32_t> ids = vocab_.encode(pieces);
  if (unknown)
    for (size_t i = 0; i < ids.size(); ++i)
      if (ids[i] == kUnk && pieces[i] != kSpecialTokens[kUnk]) unknown->add(pieces[i]);
  return ids;
}

std::string VocabTokenizer::decode(std::span<const int32_t> ids) const {
  return detokenize(vocab_.decode(ids), split_);
}

std::string VocabTokenizer::label(int32_t id) const {
  return printable_label(vocab_.token(id));
}

std::shared_ptr<const Tokenizer> vocab_tokenizer(TokenizerKind split, Vocab vocab) {
  return std::make_shared<VocabTokenizer>(split, std::move(vocab));
}

const Vocab& vocab_of(const Tokenizer& t) {
  return dynamic_cast<const VocabTokenizer&>(t).vocab();
}

void VocabTokenizer::save(io::Metadata& md, const std::string& prefix) const {
  md[prefix + "vocab"] = json::Json(vocab_.tokens()).dump();
}

}  // namespace tg::nn
