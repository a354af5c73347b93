#include <doctest/doctest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "autograd/functions.hpp"
#include "autograd/tape.hpp"
#include "nn/optim.hpp"

using namespace tg;
using namespace tg::nn;

namespace {

Tensor param(std::initializer_list<float> v) {
  Tensor p = Tensor::from_data({static_cast<int64_t>(v.size())}, v);
  p.requires_grad_();
  return p;
}

// Sets p.grad = g through the tape: L = sum(p * g) has dL/dp = g.
void set_grad(Tensor& p, std::initializer_list<float> g) {
  p.zero_grad();
  backward(sum(mul(p, Tensor::from_data({static_cast<int64_t>(g.size())}, g))));
}

void set_grad(Tensor& p, const std::vector<float>& g) {
  p.zero_grad();
  backward(sum(mul(p, Tensor::from_data({static_cast<int64_t>(g.size())}, g))));
}

}  // namespace

TEST_CASE("nn.optim.sgd_momentum_matches_hand_computation") {
  Tensor p = param({1.0f, -2.0f});
  SGD opt({{"p", p}}, {.lr = 0.1f, .momentum = 0.9f, .weight_decay = 0.01f});
  // step 1: d = g + wd p = (0.5 + 0.01, 1 - 0.02) = (0.51, 0.98); buf = d; p -= 0.1 buf
  set_grad(p, {0.5f, 1.0f});
  opt.step();
  CHECK(p.data()[0] == doctest::Approx(1.0 - 0.051));
  CHECK(p.data()[1] == doctest::Approx(-2.0 - 0.098));
  // step 2: d = g + wd p; buf = 0.9 buf + d; p -= 0.1 buf
  const double p0 = p.data()[0], d0 = -0.2 + 0.01 * p0, buf0 = 0.9 * 0.51 + d0;
  set_grad(p, {-0.2f, 0.0f});
  opt.step();
  CHECK(p.data()[0] == doctest::Approx(p0 - 0.1 * buf0));
  CHECK(opt.step_count() == 2);
}

TEST_CASE("nn.optim.adam_and_adamw_match_hand_computation") {
  for (bool decoupled : {false, true}) {
    CAPTURE(decoupled);
    Tensor p = param({0.5f, -1.0f});
    const AdamOptions o{.lr = 0.01f, .beta1 = 0.9f, .beta2 = 0.99f, .eps = 1e-8f, .weight_decay = 0.1f};
    std::unique_ptr<Optimizer> opt;
    if (decoupled)
      opt = std::make_unique<AdamW>(NamedTensors{{"p", p}}, o);
    else
      opt = std::make_unique<Adam>(NamedTensors{{"p", p}}, o);
    double x[2] = {0.5, -1.0}, m[2] = {0, 0}, v[2] = {0, 0};
    const float grads[3][2] = {{0.3f, -0.1f}, {-0.4f, 0.2f}, {0.1f, 0.1f}};
    for (int t = 1; t <= 3; ++t) {
      set_grad(p, {grads[t - 1][0], grads[t - 1][1]});
      opt->step();
      for (int i = 0; i < 2; ++i) {
        double g = grads[t - 1][i];
        if (decoupled)
          x[i] -= 0.01 * 0.1 * x[i];
        else
          g += 0.1 * x[i];
        m[i] = 0.9 * m[i] + 0.1 * g;
        v[i] = 0.99 * v[i] + 0.01 * g * g;
        const double mh = m[i] / (1 - std::pow(0.9, t)), vh = v[i] / (1 - std::pow(0.99, t));
        x[i] -= 0.01 * mh / (std::sqrt(vh) + 1e-8);
        CHECK(p.data()[i] == doctest::Approx(x[i]).epsilon(1e-5));
      }
    }
  }
}

TEST_CASE("nn.optim.state_roundtrip_resumes_exactly") {
  Tensor a = param({1.0f, 2.0f, 3.0f}), b = param({-1.0f});
  Adam opt({{"a", a}, {"b", b}}, {.lr = 0.05f});
  set_grad(a, {0.1f, 0.2f, 0.3f});
  set_grad(b, {1.0f});
  opt.step();
  const NamedTensors st = opt.state();
  REQUIRE(st.size() == 5);
  CHECK(st[0].first == "step");
  CHECK(st[1].first == "exp_avg.a");
  CHECK(st[4].first == "exp_avg_sq.b");

  // A fresh optimizer over copies of the parameters, restored, takes the same next step.
  Tensor a2 = a.clone().requires_grad_(), b2 = b.clone().requires_grad_();
  Adam opt2({{"a", a2}, {"b", b2}}, {.lr = 0.05f});
  opt2.load_state(st);
  CHECK(opt2.step_count() == 1);
  set_grad(a, {-0.3f, 0.1f, 0.0f});
  set_grad(b, {0.5f});
  set_grad(a2, {-0.3f, 0.1f, 0.0f});
  set_grad(b2, {0.5f});
  opt.step();
  opt2.step();
  for (int i = 0; i < 3; ++i) CHECK(a.data()[i] == a2.data()[i]);
  CHECK(b.data()[0] == b2.data()[0]);

  NamedTensors bad = st;
  bad.pop_back();
  CHECK_THROWS_WITH_AS(opt2.load_state(bad), doctest::Contains("exp_avg_sq.b"), std::invalid_argument);
  bad = st;
  bad[1].second = Tensor::zeros({2});
  CHECK_THROWS_WITH_AS(opt2.load_state(bad), doctest::Contains("shape"), std::invalid_argument);
  bad = st;
  bad.emplace_back("momentum_buffer.a", Tensor::zeros({3}));
  CHECK_THROWS_WITH_AS(opt2.load_state(bad), doctest::Contains("unexpected"), std::invalid_argument);
  SGD sgd({{"a", a}}, {.lr = 0.1f, .momentum = 0.9f});
  CHECK(sgd.state().size() == 2);
}

TEST_CASE("nn.optim.clip_grad_norm") {
  Tensor a = param({0, 0}), b = param({0});
  set_grad(a, {3.0f, 0.0f});
  set_grad(b, {4.0f});
  const NamedTensors ps = {{"a", a}, {"b", b}};
  CHECK(clip_grad_norm(ps, 10.0) == doctest::Approx(5.0));
  CHECK(a.grad().data()[0] == 3.0f);  // under the limit: untouched
  CHECK(clip_grad_norm(ps, 1.0) == doctest::Approx(5.0));
  CHECK(grad_norm(ps) == doctest::Approx(1.0).epsilon(1e-5));
  CHECK(b.grad().data()[0] == doctest::Approx(0.8).epsilon(1e-5));
}

TEST_CASE("nn.optim.step_with_grad_scale_is_clip_then_step") {
  // opt.step(clip_coef(max, norm)) gives the bits of clip_grad_norm then opt.step(), for SGD (with
  // momentum and weight decay) and AdamW, and leaves the gradients as they were.
  CHECK(clip_coef(10.0, 5.0) == 1.0f);
  CHECK(clip_coef(1.0, 4.0) == doctest::Approx(0.25).epsilon(1e-5));
  for (int kind = 0; kind < 2; ++kind) {
    CAPTURE(kind);
    Tensor a = param({1.0f, -2.0f, 0.5f}), b = param({0.25f});
    Tensor a2 = param({1.0f, -2.0f, 0.5f}), b2 = param({0.25f});
    const NamedTensors ps = {{"a", a}, {"b", b}}, ps2 = {{"a", a2}, {"b", b2}};
    auto make = [kind](const NamedTensors& p) -> std::unique_ptr<Optimizer> {
      if (kind == 0)
        return std::make_unique<SGD>(p, SGDOptions{.lr = 0.1f, .momentum = 0.9f, .weight_decay = 0.01f});
      return std::make_unique<AdamW>(p, AdamOptions{.lr = 0.1f, .weight_decay = 0.01f});
    };
    const auto fused = make(ps), plain = make(ps2);
    for (int s = 0; s < 3; ++s) {
      const std::vector<float> ga = {3.0f + s, -1.0f, 2.0f}, gb = {4.0f - s};
      set_grad(a, ga), set_grad(b, gb), set_grad(a2, ga), set_grad(b2, gb);
      fused->step(clip_coef(0.5, grad_norm(ps)));
      CHECK(a.grad().to_vector() == ga);  // the gradients are left as they were
      clip_grad_norm(ps2, 0.5);
      plain->step();
      CHECK(a.to_vector() == a2.to_vector());
      CHECK(b.to_vector() == b2.to_vector());
    }
  }
}

TEST_CASE("nn.optim.schedules") {
  LrSchedule noam{.kind = LrSchedule::Kind::noam, .lr = 1e-3f, .warmup = 100};
  CHECK(noam.at(50) == doctest::Approx(5e-4));
  CHECK(noam.at(100) == doctest::Approx(1e-3));
  CHECK(noam.at(400) == doctest::Approx(5e-4));
  LrSchedule cos{.kind = LrSchedule::Kind::cosine, .lr = 1.0f, .warmup = 10, .total = 110, .lr_min = 0.1f};
  CHECK(cos.at(5) == doctest::Approx(0.5));
  CHECK(cos.at(10) == doctest::Approx(1.0));
  CHECK(cos.at(60) == doctest::Approx(0.55));
  CHECK(cos.at(500) == doctest::Approx(0.1));
  CHECK(LrSchedule{.lr = 0.3f}.at(7) == doctest::Approx(0.3));
  CHECK(LrSchedule::parse("noam") == LrSchedule::Kind::noam);
  CHECK_THROWS_AS(LrSchedule::parse("linear"), std::invalid_argument);
}
