#include "nn/tokenizers/spm.hpp"

#include <fmt/format.h>
#include <omp.h>
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <exception>
#include <limits>
#include <optional>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "io/base64.hpp"
#include "io/safetensors.hpp"
#include "io/text.hpp"
#include "io/utf8.hpp"

namespace tg::nn {

namespace {

constexpr std::string_view kMark = "\xE2\x96\x81";  // U+2581: SentencePiece's space

// Training sentences are cut to at most this many bytes: libsentencepiece 0.1.97 skips longer ones
// (max_sentence_length) and its unigram trainer aborts on a NaN likelihood for a very long word
// (measured: a 500 KB word aborts, 50 KB ones train).
constexpr size_t kMaxTrainSentence = 4096;
// A text this large overflows the unigram trainer's 32-bit suffix array (an abort in 0.1.97).
constexpr size_t kMaxTrainBytes = size_t{1} << 30;

// The length of the valid UTF-8 character at s[i] (1 to 4; overlong forms, surrogates and code
// points above U+10FFFF are invalid, as in the library's DecodeUTF8), or 0 where none starts.
size_t utf8_length(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const auto trail = [&](size_t k) { return i + k < s.size() && (b(k) & 0xC0) == 0x80; };
  const unsigned c = b(0);
  if (c < 0x80) return 1;
  if (c < 0xC2) return 0;
  if (c < 0xE0) return trail(1) ? 2 : 0;
  if (c < 0xF0) {
    if (!trail(1) || !trail(2)) return 0;
    if ((c == 0xE0 && b(1) < 0xA0) || (c == 0xED && b(1) >= 0xA0)) return 0;
    return 3;
  }
  if (c < 0xF5) {
    if (!trail(1) || !trail(2) || !trail(3)) return 0;
    if ((c == 0xF0 && b(1) < 0x90) || (c == 0xF4 && b(1) >= 0x90)) return 0;
    return 4;
  }
  return 0;
}

// The code point of the valid UTF-8 character of `len` bytes at s[i].
char32_t code_point(std::string_view s, size_t i, size_t len) {
  const auto b = [&](size_t k) { return static_cast<char32_t>(static_cast<unsigned char>(s[i + k])); };
  switch (len) {
    case 1:
      return b(0);
    case 2:
      return (b(0) & 0x1F) << 6 | (b(1) & 0x3F);
    case 3:
      return (b(0) & 0x0F) << 12 | (b(1) & 0x3F) << 6 | (b(2) & 0x3F);
    default:
      return (b(0) & 0x07) << 18 | (b(1) & 0x3F) << 12 | (b(2) & 0x3F) << 6 | (b(3) & 0x3F);
  }
}

// ---- the serialized model, read before the library sees it ----------------------------------------
// sentencepiece_model.proto (proto2): ModelProto { repeated SentencePiece pieces = 1 {piece = 1,
// score = 2, type = 3}; TrainerSpec trainer_spec = 2 {model_type = 3, treat_whitespace_as_suffix =
// 24, byte_fallback = 35}; NormalizerSpec normalizer_spec = 3 {precompiled_charsmap = 2,
// add_dummy_prefix = 3, remove_extra_whitespaces = 4, escape_whitespaces = 5}; self_test_data = 4;
// NormalizerSpec denormalizer_spec = 5 }. Only what decides whether the library can load the model
// safely and how to cut text for it is read; everything else is skipped as protobuf would.

struct BadModel : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct WireField {
  uint32_t number = 0;
  int wire = 0;
  uint64_t value = 0;      // varint fields
  std::string_view bytes;  // length-delimited fields
};

class WireReader {
 public:
  explicit WireReader(std::string_view s) : s_(s) {}
  bool done() const { return at_ >= s_.size(); }
  WireField next() {
    const uint64_t tag = varint();
    WireField f;
    f.number = static_cast<uint32_t>(tag >> 3);
    f.wire = static_cast<int>(tag & 7);
    if (tag >> 32 != 0 || f.number == 0) throw BadModel(fmt::format("bad field tag {}", tag));
    switch (f.wire) {
      case 0:
        f.value = varint();
        break;
      case 1:
        skip(8);
        break;
      case 2: {
        const uint64_t n = varint();
        if (n > s_.size() - at_) throw BadModel(fmt::format("field {} runs past the end", f.number));
        f.bytes = s_.substr(at_, n);
        at_ += n;
        break;
      }
      case 5:
        skip(4);
        break;
      default:
        throw BadModel(fmt::format("field {} has wire type {} (groups are not used)", f.number, f.wire));
    }
    return f;
  }

 private:
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (at_ >= s_.size()) throw BadModel("truncated varint");
      const auto b = static_cast<unsigned char>(s_[at_++]);
      v |= static_cast<uint64_t>(b & 0x7F) << shift;
      if ((b & 0x80) == 0) return v;
    }
    throw BadModel("varint longer than 10 bytes");
  }
  void skip(size_t n) {
    if (n > s_.size() - at_) throw BadModel("truncated fixed-size field");
    at_ += n;
  }
  std::string_view s_;
  size_t at_ = 0;
};

// An enum as protobuf reads it (the low 32 bits as int32); values outside [lo, hi] leave the field
// as it was (proto2 keeps them as unknown fields).
void read_enum(const WireField& f, int lo, int hi, int& out) {
  const auto v = static_cast<int32_t>(static_cast<uint32_t>(f.value));
  if (v >= lo && v <= hi) out = v;
}

enum PieceType { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

struct ModelFacts {
  int model_type = 1;  // UNIGRAM
  bool treat_whitespace_as_suffix = false, byte_fallback = false;
  bool add_dummy_prefix = true, remove_extra_whitespaces = true, escape_whitespaces = true;
  bool charsmap = false;  // a precompiled_charsmap in the normalizer or the denormalizer
  std::vector<std::pair<std::string_view, int>> pieces;
};

ModelFacts read_model_facts(std::string_view bytes) {
  ModelFacts m;
  WireReader top(bytes);
  while (!top.done()) {
    const WireField f = top.next();
    if (f.wire != 2) continue;
    WireReader sub(f.bytes);
    if (f.number == 1) {  // a SentencePiece
      std::string_view piece;
      int type = kNormal;
      while (!sub.done()) {
        const WireField g = sub.next();
        if (g.number == 1 && g.wire == 2) piece = g.bytes;
        if (g.number == 3 && g.wire == 0) read_enum(g, kNormal, kByte, type);
      }
      m.pieces.emplace_back(piece, type);
    } else if (f.number == 2) {  // TrainerSpec
      while (!sub.done()) {
        const WireField g = sub.next();
        if (g.wire != 0) continue;
        if (g.number == 3) read_enum(g, 1, 4, m.model_type);
        if (g.number == 24) m.treat_whitespace_as_suffix = g.value != 0;
        if (g.number == 35) m.byte_fallback = g.value != 0;
      }
    } else if (f.number == 3 || f.number == 5) {  // NormalizerSpec, denormalizer
      while (!sub.done()) {
        const WireField g = sub.next();
        if (g.number == 2 && g.wire == 2 && !g.bytes.empty()) m.charsmap = true;
        if (f.number == 3 && g.wire == 0) {
          if (g.number == 3) m.add_dummy_prefix = g.value != 0;
          if (g.number == 4) m.remove_extra_whitespaces = g.value != 0;
          if (g.number == 5) m.escape_whitespaces = g.value != 0;
        }
      }
    }
  }
  return m;
}

// Whether no piece can reach across a cut: "▁" only at the start of a piece (so nothing spans a
// non-space followed by a space) and, for the lm layout, "\n" only at its end.
bool cuts_are_safe(std::string_view piece, bool newline_rule) {
  size_t i = 0;
  while (piece.substr(i, 3) == kMark) i += 3;
  if (piece.find(kMark, i) != std::string_view::npos) return false;
  if (!newline_rule) return true;
  const size_t nl = piece.find('\n');
  return nl == std::string_view::npos || nl + 1 == piece.size();
}

// ---- the unigram check: an exact top-2 search over one word ---------------------------------------

// The pieces of a unigram model in a byte trie (children of a node sorted by byte; the root's in a
// table), with their ids and scores.
class PieceTrie {
 public:
  void add(std::string_view piece, int32_t id, float score) {
    int32_t node = 0;
    for (const char ch : piece) {
      const auto b = static_cast<unsigned char>(ch);
      int32_t next = child(node, b);
      if (next < 0) {
        next = static_cast<int32_t>(nodes_.size());
        nodes_.emplace_back();
        nodes_[static_cast<size_t>(node)].children.emplace_back(b, next);
        std::sort(nodes_[static_cast<size_t>(node)].children.begin(),
                  nodes_[static_cast<size_t>(node)].children.end());
        if (node == 0) root_[b] = next;
      }
      node = next;
    }
    nodes_[static_cast<size_t>(node)].id = id;
    nodes_[static_cast<size_t>(node)].score = score;
  }
  int32_t child(int32_t node, unsigned char b) const {
    if (node == 0) return root_[b];
    const auto& c = nodes_[static_cast<size_t>(node)].children;
    const auto it = std::lower_bound(c.begin(), c.end(), std::pair<unsigned char, int32_t>(b, -1));
    return it != c.end() && it->first == b ? it->second : -1;
  }
  int32_t id(int32_t node) const { return nodes_[static_cast<size_t>(node)].id; }
  float score(int32_t node) const { return nodes_[static_cast<size_t>(node)].score; }

 private:
  struct Node {
    int32_t id = -1;
    float score = 0;
    std::vector<std::pair<unsigned char, int32_t>> children;
  };
  std::vector<Node> nodes_ = std::vector<Node>(1);
  std::array<int32_t, 256> root_ = [] {
    std::array<int32_t, 256> r{};
    r.fill(-1);
    return r;
  }();
};

// What the search says about one word (its normalized form, spaces as "▁").
struct WordCheck {
  double best = 0;                                       // score of the best segmentation
  double gap = std::numeric_limits<double>::infinity();  // best minus second best
  int64_t chars = 0;
  std::vector<int32_t> ids;  // the best segmentation's ids, unknown characters as their bytes
};

}  // namespace

// ---- the tokenizer ----------------------------------------------------------------------------

struct SpmTokenizer::Impl {
  enum class Kind : uint8_t { normal, control, unknown, byte };

  std::string bytes;
  sentencepiece::SentencePieceProcessor sp;
  SpmType type = SpmType::unigram;
  SpmLayout layout = SpmLayout::translate;
  SpecialIds special;
  int32_t vocab = 0;
  std::vector<Kind> kind;
  std::vector<std::string> text;  // what decode() writes for each id
  std::vector<std::string> piece;
  std::array<int32_t, 256> byte_id{};  // -1 without byte fallback
  bool byte_fallback = false;
  // lm layout, a model without the piece "▁" (trained on text with no space): the library would
  // encode a space as the byte pieces of "▁", which decode as that character, not as a space. Such
  // a model's spaces are encoded as the byte piece of ' ' instead, so that every text round-trips.
  bool space_raw = false;
  // Words: text may be cut before a space that follows a non-space and after a newline
  // (cuts_are_safe holds for every piece the encoder can match).
  bool word_cuts = false;
  // Parts (lm layout): a word may be cut between two characters that no such piece holds side by
  // side. The pairs of ASCII characters (U+2581 as 0) in a table, the others in a set.
  std::vector<uint8_t> ascii_pairs = std::vector<uint8_t>(128 * 128);
  std::unordered_set<uint64_t> pairs;
  void add_pair(char32_t a, char32_t b) {
    const char32_t x = a == 0x2581 ? 0 : a, y = b == 0x2581 ? 0 : b;
    if (x < 128 && y < 128)
      ascii_pairs[x * 128 + y] = 1;
    else
      pairs.insert(static_cast<uint64_t>(x) << 32 | y);
  }
  bool has_pair(char32_t a, char32_t b) const {
    const char32_t x = a == 0x2581 ? 0 : a, y = b == 0x2581 ? 0 : b;
    if (x < 128 && y < 128) return ascii_pairs[x * 128 + y] != 0;
    return pairs.contains(static_cast<uint64_t>(x) << 32 | y);
  }
  // Calls emit with each part of a word (lm: spaces stand for "▁"); translate: the word whole (the
  // library puts a "▁" before each text it is given).
  template <class F>
  void split_word(std::string_view w, F&& emit) const {
    if (layout == SpmLayout::translate) {
      emit(w);
      return;
    }
    size_t start = 0;
    char32_t prev = 0;
    for (size_t i = 0; i < w.size();) {
      const size_t len = utf8_length(w, i);
      const char32_t c = w[i] == ' ' ? 0x2581 : code_point(w, i, len);
      if (i > 0 && !has_pair(prev, c)) {
        emit(w.substr(start, i - start));
        start = i;
      }
      prev = c;
      i += len;
    }
    emit(w.substr(start));
  }
  // The unigram check (unigram models without user-defined pieces).
  bool unigram_check = false;
  PieceTrie trie;
  double unk_score = 0;

  // The library on one text; throws on an error status.
  std::vector<int32_t> library_encode(std::string_view s) const {
    std::vector<int> ids;
    const auto st = sp.Encode(absl::string_view(s.data(), s.size()), &ids);
    if (!st.ok()) throw std::runtime_error(fmt::format("SentencePiece: encoding failed: {}", st.ToString()));
    return {ids.begin(), ids.end()};
  }

  WordCheck check_word(std::string_view word) const;
  std::vector<std::vector<int32_t>> encode_many(std::span<const std::string_view> texts, bool whole,
                                                UnknownTokens* unknown) const;
  void add_unknown(std::string_view s, UnknownTokens* unknown) const;
};

// The unigram model's search (the library's EncodeOptimized: every piece that matches at each
// character, an unknown node of one character where no one-character piece matches, scored
// min_score - 10) with the best two scores kept at each position, in double.
WordCheck SpmTokenizer::Impl::check_word(std::string_view word) const {
  constexpr double kNone = -std::numeric_limits<double>::infinity();
  const size_t n = word.size();
  struct At {
    double best = kNone, second = kNone;
    size_t from = 0;
    int32_t id = -1;  // -1: the unknown node
  };
  std::vector<At> at(n + 1);
  at[0].best = 0;
  WordCheck r;
  const auto offer = [&](size_t end, double score, size_t from, int32_t id) {
    At& a = at[end];
    const double c1 = at[from].best + score, c2 = at[from].second + score;
    if (c1 > a.best) {
      a.second = std::max(a.best, c2);
      a.best = c1;
      a.from = from;
      a.id = id;
    } else {
      a.second = std::max(a.second, c1);
    }
  };
  for (size_t start = 0; start < n;) {
    const size_t len = utf8_length(word, start);
    if (len == 0) throw std::logic_error("spm: the unigram check was given invalid UTF-8");
    ++r.chars;
    bool single = false;
    int32_t node = 0;
    for (size_t k = start; k < n; ++k) {
      node = trie.child(node, static_cast<unsigned char>(word[k]));
      if (node < 0) break;
      const int32_t id = trie.id(node);
      if (id < 0) continue;
      offer(k + 1, trie.score(node), start, id);
      if (k + 1 - start == len) single = true;
    }
    if (!single) offer(start + len, unk_score, start, -1);
    start += len;
  }
  r.best = at[n].best;
  r.gap = at[n].best - at[n].second;
  for (size_t end = n; end > 0; end = at[end].from) {
    const At& a = at[end];
    if (a.id >= 0) {
      r.ids.push_back(a.id);
    } else {
      for (size_t k = end; k > a.from; --k) {
        const int32_t b = byte_fallback ? byte_id[static_cast<unsigned char>(word[k - 1])] : special.unk;
        r.ids.push_back(b);
        if (!byte_fallback) break;
      }
    }
  }
  std::reverse(r.ids.begin(), r.ids.end());
  return r;
}

void SpmTokenizer::Impl::add_unknown(std::string_view s, UnknownTokens* unknown) const {
  const auto spt = sp.EncodeAsImmutableProto(absl::string_view(s.data(), s.size()));
  for (const auto& p : spt.pieces())
    if (static_cast<int32_t>(p.id()) == special.unk) unknown->add(p.surface());
}

namespace {

// One text cut into what the library encodes and what it must not see:
//   spans  what the library encodes separately (lm: the lines, and between the raw bytes below;
//          translate: the whole text), each cut into words where no piece reaches across, each word
//          into parts (lm: between two characters no piece holds side by side)
//   raw    bytes encoded as byte pieces without the library (lm: NUL, bytes of invalid UTF-8, U+2581)
struct Item {
  int32_t raw_id = -1;            // a raw byte's piece (-1: the model has none)
  uint32_t first = 0, count = 0;  // a span (count > 0): its words in Cut::words
  std::string_view text;
};
struct Cut {
  std::vector<Item> items;
  std::vector<uint32_t> words;  // indices into the distinct words
};

// Calls emit with each word of a span of the lm layout: cut before a space that follows a non-space.
template <class F>
void lm_words(std::string_view span, F&& emit) {
  size_t start = 0;
  for (size_t i = 1; i < span.size(); ++i)
    if (span[i] == ' ' && span[i - 1] != ' ') {
      emit(span.substr(start, i - start));
      start = i;
    }
  if (start < span.size()) emit(span.substr(start));
}

// Calls span(begin, end) and raw(begin, length) for the parts of an lm-layout text, in order;
// space_raw: spaces are raw bytes too (Impl::space_raw).
template <class Span, class Raw>
void lm_spans(std::string_view s, bool space_raw, Span&& span, Raw&& raw) {
  size_t start = 0;
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == ' ' && space_raw) {
      if (i > start) span(start, i);
      raw(i, 1);
      start = ++i;
      continue;
    }
    if (c != 0 && c < 0x80) {  // ASCII but NUL: the common case
      ++i;
      if (c == '\n') {
        span(start, i);
        start = i;
      }
      continue;
    }
    const size_t len = utf8_length(s, i);
    if (len == 0 || c == 0 || s.substr(i, 3) == kMark) {
      if (i > start) span(start, i);
      const size_t k = len == 0 ? 1 : len;
      raw(i, k);
      i += k;
      start = i;
    } else {
      i += len;
      if (s[i - 1] == '\n') {
        span(start, i);
        start = i;
      }
    }
  }
  if (s.size() > start) span(start, s.size());
}

// A hash for the words and parts (short strings): FNV-1a over 8 bytes at a time, then mixed.
struct ShortHash {
  size_t operator()(std::string_view s) const noexcept {
    uint64_t h = 0xcbf29ce484222325ULL ^ s.size();
    size_t i = 0;
    for (; i + 8 <= s.size(); i += 8) {
      uint64_t w;
      std::memcpy(&w, s.data() + i, 8);
      h = (h ^ w) * 0x100000001b3ULL;
      h ^= h >> 29;
    }
    uint64_t w = 0;
    std::memcpy(&w, s.data() + i, s.size() - i);
    h = (h ^ w) * 0x9E3779B97F4A7C15ULL;
    return static_cast<size_t>(h ^ (h >> 32));
  }
};
using Index = std::unordered_map<std::string_view, uint32_t, ShortHash>;

// Runs body(k) for k in [0, n) on OpenMP's threads when n is large. An exception cannot leave an
// OpenMP region: the first one is kept and thrown after it.
template <class F>
void parallel_for(size_t n, size_t serial_below, F&& body) {
  std::exception_ptr error;
  const auto count = static_cast<int64_t>(n);
#pragma omp parallel for schedule(dynamic, 32) if (n >= serial_below)
  for (int64_t k = 0; k < count; ++k) {
    try {
      body(static_cast<size_t>(k));
    } catch (...) {
#pragma omp critical(tg_spm_parallel_for)
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace

std::vector<std::vector<int32_t>> SpmTokenizer::Impl::encode_many(std::span<const std::string_view> texts,
                                                                  bool whole, UnknownTokens* unknown) const {
  std::vector<std::vector<int32_t>> out(texts.size());
  const bool lm = layout == SpmLayout::lm;
  const auto append_library = [&](std::vector<int32_t>& ids, std::string_view s) {
    const auto got = library_encode(s);
    ids.insert(ids.end(), got.begin(), got.end());
    if (unknown && special.unk >= 0 && std::find(got.begin(), got.end(), special.unk) != got.end())
      add_unknown(s, unknown);
  };
  const auto append_raw = [&](std::vector<int32_t>& ids, std::string_view s, size_t at, size_t n) {
    for (size_t j = at; j < at + n; ++j) {
      const int32_t id = byte_id[static_cast<unsigned char>(s[j])];
      ids.push_back(id >= 0 ? id : special.unk);
      if (id < 0 && unknown) unknown->add(s.substr(j, 1));
    }
  };
  // Without byte fallback the library joins a run of unknown characters into one <unk>, also
  // across the cuts below: such models (not tapegrad's) are encoded span by span.
  if (whole || !byte_fallback || (!lm && !word_cuts) || (type == SpmType::unigram && !unigram_check)) {
    // The specification: the library on each span.
    for (size_t t = 0; t < texts.size(); ++t) {
      const std::string_view s = texts[t];
      if (!lm) {
        append_library(out[t], s);
        continue;
      }
      lm_spans(
          s, space_raw, [&](size_t b, size_t e) { append_library(out[t], s.substr(b, e - b)); },
          [&](size_t at, size_t n) { append_raw(out[t], s, at, n); });
    }
    return out;
  }

  // 1. Cut every text into spans and raw bytes, each span into words; the distinct words.
  size_t total_size = 0;
  for (const std::string_view s : texts) total_size += s.size();
  std::vector<Cut> cuts(texts.size());
  Index word_index;
  word_index.reserve(1024 + total_size / 64);
  std::vector<std::string_view> words;
  const auto add_word = [&](Cut& c, std::string_view w) {
    const auto [it, added] = word_index.try_emplace(w, static_cast<uint32_t>(words.size()));
    if (added) words.push_back(w);
    c.words.push_back(it->second);
  };
  for (size_t t = 0; t < texts.size(); ++t) {
    const std::string_view s = texts[t];
    Cut& c = cuts[t];
    if (!lm) {
      for (size_t i = 0; i < s.size();) {
        if (s[i] == ' ') {
          ++i;
          continue;
        }
        const size_t end = std::min(s.find(' ', i), s.size());
        add_word(c, s.substr(i, end - i));
        i = end;
      }
      if (!c.words.empty()) c.items.push_back({-1, 0, static_cast<uint32_t>(c.words.size()), s});
      continue;
    }
    lm_spans(
        s, space_raw,
        [&](size_t b, size_t e) {
          Item span{-1, static_cast<uint32_t>(c.words.size()), 0, s.substr(b, e - b)};
          if (word_cuts)
            lm_words(span.text, [&](std::string_view w) { add_word(c, w); });
          else
            add_word(c, span.text);
          span.count = static_cast<uint32_t>(c.words.size()) - span.first;
          c.items.push_back(span);
        },
        [&](size_t at, size_t n) {
          for (size_t j = at; j < at + n; ++j)
            c.items.push_back({byte_id[static_cast<unsigned char>(s[j])], 0, 0, s.substr(j, 1)});
        });
  }

  // 2. Each distinct word into parts; the distinct parts.
  std::vector<uint32_t> word_first(words.size() + 1), word_parts;
  Index part_index;
  part_index.reserve(words.size());
  std::vector<std::string_view> parts;
  for (size_t k = 0; k < words.size(); ++k) {
    word_first[k] = static_cast<uint32_t>(word_parts.size());
    split_word(words[k], [&](std::string_view p) {
      const auto [it, added] = part_index.try_emplace(p, static_cast<uint32_t>(parts.size()));
      if (added) parts.push_back(p);
      word_parts.push_back(it->second);
    });
  }
  word_first[words.size()] = static_cast<uint32_t>(word_parts.size());

  // 3. The library on each distinct part, and for unigram the search, in parallel.
  std::vector<std::vector<int32_t>> memo(parts.size());
  std::vector<WordCheck> checks(unigram_check ? parts.size() : 0);
  parallel_for(parts.size(), 128, [&](size_t k) {
    const std::string_view part = parts[k];
    memo[k] = library_encode(part);
    if (!unigram_check) return;
    std::string normalized;  // as the library sees the part
    normalized.reserve(part.size() + 8);
    if (!lm) normalized += kMark;
    for (const char ch : part)
      if (ch == ' ')
        normalized += kMark;
      else
        normalized += ch;
    // Translate-layout text reaches the library as it is: bytes the search cannot follow (invalid
    // UTF-8, which the library reads as U+FFFD) send the span to the library whole.
    if (io::is_valid_utf8(normalized)) {
      checks[k] = check_word(normalized);
      if (checks[k].ids != memo[k]) checks[k].gap = -1;  // the search and the library disagree
    } else {
      checks[k].gap = -1;
    }
  });

  // 4. Unigram: a span keeps its parts' ids only where each part's best segmentation wins by more
  // than float rounding can change. The library adds a part's scores to the score of the span
  // before it (C), in float, and a path of m pieces accumulates at most m roundings of
  // 2^-24 (|C| + |score|) each, in the span and in the library's call on the part alone; so part p
  // is safe where gap_p > k_p (1.001 C + 2 |best_p| + 1), k_p = 8 (chars_p + 2) 2^-24 (a margin of
  // 4). Per word, with C_w the score before it and P_p that of the word's parts before p, that is
  // C_w < limit_w = min_p (gap_p - k_p (1.001 P_p + 2 |best_p| + 1)) / (1.001 k_p).
  // Otherwise (and where the search and the library disagree: gap -1) the span goes to the
  // library whole.
  std::vector<std::pair<uint32_t, uint32_t>> whole_spans;  // (text, item)
  if (unigram_check) {
    std::vector<double> limit(words.size()), score(words.size());
    for (size_t w = 0; w < words.size(); ++w) {
      double before = 0, lim = std::numeric_limits<double>::infinity();
      for (uint32_t q = word_first[w]; q < word_first[w + 1]; ++q) {
        const WordCheck& p = checks[word_parts[q]];
        const double k = 8.0 * static_cast<double>(p.chars + 2) * 0x1p-24;
        lim = std::min(lim, (p.gap - k * (1.001 * before + 2 * std::abs(p.best) + 1)) / (1.001 * k));
        before += std::abs(p.best);
      }
      limit[w] = lim;
      score[w] = before;
    }
    for (size_t t = 0; t < cuts.size(); ++t)
      for (size_t it = 0; it < cuts[t].items.size(); ++it) {
        const Item& item = cuts[t].items[it];
        double c = 0;
        bool robust = true;
        for (uint32_t j = item.first; j < item.first + item.count && robust; ++j) {
          const uint32_t w = cuts[t].words[j];
          robust = c < limit[w];
          c += score[w];
        }
        if (!robust) whole_spans.emplace_back(static_cast<uint32_t>(t), static_cast<uint32_t>(it));
      }
  }
  std::vector<std::vector<int32_t>> whole_ids(whole_spans.size());
  parallel_for(whole_spans.size(), 16, [&](size_t k) {
    const auto [t, it] = whole_spans[k];
    whole_ids[k] = library_encode(cuts[t].items[it].text);
  });

  // 5. Put the ids together: each distinct word's, then each text's.
  std::vector<uint8_t> has_unk(parts.size());
  if (special.unk >= 0)
    for (size_t k = 0; k < parts.size(); ++k)
      has_unk[k] = std::find(memo[k].begin(), memo[k].end(), special.unk) != memo[k].end();
  std::vector<uint32_t> word_ids_at(words.size() + 1);
  std::vector<int32_t> word_ids;
  for (size_t w = 0; w < words.size(); ++w) {
    word_ids_at[w] = static_cast<uint32_t>(word_ids.size());
    for (uint32_t q = word_first[w]; q < word_first[w + 1]; ++q)
      word_ids.insert(word_ids.end(), memo[word_parts[q]].begin(), memo[word_parts[q]].end());
  }
  word_ids_at[words.size()] = static_cast<uint32_t>(word_ids.size());
  size_t next_whole = 0;
  for (size_t t = 0; t < cuts.size(); ++t) {
    const Cut& c = cuts[t];
    std::vector<int32_t>& ids = out[t];
    size_t total = 0;
    for (const uint32_t w : c.words) total += word_ids_at[w + 1] - word_ids_at[w];  // spans sent whole: about
    ids.reserve(total + c.items.size());
    for (size_t it = 0; it < c.items.size(); ++it) {
      const Item& item = c.items[it];
      if (item.count == 0) {  // a raw byte
        ids.push_back(item.raw_id >= 0 ? item.raw_id : special.unk);
        if (item.raw_id < 0 && unknown) unknown->add(item.text);
        continue;
      }
      if (next_whole < whole_spans.size() && whole_spans[next_whole].first == t &&
          whole_spans[next_whole].second == it) {
        const auto& got = whole_ids[next_whole++];
        ids.insert(ids.end(), got.begin(), got.end());
        if (unknown && special.unk >= 0 && std::find(got.begin(), got.end(), special.unk) != got.end())
          add_unknown(item.text, unknown);
        continue;
      }
      for (uint32_t j = item.first; j < item.first + item.count; ++j) {
        const uint32_t w = c.words[j];
        ids.insert(ids.end(), word_ids.begin() + word_ids_at[w], word_ids.begin() + word_ids_at[w + 1]);
        if (unknown)
          for (uint32_t q = word_first[w]; q < word_first[w + 1]; ++q)
            if (has_unk[word_parts[q]]) add_unknown(parts[word_parts[q]], unknown);
      }
    }
  }
  return out;
}

// ---- loading -----------------------------------------------------------------------------------

SpmTokenizer SpmTokenizer::from_model(std::string bytes, const std::string& where) {
  const auto fail = [&](const std::string& why) {
    return io::DataError(fmt::format("{}: not a usable SentencePiece model: {}", where, why));
  };
  ModelFacts facts;
  try {
    facts = read_model_facts(bytes);
  } catch (const BadModel& e) {
    throw fail(fmt::format("bad protobuf ({})", e.what()));
  }
  if (facts.charsmap)
    throw fail("it has a normalisation table (precompiled_charsmap); tapegrad's models normalise nothing");
  if (facts.model_type != 1 && facts.model_type != 2)
    throw fail(fmt::format("model type {} (tapegrad uses unigram = 1 and bpe = 2)", facts.model_type));
  if (!facts.escape_whitespaces || facts.treat_whitespace_as_suffix ||
      facts.add_dummy_prefix != facts.remove_extra_whitespaces)
    throw fail(
        "whitespace settings tapegrad does not use (it reads escape_whitespaces, no whitespace suffix, and "
        "add_dummy_prefix = remove_extra_whitespaces)");
  for (size_t i = 0; i < facts.pieces.size(); ++i) {
    const std::string_view p = facts.pieces[i].first;
    if (p.find('\0') != std::string_view::npos || !io::is_valid_utf8(p))
      throw fail(fmt::format("piece {} has a NUL or invalid UTF-8", i));
  }

  auto impl = std::make_shared<Impl>();
  const auto st = impl->sp.LoadFromSerializedProto(absl::string_view(bytes.data(), bytes.size()));
  if (!st.ok()) throw fail(st.ToString());
  Impl& m = *impl;
  m.vocab = m.sp.GetPieceSize();
  if (static_cast<size_t>(m.vocab) != facts.pieces.size())
    throw fail("the library and tapegrad read different pieces");
  m.type = facts.model_type == 2 ? SpmType::bpe : SpmType::unigram;
  m.layout = facts.add_dummy_prefix ? SpmLayout::translate : SpmLayout::lm;
  m.special = {m.sp.pad_id(), m.sp.bos_id(), m.sp.eos_id(), m.sp.unk_id()};
  m.byte_fallback = facts.byte_fallback;
  m.byte_id.fill(-1);
  m.kind.resize(static_cast<size_t>(m.vocab));
  m.text.resize(static_cast<size_t>(m.vocab));
  m.piece.resize(static_cast<size_t>(m.vocab));
  bool user_defined = false;
  float min_score = std::numeric_limits<float>::max();
  m.word_cuts = true;
  for (int32_t id = 0; id < m.vocab; ++id) {
    const auto i = static_cast<size_t>(id);
    const std::string& p = m.sp.IdToPiece(id);
    const int type = facts.pieces[i].second;
    // Everything the library says about a piece must be what the bytes say.
    if (p != facts.pieces[i].first || m.sp.IsControl(id) != (type == kControl) ||
        m.sp.IsUnknown(id) != (type == kUnknown) || m.sp.IsByte(id) != (type == kByte) ||
        m.sp.IsUnused(id) != (type == kUnused))
      throw fail(fmt::format("the library and tapegrad read piece {} differently", id));
    m.piece[i] = p;
    if (type == kControl) {
      m.kind[i] = Impl::Kind::control;
    } else if (type == kUnknown) {
      m.kind[i] = Impl::Kind::unknown;
      m.text[i] = "<unk>";
    } else if (type == kByte) {  // the library has checked the form <0xNN>
      m.kind[i] = Impl::Kind::byte;
      const auto b = static_cast<unsigned char>(std::stoi(p.substr(3, 2), nullptr, 16));
      m.text[i] = std::string(1, static_cast<char>(b));
      m.byte_id[b] = id;
    } else {
      m.kind[i] = Impl::Kind::normal;
      for (size_t at = 0; at < p.size();) {
        if (std::string_view(p).substr(at, 3) == kMark) {
          m.text[i] += ' ';
          at += 3;
        } else {
          m.text[i] += p[at++];
        }
      }
      if (!cuts_are_safe(p, m.layout == SpmLayout::lm)) m.word_cuts = false;
      for (size_t at = 0, len = 0; at < p.size(); at += len) {  // valid UTF-8: checked above
        len = utf8_length(p, at);
        if (len == 0) break;  // cannot happen: checked above
        if (at + len < p.size())
          m.add_pair(code_point(p, at, len), code_point(p, at + len, utf8_length(p, at + len)));
      }
      if (type == kUserDefined) user_defined = true;
      if (type == kNormal) min_score = std::min(min_score, m.sp.GetScore(id));
    }
  }
  // The library encodes what no piece covers as the piece of type UNKNOWN, but its unk_id() is the
  // id of the trainer spec's unk_piece when that piece is the UNKNOWN one, else -1: a model can make
  // the two disagree (a fuzzed one named "<ukn>" UNKNOWN, id 2, beside a normal "<unk>"), and this
  // tokenizer's unknown text would then become id -1. Refused, naming both.
  std::vector<int32_t> unknown_pieces;
  for (int32_t id = 0; id < m.vocab; ++id)
    if (m.kind[static_cast<size_t>(id)] == Impl::Kind::unknown) unknown_pieces.push_back(id);
  if (unknown_pieces.size() != 1)
    throw fail(fmt::format("it has {} pieces of type UNKNOWN, not one", unknown_pieces.size()));
  if (unknown_pieces[0] != m.special.unk)
    throw fail(
        fmt::format("its piece of type UNKNOWN is id {}, but the library's unk id (its trainer spec's "
                    "unk_piece) is {}",
                    unknown_pieces[0], m.special.unk));
  m.space_raw = m.layout == SpmLayout::lm;
  for (int32_t id = 0; id < m.vocab; ++id)
    if (m.kind[static_cast<size_t>(id)] == Impl::Kind::normal && m.piece[static_cast<size_t>(id)] == kMark)
      m.space_raw = false;
  if (m.type == SpmType::unigram && !user_defined) {
    m.unigram_check = true;
    // The library: min_score_ over the NORMAL pieces (FLT_MAX when there is none), minus kUnkPenalty.
    m.unk_score = static_cast<double>(min_score - 10.0f);
    for (int32_t id = 0; id < m.vocab; ++id)
      if (facts.pieces[static_cast<size_t>(id)].second == kNormal)
        m.trie.add(m.piece[static_cast<size_t>(id)], id, m.sp.GetScore(id));
  }
  m.bytes = std::move(bytes);
  return SpmTokenizer(std::move(impl));
}

SpmTokenizer SpmTokenizer::load(const io::Metadata& md, const std::string& prefix, const std::string& path) {
  // A checkpoint's metadata: what is wrong with it is a SafetensorsError naming the file and key,
  // as for the other tokenizers' load (io::parse_metadata).
  const std::string key = prefix + "spm";
  std::optional<SpmTokenizer> tok;
  io::parse_metadata(
      md, path, key.c_str(), "an spm tokenizer keeps its SentencePiece model there",
      [&](const std::string& text) { tok.emplace(from_model(io::base64_decode(text), "the model")); });
  return std::move(*tok);
}

void SpmTokenizer::save(io::Metadata& md, const std::string& prefix) const {
  md[prefix + "spm"] = io::base64_encode(impl_->bytes);
}

// ---- training ------------------------------------------------------------------------------------

namespace {

class Sentences : public sentencepiece::SentenceIterator {
 public:
  explicit Sentences(const std::vector<std::string>& v) : v_(v) {}
  bool done() const override { return i_ >= v_.size(); }
  void Next() override { ++i_; }
  const std::string& value() const override { return v_[i_]; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  const std::vector<std::string>& v_;
  size_t i_ = 0;
};

// Appends `line` to `out`, cut into parts of at most kMaxTrainSentence bytes: before a space that
// follows a non-space where there is one in range, else at a character boundary.
void add_sentence(std::string_view line, std::vector<std::string>& out) {
  while (line.size() > kMaxTrainSentence) {
    size_t cut = 0;
    for (size_t i = kMaxTrainSentence; i > 0 && cut == 0; --i)
      if (line[i] == ' ' && line[i - 1] != ' ') cut = i;
    if (cut == 0) {
      cut = kMaxTrainSentence;
      while (cut > 0 && (static_cast<unsigned char>(line[cut]) & 0xC0) == 0x80) --cut;
      if (cut == 0) cut = kMaxTrainSentence;
    }
    out.emplace_back(line.substr(0, cut));
    line.remove_prefix(cut);
  }
  if (!line.empty()) out.emplace_back(line);
}

}  // namespace

SpmTokenizer SpmTokenizer::train(std::span<const std::string_view> texts, const SpmOptions& o) {
  const bool lm = o.layout == SpmLayout::lm;
  // The sentences, as the library will count their characters: it skips a sentence that holds
  // U+2585 (its own <unk> mark), and never counts a space, a tab (its boundary mark) or a NUL.
  std::vector<std::string> sentences;
  size_t total = 0;
  std::vector<bool> seen(0x110000 + 1);
  int64_t chars = 0;     // the distinct characters the library will count
  bool content = false;  // a character other than ASCII whitespace
  for (const std::string_view text : texts) {
    total += text.size();
    if (total > kMaxTrainBytes)
      throw io::DataError(
          fmt::format("spm training: more than {} MiB of text (sample it)", kMaxTrainBytes >> 20));
    for (size_t start = 0; start < text.size();) {
      size_t end = text.find('\n', start);
      end = end == std::string_view::npos ? text.size() : end + 1;
      std::string_view line = text.substr(start, end - start);
      start = end;
      if (!lm && !line.empty() && line.back() == '\n') line.remove_suffix(1);
      if (line.find("\xE2\x96\x85") != std::string_view::npos) continue;
      for (size_t i = 0; i < line.size();) {
        const size_t len = utf8_length(line, i);
        const char32_t cp = len == 0 ? 0xFFFD : code_point(line, i, len);  // invalid: U+FFFD, as the library
        i += len == 0 ? 1 : len;
        if (cp == ' ' || cp == '\t' || cp == 0) continue;
        if (!seen[cp]) ++chars;
        seen[cp] = true;
        content = content || cp > 0x7F || !io::is_space(static_cast<char>(cp));
      }
      if (lm && line.find(' ') != std::string_view::npos && !seen[0x2581]) {  // the library's space mark
        seen[0x2581] = true;
        ++chars;
      }
      add_sentence(line, sentences);
    }
  }
  if (!content) throw io::DataError("spm training: no text to learn from (nothing but whitespace)");
  if (!lm && !seen[0x2581]) ++chars;  // every sentence starts with the space mark (add_dummy_prefix)
  const int64_t specials = lm ? 1 : 4;
  const int64_t needed = chars + specials + 256;
  if (o.vocab_size < needed)
    throw io::DataError(
        fmt::format("spm training: --vocab-size {} is too small for this text: it needs at least {} ({} "
                    "distinct characters "
                    "including the space mark \"\u2581\", {} special{} and 256 byte pieces)",
                    o.vocab_size, needed, chars, specials, specials == 1 ? "" : "s"));
  if (o.vocab_size > std::numeric_limits<int32_t>::max())
    throw io::DataError(fmt::format("spm training: --vocab-size {} is too large", o.vocab_size));

  const int threads = std::clamp(o.threads > 0 ? o.threads : omp_get_max_threads(), 1, 128);
  std::unordered_map<std::string, std::string> kw = {
      {"model_type", o.type == SpmType::bpe ? "bpe" : "unigram"},
      {"vocab_size", std::to_string(o.vocab_size)},
      {"character_coverage", "1.0"},
      {"byte_fallback", "true"},
      {"normalization_rule_name", "identity"},
      {"split_by_whitespace", "true"},
      {"max_sentence_length", std::to_string(2 * kMaxTrainSentence)},
      {"num_threads", std::to_string(threads)},
      {"minloglevel", "2"},  // the library logs progress on stderr; its errors come back as statuses
  };
  if (lm) {
    kw.insert({{"add_dummy_prefix", "false"},
               {"remove_extra_whitespaces", "false"},
               {"allow_whitespace_only_pieces", "true"},
               {"unk_id", "0"},
               {"bos_id", "-1"},
               {"eos_id", "-1"},
               {"pad_id", "-1"}});
  } else {
    kw.insert({{"add_dummy_prefix", "true"},
               {"remove_extra_whitespaces", "true"},
               {"pad_id", "0"},
               {"bos_id", "1"},
               {"eos_id", "2"},
               {"unk_id", "3"},
               {"pad_piece", "<pad>"},
               {"bos_piece", "<bos>"},
               {"eos_piece", "<eos>"},
               {"unk_piece", "<unk>"}});
  }
  Sentences it(sentences);
  std::string model;
  const auto st = sentencepiece::SentencePieceTrainer::Train(kw, &it, &model);
  if (!st.ok()) {
    std::string why = st.message();
    const size_t at = why.find("Vocabulary size too high");
    if (at != std::string::npos) why = why.substr(at) + " (this text has too few distinct pieces)";
    throw io::DataError(fmt::format("spm training ({}, --vocab-size {}): {}",
                                    o.type == SpmType::bpe ? "bpe" : "unigram", o.vocab_size, why));
  }
  return from_model(std::move(model), "the model just trained");
}

// ---- the rest of the interface -------------------------------------------------------------------------

const std::string& SpmTokenizer::model_bytes() const {
  return impl_->bytes;
}
SpmType SpmTokenizer::type() const {
  return impl_->type;
}
SpmLayout SpmTokenizer::layout() const {
  return impl_->layout;
}
int64_t SpmTokenizer::vocab_size() const {
  return impl_->vocab;
}
SpecialIds SpmTokenizer::specials() const {
  return impl_->special;
}

std::vector<int32_t> SpmTokenizer::encode(std::string_view text, UnknownTokens* unknown,
                                          const std::string& /*where: spm encodes any text*/) const {
  return std::move(impl_->encode_many({&text, 1}, false, unknown)[0]);
}

std::vector<std::vector<int32_t>> SpmTokenizer::encode_batch(std::span<const std::string_view> texts,
                                                             UnknownTokens* unknown) const {
  return impl_->encode_many(texts, false, unknown);
}

std::vector<int32_t> SpmTokenizer::encode_by_library(std::string_view text) const {
  return std::move(impl_->encode_many({&text, 1}, true, nullptr)[0]);
}

std::string SpmTokenizer::decode(std::span<const int32_t> ids) const {
  const Impl& m = *impl_;
  std::string out;
  // The library drops the leading "▁" of the first word (add_dummy_prefix); with
  // remove_extra_whitespaces, one from each piece while nothing has been written.
  bool leading = m.layout == SpmLayout::translate;
  for (const int32_t id : ids) {
    if (id < 0 || id >= m.vocab)
      throw std::out_of_range(fmt::format("SpmTokenizer::decode: id {} outside [0, {})", id, m.vocab));
    const auto i = static_cast<size_t>(id);
    std::string_view t = m.text[i];
    if (leading && m.kind[i] == Impl::Kind::normal && !t.empty() && t.front() == ' ') t.remove_prefix(1);
    out += t;
    if (!out.empty()) leading = false;
  }
  return out;
}

std::string SpmTokenizer::label(int32_t id) const {
  const Impl& m = *impl_;
  if (id < 0 || id >= m.vocab)
    throw std::out_of_range(fmt::format("SpmTokenizer::label: id {} outside [0, {})", id, m.vocab));
  const auto i = static_cast<size_t>(id);
  return printable_label(m.kind[i] == Impl::Kind::byte ? std::string_view(m.text[i])
                                                       : std::string_view(m.piece[i]));
}

}  // namespace tg::nn
