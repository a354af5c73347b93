// FMA-throughput loop for xsimd::neon64; flags as ops/arch_neon.cpp (no flags (NEON is baseline on aarch64)),
// set in bench/meson.build.
#include "bench/peak_fma.hpp"

namespace tg::bench {

double fma_loop_neon(int64_t iters) {
  return fma_loop_xsimd<xsimd::neon64>(iters);
}

}  // namespace tg::bench
