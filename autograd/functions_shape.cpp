// Shape functions: reshape, transpose, permute, slice, concat.
//
// Every tensor is contiguous (row-major). reshape, and a slice that only cuts the leading
// non-trivial axis, are views: the output shares the input's storage (with an offset), so they
// cost no copy. transpose/permute/concat and other slices copy. Whatever the forward did, the
// gradient is an ordinary contiguous buffer of the input's shape.
#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "autograd/functions.hpp"
#include "autograd/tape.hpp"
#include "ops/kernels.hpp"

namespace tg {

namespace {

// A new tensor of `shape` that aliases a's storage starting `offset` elements into a.
Tensor make_view(const Tensor& a, const Shape& shape, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = a.impl()->storage;
  impl->offset = a.impl()->offset + offset;
  impl->shape = shape;
  return Tensor(std::move(impl));
}

// Walks the output of a permutation in order and calls f(out_index, in_index).
template <class F>
void for_each_permuted(const Shape& in_shape, const std::vector<int64_t>& dims, F&& f) {
  const size_t nd = in_shape.size();
  std::vector<int64_t> in_stride(nd, 1);
  for (size_t d = nd; d-- > 1;) in_stride[d - 1] = in_stride[d] * in_shape[d];
  Shape out_shape(nd);
  std::vector<int64_t> stride(nd);  // input stride of each output axis
  for (size_t d = 0; d < nd; ++d) {
    out_shape[d] = in_shape[static_cast<size_t>(dims[d])];
    stride[d] = in_stride[static_cast<size_t>(dims[d])];
  }
  const int64_t n = numel_of(in_shape);
  if (n == 0) return;
  std::vector<int64_t> idx(nd, 0);
  int64_t in = 0;
  for (int64_t o = 0; o < n; ++o) {
    f(o, in);
    for (size_t d = nd; d-- > 0;) {  // odometer increment
      in += stride[d];
      if (++idx[d] < out_shape[d]) break;
      in -= stride[d] * out_shape[d];
      idx[d] = 0;
    }
  }
}

// forward: y[i_dims[0], ..., i_dims[n-1]] = a[i_0, ..., i_{n-1}]  (y.shape[k] = a.shape[dims[k]])
// saves:   dims
// grad:    da = the inverse permutation of dy
Tensor permute_impl(const Tensor& a, const std::vector<int64_t>& dims, const char* op) {
  Shape out_shape(dims.size());
  for (size_t k = 0; k < dims.size(); ++k) out_shape[k] = a.shape()[static_cast<size_t>(dims[k])];
  Tensor y = Tensor::empty(out_shape);
  const float* pa = a.data();
  float* py = y.data();
  for_each_permuted(a.shape(), dims, [&](int64_t o, int64_t i) { py[o] = pa[i]; });
  if (Node* n = Tape::current().record(op, y, {a})) {
    n->backward = [in_shape = a.shape(), dims](const Tensor& dy, Grads& g) {
      float* da = g.buffer(0);
      const float* pdy = dy.data();
      for_each_permuted(in_shape, dims, [&](int64_t o, int64_t i) { da[i] += pdy[o]; });
    };
  }
  return y;
}

}  // namespace

// forward: y = a viewed with a new shape (same storage; one dimension may be -1 = inferred)
// saves:   nothing
// grad:    da = dy viewed with a's shape
Tensor reshape(const Tensor& a, const Shape& shape) {
  Shape out = shape;
  int64_t known = 1, infer = -1;
  for (size_t d = 0; d < out.size(); ++d) {
    if (out[d] == -1) {
      if (infer >= 0)
        throw std::invalid_argument(fmt::format("reshape: more than one -1 in {}", shape_str(shape)));
      infer = static_cast<int64_t>(d);
    } else if (out[d] < 0) {
      throw std::invalid_argument(fmt::format("reshape: negative dimension in {}", shape_str(shape)));
    } else {
      known *= out[d];
    }
  }
  if (infer >= 0) {
    if (known == 0 || a.numel() % known != 0)
      throw std::invalid_argument(
          fmt::format("reshape: cannot reshape {} to {}", shape_str(a.shape()), shape_str(shape)));
    out[static_cast<size_t>(infer)] = a.numel() / known;
  }
  if (numel_of(out) != a.numel())
    throw std::invalid_argument(fmt::format("reshape: cannot reshape {} ({} elements) to {} ({} elements)",
                                            shape_str(a.shape()), a.numel(), shape_str(shape),
                                            numel_of(out)));
  Tensor y = make_view(a, out, 0);
  if (Node* n = Tape::current().record("reshape", y, {a})) {
    n->backward = [](const Tensor& dy, Grads& g) { g.add_scaled(0, dy, 1.0f); };
  }
  return y;
}

// forward: y = a with axes d0 and d1 swapped (a copy)
// saves:   the permutation
// grad:    da = dy with axes d0 and d1 swapped back
Tensor transpose(const Tensor& a, int64_t d0, int64_t d1) {
  const int64_t nd = a.dim();
  const int64_t x = normalize_axis(d0, nd, "transpose", a.shape());
  const int64_t z = normalize_axis(d1, nd, "transpose", a.shape());
  std::vector<int64_t> dims(static_cast<size_t>(nd));
  for (int64_t d = 0; d < nd; ++d) dims[static_cast<size_t>(d)] = d;
  std::swap(dims[static_cast<size_t>(x)], dims[static_cast<size_t>(z)]);
  return permute_impl(a, dims, "transpose");
}

// forward: y.shape[k] = a.shape[dims[k]] (a copy); see permute_impl
// saves:   dims
// grad:    da = dy permuted by the inverse of dims
Tensor permute(const Tensor& a, const std::vector<int64_t>& dims) {
  const int64_t nd = a.dim();
  if (static_cast<int64_t>(dims.size()) != nd)
    throw std::invalid_argument(fmt::format("permute: {} dims {} for a tensor of shape {}", dims.size(),
                                            shape_str(dims), shape_str(a.shape())));
  std::vector<int64_t> norm(dims.size());
  std::vector<bool> seen(dims.size(), false);
  for (size_t k = 0; k < dims.size(); ++k) {
    norm[k] = normalize_axis(dims[k], nd, "permute", a.shape());
    if (seen[static_cast<size_t>(norm[k])])
      throw std::invalid_argument(
          fmt::format("permute: dims {} are not a permutation of the axes of shape {}", shape_str(dims),
                      shape_str(a.shape())));
    seen[static_cast<size_t>(norm[k])] = true;
  }
  return permute_impl(a, norm, "permute");
}

// forward: y = a[..., start:end, ...] along `axis` (negative start/end count from the end).
//          A view when every axis before `axis` has size 1, else a copy.
// saves:   the [outer, n, inner] split and start
// grad:    da[o, start + k, i] = dy[o, k, i], zero elsewhere
Tensor slice(const Tensor& a, int64_t axis, int64_t start, int64_t end) {
  const int64_t ax = normalize_axis(axis, a.dim(), "slice", a.shape());
  const int64_t n = a.shape()[static_cast<size_t>(ax)];
  const int64_t s = start < 0 ? start + n : start, e = end < 0 ? end + n : end;
  if (s < 0 || e > n || s > e)
    throw std::out_of_range(fmt::format("slice: range [{}, {}) out of bounds for axis {} of shape {}", start,
                                        end, axis, shape_str(a.shape())));
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < a.dim(); ++d) {
    if (d < ax) outer *= a.shape()[static_cast<size_t>(d)];
    if (d > ax) inner *= a.shape()[static_cast<size_t>(d)];
  }
  Shape out_shape = a.shape();
  out_shape[static_cast<size_t>(ax)] = e - s;
  const int64_t len = (e - s) * inner;  // contiguous elements per outer index
  Tensor y;
  if (outer == 1) {
    y = make_view(a, out_shape, s * inner);
  } else {
    y = Tensor::empty(out_shape);
    for (int64_t o = 0; o < outer; ++o) std::copy_n(a.data() + (o * n + s) * inner, len, y.data() + o * len);
  }
  if (Node* node = Tape::current().record("slice", y, {a})) {
    node->backward = [outer, n, s, inner, len](const Tensor& dy, Grads& g) {
      float* da = g.buffer(0);  // zeroed on first use (threaded: Tensor::zeros)
      for (int64_t o = 0; o < outer; ++o) ops::axpy(da + (o * n + s) * inner, dy.data() + o * len, 1.0f, len);
    };
  }
  return y;
}

// forward: y = [t_0, t_1, ...] joined along `axis`; all other dimensions must agree
// saves:   each input's extent along the axis
// grad:    dt_j = the block of dy that t_j filled
Tensor concat(const std::vector<Tensor>& ts, int64_t axis) {
  if (ts.empty()) throw std::invalid_argument("concat: no tensors given");
  const Shape& s0 = ts[0].shape();
  const int64_t ax = normalize_axis(axis, ts[0].dim(), "concat", s0);
  Shape out_shape = s0;
  out_shape[static_cast<size_t>(ax)] = 0;
  std::vector<int64_t> extent;  // size along the axis times inner, per input
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < ts[0].dim(); ++d) {
    if (d < ax) outer *= s0[static_cast<size_t>(d)];
    if (d > ax) inner *= s0[static_cast<size_t>(d)];
  }
  for (size_t j = 0; j < ts.size(); ++j) {
    const Shape& sj = ts[j].shape();
    bool ok = sj.size() == s0.size();
    for (size_t d = 0; ok && d < s0.size(); ++d) ok = static_cast<int64_t>(d) == ax || sj[d] == s0[d];
    if (!ok)
      throw std::invalid_argument(
          fmt::format("concat: shape {} (tensor {}) does not match {} outside axis {}", shape_str(sj), j,
                      shape_str(s0), axis));
    out_shape[static_cast<size_t>(ax)] += sj[static_cast<size_t>(ax)];
    extent.push_back(sj[static_cast<size_t>(ax)] * inner);
  }
  Tensor y = Tensor::empty(out_shape);
  const int64_t row = out_shape[static_cast<size_t>(ax)] * inner;  // output elements per outer index
  for (int64_t o = 0; o < outer; ++o) {
    int64_t start = 0;  // where t_j's block begins inside output row o
    for (size_t j = 0; j < ts.size(); start += extent[j], ++j)
      std::copy_n(ts[j].data() + o * extent[j], extent[j], y.data() + o * row + start);
  }
  if (Node* n = Tape::current().record("concat", y, ts)) {
    n->backward = [extent, outer, row](const Tensor& dy, Grads& g) {
      int64_t start = 0;
      for (size_t j = 0; j < extent.size(); start += extent[j], ++j) {
        if (!g.needs(j)) continue;
        float* dt = g.buffer(j);
        for (int64_t o = 0; o < outer; ++o)
          ops::axpy(dt + o * extent[j], dy.data() + o * row + start, 1.0f, extent[j]);
      }
    };
  }
  return y;
}

}  // namespace tg
