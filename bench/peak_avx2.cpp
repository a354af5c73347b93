// FMA-throughput loop for xsimd::fma3<xsimd::avx2>; flags as ops/arch_avx2.cpp (-mavx2 -mfma), set in
// bench/meson.build.
#include "bench/peak_fma.hpp"

namespace tg::bench {

double fma_loop_avx2(int64_t iters) {
  return fma_loop_xsimd<xsimd::fma3<xsimd::avx2>>(iters);
}

}  // namespace tg::bench
