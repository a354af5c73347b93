// The bf16 GEMM on vdpbf16ps: the gemm_bf16 driver with the AVX512_BF16 kernel, and the fused
// attention's products on the same kernel's packing and tiles. Flags (ops/meson.build): the avx512
// TU's plus -mavx512bf16. ops/dispatch.cpp puts these in a copy of the avx512 table only when CPUID
// reports AVX512_BF16.
//
// GCC 12's AVX-512 intrinsics trip -W(maybe-)uninitialized once inlined (GCC bug 105593, see
// ops/arch_avx512.cpp): a false positive, silenced for this TU only.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include "ops/arch_tables.hpp"
#include "ops/simd/attention_bf16_avx512.hpp"
#include "ops/simd/gemm_bf16_avx512.hpp"

namespace tg::ops {

const char* const kGemmBf16Avx512DotPath = "avx512_bf16 vdpbf16ps, 12x32 tile, K in pairs";

void gemm_bf16_avx512_dot(float* C, const Operand& A, const Operand& B, const Gemm& g) {
  simd::gemm_bf16_driver<simd::Avx512DotKernel>(C, A, B, g);
}

// Data, not a function: dispatch.cpp takes its address on any CPU, and nothing of this TU runs there.
const AttentionBf16 kAttentionBf16Avx512Dot{simd::Avx512DotKernel::NR, simd::attention_bf16_pack,
                                            simd::attention_bf16_product, simd::attention_bf16_tmp_floats};

}  // namespace tg::ops
