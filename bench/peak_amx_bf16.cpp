// AMX TDPBF16PS throughput: four independent accumulator tiles (16 x 16 fp32 each), each
// instruction 16 x 16 x 32 multiply-adds (16,384 flops) on two operand tiles loaded once, as the
// GEMM's 2 x 2 micro-kernel issues them (ops/arch_amx_bf16.cpp). Flags as that TU (the avx512 flags
// plus -mavx512bf16 -mamx-tile -mamx-bf16), set in bench/meson.build; called only when
// ops::has_bf16_path(avx512, amx), which also asked Linux for the tile state. The loop has one shape: it
// answers the first of kDotChains only (0 for the others), `iters` rounds of the four instructions.
#include <immintrin.h>

#include "bench/peak.hpp"
#include "ops/simd/gemm_bf16_amx.hpp"  // the kernel's tile configuration

namespace tg::bench {

double dot_loop_amx_bf16(int chains, int64_t iters) {
  if (chains != kDotChains[0]) return 0.0;
  // 2^-10 * 2^-10 per product, as the vdpbf16ps loop: far from overflow over the iterations
  alignas(64) uint16_t operand[16 * 32];
  for (uint16_t& x : operand) x = 0x3a80;
  alignas(64) float out[16 * 16];
  _tile_loadconfig(&ops::simd::kAmxTileConfig);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  __asm__ volatile("" ::: "memory");
  _tile_loadd(4, operand, 64);
  _tile_loadd(5, operand, 64);
  _tile_loadd(6, operand, 64);
  _tile_loadd(7, operand, 64);
  for (int64_t it = 0; it < iters; ++it) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, out, 64);
  float total = out[0];
  _tile_stored(3, out, 64);
  total += out[255];
  sink(total);
  return 4.0 * 16 * 16 * 32 * 2 * static_cast<double>(iters);
}

}  // namespace tg::bench
