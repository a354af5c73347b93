// FMA-throughput loop for xsimd::avx512bw; flags as ops/arch_avx512.cpp (-mavx512f -mavx512dq -mavx512bw
// -mavx512vl -mfma -mavx2), set in bench/meson.build.
#include "bench/peak_fma.hpp"

namespace tg::bench {

double fma_loop_avx512(int64_t iters) {
  return fma_loop_xsimd<xsimd::avx512bw>(iters);
}

}  // namespace tg::bench
