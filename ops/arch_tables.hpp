// The per-arch kernel tables, one per ops/arch_*.cpp (internal to ops/: others use ops::kernels(Arch)).
// Which ones exist depends on the target: x86_64 builds sse2/avx2/avx512, aarch64 builds neon.
#pragma once

#include "ops/kernels.hpp"

namespace tg::ops {

#if defined(__x86_64__)
const KernelTable& table_sse2();    // xsimd::sse2, no extra flags (baseline of x86_64)
const KernelTable& table_avx2();    // xsimd::fma3<xsimd::avx2>, -mavx2 -mfma
const KernelTable& table_avx512();  // xsimd::avx512bw, -mavx512f/dq/bw/vl -mfma -mavx2
#endif
#if defined(__aarch64__)
const KernelTable& table_neon();  // xsimd::neon64, no flags (NEON is baseline on aarch64)
#endif

}  // namespace tg::ops
