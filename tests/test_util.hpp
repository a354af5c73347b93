// Helpers every test area shares: the message a failing call throws (for tests that check an error
// names the file, tensor, option or shape at fault), and a snapshot of named tensors' values (for
// tests that check a failed step or load changed nothing).
#pragma once

#include <exception>
#include <string>
#include <vector>

#include "autograd/tensor.hpp"

namespace tg::testing {

// The what() of the std::exception fn() throws; "" when it throws none.
std::string error_of(auto&& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// How many times `what` occurs in `text` (overlapping occurrences included).
inline std::size_t count_of(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// The values of each tensor, in order (names and shapes left out): equal snapshots, equal tensors.
inline std::vector<std::vector<float>> values_of(const NamedTensors& ts) {
  std::vector<std::vector<float>> v;
  for (const auto& [name, t] : ts) v.push_back(t.to_vector());
  return v;
}

}  // namespace tg::testing
