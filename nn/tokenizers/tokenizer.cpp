#include "nn/tokenizers/tokenizer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <string_view>

#include "io/text.hpp"

namespace tg::nn {

void UnknownTokens::add(std::string_view piece) {
  ++count;
  if (first.size() < kListed && std::find(first.begin(), first.end(), piece) == first.end())
    first.emplace_back(piece);
}

void UnknownTokens::merge(const UnknownTokens& other) {
  count += other.count;
  for (const std::string& p : other.first)
    if (first.size() < kListed && std::find(first.begin(), first.end(), p) == first.end()) first.push_back(p);
}

std::vector<std::vector<int32_t>> Tokenizer::encode_batch(std::span<const std::string_view> texts,
                                                          UnknownTokens* unknown) const {
  std::vector<std::vector<int32_t>> out;
  out.reserve(texts.size());
  for (std::string_view t : texts) out.push_back(encode(t, unknown));
  return out;
}

int64_t Tokenizer::byte_count(std::span<const int32_t> ids) const {
  return static_cast<int64_t>(decode(ids).size());
}

void report_unknown(const UnknownTokens& unknown, const std::string& where, bool strict) {
  if (unknown.count == 0) return;
  std::string listed;
  // Quoted and escaped ({:?}): a control byte of the input is shown, not sent to the terminal.
  for (const std::string& p : unknown.first)
    listed += fmt::format("{}{:?}", listed.empty() ? "" : ", ", std::string_view(p));
  const bool more = unknown.count > static_cast<int64_t>(unknown.first.size());
  const std::string text =
      fmt::format("{}: {} token{} became <unk> (not in the model's vocabulary): {}{}", where, unknown.count,
                  unknown.count == 1 ? "" : "s", listed, more ? ", ..." : "");
  if (strict) throw io::DataError(text + " (--strict)");
  fmt::print(stderr, "warning: {}\n", text);
}

std::string printable_label(std::string_view p) {
  if (p.empty()) return "\u2205";  // EMPTY SET: an empty piece
  const auto c = static_cast<unsigned char>(p[0]);
  if (p == " " || p == "\u2581") return "\u2423";  // OPEN BOX for a space, and SentencePiece's mark alone
  if (p == "\n") return "\\n";
  if (p == "\t") return "\\t";
  if (c < 0x20 || c == 0x7F || (p.size() == 1 && c >= 0x80)) return fmt::format("\\x{:02X}", c);
  std::string s(p);
  // SentencePiece marks a word start with U+2581; the label shows it as the open box too.
  for (size_t at = s.find("\u2581"); at != std::string::npos; at = s.find("\u2581", at + 3))
    s.replace(at, 3, "\u2423");
  return s;
}

}  // namespace tg::nn
