// Gradcheck (and forward values) of matmul, linear and the neural-network functions.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "ops/kernels.hpp"
#include "tests/autograd/helpers.hpp"

using namespace tg;
using namespace tg::testing;

namespace {
using V = const std::vector<Tensor>&;

// The textbook product of op(a) and op(b) for 2-D a, b, in double.
Tensor naive_matmul(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  const int64_t M = ta ? a.size(1) : a.size(0), K = ta ? a.size(0) : a.size(1);
  const int64_t N = tb ? b.size(0) : b.size(1);
  Tensor y = Tensor::zeros({M, N});
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0.0;
      for (int64_t k = 0; k < K; ++k)
        s += double(ta ? a.at({k, i}) : a.at({i, k})) * (tb ? b.at({j, k}) : b.at({k, j}));
      y.data()[i * N + j] = static_cast<float>(s);
    }
  return y;
}

struct MatmulCase {
  Shape a, b;
  bool ta, tb;
};
const MatmulCase kMatmulCases[] = {
    {{3, 4}, {4, 5}, false, false},
    {{4, 3}, {4, 5}, true, false},
    {{3, 4}, {5, 4}, false, true},
    {{4, 3}, {5, 4}, true, true},
    {{1, 1}, {1, 1}, false, false},
    {{7, 5}, {5, 3}, false, false},
    {{2, 3, 4}, {2, 4, 5}, false, false},        // same batch
    {{2, 3, 4}, {4, 5}, false, false},           // 2-D b: folded into one product
    {{2, 3, 4}, {5, 4}, false, true},            // folded, b transposed
    {{2, 4, 3}, {4, 5}, true, false},            // 2-D b with a transposed: batched, b broadcast
    {{3, 4}, {2, 4, 5}, false, false},           // 2-D a broadcast over b's batch
    {{1, 3, 4}, {2, 4, 5}, false, false},        // size-1 batch dim
    {{2, 1, 3, 4}, {1, 3, 4, 5}, false, false},  // both broadcast: one gemm per entry
    {{2, 1, 4, 3}, {3, 5, 4}, true, true},
};
}  // namespace

TEST_CASE("matmul.gradcheck") {
  Generator gen(21);
  for (const auto& c : kMatmulCases) {
    CAPTURE(shape_str(c.a));
    CAPTURE(shape_str(c.b));
    CAPTURE(c.ta);
    CAPTURE(c.tb);
    const bool ta = c.ta, tb = c.tb;
    check_gradients([ta, tb](V v) { return matmul(v[0], v[1], ta, tb); }, {randn(c.a, gen), randn(c.b, gen)});
  }
}

TEST_CASE("matmul.forward_matches_naive") {
  Generator gen(22);
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const Tensor a = randn(ta ? Shape{5, 3} : Shape{3, 5}, gen, false);
      const Tensor b = randn(tb ? Shape{4, 5} : Shape{5, 4}, gen, false);
      CHECK(max_abs_diff(matmul(a, b, ta, tb), naive_matmul(a, b, ta, tb)) < 1e-5);
    }
  // Broadcast batch: entry (i, j) of [2, 1, 3, 4] @ [1, 2, 4, 5] is a[i] @ b[j].
  const Tensor a = randn({2, 1, 3, 4}, gen, false), b = randn({1, 2, 4, 5}, gen, false);
  const Tensor y = matmul(a, b);
  REQUIRE(y.shape() == Shape{2, 2, 3, 5});
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 2; ++j) {
      const Tensor ai = reshape(slice(a, 0, i, i + 1), {3, 4}), bj = reshape(slice(b, 1, j, j + 1), {4, 5});
      const Tensor yij = reshape(slice(reshape(y, {4, 3, 5}), 0, 2 * i + j, 2 * i + j + 1), {3, 5});
      CHECK(max_abs_diff(yij, naive_matmul(ai, bj, false, false)) < 1e-5);
    }
}

TEST_CASE("matmul.only_needed_gradients") {
  Generator gen(23);
  Tensor a = randn({2, 3, 4}, gen), b = randn({4, 5}, gen, false);
  sum(matmul(a, b)).backward();
  CHECK(a.grad().defined());
  CHECK_FALSE(b.grad().defined());
}

TEST_CASE("linear.gradcheck") {
  Generator gen(24);
  const Tensor w = randn({5, 4}, gen), bias = randn({5}, gen);
  check_gradients([](V v) { return linear(v[0], v[1], v[2]); }, {randn({2, 3, 4}, gen), w, bias});
  check_gradients([](V v) { return linear(v[0], v[1], Tensor()); }, {randn({3, 4}, gen), w});
  check_gradients([](V v) { return linear(v[0], v[1], v[2]); }, {randn({4}, gen), w, bias});
  check_gradients([](V v) { return linear(v[0], v[1], v[2]); },
                  {randn({1, 1}, gen), randn({1, 1}, gen), randn({1}, gen)});
  // Same values as matmul + bias.
  const Tensor x = randn({3, 4}, gen, false);
  CHECK(max_abs_diff(linear(x, w, bias), matmul(x, w, false, true) + bias) < 1e-5);
}

// gelu_linear = linear(gelu(h)) in one op: finite differences, the same bits as the two ops forward
// and backward, and one [R, in] tensor less kept on the tape (gelu(h) is recomputed in backward).
TEST_CASE("gelu_linear.gradcheck_matches_linear_of_gelu_and_keeps_less") {
  Generator gen(40);
  const Tensor w = randn({5, 4}, gen), bias = randn({5}, gen);
  check_gradients([](V v) { return gelu_linear(v[0], v[1], v[2]); }, {randn({2, 3, 4}, gen), w, bias});
  check_gradients([](V v) { return gelu_linear(v[0], v[1], Tensor()); }, {randn({3, 4}, gen), w});
  CHECK_THROWS_WITH_AS(gelu_linear(randn({3, 5}, gen), w, bias),
                       "gelu_linear: input [3, 5] has 5 features but weight [5, 4] expects 4",
                       std::invalid_argument);

  const Tensor h = randn({6, 40}, gen), w2 = randn({7, 40}, gen), b2 = randn({7}, gen);
  const Tensor r = randn({6, 7}, gen, false);  // upstream gradient, through sum(y * r)
  auto run = [&](bool fused) {
    for (Tensor t : {h, w2, b2}) t.zero_grad();
    const Tensor y = fused ? gelu_linear(h, w2, b2) : linear(gelu(h), w2, b2);
    sum(y * r).backward();
    return std::vector<Tensor>{y.detach(), h.grad(), w2.grad(), b2.grad()};
  };
  const std::vector<Tensor> fused = run(true), apart = run(false);
  for (size_t i = 0; i < fused.size(); ++i) {
    CAPTURE(i);
    CHECK(max_abs_diff(fused[i], apart[i]) == 0.0);
  }

  // What the tape keeps until backward: the live bytes after the forward pass, beyond its inputs.
  const Tensor big = randn({64, 256}, gen), wb = randn({32, 256}, gen);
  auto kept = [&](bool fused) {
    const int64_t before = storage_pool_stats().live_bytes;
    const Tensor y = fused ? gelu_linear(big, wb, Tensor()) : linear(gelu(big), wb, Tensor());
    const int64_t after = storage_pool_stats().live_bytes;
    sum(y).backward();  // clears the tape
    return after - before;
  };
  const int64_t kept_fused = kept(true), kept_apart = kept(false);
  CHECK(kept_apart - kept_fused == 64 * 256 * int64_t(sizeof(float)));  // gelu(h), [64, 256]
}

// The same for GPT-2's tanh form (transformers' "gelu_new").
TEST_CASE("gelu_linear.tanh.gradcheck_matches_linear_of_gelu") {
  Generator gen(41);
  const Tensor w = randn({5, 4}, gen), bias = randn({5}, gen);
  check_gradients([](V v) { return gelu_linear(v[0], v[1], v[2], GeluApprox::tanh); },
                  {randn({2, 3, 4}, gen), w, bias});
  const Tensor h = randn({6, 40}, gen), w2 = randn({7, 40}, gen), b2 = randn({7}, gen);
  const Tensor r = randn({6, 7}, gen, false);
  auto run = [&](bool fused) {
    for (Tensor t : {h, w2, b2}) t.zero_grad();
    const Tensor y =
        fused ? gelu_linear(h, w2, b2, GeluApprox::tanh) : linear(gelu(h, GeluApprox::tanh), w2, b2);
    sum(y * r).backward();
    return std::vector<Tensor>{y.detach(), h.grad(), w2.grad(), b2.grad()};
  };
  const std::vector<Tensor> fused = run(true), apart = run(false);
  for (size_t i = 0; i < fused.size(); ++i) {
    CAPTURE(i);
    CHECK(max_abs_diff(fused[i], apart[i]) == 0.0);
  }
  // And it is not the erf form.
  CHECK(max_abs_diff(gelu_linear(h, w2, b2, GeluApprox::tanh), gelu_linear(h, w2, b2)) > 1e-5);
}

TEST_CASE("softmax.gradcheck") {
  Generator gen(25);
  const float ninf = -std::numeric_limits<float>::infinity();
  for (const Shape& s : {Shape{3, 5}, Shape{1, 1}, Shape{7}, Shape{2, 3, 4}}) {
    CAPTURE(shape_str(s));
    check_gradients([](V v) { return softmax(v[0]); }, {randn(s, gen)});
    check_gradients([](V v) { return log_softmax(v[0]); }, {randn(s, gen)});
  }
  const Tensor x = randn({2, 3, 4}, gen);
  const Tensor finite_mask = Tensor::from_data({3, 1}, {0.0f, 0.5f, -1.0f});
  const Tensor inf_mask = Tensor::from_data({4}, {0.0f, ninf, 0.5f, -1.0f});
  check_gradients([finite_mask](V v) { return softmax(v[0], finite_mask); }, {x});
  check_gradients([finite_mask](V v) { return log_softmax(v[0], finite_mask); }, {x});
  check_gradients([inf_mask](V v) { return softmax(v[0], inf_mask); }, {x});
  // log_softmax is -inf at masked entries, which a finite-difference loss cannot take: exp()
  // maps them to 0 (and passes a zero gradient back, as any use of a masked entry would).
  check_gradients([inf_mask](V v) { return exp(log_softmax(v[0], inf_mask)); }, {x});
}

TEST_CASE("softmax.additive_mask.forward") {
  const float ninf = -std::numeric_limits<float>::infinity();
  const Tensor x = Tensor::from_data({1, 3}, {1.0f, 2.0f, 3.0f});
  const Tensor y = softmax(x, Tensor::from_data({3}, {0.0f, ninf, 0.0f}));
  CHECK(y.at({0, 1}) == 0.0f);
  CHECK(y.at({0, 0}) == doctest::Approx(1.0 / (1.0 + std::exp(2.0))));
}

TEST_CASE("softmax.bool_mask.gradcheck_and_values") {
  Generator gen(26);
  const Shape xs{2, 3, 4, 5};
  // Key padding [B, 1, 1, S], causal [T, S], full, mixed [B, 1, T, S], per-row [B, H, T, 1].
  std::vector<BoolMask> masks;
  masks.push_back({{2, 1, 1, 5}, {0, 0, 0, 1, 1, 0, 0, 0, 0, 1}});
  BoolMask causal{{4, 5}, std::vector<uint8_t>(20)};
  for (int t = 0; t < 4; ++t)
    for (int s = 0; s < 5; ++s) causal.data[t * 5 + s] = s > t + 1;
  masks.push_back(causal);
  BoolMask full{xs, std::vector<uint8_t>(120)}, mixed{{2, 1, 4, 5}, std::vector<uint8_t>(40)};
  for (auto& b : full.data) b = gen.uniform() < 0.3f;
  for (auto& b : mixed.data) b = gen.uniform() < 0.3f;
  masks.push_back(full);
  masks.push_back(mixed);
  BoolMask rows{{2, 3, 4, 1}, std::vector<uint8_t>(24)};
  rows.data[5] = 1;  // one fully masked row
  masks.push_back(rows);

  const Tensor x = randn(xs, gen);
  for (const BoolMask& m : masks) {
    CAPTURE(shape_str(m.shape));
    check_gradients([&m](V v) { return softmax(v[0], m); }, {x});
    // An all-masked row is NaN under log_softmax (as in PyTorch): not differentiable there.
    if (m.shape.back() != 1) check_gradients([&m](V v) { return exp(log_softmax(v[0], m)); }, {x});
    // Masked entries: probability exactly 0 (log-probability -inf); other rows sum to 1.
    const Tensor y = softmax(x, m), ly = log_softmax(x, m);
    const Shape ms = m.shape;
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t h = 0; h < 3; ++h)
        for (int64_t t = 0; t < 4; ++t) {
          double row_sum = 0.0;
          int visible = 0;
          for (int64_t s = 0; s < 5; ++s) {
            // Index of (b, h, t, s) in the mask, broadcasting its size-1 axes.
            const int64_t idx[4] = {b, h, t, s};
            int64_t flat = 0;
            for (size_t d = 0; d < ms.size(); ++d) {
              const int64_t i = idx[4 - ms.size() + d];
              flat = flat * ms[d] + (ms[d] == 1 ? 0 : i);
            }
            const float p = y.at({b, h, t, s});
            if (m.data[static_cast<size_t>(flat)]) {
              CHECK(p == 0.0f);
              CHECK_FALSE(ly.at({b, h, t, s}) > -std::numeric_limits<float>::infinity());  // -inf or NaN
            } else {
              ++visible;
              CHECK(p == doctest::Approx(std::exp(ly.at({b, h, t, s}))).epsilon(1e-5));
            }
            row_sum += p;
          }
          CHECK(row_sum == doctest::Approx(visible ? 1.0 : 0.0).epsilon(1e-5));
        }
  }
}

TEST_CASE("layernorm.gradcheck") {
  Generator gen(27);
  using V = const std::vector<Tensor>&;
  for (const Shape& s : {Shape{3, 7}, Shape{2, 3, 5}, Shape{1, 4}}) {
    CAPTURE(shape_str(s));
    const int64_t C = s.back();
    const Tensor x = randn(s, gen), w = randn({C}, gen), b = randn({C}, gen);
    check_gradients([](V v) { return layernorm(v[0], v[1], v[2]); }, {x, w, b});
    check_gradients([](V v) { return layernorm(v[0], Tensor(), Tensor()); }, {x});
    check_gradients([](V v) { return layernorm(v[0], v[1], Tensor(), 1e-3f); }, {x, w});
  }
  // Forward: each row has mean 0 and (biased) variance 1 before the affine part.
  const Tensor x = randn({4, 6}, gen, false);
  const Tensor y = layernorm(x, Tensor(), Tensor(), 1e-5f);
  const Tensor mu = mean(y, 1), var = mean(y * y, 1);
  for (int64_t r = 0; r < 4; ++r) {
    CHECK(mu.data()[r] == doctest::Approx(0.0).epsilon(1e-5).scale(1.0));
    CHECK(var.data()[r] == doctest::Approx(1.0).epsilon(1e-3));
  }
}

TEST_CASE("embedding.gradcheck_and_gather") {
  Generator gen(28);
  const std::vector<int32_t> ids{1, 4, 1, 0, 5, 1};
  check_gradients([&ids](V v) { return embedding(v[0], ids, {2, 3}); }, {randn({6, 4}, gen)});
  Tensor w = randn({6, 4}, gen);
  const Tensor y = embedding(w, ids, {2, 3});
  REQUIRE(y.shape() == Shape{2, 3, 4});
  CHECK(y.at({1, 1, 2}) == w.at({5, 2}));
  sum(y).backward();
  CHECK(w.grad().at({1, 0}) == 3.0f);  // id 1 used three times: scatter-add sums
  CHECK(w.grad().at({2, 0}) == 0.0f);  // unused row
}

// Past 2^16 values (kEmbeddingThreadMinValues; the sizes here are 2.4-4.6 times that) the gather splits
// the rows and the scatter-add the columns, in blocks of 16, between threads: every thread count
// gives the serial rule's values bit for bit (each gradient value sums its rows in position order),
// with repeated ids, d not a multiple of 16, more threads than column blocks (d 40: 3 blocks), one
// block (d 8: the scatter on one thread), and a second lookup of the same weight adding onto the
// gradient the first made (a tied weight's case).
TEST_CASE("embedding.threaded_matches_serial") {
  Generator gen(31);
  const int64_t vocab = 37;
  const auto run = [&](int64_t d, int64_t rows) {
    CAPTURE(d);
    std::vector<int32_t> ids(static_cast<size_t>(rows)), ids2(static_cast<size_t>(rows));
    for (int64_t p = 0; p < rows; ++p) {
      ids[static_cast<size_t>(p)] = static_cast<int32_t>((p * p + 3 * p) % vocab);
      ids2[static_cast<size_t>(p)] = static_cast<int32_t>((5 * p + 1) % vocab);
    }
    const Tensor w0 = randn({vocab, d}, gen, false), dy = randn({rows, d}, gen, false);
    // The rule by hand. backward runs the second lookup's rule first (reverse recording order).
    std::vector<float> dw_ref(static_cast<size_t>(vocab * d), 0.0f);
    for (const auto* lookup : {&ids2, &ids})
      for (int64_t p = 0; p < rows; ++p)
        for (int64_t c = 0; c < d; ++c)
          dw_ref[static_cast<size_t>((*lookup)[static_cast<size_t>(p)] * d + c)] += dy.data()[p * d + c];
    for (const int threads : {1, 2, 3, 4}) {
      CAPTURE(threads);
      ops::set_num_threads(threads);
      Tensor w = w0.detach().requires_grad_();
      const Tensor y = embedding(w, ids, {rows}), y2 = embedding(w, ids2, {rows});
      bool gathered = true;
      for (int64_t p = 0; p < rows; ++p)
        gathered = gathered && std::equal(y.data() + p * d, y.data() + (p + 1) * d,
                                          w0.data() + ids[static_cast<size_t>(p)] * d);
      CHECK(gathered);
      backward(y + y2, dy);
      CHECK(w.grad().to_vector() == dw_ref);
    }
    ops::set_num_threads(0);
  };
  run(100, 3000);
  run(40, 4000);
  run(8, 20000);
}

TEST_CASE("dropout.gradcheck_and_statistics") {
  Generator gen(29);
  check_gradients(
      [](V v) {
        Generator g(7);  // the same mask on every evaluation
        return dropout(v[0], 0.3f, true, g);
      },
      {randn({4, 5}, gen)});
  const Tensor x = Tensor::ones({10000});
  Generator g(3);
  const Tensor y = dropout(x, 0.25f, true, g);
  int64_t zeros = 0;
  for (float v : y.to_vector()) {
    if (v == 0.0f)
      ++zeros;
    else
      CHECK(v == doctest::Approx(1.0f / 0.75f));
  }
  CHECK(zeros > 2300);
  CHECK(zeros < 2700);
  CHECK(dropout(x, 0.5f, false, g).data() == x.data());  // eval: identity
  Generator g1(5), g2(5);
  CHECK(dropout(x, 0.5f, true, g1).to_vector() == dropout(x, 0.5f, true, g2).to_vector());  // seeded
}

TEST_CASE("relu_dropout.gradcheck_and_matches_dropout_of_relu") {
  Generator gen(31);
  check_gradients(
      [](V v) {
        Generator g(7);  // the same mask on every evaluation
        return relu_dropout(v[0], 0.3f, true, g);
      },
      {randn_away_from_zero({6, 7}, gen)});  // no finite difference across the kink
  // The same draws as dropout(relu(x)): equal values; relu(x) when not training.
  const Tensor x = randn({50, 40}, gen, false);
  Generator g1(11), g2(11);
  CHECK(relu_dropout(x, 0.4f, true, g1).to_vector() == dropout(relu(x), 0.4f, true, g2).to_vector());
  CHECK(relu_dropout(x, 0.4f, false, g1).to_vector() == relu(x).to_vector());
  // Its gradient equals that of the two ops composed.
  Tensor a = x.clone().requires_grad_(), b = x.clone().requires_grad_();
  Generator g3(12), g4(12);
  sum(relu_dropout(a, 0.25f, true, g3)).backward();
  sum(dropout(relu(b), 0.25f, true, g4)).backward();
  CHECK(a.grad().to_vector() == b.grad().to_vector());
}

TEST_CASE("dropout_add.gradcheck_and_matches_add_of_dropout") {
  Generator gen(32);
  check_gradients(
      [](V v) {
        Generator g(8);  // the same mask on every evaluation
        return dropout_add(v[0], v[1], 0.3f, true, g);
      },
      {randn({6, 7}, gen), randn({6, 7}, gen)});
  // Large enough for the threaded, chunked forward (mask indices must continue across chunks).
  const Tensor x = randn({300, 400}, gen, false), y = randn({300, 400}, gen, false);
  Generator g1(13), g2(13);
  CHECK(dropout_add(x, y, 0.4f, true, g1).to_vector() == add(x, dropout(y, 0.4f, true, g2)).to_vector());
  CHECK(dropout_add(x, y, 0.4f, false, g1).to_vector() == add(x, y).to_vector());
  // Gradients equal those of the two ops composed, also when dy has an earlier contribution
  // (y used twice: the fused rule adds instead of storing).
  for (bool y_twice : {false, true}) {
    Tensor a = x.clone().requires_grad_(), b = y.clone().requires_grad_();
    Tensor a2 = x.clone().requires_grad_(), b2 = y.clone().requires_grad_();
    Generator g3(14), g4(14);
    const Tensor w = randn({300, 400}, gen, false);
    Tensor l1 = sum(mul(dropout_add(a, b, 0.25f, true, g3), w));
    if (y_twice) l1 = l1 + sum(b);  // recorded later, so its rule runs first
    l1.backward();                  // (one tape per thread: each loss is run before the next is built)
    Tensor l2 = sum(mul(add(a2, dropout(b2, 0.25f, true, g4)), w));
    if (y_twice) l2 = l2 + sum(b2);
    l2.backward();
    CHECK(a.grad().to_vector() == a2.grad().to_vector());
    // (adding onto an earlier contribution, dropout_backward may fuse the multiply-add: 1 ulp)
    const std::vector<float> gb = b.grad().to_vector(), gb2 = b2.grad().to_vector();
    float worst = 0.0f;
    for (size_t i = 0; i < gb.size(); ++i) worst = std::max(worst, std::abs(gb[i] - gb2[i]));
    CHECK(worst <= (y_twice ? 1e-6f : 0.0f));
  }
  CHECK_THROWS_WITH_AS(dropout_add(x, randn({400, 300}, gen, false), 0.1f, true, g1),
                       doctest::Contains("[300, 400]"), std::invalid_argument);
}

TEST_CASE("cross_entropy.gradcheck_and_values") {
  Generator gen(30);
  const std::vector<int32_t> t{2, 0, -100, 6, 3};
  for (float eps : {0.0f, 0.1f}) {
    CAPTURE(eps);
    check_gradients([&t, eps](V v) { return cross_entropy(v[0], t, -100, eps); }, {randn({5, 7}, gen)});
  }
  const std::vector<int32_t> one{0};
  check_gradients([&one](V v) { return cross_entropy(v[0], one); }, {randn({1, 1}, gen)});

  // Value: mean over the kept rows of -log softmax(x)[t], computed here from log_softmax.
  const Tensor x = randn({5, 7}, gen, false);
  const Tensor lp = log_softmax(x);
  double expect = 0.0;
  for (int64_t r : {0, 1, 3, 4}) expect -= lp.at({r, t[static_cast<size_t>(r)]});
  CHECK(cross_entropy(x, t).item() == doctest::Approx(expect / 4).epsilon(1e-5));

  // Every row ignored: the loss is 0 and so is the gradient (documented choice; PyTorch gives NaN).
  Tensor z = randn({3, 4}, gen);
  const std::vector<int32_t> ignored{0, 0, 0};
  const Tensor l = cross_entropy(z, ignored, 0);
  CHECK(l.item() == 0.0f);
  l.backward();
  REQUIRE(z.grad().defined());
  for (float v : z.grad().to_vector()) CHECK(v == 0.0f);
}

TEST_CASE("linear_cross_entropy.chunked_matches_linear_then_cross_entropy") {
  // Chunks of 1, 3, 4 and all rows (7 rows: a last chunk shorter than the others), with and without
  // a bias, label smoothing and an ignored row: the loss and every gradient match the unchunked
  // linear() then cross_entropy() to rounding, and finite differences.
  Generator gen(41);
  const auto max_diff = [](const Tensor& a, const Tensor& b) {
    REQUIRE(a.numel() == b.numel());
    double m = 0.0;
    for (int64_t i = 0; i < a.numel(); ++i) m = std::max(m, std::abs(double(a.data()[i]) - b.data()[i]));
    return m;
  };
  const int64_t N = 7, d = 5, classes = 11;
  const std::vector<int32_t> t{3, 0, -100, 10, 4, 4, 7};
  const Tensor x0 = randn({N, d}, gen, false), w0 = randn({classes, d}, gen, false),
               b0 = randn({classes}, gen, false);
  for (bool with_bias : {false, true})
    for (float eps : {0.0f, 0.1f}) {
      Tensor x = x0.clone().requires_grad_(), w = w0.clone().requires_grad_(),
             b = b0.clone().requires_grad_();
      Tensor ref = cross_entropy(linear(x, w, with_bias ? b : Tensor()), t, -100, eps);
      ref.backward();
      const Tensor rdx = x.grad(), rdw = w.grad(), rdb = with_bias ? b.grad() : Tensor();
      for (int64_t chunk : {1, 3, 4, 0}) {
        CAPTURE(with_bias);
        CAPTURE(eps);
        CAPTURE(chunk);
        Tensor xc = x0.clone().requires_grad_(), wc = w0.clone().requires_grad_(),
               bc = b0.clone().requires_grad_();
        const Tensor l =
            linear_cross_entropy(xc, wc, with_bias ? bc : Tensor(), t,
                                 {.ignore_index = -100, .label_smoothing = eps, .chunk_rows = chunk});
        CHECK(l.item() == doctest::Approx(ref.item()).epsilon(1e-6));
        (l * 2.0f).backward();  // an upstream gradient other than 1
        CHECK(max_diff(xc.grad(), rdx * 2.0f) < 1e-5);
        CHECK(max_diff(wc.grad(), rdw * 2.0f) < 1e-5);
        if (with_bias) CHECK(max_diff(bc.grad(), rdb * 2.0f) < 1e-5);
      }
      check_gradients(
          [&t, eps, with_bias](V v) {
            return linear_cross_entropy(v[0], v[1], with_bias ? v[2] : Tensor(), t,
                                        {.label_smoothing = eps, .chunk_rows = 3});
          },
          {randn({N, d}, gen), randn({classes, d}, gen), randn({classes}, gen)});
    }
  // Without a tape (evaluation) only the loss; every row ignored: 0 and zero gradients.
  {
    NoGradGuard no_grad;
    CHECK(linear_cross_entropy(x0, w0, Tensor(), t, {.chunk_rows = 2}).item() ==
          doctest::Approx(cross_entropy(linear(x0, w0, Tensor()), t).item()).epsilon(1e-6));
  }
  Tensor z = randn({3, d}, gen), wz = w0.clone().requires_grad_();
  const Tensor l = linear_cross_entropy(z, wz, Tensor(), std::vector<int32_t>{0, 0, 0}, {.ignore_index = 0});
  CHECK(l.item() == 0.0f);
  l.backward();
  for (float v : z.grad().to_vector()) CHECK(v == 0.0f);
  for (float v : wz.grad().to_vector()) CHECK(v == 0.0f);
  // A weight that also gets a gradient from elsewhere (a tied embedding): the op adds to it.
  {
    Tensor xt = x0.clone().requires_grad_(), wt = w0.clone().requires_grad_();
    Tensor wr = w0.clone().requires_grad_();
    (cross_entropy(linear(x0, wr, Tensor()), t) + sum(wr * 3.0f)).backward();
    (sum(wt * 3.0f) + linear_cross_entropy(xt, wt, Tensor(), t, {.chunk_rows = 3})).backward();
    CHECK(max_diff(wt.grad(), wr.grad()) < 1e-5);
  }
  CHECK_THROWS_AS(linear_cross_entropy(z, w0, Tensor(), std::vector<int32_t>{0, 11, 0}), std::out_of_range);
}

TEST_CASE("linear_cross_entropy.backward_keeps_its_weight_gradient_instead_of_copying_it") {
  // The op makes dw [V, d] in its forward pass. When w has no gradient yet, backward hands that
  // buffer to w (Grads::take) instead of allocating w's gradient beside it and copying: during
  // backward no buffer of w's size is allocated. A retained graph keeps it (the rule runs again), and
  // either way the gradients are the same as linear() then cross_entropy()'s.
  Generator gen(43);
  const int64_t N = 6, d = 32, classes = 4096;  // w: 512 KiB, x: under 1 KiB
  const std::vector<int32_t> t{5, 4095, 0, 17, -100, 2048};
  const Tensor x0 = randn({N, d}, gen, false), w0 = randn({classes, d}, gen, false);
  const int64_t w_bytes = classes * d * static_cast<int64_t>(sizeof(float));
  Tensor xr = x0.clone().requires_grad_(), wr = w0.clone().requires_grad_();
  (cross_entropy(linear(xr, wr, Tensor()), t) * 3.0f).backward();
  const auto max_diff = [](const Tensor& a, const Tensor& b) {
    double m = 0.0;
    for (int64_t i = 0; i < a.numel(); ++i) m = std::max(m, std::abs(double(a.data()[i]) - b.data()[i]));
    return m;
  };
  for (bool retain : {false, true}) {
    CAPTURE(retain);
    Tensor x = x0.clone().requires_grad_(), w = w0.clone().requires_grad_();
    const Tensor loss = linear_cross_entropy(x, w, Tensor(), t) * 3.0f;  // dL/dy = 3: scaled in place
    const int64_t before = storage_pool_mark();
    backward(loss, Tensor(), retain);
    const int64_t grown = storage_pool_stats().peak_since_mark - before;
    if (retain)
      CHECK(grown >= w_bytes);  // the rule keeps its dw: w's gradient is a new buffer
    else
      CHECK(grown < w_bytes / 4);
    CHECK(max_diff(w.grad(), wr.grad()) < 1e-5);
    CHECK(max_diff(x.grad(), xr.grad()) < 1e-5);
    if (retain) {  // the second run adds the same again
      loss.backward();
      CHECK(max_diff(w.grad(), wr.grad() * 2.0f) < 2e-5);
      CHECK(max_diff(x.grad(), xr.grad() * 2.0f) < 2e-5);
    }
  }
}
