#include <doctest/doctest.h>

#include "autograd/functions.hpp"
#include "autograd/gradcheck.hpp"
#include "autograd/tape.hpp"

using namespace tg;

TEST_CASE("tape.add_broadcast.gradcheck") {
  Generator gen(1);
  Tensor a = Tensor::normal({2, 3}, 0, 1, gen).requires_grad_();
  Tensor b = Tensor::normal({3}, 0, 1, gen).requires_grad_();
  auto r = gradcheck([](const std::vector<Tensor>& x) { return mul(add(x[0], x[1]), x[1]); }, {a, b});
  INFO(r.report);
  CHECK(r.ok);
}
