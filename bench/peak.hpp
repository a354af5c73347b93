// The machine's measured peak: an FMA-throughput loop per arch (compiled in bench/peak_<arch>.cpp
// with the same flags as that arch's kernels in ops/) and a streaming-bandwidth loop.
// GEMM results are quoted as a fraction of the FMA peak of the same arch and thread count.
#pragma once

#include <cstdint>

#include "ops/kernels.hpp"

namespace tg::bench {

// Runs `iters` iterations of an FMA loop on the calling thread and returns the flops done
// (an FMA counts 2). The loop keeps 12 independent accumulators: FMA latency is 4 cycles and
// two ports issue one each per cycle, so at least 8 chains must be in flight to saturate them.
using FmaLoop = double (*)(int64_t iters);

double fma_loop_scalar(int64_t iters);
#if defined(TG_PEAK_SSE2)
double fma_loop_sse2(int64_t iters);
#endif
#if defined(TG_PEAK_AVX2)
double fma_loop_avx2(int64_t iters);
#endif
#if defined(TG_PEAK_AVX512)
double fma_loop_avx512(int64_t iters);
#endif
#if defined(TG_PEAK_NEON)
double fma_loop_neon(int64_t iters);
#endif

// The loop for arch a, or null when this build has none for it (the caller also checks that the
// CPU runs it: ops::available_archs()).
FmaLoop fma_loop(ops::Arch a);

// Keeps the accumulators' final value observable so the compiler cannot drop the loop.
void sink(float x);

}  // namespace tg::bench
