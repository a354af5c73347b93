// UTF-8 validation, shared by the JSON reader, the safetensors loader and the text readers.
#pragma once

#include <cstddef>
#include <string_view>

namespace tg::io {

// Byte offset of the first invalid UTF-8 sequence in s (overlong forms, surrogates and code
// points above U+10FFFF are invalid), or npos when s is valid.
size_t find_invalid_utf8(std::string_view s);
inline bool is_valid_utf8(std::string_view s) {
  return find_invalid_utf8(s) == std::string_view::npos;
}

}  // namespace tg::io
