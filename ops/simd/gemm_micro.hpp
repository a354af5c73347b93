// GEMM micro-kernels: one MR x NR register tile of C per call, and the store of a tile (Epilogue,
// gemm_plan.hpp).
// Four kernels, chosen per tile by the driver (ops/simd/gemm.hpp, loop 1):
//   micro_kernel_direct       A read in place through lda (no packing), MR rows
//   micro_kernel_direct_rows  the same for the last, partial row panel, at exactly its height
//   micro_kernel              A from a packed MR x kc panel (ops/simd/gemm_pack.hpp): the same
//                             kernel, the panel being A stored K x MR
//   edge_tile                 a tile cut by the matrix edge: micro_kernel into a temporary, merged
// B is a packed panel (rows NR apart) or, for few-row products, read in place (rows ldb apart).
#pragma once

#include <utility>

#include "ops/simd/common.hpp"
#include "ops/simd/gemm_plan.hpp"
#include "ops/simd/gemm_traits.hpp"
#include "ops/simd/transpose.hpp"

namespace tg::ops::simd {

// beta * c + t for one element of a tile stored outside the vector epilogue (edge tiles, C^T's
// tiles through a buffer), rounded as the vector epilogue rounds it (the arch's fma: one rounding
// where it fuses, two where it does not), so an element never depends on which store wrote it nor
// on whether the compiler contracts a scalar multiply-add.
template <class Arch>
inline float beta_c_plus(float beta, float c, float t) {
  using V = Vec<Arch>;
  return xsimd::fma(V(beta), V(c), V(t)).get(0);
}

// The store of a tile of C^T (Epilogue::trans; alpha and bias already applied): its element
// (i, j) to c[j * ldc + i], so each of its NR columns is MR consecutive floats of a row of C. On
// AVX2's 6 x 16 tile, each 8-lane half goes through an 8 x 8 in-register transpose (two rows of
// zeros below the six) and every row of C gets its 6 floats as a 4- and a 2-float move; elsewhere
// (other arches, the partial row panels) through a buffer.
template <class Arch, int MR>
inline void store_tile_transposed(Vec<Arch> (&acc)[MR][GemmTraits<Arch>::NV], float* c, int64_t ldc,
                                  float beta) {
  using V = Vec<Arch>;
  constexpr int NV = GemmTraits<Arch>::NV, L = V::size, NR = NV * L;
#if defined(__AVX2__) && defined(__FMA__)
  if constexpr (std::is_base_of_v<xsimd::avx2, Arch> && L == 8 && MR == 6) {
    const __m256 zero = _mm256_setzero_ps(), vbeta = _mm256_set1_ps(beta);
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      // column l of the half: lanes 0..5 = rows 0..5 of the tile (rows 6 and 7 zeros, whose
      // unpacks GCC 12 folds away: the AVX2 object has as many vunpcklps as the hand-written
      // transpose it replaced)
      __m256 col[8] = {acc[0][v], acc[1][v], acc[2][v], acc[3][v], acc[4][v], acc[5][v], zero, zero};
      transpose_regs(col);
#pragma GCC unroll 8
      for (int l = 0; l < 8; ++l) {
        float* cj = c + (v * 8 + l) * ldc;
        __m128 lo = _mm256_castps256_ps128(col[l]), hi = _mm256_extractf128_ps(col[l], 1);
        if (beta != 0.0f) {
          const __m128 old_lo = _mm_loadu_ps(cj);
          // (a 64-bit load through __m128i_u: C's rows need not be 8-byte aligned)
          const __m128 old_hi = _mm_castsi128_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(cj + 4)));
          lo = _mm_fmadd_ps(_mm256_castps256_ps128(vbeta), old_lo, lo);
          hi = _mm_fmadd_ps(_mm256_castps256_ps128(vbeta), old_hi, hi);
        }
        _mm_storeu_ps(cj, lo);
        _mm_storel_epi64(reinterpret_cast<__m128i*>(cj + 4), _mm_castps_si128(hi));
      }
    }
    return;
  }
#endif
  alignas(64) float t[MR * NR];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[i][v].store_aligned(t + i * NR + v * L);
  for (int j = 0; j < NR; ++j) {
    float* cj = c + j * ldc;
    for (int i = 0; i < MR; ++i)
      cj[i] = beta == 0.0f ? t[i * NR + j] : beta_c_plus<Arch>(beta, cj[i], t[i * NR + j]);
  }
}

// The micro-kernels' store of an MR x NR register tile, whole vectors.
template <class Arch, int MR>
inline void store_tile(Vec<Arch> (&acc)[MR][GemmTraits<Arch>::NV], float* c, int64_t ldc, const Epilogue& e) {
  using V = Vec<Arch>;
  constexpr int NV = GemmTraits<Arch>::NV, L = V::size;
  const float beta = e.beta, *const bias = e.bias;
  if (e.alpha != 1.0f) {
    const V va(e.alpha);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[i][v] *= va;
  }
  if (e.trans) {  // a tile of C^T: bias per row
    if (bias)
#pragma GCC unroll 16
      for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) acc[i][v] += V(bias[i]);
    return store_tile_transposed<Arch, MR>(acc, c, ldc, beta);
  }
  if (bias) {
    V bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) bv[v] = V::load_unaligned(bias + v * L);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[i][v] += bv[v];
  }
  const V vbeta(beta);
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      float* ci = c + i * ldc + v * L;
      if (beta == 0.0f)
        acc[i][v].store_unaligned(ci);
      else if (beta == 1.0f)
        (acc[i][v] + V::load_unaligned(ci)).store_unaligned(ci);
      else
        xsimd::fma(vbeta, V::load_unaligned(ci), acc[i][v]).store_unaligned(ci);
    }
  }
}

// The micro-kernel: C := alpha * op(A) * B_panel + beta * C (+ bias), as Epilogue e says, on an
// MR x NR tile c with row stride ldc. b is a kc x NR panel of B whose rows are b_step apart (NR for
// a packed panel; ldb when B is read in place, see gemm_single). op(A) is MR x kc, read through lda:
//   kTrans   op(A)[i, k] = a[k * lda + i]: A stored K x M, the MR values of one k contiguous and lda
//            apart from one k to the next (a packed panel is this layout with lda = MR)
//   else     op(A)[i, k] = a[i * lda + k]: MR rows, each read along k
// Reading A in place saves pack_a's write and re-read of every element of A; the rows of one
// MR x kc block stay in L1 across the NR panels. MR: the tile's rows, GemmTraits' MR but for the
// last row panel of A (fewer rows, no padding). The MR x NR accumulators live in registers
// (MR * NR / lanes of them); per k it loads NR / lanes vectors of B, broadcasts MR values of A and
// issues MR * NR / lanes FMAs.
// kPrefetchB > 0: B is a packed panel streaming from L2 (the a_in_l1 loop order of gemm.hpp), and
// each k also prefetches the panel's row kPrefetchB floats ahead into L1.
template <class Arch, bool kTrans, int MR = GemmTraits<Arch>::MR, int kPrefetchB = 0>
void micro_kernel_direct(int64_t kc, const float* __restrict a, int64_t lda, const float* __restrict b,
                         int64_t b_step, float* c, int64_t ldc, const Epilogue& e) {
  using V = Vec<Arch>;
  constexpr int NV = GemmTraits<Arch>::NV;
  constexpr int L = V::size;
  V acc[MR][NV];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[i][v] = V(0.0f);
      // C's tile is needed after the K loop: start fetching it now (one line per row and vector)
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) __builtin_prefetch(c + i * ldc + v * L, 1);
  const int64_t step_k = kTrans ? lda : 1, step_i = kTrans ? 1 : lda;
#pragma GCC unroll 4
  for (int64_t k = 0; k < kc; ++k, a += step_k, b += b_step) {
    if constexpr (kPrefetchB > 0) {
#pragma GCC unroll 4
      for (int line = 0; line < NV * L; line += 16) __builtin_prefetch(b + kPrefetchB + line);
    }
    V bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) bv[v] = V::load_unaligned(b + v * L);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const V ai(a[i * step_i]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[i][v] = xsimd::fma(ai, bv[v], acc[i][v]);
    }
  }
  store_tile<Arch, MR>(acc, c, ldc, e);
}

// The micro-kernel on a packed MR x kc panel of A (pack_a, 64-byte aligned).
template <class Arch>
void micro_kernel(int64_t kc, const float* a, const float* b, int64_t b_step, float* c, int64_t ldc,
                  const Epilogue& e) {
  micro_kernel_direct<Arch, true>(kc, a, GemmTraits<Arch>::MR, b, b_step, c, ldc, e);
}

// The same with B's packed panel streaming from L2 (gemm.hpp's a_in_l1 order): B prefetched ahead.
template <class Arch>
void micro_kernel_streaming_b(int64_t kc, const float* a, const float* b, float* c, int64_t ldc,
                              const Epilogue& e) {
  using T = GemmTraits<Arch>;
  micro_kernel_direct<Arch, true, T::MR, T::a_in_l1_prefetch_b>(kc, a, T::MR, b, T::NR, c, ldc, e);
}

// micro_kernel_direct for the last row panel, mr (< MR) rows: one instantiation per row count.
template <class Arch, bool kTrans, int... Rows>
void micro_kernel_direct_rows(int64_t mr, std::integer_sequence<int, Rows...>, int64_t kc, const float* a,
                              int64_t lda, const float* b, int64_t b_step, float* c, int64_t ldc,
                              const Epilogue& e) {
  (void)((mr == Rows + 1
              ? (micro_kernel_direct<Arch, kTrans, Rows + 1>(kc, a, lda, b, b_step, c, ldc, e), true)
              : false) ||
         ...);
}

// An edge tile (mr < MR or nr < NR): run the full micro-kernel into a temporary tile, then merge
// the valid part into C with the same epilogue (whole vectors while a row has them).
template <class Arch>
void edge_tile(int64_t kc, const float* a, const float* b, int64_t b_step, float* c, int64_t ldc,
               const Epilogue& e, int64_t mr, int64_t nr) {
  using V = Vec<Arch>;
  constexpr int MR = GemmTraits<Arch>::MR, NR = GemmTraits<Arch>::NR, L = V::size;
  alignas(64) float tile[MR * NR];
  micro_kernel<Arch>(kc, a, b, b_step, tile, NR, Epilogue{e.alpha, 0.0f, nullptr});
  const float beta = e.beta;
  if (e.trans) {  // a tile of C^T: (i, j) to c[j * ldc + i], bias per row
    for (int64_t i = 0; i < mr; ++i) {
      const float b = e.bias ? e.bias[i] : 0.0f;
      for (int64_t j = 0; j < nr; ++j) {
        float& cji = c[j * ldc + i];
        cji = beta == 0.0f ? tile[i * NR + j] + b : beta_c_plus<Arch>(beta, cji, tile[i * NR + j] + b);
      }
    }
    return;
  }
  for (int64_t i = 0; i < mr; ++i) {
    float* t = tile + i * NR;
    if (e.bias)
      for (int64_t j = 0; j < nr; ++j) t[j] += e.bias[j];
    float* ci = c + i * ldc;
    int64_t j = 0;
    for (; j + L <= nr; j += L) {
      const V tv = V::load_aligned(t + j);
      (beta == 0.0f ? tv : xsimd::fma(V(beta), V::load_unaligned(ci + j), tv)).store_unaligned(ci + j);
    }
    for (; j < nr; ++j) ci[j] = beta == 0.0f ? t[j] : beta_c_plus<Arch>(beta, ci[j], t[j]);
  }
}

// C = beta * C (+ bias) when K == 0 (the product is empty); beta == 0 writes zeros (NaNs in C do not
// propagate). trans: the M x N product is C^T (gemm.hpp's trans_c), so element (i, j) is
// c[j * ldc + i] and bias[i] its bias. Arch only names the calling TU's copy (the bf16 driver passes
// its kernel type, which has internal linkage there).
template <class Arch>
void scale_c(float* c, int64_t M, int64_t N, int64_t ldc, float beta, const float* bias, bool trans = false) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      float& cij = trans ? c[j * ldc + i] : c[i * ldc + j];
      cij = (beta == 0.0f ? 0.0f : beta * cij) + (bias ? bias[trans ? i : j] : 0.0f);
    }
}

}  // namespace tg::ops::simd
