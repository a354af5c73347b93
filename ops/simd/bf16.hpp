// bf16 on SIMD vectors: rounding fp32 to bf16 exactly as ops::to_bf16 (ops/ref.cpp) does, and
// moving vectors of bf16 in and out of memory. Also the array conversion kernels of the table.
//
// Rounding is integer arithmetic on the fp32 bits (to nearest even: add 0x7fff plus the lowest
// kept bit, keep the upper half; NaN: keep the upper half, set the quiet bit), the same on every
// arch. It is not the hardware conversion of AVX512_BF16 (vcvtne2ps2bf16 flushes denormals to
// zero), so every arch gives the same bits for every input, denormals included.
//
// xsimd 8.1 has no 16-bit narrowing or widening between 32-bit lanes, so load_bf16/store_bf16 use
// each arch's intrinsics (this header is compiled in every arch TU, each with its own flags; the
// if-constexpr branches of the other archs are never instantiated there).
#pragma once

#include <cstring>
#include <type_traits>

#include "ops/kernels.hpp"
#include "ops/simd/common.hpp"

namespace tg::ops::simd {

// The fp32 value of to_bf16(x), lane by lane: the upper half of the rounded bits, lower half 0.
template <class Arch>
inline Vec<Arch> round_to_bf16(const Vec<Arch>& x) {
  using I = IVec<Arch>;
  const I u = xsimd::bitwise_cast<I>(x);
  const I upper(static_cast<int32_t>(0xffff0000u));
  const auto nan = (u & I(0x7fffffff)) > I(0x7f800000);  // both sides non-negative: signed compare
  // lanes wrap modulo 2^32 (no NaN gets here in a used lane, so no carry into the sign)
  const I rounded = (u + I(0x7fff) + ((u >> 16) & I(1))) & upper;
  const I quiet = (u & upper) | I(0x00400000);
  return xsimd::bitwise_cast<Vec<Arch>>(xsimd::select(nan, quiet, rounded));
}

// The same for one value (tails and scalar paths), as a template so each arch TU keeps its own.
template <class Arch>
inline uint16_t bf16_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
template <class Arch>
inline float bf16_value(uint16_t bits) {
  const uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
template <class Arch>
inline float round_to_bf16(float x) {
  return bf16_value<Arch>(bf16_bits<Arch>(x));
}

// Stores the upper halves of the lanes of `rounded` (a round_to_bf16 result) as Vec::size bf16.
template <class Arch>
inline void store_bf16(uint16_t* dst, const Vec<Arch>& rounded) {
  const IVec<Arch> u = xsimd::bitwise_cast<IVec<Arch>>(rounded);
#if defined(__x86_64__)
  if constexpr (std::is_same_v<Arch, xsimd::avx512bw>) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), _mm512_cvtepi32_epi16(_mm512_srli_epi32(u, 16)));
  } else if constexpr (std::is_same_v<Arch, xsimd::fma3<xsimd::avx2>>) {
    const __m256i h = _mm256_srli_epi32(u, 16);  // each lane <= 0xffff: packus does not saturate
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst),
                     _mm_packus_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1)));
  } else if constexpr (std::is_same_v<Arch, xsimd::sse2>) {
    const __m128i h = _mm_srai_epi32(u, 16);  // sign-extended upper half: packs does not saturate
    _mm_storel_epi64(reinterpret_cast<__m128i*>(dst), _mm_packs_epi32(h, h));
  } else {
    static_assert(!std::is_same_v<Arch, Arch>, "store_bf16: no narrowing for this arch");
  }
#elif defined(__aarch64__)
  static_assert(std::is_same_v<Arch, xsimd::neon64>, "store_bf16: no narrowing for this arch");
  vst1_u16(dst, vshrn_n_u32(vreinterpretq_u32_s32(u), 16));
#endif
}

// Loads Vec::size bf16 values as fp32 (exact: the bits move to the upper half).
template <class Arch>
inline Vec<Arch> load_bf16(const uint16_t* src) {
#if defined(__x86_64__)
  if constexpr (std::is_same_v<Arch, xsimd::avx512bw>) {
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src)));
    return xsimd::bitwise_cast<Vec<Arch>>(IVec<Arch>(_mm512_slli_epi32(w, 16)));
  } else if constexpr (std::is_same_v<Arch, xsimd::fma3<xsimd::avx2>>) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src)));
    return xsimd::bitwise_cast<Vec<Arch>>(IVec<Arch>(_mm256_slli_epi32(w, 16)));
  } else if constexpr (std::is_same_v<Arch, xsimd::sse2>) {
    const __m128i w = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(src));
    return xsimd::bitwise_cast<Vec<Arch>>(IVec<Arch>(_mm_unpacklo_epi16(_mm_setzero_si128(), w)));
  } else {
    static_assert(!std::is_same_v<Arch, Arch>, "load_bf16: no widening for this arch");
  }
#elif defined(__aarch64__)
  static_assert(std::is_same_v<Arch, xsimd::neon64>, "load_bf16: no widening for this arch");
  return xsimd::bitwise_cast<Vec<Arch>>(IVec<Arch>(vreinterpretq_s32_u32(vshll_n_u16(vld1_u16(src), 16))));
#endif
}

// Below this many elements per thread a conversion is faster on one thread (as elementwise.hpp).
inline constexpr int64_t kMinConvertPerThread = 1 << 15;

template <class Arch>
void f32_to_bf16(bf16* out, const float* in, int64_t n) {
  using V = Vec<Arch>;
  constexpr int64_t L = V::size;
  uint16_t* dst = reinterpret_cast<uint16_t*>(out);
  parallel_for<Arch>(n, kMinConvertPerThread, [&](int64_t lo, int64_t hi, int) {
    int64_t i = lo;
    for (; i + L <= hi; i += L) store_bf16<Arch>(dst + i, round_to_bf16<Arch>(V::load_unaligned(in + i)));
    for (; i < hi; ++i) dst[i] = bf16_bits<Arch>(in[i]);
  });
}

template <class Arch>
void bf16_to_f32(float* out, const bf16* in, int64_t n) {
  using V = Vec<Arch>;
  constexpr int64_t L = V::size;
  const uint16_t* src = reinterpret_cast<const uint16_t*>(in);
  parallel_for<Arch>(n, kMinConvertPerThread, [&](int64_t lo, int64_t hi, int) {
    int64_t i = lo;
    for (; i + L <= hi; i += L) load_bf16<Arch>(src + i).store_unaligned(out + i);
    for (; i < hi; ++i) out[i] = bf16_value<Arch>(src[i]);
  });
}

}  // namespace tg::ops::simd
