#include "nn/data.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>

#include "io/json.hpp"

namespace tg::nn {

using io::DataError;
using io::is_space;
using io::trim;

// ---- tokenizers -----------------------------------------------------------------------------

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

// ---- batches --------------------------------------------------------------------------------

std::vector<EncodedPair> encode_pairs(const io::ParallelText& text, TokenizerKind kind,
                                      const Vocab& src_vocab, const Vocab& tgt_vocab) {
  std::vector<EncodedPair> out(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    out[i].src = src_vocab.encode(tokenize(text.src[i], kind));
    out[i].tgt = tgt_vocab.encode(tokenize(text.tgt[i], kind));
  }
  return out;
}

std::vector<std::vector<int64_t>> make_batches(const std::vector<EncodedPair>& pairs, int64_t batch_size,
                                               Generator* rng, bool by_length) {
  if (batch_size <= 0)
    throw std::invalid_argument(fmt::format("make_batches: batch size {} must be > 0", batch_size));
  const int64_t n = static_cast<int64_t>(pairs.size());
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
  auto shuffle = [&](auto& v) {  // Fisher-Yates with our own generator: identical on every platform
    for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[rng->below(i)]);
  };
  auto longer = [&](int64_t a, int64_t b) {
    const auto& pa = pairs[static_cast<size_t>(a)];
    const auto& pb = pairs[static_cast<size_t>(b)];
    return std::max(pa.src.size(), pa.tgt.size()) < std::max(pb.src.size(), pb.tgt.size());
  };
  // Sorting within windows keeps batches of similar length (little padding) while the shuffle
  // still mixes which pairs meet.
  const int64_t window = rng ? 100 * batch_size : n;
  if (rng) shuffle(order);
  if (rng || by_length)
    for (int64_t w = 0; w < n; w += window)
      std::stable_sort(order.begin() + w, order.begin() + std::min(n, w + window), longer);

  std::vector<std::vector<int64_t>> batches;
  for (int64_t i = 0; i < n; i += batch_size)
    batches.emplace_back(order.begin() + i, order.begin() + std::min(n, i + batch_size));
  if (rng) shuffle(batches);
  return batches;
}

Batch make_batch(const std::vector<EncodedPair>& pairs, std::span<const int64_t> indices) {
  if (indices.empty()) throw std::invalid_argument("make_batch: no pairs");
  Batch b;
  b.batch = static_cast<int64_t>(indices.size());
  for (int64_t i : indices) {
    if (i < 0 || i >= static_cast<int64_t>(pairs.size()))
      throw std::out_of_range(
          fmt::format("make_batch: pair index {} out of range ({} pairs)", i, pairs.size()));
    b.src_len = std::max(b.src_len, static_cast<int64_t>(pairs[static_cast<size_t>(i)].src.size()) + 1);
    b.tgt_len = std::max(b.tgt_len, static_cast<int64_t>(pairs[static_cast<size_t>(i)].tgt.size()) + 1);
  }
  b.src.assign(static_cast<size_t>(b.batch * b.src_len), kPad);
  b.tgt_in.assign(static_cast<size_t>(b.batch * b.tgt_len), kPad);
  b.labels.assign(static_cast<size_t>(b.batch * b.tgt_len), kPad);
  for (int64_t r = 0; r < b.batch; ++r) {
    const EncodedPair& p = pairs[static_cast<size_t>(indices[static_cast<size_t>(r)])];
    int32_t* src = b.src.data() + r * b.src_len;
    int32_t* tin = b.tgt_in.data() + r * b.tgt_len;
    int32_t* lab = b.labels.data() + r * b.tgt_len;
    std::copy(p.src.begin(), p.src.end(), src);
    src[p.src.size()] = kEos;
    tin[0] = kBos;
    std::copy(p.tgt.begin(), p.tgt.end(), tin + 1);
    std::copy(p.tgt.begin(), p.tgt.end(), lab);
    lab[p.tgt.size()] = kEos;
  }
  return b;
}

std::vector<int32_t> pad_sources(const std::vector<std::vector<int32_t>>& sources, int64_t& src_len) {
  src_len = 1;
  for (const auto& s : sources) src_len = std::max(src_len, static_cast<int64_t>(s.size()) + 1);
  std::vector<int32_t> out(sources.size() * static_cast<size_t>(src_len), kPad);
  for (size_t r = 0; r < sources.size(); ++r) {
    std::copy(sources[r].begin(), sources[r].end(), out.begin() + static_cast<int64_t>(r) * src_len);
    out[r * static_cast<size_t>(src_len) + sources[r].size()] = kEos;
  }
  return out;
}

}  // namespace tg::nn
