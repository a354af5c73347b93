// Internal to autograd/: where each entry of a broadcast operand lives.
#pragma once

#include <cstdint>
#include <vector>

#include "autograd/tensor.hpp"

namespace tg::detail {

// For every index of `out`, in row-major order, the offset (in floats) of the entry of a contiguous
// tensor of shape `in` broadcast to `out`: shapes are right-aligned and axes of size 1 repeat.
// Each entry of `in` is `unit` floats long (a matrix of a batched matmul, a mask row, ...).
inline std::vector<int64_t> broadcast_offsets(const Shape& in, const Shape& out, int64_t unit = 1) {
  const size_t nd = out.size();
  std::vector<int64_t> stride(nd, 0);  // 0 along broadcast axes
  int64_t s = unit;
  for (size_t k = 0; k < in.size(); ++k) {
    const size_t i = in.size() - 1 - k, o = nd - 1 - k;
    stride[o] = in[i] == 1 ? 0 : s;
    s *= in[i];
  }
  std::vector<int64_t> offs(static_cast<size_t>(numel_of(out)));
  std::vector<int64_t> idx(nd, 0);
  int64_t at = 0;
  for (auto& off : offs) {
    off = at;
    for (size_t d = nd; d-- > 0;) {  // odometer increment
      at += stride[d];
      if (++idx[d] < out[d]) break;
      at -= stride[d] * out[d];
      idx[d] = 0;
    }
  }
  return offs;
}

}  // namespace tg::detail
