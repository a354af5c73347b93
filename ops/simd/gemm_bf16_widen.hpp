// The bf16 GEMM on any arch: operands rounded to bf16 (fp32 storage) or widened from it (bf16
// storage) as they are packed, into the fp32 GEMM's packed layouts, then the fp32 micro-kernel
// (gemm_micro.hpp). The products of bf16 values are exact in fp32, so this is the bf16 GEMM's math
// at fp32 speed; a bf16 operand moves half the bytes of an fp32 one. The kernel of the
// gemm_bf16 driver (gemm_bf16.hpp) on every arch, and on those with bf16 dot-product instructions
// when the CPU lacks them (an AVX-512 CPU without AVX512_BF16, an Arm core without FEAT_BF16).
#pragma once

#include <algorithm>

#include "ops/simd/bf16.hpp"
#include "ops/simd/gemm_bf16.hpp"
#include "ops/simd/gemm_micro.hpp"
#include "ops/simd/gemm_pack.hpp"
#include "ops/simd/gemm_traits.hpp"

namespace tg::ops::simd {

// One element of an operand as the fp32 value of its bf16 rounding: Src = float (rounded) or
// uint16_t (bf16 bits, widened).
template <class Arch, class Src>
inline float widened(const Src* p, int64_t i) {
  if constexpr (std::is_same_v<Src, float>)
    return round_to_bf16<Arch>(p[i]);
  else
    return bf16_value<Arch>(p[i]);
}
// L consecutive elements as fp32 bf16 values.
template <class Arch, class Src>
inline Vec<Arch> widened_vec(const Src* p) {
  if constexpr (std::is_same_v<Src, float>)
    return round_to_bf16<Arch>(Vec<Arch>::load_unaligned(p));
  else
    return load_bf16<Arch>(p);
}

// pack_a's layout (gemm_pack.hpp): MR-row panels, k-major, rows past mc zero.
template <class Arch, class Src>
void pack_a_widen(float* dst, const Src* a, int64_t lda, bool trans, int64_t mc, int64_t kc) {
  constexpr int MR = GemmTraits<Arch>::MR;
  for (int64_t p0 = 0; p0 < mc; p0 += MR, dst += kc * MR) {
    const int64_t rows = std::min<int64_t>(MR, mc - p0);
    for (int64_t k = 0; k < kc; ++k) {
      float* d = dst + k * MR;
      int64_t i = 0;
      if (trans)  // op(A)[i, k] = a[k * lda + i]
        for (; i < rows; ++i) d[i] = widened<Arch>(a, k * lda + p0 + i);
      else
        for (; i < rows; ++i) d[i] = widened<Arch>(a, (p0 + i) * lda + k);
      for (; i < MR; ++i) d[i] = 0.0f;
    }
  }
}

// pack_b's layout: NR-column panels, k-major, columns past nc zero; panels [p_lo, p_hi).
template <class Arch, class Src>
void pack_b_widen(float* dst, const Src* b, int64_t ldb, bool trans, int64_t kc, int64_t nc, int64_t p_lo,
                  int64_t p_hi) {
  using V = Vec<Arch>;
  constexpr int NR = GemmTraits<Arch>::NR, L = V::size;
  for (int64_t p = p_lo; p < p_hi; ++p) {
    float* d = dst + p * kc * NR;
    const int64_t j0 = p * NR, cols = std::min<int64_t>(NR, nc - j0);
    if (!trans && cols == NR) {  // op(B)[k, j] = b[k * ldb + j]: whole rows of the panel, vectors
      for (int64_t k = 0; k < kc; ++k)
        for (int v = 0; v < NR; v += L) widened_vec<Arch>(b + k * ldb + j0 + v).store_aligned(d + k * NR + v);
      continue;
    }
    for (int64_t k = 0; k < kc; ++k) {
      int64_t j = 0;
      if (trans)  // op(B)[k, j] = b[j * ldb + k]
        for (; j < cols; ++j) d[k * NR + j] = widened<Arch>(b, (j0 + j) * ldb + k);
      else
        for (; j < cols; ++j) d[k * NR + j] = widened<Arch>(b, k * ldb + j0 + j);
      for (; j < NR; ++j) d[k * NR + j] = 0.0f;
    }
  }
}

// x[0:n] = round_to_bf16(x[0:n]), in place.
template <class Arch>
void round_in_place(float* x, int64_t n) {
  using V = Vec<Arch>;
  int64_t i = 0;
  for (; i + int64_t(V::size) <= n; i += V::size)
    round_to_bf16<Arch>(V::load_unaligned(x + i)).store_unaligned(x + i);
  for (; i < n; ++i) x[i] = round_to_bf16<Arch>(x[i]);
}

template <class A>
struct WidenKernel {
  using Arch = A;
  static constexpr bool few_rows_path = true;  // ops::bf16_few_rows: B read in place (gemm_small.hpp)
  static constexpr Split2d split_2d = Split2d::never;
  static void begin_thread() {}
  using T = GemmTraits<Arch>;
  static constexpr int MR = T::MR, NR = T::NR;
  static constexpr int64_t MC = T::MC, KC = T::KC, NC = T::NC;

  using ABlock = const float*;  // always packed
  static int64_t a_block_floats(int64_t mc, int64_t kc) { return (mc + MR - 1) / MR * MR * kc; }
  static int64_t b_panel_floats(int64_t kc) { return kc * NR; }

  // fp32 operands: the fp32 GEMM's packing (vector copies and in-register transposes), then one vector pass
  // rounding the packed block in place; bf16 operands: widened element by element (rows of B by vectors).
  static ABlock pack_a(float* dst, const Operand& a, int64_t lda, bool trans, int64_t mc, int64_t kc) {
    if (a.dtype == DType::bf16) {
      pack_a_widen<Arch>(dst, static_cast<const uint16_t*>(a.data), lda, trans, mc, kc);
    } else {
      simd::pack_a<Arch>(dst, static_cast<const float*>(a.data), lda, trans, mc, kc);
      round_in_place<Arch>(dst, a_block_floats(mc, kc));
    }
    return dst;
  }
  static void pack_b(float* dst, const Operand& b, int64_t ldb, bool trans, int64_t kc, int64_t nc,
                     int64_t p_lo, int64_t p_hi) {
    if (b.dtype == DType::bf16) {
      pack_b_widen<Arch>(dst, static_cast<const uint16_t*>(b.data), ldb, trans, kc, nc, p_lo, p_hi);
    } else {
      simd::pack_b<Arch>(dst, static_cast<const float*>(b.data), ldb, trans, kc, nc, p_lo, p_hi);
      round_in_place<Arch>(dst + p_lo * kc * NR, (p_hi - p_lo) * kc * NR);
    }
  }
  // Panel ir / MR of the packed block starts at (ir / MR) * kc * MR = ir * kc.
  static void tile(ABlock ap, int64_t ir, int64_t kc, const float* bpanel, float* c, int64_t ldc, int64_t mr,
                   int64_t nr, const Epilogue& e) {
    if (mr == MR && nr == NR)
      micro_kernel<Arch>(kc, ap + ir * kc, bpanel, NR, c, ldc, e);
    else
      edge_tile<Arch>(kc, ap + ir * kc, bpanel, NR, c, ldc, e, mr, nr);
  }
};

// The KernelTable entry of every arch's table (the dot-product tables replace it).
template <class Arch>
void gemm_bf16(float* C, const Operand& A, const Operand& B, const Gemm& g) {
  gemm_bf16_driver<WidenKernel<Arch>>(C, A, B, g);
}

}  // namespace tg::ops::simd
