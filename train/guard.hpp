// Guards for long training runs: never apply an update computed from NaN or Inf, never write
// non-finite weights to a checkpoint.
//
//   float loss = ...; loss_tensor.backward();
//   const StepOutcome r = guarded_step(opt, loss, /*clip=*/1.0, step);
//   if (!r.applied) { report r.problem; stop or go on with the next batch }
//
// A skipped step changes nothing: parameters and optimizer state (moments, step count) are as
// before the call. Gradients may have been scaled by clipping and are dropped at the next
// zero_grad() anyway.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "nn/module.hpp"
#include "nn/optim.hpp"

namespace tg::train {

// What to do about a non-finite loss or gradient (translate train --on-nan).
enum class OnNonFinite { stop, skip };
OnNonFinite parse_on_non_finite(const std::string& s);  // "stop" | "skip", else std::invalid_argument

struct StepOutcome {
  bool applied = false;
  double grad_norm = 0;  // global gradient norm before clipping (NaN/Inf when not finite)
  std::string problem;   // when not applied: "step N: ... ; the step was not applied"
};

// Checks the loss and the gradients of the optimizer's parameters; when all are finite, clips the
// global gradient norm to `clip` (when > 0, as clip_grad_norm, folded into opt.step(clip_coef)) and steps.
// Otherwise applies nothing and says why, naming `step` and the first parameter whose gradient is not finite.
// Costs nothing beyond clipping's norm computation unless that norm is not finite.
StepOutcome guarded_step(nn::Optimizer& opt, float loss, double clip, int64_t step);

}  // namespace tg::train
