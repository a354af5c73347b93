// In-register transposes of an L x L tile of floats (L = the arch's lanes): the packing of a
// transposed GEMM operand (ops/simd/gemm_pack.hpp) and the store of a C^T tile
// (ops/simd/gemm_micro.hpp) share them.
#pragma once

#include <type_traits>

#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "ops/simd/common.hpp"

namespace tg::ops::simd {

// dst[k * ldd + j] = src[j * lds + k] for j, k < L. Unpacks and in-lane shuffles make 4 x 4 blocks
// within each 128-bit lane, then 128-bit lane moves put the blocks in place: about 4 shuffles per
// vector instead of a gather (xsimd 8.1's batch::gather is one scalar load and insert per lane, and
// the gather instruction measured no faster on Cascade Lake).
// Each arch TU sees only the intrinsics its flags enable (the SSE2 one no AVX types at all), hence
// the preprocessor guards; an arch without a tile here packs element by element.
template <class Arch>
constexpr bool has_transpose_tile =
#if defined(__AVX512F__)
    std::is_base_of_v<xsimd::avx512f, Arch> ||
#endif
#if defined(__AVX2__)
    std::is_base_of_v<xsimd::avx2, Arch> ||
#endif
    false;

#if defined(__AVX512F__)
// r[i] = row i of a 16 x 16 tile -> r[c] = column c.
inline void transpose_regs(__m512 (&r)[16]) {
  __m512 t[16];
  for (int i = 0; i < 16; i += 2) {  // per lane: [a0 b0 a1 b1], [a2 b2 a3 b3]
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  // u[4g + c], lane L: column 4L + c of rows 4g .. 4g + 3
  for (int g = 0; g < 16; g += 4) {
    r[g] = _mm512_shuffle_ps(t[g], t[g + 2], 0x44);
    r[g + 1] = _mm512_shuffle_ps(t[g], t[g + 2], 0xEE);
    r[g + 2] = _mm512_shuffle_ps(t[g + 1], t[g + 3], 0x44);
    r[g + 3] = _mm512_shuffle_ps(t[g + 1], t[g + 3], 0xEE);
  }
  // a 4 x 4 transpose of 128-bit lanes among u[c], u[4 + c], u[8 + c], u[12 + c]
  for (int c = 0; c < 4; ++c) {
    const __m512 x = _mm512_shuffle_f32x4(r[c], r[4 + c], 0x88),
                 y = _mm512_shuffle_f32x4(r[c], r[4 + c], 0xDD);
    const __m512 x2 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0x88),
                 y2 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0xDD);
    r[c] = _mm512_shuffle_f32x4(x, x2, 0x88);       // column c
    r[4 + c] = _mm512_shuffle_f32x4(y, y2, 0x88);   // 4 + c
    r[8 + c] = _mm512_shuffle_f32x4(x, x2, 0xDD);   // 8 + c
    r[12 + c] = _mm512_shuffle_f32x4(y, y2, 0xDD);  // 12 + c
  }
}
#endif
#if defined(__AVX2__)
// r[i] = row i of an 8 x 8 tile -> r[c] = column c.
inline void transpose_regs(__m256 (&r)[8]) {
  __m256 t[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int g = 0; g < 8; g += 4) {
    r[g] = _mm256_shuffle_ps(t[g], t[g + 2], 0x44);
    r[g + 1] = _mm256_shuffle_ps(t[g], t[g + 2], 0xEE);
    r[g + 2] = _mm256_shuffle_ps(t[g + 1], t[g + 3], 0x44);
    r[g + 3] = _mm256_shuffle_ps(t[g + 1], t[g + 3], 0xEE);
  }
  for (int c = 0; c < 4; ++c) {
    const __m256 lo = _mm256_permute2f128_ps(r[c], r[4 + c], 0x20),
                 hi = _mm256_permute2f128_ps(r[c], r[4 + c], 0x31);
    r[c] = lo, r[4 + c] = hi;
  }
}
#endif

// The native register of an arch with a transpose_tile (__m512, __m256).
template <class Arch>
using TileReg = typename Vec<Arch>::register_type;

// dst[k * ldd + j] = src[j * lds + k] for k < L and j < cols (cols <= L, stored masked): rows of the
// tile past `rows` (<= L) read as zeros, so a partial panel comes out zero-padded (pack_a's panels,
// MR of L lanes wide). A whole tile is transpose_tile.
template <class Arch>
void transpose_tile_part([[maybe_unused]] const float* src, [[maybe_unused]] int64_t lds,
                         [[maybe_unused]] int64_t rows, [[maybe_unused]] float* dst,
                         [[maybe_unused]] int64_t ldd, [[maybe_unused]] int64_t cols) {
  static_assert(has_transpose_tile<Arch>, "transpose_tile: no in-register transpose for this arch");
  if constexpr (has_transpose_tile<Arch>) {
    constexpr int L = Vec<Arch>::size;
    TileReg<Arch> r[L];
    for (int i = 0; i < L; ++i) r[i] = i < rows ? Vec<Arch>::load_unaligned(src + i * lds) : Vec<Arch>(0.0f);
    transpose_regs(r);
    for (int k = 0; k < L; ++k) store_partial<Arch>(dst + k * ldd, Vec<Arch>(r[k]), cols);
  }
}

// dst[k * ldd + j] = src[j * lds + k] for j, k < L: a whole tile.
template <class Arch>
void transpose_tile([[maybe_unused]] const float* src, [[maybe_unused]] int64_t lds,
                    [[maybe_unused]] float* dst, [[maybe_unused]] int64_t ldd) {
  static_assert(has_transpose_tile<Arch>, "transpose_tile: no in-register transpose for this arch");
  if constexpr (has_transpose_tile<Arch>) {
    constexpr int L = Vec<Arch>::size;
    TileReg<Arch> r[L];
    for (int i = 0; i < L; ++i) r[i] = Vec<Arch>::load_unaligned(src + i * lds);
    transpose_regs(r);
    for (int k = 0; k < L; ++k) Vec<Arch>(r[k]).store_unaligned(dst + k * ldd);
  }
}

}  // namespace tg::ops::simd
