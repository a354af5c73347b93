#include "io/base64.hpp"

#include <fmt/format.h>

#include <array>
#include <cstdint>
#include <stdexcept>

namespace tg::io {

namespace {

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

// The value of each byte as a base64 digit, -1 where it is none.
constexpr std::array<int8_t, 256> kValue = [] {
  std::array<int8_t, 256> v{};
  v.fill(-1);
  for (int i = 0; i < 64; ++i) v[static_cast<unsigned char>(kAlphabet[i])] = static_cast<int8_t>(i);
  return v;
}();

}  // namespace

std::string base64_encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const uint32_t g = static_cast<uint32_t>(static_cast<unsigned char>(bytes[i])) << 16 |
                       static_cast<uint32_t>(static_cast<unsigned char>(bytes[i + 1])) << 8 |
                       static_cast<unsigned char>(bytes[i + 2]);
    for (int s = 18; s >= 0; s -= 6) out += kAlphabet[(g >> s) & 63];
  }
  const size_t rest = bytes.size() - i;
  if (rest > 0) {
    uint32_t g = static_cast<uint32_t>(static_cast<unsigned char>(bytes[i])) << 16;
    if (rest == 2) g |= static_cast<uint32_t>(static_cast<unsigned char>(bytes[i + 1])) << 8;
    out += kAlphabet[(g >> 18) & 63];
    out += kAlphabet[(g >> 12) & 63];
    out += rest == 2 ? kAlphabet[(g >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

std::string base64_decode(std::string_view text) {
  if (text.size() % 4 != 0)
    throw std::invalid_argument(fmt::format("base64: length {} is not a multiple of 4", text.size()));
  size_t pad = 0;
  if (!text.empty() && text.back() == '=') pad = text[text.size() - 2] == '=' ? 2 : 1;
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    const bool last = i + 4 == text.size();
    const size_t digits = last ? 4 - pad : 4;
    uint32_t g = 0;
    for (size_t k = 0; k < 4; ++k) {
      int v = 0;
      if (k < digits) {
        v = kValue[static_cast<unsigned char>(text[i + k])];
        if (v < 0)
          throw std::invalid_argument(fmt::format(
              "base64: offset {}: {} is not a base64 digit", i + k,
              text[i + k] == '=' ? "'=' before the end"
                                 : fmt::format("byte {:#04x}", static_cast<unsigned char>(text[i + k]))));
      }
      g = g << 6 | static_cast<uint32_t>(v);
    }
    out += static_cast<char>(g >> 16);
    if (digits >= 3) out += static_cast<char>(g >> 8 & 0xFF);
    if (digits == 4) out += static_cast<char>(g & 0xFF);
    if ((digits == 2 && (g & 0xFFFF) != 0) || (digits == 3 && (g & 0xFF) != 0))
      throw std::invalid_argument("base64: the padded last group has non-zero bits left over");
  }
  return out;
}

}  // namespace tg::io
