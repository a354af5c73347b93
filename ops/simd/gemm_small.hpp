// GEMM for few rows (M <= GemmTraits::small_m): no packing, each row of C straight from the
// operands. Called by the driver (ops/simd/gemm.hpp) per batch entry.
#pragma once

#include <algorithm>

#include "ops/kernels.hpp"
#include "ops/simd/common.hpp"
#include "ops/simd/gemm_traits.hpp"

namespace tg::ops::simd {

// Few rows (one decoding step's projections, attention of one new query): packing op(B) would cost
// more than the product, so each row of C is computed straight from the operands.
//  - op(B) = B^T stored N x K (a Linear weight): C[i, j] is a dot product of two contiguous
//    K-vectors; four columns at a time for independent accumulators.
//  - op(B) = B stored K x N: C[i, :] accumulates rows of B scaled by op(A)[i, k] (axpy), in a
//    scratch row, then merged into C with alpha, beta and the bias (as is each dot product).
// ws: small_m_workspace(g) floats, owned by the calling thread (allocated before any parallel region).
template <class Arch>
std::size_t small_m_workspace(const Gemm& g) {
  return static_cast<std::size_t>(g.K + (g.trans_b ? 0 : g.N) + 15) / 16 * 16;
}

template <class Arch>
void gemm_small_m(float* C, const float* A, const float* B, const Gemm& g, float* ws) {
  using V = Vec<Arch>;
  constexpr int64_t L = V::size;
  const int64_t M = g.M, N = g.N, K = g.K;
  float* arow = ws;       // op(A)'s row i when A is transposed
  float* acc = arow + K;  // the accumulated row (non-transposed B only)
  for (int64_t i = 0; i < M; ++i) {
    const float* a = A + i * g.lda;
    if (g.trans_a) {  // op(A)[i, k] = A[k * lda + i]: gather the row
      for (int64_t k = 0; k < K; ++k) arow[k] = A[k * g.lda + i];
      a = arow;
    }
    float* c = C + i * g.ldc;
    auto store = [&](int64_t j, float v) {
      c[j] = g.alpha * v + (g.beta == 0.0f ? 0.0f : g.beta * c[j]) + (g.bias ? g.bias[j] : 0.0f);
    };
    if (g.trans_b) {
      int64_t j = 0;
      for (; j + 4 <= N; j += 4) {
        const float *b0 = B + j * g.ldb, *b1 = b0 + g.ldb, *b2 = b1 + g.ldb, *b3 = b2 + g.ldb;
        V s0(0.0f), s1(0.0f), s2(0.0f), s3(0.0f);
        int64_t k = 0;
        for (; k + L <= K; k += L) {
          const V av = V::load_unaligned(a + k);
          s0 = xsimd::fma(av, V::load_unaligned(b0 + k), s0);
          s1 = xsimd::fma(av, V::load_unaligned(b1 + k), s1);
          s2 = xsimd::fma(av, V::load_unaligned(b2 + k), s2);
          s3 = xsimd::fma(av, V::load_unaligned(b3 + k), s3);
        }
        float t0 = hsum<Arch>(s0), t1 = hsum<Arch>(s1), t2 = hsum<Arch>(s2), t3 = hsum<Arch>(s3);
        for (; k < K; ++k) t0 += a[k] * b0[k], t1 += a[k] * b1[k], t2 += a[k] * b2[k], t3 += a[k] * b3[k];
        store(j, t0), store(j + 1, t1), store(j + 2, t2), store(j + 3, t3);
      }
      for (; j < N; ++j) {
        const float* bj = B + j * g.ldb;
        V s(0.0f);
        int64_t k = 0;
        for (; k + L <= K; k += L) s = xsimd::fma(V::load_unaligned(a + k), V::load_unaligned(bj + k), s);
        float t = hsum<Arch>(s);
        for (; k < K; ++k) t += a[k] * bj[k];
        store(j, t);
      }
    } else {
      std::fill_n(acc, N, 0.0f);
      for (int64_t k = 0; k < K; ++k) {
        const V av(a[k]);
        const float* bk = B + k * g.ldb;
        int64_t j = 0;
        for (; j + L <= N; j += L)
          xsimd::fma(av, V::load_unaligned(bk + j), V::load_unaligned(acc + j)).store_unaligned(acc + j);
        for (; j < N; ++j) acc[j] += a[k] * bk[j];
      }
      for (int64_t j = 0; j < N; ++j) store(j, acc[j]);
    }
  }
}

}  // namespace tg::ops::simd
