// The quantization of a weight's rows to int8 (kernels.hpp: Int8Rows, quantize_int8_rows): once per
// weight, when a decoding step first reads it (GPT-2 124M: 124M values). Per row, two passes over
// the row, both in SIMD: its largest magnitude (an integer max of the values' bits without the sign,
// which orders finite magnitudes as the floats do and puts Inf and NaN above them), then
// q = round-to-nearest-even(w * fl(127 / max)) narrowed to int8 per arch, stored in kernels.hpp's
// tiles of 4 rows and 64-value chunks. Rows are split across the threads. The scalar reference is ref.cpp's;
// tests/ops/test_gemm_int8.cpp holds each arch to it bit for bit.
#pragma once

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>

#include "ops/simd/common.hpp"

namespace tg::ops::simd {

// Stores the IVec::size int32 values of v, each in [-127, 127], as int8 at p.
template <class Arch>
inline void store_int8(int8_t* p, const IVec<Arch>& v) {
#if defined(__x86_64__)
  if constexpr (std::is_same_v<Arch, xsimd::avx512bw>) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm512_cvtsepi32_epi8(v));
  } else if constexpr (std::is_same_v<Arch, xsimd::fma3<xsimd::avx2>>) {
    const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(p), _mm_packs_epi16(w, w));
  } else if constexpr (std::is_same_v<Arch, xsimd::sse2>) {
    const __m128i w = _mm_packs_epi32(v, v);
    const int32_t four = _mm_cvtsi128_si32(_mm_packs_epi16(w, w));
    std::memcpy(p, &four, sizeof four);
  } else {
    static_assert(!std::is_same_v<Arch, Arch>, "store_int8: no int8 narrowing for this arch");
  }
#elif defined(__aarch64__)
  static_assert(std::is_same_v<Arch, xsimd::neon64>, "store_int8: no int8 narrowing for this arch");
  const int16x4_t h = vqmovn_s32(v);
  const int32_t four = vget_lane_s32(vreinterpret_s32_s8(vqmovn_s16(vcombine_s16(h, h))), 0);
  std::memcpy(p, &four, sizeof four);  // p need not be 4-byte aligned
#endif
}

// Value k of a row whose first chunk is at row (kernels.hpp's tiles: its chunks int8_tile_rows *
// int8_chunk bytes apart). A template on Arch like every helper here (common.hpp): one copy per arch TU.
template <class Arch>
inline int8_t* int8_at(int8_t* row, int64_t k) {
  return row + (k / int8_chunk) * (int8_tile_rows * int8_chunk) + k % int8_chunk;
}

// One row w of cols values: its scale into *scale and its int8 values into its chunks from row on
// (the values past cols zeroed); false (nothing written) when it holds a value that is not finite. A vector
// of L values never straddles two chunks (L divides 64).
template <class Arch>
bool quantize_int8_row(int8_t* row, float* scale, const float* w, int64_t cols) {
  using V = Vec<Arch>;
  using I = IVec<Arch>;
  constexpr int64_t L = V::size;
  static_assert(int8_chunk % L == 0);
  I m(0);
  int64_t k = 0;
  for (; k + L <= cols; k += L)
    m = xsimd::max(m, xsimd::bitwise_cast<I>(V::load_unaligned(w + k)) & I(0x7fffffff));
  alignas(64) int32_t lanes[L];
  m.store_aligned(lanes);
  uint32_t amax_bits = 0;
  for (int64_t l = 0; l < L; ++l) amax_bits = std::max(amax_bits, static_cast<uint32_t>(lanes[l]));
  for (; k < cols; ++k) amax_bits = std::max(amax_bits, std::bit_cast<uint32_t>(w[k]) & 0x7fffffffu);
  if (amax_bits >= 0x7f800000u) return false;
  const float amax = std::bit_cast<float>(amax_bits);
  // The reference's three cases (ref.cpp): zeros when the scale underflows, q in double when
  // 127 / amax overflows fp32 (amax below about 2^-121), else in fp32 (cvtps2dq / fcvtns: ties to even).
  const float s = amax / 127.0f, inv = 127.0f / amax;
  *scale = s;
  k = 0;
  if (s == 0.0f) {
    // every value 0: the padding with the rest
  } else if (std::isfinite(inv)) {
    const V iv(inv);
    for (; k + L <= cols; k += L)
      store_int8<Arch>(int8_at<Arch>(row, k), xsimd::nearbyint_as_int(V::load_unaligned(w + k) * iv));
    if (k < cols) {  // the tail through one partial vector, so that it rounds as the rest does
      alignas(64) int32_t tail[L];
      xsimd::nearbyint_as_int(load_partial<Arch>(w + k, cols - k, 0.0f) * iv).store_aligned(tail);
      for (int64_t l = 0; k < cols; ++l, ++k) *int8_at<Arch>(row, k) = static_cast<int8_t>(tail[l]);
    }
  } else {
    const double inv_d = 127.0 / static_cast<double>(amax);
    for (; k < cols; ++k)
      *int8_at<Arch>(row, k) = static_cast<int8_t>(std::nearbyint(static_cast<double>(w[k]) * inv_d));
  }
  for (; k < int8_padded_k(cols); ++k) *int8_at<Arch>(row, k) = 0;
  return true;
}

// The KernelTable's quantize_int8_rows: the first row that holds a value that is not finite, or -1.
template <class Arch>
int64_t quantize_int8_rows(int8_t* q, float* scale, const float* w, int64_t rows, int64_t cols) {
  if (cols == 0) {  // rows of no values: scale 0, and q holds no bytes (int8_bytes)
    std::fill_n(scale, rows, 0.0f);
    return -1;
  }
  std::atomic<int64_t> bad{rows};
  const int64_t tile = int8_tile_rows * int8_padded_k(cols);  // bytes per tile of rows
  const auto row_at = [&](int64_t j) {
    return q + (j / int8_tile_rows) * tile + (j % int8_tile_rows) * int8_chunk;
  };
  // threaded from about a million values (for 768-wide rows, from 1,364 rows)
  const int64_t min_rows = std::max<int64_t>(1, (int64_t{1} << 19) / std::max<int64_t>(cols, 1));
  parallel_for<Arch>(rows, min_rows, [&](int64_t lo, int64_t hi, int) {
    for (int64_t j = lo; j < hi; ++j)
      if (!quantize_int8_row<Arch>(row_at(j), scale + j, w + j * cols, cols)) {
        int64_t seen = bad.load();
        while (j < seen && !bad.compare_exchange_weak(seen, j)) {
        }
        return;  // this thread's rows after it are left as they were
      }
  });
  for (int64_t j = rows; j % int8_tile_rows != 0; ++j)  // the last tile's rows past the weight's
    for (int64_t k = 0; k < int8_padded_k(cols); k += int8_chunk)
      std::fill_n(int8_at<Arch>(row_at(j), k), int8_chunk, int8_t{0});
  return bad.load() < rows ? bad.load() : -1;
}

}  // namespace tg::ops::simd
