#include "nn/loss.hpp"

#include <fmt/format.h>

#include <stdexcept>

#include "autograd/functions.hpp"

namespace tg::nn {

Tensor label_smoothed_cross_entropy(const Tensor& logits, std::span<const int32_t> labels, float eps,
                                    int32_t pad) {
  if (logits.dim() != 2 || logits.size(0) != static_cast<int64_t>(labels.size()))
    throw std::invalid_argument(fmt::format("label_smoothed_cross_entropy: logits {} do not match {} labels",
                                            shape_str(logits.shape()), labels.size()));
  return cross_entropy(logits, labels, pad, eps);
}

int64_t count_correct(const Tensor& logits, std::span<const int32_t> labels, int64_t& total, int32_t pad) {
  if (logits.dim() != 2 || logits.size(0) != static_cast<int64_t>(labels.size()))
    throw std::invalid_argument(fmt::format("count_correct: logits {} do not match {} labels",
                                            shape_str(logits.shape()), labels.size()));
  const int64_t V = logits.size(1);
  const float* p = logits.data();
  int64_t correct = 0;
  total = 0;
  for (size_t r = 0; r < labels.size(); ++r) {
    if (labels[r] == pad) continue;
    const float* row = p + static_cast<int64_t>(r) * V;
    int64_t best = 0;
    for (int64_t j = 1; j < V; ++j)
      if (row[j] > row[best]) best = j;
    correct += best == labels[r];
    ++total;
  }
  return correct;
}

}  // namespace tg::nn
