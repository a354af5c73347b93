// Shared helpers of the autograd tests.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "autograd/functions.hpp"
#include "autograd/gradcheck.hpp"
#include "autograd/tape.hpp"
#include "tests/test_util.hpp"

namespace tg::testing {

inline Tensor randn(const Shape& shape, Generator& gen, bool requires_grad = true) {
  Tensor t = Tensor::normal(shape, 0.0f, 1.0f, gen);
  t.requires_grad_(requires_grad);
  return t;
}

// Values in [lo, hi] (e.g. positive inputs for log/sqrt, divisors away from 0).
inline Tensor randu(const Shape& shape, float lo, float hi, Generator& gen, bool requires_grad = true) {
  Tensor t = Tensor::uniform(shape, lo, hi, gen);
  t.requires_grad_(requires_grad);
  return t;
}

// Normal values pushed at least `gap` away from 0, for functions with a kink at 0 (relu).
inline Tensor randn_away_from_zero(const Shape& shape, Generator& gen, float gap = 0.1f) {
  Tensor t = Tensor::normal(shape, 0.0f, 1.0f, gen);
  for (int64_t i = 0; i < t.numel(); ++i) t.data()[i] += t.data()[i] < 0 ? -gap : gap;
  t.requires_grad_();
  return t;
}

// Runs gradcheck and reports the worst element when it fails.
inline void check_gradients(const GradFn& f, const std::vector<Tensor>& inputs, GradcheckOptions opt = {}) {
  const GradcheckResult r = gradcheck(f, inputs, opt);
  INFO(r.report);
  CHECK(r.ok);
  CHECK(r.checked > 0);
}

// Largest |a - b| over two same-sized tensors.
inline double max_abs_diff(const Tensor& a, const Tensor& b) {
  REQUIRE(a.numel() == b.numel());
  double m = 0.0;
  for (int64_t i = 0; i < a.numel(); ++i) m = std::max(m, std::abs(double(a.data()[i]) - b.data()[i]));
  return m;
}

}  // namespace tg::testing
