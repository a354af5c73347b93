#include "nn/gpt_text.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <stdexcept>

#include "autograd/tape.hpp"
#include "io/file.hpp"
#include "io/utf8.hpp"

namespace tg::nn {

using io::DataError;

namespace {

// Bytes of the UTF-8 sequence that starts with lead byte c (valid text assumed).
size_t sequence_length(unsigned char c) {
  return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
}

uint32_t code_point(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  if (s.size() == 1) return p[0];
  uint32_t cp = p[0] & (0xFFu >> (s.size() + 1));
  for (size_t i = 1; i < s.size(); ++i) cp = (cp << 6) | (p[i] & 0x3Fu);
  return cp;
}

// Line (1-based) and column (1-based, in code points) of byte offset `at` in text.
std::pair<int64_t, int64_t> line_column(std::string_view text, size_t at) {
  int64_t line = 1, column = 1;
  for (size_t i = 0; i < at; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == '\n') {
      ++line;
      column = 1;
    } else if ((c & 0xC0) != 0x80) {
      ++column;
    }
  }
  return {line, column};
}

}  // namespace

void check_text(std::string_view text, const std::string& name) {
  if (text.empty()) throw DataError(fmt::format("{}: the file is empty (a language model needs text)", name));
  if (const size_t nul = text.find('\0'); nul != std::string_view::npos) {
    throw DataError(fmt::format("{}:{}: a NUL byte at byte offset {}: this is not a text file", name,
                                line_column(text, nul).first, nul));
  }
  if (const size_t bad = io::find_invalid_utf8(text); bad != std::string_view::npos) {
    throw DataError(
        fmt::format("{}:{}: invalid UTF-8 (byte 0x{:02X} at byte offset {}): this is not UTF-8 text", name,
                    line_column(text, bad).first, static_cast<unsigned char>(text[bad]), bad));
  }
}

std::string read_text_file(const std::string& path) {
  std::string text;
  try {
    text = io::read_file(path);
  } catch (const std::runtime_error& e) {
    throw DataError(e.what());
  }
  check_text(text, path);
  return text;
}

LmTokenizerKind parse_lm_tokenizer(const std::string& s) {
  if (s == "byte") return LmTokenizerKind::byte;
  if (s == "char") return LmTokenizerKind::character;
  throw std::invalid_argument(fmt::format("tokenizer: expected 'byte' or 'char', got '{}'", s));
}

LmTokenizer LmTokenizer::bytes() {
  return LmTokenizer();
}

LmTokenizer LmTokenizer::characters(const std::vector<std::string_view>& texts) {
  std::set<std::string> seen;  // byte order of UTF-8 = code-point order
  for (std::string_view t : texts)
    for (size_t i = 0; i < t.size();) {
      const size_t n = std::min(sequence_length(static_cast<unsigned char>(t[i])), t.size() - i);
      seen.emplace(t.substr(i, n));
      i += n;
    }
  return from_symbols(std::vector<std::string>(seen.begin(), seen.end()));
}

LmTokenizer LmTokenizer::from_symbols(std::vector<std::string> symbols) {
  LmTokenizer t;
  t.kind_ = LmTokenizerKind::character;
  if (symbols.empty()) throw DataError("char tokenizer: the vocabulary is empty");
  for (size_t i = 0; i < symbols.size(); ++i) {
    const std::string& s = symbols[i];
    if (s.empty() || !io::is_valid_utf8(s) || sequence_length(static_cast<unsigned char>(s[0])) != s.size())
      throw DataError(fmt::format("char tokenizer: entry {} is not one UTF-8 character", i));
    if (i > 0 && !(symbols[i - 1] < s))
      throw DataError(fmt::format("char tokenizer: entry {} is out of order or repeated", i));
    t.index_.emplace(s, static_cast<int32_t>(i));
  }
  t.symbols_ = std::move(symbols);
  return t;
}

int64_t LmTokenizer::vocab_size() const {
  return kind_ == LmTokenizerKind::byte ? 256 : static_cast<int64_t>(symbols_.size());
}

std::vector<int32_t> LmTokenizer::encode(std::string_view text, const std::string& where) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size());
  if (kind_ == LmTokenizerKind::byte) {
    for (char c : text) ids.push_back(static_cast<unsigned char>(c));
    return ids;
  }
  if (const size_t bad = io::find_invalid_utf8(text); bad != std::string_view::npos)
    throw DataError(fmt::format("{}: invalid UTF-8 at byte offset {}", where, bad));
  for (size_t i = 0; i < text.size();) {
    const size_t n = sequence_length(static_cast<unsigned char>(text[i]));
    const std::string ch(text.substr(i, n));
    const auto it = index_.find(ch);
    if (it == index_.end()) {
      const auto [line, col] = line_column(text, i);
      const uint32_t cp = code_point(ch);
      throw DataError(fmt::format(
          "{}: line {}, column {}: character {} (U+{:04X}) is not in the model's vocabulary (char tokenizer: "
          "the {} characters of its training text)",
          where, line, col, cp < 0x20 || cp == 0x7F ? std::string("(control)") : "'" + ch + "'", cp,
          symbols_.size()));
    }
    ids.push_back(it->second);
    i += n;
  }
  return ids;
}

std::string LmTokenizer::piece(int32_t id) const {
  if (id < 0 || id >= vocab_size())
    throw std::out_of_range(fmt::format("LmTokenizer: id {} outside [0, {})", id, vocab_size()));
  return kind_ == LmTokenizerKind::byte ? std::string(1, static_cast<char>(id))
                                        : symbols_[static_cast<size_t>(id)];
}

std::string LmTokenizer::decode(std::span<const int32_t> ids) const {
  std::string s;
  for (int32_t id : ids) s += piece(id);
  return s;
}

int64_t LmTokenizer::byte_count(std::span<const int32_t> ids) const {
  if (kind_ == LmTokenizerKind::byte) return static_cast<int64_t>(ids.size());
  int64_t n = 0;
  for (int32_t id : ids) n += static_cast<int64_t>(piece(id).size());
  return n;
}

std::string LmTokenizer::label(int32_t id) const {
  const std::string p = piece(id);
  const auto c = static_cast<unsigned char>(p[0]);
  if (p == " ") return "\u2423";  // OPEN BOX
  if (p == "\n") return "\\n";
  if (p == "\t") return "\\t";
  if (c < 0x20 || c == 0x7F || (p.size() == 1 && c >= 0x80)) return fmt::format("\\x{:02X}", c);
  return p;
}

Windows random_windows(std::span<const int32_t> ids, int64_t batch, int64_t len, Generator& gen) {
  const auto n = static_cast<int64_t>(ids.size());
  if (len <= 0 || batch <= 0 || n < len + 1)
    throw std::invalid_argument(
        fmt::format("random_windows: {} tokens cannot give windows of {} + 1 tokens", n, len));
  Windows w;
  w.batch = batch;
  w.len = len;
  w.x.resize(static_cast<size_t>(batch * len));
  w.y.resize(w.x.size());
  for (int64_t r = 0; r < batch; ++r) {
    const auto o = static_cast<int64_t>(gen.below(static_cast<uint64_t>(n - len)));
    std::copy_n(ids.begin() + o, len, w.x.begin() + r * len);
    std::copy_n(ids.begin() + o + 1, len, w.y.begin() + r * len);
  }
  return w;
}

int64_t eval_chunk_count(int64_t n, int64_t len) {
  return n < 2 ? 0 : (n - 1 + len - 1) / len;
}

LossSum lm_loss_sum(GPT& model, const LmTokenizer& tok, std::span<const int32_t> ids, int64_t len,
                    int64_t batch_size, int64_t first, int64_t last) {
  const auto n = static_cast<int64_t>(ids.size());
  last = std::min(last, eval_chunk_count(n, len));
  const bool was_training = model.is_training();
  model.eval();
  NoGradGuard no_grad;
  LossSum s;
  std::vector<int32_t> x, y;
  for (int64_t k = first; k < last;) {
    // Full chunks batch together; the shorter last chunk of the text runs alone.
    const int64_t l = std::min(len, n - 1 - k * len);
    int64_t rows = 0;
    x.clear();
    y.clear();
    while (k < last && rows < batch_size && std::min(len, n - 1 - k * len) == l) {
      x.insert(x.end(), ids.begin() + k * len, ids.begin() + k * len + l);
      y.insert(y.end(), ids.begin() + k * len + 1, ids.begin() + k * len + l + 1);
      ++rows;
      ++k;
    }
    s.nats += static_cast<double>(model.loss(x, y, rows, l).item()) * static_cast<double>(rows * l);
    s.count += rows * l;
    s.bytes += tok.byte_count(y);
  }
  model.train(was_training);
  return s;
}

}  // namespace tg::nn
