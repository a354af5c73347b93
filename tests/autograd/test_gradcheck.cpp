// gradcheck itself: it must fail on a small error, and on a finite difference that is not a number.
// (A rule that is wrong by a factor of 2: tests/autograd/test_tape.cpp.)
#include "tests/autograd/helpers.hpp"

using namespace tg;
using namespace tg::testing;

namespace {

// y = x^2 + c x recorded with a backward that forgets the c: dx = 2 x dy, missing c dy.
Tensor square_plus(const Tensor& x, float c, bool forget_c) {
  Tensor out;
  {
    NoGradGuard ng;
    out = x * x + x * c;
  }
  if (Node* n = Tape::current().record("square_plus", out, {x}))
    n->backward = [x = x.detach(), c, forget_c](const Tensor& dy, Grads& g) {
      g.accumulate(0, forget_c ? dy * x * 2.0f : dy * (x * 2.0f + c));
    };
  return out;
}

}  // namespace

TEST_CASE("gradcheck.catches_a_missing_term_of_two_percent") {
  Generator gen(31);
  const Tensor x = randu({4, 5}, 0.5f, 1.5f, gen);  // dy/dx = 2x + c in [1.04, 3.04]
  const float c = 0.04f;                            // 1.3-3.8% of it
  const GradcheckResult good =
      gradcheck([&](const std::vector<Tensor>& v) { return square_plus(v[0], c, false); }, {x});
  INFO(good.report);
  CHECK(good.ok);
  const GradcheckResult bad =
      gradcheck([&](const std::vector<Tensor>& v) { return square_plus(v[0], c, true); }, {x});
  INFO(bad.report);
  CHECK_FALSE(bad.ok);
}

TEST_CASE("gradcheck.fails_on_a_non_finite_difference") {
  // sqrt at x = 0.004 with h = 1e-2: x - h < 0, so L(x - h) is NaN while the rule's 1 / (2 sqrt x)
  // is finite. NaN compares false with every tolerance: it must fail, not pass.
  const Tensor x = Tensor::from_data({3}, {0.004f, 1.0f, 2.0f}).requires_grad_();
  const GradcheckResult r = gradcheck([](const std::vector<Tensor>& v) { return sqrt(v[0]); }, {x});
  INFO(r.report);
  CHECK_FALSE(r.ok);
  CHECK(r.index == 0);
  CHECK(std::isnan(r.numeric));
  CHECK(r.report.find("MISMATCH") == 0);
  // Away from 0 the same function passes.
  const Tensor y = Tensor::from_data({2}, {1.0f, 2.0f}).requires_grad_();
  CHECK(gradcheck([](const std::vector<Tensor>& v) { return sqrt(v[0]); }, {y}).ok);
}

TEST_CASE("gradcheck.fails_on_an_infinite_difference") {
  // exp at x = 88.6 with h = 0.2: exp(88.6) = 3.0e38 fits a float, exp(88.8) overflows to inf.
  const Tensor x = Tensor::from_data({1}, {88.6f}).requires_grad_();
  GradcheckOptions opt;
  opt.eps = 0.2;
  const GradcheckResult r = gradcheck([](const std::vector<Tensor>& v) { return exp(v[0]); }, {x}, opt);
  INFO(r.report);
  CHECK_FALSE(r.ok);
  CHECK(std::isinf(r.numeric));
  CHECK(std::isfinite(r.analytic));
}
