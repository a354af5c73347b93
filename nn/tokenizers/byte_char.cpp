#include "nn/tokenizers/byte_char.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <set>
#include <stdexcept>

#include "io/json.hpp"
#include "io/text.hpp"
#include "io/utf8.hpp"

namespace tg::nn {

using io::DataError;

namespace {

void check_id(int32_t id, int64_t n, const char* who) {
  if (id < 0 || id >= n) throw std::out_of_range(fmt::format("{}: id {} outside [0, {})", who, id, n));
}

}  // namespace

// ---- byte ---------------------------------------------------------------------------------------

std::vector<int32_t> ByteTokenizer::encode(std::string_view text, UnknownTokens*, const std::string&) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size());
  for (char c : text) ids.push_back(static_cast<unsigned char>(c));
  return ids;
}

std::string ByteTokenizer::decode(std::span<const int32_t> ids) const {
  std::string s;
  s.reserve(ids.size());
  for (int32_t id : ids) {
    check_id(id, 256, "byte tokenizer");
    s += static_cast<char>(id);
  }
  return s;
}

std::string ByteTokenizer::label(int32_t id) const {
  check_id(id, 256, "byte tokenizer");
  return printable_label(std::string(1, static_cast<char>(id)));
}

// ---- char ---------------------------------------------------------------------------------------

CharTokenizer CharTokenizer::from_texts(const std::vector<std::string_view>& texts) {
  std::set<std::string> seen;  // byte order of UTF-8 = code-point order
  for (std::string_view t : texts)
    for (size_t i = 0; i < t.size();) {
      const size_t n = std::min(io::sequence_length(static_cast<unsigned char>(t[i])), t.size() - i);
      seen.emplace(t.substr(i, n));
      i += n;
    }
  return from_symbols(std::vector<std::string>(seen.begin(), seen.end()));
}

CharTokenizer CharTokenizer::from_symbols(std::vector<std::string> symbols) {
  CharTokenizer t;
  if (symbols.empty()) throw DataError("char tokenizer: the vocabulary is empty");
  for (size_t i = 0; i < symbols.size(); ++i) {
    const std::string& s = symbols[i];
    if (s.empty() || !io::is_valid_utf8(s) ||
        io::sequence_length(static_cast<unsigned char>(s[0])) != s.size())
      throw DataError(fmt::format("char tokenizer: entry {} is not one UTF-8 character", i));
    if (i > 0 && !(symbols[i - 1] < s))
      throw DataError(fmt::format("char tokenizer: entry {} is out of order or repeated", i));
    t.index_.emplace(s, static_cast<int32_t>(i));
  }
  t.symbols_ = std::move(symbols);
  return t;
}

CharTokenizer CharTokenizer::load(const io::Metadata& md, const std::string& prefix,
                                  const std::string& path) {
  std::optional<CharTokenizer> t;
  const std::string key = prefix + "vocab";
  io::parse_metadata(
      md, path, key.c_str(), "a char tokenizer keeps its characters there",
      [&](const std::string& v) { t = from_symbols(json::parse(v).get<std::vector<std::string>>()); });
  return std::move(*t);
}

void CharTokenizer::save(io::Metadata& md, const std::string& prefix) const {
  md[prefix + "vocab"] = json::Json(symbols_).dump();
}

std::vector<int32_t> CharTokenizer::encode(std::string_view text, UnknownTokens*,
                                           const std::string& where) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size());
  if (const size_t bad = io::find_invalid_utf8(text); bad != std::string_view::npos)
    throw DataError(fmt::format("{}: invalid UTF-8 at byte offset {}", where, bad));
  for (size_t i = 0; i < text.size();) {
    const size_t n = io::sequence_length(static_cast<unsigned char>(text[i]));
    const std::string ch(text.substr(i, n));
    const auto it = index_.find(ch);
    if (it == index_.end()) {
      // Where: "line L, column C" in a text of several lines, "column C" in one line (a --prompt,
      // a line of lm tokenize's stdin: `where` names that line).
      const auto [line, col] = io::line_column(text, i);
      const std::string at = text.find('\n') == std::string_view::npos
                                 ? fmt::format("column {}", col)
                                 : fmt::format("line {}, column {}", line, col);
      const uint32_t cp = io::code_point(ch);
      const std::string what = cp < 0x20 || cp == 0x7F ? fmt::format("control character U+{:04X}", cp)
                                                       : fmt::format("character '{}' (U+{:04X})", ch, cp);
      throw DataError(
          fmt::format("{}: {}: {} is not in the model's vocabulary (char tokenizer: the {} characters of its "
                      "training text)",
                      where, at, what, symbols_.size()));
    }
    ids.push_back(it->second);
    i += n;
  }
  return ids;
}

const std::string& CharTokenizer::piece(int32_t id) const {
  check_id(id, vocab_size(), "char tokenizer");
  return symbols_[static_cast<size_t>(id)];
}

std::string CharTokenizer::decode(std::span<const int32_t> ids) const {
  std::string s;
  for (int32_t id : ids) s += piece(id);
  return s;
}

int64_t CharTokenizer::byte_count(std::span<const int32_t> ids) const {
  int64_t n = 0;
  for (int32_t id : ids) n += static_cast<int64_t>(piece(id).size());
  return n;
}

std::string CharTokenizer::label(int32_t id) const {
  return printable_label(piece(id));
}

}  // namespace tg::nn
