// Tape semantics: accumulation, grad mode, skipped gradients, clearing and buffer reuse,
// training a small MLP, DOT export, error messages, printing, views.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>

#include "ops/kernels.hpp"
#include "tests/autograd/helpers.hpp"

using namespace tg;
using namespace tg::testing;

TEST_CASE("tape.add_broadcast.gradcheck") {
  Generator gen(1);
  Tensor a = randn({2, 3}, gen), b = randn({3}, gen);
  check_gradients([](const std::vector<Tensor>& x) { return mul(add(x[0], x[1]), x[1]); }, {a, b});
}

TEST_CASE("tape.reuse_sums_gradients") {
  Tensor x = Tensor::from_data({3}, {1.0f, -2.0f, 0.5f}).requires_grad_();
  const Tensor y = sum(x * x + x);  // dy/dx = 2x + 1: x feeds three uses
  y.backward();
  for (int64_t i = 0; i < 3; ++i) CHECK(x.grad().data()[i] == doctest::Approx(2 * x.data()[i] + 1));
  // A second backward without zero_grad accumulates on top (PyTorch semantics).
  sum(x).backward();
  for (int64_t i = 0; i < 3; ++i) CHECK(x.grad().data()[i] == doctest::Approx(2 * x.data()[i] + 2));
  x.zero_grad();
  CHECK_FALSE(x.grad().defined());
  sum(x).backward();
  CHECK(x.grad().to_vector() == std::vector<float>{1, 1, 1});
}

TEST_CASE("tape.no_grad_guard_records_nothing") {
  Tape::current().clear();
  Tensor x = Tensor::ones({2, 2}).requires_grad_();
  {
    NoGradGuard ng;
    CHECK_FALSE(grad_enabled());
    const Tensor y = matmul(x, x) + x;
    CHECK_FALSE(y.requires_grad());
    CHECK(Tape::current().size() == 0);
  }
  CHECK(grad_enabled());
  const Tensor z = x * 2.0f;
  CHECK(z.requires_grad());
  CHECK(Tape::current().size() == 1);
  Tape::current().clear();
}

TEST_CASE("tape.constants_record_nothing") {
  Tape::current().clear();
  const Tensor a = Tensor::ones({3}), b = Tensor::ones({3});
  const Tensor c = exp(a * b);
  CHECK_FALSE(c.requires_grad());
  CHECK(Tape::current().size() == 0);
}

TEST_CASE("tape.skips_unneeded_gradients") {
  Tape::current().clear();
  Tensor a = Tensor::ones({2}).requires_grad_();
  const Tensor c = Tensor::ones({2});  // a constant input
  // A hand-made node: its backward must see needs(0) && !needs(1), and only a gets a gradient.
  Tensor out = a * c;
  bool needs_a = false, needs_c = true;
  Tensor y = out.detach();
  Node* n = Tape::current().record("probe", y, {a, c});
  REQUIRE(n != nullptr);
  n->backward = [&](const Tensor& dy, Grads& g) {
    needs_a = g.needs(0);
    needs_c = g.needs(1);
    if (g.needs(0)) g.accumulate(0, dy);
  };
  sum(y).backward();
  CHECK(needs_a);
  CHECK_FALSE(needs_c);
  CHECK_FALSE(c.grad().defined());
  // Built-in ops: layernorm with a frozen weight computes only dx and dbias.
  Generator gen(2);
  Tensor x = randn({2, 4}, gen), w = randn({4}, gen, false), b = randn({4}, gen);
  sum(layernorm(x, w, b) * x).backward();
  CHECK(x.grad().defined());
  CHECK(b.grad().defined());
  CHECK_FALSE(w.grad().defined());
}

TEST_CASE("tape.retain_grad_keeps_intermediate_gradient") {
  Tensor x = Tensor::from_data({2}, {1.0f, 2.0f}).requires_grad_();
  Tensor h = x * 3.0f;
  h.retain_grad();
  const Tensor m = x * 3.0f;  // not retained
  sum(h * h + m).backward();
  REQUIRE(h.grad().defined());
  CHECK(h.grad().to_vector() == std::vector<float>{6.0f, 12.0f});  // 2h
  CHECK_FALSE(m.grad().defined());
}

namespace {
// One training step of a tiny model; returns the loss.
float mlp_step(Tensor& w1, Tensor& b1, Tensor& w2, Tensor& b2, const Tensor& x, const Tensor& target,
               float lr) {
  const Tensor h = tanh(linear(x, w1, b1));
  const Tensor pred = linear(h, w2, b2);
  const Tensor diff = pred - target;
  const Tensor loss = mean(diff * diff);
  const float value = loss.item();
  loss.backward();
  for (Tensor* p : {&w1, &b1, &w2, &b2}) {
    ops::axpy(p->data(), p->grad().data(), -lr, p->numel());  // plain SGD
    p->zero_grad();
  }
  return value;
}
}  // namespace

TEST_CASE("tape.cleared_after_backward_and_buffers_reused") {
  Generator gen(3);
  Tensor w1 = randn({8, 3}, gen), b1 = randn({8}, gen), w2 = randn({1, 8}, gen), b2 = randn({1}, gen);
  const Tensor x = randn({16, 3}, gen, false), target = randn({16, 1}, gen, false);
  Tape::current().clear();
  mlp_step(w1, b1, w2, b2, x, target, 0.1f);
  CHECK(Tape::current().size() == 0);  // backward cleared the tape
  const int64_t before = storage_pool_misses();
  mlp_step(w1, b1, w2, b2, x, target, 0.1f);
  CHECK(storage_pool_misses() == before);  // the second step's buffers all came from the pool
  CHECK(Tape::current().size() == 0);
}

TEST_CASE("tape.holds_only_what_backward_rules_save") {
  // The tape refers to tensors by their autograd state only: an intermediate that no rule saved is
  // freed when the last handle goes, and what a rule saved is freed once that rule has run.
  Tape::current().clear();
  Tensor x = Tensor::from_data({3}, {0.5f, -1.0f, 2.0f}).requires_grad_();
  std::weak_ptr<Storage> y_data, z_data;
  Tensor loss;
  {
    const Tensor y = x * 2.0f;  // mul_scalar saves nothing (dy/dx = 2)
    const Tensor z = exp(y);    // exp saves its output
    y_data = y.impl()->storage;
    z_data = z.impl()->storage;
    loss = sum(z);
  }
  CHECK(y_data.expired());
  CHECK_FALSE(z_data.expired());
  loss.backward();
  CHECK(z_data.expired());
  for (int64_t i = 0; i < 3; ++i)
    CHECK(x.grad().data()[i] == doctest::Approx(2.0f * std::exp(2.0f * x.data()[i])));
}

TEST_CASE("tape.pass_through_gradients_hand_over_buffers") {
  // add's rule passes dout on: the first input without a gradient takes the buffer itself, the
  // second gets a copy, and an output that retains its gradient keeps its own.
  Tape::current().clear();
  Tensor a = Tensor::from_data({3}, {1, 2, 3}).requires_grad_(), b = Tensor::from_data({3}, {4, 5, 6});
  b.requires_grad_();
  Tensor y = a + b;
  y.retain_grad();
  sum(y * 2.0f + a).backward();
  CHECK(a.grad().to_vector() == std::vector<float>{3, 3, 3});  // 1 from "+ a", 2 through y
  CHECK(b.grad().to_vector() == std::vector<float>{2, 2, 2});
  CHECK(y.grad().to_vector() == std::vector<float>{2, 2, 2});  // not changed by a's accumulation
  CHECK(a.grad().impl()->storage != b.grad().impl()->storage);
  CHECK(y.grad().impl()->storage != a.grad().impl()->storage);
  CHECK(y.grad().impl()->storage != b.grad().impl()->storage);
  // Both inputs fresh: one takes the buffer, the other a copy; a later contribution to the first
  // (a3 * 5 was recorded earlier, so its rule runs later) must not leak into the second.
  Tensor a3 = Tensor::from_data({2}, {1, 2}).requires_grad_(), b3 = Tensor::from_data({2}, {3, 4});
  b3.requires_grad_();
  const Tensor t = a3 * 5.0f;
  sum(t + (a3 + b3) * 3.0f).backward();
  CHECK(a3.grad().to_vector() == std::vector<float>{8, 8});
  CHECK(b3.grad().to_vector() == std::vector<float>{3, 3});
  // The same tensor twice: the handed-over buffer then receives the second contribution.
  Tensor x = Tensor::from_data({2}, {1, -1}).requires_grad_();
  sum(x + x).backward();
  CHECK(x.grad().to_vector() == std::vector<float>{2, 2});
  Tensor u = Tensor::from_data({2}, {1, -1}).requires_grad_();
  sum(u - u + u * 3.0f).backward();
  CHECK(u.grad().to_vector() == std::vector<float>{3, 3});
  // retain_graph: the second backward finds the handed-over buffers as the leaves' own gradients
  // and adds to them.
  Tensor p = Tensor::from_data({2}, {1, 2}).requires_grad_(), q = Tensor::from_data({2}, {3, 4});
  q.requires_grad_();
  const Tensor z = sum((p + q) * 2.0f);
  backward(z, Tensor(), /*retain_graph=*/true);
  backward(z, Tensor(), /*retain_graph=*/true);
  CHECK(p.grad().to_vector() == std::vector<float>{4, 4});
  CHECK(q.grad().to_vector() == std::vector<float>{4, 4});
  CHECK(p.grad().impl()->storage != q.grad().impl()->storage);
  Tape::current().clear();
}

TEST_CASE("tape.interrupted_backward_is_an_error") {
  Tape::current().clear();
  Tensor x = Tensor::from_data({2}, {1.0f, 2.0f}).requires_grad_();
  const Tensor y = x * 3.0f;
  Tensor bad = Tensor::zeros({2});
  if (Node* n = Tape::current().record("throws", bad, {y}))
    n->backward = [](const Tensor&, Grads&) { throw std::runtime_error("rule failed"); };
  const Tensor loss = sum(bad);
  CHECK_THROWS_WITH(loss.backward(), "rule failed");
  // sum's rule ran and released its state before the failure, so the tape was cleared: a second
  // attempt says so instead of running half a graph.
  CHECK(Tape::current().nodes().empty());
  CHECK_THROWS_WITH_AS(loss.backward(), doctest::Contains("interrupted by an error"), std::logic_error);
  // With retain_graph nothing is released, so the tape survives the failure.
  Tensor x2 = Tensor::from_data({2}, {1.0f, 2.0f}).requires_grad_();
  Tensor bad2 = Tensor::zeros({2});
  if (Node* n = Tape::current().record("throws", bad2, {x2 * 3.0f}))
    n->backward = [](const Tensor&, Grads&) { throw std::runtime_error("rule failed"); };
  const Tensor loss2 = sum(bad2);
  CHECK_THROWS_WITH(backward(loss2, Tensor(), /*retain_graph=*/true), "rule failed");
  CHECK(Tape::current().nodes().size() == 3);
  Tape::current().clear();
}

TEST_CASE("tape.backward_from_a_leaf") {
  // A leaf root was never recorded on the tape: its gradient is the seed, in the leaf's shape.
  Tape::current().clear();
  Tensor x = Tensor::ones({3}).requires_grad_();
  x.backward(Tensor::from_data({3}, {1.0f, 2.0f, 3.0f}));
  REQUIRE(x.grad().defined());
  CHECK(x.grad().shape() == Shape{3});
  CHECK(x.grad().at({2}) == 3.0f);
  Tensor s = Tensor::from_data({1}, {5.0f}).requires_grad_();
  s.backward();
  CHECK(s.grad().at({0}) == 1.0f);
}

TEST_CASE("tape.mlp_loss_falls_under_sgd") {
  Generator gen(4);
  // Regress y = sin(x0) + x1 * x2 on random points with a 3-16-1 tanh MLP.
  const Tensor x = Tensor::uniform({64, 3}, -1.0f, 1.0f, gen);
  Tensor target = Tensor::empty({64, 1});
  for (int64_t i = 0; i < 64; ++i) target.data()[i] = std::sin(x.at({i, 0})) + x.at({i, 1}) * x.at({i, 2});
  Tensor w1 = Tensor::uniform({16, 3}, -0.5f, 0.5f, gen).requires_grad_(),
         b1 = Tensor::zeros({16}).requires_grad_();
  Tensor w2 = Tensor::uniform({1, 16}, -0.5f, 0.5f, gen).requires_grad_(),
         b2 = Tensor::zeros({1}).requires_grad_();
  const float first = mlp_step(w1, b1, w2, b2, x, target, 0.2f);
  float last = first;
  for (int step = 0; step < 300; ++step) last = mlp_step(w1, b1, w2, b2, x, target, 0.2f);
  INFO("loss " << first << " -> " << last);
  CHECK(last < 0.25f * first);
}

TEST_CASE("tape.dot_export") {
  Tape::current().clear();
  Tensor a = Tensor::ones({2, 3}).requires_grad_().set_name("a");
  Tensor b = Tensor::ones({3, 4}).set_name("b");
  const Tensor loss = sum(relu(matmul(a, b)));
  const std::string dot = to_dot();
  INFO(dot);
  CHECK(dot.find("digraph tape {") == 0);
  CHECK(dot.find("op0 [shape=ellipse, label=\"matmul\\n[2, 4]\"]") != std::string::npos);
  CHECK(dot.find("op1 [shape=ellipse, label=\"relu\\n[2, 4]\"]") != std::string::npos);
  CHECK(dot.find("op2 [shape=ellipse, label=\"sum\\n[]\"]") != std::string::npos);
  CHECK(dot.find("label=\"a\\n[2, 3]\"") != std::string::npos);
  CHECK(dot.find("style=dashed, label=\"b\\n[3, 4]\"") != std::string::npos);  // a constant
  for (const char* edge : {"leaf0 -> op0;", "leaf1 -> op0;", "op0 -> op1;", "op1 -> op2;"})
    CHECK(dot.find(edge) != std::string::npos);
  size_t edges = 0;
  for (size_t at = dot.find("->"); at != std::string::npos; at = dot.find("->", at + 2)) ++edges;
  CHECK(edges == 4);
  Tape::current().clear();
  (void)loss;
}

TEST_CASE("errors.name_op_and_shapes") {
  const Tensor a = Tensor::ones({2, 3}), b = Tensor::ones({4, 5});
  std::string e = error_of([&] { add(a, Tensor::ones({4})); });
  CHECK(e == "add: shapes [2, 3] and [4] cannot be broadcast");
  e = error_of([&] { matmul(a, b); });
  CHECK(e == "matmul: inner dimensions differ: [2, 3] @ [4, 5]");
  e = error_of([&] { matmul(a, b, false, true); });
  CHECK(e == "matmul: inner dimensions differ: [2, 3] @ [4, 5]^T");
  e = error_of([&] { matmul(Tensor::ones({3}), b); });
  CHECK(e == "matmul: operands must be at least 2-D: [3] @ [4, 5]");
  e = error_of([&] { matmul(Tensor::ones({2, 2, 3}), Tensor::ones({3, 3, 4})); });
  CHECK(e == "matmul: batch dimensions cannot be broadcast: [2, 2, 3] @ [3, 3, 4]");
  e = error_of([&] { sum(a, 2); });
  CHECK(e == "sum: axis 2 out of range for shape [2, 3]");
  e = error_of([&] { mean(a, -3); });
  CHECK(e == "mean: axis -3 out of range for shape [2, 3]");
  e = error_of([&] { transpose(a, 0, 5); });
  CHECK(e == "transpose: axis 5 out of range for shape [2, 3]");
  e = error_of([&] { reshape(a, {4, 2}); });
  CHECK(e.find("reshape: cannot reshape [2, 3]") == 0);
  e = error_of([&] { permute(a, {0, 0}); });
  CHECK(e.find("permute: dims [0, 0] are not a permutation") == 0);
  e = error_of([&] { slice(a, 1, 2, 5); });
  CHECK(e == "slice: range [2, 5) out of bounds for axis 1 of shape [2, 3]");
  e = error_of([&] { concat({a, b}, 0); });
  CHECK(e.find("concat: shape [4, 5]") == 0);
  e = error_of([&] { linear(a, b, Tensor()); });
  CHECK(e.find("linear: input [2, 3] has 3 features but weight [4, 5] expects 5") == 0);
  e = error_of([&] { layernorm(a, Tensor::ones({2}), Tensor()); });
  CHECK(e.find("layernorm: weight [2] does not match input [2, 3]") == 0);
  const std::vector<int32_t> ids{0, 7};
  e = error_of([&] { embedding(b, ids, {2}); });
  CHECK(e == "embedding: id 7 at position 1 out of range [0, 4) for weight [4, 5]");
  const std::vector<int32_t> targets{0, 3};
  e = error_of([&] { cross_entropy(a, targets); });
  CHECK(e.find("cross_entropy: target 3 at row 1 out of range [0, 3)") == 0);
  const BoolMask m{{2}, {0, 1}};
  e = error_of([&] { softmax(a, m); });
  CHECK(e.find("softmax: ") == 0);
  CHECK(e.find("[2, 3]") != std::string::npos);
  e = error_of([&] { (void)a.item(); });
  CHECK(e == "item: tensor of shape [2, 3] has 6 elements, expected 1");
  e = error_of([&] { dropout(a, 1.5f, true, *std::make_unique<Generator>(1)); });
  CHECK(e.find("dropout: probability 1.5") == 0);
}

TEST_CASE("errors.backward") {
  Tensor x = Tensor::ones({2, 3}).requires_grad_();
  const Tensor y = x * 2.0f;
  std::string e = error_of([&] { y.backward(); });
  CHECK(e.find("backward: called on a non-scalar tensor of shape [2, 3] without a seed") == 0);
  e = error_of([&] { y.backward(Tensor::ones({3})); });
  CHECK(e == "backward: seed shape [3] does not match tensor shape [2, 3]");
  y.backward(Tensor::full({2, 3}, 0.5f));  // with a seed: dx = 2 * seed
  CHECK(x.grad().to_vector() == std::vector<float>(6, 1.0f));
  e = error_of([&] { sum(Tensor::ones({2})).backward(); });
  CHECK(e.find("backward: tensor of shape [] does not require grad") == 0);
}

TEST_CASE("tensor.fmt_printing") {
  Tensor t = Tensor::from_data({2, 2}, {1, 2, 3, 4.5f});
  CHECK(fmt::format("{}", t) == "tensor([[1.0000, 2.0000],\n        [3.0000, 4.5000]], shape=[2, 2])");
  t.requires_grad_();
  CHECK(t.str() == "tensor([[1.0000, 2.0000],\n        [3.0000, 4.5000]], shape=[2, 2], requires_grad)");
  CHECK(fmt::format("{}", Tensor::scalar(2)) == "tensor(2.0000, shape=[])");
  CHECK(fmt::format("{}", Tensor::arange(10)) ==
        "tensor([0.0000, 1.0000, 2.0000, ..., 7.0000, 8.0000, 9.0000], shape=[10])");
}

TEST_CASE("tensor.views_share_storage") {
  Tensor x = Tensor::arange(6);
  Tensor r = reshape(x, {2, 3});
  CHECK(r.impl()->storage == x.impl()->storage);
  x.data()[4] = 40.0f;  // visible through the view
  CHECK(r.at({1, 1}) == 40.0f);
  const Tensor s = slice(r, 0, 1, 2);
  CHECK(s.at({0, 1}) == 40.0f);
  CHECK(s.impl()->offset == 3);
  // Gradients of a view flow back to the base tensor.
  Tensor p = Tensor::arange(6).requires_grad_();
  sum(slice(reshape(p, {3, 2}), 0, 1, 3) * 2.0f).backward();
  CHECK(p.grad().to_vector() == std::vector<float>{0, 0, 2, 2, 2, 2});
}

TEST_CASE("gradcheck.detects_a_wrong_rule_and_samples") {
  // y = a^2 recorded with a deliberately wrong backward (da = dy * a instead of 2 a dy).
  const GradFn wrong_square = [](const std::vector<Tensor>& v) {
    Tensor y = v[0] * v[0];
    Tensor out = y.detach();
    if (Node* n = Tape::current().record("wrong_square", out, {v[0]}))
      n->backward = [a = v[0].detach()](const Tensor& dy, Grads& g) { g.accumulate(0, dy * a); };
    return out;
  };
  Generator gen(5);
  const Tensor x = randu({3, 4}, 0.5f, 1.5f, gen);
  const GradcheckResult bad = gradcheck(wrong_square, {x});
  CHECK_FALSE(bad.ok);
  CHECK(bad.report.find("MISMATCH") == 0);
  CHECK(bad.numeric == doctest::Approx(2 * bad.analytic).epsilon(1e-2));
  GradcheckOptions opt;
  opt.max_samples = 5;
  const GradcheckResult good = gradcheck([](const std::vector<Tensor>& v) { return v[0] * v[0]; }, {x}, opt);
  CHECK(good.ok);
  CHECK(good.checked == 5);
}

TEST_CASE("tape.retain_graph_and_stale_backward") {
  Tensor x = Tensor::from_data({2}, {1.0f, 3.0f}).requires_grad_();
  const Tensor y = sum(x * x);
  backward(y, Tensor(), /*retain_graph=*/true);
  CHECK(Tape::current().size() == 2);  // kept
  backward(y);                         // runs again, gradients add up: 2 * 2x
  CHECK(x.grad().to_vector() == std::vector<float>{4.0f, 12.0f});
  CHECK(Tape::current().size() == 0);
  const std::string e = error_of([&] { y.backward(); });
  CHECK(e.find("backward: the tape that produced this tensor of shape [] was already cleared") == 0);
}

TEST_CASE("dropout.edge_probabilities") {
  Generator gen(6);
  Tensor x = Tensor::ones({3, 3}).requires_grad_();
  const Tensor all = dropout(x, 1.0f, true, gen);
  CHECK(all.to_vector() == std::vector<float>(9, 0.0f));
  sum(all).backward();
  CHECK(x.grad().to_vector() == std::vector<float>(9, 0.0f));
  CHECK(dropout(x, 0.0f, true, gen).impl() == x.impl());  // p = 0: the input itself
}
