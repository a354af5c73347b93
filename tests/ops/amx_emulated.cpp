// The AMX bf16 GEMM kernel (ops/simd/gemm_bf16_amx.hpp) on an emulated tile unit: its packing, its
// blocking in the gemm_bf16 driver and its epilogue, run on any AVX-512 CPU, with TDPBF16PS done in
// scalar code on the packed tiles as the instruction reads them (the layout comment of
// gemm_bf16_amx.hpp; the hardware also treats denormal inputs as zero, which the tests' values
// never are). Only the instructions themselves (ops/arch_amx_bf16.cpp) need an AMX CPU:
// the gemm_bf16.avx512.amx.* cases test them there. Compiled with the avx512 flags
// (tests/ops/meson.build); entered only where the CPU runs avx512.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"  // GCC 12 false positive, see ops/arch_avx512.cpp
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include "ops/simd/bf16.hpp"
#include "ops/simd/gemm_bf16_amx.hpp"

namespace tg::ops::test {
namespace {

inline float value(uint16_t bits) {  // bf16 bits as fp32 (exact)
  return simd::bf16_value<xsimd::avx512bw>(bits);
}

// fp32 to bf16 words [lo | hi] with the library's integer rounding (bf16.hpp: ops::to_bf16's bits),
// so no AVX512_BF16 is needed. (This TU has the avx512 kernels' flags exactly: the instantiations it
// shares with ops/arch_avx512.cpp are the same code.)
struct CvtRound {
  static __m256i half(__m512 x) {
    const __m512 r = simd::round_to_bf16<xsimd::avx512bw>(simd::Vec<xsimd::avx512bw>(x));
    return _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(r), 16));
  }
  static __m512i words(__m512 lo, __m512 hi) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(half(lo)), half(hi), 1);
  }
};

struct EmulatedTiles {
  using Cvt = CvtRound;
  static void configure() {}
  // C tile (t, h) = rows 16t.., columns 16h..: per step, A tile t (16 rows x 32 bf16 at a + t * 512)
  // times B tile h (16 pair rows x 16 columns x 2 at b + h * 512), accumulated in fp32 in k order.
  template <bool kRows2, bool kCols2>
  static void product(const uint16_t* a, const uint16_t* b, int64_t steps, float* out) {
    for (int t = 0; t < (kRows2 ? 2 : 1); ++t)
      for (int h = 0; h < (kCols2 ? 2 : 1); ++h)
        for (int m = 0; m < 16; ++m)
          for (int n = 0; n < 16; ++n) {
            float acc = 0.0f;
            for (int64_t s = 0; s < steps; ++s) {
              const uint16_t* arow = a + s * 1024 + t * 512 + m * 32;
              const uint16_t* btile = b + s * 1024 + h * 512;
              for (int q = 0; q < 16; ++q) {
                acc += value(arow[2 * q]) * value(btile[q * 32 + 2 * n]);
                acc += value(arow[2 * q + 1]) * value(btile[q * 32 + 2 * n + 1]);
              }
            }
            out[(16 * t + m) * 32 + 16 * h + n] = acc;
          }
  }
  static void product_into(const uint16_t* a, const uint16_t* b, int64_t steps, float* c, int64_t ldc,
                           const float* init, int64_t init_ld) {
    float out[32 * 32];
    product<true, true>(a, b, steps, out);
    for (int i = 0; i < 32; ++i)
      for (int j = 0; j < 32; ++j) c[i * ldc + j] = (init ? init[i * init_ld + j] : 0.0f) + out[i * 32 + j];
  }
};

}  // namespace

void gemm_bf16_amx_emulated(float* C, const Operand& A, const Operand& B, const Gemm& g) {
  simd::gemm_bf16_driver<simd::AmxKernel<EmulatedTiles>>(C, A, B, g);
}

}  // namespace tg::ops::test
