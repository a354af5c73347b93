// GEMM for few rows, without packing: each row of C straight from the operands. Called by the
// driver (ops/simd/gemm.hpp) per batch entry, for M <= GemmTraits::small_m, or, with op(B) = B^T
// and a long K, M <= small_m_trans_b (gemm_traits.hpp has the measurements).
#pragma once

#include <algorithm>

#include "ops/kernels.hpp"
#include "ops/simd/common.hpp"
#include "ops/simd/gemm_traits.hpp"

namespace tg::ops::simd {

// Few rows (one decoding step's projections, a small batch of them, attention of one new query):
// packing op(B) would cost more than the product, so C comes straight from the operands.
//  - op(B) = B^T stored N x K (a Linear weight): C[i, j] is a dot product of two contiguous
//    K-vectors, computed R rows of op(A) x 4 columns at a time (dot_tile): each K step loads R + 4
//    vectors for 4R multiply-adds (one row at a time would load 5 for 4, bound by the loads).
//  - op(B) = B stored K x N: C[i, :] accumulates rows of B scaled by op(A)[i, k] (axpy), in a
//    scratch row, then merged into C with alpha, beta and the bias (as is each dot product).
// The columns [j0, j1) of C: the driver splits a large product's columns across threads.
// ws: small_m_workspace(g) floats, owned by the calling thread (allocated before any parallel region).
template <class Arch>
std::size_t small_m_workspace(const Gemm& g) {
  const int64_t rows = g.trans_b ? GemmTraits<Arch>::small_dot_rows : 1;
  return static_cast<std::size_t>(rows * g.K + (g.trans_b ? 0 : g.N) + 15) / 16 * 16;
}

// C = alpha op(A) op(B) + beta C (+ bias), element by element: v = (op(A) op(B))[i, j]. A copy of
// Gemm's fields, so that the compiler need not reload them after every store to C (which, for all
// it knows, could alias them).
template <class Arch>
struct SmallStore {
  float alpha, beta;
  const float* bias;
  int64_t ldc;
  explicit SmallStore(const Gemm& g) : alpha(g.alpha), beta(g.beta), bias(g.bias), ldc(g.ldc) {}
  void operator()(float* C, int64_t i, int64_t j, float v) const {
    float& c = C[i * ldc + j];
    c = alpha * v + (beta == 0.0f ? 0.0f : beta * c) + (bias ? bias[j] : 0.0f);
  }
};

// Rows i0 .. i0+R-1 of C (their op(A) rows at a[0..R-1], contiguous), columns j .. j+NC-1,
// against B^T stored N x K: R x NC accumulators, each summed across its lanes at the end. (Not with
// xsimd 8.1's haddp, which reduces a vector's worth of accumulators at once: its AVX-512 version
// returned the sums in the wrong lanes here; docs/TOOLCHAIN.md.)
template <class Arch, int R, int NC>
[[gnu::always_inline]] inline void dot_tile(float* C, const float* const* a, const float* B, const Gemm& g,
                                            int64_t i0, int64_t j) {
  using V = Vec<Arch>;
  constexpr int64_t L = V::size;
  constexpr int T = R * NC;
  const int64_t K = g.K;
  const SmallStore<Arch> store(g);
  const float* b[NC];
  for (int c = 0; c < NC; ++c) b[c] = B + (j + c) * g.ldb;
  V s[T];
  for (int t = 0; t < T; ++t) s[t] = V(0.0f);
  int64_t k = 0;
  for (; k + L <= K; k += L) {
    V bv[NC];
    for (int c = 0; c < NC; ++c) bv[c] = V::load_unaligned(b[c] + k);
    for (int r = 0; r < R; ++r) {
      const V av = V::load_unaligned(a[r] + k);
      for (int c = 0; c < NC; ++c) s[r * NC + c] = xsimd::fma(av, bv[c], s[r * NC + c]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < NC; ++c) {
      float v = hsum<Arch>(s[r * NC + c]);
      for (int64_t kk = k; kk < K; ++kk) v += a[r][kk] * b[c][kk];
      store(C, i0 + r, j + c, v);
    }
}

// Rows i0 .. i0+R-1 of C, columns [j0, j1): 4-column tiles, then the 1-3 columns left one by one.
template <class Arch, int R>
void dot_rows(float* C, const float* const* a, const float* B, const Gemm& g, int64_t i0, int64_t j0,
              int64_t j1) {
  int64_t j = j0;
  for (; j + 4 <= j1; j += 4) dot_tile<Arch, R, 4>(C, a, B, g, i0, j);
  for (; j < j1; ++j) dot_tile<Arch, R, 1>(C, a, B, g, i0, j);
}

template <class Arch>
void gemm_small_m(float* C, const float* A, const float* B, const Gemm& g, float* ws, int64_t j0,
                  int64_t j1) {
  using V = Vec<Arch>;
  constexpr int64_t L = V::size;
  const int64_t M = g.M, K = g.K;
  if (g.trans_b) {
    constexpr int64_t RG = GemmTraits<Arch>::small_dot_rows;
    for (int64_t i0 = 0; i0 < M; i0 += RG) {
      const int64_t rows = std::min(RG, M - i0);
      const float* a[RG];
      for (int64_t r = 0; r < rows; ++r) {
        a[r] = A + (i0 + r) * g.lda;
        if (g.trans_a) {  // op(A)[i, k] = A[k * lda + i]: gather the row
          float* row = ws + r * K;
          for (int64_t k = 0; k < K; ++k) row[k] = A[k * g.lda + i0 + r];
          a[r] = row;
        }
      }
      switch (rows) {
        case 1:
          dot_rows<Arch, 1>(C, a, B, g, i0, j0, j1);
          break;
        case 2:
          dot_rows<Arch, 2>(C, a, B, g, i0, j0, j1);
          break;
        case 3:
          if constexpr (RG >= 3) dot_rows<Arch, 3>(C, a, B, g, i0, j0, j1);
          break;
        default:
          if constexpr (RG >= 4) dot_rows<Arch, 4>(C, a, B, g, i0, j0, j1);
          break;
      }
    }
    return;
  }
  const SmallStore<Arch> store(g);
  float* arow = ws;       // op(A)'s row i when A is transposed
  float* acc = arow + K;  // the accumulated row
  const int64_t n = j1 - j0;
  for (int64_t i = 0; i < M; ++i) {
    const float* a = A + i * g.lda;
    if (g.trans_a) {
      for (int64_t k = 0; k < K; ++k) arow[k] = A[k * g.lda + i];
      a = arow;
    }
    std::fill_n(acc, n, 0.0f);
    for (int64_t k = 0; k < K; ++k) {
      const V av(a[k]);
      const float* bk = B + k * g.ldb + j0;
      int64_t j = 0;
      for (; j + L <= n; j += L)
        xsimd::fma(av, V::load_unaligned(bk + j), V::load_unaligned(acc + j)).store_unaligned(acc + j);
      for (; j < n; ++j) acc[j] += a[k] * bk[j];
    }
    for (int64_t j = 0; j < n; ++j) store(C, i, j0 + j, acc[j]);
  }
}

}  // namespace tg::ops::simd
