// The bf16 GEMM kernel on Arm's BFMMLA (FEAT_BF16), for the gemm_bf16 driver (gemm_bf16.hpp).
// Included only by ops/arch_neon_bf16.cpp, compiled with -march=armv8.2-a+bf16 and entered only
// when the kernel reports HWCAP2_BF16 (ops/dispatch.cpp); everything here is in an anonymous
// namespace, so no function compiled with +bf16 is shared with another TU.
//
// BFMMLA (vbfmmlaq_f32) multiplies a 2x4 bf16 block of A by a 4x2 block of B into a 2x2 fp32 block:
//   acc = [c00 c01 c10 c11] += A[2 rows][4 k] * B[4 k][2 cols]
// with A's block and B's block each one 128-bit register of 8 bf16 (A row-major: row 0's 4 k then
// row 1's; B column-major: column 0's 4 k then column 1's). So K is packed in fours: packed A
// holds, per k quad, MR / 2 row-pair blocks; packed B, per k quad, NR / 2 column-pair blocks; K is
// padded to a multiple of 4 with zeros. The 8 x 8 tile takes 16 accumulators, 4 A and 4 B vectors
// (24 of the 32 registers) and 16 BFMMLA per k quad (256 multiply-adds).
//
// Tested under qemu-aarch64 -cpu max (tools/test_neon.sh); its speed on real hardware is
// unmeasured. Packing rounds with the scalar integer rounding (to_bf16's bits exactly) and is not
// vectorized.
#pragma once

#include <arm_neon.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "ops/simd/gemm_bf16.hpp"

namespace tg::ops::simd {
namespace {

inline uint16_t neon_bits(float x) {  // to_bf16(x).bits
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
inline uint16_t neon_bits(uint16_t x) {
  return x;
}

struct NeonDotKernel {
  static constexpr bool few_rows_path = false;  // the table sends them to the widen kernel
  static constexpr Split2d split_2d = Split2d::never;
  static void begin_thread() {}
  static constexpr int MR = 8, NR = 8;
  static constexpr int64_t MC = 128, KC = 512, NC = 2048;

  static int64_t quads(int64_t kc) { return (kc + 3) / 4; }
  // 8 bf16 (16 bytes, 4 floats) per block
  using ABlock = const float*;  // always packed
  static int64_t a_block_floats(int64_t mc, int64_t kc) {
    return (mc + MR - 1) / MR * (MR / 2) * quads(kc) * 4;
  }
  static int64_t b_panel_floats(int64_t kc) { return (NR / 2) * quads(kc) * 4; }

  // dst[(q * MR/2 + r) * 8 + h * 4 + t] = op(A)[i0 + 2r + h, 4q + t] (0 past mc or kc)
  template <class Src>
  static void pack_a_typed(uint16_t* dst, const Src* a, int64_t lda, bool trans, int64_t mc, int64_t kc) {
    const int64_t nq = quads(kc);
    for (int64_t i0 = 0; i0 < mc; i0 += MR, dst += MR * nq * 4)
      for (int64_t q = 0; q < nq; ++q)
        for (int r = 0; r < MR / 2; ++r)
          for (int h = 0; h < 2; ++h)
            for (int t = 0; t < 4; ++t) {
              const int64_t i = i0 + 2 * r + h, k = 4 * q + t;
              dst[(q * (MR / 2) + r) * 8 + h * 4 + t] =
                  i < mc && k < kc ? neon_bits(trans ? a[k * lda + i] : a[i * lda + k]) : uint16_t{0};
            }
  }
  static ABlock pack_a(float* dst, const Operand& a, int64_t lda, bool trans, int64_t mc, int64_t kc) {
    uint16_t* d = reinterpret_cast<uint16_t*>(dst);
    with_storage(a, [&](const auto* src) { pack_a_typed(d, src, lda, trans, mc, kc); });
    return dst;
  }

  // panel p: dst[(q * NR/2 + c) * 8 + h * 4 + t] = op(B)[4q + t, p * NR + 2c + h] (0 past kc or nc)
  template <class Src>
  static void pack_b_typed(uint16_t* dst, const Src* b, int64_t ldb, bool trans, int64_t kc, int64_t nc,
                           int64_t p_lo, int64_t p_hi) {
    const int64_t nq = quads(kc);
    for (int64_t p = p_lo; p < p_hi; ++p) {
      uint16_t* d = dst + p * NR * nq * 4;
      for (int64_t q = 0; q < nq; ++q)
        for (int c = 0; c < NR / 2; ++c)
          for (int h = 0; h < 2; ++h)
            for (int t = 0; t < 4; ++t) {
              const int64_t j = p * NR + 2 * c + h, k = 4 * q + t;
              d[(q * (NR / 2) + c) * 8 + h * 4 + t] =
                  j < nc && k < kc ? neon_bits(trans ? b[j * ldb + k] : b[k * ldb + j]) : uint16_t{0};
            }
    }
  }
  static void pack_b(float* dst, const Operand& b, int64_t ldb, bool trans, int64_t kc, int64_t nc,
                     int64_t p_lo, int64_t p_hi) {
    uint16_t* d = reinterpret_cast<uint16_t*>(dst);
    with_storage(b, [&](const auto* src) { pack_b_typed(d, src, ldb, trans, kc, nc, p_lo, p_hi); });
  }

  static void tile(ABlock ap, int64_t ir, int64_t kc, const float* bpanel, float* c, int64_t ldc, int64_t mr,
                   int64_t nr, const Epilogue& e) {
    const int64_t nq = quads(kc);
    const uint16_t* a = reinterpret_cast<const uint16_t*>(ap) + ir * nq * 4;  // panel ir / MR
    const uint16_t* b = reinterpret_cast<const uint16_t*>(bpanel);
    float32x4_t acc[MR / 2][NR / 2];
    for (int r = 0; r < MR / 2; ++r)
      for (int cc = 0; cc < NR / 2; ++cc) acc[r][cc] = vdupq_n_f32(0.0f);
    for (int64_t q = 0; q < nq; ++q, a += MR * 4, b += NR * 4) {
      bfloat16x8_t av[MR / 2], bv[NR / 2];
      for (int r = 0; r < MR / 2; ++r) av[r] = vreinterpretq_bf16_u16(vld1q_u16(a + r * 8));
      for (int cc = 0; cc < NR / 2; ++cc) bv[cc] = vreinterpretq_bf16_u16(vld1q_u16(b + cc * 8));
      for (int r = 0; r < MR / 2; ++r)
        for (int cc = 0; cc < NR / 2; ++cc) acc[r][cc] = vbfmmlaq_f32(acc[r][cc], av[r], bv[cc]);
    }
    // acc[r][cc] = [C(2r, 2cc) C(2r, 2cc+1) C(2r+1, 2cc) C(2r+1, 2cc+1)]: rows from 64-bit halves
    alignas(16) float t[MR][NR];
    for (int r = 0; r < MR / 2; ++r)
      for (int cc = 0; cc < NR / 2; cc += 2) {
        const float64x2_t x = vreinterpretq_f64_f32(acc[r][cc]), y = vreinterpretq_f64_f32(acc[r][cc + 1]);
        vst1q_f32(&t[2 * r][2 * cc], vreinterpretq_f32_f64(vzip1q_f64(x, y)));
        vst1q_f32(&t[2 * r + 1][2 * cc], vreinterpretq_f32_f64(vzip2q_f64(x, y)));
      }
    for (int64_t i = 0; i < mr; ++i) {
      float* ci = c + i * ldc;
      for (int64_t j = 0; j < nr; ++j) {
        const float x = e.alpha * t[i][j] + (e.bias ? e.bias[j] : 0.0f);
        ci[j] = e.beta == 0.0f ? x : e.beta * ci[j] + x;
      }
    }
  }
};

}  // namespace
}  // namespace tg::ops::simd
