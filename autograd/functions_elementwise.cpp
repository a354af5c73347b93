// Elementwise functions with broadcasting, and the one place broadcasting is undone (sum_to).
#include <fmt/format.h>

#include <algorithm>
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
    for (int64_t i = 0; i < out.numel(); ++i) o[i] = f(pa[i], pb[i]);
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
  for (int64_t i = 0; i < a.numel(); ++i) o[i] = f(pa[i]);
  return out;
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
  for_each_broadcast(g.shape(), g.shape(), shape, [&](int64_t i, int64_t, int64_t io) { o[io] += pg[i]; });
  const Shape in_shape = g.shape();
  if (Node* n = Tape::current().record("sum_to", out, {g})) {
    n->backward = [in_shape](const Tensor& dy, Grads& grads) { grads.accumulate(0, broadcast_to(dy, in_shape)); };
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
// Grads::accumulate, which sums it down to the input's shape.

// forward: y = a + b
// saves:   nothing
// grads:   da = dy;  db = dy
Tensor add(const Tensor& a, const Tensor& b) {
  Tensor y = binary(a, b, "add", [](float x, float z) { return x + z; });
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

}  // namespace tg
