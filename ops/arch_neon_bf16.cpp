// The bf16 GEMM on BFMMLA: the gemm_bf16 driver with the FEAT_BF16 kernel. Flags (ops/meson.build):
// -march=armv8.2-a+bf16. ops/dispatch.cpp puts this function in a copy of the neon table only when
// getauxval(AT_HWCAP2) reports HWCAP2_BF16.
#include "ops/arch_tables.hpp"
#include "ops/simd/gemm_bf16_neon.hpp"

namespace tg::ops {

const char* const kGemmBf16NeonDotPath = "neon bf16 bfmmla, 8x8 tile, K in fours";

void gemm_bf16_neon_dot(float* C, const Operand& A, const Operand& B, const Gemm& g) {
  simd::gemm_bf16_driver<simd::NeonDotKernel>(C, A, B, g);
}

}  // namespace tg::ops
