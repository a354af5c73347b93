// Gradcheck (and forward values) of the elementwise, reduction and shape functions.
#include <doctest/doctest.h>

#include <cmath>
#include <numbers>

#include "tests/autograd/helpers.hpp"

using namespace tg;
using namespace tg::testing;

namespace {
struct ShapePair {
  Shape a, b;
};
// Same shapes, broadcasting on either side, size-1 and odd sizes.
const ShapePair kBinaryShapes[] = {
    {{2, 3}, {2, 3}},
    {{2, 3}, {3}},
    {{3}, {2, 3}},
    {{2, 1, 4}, {3, 1}},
    {{1}, {5}},
    {{7, 5}, {7, 1}},
    {{}, {2, 2}},
    // one input repeated along the other's leading axes (add's bias_add, sum_to's bias_backward)
    {{2, 3, 4}, {3, 4}},
    {{1, 3, 4}, {2, 3, 4}},
    {{2, 3, 4}, {1, 1, 4}},
    {{4, 1}, {2, 4, 1}},
};
}  // namespace

TEST_CASE("elementwise.binary.gradcheck") {
  Generator gen(11);
  for (const auto& s : kBinaryShapes) {
    CAPTURE(shape_str(s.a));
    CAPTURE(shape_str(s.b));
    const Tensor a = randn(s.a, gen), b = randn(s.b, gen);
    const Tensor pos = randu(s.b, 0.5f, 2.0f, gen);
    check_gradients([](const std::vector<Tensor>& x) { return add(x[0], x[1]); }, {a, b});
    check_gradients([](const std::vector<Tensor>& x) { return sub(x[0], x[1]); }, {a, b});
    check_gradients([](const std::vector<Tensor>& x) { return mul(x[0], x[1]); }, {a, b});
    check_gradients([](const std::vector<Tensor>& x) { return div(x[0], x[1]); }, {a, pos});
  }
}

TEST_CASE("elementwise.binary.forward_broadcasts") {
  const Tensor a = Tensor::from_data({2, 1}, {1, 2});
  const Tensor b = Tensor::from_data({3}, {10, 20, 30});
  const Tensor y = a + b;
  CHECK(y.shape() == Shape{2, 3});
  CHECK(y.to_vector() == std::vector<float>{11, 21, 31, 12, 22, 32});
}

// add with one input repeated along the other's leading axes (positional encodings, a bias), large
// enough for the threaded kernels: the sum bit for bit as the elementwise loop, the repeated input's
// gradient the column sums of dy (to float rounding), the other's dy itself.
TEST_CASE("elementwise.add.repeated_rows_threaded") {
  Generator gen(13);
  const int64_t rows = 3 * 257, cols = 96;
  for (const bool small_first : {false, true}) {
    CAPTURE(small_first);
    Tensor big = randn({3, 257, cols}, gen), small = randn({1, cols}, gen);
    const Tensor w = randn({3, 257, cols}, gen, false);
    big.zero_grad(), small.zero_grad();
    const Tensor y = small_first ? add(small, big) : add(big, small);
    backward(sum(mul(y, w)));
    REQUIRE(y.shape() == big.shape());
    bool exact = true;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        exact = exact && y.data()[r * cols + c] == big.data()[r * cols + c] + small.data()[c];
    CHECK(exact);
    CHECK(max_abs_diff(big.grad(), w) == 0.0);
    for (int64_t c = 0; c < cols; ++c) {
      double want = 0;
      for (int64_t r = 0; r < rows; ++r) want += w.data()[r * cols + c];
      CHECK(small.grad().data()[c] == doctest::Approx(want).epsilon(1e-4));
    }
  }
  // The repeated input used twice: its summed gradient is added to the one already there.
  Tensor big = randn({40, 33, 8}, gen), small = randn({8}, gen);
  const Tensor w = randn({40, 33, 8}, gen, false), w2 = randn({8}, gen, false);
  backward(add(sum(mul(add(big, small), w)), sum(mul(small, w2))));
  for (int64_t c = 0; c < 8; ++c) {
    double want = w2.data()[c];
    for (int64_t r = 0; r < 40 * 33; ++r) want += w.data()[r * 8 + c];
    CHECK(small.grad().data()[c] == doctest::Approx(want).epsilon(1e-4));
  }
  // No rows: an empty result, a zero gradient for the repeated input.
  Tensor none = randn({0, 3}, gen), row = randn({3}, gen);
  const Tensor y0 = add(none, row);
  CHECK(y0.shape() == Shape{0, 3});
  backward(sum(y0));
  CHECK(row.grad().to_vector() == std::vector<float>{0, 0, 0});
}

TEST_CASE("elementwise.unary.gradcheck") {
  Generator gen(12);
  for (const Shape& s : {Shape{2, 3}, Shape{1}, Shape{7}, Shape{}, Shape{3, 1, 5}}) {
    CAPTURE(shape_str(s));
    const Tensor x = randn(s, gen);
    const Tensor pos = randu(s, 0.3f, 2.0f, gen);
    using V = const std::vector<Tensor>&;
    check_gradients([](V v) { return neg(v[0]); }, {x});
    check_gradients([](V v) { return add_scalar(v[0], 1.5f); }, {x});
    check_gradients([](V v) { return mul_scalar(v[0], -2.5f); }, {x});
    check_gradients([](V v) { return rsub_scalar(3.0f, v[0]); }, {x});
    check_gradients([](V v) { return rdiv_scalar(2.0f, v[0]); }, {pos});
    check_gradients([](V v) { return 1.0f - v[0] * 2.0f + 3.0f / v[0] - v[0] / 4.0f; }, {pos});
    check_gradients([](V v) { return pow_scalar(v[0], 2.0f); }, {x});
    check_gradients([](V v) { return pow_scalar(v[0], 3.0f); }, {x});
    check_gradients([](V v) { return pow_scalar(v[0], 0.5f); }, {pos});
    check_gradients([](V v) { return pow_scalar(v[0], -1.5f); }, {pos});
    check_gradients([](V v) { return exp(v[0]); }, {x});
    check_gradients([](V v) { return log(v[0]); }, {pos});
    check_gradients([](V v) { return sqrt(v[0]); }, {pos});
    check_gradients([](V v) { return tanh(v[0]); }, {x});
    check_gradients([](V v) { return relu(v[0]); }, {randn_away_from_zero(s, gen)});
    check_gradients([](V v) { return gelu(v[0]); }, {x});
    check_gradients([](V v) { return gelu(v[0], GeluApprox::tanh); }, {x});
  }
}

TEST_CASE("elementwise.unary.forward_values") {
  const Tensor x = Tensor::from_data({4}, {-1.0f, 0.0f, 0.5f, 2.0f});
  const Tensor r = relu(x), g = gelu(x), gt = gelu(x, GeluApprox::tanh), p = pow_scalar(x, 2.0f);
  for (int64_t i = 0; i < 4; ++i) {
    const double v = x.data()[i];
    CHECK(r.data()[i] == doctest::Approx(std::max(v, 0.0)));
    CHECK(g.data()[i] == doctest::Approx(0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)))).epsilon(1e-6));
    const double u = std::sqrt(2.0 / std::numbers::pi) * (v + 0.044715 * v * v * v);
    CHECK(gt.data()[i] == doctest::Approx(0.5 * v * (1.0 + std::tanh(u))).epsilon(1e-6));
    CHECK(p.data()[i] == doctest::Approx(v * v));
  }
}

TEST_CASE("broadcast.sum_to_broadcast_to.gradcheck") {
  Generator gen(13);
  check_gradients([](const std::vector<Tensor>& x) { return sum_to(x[0], {3, 1}); }, {randn({2, 3, 4}, gen)});
  check_gradients(
      [](const std::vector<Tensor>& x) {
        return broadcast_to(x[0], {2, 3, 4});
      },
      {randn({3, 1}, gen)});
}

TEST_CASE("reduce.gradcheck") {
  Generator gen(14);
  using V = const std::vector<Tensor>&;
  for (const Shape& s : {Shape{2, 3}, Shape{1, 5}, Shape{3, 1, 4}, Shape{7}}) {
    CAPTURE(shape_str(s));
    const Tensor x = randn(s, gen);
    check_gradients([](V v) { return sum(v[0]); }, {x});
    check_gradients([](V v) { return mean(v[0]); }, {x});
    for (int64_t axis = -static_cast<int64_t>(s.size()); axis < static_cast<int64_t>(s.size()); ++axis) {
      for (bool keep : {false, true}) {
        CAPTURE(axis);
        CAPTURE(keep);
        check_gradients([axis, keep](V v) { return sum(v[0], axis, keep); }, {x});
        check_gradients([axis, keep](V v) { return mean(v[0], axis, keep); }, {x});
      }
    }
  }
}

TEST_CASE("reduce.forward_values") {
  const Tensor x = Tensor::from_data({2, 3}, {1, 2, 3, 4, 5, 6});
  CHECK(sum(x).item() == 21.0f);
  CHECK(mean(x).item() == 3.5f);
  CHECK(sum(x, 0).to_vector() == std::vector<float>{5, 7, 9});
  CHECK(sum(x, 1, true).shape() == Shape{2, 1});
  CHECK(mean(x, -1).to_vector() == std::vector<float>{2, 5});
}

TEST_CASE("shape.reshape.gradcheck_and_view") {
  Generator gen(15);
  const Tensor x = randn({2, 3, 4}, gen);
  check_gradients(
      [](const std::vector<Tensor>& v) {
        return reshape(v[0], {4, -1}) * reshape(v[0], {4, 6});
      },
      {x});
  const Tensor r = reshape(x, {-1});
  CHECK(r.shape() == Shape{24});
  CHECK(r.data() == x.data());  // a view: same storage, no copy
  CHECK(r.impl()->storage == x.impl()->storage);
}

TEST_CASE("shape.transpose_permute.gradcheck") {
  Generator gen(16);
  const Tensor x = randn({2, 3, 5}, gen);
  using V = const std::vector<Tensor>&;
  check_gradients([](V v) { return transpose(v[0], 0, 2); }, {x});
  check_gradients([](V v) { return transpose(v[0], -1, -2); }, {x});
  check_gradients([](V v) { return permute(v[0], {2, 0, 1}); }, {x});
  check_gradients([](V v) { return permute(v[0], {1, 2, 0}) * permute(v[0], {1, 2, 0}); }, {x});
  const Tensor t = transpose(Tensor::from_data({2, 3}, {1, 2, 3, 4, 5, 6}), 0, 1);
  CHECK(t.shape() == Shape{3, 2});
  CHECK(t.to_vector() == std::vector<float>{1, 4, 2, 5, 3, 6});
}

TEST_CASE("shape.slice.gradcheck_and_view") {
  Generator gen(17);
  const Tensor x = randn({4, 3, 5}, gen);
  using V = const std::vector<Tensor>&;
  check_gradients([](V v) { return slice(v[0], 0, 1, 3); }, {x});
  check_gradients([](V v) { return slice(v[0], 1, 1, 2); }, {x});
  check_gradients([](V v) { return slice(v[0], -1, -3, -1); }, {x});
  check_gradients([](V v) { return slice(v[0], 2, 0, 5) + slice(v[0], 2, 0, 5); }, {x});
  const Tensor s0 = slice(x, 0, 1, 3);
  CHECK(s0.impl()->storage == x.impl()->storage);  // leading axis: a view
  CHECK(s0.data() == x.data() + 15);
  const Tensor s1 = slice(x, 1, 1, 2);
  CHECK(s1.impl()->storage != x.impl()->storage);  // inner axis: a copy
  CHECK(s1.at({2, 0, 3}) == x.at({2, 1, 3}));
  // A slice of a [1, ...] tensor along axis 1 is still contiguous, hence a view.
  const Tensor one = randn({1, 6}, gen, false);
  CHECK(slice(one, 1, 2, 4).data() == one.data() + 2);
}

TEST_CASE("shape.concat.gradcheck") {
  Generator gen(18);
  const Tensor a = randn({2, 3}, gen), b = randn({2, 1}, gen), c = randn({2, 4}, gen, false);
  check_gradients([](const std::vector<Tensor>& v) { return concat({v[0], v[1], v[2]}, 1); }, {a, b, c});
  check_gradients([](const std::vector<Tensor>& v) { return concat({v[0], v[0]}, 0); }, {a});
  const Tensor y = concat({Tensor::from_data({1, 2}, {1, 2}), Tensor::from_data({1, 1}, {3})}, -1);
  CHECK(y.to_vector() == std::vector<float>{1, 2, 3});
}
