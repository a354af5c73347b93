// Differentiable functions. Each is defined in autograd/functions_*.cpp with a comment block first:
// the forward formula, what it saves for backward, and the gradient (vector-Jacobian product) of
// each input. The one-line index of all of them is autograd/OPS.md.
//
// Every function checks its arguments and throws std::invalid_argument / std::out_of_range with a
// message that names the op and the shapes involved, e.g.
// "matmul: inner dimensions differ: [2, 3] @ [4, 5]".
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "autograd/random.hpp"
#include "autograd/tensor.hpp"

namespace tg {

// ---- elementwise, with NumPy broadcasting --------------------------------------------------
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor neg(const Tensor& a);
// scalar ops: a + s, a * s, s - a (rsub), s / a (rdiv), a^p
Tensor add_scalar(const Tensor& a, float s);
Tensor mul_scalar(const Tensor& a, float s);
Tensor rsub_scalar(float s, const Tensor& a);
Tensor rdiv_scalar(float s, const Tensor& a);
Tensor pow_scalar(const Tensor& a, float p);

Tensor exp(const Tensor& a);
Tensor log(const Tensor& a);
Tensor sqrt(const Tensor& a);
Tensor tanh(const Tensor& a);
Tensor relu(const Tensor& a);
Tensor gelu(const Tensor& a);  // exact (erf) GELU, as torch.nn.functional.gelu

// The broadcast shape of a and b; throws "<op>: shapes [..] and [..] cannot be broadcast".
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);
// Sums g down to `shape` (the inverse of broadcasting). Differentiable.
Tensor sum_to(const Tensor& g, const Shape& shape);
// Materialises a broadcast of a to `shape`. Differentiable (its gradient is sum_to).
Tensor broadcast_to(const Tensor& a, const Shape& shape);

// ---- reductions ------------------------------------------------------------------------------
Tensor sum(const Tensor& a);  // all elements -> shape []
Tensor sum(const Tensor& a, int64_t axis, bool keepdim = false);
Tensor mean(const Tensor& a);
Tensor mean(const Tensor& a, int64_t axis, bool keepdim = false);

// ---- shape -----------------------------------------------------------------------------------
Tensor reshape(const Tensor& a, const Shape& shape);  // a view; one dimension may be -1
Tensor transpose(const Tensor& a, int64_t d0, int64_t d1);
Tensor permute(const Tensor& a, const std::vector<int64_t>& dims);
Tensor slice(const Tensor& a, int64_t axis, int64_t start, int64_t end);  // [start, end)
Tensor concat(const std::vector<Tensor>& ts, int64_t axis);

// ---- linear algebra --------------------------------------------------------------------------
// op(a) @ op(b), op = transpose of the last two axes when trans_* is set. Both operands at least
// 2-D; leading (batch) dimensions broadcast, e.g. [B, H, T, d] @ [B, H, d, S] or [B, T, d] @ [d, n].
Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false);
// x @ w^T + b, the Linear layer in one op (w is [out, in], bias [out] or undefined).
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& bias);

// ---- softmax family (last axis) --------------------------------------------------------------
// A boolean mask broadcastable to the input: nonzero = masked out (gets probability exactly 0).
struct BoolMask {
  Shape shape;
  std::vector<uint8_t> data;
};
Tensor softmax(const Tensor& x);
// Additive mask (e.g. 0 / -inf), broadcastable to x, not differentiated.
Tensor softmax(const Tensor& x, const Tensor& additive_mask);
Tensor softmax(const Tensor& x, const BoolMask& mask);
Tensor log_softmax(const Tensor& x);
Tensor log_softmax(const Tensor& x, const Tensor& additive_mask);
Tensor log_softmax(const Tensor& x, const BoolMask& mask);

// ---- normalisation, embedding, regularisation, loss -------------------------------------------
// Over the last axis; weight/bias of shape [C] (either may be undefined).
Tensor layernorm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps = 1e-5f);
// weight [V, d], ids of shape ids_shape (values in [0, V)) -> ids_shape + [d].
Tensor embedding(const Tensor& weight, std::span<const int32_t> ids, const Shape& ids_shape);
// Inverted dropout: zeroes each element with probability p and scales the rest by 1/(1-p).
// Identity when !training or p == 0.
Tensor dropout(const Tensor& x, float p, bool training, Generator& gen);
// dropout(relu(x), p, training, gen) in one op: one pass, and only a byte mask is saved (not x).
Tensor relu_dropout(const Tensor& x, float p, bool training, Generator& gen);
// x + dropout(y, p, training, gen) in one op (a residual connection): one pass, the same mask as
// dropout draws, and nothing saved but its seed. x and y of the same shape.
Tensor dropout_add(const Tensor& x, const Tensor& y, float p, bool training, Generator& gen);
// Mean cross-entropy of logits [N, V] against targets [N], PyTorch CrossEntropyLoss semantics
// (ignore_index rows excluded from the mean, label smoothing). Returns a scalar.
Tensor cross_entropy(const Tensor& logits, std::span<const int32_t> targets, int32_t ignore_index = -100,
                     float label_smoothing = 0.0f);

// ---- operators -------------------------------------------------------------------------------
// Sugar over the functions above; no gradient rules of their own. (One per line: a table.)
// clang-format off
inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator-(const Tensor& a) { return neg(a); }
inline Tensor operator+(const Tensor& a, float s) { return add_scalar(a, s); }
inline Tensor operator+(float s, const Tensor& a) { return add_scalar(a, s); }
inline Tensor operator-(const Tensor& a, float s) { return add_scalar(a, -s); }
inline Tensor operator-(float s, const Tensor& a) { return rsub_scalar(s, a); }
inline Tensor operator*(const Tensor& a, float s) { return mul_scalar(a, s); }
inline Tensor operator*(float s, const Tensor& a) { return mul_scalar(a, s); }
inline Tensor operator/(const Tensor& a, float s) { return mul_scalar(a, 1.0f / s); }
inline Tensor operator/(float s, const Tensor& a) { return rdiv_scalar(s, a); }
// clang-format on

}  // namespace tg
