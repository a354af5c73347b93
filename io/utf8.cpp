#include "io/utf8.hpp"

namespace tg::io {

// Table 3-7 of the Unicode standard: the well-formed byte sequences. Checking the second byte's
// range per lead byte rules out overlong forms (E0 80..9F, F0 80..8F), surrogates (ED A0..BF) and
// code points above U+10FFFF (F4 90..BF, F5..FF).
size_t find_invalid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const unsigned c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    int len = 0;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return i;
    }
    if (i + len > n) return i;
    if (p[i + 1] < lo || p[i + 1] > hi) return i;
    for (int k = 2; k < len; ++k)
      if (p[i + k] < 0x80 || p[i + k] > 0xBF) return i;
    i += len;
  }
  return std::string_view::npos;
}

uint32_t code_point(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  if (s.size() == 1) return p[0];
  uint32_t cp = p[0] & (0xFFu >> (s.size() + 1));
  for (size_t i = 1; i < s.size(); ++i) cp = (cp << 6) | (p[i] & 0x3Fu);
  return cp;
}

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

}  // namespace tg::io
