// The machine's measured peak: an FMA-throughput loop per arch (compiled in bench/peak_<arch>.cpp
// with the same flags as that arch's kernels in ops/) and a streaming-bandwidth loop.
// GEMM results are quoted as a fraction of the FMA peak of the same arch and thread count.
#pragma once

#include <cstdint>
#include <string>

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

// The bf16 dot-product peak: `chains` independent accumulators of the instruction the bf16 GEMM's
// dot path uses (vdpbf16ps on AVX512_BF16, BFMMLA on FEAT_BF16), `iters` instructions each; returns
// the flops done (a multiply-add counts 2), 0 for a chain count the loop does not have. Compiled in
// bench/peak_<arch>_bf16.cpp with the bf16 flags; call only when ops::has_bf16_dot(arch).
using DotLoop = double (*)(int chains, int64_t iters);
#if defined(TG_PEAK_AVX512_BF16)
double dot_loop_avx512_bf16(int chains, int64_t iters);
#endif
#if defined(TG_PEAK_AMX_BF16)
double dot_loop_amx_bf16(int chains, int64_t iters);  // one shape: kDotChains[0] only
#endif
#if defined(TG_PEAK_NEON_BF16)
double dot_loop_neon_bf16(int chains, int64_t iters);
#endif
// The dot-product instruction's loop of arch a (vdpbf16ps, BFMMLA) when this build has one and the
// CPU runs it, else null; amx_loop: the AMX loop where the CPU has AMX (ops::has_bf16_path). Their
// results are named "<arch>" and "<arch> amx" (bf16_peak_impl).
DotLoop dot_loop(ops::Arch a);
DotLoop amx_loop(ops::Arch a);
std::string bf16_peak_impl(ops::Arch a, ops::Bf16Path p);
// The chain counts bench_kernels measures (the peak is the best of them).
inline constexpr int kDotChains[] = {8, 12, 16, 20, 24, 28, 32};

// Keeps the accumulators' final value observable so the compiler cannot drop the loop.
void sink(float x);

}  // namespace tg::bench
