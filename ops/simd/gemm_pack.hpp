// GEMM packing: copies of op(A) and op(B) blocks into the order the micro-kernels read them
// (ops/simd/gemm_micro.hpp). Packing reads an operand through its leading dimension and transpose
// flag, so a transposed operand costs nothing beyond the copy itself.
#pragma once

#include <algorithm>
#include <climits>

#include "ops/simd/common.hpp"
#include "ops/simd/gemm_traits.hpp"

namespace tg::ops::simd {

// Packs op(A)[0:mc, 0:kc] into ceil(mc / MR) panels. Panel p holds rows p*MR .. p*MR+MR-1
// k-major: dst[p*kc*MR + k*MR + i] = op(A)[p*MR + i, k]; rows past mc are 0.
// `a` points at op(A)[0, 0] of the block.
template <class Arch>
void pack_a(float* dst, const float* a, int64_t lda, bool trans, int64_t mc, int64_t kc) {
  constexpr int MR = GemmTraits<Arch>::MR;
  if (trans) {  // op(A)[i, k] = a[k * lda + i]: stored row k is column k of op(A), read once, in order
    for (int64_t k = 0; k < kc; ++k) {
      const float* src = a + k * lda;
      for (int64_t p0 = 0; p0 < mc; p0 += MR) {
        float* d = dst + p0 * kc + k * MR;  // panel p0 / MR starts at (p0 / MR) * kc * MR
        const int64_t rows = std::min<int64_t>(MR, mc - p0);
        int64_t i = 0;
        for (; i < rows; ++i) d[i] = src[p0 + i];
        for (; i < MR; ++i) d[i] = 0.0f;
      }
    }
    return;
  }
  for (int64_t p0 = 0; p0 < mc; p0 += MR, dst += kc * MR) {
    const int64_t rows = std::min<int64_t>(MR, mc - p0);
    // op(A)[i, k] = a[i * lda + k]: read each row contiguously, write with stride MR
    for (int64_t i = 0; i < MR; ++i) {
      if (i < rows) {
        const float* src = a + (p0 + i) * lda;
        for (int64_t k = 0; k < kc; ++k) dst[k * MR + i] = src[k];
      } else {
        for (int64_t k = 0; k < kc; ++k) dst[k * MR + i] = 0.0f;
      }
    }
  }
}

// Packs op(B)[0:kc, 0:nc] into ceil(nc / NR) panels: dst[p*kc*NR + k*NR + j] = op(B)[k, p*NR + j],
// columns past nc are 0. `b` points at op(B)[0, 0] of the block. Panels [p_lo, p_hi) only, so
// threads can share the work.
template <class Arch>
void pack_b(float* dst, const float* b, int64_t ldb, bool trans, int64_t kc, int64_t nc, int64_t p_lo,
            int64_t p_hi) {
  using V = Vec<Arch>;
  constexpr int NR = GemmTraits<Arch>::NR;
  constexpr int L = V::size;
  for (int64_t p = p_lo; p < p_hi; ++p) {
    float* d = dst + p * kc * NR;
    const int64_t j0 = p * NR, cols = std::min<int64_t>(NR, nc - j0);
    if constexpr (GemmTraits<Arch>::gather_b) {
      if (trans && cols == NR && ldb <= INT32_MAX / NR) {
        // op(B)[k, j] = b[j * ldb + k]: row k of the panel is column k of NR stored rows, one
        // vector gather per L of them (half the instructions of element copies on AVX2 / AVX-512)
        using I = xsimd::batch<int32_t, Arch>;
        alignas(64) int32_t lane[L];
        for (int l = 0; l < L; ++l) lane[l] = static_cast<int32_t>(l * ldb);
        const I idx = I::load_aligned(lane);
        for (int64_t k = 0; k < kc; ++k)
          for (int v = 0; v < NR; v += L)
            V::gather(b + (j0 + v) * ldb + k, idx).store_aligned(d + k * NR + v);
        continue;
      }
    }
    if (trans) {  // op(B)[k, j] = b[j * ldb + k]
      for (int64_t j = 0; j < NR; ++j) {
        if (j < cols) {
          const float* src = b + (j0 + j) * ldb;
          for (int64_t k = 0; k < kc; ++k) d[k * NR + j] = src[k];
        } else {
          for (int64_t k = 0; k < kc; ++k) d[k * NR + j] = 0.0f;
        }
      }
    } else if (cols == NR) {  // op(B)[k, j] = b[k * ldb + j]: whole rows of the panel, vector copies
      for (int64_t k = 0; k < kc; ++k)
        for (int v = 0; v < NR; v += L) V::load_unaligned(b + k * ldb + j0 + v).store_aligned(d + k * NR + v);
    } else {
      for (int64_t k = 0; k < kc; ++k) {
        int64_t j = 0;
        for (; j < cols; ++j) d[k * NR + j] = b[k * ldb + j0 + j];
        for (; j < NR; ++j) d[k * NR + j] = 0.0f;
      }
    }
  }
}

}  // namespace tg::ops::simd
