// BFMMLA throughput: `chains` independent accumulators of vbfmmlaq_f32, each a 2x4 by 4x2 bf16
// product into a 2x2 fp32 block per instruction (16 multiply-adds, 32 flops). Flags as
// ops/arch_neon_bf16.cpp (-march=armv8.2-a+bf16), set in bench/meson.build; called only when
// ops::has_bf16_dot(neon). Compiled by tools/test_neon.sh's cross build; not timed there (qemu).
#include <arm_neon.h>

#include <utility>

#include "bench/peak.hpp"

namespace tg::bench {
namespace {

template <size_t... I>
inline void mmla_all(float32x4_t* acc, bfloat16x8_t a, bfloat16x8_t b, std::index_sequence<I...>) {
  ((acc[I] = vbfmmlaq_f32(acc[I], a, b)), ...);
}

template <int N>
double mmla_chains(int64_t iters) {
  // 2^-10 * 2^-10 per product (bf16 0x3a80): far from overflow and denormals
  const bfloat16x8_t a = vreinterpretq_bf16_u16(vdupq_n_u16(0x3a80)), b = a;
  float32x4_t acc[N];
  for (int i = 0; i < N; ++i) acc[i] = vdupq_n_f32(static_cast<float>(i));
  for (int64_t it = 0; it < iters; ++it) mmla_all(acc, a, b, std::make_index_sequence<N>{});
  float32x4_t total = vdupq_n_f32(0.0f);
  for (int i = 0; i < N; ++i) total = vaddq_f32(total, acc[i]);
  sink(vaddvq_f32(total));
  return 32.0 * N * static_cast<double>(iters);
}

}  // namespace

double dot_loop_neon_bf16(int chains, int64_t iters) {
  switch (chains) {
    case 8:
      return mmla_chains<8>(iters);
    case 12:
      return mmla_chains<12>(iters);
    case 16:
      return mmla_chains<16>(iters);
    case 20:
      return mmla_chains<20>(iters);
    case 24:
      return mmla_chains<24>(iters);
    case 28:
      return mmla_chains<28>(iters);
    default:
      return 0.0;
  }
}

}  // namespace tg::bench
