// Sequence losses and token-level metrics over logits [N, V] and labels [N].
#pragma once

#include <cstdint>
#include <span>

#include "autograd/tensor.hpp"
#include "nn/transformer.hpp"

namespace tg::nn {

// Mean cross-entropy over the labels that are not `pad`, with label smoothing eps:
//   q = (1 - eps) onehot(label) + eps / V,  loss = mean over non-pad rows of -sum_j q_j log p_j
// (= torch CrossEntropyLoss(ignore_index=pad, label_smoothing=eps)). Returns a scalar tensor.
Tensor label_smoothed_cross_entropy(const Tensor& logits, std::span<const int32_t> labels, float eps = 0.0f,
                                    int32_t pad = kPad);

// How many non-pad rows have argmax(logits) == label; `total` receives the non-pad count.
int64_t count_correct(const Tensor& logits, std::span<const int32_t> labels, int64_t& total,
                      int32_t pad = kPad);

}  // namespace tg::nn
