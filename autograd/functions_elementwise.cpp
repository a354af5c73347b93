// Elementwise functions with broadcasting, and the one place broadcasting is undone (sum_to).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <stdexcept>

#include "autograd/functions.hpp"
#include "autograd/tape.hpp"
#include "ops/kernels.hpp"

namespace tg {

// ---- broadcasting helpers --------------------------------------------------------------------

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da != db && da != 1 && db != 1)
      throw std::invalid_argument(
          fmt::format("{}: shapes {} and {} cannot be broadcast", op, shape_str(a), shape_str(b)));
    out[i] = da == 1 ? db : da;
  }
  return out;
}

namespace {

// Strides (in elements) of `in` read as if broadcast to `out` (0 along broadcast axes).
std::vector<int64_t> broadcast_strides(const Shape& in, const Shape& out) {
  std::vector<int64_t> st(out.size(), 0);
  int64_t s = 1;
  for (size_t k = 0; k < in.size(); ++k) {
    const size_t i = in.size() - 1 - k, o = out.size() - 1 - k;
    st[o] = in[i] == 1 ? 0 : s;
    s *= in[i];
  }
  return st;
}

// Calls f(out_index, a_index, b_index) for every element of `out`, in order.
template <class F>
void for_each_broadcast(const Shape& out, const Shape& a, const Shape& b, F&& f) {
  const auto sa = broadcast_strides(a, out), sb = broadcast_strides(b, out);
  const int64_t n = numel_of(out), nd = static_cast<int64_t>(out.size());
  if (n == 0) return;
  std::vector<int64_t> idx(out.size(), 0);
  int64_t ia = 0, ib = 0;
  for (int64_t o = 0; o < n; ++o) {
    f(o, ia, ib);
    for (int64_t d = nd - 1; d >= 0; --d) {  // odometer increment
      ia += sa[d], ib += sb[d];
      if (++idx[d] < out[d]) break;
      ia -= sa[d] * out[d], ib -= sb[d] * out[d];
      idx[d] = 0;
    }
  }
}

// out = f(a, b) with broadcasting; a fast path when the shapes already agree.
template <class F>
Tensor binary(const Tensor& a, const Tensor& b, const char* op, F&& f) {
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), op);
  Tensor out = Tensor::empty(shape);
  float* o = out.data();
  const float *pa = a.data(), *pb = b.data();
  if (a.shape() == b.shape()) {
    const int64_t n = out.numel();
    for (int64_t i = 0; i < n; ++i) o[i] = f(pa[i], pb[i]);
  } else {
    for_each_broadcast(shape, a.shape(), b.shape(),
                       [&](int64_t i, int64_t ia, int64_t ib) { o[i] = f(pa[ia], pb[ib]); });
  }
  return out;
}

template <class F>
Tensor unary(const Tensor& a, F&& f) {
  Tensor out = Tensor::empty(a.shape());
  const float* pa = a.data();
  float* o = out.data();
  const int64_t n = a.numel();
  for (int64_t i = 0; i < n; ++i) o[i] = f(pa[i]);
  return out;
}

// The row length when `small` (leading ones dropped) is the trailing part of `big`'s shape, as a bias
// or positional encodings added to every row: big is [rows, cols], small [cols]; 0 otherwise.
int64_t trailing_cols(const Shape& big, const Shape& small) {
  if (small.size() > big.size()) return 0;
  size_t lead = 0;
  while (lead < small.size() && small[lead] == 1) ++lead;
  const auto n = static_cast<std::ptrdiff_t>(small.size() - lead);
  if (!std::equal(small.begin() + static_cast<std::ptrdiff_t>(lead), small.end(), big.end() - n)) return 0;
  int64_t cols = 1;
  for (auto it = big.end() - n; it != big.end(); ++it) cols *= *it;
  return cols;
}
}  // namespace

// ---- sum_to / broadcast_to -------------------------------------------------------------------
// forward: y = sum of g over the axes along which `shape` was broadcast to g's shape
// saves:   nothing
// grad:    dg = broadcast_to(dy, g.shape)
Tensor sum_to(const Tensor& g, const Shape& shape) {
  if (g.shape() == shape) return g;
  if (broadcast_shapes(shape, g.shape(), "sum_to") != g.shape())
    throw std::invalid_argument(
        fmt::format("sum_to: cannot reduce shape {} to {}", shape_str(g.shape()), shape_str(shape)));
  Tensor out = Tensor::zeros(shape);
  float* o = out.data();
  const float* pg = g.data();
  if (const int64_t cols = trailing_cols(g.shape(), shape); cols > 0)  // summed over leading axes: threaded
    ops::bias_backward(o, pg, g.numel() / cols, cols);
  else
    for_each_broadcast(g.shape(), g.shape(), shape, [&](int64_t i, int64_t, int64_t io) { o[io] += pg[i]; });
  const Shape in_shape = g.shape();
  if (Node* n = Tape::current().record("sum_to", out, {g})) {
    n->backward = [in_shape](const Tensor& dy, Grads& grads) {
      grads.accumulate(0, broadcast_to(dy, in_shape));
    };
  }
  return out;
}

// forward: y = a repeated along broadcast axes
// saves:   nothing
// grad:    da = sum_to(dy, a.shape)   (done by Grads::accumulate)
Tensor broadcast_to(const Tensor& a, const Shape& shape) {
  if (broadcast_shapes(a.shape(), shape, "broadcast_to") != shape)
    throw std::invalid_argument(
        fmt::format("broadcast_to: cannot broadcast shape {} to {}", shape_str(a.shape()), shape_str(shape)));
  Tensor out = Tensor::empty(shape);
  float* o = out.data();
  const float* pa = a.data();
  for_each_broadcast(shape, a.shape(), shape, [&](int64_t i, int64_t ia, int64_t) { o[i] = pa[ia]; });
  if (Node* n = Tape::current().record("broadcast_to", out, {a})) {
    n->backward = [](const Tensor& dy, Grads& grads) { grads.accumulate(0, dy); };
  }
  return out;
}

// ---- add / sub / mul / div -------------------------------------------------------------------
// In each binary op the gradient is computed at the output's (broadcast) shape and handed to
// Grads::accumulate, which sums it down to the input's shape (sum_to).

// forward: y = a + b
// saves:   nothing
// grads:   da = dy;  db = dy (summed over the axes an input was broadcast along: sum_to)
// Same shapes (a residual connection) and one input repeated along the other's leading axes (a
// bias, positional encodings: y[r, :] = big[r, :] + small) run the threaded kernels; other
// broadcasts the generic loop.
Tensor add(const Tensor& a, const Tensor& b) {
  // y = big + small with small repeated along big's leading axes (cols per row): the same bits as a + b
  const auto repeated = [](const Tensor& big, const Tensor& small, int64_t cols) {
    Tensor out = Tensor::empty(big.shape());
    ops::copy(out.data(), big.data(), out.numel());
    ops::bias_add(out.data(), small.data(), out.numel() / cols, cols);
    return out;
  };
  Tensor y;
  if (a.shape() == b.shape()) {
    y = Tensor::empty(a.shape());
    ops::add(y.data(), a.data(), b.data(), y.numel());
  } else if (int64_t cols = trailing_cols(a.shape(), b.shape()); cols > 0) {
    y = repeated(a, b, cols);
  } else if ((cols = trailing_cols(b.shape(), a.shape())) > 0) {
    y = repeated(b, a, cols);
  } else {
    y = binary(a, b, "add", [](float x, float z) { return x + z; });
  }
  if (Node* n = Tape::current().record("add", y, {a, b})) {
    n->backward = [](const Tensor& dy, Grads& g) {
      if (g.needs(0)) g.accumulate(0, dy);
      if (g.needs(1)) g.accumulate(1, dy);
    };
  }
  return y;
}

// forward: y = a - b
// saves:   nothing
// grads:   da = dy;  db = -dy
Tensor sub(const Tensor& a, const Tensor& b) {
  Tensor y = binary(a, b, "sub", [](float x, float z) { return x - z; });
  if (Node* n = Tape::current().record("sub", y, {a, b})) {
    n->backward = [](const Tensor& dy, Grads& g) {
      if (g.needs(0)) g.accumulate(0, dy);
      if (g.needs(1)) g.accumulate(1, neg(dy));
    };
  }
  return y;
}

// forward: y = a * b
// saves:   a, b
// grads:   da = dy * b;  db = dy * a
Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor y = binary(a, b, "mul", [](float x, float z) { return x * z; });
  if (Node* n = Tape::current().record("mul", y, {a, b})) {
    n->backward = [a = a.detach(), b = b.detach()](const Tensor& dy, Grads& g) {
      if (g.needs(0)) g.accumulate(0, mul(dy, b));
      if (g.needs(1)) g.accumulate(1, mul(dy, a));
    };
  }
  return y;
}

// forward: y = a / b
// saves:   a, b
// grads:   da = dy / b;  db = -dy * a / b^2
Tensor div(const Tensor& a, const Tensor& b) {
  Tensor y = binary(a, b, "div", [](float x, float z) { return x / z; });
  if (Node* n = Tape::current().record("div", y, {a, b})) {
    n->backward = [a = a.detach(), b = b.detach()](const Tensor& dy, Grads& g) {
      if (g.needs(0)) g.accumulate(0, div(dy, b));
      if (g.needs(1)) g.accumulate(1, neg(div(mul(dy, a), mul(b, b))));
    };
  }
  return y;
}

// forward: y = -a
// saves:   nothing
// grad:    da = -dy
Tensor neg(const Tensor& a) {
  Tensor y = unary(a, [](float x) { return -x; });
  if (Node* n = Tape::current().record("neg", y, {a})) {
    n->backward = [](const Tensor& dy, Grads& g) { g.accumulate(0, neg(dy)); };
  }
  return y;
}

// ---- scalar ops ------------------------------------------------------------------------------
// The backward rules below hand dy (or s * dy) to the input through Grads (accumulate, add_scaled:
// stored as the first contribution, added to later ones): the input and the output have the same
// shape, so there is nothing to un-broadcast.

// forward: y = a + s
// saves:   nothing
// grad:    da = dy
Tensor add_scalar(const Tensor& a, float s) {
  Tensor y = unary(a, [s](float x) { return x + s; });
  if (Node* n = Tape::current().record("add_scalar", y, {a})) {
    n->backward = [](const Tensor& dy, Grads& g) { g.accumulate(0, dy); };
  }
  return y;
}

// forward: y = a * s
// saves:   s
// grad:    da = s * dy
Tensor mul_scalar(const Tensor& a, float s) {
  Tensor y = Tensor::empty(a.shape());
  ops::scale(y.data(), a.data(), s, a.numel());  // threaded (unary() is one thread's loop)
  if (Node* n = Tape::current().record("mul_scalar", y, {a})) {
    n->backward = [s](const Tensor& dy, Grads& g) { g.add_scaled(0, dy, s); };
  }
  return y;
}

// forward: y = s - a
// saves:   nothing
// grad:    da = -dy
Tensor rsub_scalar(float s, const Tensor& a) {
  Tensor y = unary(a, [s](float x) { return s - x; });
  if (Node* n = Tape::current().record("rsub_scalar", y, {a})) {
    n->backward = [](const Tensor& dy, Grads& g) { g.add_scaled(0, dy, -1.0f); };
  }
  return y;
}

namespace {
// da += dy * f(i): the shape of every unary backward rule.
template <class F>
void accumulate_unary(Grads& g, const Tensor& dy, F&& f) {
  float* da = g.buffer(0);
  const float* pdy = dy.data();
  const int64_t n = dy.numel();
  for (int64_t i = 0; i < n; ++i) da[i] += pdy[i] * f(i);
}
}  // namespace

// forward: y = s / a
// saves:   a
// grad:    da = -s * dy / a^2
Tensor rdiv_scalar(float s, const Tensor& a) {
  Tensor y = unary(a, [s](float x) { return s / x; });
  if (Node* n = Tape::current().record("rdiv_scalar", y, {a})) {
    n->backward = [s, a = a.detach()](const Tensor& dy, Grads& g) {
      const float* pa = a.data();
      accumulate_unary(g, dy, [&](int64_t i) { return -s / (pa[i] * pa[i]); });
    };
  }
  return y;
}

// forward: y = a^p
// saves:   a, p
// grad:    da = dy * p * a^(p-1)
Tensor pow_scalar(const Tensor& a, float p) {
  Tensor y = unary(a, [p](float x) { return std::pow(x, p); });
  if (Node* n = Tape::current().record("pow_scalar", y, {a})) {
    n->backward = [p, a = a.detach()](const Tensor& dy, Grads& g) {
      const float* pa = a.data();
      // p == 0: y is constant; skipping the product also avoids 0 * inf at a == 0.
      if (p == 0.0f) return;
      accumulate_unary(g, dy, [&](int64_t i) { return p * std::pow(pa[i], p - 1.0f); });
    };
  }
  return y;
}

// ---- transcendental --------------------------------------------------------------------------

// forward: y = e^a
// saves:   y
// grad:    da = dy * y
Tensor exp(const Tensor& a) {
  Tensor y = unary(a, [](float x) { return std::exp(x); });
  if (Node* n = Tape::current().record("exp", y, {a})) {
    n->backward = [y = y.detach()](const Tensor& dy, Grads& g) {
      const float* py = y.data();
      accumulate_unary(g, dy, [&](int64_t i) { return py[i]; });
    };
  }
  return y;
}

// forward: y = ln a
// saves:   a
// grad:    da = dy / a
Tensor log(const Tensor& a) {
  Tensor y = unary(a, [](float x) { return std::log(x); });
  if (Node* n = Tape::current().record("log", y, {a})) {
    n->backward = [a = a.detach()](const Tensor& dy, Grads& g) {
      const float* pa = a.data();
      accumulate_unary(g, dy, [&](int64_t i) { return 1.0f / pa[i]; });
    };
  }
  return y;
}

// forward: y = sqrt(a)
// saves:   y
// grad:    da = dy / (2 y)
Tensor sqrt(const Tensor& a) {
  Tensor y = unary(a, [](float x) { return std::sqrt(x); });
  if (Node* n = Tape::current().record("sqrt", y, {a})) {
    n->backward = [y = y.detach()](const Tensor& dy, Grads& g) {
      const float* py = y.data();
      accumulate_unary(g, dy, [&](int64_t i) { return 0.5f / py[i]; });
    };
  }
  return y;
}

// forward: y = tanh(a)
// saves:   y
// grad:    da = dy * (1 - y^2)
Tensor tanh(const Tensor& a) {
  Tensor y = unary(a, [](float x) { return std::tanh(x); });
  if (Node* n = Tape::current().record("tanh", y, {a})) {
    n->backward = [y = y.detach()](const Tensor& dy, Grads& g) {
      const float* py = y.data();
      accumulate_unary(g, dy, [&](int64_t i) { return 1.0f - py[i] * py[i]; });
    };
  }
  return y;
}

// ---- activations (ops:: kernels) -------------------------------------------------------------

// forward: y = max(a, 0)
// saves:   a
// grad:    da = dy * [a > 0]   (the subgradient at 0 is 0, as PyTorch)
Tensor relu(const Tensor& a) {
  Tensor y = Tensor::empty(a.shape());
  ops::relu_forward(y.data(), a.data(), a.numel());
  if (Node* n = Tape::current().record("relu", y, {a})) {
    n->backward = [a = a.detach()](const Tensor& dy, Grads& g) {
      ops::relu_backward(g.buffer(0), dy.data(), a.data(), a.numel());
    };
  }
  return y;
}

// forward: none: y = a * Phi(a) = a/2 * (1 + erf(a / sqrt 2))
//          tanh: y = a/2 * (1 + tanh(u)),  u = sqrt(2 / pi) (a + 0.044715 a^3)
// saves:   a
// grad:    none: da = dy * (Phi(a) + a * phi(a)),  phi the standard normal density
//          tanh: da = dy * ((1 + t) / 2 + a (1 - t^2) sqrt(2 / pi) (1 + 3 * 0.044715 a^2) / 2), t = tanh(u)
Tensor gelu(const Tensor& a, GeluApprox approx) {
  Tensor y = Tensor::empty(a.shape());
  const bool tanh_form = approx == GeluApprox::tanh;
  (tanh_form ? ops::gelu_tanh_forward : ops::gelu_forward)(y.data(), a.data(), a.numel());
  if (Node* n = Tape::current().record(tanh_form ? "gelu_tanh" : "gelu", y, {a})) {
    n->backward = [a = a.detach(), tanh_form](const Tensor& dy, Grads& g) {
      (tanh_form ? ops::gelu_tanh_backward : ops::gelu_backward)(g.buffer(0), dy.data(), a.data(), a.numel());
    };
  }
  return y;
}

}  // namespace tg
