// gradcheck: compares the tape's gradients with central finite differences.
//
// f maps the inputs to a tensor of any shape. It is reduced to a scalar with fixed random weights,
// L = sum(f(x) * w), so one backward pass checks the whole vector-Jacobian product. For every
// checked element x_i of every input that requires grad:
//   numeric  = (L(x_i + h) - L(x_i - h)) / 2h        (L accumulated in double)
//   analytic = dL/dx_i from backward()
// and the element passes when |analytic - numeric| <= atol + rtol * |numeric|, both finite (a NaN or
// infinite difference fails: f is not differentiable, or not even defined, within h of x).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "autograd/tensor.hpp"

namespace tg {

struct GradcheckOptions {
  double eps = 1e-2;  // step h (float32 inputs: large enough that rounding does not dominate)
  double atol = 1e-3;
  double rtol = 1e-2;
  int64_t max_samples = 0;  // per input: 0 checks every element, else a random sample of this many
  uint64_t seed = 1234;
};

struct GradcheckResult {
  bool ok = true;
  // The worst element (largest error relative to its tolerance):
  size_t input = 0;
  int64_t index = 0;
  double analytic = 0.0, numeric = 0.0;
  int64_t checked = 0;
  // one line: "ok: worst at input 1 [2, 3] element 4: analytic 0.1 numeric 0.1002 (18 checked)"
  std::string report;
};

using GradFn = std::function<Tensor(const std::vector<Tensor>&)>;
GradcheckResult gradcheck(const GradFn& f, const std::vector<Tensor>& inputs,
                          const GradcheckOptions& opt = {});

}  // namespace tg
