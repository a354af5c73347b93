// The output layer and its loss as one op over row chunks: linear_cross_entropy. A language model's
// logits [N, V] are the largest tensor of its step at a large vocabulary (GPT-2: 4,096 rows x 50,257
// classes, 823 MB, and as much again for their gradient); here only one chunk of rows of them
// exists at a time. The comment block with the formulas is in autograd/functions.hpp.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "autograd/functions.hpp"
#include "autograd/precision.hpp"
#include "autograd/tape.hpp"
#include "ops/kernels.hpp"

namespace tg {

namespace {

// Rows per chunk when the caller leaves it to the op: about kChunkLogits logits (32 MiB of fp32, their
// gradient then written over them) per chunk, so the chunk stays far below the unchunked [N, V] while its
// three products keep enough rows to run at the GEMM's speed (at least kMinChunkRows: the row
// blocks of the GEMM are 264 rows on AVX-512, and fewer rows leave its threads short of work).
constexpr int64_t kChunkLogits = int64_t{1} << 23;
constexpr int64_t kMinChunkRows = 256;

int64_t rows_per_chunk(int64_t requested, int64_t N, int64_t V) {
  const int64_t r =
      requested > 0 ? requested : std::max(kMinChunkRows, kChunkLogits / std::max<int64_t>(V, 1));
  return std::clamp<int64_t>(r, 1, std::max<int64_t>(N, 1));
}

}  // namespace

Tensor linear_cross_entropy(const Tensor& x, const Tensor& w, const Tensor& bias,
                            std::span<const int32_t> targets, const CrossEntropyOptions& o) {
  if (x.dim() != 2 || w.dim() != 2 || x.size(1) != w.size(1) ||
      (bias.defined() && (bias.dim() != 1 || bias.size(0) != w.size(0))))
    throw std::invalid_argument(fmt::format(
        "linear_cross_entropy: x {} and w {} (bias {}) are not [N, d], [V, d], [V]", shape_str(x.shape()),
        shape_str(w.shape()), bias.defined() ? shape_str(bias.shape()) : "none"));
  const int64_t N = x.size(0), d = x.size(1), V = w.size(0);
  if (static_cast<int64_t>(targets.size()) != N)
    throw std::invalid_argument(
        fmt::format("linear_cross_entropy: {} targets for x {}", targets.size(), shape_str(x.shape())));
  if (!(o.label_smoothing >= 0.0f && o.label_smoothing <= 1.0f))
    throw std::invalid_argument(
        fmt::format("linear_cross_entropy: label_smoothing {} not in [0, 1]", o.label_smoothing));
  int64_t kept = 0;
  for (int64_t r = 0; r < N; ++r) {
    const int32_t t = targets[static_cast<size_t>(r)];
    if (t == o.ignore_index) continue;
    if (t < 0 || t >= V)
      throw std::out_of_range(
          fmt::format("linear_cross_entropy: target {} at row {} out of range [0, {})", t, r, V));
    ++kept;
  }
  const bool wants_grad =
      grad_enabled() && (x.requires_grad() || w.requires_grad() || (bias.defined() && bias.requires_grad()));
  const bool need_dx = wants_grad && x.requires_grad(), need_dw = wants_grad && w.requires_grad();
  const bool need_db = wants_grad && bias.defined() && bias.requires_grad();
  const Precision prec = effective_precision(compute_precision());
  const int64_t chunk = rows_per_chunk(o.chunk_rows, N, V);

  // The gradients for dL = 1 are made here, chunk by chunk, while each chunk's logits exist; backward
  // scales them by the upstream gradient. They are the size of x, w and bias, not of the logits.
  // dw [V, d] is the size of the output layer (GPT-2: 154 MB): the first chunk's product stores it
  // (beta = 0) rather than adding to a zero-filled buffer, a write and a read of it saved.
  Tensor dx = need_dx ? Tensor::empty({N, d}) : Tensor(), dw = need_dw ? Tensor::empty({V, d}) : Tensor();
  bool dw_stored = false;
  Tensor db = need_db ? Tensor::zeros({V}) : Tensor();
  std::vector<float> losses(static_cast<size_t>(N));
  {
    // One chunk's logits, then (with a tape) their gradient in the same buffer; freed at the end.
    Tensor logits = Tensor::empty({std::min(chunk, N), V});
    const float inv_kept = kept ? 1.0f / static_cast<float>(kept) : 0.0f;
    std::vector<float> dlosses(static_cast<size_t>(std::min(chunk, N)), inv_kept);
    for (int64_t r0 = 0; r0 < N; r0 += chunk) {
      const int64_t n = std::min(chunk, N - r0);
      const float* xc = x.data() + r0 * d;
      ops::Gemm g = ops::gemm_desc(n, V, d, false, true);  // logits = x_c w^T + bias
      if (bias.defined()) g.bias = bias.data();
      weight_gemm(prec, logits.data(), xc, w, g);
      const ops::CrossEntropy ce{
          .rows = n, .V = V, .ignore_index = o.ignore_index, .label_smoothing = o.label_smoothing};
      if (!wants_grad || kept == 0) {
        ops::cross_entropy_forward(losses.data() + r0, logits.data(), targets.data() + r0, ce);
        if (need_dx) std::memset(dx.data() + r0 * d, 0, sizeof(float) * static_cast<size_t>(n * d));
        continue;
      }
      // the losses, and over the logits dlogits = (softmax(logits) - q) / kept on kept rows, 0 on
      // ignored ones (one exp per logit: ops::cross_entropy_fused)
      float* const dlogits = logits.data();
      ops::cross_entropy_fused(losses.data() + r0, dlogits, dlosses.data(), targets.data() + r0, ce);
      if (need_dx)  // dx_c = dlogits w
        weight_gemm(prec, dx.data() + r0 * d, dlogits, w, ops::gemm_desc(n, d, V, false, false));
      if (need_dw) {  // dw += dlogits^T x_c (dw = ... for the first chunk)
        gemm(prec, dw.data(), dlogits, xc,
             ops::gemm_desc(V, d, n, true, false, 1.0f, dw_stored ? 1.0f : 0.0f));
        dw_stored = true;
      }
      if (need_db) ops::bias_backward(db.data(), dlogits, n, V);
    }
  }
  if (need_dw && !dw_stored)
    std::memset(dw.data(), 0, sizeof(float) * static_cast<size_t>(V * d));  // no row kept
  double total = 0.0;
  for (float l : losses) total += l;
  Tensor y = Tensor::scalar(kept ? static_cast<float>(total / static_cast<double>(kept)) : 0.0f);
  if (Node* node = Tape::current().record("linear_cross_entropy", y, {x, w, bias})) {
    // The gradients made above go to x, w and bias scaled by dL/dy; where an input has no gradient
    // yet (w of a language model's head: 154 MB for GPT-2) and the graph is not retained, it keeps
    // the buffer made here (Grads::take); otherwise they are copied or added.
    node->backward = [dx, dw, db](const Tensor& dy, Grads& g) mutable {
      const float s = dy.item();
      Tensor* made[3] = {&dx, &dw, &db};
      for (size_t i = 0; i < 3; ++i)
        if (g.needs(i)) g.take(i, *made[i], s);
    };
  }
  return y;
}

}  // namespace tg
