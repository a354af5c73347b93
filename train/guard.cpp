#include "train/guard.hpp"

#include <fmt/format.h>

#include <cmath>
#include <stdexcept>

namespace tg::train {

OnNonFinite parse_on_non_finite(const std::string& s) {
  if (s == "stop") return OnNonFinite::stop;
  if (s == "skip") return OnNonFinite::skip;
  throw std::invalid_argument(fmt::format("on-nan: expected 'stop' or 'skip', got '{}'", s));
}

StepOutcome guarded_step(nn::Optimizer& opt, float loss, double clip, int64_t step) {
  StepOutcome r;
  const NamedTensors& params = opt.params();
  if (!std::isfinite(loss)) {
    r.grad_norm = std::nan("");
    r.problem = fmt::format("step {}: the loss is {}; the step was not applied", step, loss);
    return r;
  }
  // The global norm is finite iff every gradient is (barring overflow of a finite sum of squares,
  // which the scan tells apart).
  r.grad_norm = nn::grad_norm(params);
  if (!std::isfinite(r.grad_norm)) {
    if (const auto bad = nn::first_non_finite_gradient(params)) {
      r.problem = fmt::format("step {}: the gradient of {} is not finite (loss {}); the step was not applied",
                              step, *bad, loss);
      return r;
    }
  }
  opt.step(clip > 0 ? nn::clip_coef(clip, r.grad_norm) : 1.0f);  // clipping folded into the update
  r.applied = true;
  return r;
}

}  // namespace tg::train
