// Neural-network functions: softmax / log_softmax (with masks), layernorm, embedding, dropout,
// cross-entropy. The row-wise work is done by ops:: kernels, so the SIMD versions swap in here
// without any change to the graph code.
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

#include "autograd/broadcast_offsets.hpp"
#include "autograd/functions.hpp"
#include "autograd/tape.hpp"
#include "ops/kernels.hpp"

namespace tg {

namespace {

// rows x cols view of x, cols = the last axis.
struct Rows {
  int64_t rows = 0, cols = 0;
};
Rows last_axis_rows(const Tensor& x, const char* op) {
  if (x.dim() < 1)
    throw std::invalid_argument(
        fmt::format("{}: needs an input with at least 1 axis, got {}", op, shape_str(x.shape())));
  const int64_t cols = x.shape().back();
  return {cols ? x.numel() / cols : 0, cols};
}

// x + mask, not recorded: the additive mask is a constant.
Tensor add_mask(const Tensor& x, const Tensor& mask, const char* op) {
  if (broadcast_shapes(x.shape(), mask.shape(), op) != x.shape())
    throw std::invalid_argument(fmt::format("{}: mask {} does not broadcast to input {}", op,
                                            shape_str(mask.shape()), shape_str(x.shape())));
  NoGradGuard no_grad;
  return add(x, mask);
}

// A BoolMask broadcast over x [..., cols], cut into kernel calls. The rows of x are split into
// `outer` blocks of `block_rows` consecutive rows such that inside a block the mask either has one
// row per x row (per_row) or one row shared by the whole block (e.g. a key-padding mask
// [B, 1, 1, S] over scores [B, H, T, S]: B blocks of H*T rows sharing a row). Nothing is
// materialised except when the mask broadcasts along the last axis itself.
class MaskBlocks {
 public:
  MaskBlocks(const BoolMask& mask, const Shape& x, const char* op) {
    if (static_cast<int64_t>(mask.data.size()) != numel_of(mask.shape))
      throw std::invalid_argument(
          fmt::format("{}: BoolMask of shape {} has {} values", op, shape_str(mask.shape), mask.data.size()));
    if (mask.shape.size() > x.size() || broadcast_shapes(x, mask.shape, op) != x)
      throw std::invalid_argument(fmt::format("{}: BoolMask {} does not broadcast to input {}", op,
                                              shape_str(mask.shape), shape_str(x)));
    const size_t nd = x.size(), lead = nd - 1;
    cols_ = x.back();
    Shape m(nd - mask.shape.size(), 1);  // mask shape aligned to x
    m.insert(m.end(), mask.shape.begin(), mask.shape.end());
    base_ = mask.data.data();
    if (m.back() != cols_) {  // one value per row, broadcast along the keys: expand it
      expanded_.resize(static_cast<size_t>(numel_of(m) * cols_));
      for (size_t i = 0; i < expanded_.size(); ++i) expanded_[i] = mask.data[i / static_cast<size_t>(cols_)];
      base_ = expanded_.data();
      m.back() = cols_;
    }
    // The innermost run of leading axes where the mask is uniformly full or uniformly broadcast
    // (axes of size 1 in x fit either).
    size_t s = lead;
    Run run = Run::either;
    while (s > 0) {
      const size_t d = s - 1;
      const Run r = x[d] == 1 ? Run::either : (m[d] == 1 ? Run::broadcast : Run::full);
      if (r != Run::either && run != Run::either && r != run) break;
      if (r != Run::either) run = r;
      --s;
    }
    per_row_ = run != Run::broadcast;
    block_rows_ = 1;
    for (size_t d = s; d < lead; ++d) block_rows_ *= x[d];
    // Offset (in bytes of the mask) of each outer block: axes [0, s) of the mask broadcast to x's.
    int64_t unit = cols_;
    for (size_t d = s; d < lead; ++d) unit *= m[d];
    offsets_ = detail::broadcast_offsets(Shape(m.begin(), m.begin() + static_cast<std::ptrdiff_t>(s)),
                                         Shape(x.begin(), x.begin() + static_cast<std::ptrdiff_t>(s)), unit);
  }

  MaskBlocks(const MaskBlocks&) = delete;  // base_ may point into expanded_
  MaskBlocks& operator=(const MaskBlocks&) = delete;

  // Calls f(first_row, rows, kernel_mask) once per block.
  template <class F>
  void for_each_block(F&& f) const {
    for (size_t o = 0; o < offsets_.size(); ++o) {
      ops::SoftmaxMask km;
      km.q_len = per_row_ ? 1 : block_rows_;
      km.key_mask = base_ + offsets_[o];
      f(static_cast<int64_t>(o) * block_rows_, block_rows_, km);
    }
  }
  // The mask row of x row r.
  const uint8_t* row(int64_t r) const {
    const int64_t o = block_rows_ ? r / block_rows_ : 0;
    return base_ + offsets_[static_cast<size_t>(o)] + (per_row_ ? (r % block_rows_) * cols_ : 0);
  }

 private:
  // How the mask meets x along one leading axis: one mask row per x row (full), one mask row for
  // all of them (broadcast), or either (x has size 1 there).
  enum class Run { either, full, broadcast };
  const uint8_t* base_ = nullptr;
  std::vector<uint8_t> expanded_;
  std::vector<int64_t> offsets_;
  int64_t cols_ = 0, block_rows_ = 1;
  bool per_row_ = true;
};

// Records the softmax node: y saved, dx += y * (dy - sum(dy * y)) by the kernel (a first
// contribution is stored, not added to zeros). Masked entries have y = 0 and therefore get no gradient.
void record_softmax(const Tensor& x, Tensor& y, const char* op, Rows r) {
  if (Node* n = Tape::current().record(op, y, {x})) {
    n->backward = [y = y.detach(), r](const Tensor& dy, Grads& g) {
      bool overwrite = false;
      float* dx = g.buffer(0, overwrite);
      ops::softmax_backward(dx, dy.data(), y.data(), r.rows, r.cols, overwrite);
    };
  }
}

// Records the log_softmax node: dx = dy - exp(y) * sum(dy). Entries with y = -inf (masked, or
// -inf inputs) are constants: their dy is dropped, so they get zero gradient and do not enter
// the sum (PyTorch would pass dy through there; the difference only shows at -inf entries).
void record_log_softmax(const Tensor& x, Tensor& y, const char* op, Rows r) {
  if (Node* n = Tape::current().record(op, y, {x})) {
    n->backward = [y = y.detach(), r](const Tensor& dy, Grads& g) {
      const float* py = y.data();
      const float ninf = -std::numeric_limits<float>::infinity();
      bool any_masked = false;
      const int64_t n = y.numel();
      for (int64_t i = 0; i < n && !any_masked; ++i) any_masked = py[i] == ninf;
      if (!any_masked) {
        ops::log_softmax_backward(g.buffer(0), dy.data(), py, r.rows, r.cols);
        return;
      }
      Tensor kept = dy.clone();
      float* pk = kept.data();
      for (int64_t i = 0; i < n; ++i)
        if (py[i] == ninf) pk[i] = 0.0f;
      ops::log_softmax_backward(g.buffer(0), kept.data(), py, r.rows, r.cols);
    };
  }
}

}  // namespace

// ---- softmax and log_softmax ---------------------------------------------------------------------
// softmax
// forward: y_k = exp(x_k - max x) / sum_j exp(x_j - max x) over the last axis; with an additive
//          mask m, softmax(x + m) (m not differentiated; a row of all -inf gives NaN, as PyTorch);
//          with a BoolMask, masked entries are excluded and get exactly 0 (an all-masked row is 0)
// saves:   y
// grad:    dx = y * (dy - sum(dy * y))
//
// log_softmax
// forward: y = x - logsumexp(x) over the last axis; with an additive mask, log_softmax(x + m);
//          with a BoolMask, masked entries are -inf (an all-masked row is NaN, as PyTorch)
// saves:   y
// grad:    dx = dy - exp(y) * sum(dy), with dy taken as 0 where y = -inf
namespace {

enum class Normalize { softmax, log_softmax };

// The one body of the six overloads below: at most one of `additive` and `mask` is given.
Tensor softmax_family(const Tensor& x, Normalize kind, const Tensor* additive, const BoolMask* mask) {
  const bool log = kind == Normalize::log_softmax;
  const char* op = log ? "log_softmax" : "softmax";
  const Rows r = last_axis_rows(x, op);
  Tensor input = additive ? add_mask(x, *additive, op) : x;
  Tensor y = Tensor::empty(x.shape());
  if (mask && !log) {  // the softmax kernel takes the mask itself, block by block
    const MaskBlocks blocks(*mask, x.shape(), op);
    blocks.for_each_block([&](int64_t row0, int64_t rows, const ops::SoftmaxMask& km) {
      ops::softmax_forward(y.data() + row0 * r.cols, x.data() + row0 * r.cols, rows, r.cols, km);
    });
  } else if (mask) {  // the log_softmax kernel has no masks: masked inputs become -inf, which it maps to -inf
    const MaskBlocks blocks(*mask, x.shape(), op);
    input = x.clone();
    const float ninf = -std::numeric_limits<float>::infinity();
    for (int64_t i = 0; i < r.rows; ++i) {
      const uint8_t* mrow = blocks.row(i);
      for (int64_t k = 0; k < r.cols; ++k)
        if (mrow[k]) input.data()[i * r.cols + k] = ninf;
    }
    ops::log_softmax_forward(y.data(), input.data(), r.rows, r.cols);
  } else if (log) {
    ops::log_softmax_forward(y.data(), input.data(), r.rows, r.cols);
  } else {
    ops::softmax_forward(y.data(), input.data(), r.rows, r.cols);
  }
  if (log)
    record_log_softmax(x, y, op, r);
  else
    record_softmax(x, y, op, r);
  return y;
}

}  // namespace

Tensor softmax(const Tensor& x) {
  return softmax_family(x, Normalize::softmax, nullptr, nullptr);
}
Tensor softmax(const Tensor& x, const Tensor& additive_mask) {
  return softmax_family(x, Normalize::softmax, &additive_mask, nullptr);
}
Tensor softmax(const Tensor& x, const BoolMask& mask) {
  return softmax_family(x, Normalize::softmax, nullptr, &mask);
}
Tensor log_softmax(const Tensor& x) {
  return softmax_family(x, Normalize::log_softmax, nullptr, nullptr);
}
Tensor log_softmax(const Tensor& x, const Tensor& additive_mask) {
  return softmax_family(x, Normalize::log_softmax, &additive_mask, nullptr);
}
Tensor log_softmax(const Tensor& x, const BoolMask& mask) {
  return softmax_family(x, Normalize::log_softmax, nullptr, &mask);
}

// ---- layernorm -------------------------------------------------------------------------------
// forward: xhat = (x - mean) * rstd, rstd = 1 / sqrt(var + eps) (biased variance, last axis);
//          y = xhat * weight + bias
// saves:   x, weight, mean [rows], rstd [rows]
// grads:   with g = weight * dy:  dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
//          dweight = sum_rows dy * xhat;  dbias = sum_rows dy
Tensor layernorm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps) {
  const Rows r = last_axis_rows(x, "layernorm");
  for (const Tensor* p : {&weight, &bias})
    if (p->defined() && p->shape() != Shape{r.cols})
      throw std::invalid_argument(fmt::format("layernorm: {} {} does not match input {} (expected [{}])",
                                              p == &weight ? "weight" : "bias", shape_str(p->shape()),
                                              shape_str(x.shape()), r.cols));
  Tensor y = Tensor::empty(x.shape());
  Tensor mean = Tensor::empty({r.rows}), rstd = Tensor::empty({r.rows});
  const float* w = weight.defined() ? weight.data() : nullptr;
  ops::layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w,
                         bias.defined() ? bias.data() : nullptr, r.rows, r.cols, eps);
  if (Node* n = Tape::current().record("layernorm", y, {x, weight, bias})) {
    n->backward = [x = x.detach(), weight = weight.defined() ? weight.detach() : Tensor(), mean, rstd, r](
                      const Tensor& dy, Grads& g) {
      bool overwrite = false;  // dx: a first contribution is stored, not added to zeros
      float* dx = g.needs(0) ? g.buffer(0, overwrite) : nullptr;
      ops::layernorm_backward(dx, g.needs(1) ? g.buffer(1) : nullptr, g.needs(2) ? g.buffer(2) : nullptr,
                              dy.data(),
                              {.inp = x.data(),
                               .weight = weight.defined() ? weight.data() : nullptr,
                               .mean = mean.data(),
                               .rstd = rstd.data()},
                              r.rows, r.cols, overwrite);
    };
  }
  return y;
}

// ---- embedding -------------------------------------------------------------------------------
namespace {
// Threads share the rows (forward) or the columns (backward) from this many values in all.
constexpr int64_t kEmbeddingThreadMinValues = int64_t{1} << 16;
// Backward's columns go to threads in blocks of this many floats (64 bytes: one cache line when
// the rows are aligned, so no two threads write the same line of a row).
constexpr int64_t kEmbeddingColumnBlock = 16;
}  // namespace

// forward: y[p, :] = weight[ids[p], :]   (a gather; y has shape ids_shape + [d])
// saves:   ids
// grad:    dweight[ids[p], :] += dy[p, :]   (a scatter-add: repeated ids sum)
Tensor embedding(const Tensor& weight, std::span<const int32_t> ids, const Shape& ids_shape) {
  if (weight.dim() != 2)
    throw std::invalid_argument(
        fmt::format("embedding: weight must be [V, d], got {}", shape_str(weight.shape())));
  if (numel_of(ids_shape) != static_cast<int64_t>(ids.size()))
    throw std::invalid_argument(fmt::format("embedding: ids shape {} needs {} ids, got {}",
                                            shape_str(ids_shape), numel_of(ids_shape), ids.size()));
  const int64_t V = weight.shape()[0], d = weight.shape()[1];
  for (size_t p = 0; p < ids.size(); ++p)
    if (ids[p] < 0 || ids[p] >= V)
      throw std::out_of_range(
          fmt::format("embedding: id {} at position {} out of range [0, {}) for weight {}", ids[p], p, V,
                      shape_str(weight.shape())));
  Shape out_shape = ids_shape;
  out_shape.push_back(d);
  Tensor y = Tensor::empty(out_shape);
  const auto rows = static_cast<int64_t>(ids.size());
  const float* const pw = weight.data();
  float* const py = y.data();
  const int32_t* const pid = ids.data();
  // Threads share the rows when there are enough values to copy (a many-core CPU: one thread's
  // copies do not fill its memory bandwidth); each row is written by one thread.
  const bool threaded = rows * d >= kEmbeddingThreadMinValues && ops::num_threads() > 1 && !omp_in_parallel();
#pragma omp parallel for schedule(static) if (threaded)
  for (int64_t p = 0; p < rows; ++p) std::copy_n(pw + pid[p] * d, d, py + p * d);
  if (Node* n = Tape::current().record("embedding", y, {weight})) {
    n->backward = [saved = std::vector<int32_t>(ids.begin(), ids.end()), d](const Tensor& dy, Grads& g) {
      float* const dw = g.buffer(0);
      const float* const pdy = dy.data();
      const auto rows = static_cast<int64_t>(saved.size());
      // dw[ids[p], c0:c1] += dy[p, c0:c1] for every p in order, thread t taking the column blocks
      // [t * blocks / nt, (t + 1) * blocks / nt): repeated ids meet only in the same columns, so no
      // two threads write the same value, and each value sums its rows in the one order whatever
      // the thread count. (A plain loop, not ops::axpy: rows of a few hundred values, where a
      // kernel call per row cost as much as the adds.)
      const int64_t blocks = (d + kEmbeddingColumnBlock - 1) / kEmbeddingColumnBlock;
      const int threads = static_cast<int>(std::min<int64_t>(ops::num_threads(), blocks));
      const bool threaded = rows * d >= kEmbeddingThreadMinValues && threads > 1 && !omp_in_parallel();
#pragma omp parallel num_threads(threads) if (threaded)
      {
        const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
        const int64_t c0 = std::min(d, t * blocks / nt * kEmbeddingColumnBlock);
        const int64_t c1 = std::min(d, (t + 1) * blocks / nt * kEmbeddingColumnBlock);
        for (int64_t p = 0; p < rows && c1 > c0; ++p) {
          float* const dst = dw + saved[static_cast<size_t>(p)] * d;
          const float* const src = pdy + p * d;
          for (int64_t c = c0; c < c1; ++c) dst[c] += src[c];
        }
      }
    };
  }
  return y;
}

// ---- dropout ---------------------------------------------------------------------------------
// forward: y = x * mask, mask_i = 0 with probability p, else 1 / (1 - p)   (inverted dropout;
//          p == 1 zeroes everything). Returns x itself when !training or p == 0.
// saves:   mask (bytes; ops::dropout_bits of one draw from gen and the index: reproducible from the seed)
// grad:    dx = dy * mask
namespace {
// dropout (relu = false) and dropout(relu(x)) (relu = true): the same kernel, one byte mask.
Tensor dropout_impl(const Tensor& x, float p, Generator& gen, bool relu, const char* op) {
  const float keep_scale = ops::dropout_scale(p);
  // One draw from gen seeds a counter-based hash (ops::dropout_bits): element i is dropped when
  // its 24-bit value is below p * 2^24, so the run is reproducible from gen's seed, and threads and
  // archs agree. The mask is kept as one byte per element (in a pooled tensor's storage).
  const uint32_t drop_below = ops::dropout_threshold(p);
  const uint64_t seed = gen.next_u64();
  const int64_t n = x.numel();
  Tensor mask = Tensor::empty({(n + 3) / 4});
  Tensor y = Tensor::empty(x.shape());
  ops::dropout_forward(y.data(), reinterpret_cast<uint8_t*>(mask.data()), x.data(), n, seed, drop_below,
                       keep_scale, relu);
  if (Node* node = Tape::current().record(op, y, {x})) {
    node->backward = [mask, keep_scale, n](const Tensor& dy, Grads& g) {
      bool overwrite = false;
      float* dx = g.buffer(0, overwrite);
      ops::dropout_backward(dx, dy.data(), reinterpret_cast<const uint8_t*>(mask.data()), n, keep_scale,
                            overwrite);
    };
  }
  return y;
}

void check_p(const Tensor& x, float p, const char* op) {
  if (!(p >= 0.0f && p <= 1.0f))
    throw std::invalid_argument(
        fmt::format("{}: probability {} not in [0, 1] (input {})", op, p, shape_str(x.shape())));
}
}  // namespace

Tensor dropout(const Tensor& x, float p, bool training, Generator& gen) {
  check_p(x, p, "dropout");
  if (!training || p == 0.0f) return x;
  return dropout_impl(x, p, gen, false, "dropout");
}

// ---- residual dropout ----------------------------------------------------------------------------
// forward: out = x + y * mask, mask as in dropout(y) (the same seed drawn from gen, the same hash)
// saves:   the seed only: the mask is regenerated in backward (ops::dropout_forward on dy)
// grads:   dx = dout;  dy = dout * mask
Tensor dropout_add(const Tensor& x, const Tensor& y, float p, bool training, Generator& gen) {
  check_p(y, p, "dropout_add");
  if (x.shape() != y.shape())
    throw std::invalid_argument(fmt::format("dropout_add: x {} and y {} must have the same shape",
                                            shape_str(x.shape()), shape_str(y.shape())));
  if (!training || p == 0.0f) return add(x, y);
  const float keep_scale = ops::dropout_scale(p);
  const uint32_t drop_below = ops::dropout_threshold(p);
  const uint64_t seed = gen.next_u64();
  const int64_t n = y.numel();
  Tensor out = Tensor::empty(y.shape());
  // One pass in cache-sized chunks: out = dropout(y) then out += x while the chunk is in L1.
  // Threads take contiguous ranges; the kernels inside run on the calling thread.
  constexpr int64_t kChunk = 4096;
  float* const po = out.data();
  const float *const px = x.data(), *const py = y.data();
  auto run = [&](int64_t lo, int64_t hi) {
    for (int64_t c = lo; c < hi; c += kChunk) {
      const int64_t len = std::min(kChunk, hi - c);
      ops::dropout_forward(po + c, nullptr, py + c, len, seed, drop_below, keep_scale, false, c);
      ops::axpy(po + c, px + c, 1.0f, len);
    }
  };
  if (n >= 8 * kChunk && ops::num_threads() > 1 && !omp_in_parallel()) {
#pragma omp parallel
    {
      const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
      const int64_t per = (n + nt - 1) / nt;
      run(std::min(n, t * per), std::min(n, (t + 1) * per));
    }
  } else {
    run(0, n);
  }
  if (Node* node = Tape::current().record("dropout_add", out, {x, y})) {
    node->backward = [seed, drop_below, keep_scale, n](const Tensor& dout, Grads& g) {
      if (g.needs(0)) g.accumulate(0, dout);
      if (g.needs(1)) {
        bool overwrite = false;
        float* dy = g.buffer(1, overwrite);
        if (overwrite) {
          ops::dropout_forward(dy, nullptr, dout.data(), n, seed, drop_below, keep_scale, false, 0);
        } else {
          Tensor tmp = Tensor::empty(dout.shape());
          ops::dropout_forward(tmp.data(), nullptr, dout.data(), n, seed, drop_below, keep_scale, false, 0);
          ops::axpy(dy, tmp.data(), 1.0f, n);
        }
      }
    };
  }
  return out;
}

// forward: y = relu(x) * mask, mask as in dropout (the same draws from gen as dropout(relu(x)))
// saves:   one byte per element: keep_i && x_i > 0
// grad:    dx = dy * mask * [x > 0]  (relu'(0) = 0, as relu)
// With !training or p == 0 it is relu(x).
Tensor relu_dropout(const Tensor& x, float p, bool training, Generator& gen) {
  check_p(x, p, "relu_dropout");
  if (!training || p == 0.0f) return relu(x);
  return dropout_impl(x, p, gen, true, "relu_dropout");
}

// ---- cross-entropy ---------------------------------------------------------------------------
// forward: loss_r = -sum_j q_rj log softmax(logits_r)_j, q_r = (1 - eps) onehot(t_r) + eps / V;
//          L = sum_r loss_r / n over the n rows whose target != ignore_index.
//          If every row is ignored, L = 0 and the gradient is 0 (PyTorch returns NaN there; 0 keeps
//          a batch of pure padding from poisoning the parameters).
// saves:   logits, targets, n
// grad:    dlogits_r = dL / n * (softmax(logits_r) - q_r) for kept rows, 0 for ignored rows
Tensor cross_entropy(const Tensor& logits, std::span<const int32_t> targets, int32_t ignore_index,
                     float label_smoothing) {
  if (logits.dim() != 2)
    throw std::invalid_argument(
        fmt::format("cross_entropy: logits must be [N, V], got {}", shape_str(logits.shape())));
  ops::CrossEntropy ce;
  ce.rows = logits.shape()[0], ce.V = logits.shape()[1];
  ce.ignore_index = ignore_index, ce.label_smoothing = label_smoothing;
  if (static_cast<int64_t>(targets.size()) != ce.rows)
    throw std::invalid_argument(
        fmt::format("cross_entropy: {} targets for logits {}", targets.size(), shape_str(logits.shape())));
  if (!(label_smoothing >= 0.0f && label_smoothing <= 1.0f))
    throw std::invalid_argument(
        fmt::format("cross_entropy: label_smoothing {} not in [0, 1]", label_smoothing));
  int64_t kept = 0;
  for (size_t r = 0; r < targets.size(); ++r) {
    if (targets[r] == ignore_index) continue;
    if (targets[r] < 0 || targets[r] >= ce.V)
      throw std::out_of_range(
          fmt::format("cross_entropy: target {} at row {} out of range [0, {}) for logits {}", targets[r], r,
                      ce.V, shape_str(logits.shape())));
    ++kept;
  }
  Tensor losses = Tensor::empty({ce.rows});
  ops::cross_entropy_forward(losses.data(), logits.data(), targets.data(), ce);
  double total = 0.0;
  for (int64_t r = 0; r < ce.rows; ++r) total += losses.data()[r];
  Tensor y = Tensor::scalar(kept ? static_cast<float>(total / static_cast<double>(kept)) : 0.0f);
  if (Node* n = Tape::current().record("cross_entropy", y, {logits})) {
    n->backward = [logits = logits.detach(), saved = std::vector<int32_t>(targets.begin(), targets.end()), ce,
                   kept](const Tensor& dy, Grads& g) {
      float* dlogits = g.buffer(0);  // allocated (as zeros) even when every row is ignored
      if (kept == 0) return;
      Tensor dlosses = Tensor::full({ce.rows}, dy.item() / static_cast<float>(kept));
      ops::cross_entropy_backward(dlogits, dlosses.data(), logits.data(), saved.data(), ce);
    };
  }
  return y;
}

}  // namespace tg
