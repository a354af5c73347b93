// Collects one arch's instantiation of every kernel body into a KernelTable. Included only by the
// arch TUs (ops/arch_*.cpp), each compiled with its arch's flags.
#pragma once

#include "ops/kernels.hpp"
#include "ops/simd/attention.hpp"
#include "ops/simd/bf16.hpp"
#include "ops/simd/elementwise.hpp"
#include "ops/simd/gemm.hpp"
#include "ops/simd/gemm_bf16_widen.hpp"
#include "ops/simd/int8.hpp"
#include "ops/simd/layernorm.hpp"
#include "ops/simd/softmax.hpp"

namespace tg::ops::simd {

template <class Arch>
KernelTable make_table(const char* name) {
  return KernelTable{
      name,
      gemm<Arch>,
      gemm_bf16<Arch>,
      "bf16 widened to fp32 when packed, fp32 FMA micro-kernel",
      gemm_int8<Arch>,
      quantize_int8_rows<Arch>,
      f32_to_bf16<Arch>,
      bf16_to_f32<Arch>,
      softmax_forward<Arch>,
      softmax_backward<Arch>,
      log_softmax_forward<Arch>,
      log_softmax_backward<Arch>,
      layernorm_forward<Arch>,
      layernorm_backward<Arch>,
      attention_forward<Arch>,
      attention_backward<Arch>,
      nullptr,  // attention_bf16: the dot table's copy sets it (dispatch.cpp)
      cross_entropy_forward<Arch>,
      cross_entropy_backward<Arch>,
      cross_entropy_fused<Arch>,
      relu_forward<Arch>,
      relu_backward<Arch>,
      gelu_forward<Arch>,
      gelu_backward<Arch>,
      gelu_tanh_forward<Arch>,
      gelu_tanh_backward<Arch>,
      dropout_forward<Arch>,
      dropout_backward<Arch>,
      bias_add<Arch>,
      bias_backward<Arch>,
      axpy<Arch>,
      add<Arch>,
      copy<Arch>,
      scale<Arch>,
      fill<Arch>,
      sum_squares<Arch>,
      adam_update<Arch>,
  };
}

}  // namespace tg::ops::simd
