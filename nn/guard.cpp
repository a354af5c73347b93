#include "nn/guard.hpp"

#include <fmt/format.h>

#include <bit>
#include <cmath>
#include <stdexcept>

#include "ops/kernels.hpp"

namespace tg::nn {

namespace {

// Index of the first NaN/Inf in x[0, n), or -1. Exponent bits all ones <=> NaN or Inf; the
// integer test vectorizes, and a whole tensor is scanned only when it holds one.
int64_t first_non_finite(const float* x, int64_t n) {
  uint32_t any = 0;
  for (int64_t i = 0; i < n; ++i) any |= (std::bit_cast<uint32_t>(x[i]) & 0x7F800000u) == 0x7F800000u;
  if (!any) return -1;
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(x[i])) return i;
  return -1;
}

std::string describe(const std::string& name, const Tensor& t, int64_t i) {
  const float v = t.data()[i];
  return fmt::format("{} ({} at element {} of {})", name, std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf"), i,
                     shape_str(t.shape()));
}

}  // namespace

OnNonFinite parse_on_non_finite(const std::string& s) {
  if (s == "stop") return OnNonFinite::stop;
  if (s == "skip") return OnNonFinite::skip;
  throw std::invalid_argument(fmt::format("on-nan: expected 'stop' or 'skip', got '{}'", s));
}

std::optional<std::string> first_non_finite_gradient(const NamedTensors& params) {
  for (const auto& [name, p] : params) {
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    if (const int64_t i = first_non_finite(g.data(), g.numel()); i >= 0) return describe(name, g, i);
  }
  return std::nullopt;
}

std::optional<std::string> first_non_finite_parameter(const NamedTensors& params) {
  for (const auto& [name, p] : params)
    if (const int64_t i = first_non_finite(p.data(), p.numel()); i >= 0) return describe(name, p, i);
  return std::nullopt;
}

StepOutcome guarded_step(Optimizer& opt, float loss, double clip, int64_t step) {
  StepOutcome r;
  const NamedTensors& params = opt.params();
  if (!std::isfinite(loss)) {
    r.grad_norm = std::nan("");
    r.problem = fmt::format("step {}: the loss is {}; the step was not applied", step, loss);
    return r;
  }
  // The global norm is finite iff every gradient is (barring overflow of a finite sum of squares,
  // which the scan tells apart).
  r.grad_norm = grad_norm(params);
  if (!std::isfinite(r.grad_norm)) {
    if (const auto bad = first_non_finite_gradient(params)) {
      r.problem = fmt::format("step {}: the gradient of {} is not finite (loss {}); the step was not applied",
                              step, *bad, loss);
      return r;
    }
  }
  // clip_grad_norm(params, clip) with the norm already computed (the same arithmetic).
  if (clip > 0) {
    if (const double coef = clip / (r.grad_norm + 1e-6); coef < 1.0)
      for (const auto& [name, p] : params) {
        Tensor g = p.grad();
        if (g.defined()) ops::scale(g.data(), static_cast<float>(coef), g.numel());
      }
  }
  opt.step();
  r.applied = true;
  return r;
}

}  // namespace tg::nn
