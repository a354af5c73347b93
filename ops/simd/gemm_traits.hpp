// GEMM block sizes per arch (BLIS's "blocksizes"), in one table so they can be compared.
//   MR x NR  register tile of the micro-kernel: MR * NR / lanes accumulators plus NR / lanes B
//            vectors plus one broadcast A value must fit the vector registers.
//   KC       K block: one B micro-panel (KC x NR floats) stays in L1 while loop 1 streams A panels.
//   MC       M block: the packed A block (MC x KC) stays in L2.
//   NC       N block: the packed B block (KC x NC) stays in L3 (shared by the threads).
// Only arch tags are named here (no batch types), so every arch TU can include this file.
#pragma once

#include <xsimd/xsimd.hpp>

#include <cstdint>

namespace tg::ops::simd {

template <class Arch>
struct GemmTraits;

// 32 zmm registers: 12 x 2 accumulators + 2 B vectors + 1 broadcast = 27 (14 rows fit too, but
// 12 wastes less padding on the power-of-two row counts of attention and batches of tokens).
template <>
struct GemmTraits<xsimd::avx512bw> {
  static constexpr int MR = 12, NV = 2, NR = 32;
  static constexpr int64_t MC = 264, KC = 256, NC = 4096;
  static constexpr bool gather_b = true;  // pack a transposed B with vector gathers
};

// 16 ymm registers: 6 x 2 accumulators + 2 B vectors + 1 broadcast = 15 (the classic 6x16).
template <>
struct GemmTraits<xsimd::fma3<xsimd::avx2>> {
  static constexpr int MR = 6, NV = 2, NR = 16;
  static constexpr int64_t MC = 144, KC = 256, NC = 4096;
  static constexpr bool gather_b = true;
};

// 16 xmm registers, no FMA (multiply then add needs a temporary): 4 x 2 accumulators.
template <>
struct GemmTraits<xsimd::sse2> {
  static constexpr int MR = 4, NV = 2, NR = 8;
  static constexpr int64_t MC = 128, KC = 256, NC = 2048;
  static constexpr bool gather_b = false;  // no gather instruction: scalar copies
};

// 32 q registers: 8 x 2 accumulators + 2 B vectors + 1 broadcast.
template <>
struct GemmTraits<xsimd::neon64> {
  static constexpr int MR = 8, NV = 2, NR = 8;
  static constexpr int64_t MC = 128, KC = 256, NC = 2048;
  static constexpr bool gather_b = false;
};

}  // namespace tg::ops::simd
