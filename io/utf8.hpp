// UTF-8 validation, shared by the JSON reader, the safetensors loader and the text readers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <utility>

namespace tg::io {

// Byte offset of the first invalid UTF-8 sequence in s (overlong forms, surrogates and code
// points above U+10FFFF are invalid), or npos when s is valid.
size_t find_invalid_utf8(std::string_view s);
inline bool is_valid_utf8(std::string_view s) {
  return find_invalid_utf8(s) == std::string_view::npos;
}

// Bytes of the UTF-8 sequence that starts with lead byte c (valid text assumed).
inline size_t sequence_length(unsigned char c) {
  return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
}

// The code point of one valid UTF-8 sequence.
uint32_t code_point(std::string_view s);

// Line (1-based) and column (1-based, in code points) of byte offset `at` in text.
std::pair<int64_t, int64_t> line_column(std::string_view text, size_t at);

}  // namespace tg::io
