// The fused attention's products on vdpbf16ps (ops::AttentionBf16, kernels.hpp): the operands of
// each of its six products rounded to bf16 with the GEMM kernel's packing and multiplied on its
// 12 x 32 tiles (gemm_bf16_avx512.hpp), fp32 sums. The attention kernel itself (attention.hpp: the
// blocks of query rows, softmax, masks, dropout) is the avx512 TU's; it calls these through the
// table for the products only, so no function of that kernel is compiled with the bf16 flags.
// Included only by ops/arch_avx512_bf16.cpp; everything is in an anonymous namespace.
//
// Where the fp32 tiles read op(A) in place, the dot tiles need it as bf16 pairs: product() packs
// it per block of at most MC rows and KC values of k, as the GEMM does. B (K^T, V, dO, Q and the
// transposes the kernel multiplies by) is packed once per (row, head) pair, or once per block of
// query rows for dO and Q, by pack().
#pragma once

#include <algorithm>
#include <cstdint>

#include "ops/kernels.hpp"
#include "ops/simd/gemm_bf16_avx512.hpp"

namespace tg::ops::simd {
namespace {

void attention_bf16_pack(float* dst, const float* src, int64_t ld, bool trans, int64_t k_rows, int64_t n) {
  using K = Avx512DotKernel;
  K::pack_b(dst, Operand{src, DType::f32}, ld, trans, k_rows, n, 0, (n + K::NR - 1) / K::NR);
}

int64_t attention_bf16_tmp_floats(int64_t M, int64_t K) {
  using DK = Avx512DotKernel;
  return DK::a_block_floats(std::min<int64_t>(M, DK::MC), std::min<int64_t>(K, DK::KC));
}

// C[0:M, 0:N] = alpha op(A) B + beta C over K blocks of KC and row blocks of MC, all N columns for
// each packed block of A. When K is odd and B was packed from more rows than K, the last pair of
// each panel holds (B[K - 1], B[K]): A's pack pads its half with 0, but 0 * B[K] is NaN where B[K]
// is (a key no row of the block sees, in a causal block), so that half is zeroed for the call and
// restored after, up to 4 panels at a time (the products with such a K have d_head columns).
// (tg::ops::operand is not called here: an inline function with external linkage compiled with
// this TU's flags could stand in for the other TUs' copy.)
void attention_bf16_product(int64_t M, int64_t N, int64_t K, const float* a, int64_t lda, bool trans_a,
                            float* b, int64_t b_k_rows, float* c, int64_t ldc, float alpha, float beta,
                            float* tmp) {
  using DK = Avx512DotKernel;
  constexpr int64_t NR = DK::NR;
  const int64_t panel = NR * DK::pairs(b_k_rows);  // 4-byte units per packed panel
  uint32_t* const bw = reinterpret_cast<uint32_t*>(b);
  uint32_t saved[4][NR];  // the last pairs' high halves of up to 4 panels at a time (d_head <= 128)
  const bool odd_tail = K % 2 == 1 && b_k_rows > K;
  const int64_t chunk = odd_tail ? 4 * NR : std::max<int64_t>(N, 1);  // without a tail: A packed once
  for (int64_t j0 = 0; j0 < N; j0 += chunk) {
    const int64_t jn = std::min<int64_t>(N - j0, chunk);
    if (odd_tail)
      for (int64_t j = 0; j < jn; j += NR) {
        uint32_t* last = bw + (j0 + j) / NR * panel + (K / 2) * NR;
        for (int64_t l = 0; l < NR; ++l) saved[j / NR][l] = last[l], last[l] &= 0xffffu;
      }
    for (int64_t i0 = 0; i0 < M; i0 += DK::MC) {
      const int64_t mc = std::min<int64_t>(DK::MC, M - i0);
      for (int64_t k0 = 0; k0 < K; k0 += DK::KC) {
        const int64_t kc = std::min<int64_t>(DK::KC, K - k0);
        const float* at = trans_a ? a + k0 * lda + i0 : a + i0 * lda + k0;
        const DK::ABlock ab = DK::pack_a(tmp, Operand{at, DType::f32}, lda, trans_a, mc, kc);
        const Epilogue e{alpha, k0 == 0 ? beta : 1.0f, nullptr};
        for (int64_t j = j0; j < j0 + jn; j += NR) {
          const float* bp = b + j / NR * panel + (k0 / 2) * NR;
          for (int64_t ir = 0; ir < mc; ir += DK::MR)
            DK::tile(ab, ir, kc, bp, c + (i0 + ir) * ldc + j, ldc, std::min<int64_t>(DK::MR, mc - ir), NR, e);
        }
      }
    }
    if (odd_tail)
      for (int64_t j = 0; j < jn; j += NR) {
        uint32_t* last = bw + (j0 + j) / NR * panel + (K / 2) * NR;
        for (int64_t l = 0; l < NR; ++l) last[l] = saved[j / NR][l];
      }
  }
}

}  // namespace
}  // namespace tg::ops::simd
