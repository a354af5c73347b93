// The bf16 GEMM on AMX tiles: the gemm_bf16 driver with the AMX kernel (ops/simd/gemm_bf16_amx.hpp).
// Flags (ops/meson.build): the avx512 TU's plus -mavx512bf16 -mamx-tile -mamx-bf16. ops/dispatch.cpp
// enters it only when CPUID reports AMX-TILE, AMX-BF16 and AVX512_BF16 (the packing's rounding) and
// Linux granted this process the tile data state
// (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA), asked once before the first use).
//
// GCC 12's AVX-512 intrinsics trip -W(maybe-)uninitialized once inlined (GCC bug 105593, see
// ops/arch_avx512.cpp): a false positive, silenced for this TU only.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include "ops/arch_tables.hpp"
#include "ops/simd/gemm_bf16_amx.hpp"

namespace tg::ops {
namespace {

// Before a thread's tile instructions: tileloadd reads memory the compiler does not know about, so
// the packing's stores happen first. (The configuration is loaded per thread and product:
// AmxKernel::begin_thread, AmxTiles::configure.)
inline void begin_tiles() {
  __asm__ volatile("" ::: "memory");
}

// C tiles: tmm0 (rows 0-15, columns 0-15), tmm1 (0-15, 16-31), tmm2 (16-31, 0-15), tmm3 (16-31,
// 16-31); A tiles tmm4 (rows 0-15), tmm5 (16-31); B tiles tmm6 (columns 0-15), tmm7 (16-31).
// (The intrinsics name tiles by literal number.)

// C tiles += the panels' product over `steps` steps of 32 k (the tiles kRows2 / kCols2 select).
template <bool kRows2, bool kCols2>
inline void multiply(const uint16_t* a, const uint16_t* b, int64_t steps) {
  constexpr long kStride = 64;  // bytes between the rows of a packed tile
  for (int64_t s = 0; s < steps; ++s, a += 1024, b += 1024) {
    _tile_loadd(4, a, kStride);
    _tile_loadd(6, b, kStride);
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (kCols2) {
      _tile_loadd(7, b + 512, kStride);
      _tile_dpbf16ps(1, 4, 7);
    }
    if constexpr (kRows2) {
      _tile_loadd(5, a + 512, kStride);
      _tile_dpbf16ps(2, 5, 6);
    }
    if constexpr (kRows2 && kCols2) _tile_dpbf16ps(3, 5, 7);
  }
}

struct AmxTiles {
  using Cvt = simd::CvtNe2;
  static void configure() { _tile_loadconfig(&simd::kAmxTileConfig); }
  template <bool kRows2, bool kCols2>
  static void product(const uint16_t* a, const uint16_t* b, int64_t steps, float* out) {
    begin_tiles();
    _tile_zero(0);
    if constexpr (kCols2) _tile_zero(1);
    if constexpr (kRows2) _tile_zero(2);
    if constexpr (kRows2 && kCols2) _tile_zero(3);
    multiply<kRows2, kCols2>(a, b, steps);
    constexpr long kOutStride = 32 * sizeof(float);  // out is 32 x 32 fp32, row-major
    _tile_stored(0, out, kOutStride);
    if constexpr (kCols2) _tile_stored(1, out + 16, kOutStride);
    if constexpr (kRows2) _tile_stored(2, out + 16 * 32, kOutStride);
    if constexpr (kRows2 && kCols2) _tile_stored(3, out + 16 * 32 + 16, kOutStride);
  }

  static void product_into(const uint16_t* a, const uint16_t* b, int64_t steps, float* c, int64_t ldc,
                           const float* init, int64_t init_ld) {
    begin_tiles();
    if (init) {  // init_ld 0 (the bias): a zero stride loads the same 16 values into every row
      const long s = static_cast<long>(init_ld * sizeof(float));
      _tile_loadd(0, init, s);
      _tile_loadd(1, init + 16, s);
      _tile_loadd(2, init + 16 * init_ld, s);
      _tile_loadd(3, init + 16 * init_ld + 16, s);
    } else {
      _tile_zero(0);
      _tile_zero(1);
      _tile_zero(2);
      _tile_zero(3);
    }
    multiply<true, true>(a, b, steps);
    const long stride = static_cast<long>(ldc * sizeof(float));
    float* const c2 = c + 16 * ldc;
    _tile_stored(0, c, stride);
    _tile_stored(1, c + 16, stride);
    _tile_stored(2, c2, stride);
    _tile_stored(3, c2 + 16, stride);
  }
};

}  // namespace

const char* const kGemmBf16AmxPath = "amx_bf16 tdpbf16ps, 32x32 tile (2x2 tiles), K in 32s";

void gemm_bf16_amx(float* C, const Operand& A, const Operand& B, const Gemm& g) {
  simd::gemm_bf16_driver<simd::AmxKernel<AmxTiles>>(C, A, B, g);
}

}  // namespace tg::ops
