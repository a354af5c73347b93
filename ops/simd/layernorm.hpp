// LayerNorm over the last axis, forward and backward (formulas in ops/kernels.hpp and ops/ref.cpp).
// Rows are split across threads; dweight/dbias, which sum over rows, go to per-thread partial rows
// that are added up after the parallel loop (no atomics, deterministic for a given thread count).
#pragma once

#include <cmath>

#include "ops/kernels.hpp"
#include "ops/simd/common.hpp"
#include "ops/simd/elementwise.hpp"
#include "ops/simd/softmax.hpp"

namespace tg::ops::simd {

// mean = sum x / C; var = sum (x - mean)^2 / C (two passes: no cancellation); rstd = 1/sqrt(var + eps)
// y = (x - mean) * rstd * w + b
template <class Arch>
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int64_t rows, int64_t cols, float eps) {
  using V = Vec<Arch>;
  parallel_for<Arch>(rows, min_rows_per_thread<Arch>(cols), [&](int64_t lo, int64_t hi, int) {
    for (int64_t r = lo; r < hi; ++r) {
      const float* x = inp + r * cols;
      float* y = out + r * cols;
      const float mu = row_dot<Arch>(x, nullptr, cols) / static_cast<float>(cols);
      V acc(0.0f);
      int64_t c = 0;
      for (; c + int64_t(V::size) <= cols; c += V::size) {
        const V d = V::load_unaligned(x + c) - V(mu);
        acc = xsimd::fma(d, d, acc);
      }
      float var = 0.0f;
      for (; c < cols; ++c) var += (x[c] - mu) * (x[c] - mu);
      var = (var + hsum<Arch>(acc)) / static_cast<float>(cols);
      const float rs = 1.0f / std::sqrt(var + eps);
      mean[r] = mu;
      rstd[r] = rs;
      c = 0;
      for (; c + int64_t(V::size) <= cols; c += V::size) {
        V v = (V::load_unaligned(x + c) - V(mu)) * V(rs);
        if (weight) v *= V::load_unaligned(weight + c);
        if (bias) v += V::load_unaligned(bias + c);
        v.store_unaligned(y + c);
      }
      for (; c < cols; ++c) y[c] = (x[c] - mu) * rs * (weight ? weight[c] : 1.0f) + (bias ? bias[c] : 0.0f);
    }
  });
}

// g = w * dy, xhat = (x - mean) * rstd:
//   dx += rstd * (g - mean(g) - xhat * mean(g * xhat));  dw += sum_rows dy * xhat;  db += sum_rows dy
// (overwrite: dx = ..., dx not read)
template <class Arch>
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const LayerNormSaved& saved, int64_t rows, int64_t cols, bool overwrite) {
  const float *const inp = saved.inp, *const weight = saved.weight, *const mean = saved.mean,
                     *const rstd = saved.rstd;
  using V = Vec<Arch>;
  const int64_t min_rows = min_rows_per_thread<Arch>(cols);
  const int nt = parallel_threads<Arch>(rows, min_rows);
  // partial rows: thread t's dweight at [2t * cols], its dbias at [(2t + 1) * cols]
  float* partial =
      (dweight || dbias) ? scratch<Arch, Slot::partial>(static_cast<std::size_t>(2 * nt * cols)) : nullptr;
  if (partial)
    for (int64_t i = 0; i < 2 * nt * cols; ++i) partial[i] = 0.0f;
  parallel_for<Arch>(rows, min_rows, [&](int64_t lo, int64_t hi, int t) {
    float* dw = partial ? partial + 2 * t * cols : nullptr;
    float* db = partial ? partial + (2 * t + 1) * cols : nullptr;
    for (int64_t r = lo; r < hi; ++r) {
      const float* x = inp + r * cols;
      const float* dy = dout + r * cols;
      const V mu(mean[r]), rs(rstd[r]);
      // pass 1: mean(g), mean(g * xhat) (needed for dx only)
      float g_mean = 0.0f, gx_mean = 0.0f;
      if (dinp) {
        V sg(0.0f), sgx(0.0f);
        int64_t c = 0;
        for (; c + int64_t(V::size) <= cols; c += V::size) {
          V g = V::load_unaligned(dy + c);
          if (weight) g *= V::load_unaligned(weight + c);
          const V xhat = (V::load_unaligned(x + c) - mu) * rs;
          sg += g;
          sgx = xsimd::fma(g, xhat, sgx);
        }
        for (; c < cols; ++c) {
          const float g = dy[c] * (weight ? weight[c] : 1.0f), xhat = (x[c] - mean[r]) * rstd[r];
          g_mean += g;
          gx_mean += g * xhat;
        }
        g_mean = (g_mean + hsum<Arch>(sg)) / static_cast<float>(cols);
        gx_mean = (gx_mean + hsum<Arch>(sgx)) / static_cast<float>(cols);
      }
      // pass 2: dx, and this thread's share of dw, db
      int64_t c = 0;
      for (; c + int64_t(V::size) <= cols; c += V::size) {
        const V d = V::load_unaligned(dy + c);
        const V xhat = (V::load_unaligned(x + c) - mu) * rs;
        if (dinp) {
          const V g = weight ? d * V::load_unaligned(weight + c) : d;
          const V dx = rs * (g - V(g_mean) - xhat * V(gx_mean));
          float* dst = dinp + r * cols + c;
          (overwrite ? dx : V::load_unaligned(dst) + dx).store_unaligned(dst);
        }
        if (dw) xsimd::fma(d, xhat, V::load_unaligned(dw + c)).store_unaligned(dw + c);
        if (db) (V::load_unaligned(db + c) + d).store_unaligned(db + c);
      }
      for (; c < cols; ++c) {
        const float xhat = (x[c] - mean[r]) * rstd[r];
        const float g = dy[c] * (weight ? weight[c] : 1.0f);
        if (dinp)
          dinp[r * cols + c] =
              (overwrite ? 0.0f : dinp[r * cols + c]) + rstd[r] * (g - g_mean - xhat * gx_mean);
        if (dw) dw[c] += dy[c] * xhat;
        if (db) db[c] += dy[c];
      }
    }
  });
  for (int t = 0; t < nt; ++t) {
    if (dweight) axpy_row<Arch>(dweight, partial + 2 * t * cols, 1.0f, cols);
    if (dbias) axpy_row<Arch>(dbias, partial + (2 * t + 1) * cols, 1.0f, cols);
  }
}

}  // namespace tg::ops::simd
