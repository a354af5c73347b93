#include "autograd/precision.hpp"

#include <fmt/format.h>

#include <stdexcept>

namespace tg {

namespace {
// Per thread, as torch.autocast: a scope on one thread does not change another's products. The
// tape ops read it on the thread that records them, before any OpenMP region.
thread_local Precision t_precision = Precision::fp32;
bool g_bf16_everywhere = false;
}  // namespace

const char* precision_name(Precision p) {
  return p == Precision::bf16 ? "bf16" : "fp32";
}

Precision parse_precision(std::string_view s) {
  if (s == "fp32") return Precision::fp32;
  if (s == "bf16") return Precision::bf16;
  throw std::invalid_argument(fmt::format("precision must be fp32 or bf16, got '{}'", s));
}

std::string products_report(Precision requested) {
  const Precision e = effective_precision(requested);
  if (e == requested) return fmt::format("{} products", precision_name(e));
  return fmt::format("{} products (bf16 asked; {})", precision_name(e),
                     ops::bf16_widen_reason(ops::active_arch()));
}

Precision compute_precision() {
  return t_precision;
}

PrecisionScope::PrecisionScope(Precision p) : previous_(t_precision) {
  t_precision = p;
}

PrecisionScope::~PrecisionScope() {
  t_precision = previous_;
}

void set_bf16_products_everywhere(bool on) {
  g_bf16_everywhere = on;
}

bool bf16_products_active() {
  if (g_bf16_everywhere) return true;
  const ops::Arch a = ops::active_arch();
  return ops::has_bf16_dot(a) && ops::active().gemm_bf16 != ops::kernels(a, ops::Bf16Path::widen).gemm_bf16;
}

Precision effective_precision(Precision requested) {
  return requested == Precision::bf16 && bf16_products_active() ? Precision::bf16 : Precision::fp32;
}

// One or two rows against a transposed B (x w^T of a decoding step at batch 1 or 2, Q K^T of one new
// query): the fp32 GEMM reads B in place for these, while the bf16 one packs (converts) all of B for
// a product of 1-2 rows. Measured on a Zen 4 (AVX512_BF16), one thread, N x K 128..1024 x 128..512:
// bf16 / fp32 time 2.0-2.9x at M = 1, 1.1-1.6x at M = 2, 0.7-1.3x at M = 3, 0.67-0.81x at M = 4. With
// a non-transposed B (P V) bf16 is faster from M = 1 on (0.5x), so only the transposed case goes to fp32.
constexpr int64_t kBf16MinRowsTransB = 3;

void gemm(Precision p, float* C, const float* A, const float* B, const ops::Gemm& g) {
  if (p == Precision::bf16 && !(g.trans_b && g.M < kBf16MinRowsTransB))
    ops::gemm_bf16(C, ops::operand(A), ops::operand(B), g);
  else
    ops::gemm(C, A, B, g);
}

}  // namespace tg
