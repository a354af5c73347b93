// Elementwise and vector kernels on every arch vs ops::ref: activations, bias, axpy/add/scale,
// sum of squares, Adam/AdamW. Sizes cover the scalar tails (awkward sizes) and the threaded path
// (a few hundred thousand elements).
#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

#include "tests/ops/ops_test_util.hpp"

namespace {
using namespace tg::ops;
using tg::ops::test::check_close;

// The awkward sizes plus one long enough to be split across threads.
std::vector<int64_t> lengths() {
  std::vector<int64_t> n = test::awkward_sizes();
  n.push_back(test::quick() ? 70001 : 200003);
  return n;
}

void activations(const KernelTable& t) {
  uint32_t seed = 1;
  for (int64_t n : lengths()) {
    const std::string sz = " n=" + std::to_string(n);
    auto x = test::random_vec(n, seed++, -4.0f, 4.0f);
    x[0] = 0.0f;  // the kink: relu'(0) = 0 in both
    const auto dy = test::random_vec(n, seed++);
    const auto dx0 = test::random_vec(n, seed++);
    std::vector<float> got(n), want(n);
    ref::table().relu_forward(want.data(), x.data(), n);
    t.relu_forward(got.data(), x.data(), n);
    check_close(got, want, 0.0, 0.0, std::string(t.name) + " relu_forward" + sz);
    auto dx = dx0, dx_ref = dx0;
    ref::table().relu_backward(dx_ref.data(), dy.data(), x.data(), n);
    t.relu_backward(dx.data(), dy.data(), x.data(), n);
    check_close(dx, dx_ref, 0.0, 0.0, std::string(t.name) + " relu_backward" + sz);

    ref::table().gelu_forward(want.data(), x.data(), n);
    t.gelu_forward(got.data(), x.data(), n);
    check_close(got, want, 2e-6, 1e-5, std::string(t.name) + " gelu_forward" + sz);
    dx = dx0, dx_ref = dx0;
    ref::table().gelu_backward(dx_ref.data(), dy.data(), x.data(), n);
    t.gelu_backward(dx.data(), dy.data(), x.data(), n);
    check_close(dx, dx_ref, 2e-6, 1e-5, std::string(t.name) + " gelu_backward" + sz);

    ref::table().gelu_tanh_forward(want.data(), x.data(), n);
    t.gelu_tanh_forward(got.data(), x.data(), n);
    check_close(got, want, 2e-6, 1e-5, std::string(t.name) + " gelu_tanh_forward" + sz);
    dx = dx0, dx_ref = dx0;
    ref::table().gelu_tanh_backward(dx_ref.data(), dy.data(), x.data(), n);
    t.gelu_tanh_backward(dx.data(), dy.data(), x.data(), n);
    check_close(dx, dx_ref, 2e-6, 1e-5, std::string(t.name) + " gelu_tanh_backward" + sz);

    // dropout: bit-identical masks and outputs (integer hash), p = 0.3
    const auto drop_below = static_cast<uint32_t>(0.3 * 16777216.0);
    std::vector<uint8_t> mask(n), mask_ref(n);
    for (bool relu : {true, false}) {  // the fused relu first: the plain masks stay for the checks below
      ref::table().dropout_forward(want.data(), mask_ref.data(), x.data(), n, 0x1234567890abcdefull,
                                   drop_below, 1.0f / 0.7f, relu, 0);
      t.dropout_forward(got.data(), mask.data(), x.data(), n, 0x1234567890abcdefull, drop_below, 1.0f / 0.7f,
                        relu, 0);
      const std::string what = std::string(t.name) + (relu ? " relu" : "") + " dropout";
      CHECK_MESSAGE(mask == mask_ref, (what + " mask" + sz));
      check_close(got, want, 0.0, 0.0, what + "_forward" + sz);
      if (relu)
        for (int64_t i = 0; i < n; ++i)
          if (x[static_cast<size_t>(i)] <= 0.0f) CHECK(mask_ref[static_cast<size_t>(i)] == 0);
    }
    if (n >= 1000) {  // about 30% dropped
      int64_t dropped = 0;
      for (uint8_t k : mask_ref) dropped += k == 0;
      const double frac = static_cast<double>(dropped) / static_cast<double>(n);
      CHECK_MESSAGE(std::abs(frac - 0.3) < 0.05,
                    (std::string("dropout fraction ") + std::to_string(frac) + sz));
    }
    {  // a block at index `first`, without a mask, draws what the whole call drew there
      std::vector<float> blocks(n, std::nanf(""));
      const int64_t h = n / 3;
      t.dropout_forward(blocks.data(), nullptr, x.data(), h, 0x1234567890abcdefull, drop_below, 1.0f / 0.7f,
                        false, 0);
      t.dropout_forward(blocks.data() + h, nullptr, x.data() + h, n - h, 0x1234567890abcdefull, drop_below,
                        1.0f / 0.7f, false, h);
      check_close(blocks, want, 0.0, 0.0, std::string(t.name) + " dropout_forward in blocks" + sz);
      // indices past 2^32 wrap (the hash takes i mod 2^32), here inside a vector of the SIMD loop
      const int64_t wrap = (int64_t{1} << 32) - 5;
      std::vector<float> w_got(n), w_want(n);
      std::vector<uint8_t> w_mask(n), w_mask_ref(n);
      ref::table().dropout_forward(w_want.data(), w_mask_ref.data(), x.data(), n, 77, drop_below, 2.0f, true,
                                   wrap);
      t.dropout_forward(w_got.data(), w_mask.data(), x.data(), n, 77, drop_below, 2.0f, true, wrap);
      CHECK_MESSAGE(w_mask == w_mask_ref, (std::string(t.name) + " dropout mask across 2^32" + sz));
      check_close(w_got, w_want, 0.0, 0.0, std::string(t.name) + " dropout_forward across 2^32" + sz);
    }
    dx = dx0, dx_ref = dx0;
    ref::table().dropout_backward(dx_ref.data(), dy.data(), mask_ref.data(), n, 1.0f / 0.7f, false);
    t.dropout_backward(dx.data(), dy.data(), mask_ref.data(), n, 1.0f / 0.7f, false);
    check_close(dx, dx_ref, 1e-6, 1e-6, std::string(t.name) + " dropout_backward" + sz);  // FMA or not
    std::vector<float> junk(n, std::nanf("")), dx_over(n, 0.0f);  // overwrite: dinp is not read
    ref::table().dropout_backward(dx_over.data(), dy.data(), mask_ref.data(), n, 1.0f / 0.7f, true);
    t.dropout_backward(junk.data(), dy.data(), mask_ref.data(), n, 1.0f / 0.7f, true);
    check_close(junk, dx_over, 0.0, 0.0, std::string(t.name) + " dropout_backward overwrite" + sz);
  }
}
TG_OPS_ARCH_TESTS("activations", "matches_ref", activations)

// GELU (exact and tanh forms) on a dense grid of x in [-12, 12] against the formulas in double,
// forward and backward, to 1.5e-7 relative to |x| + |the value| (xsimd's erf and tanh reach about
// 1.1e-7 on this measure on AVX2), tails included (the size is not a multiple of any vector width);
// and +inf, 0 and NaN as the formulas give them, in whole vectors. A faster erf or tanh must keep
// this accuracy. Run on sse2 and avx2 (Zen 3) and NEON (qemu), 2026-11-27; not yet on AVX-512.
void gelu_accuracy(const KernelTable& t) {
  std::vector<float> x;
  for (int i = -12000; i <= 12000; ++i) x.push_back(static_cast<float>(i) * 1e-3f);
  // where xsimd's float erf (|x / sqrt 2| = 2/3: x = 0.9428) and tanh (|u| = 5/8: x = 0.7634) switch
  // branches, on both sides
  for (double b : {2.0 / 3.0 * std::sqrt(2.0), 0.763426})
    for (double e : {-1e-6, 0.0, 1e-6})
      x.push_back(static_cast<float>(b + e)), x.push_back(static_cast<float>(-b - e));
  x.push_back(3e-30f);
  x.push_back(-7e-8f);
  const int64_t n = static_cast<int64_t>(x.size());  // not a multiple of any vector width
  const double c = 0.044715, k = std::sqrt(2.0 / std::numbers::pi);
  const auto exact = [&](double v, bool tanh_form, bool derivative) {
    if (!tanh_form) {
      const double cdf = 0.5 * (1.0 + std::erf(v / std::sqrt(2.0)));
      return derivative ? cdf + v * std::exp(-0.5 * v * v) / std::sqrt(2.0 * std::numbers::pi) : v * cdf;
    }
    const double th = std::tanh(k * (v + c * v * v * v));
    return derivative ? 0.5 * (1.0 + th) + 0.5 * v * (1.0 - th * th) * k * (1.0 + 3.0 * c * v * v)
                      : 0.5 * v * (1.0 + th);
  };
  for (bool tanh_form : {false, true}) {
    const std::string what = std::string(t.name) + (tanh_form ? " gelu_tanh" : " gelu");
    std::vector<float> y(n), dx(n, 0.0f), ones(n, 1.0f);
    (tanh_form ? t.gelu_tanh_forward : t.gelu_forward)(y.data(), x.data(), n);
    (tanh_form ? t.gelu_tanh_backward : t.gelu_backward)(dx.data(), ones.data(), x.data(), n);
    double worst_y = 0.0, worst_d = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      const double v = x[i], want_y = exact(v, tanh_form, false), want_d = exact(v, tanh_form, true);
      worst_y = std::max(worst_y, std::abs(y[i] - want_y) / (std::abs(v) + std::abs(want_y) + 1e-30));
      worst_d = std::max(worst_d, std::abs(dx[i] - want_d) / (std::abs(v) + std::abs(want_d)));
    }
    CHECK_MESSAGE(worst_y < 1.5e-7, what << " forward: worst relative error " << worst_y);
    CHECK_MESSAGE(worst_d < 1.5e-7, what << " backward: worst relative error " << worst_d);
    // the special values through the vector path too: 48 of them, whole vectors of every width
    const float specials[3] = {std::numeric_limits<float>::infinity(), 0.0f,
                               std::numeric_limits<float>::quiet_NaN()};
    std::vector<float> sx(48), sy(48), sd(48, 0.0f), sdy(48, 1.0f);
    for (size_t i = 0; i < sx.size(); ++i) sx[i] = specials[i % 3];
    (tanh_form ? t.gelu_tanh_forward : t.gelu_forward)(sy.data(), sx.data(), 48);
    (tanh_form ? t.gelu_tanh_backward : t.gelu_backward)(sd.data(), sdy.data(), sx.data(), 48);
    for (size_t i = 0; i < sx.size(); ++i) {
      CAPTURE(i);
      if (i % 3 == 0)
        CHECK_MESSAGE(sy[i] == std::numeric_limits<float>::infinity(), what << "(inf) = " << sy[i]);
      if (i % 3 == 1) CHECK_MESSAGE(sy[i] == 0.0f, what << "(0) = " << sy[i]);
      if (i % 3 == 1) CHECK_MESSAGE(sd[i] == 0.5f, what << "'(0) = " << sd[i]);
      if (i % 3 == 2) CHECK_MESSAGE(std::isnan(sy[i]), what << "(NaN) = " << sy[i]);
      if (i % 3 == 2) CHECK_MESSAGE(std::isnan(sd[i]), what << "'(NaN) = " << sd[i]);
    }
  }
}
TG_OPS_ARCH_TESTS("gelu", "accuracy", gelu_accuracy)

void bias(const KernelTable& t) {
  const auto& s = test::awkward_sizes();
  const size_t n = s.size();
  uint32_t seed = 100;
  std::vector<std::pair<int64_t, int64_t>> shapes;
  for (size_t i = 0; i < n; ++i) shapes.emplace_back(s[(i + 3) % n], s[i]);
  shapes.emplace_back(test::quick() ? 600 : 2000, 65);  // threaded: per-thread partial sums
  for (auto [rows, cols] : shapes) {
    const std::string sz = std::to_string(rows) + "x" + std::to_string(cols);
    const auto b = test::random_vec(cols, seed++);
    auto out = test::random_vec(rows * cols, seed++), out_ref = out;
    ref::table().bias_add(out_ref.data(), b.data(), rows, cols);
    t.bias_add(out.data(), b.data(), rows, cols);
    check_close(out, out_ref, 1e-7, 1e-6, std::string(t.name) + " bias_add " + sz);
    auto db = test::random_vec(cols, seed++), db_ref = db;
    ref::table().bias_backward(db_ref.data(), out.data(), rows, cols);
    t.bias_backward(db.data(), out.data(), rows, cols);
    check_close(db, db_ref, 1e-6 * (1.0 + static_cast<double>(rows)), 1e-5,
                std::string(t.name) + " bias_backward " + sz);
  }
}
TG_OPS_ARCH_TESTS("bias", "matches_ref", bias)

void vector_ops(const KernelTable& t) {
  uint32_t seed = 200;
  for (int64_t n : lengths()) {
    const std::string sz = " n=" + std::to_string(n);
    const auto x = test::random_vec(n, seed++), y0 = test::random_vec(n, seed++);
    auto y = y0, y_ref = y0;
    ref::table().axpy(y_ref.data(), x.data(), -0.3f, n);
    t.axpy(y.data(), x.data(), -0.3f, n);
    check_close(y, y_ref, 1e-7, 1e-6, std::string(t.name) + " axpy" + sz);
    std::vector<float> sum(n), sum_ref(n);
    ref::table().add(sum_ref.data(), x.data(), y0.data(), n);
    t.add(sum.data(), x.data(), y0.data(), n);
    check_close(sum, sum_ref, 0.0, 0.0, std::string(t.name) + " add" + sz);
    std::vector<float> copied(static_cast<size_t>(n) + 1, -1.0f);  // one past n: nothing written there
    t.copy(copied.data(), x.data(), n);
    CHECK_MESSAGE(std::equal(x.begin(), x.end(), copied.begin()), (std::string(t.name) + " copy" + sz));
    CHECK_MESSAGE(copied[static_cast<size_t>(n)] == -1.0f, (std::string(t.name) + " copy past n" + sz));
    y = y0, y_ref = y0;
    ref::table().scale(y_ref.data(), y_ref.data(), 1.7f, n);
    t.scale(y.data(), y.data(), 1.7f, n);  // in place
    check_close(y, y_ref, 0.0, 0.0, std::string(t.name) + " scale" + sz);
    std::vector<float> scaled(static_cast<size_t>(n) + 1, -1.0f);  // out of place, nothing past n
    t.scale(scaled.data(), x.data(), -0.6f, n);
    ref::table().scale(y_ref.data(), x.data(), -0.6f, n);
    CHECK_MESSAGE(std::equal(y_ref.begin(), y_ref.end(), scaled.begin()),
                  (std::string(t.name) + " scale to" + sz));
    CHECK_MESSAGE(scaled[static_cast<size_t>(n)] == -1.0f, (std::string(t.name) + " scale to past n" + sz));
    std::vector<float> filled(static_cast<size_t>(n) + 1, -1.0f);
    t.fill(filled.data(), 2.5f, n);
    CHECK_MESSAGE(std::all_of(filled.begin(), filled.end() - 1, [](float v) { return v == 2.5f; }),
                  (std::string(t.name) + " fill" + sz));
    CHECK_MESSAGE(filled[static_cast<size_t>(n)] == -1.0f, (std::string(t.name) + " fill past n" + sz));
    const double ss = t.sum_squares(x.data(), n), ss_ref = ref::table().sum_squares(x.data(), n);
    CAPTURE(n);
    CHECK(ss == doctest::Approx(ss_ref).epsilon(1e-6));
  }
}
TG_OPS_ARCH_TESTS("vector", "matches_ref", vector_ops)

void adam(const KernelTable& t) {
  uint32_t seed = 300;
  for (int64_t n : lengths()) {
    for (bool decoupled : {false, true}) {
      for (int64_t step : {1, 10}) {
        AdamParams p;
        p.lr = 1e-2f, p.weight_decay = 0.01f, p.decoupled = decoupled, p.step = step;
        p.grad_scale = step == 10 ? 0.37f : 1.0f;  // clipping folded into the pass
        const std::string name = std::string(t.name) + (decoupled ? " adamw" : " adam") +
                                 " n=" + std::to_string(n) + " step=" + std::to_string(step);
        const auto g = test::random_vec(n, seed++);
        auto w = test::random_vec(n, seed++), m = test::random_vec(n, seed++, -0.1f, 0.1f),
             v = test::random_vec(n, seed++, 0.0f, 0.01f);
        auto w_ref = w, m_ref = m, v_ref = v;
        ref::table().adam_update(w_ref.data(), m_ref.data(), v_ref.data(), g.data(), n, p);
        t.adam_update(w.data(), m.data(), v.data(), g.data(), n, p);
        check_close(m, m_ref, 1e-7, 1e-6, name + " m");
        check_close(v, v_ref, 1e-9, 1e-6, name + " v");
        check_close(w, w_ref, 1e-6, 1e-5, name + " param");
      }
    }
  }
}
TG_OPS_ARCH_TESTS("adam", "matches_ref", adam)

// adam_update over many tensors (one pass split between the threads across tensor boundaries)
// gives the bits of adam_update per tensor on the same arch, with 1 and 2 threads, each tensor
// with its own weight decay; sizes put the threads' borders inside tensors, and off vector borders.
void adam_many(const KernelTable& t) {
  const std::vector<int64_t> sizes = {3, 17, 40000, 1, 70001, 5, 16, 33333};
  for (bool decoupled : {false, true}) {
    AdamParams p;
    p.lr = 1e-2f, p.weight_decay = 0.5f, p.decoupled = decoupled, p.step = 3;
    std::vector<std::vector<float>> w, m, v, g, w1, m1, v1;
    std::vector<AdamTensor> ts;
    uint32_t seed = 900;
    for (size_t i = 0; i < sizes.size(); ++i) {
      const int64_t n = sizes[i];
      g.push_back(test::random_vec(n, seed++));
      w.push_back(test::random_vec(n, seed++));
      m.push_back(test::random_vec(n, seed++, -0.1f, 0.1f));
      v.push_back(test::random_vec(n, seed++, 0.0f, 0.01f));
    }
    w1 = w, m1 = m, v1 = v;
    for (size_t i = 0; i < sizes.size(); ++i) {
      AdamParams q = p;
      q.weight_decay = i % 2 ? 0.0f : p.weight_decay;
      t.adam_update(w1[i].data(), m1[i].data(), v1[i].data(), g[i].data(), sizes[i], q);
      ts.push_back({w[i].data(), m[i].data(), v[i].data(), g[i].data(), sizes[i], q.weight_decay});
    }
    const Arch before = active_arch();
    set_arch(parse_arch(t.name));
    adam_update(ts, p);
    set_arch(before);
    for (size_t i = 0; i < sizes.size(); ++i) {
      const std::string name =
          std::string(t.name) + " tensor " + std::to_string(i) + (decoupled ? " adamw" : " adam");
      check_close(w[i], w1[i], 0.0, 0.0, name + " param");
      check_close(m[i], m1[i], 0.0, 0.0, name + " m");
      check_close(v[i], v1[i], 0.0, 0.0, name + " v");
    }
  }
}
TG_OPS_ARCH_TESTS("adam_many", "matches_per_tensor", adam_many)

}  // namespace
