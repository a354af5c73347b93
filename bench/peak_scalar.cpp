// FMA-throughput loop on plain floats, the peak the scalar reference kernels could reach.
// bench/meson.build compiles this TU without -m flags and with auto-vectorization off, so it stays
// scalar (x86_64 baseline has no FMA instruction: a mul and an add, still 2 flops).
#include <cstdint>

#include "bench/peak.hpp"

namespace tg::bench {

double fma_loop_scalar(int64_t iters) {
  constexpr int kAcc = 12;
  float acc[kAcc];
  for (int i = 0; i < kAcc; ++i) acc[i] = static_cast<float>(i);
  const float a = 0.999f, c = 0.001f;  // chains converge to 1: no overflow, no denormals
  for (int64_t it = 0; it < iters; ++it)
    for (int i = 0; i < kAcc; ++i) acc[i] = acc[i] * a + c;
  float total = 0.0f;
  for (int i = 0; i < kAcc; ++i) total += acc[i];
  sink(total);
  return 2.0 * kAcc * static_cast<double>(iters);
}

}  // namespace tg::bench
