// vdpbf16ps throughput: `chains` independent accumulator chains of _mm512_dpbf16_ps, each adding
// 16 lanes x 2 products per instruction (64 flops). Flags as ops/arch_avx512_bf16.cpp (the avx512
// flags plus -mavx512bf16), set in bench/meson.build; called only when ops::has_bf16_dot(avx512).
//
// Enough chains must be in flight to cover the instruction's latency times its throughput per
// cycle; the count that does is what this loop measures (bench_kernels runs 8..32 and keeps the
// best). 32 chains leave no zmm register for the operands: they are then read from memory.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"  // GCC 12 false positive, see ops/arch_avx512.cpp
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <utility>

#include "bench/peak.hpp"

namespace tg::bench {
namespace {

template <size_t... I>
inline void dot_all(__m512* acc, __m512bh a, __m512bh b, std::index_sequence<I...>) {
  ((acc[I] = _mm512_dpbf16_ps(acc[I], a, b)), ...);
}

template <int N>
double dot_chains(int64_t iters) {
  // 2^-10 * 2^-10 per product: 2e5 iterations add 0.4 to each lane, far from overflow and denormals
  const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3a80), b = (__m512bh)_mm512_set1_epi16(0x3a80);
  __m512 acc[N];
  for (int i = 0; i < N; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i));
  for (int64_t it = 0; it < iters; ++it) dot_all(acc, a, b, std::make_index_sequence<N>{});
  __m512 total = _mm512_setzero_ps();
  for (int i = 0; i < N; ++i) total = _mm512_add_ps(total, acc[i]);
  sink(_mm512_reduce_add_ps(total));
  return 64.0 * N * static_cast<double>(iters);
}

}  // namespace

double dot_loop_avx512_bf16(int chains, int64_t iters) {
  switch (chains) {
    case 8:
      return dot_chains<8>(iters);
    case 12:
      return dot_chains<12>(iters);
    case 16:
      return dot_chains<16>(iters);
    case 20:
      return dot_chains<20>(iters);
    case 24:
      return dot_chains<24>(iters);
    case 28:
      return dot_chains<28>(iters);
    case 32:
      return dot_chains<32>(iters);
    default:
      return 0.0;
  }
}

}  // namespace tg::bench
