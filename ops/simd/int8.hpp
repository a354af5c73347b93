// The quantization of a weight's rows to int8 (kernels.hpp: Int8Rows, quantize_int8_rows): once per
// weight, when a decoding step first reads it (GPT-2 124M: 124M values). Per row, two passes over
// the row, both in SIMD: its largest magnitude (an integer max of the values' bits without the sign,
// which orders finite magnitudes as the floats do and puts Inf and NaN above them), then
// q = round-to-nearest-even(w * fl(127 / max)) narrowed to int8 per arch. Rows are split across the
// threads. The scalar reference is ref.cpp's; tests/ops/test_gemm_int8.cpp holds each arch to it bit
// for bit.
#pragma once

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>

#include "ops/simd/common.hpp"

namespace tg::ops::simd {

template <class Arch>
using IVec = xsimd::batch<int32_t, Arch>;

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
  vst1_lane_s32(reinterpret_cast<int32_t*>(p), vreinterpret_s32_s8(vqmovn_s16(vcombine_s16(h, h))), 0);
#endif
}

// One row: false (nothing written) when it holds a value that is not finite.
template <class Arch>
bool quantize_int8_row(int8_t* q, float* scale, const float* w, int64_t cols) {
  using V = Vec<Arch>;
  using I = IVec<Arch>;
  constexpr int64_t L = V::size;
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
  if (s == 0.0f) {
    std::fill_n(q, cols, int8_t{0});
  } else if (std::isfinite(inv)) {
    const V iv(inv);
    for (k = 0; k + L <= cols; k += L)
      store_int8<Arch>(q + k, xsimd::nearbyint_as_int(V::load_unaligned(w + k) * iv));
    if (k < cols) {  // the tail through one partial vector, so that it rounds as the rest does
      alignas(64) int32_t tail[L];
      xsimd::nearbyint_as_int(load_partial<Arch>(w + k, cols - k, 0.0f) * iv).store_aligned(tail);
      for (int64_t l = 0; k + l < cols; ++l) q[k + l] = static_cast<int8_t>(tail[l]);
    }
  } else {
    const double inv_d = 127.0 / static_cast<double>(amax);
    for (k = 0; k < cols; ++k) q[k] = static_cast<int8_t>(std::nearbyint(static_cast<double>(w[k]) * inv_d));
  }
  return true;
}

// The KernelTable's quantize_int8_rows: the first row that holds a value that is not finite, or -1.
template <class Arch>
int64_t quantize_int8_rows(int8_t* q, float* scale, const float* w, int64_t rows, int64_t cols) {
  std::atomic<int64_t> bad{rows};
  // threads for a million values or more (GPT-2's 768-wide weights: 1,366 rows per thread at least)
  const int64_t min_rows = std::max<int64_t>(1, (int64_t{1} << 19) / std::max<int64_t>(cols, 1));
  parallel_for<Arch>(rows, min_rows, [&](int64_t lo, int64_t hi, int) {
    for (int64_t j = lo; j < hi; ++j)
      if (!quantize_int8_row<Arch>(q + j * cols, scale + j, w + j * cols, cols)) {
        int64_t seen = bad.load();
        while (j < seen && !bad.compare_exchange_weak(seen, j)) {
        }
        return;  // this thread's rows after it are left as they were
      }
  });
  return bad.load() < rows ? bad.load() : -1;
}

}  // namespace tg::ops::simd
