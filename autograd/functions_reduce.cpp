// Reductions: sum and mean, over all elements or one axis.
//
// An axis reduction views the input as [outer, n, inner] (n = the reduced axis): each output
// element (o, i) sums the n inputs (o, 0..n, i). Sums are accumulated in double.
#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "autograd/functions.hpp"
#include "autograd/tape.hpp"
#include "ops/kernels.hpp"

namespace tg {

namespace {

struct AxisSplit {
  int64_t outer = 1, n = 1, inner = 1;
  Shape out_shape;  // with or without the reduced axis, per keepdim
};

AxisSplit split_axis(const Shape& shape, int64_t axis, bool keepdim, const char* op) {
  const int64_t nd = static_cast<int64_t>(shape.size());
  const int64_t ax = normalize_axis(axis, nd, op, shape);
  AxisSplit s;
  for (int64_t d = 0; d < nd; ++d) {
    if (d < ax) s.outer *= shape[d];
    if (d > ax) s.inner *= shape[d];
    if (d != ax)
      s.out_shape.push_back(shape[d]);
    else if (keepdim)
      s.out_shape.push_back(1);
  }
  s.n = shape[ax];
  return s;
}

// y[o, i] = scale * sum_k a[o, k, i]
Tensor reduce_axis(const Tensor& a, const AxisSplit& s, float scale) {
  Tensor y = Tensor::empty(s.out_shape);
  const float* pa = a.data();
  float* py = y.data();
  std::vector<double> acc(static_cast<size_t>(s.inner));
  for (int64_t o = 0; o < s.outer; ++o) {
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int64_t k = 0; k < s.n; ++k) {
      const float* row = pa + (o * s.n + k) * s.inner;
      for (int64_t i = 0; i < s.inner; ++i) acc[static_cast<size_t>(i)] += row[i];
    }
    for (int64_t i = 0; i < s.inner; ++i)
      py[o * s.inner + i] = static_cast<float>(scale * acc[static_cast<size_t>(i)]);
  }
  return y;
}

// da[o, k, i] += scale * dy[o, i]: the gradient of reduce_axis, a broadcast along the axis.
void expand_axis(float* da, const Tensor& dy, const AxisSplit& s, float scale) {
  const float* pdy = dy.data();
  for (int64_t o = 0; o < s.outer; ++o)
    for (int64_t k = 0; k < s.n; ++k)
      ops::axpy(da + (o * s.n + k) * s.inner, pdy + o * s.inner, scale, s.inner);
}

double sum_all(const Tensor& a) {
  double s = 0.0;
  const float* p = a.data();
  const int64_t n = a.numel();
  for (int64_t i = 0; i < n; ++i) s += p[i];
  return s;
}

}  // namespace

// forward: y = sum_i a_i   (shape [])
// saves:   numel(a)
// grad:    da = dy broadcast to a's shape
Tensor sum(const Tensor& a) {
  Tensor y = Tensor::scalar(static_cast<float>(sum_all(a)));
  if (Node* n = Tape::current().record("sum", y, {a})) {
    n->backward = [count = a.numel()](const Tensor& dy, Grads& g) {
      float* da = g.buffer(0);
      const float d = dy.item();
      for (int64_t i = 0; i < count; ++i) da[i] += d;
    };
  }
  return y;
}

// forward: y = (1/N) sum_i a_i   (shape [], N = numel(a); the mean of no elements is NaN, as PyTorch)
// saves:   nothing
// grad:    da = dy / N broadcast to a's shape
Tensor mean(const Tensor& a) {
  const int64_t count = a.numel();
  Tensor y = Tensor::scalar(static_cast<float>(sum_all(a) / static_cast<double>(count)));
  if (Node* n = Tape::current().record("mean", y, {a})) {
    n->backward = [count](const Tensor& dy, Grads& g) {
      float* da = g.buffer(0);
      const float d = dy.item() / static_cast<float>(count);
      for (int64_t i = 0; i < count; ++i) da[i] += d;
    };
  }
  return y;
}

// forward: y[o, i] = sum_k a[o, k, i]   (k runs over `axis`; kept as size 1 when keepdim)
// saves:   the [outer, n, inner] split
// grad:    da[o, k, i] = dy[o, i]
Tensor sum(const Tensor& a, int64_t axis, bool keepdim) {
  const AxisSplit s = split_axis(a.shape(), axis, keepdim, "sum");
  Tensor y = reduce_axis(a, s, 1.0f);
  if (Node* n = Tape::current().record("sum_axis", y, {a})) {
    n->backward = [s](const Tensor& dy, Grads& g) { expand_axis(g.buffer(0), dy, s, 1.0f); };
  }
  return y;
}

// forward: y[o, i] = (1/n) sum_k a[o, k, i]
// saves:   the [outer, n, inner] split
// grad:    da[o, k, i] = dy[o, i] / n
Tensor mean(const Tensor& a, int64_t axis, bool keepdim) {
  const AxisSplit s = split_axis(a.shape(), axis, keepdim, "mean");
  const float scale = 1.0f / static_cast<float>(s.n);
  Tensor y = reduce_axis(a, s, scale);
  if (Node* n = Tape::current().record("mean_axis", y, {a})) {
    n->backward = [s, scale](const Tensor& dy, Grads& g) { expand_axis(g.buffer(0), dy, s, scale); };
  }
  return y;
}

}  // namespace tg
