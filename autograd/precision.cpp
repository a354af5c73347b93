#include "autograd/precision.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <stdexcept>
#include <string>

#include "autograd/tape.hpp"

namespace tg {

namespace {
// Per thread, as torch.autocast: a scope on one thread does not change another's products. The
// tape ops read it on the thread that records them, before any OpenMP region.
thread_local Precision t_precision = Precision::fp32;
thread_local Bf16WeightCache* t_weight_cache = nullptr;
thread_local Int8WeightCache* t_int8_cache = nullptr;

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

// Whether bf16 pays is ops/' question (ops::bf16_pays: the CPU's bf16 unit, the product's shape).
void set_bf16_products_everywhere(bool on) {
  ops::testing::set_bf16_everywhere(on);
}

bool bf16_products_active() {
  return ops::bf16_pays();
}

Precision effective_precision(Precision requested) {
  return requested == Precision::bf16 && bf16_products_active() ? Precision::bf16 : Precision::fp32;
}

void gemm(Precision p, float* C, const float* A, const float* B, const ops::Gemm& g) {
  if (p == Precision::bf16 && ops::bf16_pays(&g))
    ops::gemm_bf16(C, ops::operand(A), ops::operand(B), g);
  else
    ops::gemm(C, A, B, g);
}

const ops::bf16* Bf16WeightCache::rounded(const Tensor& w) {
  const int64_t n = w.numel();
  Copy& copy = copies_[{w.data(), n}];
  copy.used = true;
  if (!copy.current) {
    copy.weight = w;
    copy.values.resize(static_cast<size_t>(n));
    ops::f32_to_bf16(copy.values.data(), w.data(), n);  // threaded (ops::parallel_for)
    copy.current = true;
  }
  return copy.values.data();
}

void Bf16WeightCache::invalidate() {
  std::erase_if(copies_, [](const auto& entry) { return !entry.second.used; });
  for (auto& [key, copy] : copies_) copy.current = copy.used = false;
}

int64_t Bf16WeightCache::bytes() const {
  int64_t b = 0;
  for (const auto& [key, copy] : copies_) b += static_cast<int64_t>(copy.values.size() * sizeof(ops::bf16));
  return b;
}

Bf16WeightScope::Bf16WeightScope(Bf16WeightCache& cache) : previous_(t_weight_cache) {
  t_weight_cache = &cache;
}

Bf16WeightScope::~Bf16WeightScope() {
  t_weight_cache = previous_;
}

ops::Int8Rows Int8WeightCache::quantized(const Tensor& w, int64_t rows, int64_t cols) {
  const int64_t n = w.numel();
  if (n != rows * cols)
    throw std::invalid_argument(
        fmt::format("Int8WeightCache: a weight of {} values read as {} x {}", n, rows, cols));
  const auto key = std::pair{w.data(), n};
  if (auto it = copies_.find(key); it != copies_.end()) {
    if (static_cast<int64_t>(it->second.scale.size()) != rows)
      throw std::invalid_argument(
          fmt::format("Int8WeightCache: a weight quantized as {} rows read as {} x {}",
                      it->second.scale.size(), rows, cols));
    return {it->second.q.get(), it->second.scale.data()};
  }
  Copy copy;  // made whole before it is kept: an exception (memory, a NaN) leaves no entry
  // not zero-filled: quantize_int8_rows writes every byte (the tiles' padding too), its threads
  // faulting the pages in
  copy.q = std::make_unique_for_overwrite<int8_t[]>(static_cast<size_t>(ops::int8_bytes(rows, cols)));
  copy.scale.resize(static_cast<size_t>(rows));
  ops::quantize_int8_rows(copy.q.get(), copy.scale.data(), w.data(), rows, cols);  // threaded
  copy.weight = w;
  const Copy& kept = copies_.emplace(key, std::move(copy)).first->second;
  return {kept.q.get(), kept.scale.data()};
}

int64_t Int8WeightCache::bytes() const {
  int64_t b = 0;
  for (const auto& [key, copy] : copies_) {
    const auto rows = static_cast<int64_t>(copy.scale.size());
    b += ops::int8_bytes(rows, rows ? copy.weight.numel() / rows : 0) +
         rows * static_cast<int64_t>(sizeof(float));
  }
  return b;
}

Int8WeightScope::Int8WeightScope(Int8WeightCache* cache) : previous_(t_int8_cache) {
  t_int8_cache = cache;
}

Int8WeightScope::~Int8WeightScope() {
  t_int8_cache = previous_;
}

namespace {
// An environment variable that picks one of two settings: unset or empty is the first (the
// default), `first` or `second` by name; anything else throws, naming the variable.
bool second_chosen(const char* name, const char* first, const char* second) {
  const char* env = std::getenv(name);
  const std::string v = env ? env : "";
  if (v.empty() || v == first) return false;
  if (v == second) return true;
  throw std::runtime_error(std::string(name) + "=" + v + ": expected " + first + " or " + second);
}
}  // namespace

bool bf16_weights_per_step() {
  static const bool on = second_chosen("TAPEGRAD_BF16_WEIGHTS", "packing", "step");
  return on;
}

bool bf16_activations_saved() {
  static const bool on = !second_chosen("TAPEGRAD_BF16_ACTIVATIONS", "saved", "packing");
  return on;
}

Bf16StepWeights::Bf16StepWeights() : cache_(Bf16WeightCache::Use::training) {
  bf16_weights_per_step();  // the variables checked now, not at the first step
  bf16_activations_saved();
}

Bf16StepWeights::Scope Bf16StepWeights::step() {
  if (!bf16_weights_per_step()) return Scope(nullptr);
  cache_.invalidate();  // the weights changed since the last step
  return Scope(&cache_);
}

Bf16StepWeights::Scope::Scope(Bf16WeightCache* cache) : previous_(t_weight_cache), on_(cache != nullptr) {
  if (on_) t_weight_cache = cache;
}

Bf16StepWeights::Scope::~Scope() {
  if (on_) t_weight_cache = previous_;
}

void weight_gemm(Precision p, float* C, const float* A, const Tensor& W, const ops::Gemm& g) {
  weight_gemm(p, C, ops::operand(A), W, g);
}

void weight_gemm(Precision p, float* C, const ops::Operand& A, const Tensor& W, const ops::Gemm& g) {
  if (Int8WeightCache* const int8 = t_int8_cache;
      int8 && !grad_enabled() && A.dtype == ops::DType::f32 && g.trans_b && g.batch == 1 && g.ldb == g.K &&
      (ops::int8_few_rows(g) || int8->products() == Int8WeightCache::Products::all)) {
    ops::gemm_int8(C, static_cast<const float*>(A.data), int8->quantized(W, g.N, g.K), g);
    return;
  }
  Bf16WeightCache* const cache = t_weight_cache;
  const bool bf16_product = p == Precision::bf16 && ops::bf16_pays(&g);
  const bool use_copy = cache && (cache->use() == Bf16WeightCache::Use::decoding
                                      ? t_precision == Precision::bf16 && !grad_enabled() &&
                                            ops::bf16_few_rows(g, ops::DType::bf16)
                                      : bf16_product);
  if (A.dtype == ops::DType::bf16 && !bf16_product)
    throw std::logic_error("weight_gemm: a bf16 operand A for a product that does not run in bf16");
  if (use_copy || bf16_product)
    ops::gemm_bf16(C, A, use_copy ? ops::operand(cache->rounded(W)) : ops::operand(W.data()), g);
  else
    ops::gemm(C, static_cast<const float*>(A.data), W.data(), g);
}

}  // namespace tg
