// GEMM packing: copies of op(A) and op(B) blocks into the order the micro-kernels read them
// (ops/simd/gemm_micro.hpp). Packing reads an operand through its leading dimension and transpose
// flag, so a transposed operand costs nothing beyond the copy itself.
#pragma once

#include <algorithm>

#include "ops/simd/common.hpp"
#include "ops/simd/gemm_traits.hpp"
#include "ops/simd/transpose.hpp"

namespace tg::ops::simd {

// Packs op(A)[0:mc, 0:kc] into ceil(mc / MR) panels. Panel p holds rows p*MR .. p*MR+MR-1
// k-major: dst[p*kc*MR + k*MR + i] = op(A)[p*MR + i, k]; rows past mc are 0.
// `a` points at op(A)[0, 0] of the block.
template <class Arch>
void pack_a(float* dst, const float* a, int64_t lda, bool trans, int64_t mc, int64_t kc) {
  constexpr int MR = GemmTraits<Arch>::MR, L = Vec<Arch>::size;
  // Where a panel's MR values fit one vector (AVX-512: 12 of 16 lanes, AVX2: 6 of 8), they move
  // as masked vectors: a panel's rows are short copies, its transposes in-register L x L tiles.
  constexpr bool vector_panels = has_transpose_tile<Arch> && MR <= L;
  if (trans) {  // op(A)[i, k] = a[k * lda + i]: stored row k is column k of op(A), read once, in order
    for (int64_t k = 0; k < kc; ++k) {
      const float* src = a + k * lda;
      for (int64_t p0 = 0; p0 < mc; p0 += MR) {
        float* d = dst + p0 * kc + k * MR;  // panel p0 / MR starts at (p0 / MR) * kc * MR
        const int64_t rows = std::min<int64_t>(MR, mc - p0);
        if constexpr (vector_panels) {
          store_partial<Arch>(d, load_partial<Arch>(src + p0, rows, 0.0f), MR);
        } else {
          int64_t i = 0;
          for (; i < rows; ++i) d[i] = src[p0 + i];
          for (; i < MR; ++i) d[i] = 0.0f;
        }
      }
    }
    return;
  }
  for (int64_t p0 = 0; p0 < mc; p0 += MR, dst += kc * MR) {
    const int64_t rows = std::min<int64_t>(MR, mc - p0);
    // op(A)[i, k] = a[i * lda + k]: the panel's rows, L values of k at a time, transposed in
    // registers (rows past mc as zeros); the last kc % L values of k, and arches without the
    // tile, element by element (read each row contiguously, write with stride MR)
    int64_t k0 = 0;
    if constexpr (vector_panels)
      for (; k0 + L <= kc; k0 += L)
        transpose_tile_part<Arch>(a + p0 * lda + k0, lda, rows, dst + k0 * MR, MR, MR);
    for (int64_t i = 0; i < MR; ++i) {
      if (i < rows) {
        const float* src = a + (p0 + i) * lda;
        for (int64_t k = k0; k < kc; ++k) dst[k * MR + i] = src[k];
      } else {
        for (int64_t k = k0; k < kc; ++k) dst[k * MR + i] = 0.0f;
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
  if (!trans) {
    // op(B)[k, j] = b[k * ldb + j]: the whole panels row by row, each row of B read once and
    // contiguously across them (a panel at a time reads NR floats per row, ldb apart: strides
    // the hardware prefetchers do not follow, so every row was a miss)
    const int64_t p_full = std::min(p_hi, nc / NR);
    if (p_lo < p_full) {
      for (int64_t k = 0; k < kc; ++k) {
        const float* src = b + k * ldb;
        float* d = dst + k * NR;
        for (int64_t p = p_lo; p < p_full; ++p)
          for (int v = 0; v < NR; v += L)
            V::load_unaligned(src + p * NR + v).store_aligned(d + p * kc * NR + v);
      }
      p_lo = p_full;
    }
  }
  for (int64_t p = p_lo; p < p_hi; ++p) {
    float* d = dst + p * kc * NR;
    const int64_t j0 = p * NR, cols = std::min<int64_t>(NR, nc - j0);
    if constexpr (has_transpose_tile<Arch>) {
      if (trans && cols == NR) {
        // op(B)[k, j] = b[j * ldb + k]: L x L tiles of L stored rows (panel columns) by L values of k,
        // transposed in registers; the last kc % L rows of the panel element by element
        int64_t k = 0;
        for (; k + L <= kc; k += L)
          for (int v = 0; v < NR; v += L)
            transpose_tile<Arch>(b + (j0 + v) * ldb + k, ldb, d + k * NR + v, NR);
        for (; k < kc; ++k)
          for (int64_t j = 0; j < NR; ++j) d[k * NR + j] = b[(j0 + j) * ldb + k];
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
