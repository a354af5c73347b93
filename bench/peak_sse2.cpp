// FMA-throughput loop for xsimd::sse2; flags as ops/arch_sse2.cpp (no extra flags (baseline of x86_64)), set
// in bench/meson.build.
#include "bench/peak_fma.hpp"

namespace tg::bench {

double fma_loop_sse2(int64_t iters) {
  return fma_loop_xsimd<xsimd::sse2>(iters);
}

}  // namespace tg::bench
