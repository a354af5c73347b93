#include "io/terminal.hpp"

#include <fmt/format.h>

#include "io/utf8.hpp"

namespace tg::io {

namespace {

void escape(std::string& out, unsigned char b) {
  out += fmt::format("\\x{:02x}", b);
}

// The length of the UTF-8 sequence that lead byte b starts (0: b cannot start one).
size_t lead_length(unsigned char b) {
  if (b >= 0xC2 && b <= 0xDF) return 2;
  if (b >= 0xE0 && b <= 0xEF) return 3;
  if (b >= 0xF0 && b <= 0xF4) return 4;
  return 0;
}

}  // namespace

std::string TerminalText::feed(std::string_view bytes) {
  if (!active_) return std::string(bytes);
  held_.append(bytes);
  std::string out;
  size_t i = 0;
  const size_t n = held_.size();
  while (i < n) {
    const auto b = static_cast<unsigned char>(held_[i]);
    if (b < 0x80) {
      if (b == '\r') {
        if (i + 1 == n) break;  // a line end "\r\n" may be split between two pieces
        if (held_[i + 1] == '\n') {
          out += "\r\n";
          i += 2;
          continue;
        }
      }
      if ((b < 0x20 && b != '\n' && b != '\t') || b == 0x7F)
        escape(out, b);
      else
        out += static_cast<char>(b);
      ++i;
      continue;
    }
    const size_t len = lead_length(b);
    size_t have = 1;
    while (have < len && i + have < n && (static_cast<unsigned char>(held_[i + have]) & 0xC0) == 0x80) ++have;
    if (len > 0 && have < len && i + have == n) break;  // complete so far: wait for the rest
    const std::string_view seq(held_.data() + i, len);
    const bool c1 = b == 0xC2 && len == 2 && have == 2 && static_cast<unsigned char>(held_[i + 1]) < 0xA0;
    if (len == 0 || have < len || !is_valid_utf8(seq) || c1) {
      escape(out, b);  // not a character: this byte alone; the next ones are looked at afresh
      if (c1) escape(out, static_cast<unsigned char>(held_[i + 1])), ++i;
      ++i;
      continue;
    }
    out.append(seq);
    i += len;
  }
  held_.erase(0, i);
  return out;
}

std::string TerminalText::finish() {
  std::string out;
  for (char c : held_) escape(out, static_cast<unsigned char>(c));
  held_.clear();
  return out;
}

}  // namespace tg::io
