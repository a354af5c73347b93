// Packing helpers shared by the x86 bf16 GEMM kernels (gemm_bf16_avx512.hpp: vdpbf16ps,
// gemm_bf16_amx.hpp: AMX tiles): masks, the (k, k+1) pair interleave of two rows and a 16 x 16
// transpose of 32-bit elements, all on AVX-512 F/BW. Each kernel's TU includes this header with its
// own flags; everything is in an anonymous namespace, so no copy compiled with one TU's flags can
// stand in for another's at link time.
//
// Cvt is how a kernel rounds fp32 to bf16: a struct with static __m512i words(__m512 lo, __m512 hi)
// giving the 32 words [lo | hi]. bf16 sources are moved as they are.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace tg::ops::simd {
namespace {

// permutexvar index that interleaves words [r0(0..15) | r1(0..15)] into 16 (r0[j], r1[j]) pairs.
alignas(64) constexpr uint16_t kPairIndex[32] = {0,  16, 1,  17, 2,  18, 3,  19, 4,  20, 5,
                                                 21, 6,  22, 7,  23, 8,  24, 9,  25, 10, 26,
                                                 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};

inline __mmask16 first_lanes(int64_t n) {  // the lowest min(max(n, 0), 16) bits
  return n >= 16 ? __mmask16(0xffff) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1);
}
inline __mmask32 first_words(int64_t n) {
  return n >= 32 ? __mmask32(0xffffffffu) : n <= 0 ? __mmask32(0) : __mmask32((1u << n) - 1);
}

#if defined(__AVX512BF16__)
// vcvtne2ps2bf16: 32 fp32 values as 32 bf16 words [lo | hi], rounded to nearest even (denormals
// flushed to zero, as vdpbf16ps and TDPBF16PS treat denormal inputs). Only in TUs with -mavx512bf16.
struct CvtNe2 {
  static __m512i words(__m512 lo, __m512 hi) { return (__m512i)_mm512_cvtne2ps_pbh(hi, lo); }
};
#endif

// Up to 16 values from two rows (lanes past `n` read as 0; a null row reads as 0) as 16 (row0, row1)
// bf16 pairs.
template <class Cvt>
inline __m512i pairs_of_rows(const float* r0, const float* r1, __mmask16 m) {
  const __m512 x0 = r0 ? _mm512_maskz_loadu_ps(m, r0) : _mm512_setzero_ps();
  const __m512 x1 = r1 ? _mm512_maskz_loadu_ps(m, r1) : _mm512_setzero_ps();
  return _mm512_permutexvar_epi16(_mm512_load_si512(kPairIndex), Cvt::words(x0, x1));
}
template <class Cvt>
inline __m512i pairs_of_rows(const uint16_t* r0, const uint16_t* r1, __mmask16 m) {
  const __m256i x0 = r0 ? _mm256_maskz_loadu_epi16(m, r0) : _mm256_setzero_si256();
  const __m256i x1 = r1 ? _mm256_maskz_loadu_epi16(m, r1) : _mm256_setzero_si256();
  const __m512i words = _mm512_inserti64x4(_mm512_castsi256_si512(x0), x1, 1);
  return _mm512_permutexvar_epi16(_mm512_load_si512(kPairIndex), words);
}

// 32 consecutive values of one row (k = 0..31, those past n read as 0) as 16 (k, k+1) pairs.
template <class Cvt>
inline __m512i pairs_along_row(const float* src, int64_t n) {
  const __m512 lo = _mm512_maskz_loadu_ps(first_lanes(n), src);
  // src + 16 only where the row reaches it (a pointer past the row's array is not formed)
  const __m512 hi = n > 16 ? _mm512_maskz_loadu_ps(first_lanes(n - 16), src + 16) : _mm512_setzero_ps();
  return Cvt::words(lo, hi);
}
template <class Cvt>
inline __m512i pairs_along_row(const uint16_t* src, int64_t n) {
  return _mm512_maskz_loadu_epi16(first_words(n), src);
}

// Transposes a 16 x 16 matrix of 32-bit elements held as 16 rows: r[i] = column i afterwards.
// Four rounds of 16 shuffles (unpacks within 128-bit lanes, then 128-bit lane moves).
inline void transpose16x16(__m512i (&r)[16]) {
  __m512i t[16];
  for (int i = 0; i < 16; i += 2) {  // t[i] lane L = r_i[4L], r_i+1[4L], r_i[4L+1], r_i+1[4L+1]
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {  // r[4g + e] lane L = rows 4g..4g+3 of column 4L + e
    r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  for (int e = 0; e < 4; ++e) {  // gather lane L of r[e], r[4+e], r[8+e], r[12+e]: column 4L + e
    const __m512i ab_lo = _mm512_shuffle_i32x4(r[e], r[4 + e], 0x44),
                  ab_hi = _mm512_shuffle_i32x4(r[e], r[4 + e], 0xee);
    const __m512i cd_lo = _mm512_shuffle_i32x4(r[8 + e], r[12 + e], 0x44),
                  cd_hi = _mm512_shuffle_i32x4(r[8 + e], r[12 + e], 0xee);
    t[e] = _mm512_shuffle_i32x4(ab_lo, cd_lo, 0x88);
    t[4 + e] = _mm512_shuffle_i32x4(ab_lo, cd_lo, 0xdd);
    t[8 + e] = _mm512_shuffle_i32x4(ab_hi, cd_hi, 0x88);
    t[12 + e] = _mm512_shuffle_i32x4(ab_hi, cd_hi, 0xdd);
  }
  for (int i = 0; i < 16; ++i) r[i] = t[i];
}

}  // namespace
}  // namespace tg::ops::simd
