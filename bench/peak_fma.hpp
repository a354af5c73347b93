// The FMA-throughput loop, written once for every xsimd arch; instantiated by bench/peak_<arch>.cpp
// with that arch's flags (a TU may only name batch<float, Arch> for archs its flags enable).
#pragma once

#include <xsimd/xsimd.hpp>

#include <cstdint>
#include <utility>

#include "bench/peak.hpp"

namespace tg::bench {

namespace detail {
// acc[i] = acc[i] * a + c for every accumulator; a fold over the indices unrolls it so each
// accumulator stays in its own register (12 + 2 fit the 16 registers of SSE/AVX2).
template <class B, size_t... I>
inline void fma_all(B* acc, const B& a, const B& c, std::index_sequence<I...>) {
  ((acc[I] = xsimd::fma(acc[I], a, c)), ...);
}
}  // namespace detail

template <class Arch>
double fma_loop_xsimd(int64_t iters) {
  using B = xsimd::batch<float, Arch>;
  constexpr size_t kAcc = 12;
  // a < 1 and c > 0: every chain converges to c / (1 - a) = 1, so no overflow and no denormals.
  const B a(0.999f), c(0.001f);
  B acc[kAcc];
  for (size_t i = 0; i < kAcc; ++i) acc[i] = B(static_cast<float>(i));
  for (int64_t it = 0; it < iters; ++it) detail::fma_all(acc, a, c, std::make_index_sequence<kAcc>{});
  B total(0.0f);
  for (size_t i = 0; i < kAcc; ++i) total += acc[i];
  alignas(64) float lanes[B::size];
  total.store_aligned(lanes);
  sink(lanes[0]);
  return 2.0 * static_cast<double>(B::size * kAcc) * static_cast<double>(iters);
}

}  // namespace tg::bench
