// The per-arch kernel tables, one per ops/arch_*.cpp (internal to ops/: others use ops::kernels(Arch)).
// Which ones exist depends on the target: x86_64 builds sse2/avx2/avx512, aarch64 builds neon.
#pragma once

#include "ops/kernels.hpp"

namespace tg::ops {

#if defined(__x86_64__)
const KernelTable& table_sse2();    // xsimd::sse2, no extra flags (baseline of x86_64)
const KernelTable& table_avx2();    // xsimd::fma3<xsimd::avx2>, -mavx2 -mfma
const KernelTable& table_avx512();  // xsimd::avx512bw, -mavx512f/dq/bw/vl -mfma -mavx2
// The bf16 GEMM on vdpbf16ps (ops/arch_avx512_bf16.cpp: the avx512 flags and -mavx512bf16); call
// only when the CPU has AVX512_BF16.
void gemm_bf16_avx512_dot(float* C, const Operand& A, const Operand& B, const Gemm& g);
extern const char* const kGemmBf16Avx512DotPath;
// The fused attention's products on vdpbf16ps (the same TU; KernelTable::attention_bf16): function
// pointers into that TU, to be called only when the CPU has AVX512_BF16.
extern const AttentionBf16 kAttentionBf16Avx512Dot;
// The bf16 GEMM on AMX tiles (ops/arch_amx_bf16.cpp: the avx512 flags and -mamx-tile -mamx-bf16);
// call only when the CPU has AMX-BF16 and Linux granted the tile state (dispatch.cpp).
void gemm_bf16_amx(float* C, const Operand& A, const Operand& B, const Gemm& g);
extern const char* const kGemmBf16AmxPath;
#endif
#if defined(__aarch64__)
const KernelTable& table_neon();  // xsimd::neon64, no flags (NEON is baseline on aarch64)
// The bf16 GEMM on BFMMLA (ops/arch_neon_bf16.cpp: -march=armv8.2-a+bf16); call only when
// HWCAP2_BF16 is set.
void gemm_bf16_neon_dot(float* C, const Operand& A, const Operand& B, const Gemm& g);
extern const char* const kGemmBf16NeonDotPath;
#endif

}  // namespace tg::ops
