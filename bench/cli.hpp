// Command-line helpers shared by the bench programs.
#pragma once

#include <fmt/core.h>

#include <exception>
#include <stdexcept>
#include <string>

namespace tg::bench {

// The integer value `v` of option `opt`, at least `min`; anything else throws invalid_argument
// with "<program>: <opt> expects an integer >= <min>, got '<v>'".
inline int parse_int(const std::string& program, const std::string& opt, const std::string& v, int min) {
  size_t used = 0;
  int x = 0;
  try {
    x = std::stoi(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != v.size() || x < min)
    throw std::invalid_argument(
        fmt::format("{}: {} expects an integer >= {}, got '{}'", program, opt, min, v));
  return x;
}

}  // namespace tg::bench
