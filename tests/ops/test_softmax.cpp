// Softmax (with masks), log-softmax and fused cross-entropy on every arch: forward and backward vs
// ops::ref, masked positions exactly 0, causal rows never reading past their prefix, and the
// backward kernels vs central finite differences of the reference forward.
#include <cmath>
#include <cstring>
#include <limits>

#include "tests/ops/ops_test_util.hpp"

namespace {
using namespace tg::ops;
using tg::ops::test::check_close;
using tg::ops::test::fd_grad;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Visible keys of row r, as documented in kernels.hpp (the test's own statement of the rule).
bool is_masked(int64_t r, int64_t k, int64_t rows, int64_t cols, const SoftmaxMask& m) {
  const int64_t q_len = m.q_len > 0 ? m.q_len : rows;
  const int64_t q = r % q_len, group = r / q_len;
  if (m.causal && k > q + (cols - q_len)) return true;
  return m.key_mask && m.key_mask[(group / m.groups_per_key_row) * cols + k] != 0;
}

void check_softmax_case(const KernelTable& t, int64_t rows, int64_t cols, const SoftmaxMask& m, uint32_t seed,
                        const std::string& what) {
  std::vector<float> x = test::random_vec(rows * cols, seed, -4.0f, 4.0f);
  // masked inputs are NaN: a kernel that reads them (past a causal prefix, or a padded key) fails
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < cols; ++k)
      if (is_masked(r, k, rows, cols, m)) x[r * cols + k] = kNaN;
  std::vector<float> got(x.size(), kNaN), want(x.size(), kNaN);
  ref::table().softmax_forward(want.data(), x.data(), rows, cols, m);
  t.softmax_forward(got.data(), x.data(), rows, cols, m);
  const std::string name = std::string(t.name) + " softmax " + what;
  check_close(got, want, 1e-6, 1e-5, name);
  for (int64_t r = 0; r < rows; ++r) {
    bool all_masked = true;
    for (int64_t k = 0; k < cols; ++k) {
      const bool masked = is_masked(r, k, rows, cols, m);
      all_masked = all_masked && masked;
      if (masked && got[r * cols + k] != 0.0f)
        FAIL_CHECK(name << ": masked position (" << r << ", " << k << ") is " << got[r * cols + k]
                        << ", not 0");
    }
    if (all_masked)
      for (int64_t k = 0; k < cols; ++k) CHECK(got[r * cols + k] == 0.0f);
  }
  // backward on the same (masked) output: dx += y (dy - dy.y); masked positions get 0
  const auto dy = test::random_vec(rows * cols, seed + 1);
  std::vector<float> dx_got = test::random_vec(rows * cols, seed + 2), dx_want = dx_got;
  ref::table().softmax_backward(dx_want.data(), dy.data(), want.data(), rows, cols, false);
  t.softmax_backward(dx_got.data(), dy.data(), want.data(), rows, cols, false);
  check_close(dx_got, dx_want, 1e-5, 1e-5, name + " backward");
  // overwrite: dx = y (dy - dy.y), the prior dx (NaN here) is never read
  std::vector<float> dx_over(rows * cols, std::nanf("")), dx_over_want = dx_over;
  ref::table().softmax_backward(dx_over_want.data(), dy.data(), want.data(), rows, cols, true);
  t.softmax_backward(dx_over.data(), dy.data(), want.data(), rows, cols, true);
  check_close(dx_over, dx_over_want, 1e-5, 1e-5, name + " backward overwrite");
}

void softmax_matches_ref(const KernelTable& t) {
  const auto& s = test::awkward_sizes();
  const size_t n = s.size();
  uint32_t seed = 1;
  for (size_t i = 0; i < n; ++i) {
    const int64_t rows = s[i], cols = s[(i + 5) % n];
    const std::string shape = std::to_string(rows) + "x" + std::to_string(cols);
    check_softmax_case(t, rows, cols, {}, seed++, shape);
    SoftmaxMask causal;
    causal.causal = true;  // one group of `rows` queries over `cols` keys
    check_softmax_case(t, rows, cols, causal, seed++, shape + " causal");
  }
}
TG_OPS_ARCH_TESTS("softmax", "matches_ref", softmax_matches_ref)

// The exps of a row (exp_shifted in ops/simd/softmax.hpp) at the edges of their range: scores far
// below the row's max (near and past e^-87, where fp32 stops being normal), -inf (exactly 0), a row
// of one finite score among -infs, and NaN (the row must not come out finite-looking: at least one
// NaN where the input had one). Rows of 17 and 40 values: a vector part and a partial last vector.
void softmax_extreme_inputs(const KernelTable& t) {
  const float inf = std::numeric_limits<float>::infinity();
  for (int64_t cols : {int64_t{17}, int64_t{40}}) {
    const int64_t rows = 4;
    std::vector<float> x(static_cast<size_t>(rows * cols));
    for (int64_t k = 0; k < cols; ++k) {
      const float gaps[] = {0.0f, -1.0f, -20.0f, -80.0f, -86.0f, -86.9f, -87.5f, -90.0f, -1e30f, -inf, 3.5f};
      x[k] = gaps[k % 11];                                   // row 0: finite gaps and -inf
      x[cols + k] = k == cols / 2 ? 2.0f : -inf;             // row 1: one finite score
      x[2 * cols + k] = -0.25f * static_cast<float>(k % 7);  // row 2: ordinary
      x[3 * cols + k] = k == 5 ? kNaN : 0.5f;                // row 3: one NaN
    }
    std::vector<float> got(x.size()), want(x.size());
    ref::table().softmax_forward(want.data(), x.data(), rows, cols, {});
    t.softmax_forward(got.data(), x.data(), rows, cols, {});
    const std::string name = std::string(t.name) + " softmax extreme inputs cols=" + std::to_string(cols);
    check_close(got.data(), want.data(), 3 * cols, 1e-7, 1e-5, name);
    for (int64_t k = 0; k < cols; ++k) {
      if (x[k] == -inf) CHECK(got[k] == 0.0f);
      CHECK(got[cols + k] == (k == cols / 2 ? 1.0f : 0.0f));
    }
    bool nan = false;
    for (int64_t k = 0; k < cols; ++k) nan = nan || std::isnan(got[3 * cols + k]);
    CHECK_MESSAGE(nan, name << ": a NaN score gave a row without NaN");
  }
}
TG_OPS_ARCH_TESTS("softmax", "extreme_inputs", softmax_extreme_inputs)

// A row's last partial vector is read and written with load_partial / store_partial (ops/simd/
// common.hpp: masked moves on AVX-512, a masked load and a store in pieces of 4, 2 and 1 lanes on
// AVX2, a buffer elsewhere). One row of every length from 1 to 33 (every tail of 4, 8 and 16 lanes)
// inside a longer buffer: the values past the row are NaN in the inputs (an unmasked read of them
// would put a NaN into the row's max, sum or dot product) and a canary in the outputs (a kernel that
// wrote them would change it), for softmax forward and both backward forms, and log-softmax.
void softmax_row_tails_stay_in_bounds(const KernelTable& t) {
  constexpr float kCanary = 12345.0f;
  constexpr int64_t kPast = 40;
  for (int64_t cols = 1; cols <= 33; ++cols) {
    const std::string name = std::string(t.name) + " row of " + std::to_string(cols);
    const auto padded = [&](std::vector<float> v, float past) {
      v.resize(static_cast<size_t>(cols + kPast), past);
      return v;
    };
    const std::vector<float> x =
        padded(test::random_vec(cols, 7 + static_cast<uint32_t>(cols), -3.0f, 3.0f), kNaN);
    const std::vector<float> dy = padded(test::random_vec(cols, 99 + static_cast<uint32_t>(cols)), kNaN);
    std::vector<float> y(static_cast<size_t>(cols + kPast), kCanary), want(static_cast<size_t>(cols));
    t.softmax_forward(y.data(), x.data(), 1, cols, {});
    ref::table().softmax_forward(want.data(), x.data(), 1, cols, {});
    check_close(y.data(), want.data(), cols, 1e-6, 1e-5, name + " softmax");
    std::vector<float> y_in = padded(std::vector<float>(y.begin(), y.begin() + cols), kNaN);
    std::vector<float> dx(static_cast<size_t>(cols + kPast), kCanary);
    t.softmax_backward(dx.data(), dy.data(), y_in.data(), 1, cols, /*overwrite=*/true);
    std::vector<float> dx_acc = padded(std::vector<float>(static_cast<size_t>(cols), 0.5f), kCanary);
    t.softmax_backward(dx_acc.data(), dy.data(), y_in.data(), 1, cols, /*overwrite=*/false);
    std::vector<float> ls(static_cast<size_t>(cols + kPast), kCanary);
    t.log_softmax_forward(ls.data(), x.data(), 1, cols);
    for (int64_t k = 0; k < cols; ++k) {
      CHECK_MESSAGE(std::isfinite(dx[k]), name << " softmax backward: element " << k << " is " << dx[k]);
      CHECK_MESSAGE(dx_acc[k] == doctest::Approx(0.5 + dx[k]).epsilon(1e-5),
                    name << " softmax backward (+=): element " << k);
      CHECK_MESSAGE(std::isfinite(ls[k]), name << " log_softmax: element " << k << " is " << ls[k]);
    }
    for (int64_t k = cols; k < cols + kPast; ++k) {
      CHECK_MESSAGE(y[k] == kCanary, name << " softmax wrote past the row at " << k);
      CHECK_MESSAGE(dx[k] == kCanary, name << " softmax backward wrote past the row at " << k);
      CHECK_MESSAGE(dx_acc[k] == kCanary, name << " softmax backward (+=) wrote past the row at " << k);
      CHECK_MESSAGE(ls[k] == kCanary, name << " log_softmax wrote past the row at " << k);
    }
  }
}
TG_OPS_ARCH_TESTS("softmax", "row_tails_stay_in_bounds", softmax_row_tails_stay_in_bounds)

// The accuracy of those exps, densely: rows [0, x_1 .. x_18] with x on a grid over [-87.5, 0] and
// powers of two just below 0. The row's max is 0, so y_j / y_0 = e^x_j (the sum and its rounding
// cancel: every y of a row is its exp times the same 1 / sum): within 3 ulps of the exact e^x_j (the
// exp's error, about 1 ulp, plus the roundings of the two products) where e^x_j is a normal float,
// and 0 or within 3 ulps below kExpFloor (e^-86.5, about 2.6e-38: the kernels return 0 under it).
// 18 values per row: a whole vector and a tail on every arch (16, 8 and 4 lanes).
void softmax_exp_accuracy(const KernelTable& t) {
  constexpr int64_t cols = 19;
  const int64_t points = test::quick() ? 20000 : 200000;
  const int64_t rows = (points + cols - 2) / (cols - 1);
  std::vector<float> x(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    x[r * cols] = 0.0f;
    for (int64_t j = 1; j < cols; ++j) {
      const int64_t i = r * (cols - 1) + (j - 1);
      const double u = static_cast<double>(i) / static_cast<double>(rows * (cols - 1) - 1);
      x[r * cols + j] =
          i % 97 == 0 ? -std::ldexp(1.0f, -static_cast<int>(i % 40)) : static_cast<float>(-87.5 * u);
    }
  }
  std::vector<float> y(x.size());
  t.softmax_forward(y.data(), x.data(), rows, cols, {});
  int64_t bad = 0;
  double worst = 0.0, worst_x = 0.0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 1; j < cols; ++j) {
      const float xj = x[r * cols + j];
      const double want = std::exp(static_cast<double>(xj));
      const double got = static_cast<double>(y[r * cols + j]) / static_cast<double>(y[r * cols]);
      const double ulp = std::ldexp(1.0, std::ilogb(static_cast<float>(want)) - 23);
      const double ulps = std::abs(got - want) / ulp;
      if (xj < -86.5f && got == 0.0) continue;  // under the floor: 0 is the documented result
      if (ulps > worst) worst = ulps, worst_x = xj;
      if (ulps > 3.0 && bad++ < 5)
        MESSAGE("x " << xj << ": e^x " << want << ", softmax ratio " << got << " (" << ulps << " ulps)");
    }
  }
  MESSAGE(std::string(t.name) << " softmax exps: worst " << worst << " ulps (at x = " << worst_x << ") over "
                              << rows * (cols - 1) << " points");
  CHECK_MESSAGE(bad == 0, std::string(t.name) << ": " << bad << " exps more than 3 ulps from e^x");
}
TG_OPS_ARCH_TESTS("softmax", "exp_accuracy", softmax_exp_accuracy)

// Attention layout: [batch * heads * q_len, keys] rows, key padding per batch entry, some batch
// entries fully padded (their rows must be all zeros), causal square and rectangular.
void softmax_masks(const KernelTable& t) {
  uint32_t seed = 100;
  for (int64_t keys : {1, 7, 17, 33, 65}) {
    for (int64_t q_len : {int64_t{1}, keys, keys + 3}) {
      const int64_t batch = 3, heads = 2;
      std::vector<uint8_t> pad(static_cast<size_t>(batch * keys));
      for (int64_t k = 0; k < keys; ++k) {
        pad[k] = k >= keys - keys / 3 ? 1 : 0;     // entry 0: trailing padding
        pad[keys + k] = 1;                         // entry 1: everything padded
        pad[2 * keys + k] = (k % 3 == 1) ? 1 : 0;  // entry 2: scattered
      }
      for (bool causal : {false, true}) {
        SoftmaxMask m;
        m.causal = causal, m.q_len = q_len, m.key_mask = pad.data(), m.groups_per_key_row = heads;
        check_softmax_case(t, batch * heads * q_len, keys, m, seed++,
                           "keys=" + std::to_string(keys) + " q_len=" + std::to_string(q_len) +
                               (causal ? " causal" : "") + " padded");
      }
    }
  }
}
TG_OPS_ARCH_TESTS("softmax", "masks", softmax_masks)

// softmax_backward vs finite differences of the reference forward, with a causal + padding mask.
void softmax_gradcheck(const KernelTable& t) {
  const int64_t rows = 6, cols = 7;
  const std::vector<uint8_t> pad{0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1};
  SoftmaxMask m;
  m.causal = true, m.q_len = 3, m.key_mask = pad.data(), m.groups_per_key_row = 1;
  const auto x = test::random_vec(rows * cols, 7, -2.0f, 2.0f), w = test::random_vec(rows * cols, 8);
  auto fwd = [&](float* y, const float* xx) { ref::table().softmax_forward(y, xx, rows, cols, m); };
  std::vector<float> y(x.size()), dx(x.size(), 0.0f);
  t.softmax_forward(y.data(), x.data(), rows, cols, m);
  t.softmax_backward(dx.data(), w.data(), y.data(), rows, cols, false);
  check_close(dx, fd_grad(x, w, fwd), 2e-3, 1e-2,
              std::string(t.name) + " softmax backward vs finite differences");
}
TG_OPS_ARCH_TESTS("softmax", "backward.gradcheck", softmax_gradcheck)

void log_softmax_matches_ref(const KernelTable& t) {
  const auto& s = test::awkward_sizes();
  const size_t n = s.size();
  uint32_t seed = 200;
  for (size_t i = 0; i < n; ++i) {
    const int64_t rows = s[(i + 2) % n], cols = s[i];
    const std::string name =
        std::string(t.name) + " log_softmax " + std::to_string(rows) + "x" + std::to_string(cols);
    const auto x = test::random_vec(rows * cols, seed++, -5.0f, 5.0f);
    std::vector<float> got(x.size()), want(x.size());
    ref::table().log_softmax_forward(want.data(), x.data(), rows, cols);
    t.log_softmax_forward(got.data(), x.data(), rows, cols);
    check_close(got, want, 1e-5, 1e-5, name);
    const auto dy = test::random_vec(rows * cols, seed++);
    std::vector<float> dx_got = test::random_vec(rows * cols, seed++), dx_want = dx_got;
    ref::table().log_softmax_backward(dx_want.data(), dy.data(), want.data(), rows, cols);
    t.log_softmax_backward(dx_got.data(), dy.data(), want.data(), rows, cols);
    check_close(dx_got, dx_want, 1e-5 * (1.0 + static_cast<double>(cols) / 16), 1e-5, name + " backward");
  }
}
TG_OPS_ARCH_TESTS("log_softmax", "matches_ref", log_softmax_matches_ref)

void log_softmax_gradcheck(const KernelTable& t) {
  const int64_t rows = 3, cols = 17;
  const auto x = test::random_vec(rows * cols, 9, -2.0f, 2.0f), w = test::random_vec(rows * cols, 10);
  auto fwd = [&](float* y, const float* xx) { ref::table().log_softmax_forward(y, xx, rows, cols); };
  std::vector<float> y(x.size()), dx(x.size(), 0.0f);
  t.log_softmax_forward(y.data(), x.data(), rows, cols);
  t.log_softmax_backward(dx.data(), w.data(), y.data(), rows, cols);
  check_close(dx, fd_grad(x, w, fwd), 2e-3, 1e-2,
              std::string(t.name) + " log_softmax backward vs finite differences");
}
TG_OPS_ARCH_TESTS("log_softmax", "backward.gradcheck", log_softmax_gradcheck)

// Targets in [0, V), every fourth row ignored.
std::vector<int32_t> ce_targets(const CrossEntropy& ce, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(ce.rows));
  for (int64_t r = 0; r < ce.rows; ++r)
    t[r] = r % 4 == 3 ? ce.ignore_index : static_cast<int32_t>(rng() % static_cast<uint32_t>(ce.V));
  return t;
}

void cross_entropy_matches_ref(const KernelTable& t) {
  const auto& s = test::awkward_sizes();
  const size_t n = s.size();
  uint32_t seed = 300;
  for (size_t i = 0; i < n; ++i) {
    for (float eps : {0.0f, 0.1f}) {
      CrossEntropy ce;
      ce.rows = s[(i + 4) % n], ce.V = s[i], ce.label_smoothing = eps, ce.ignore_index = i % 2 ? -100 : 0;
      const std::string name = std::string(t.name) + " cross_entropy rows=" + std::to_string(ce.rows) +
                               " V=" + std::to_string(ce.V) + " eps=" + std::to_string(eps);
      const auto x = test::random_vec(ce.rows * ce.V, seed++, -6.0f, 6.0f);
      const auto targets = ce_targets(ce, seed++);
      std::vector<float> got(static_cast<size_t>(ce.rows), kNaN), want = got;
      ref::table().cross_entropy_forward(want.data(), x.data(), targets.data(), ce);
      t.cross_entropy_forward(got.data(), x.data(), targets.data(), ce);
      check_close(got, want, 2e-5, 1e-5, name);
      const auto dl = test::random_vec(ce.rows, seed++);
      std::vector<float> dx_got = test::random_vec(ce.rows * ce.V, seed++), dx_want = dx_got;
      ref::table().cross_entropy_backward(dx_want.data(), dl.data(), x.data(), targets.data(), ce);
      t.cross_entropy_backward(dx_got.data(), dl.data(), x.data(), targets.data(), ce);
      check_close(dx_got, dx_want, 1e-6, 1e-5, name + " backward");
      // fused: the same losses as this table's forward, bit for bit, and the gradient of a zeroed
      // buffer, the logits overwritten (zeros on ignored rows)
      std::vector<float> fused = x, fused_losses(static_cast<size_t>(ce.rows), kNaN);
      std::vector<float> dx_zero(x.size(), 0.0f);
      ref::table().cross_entropy_backward(dx_zero.data(), dl.data(), x.data(), targets.data(), ce);
      t.cross_entropy_fused(fused_losses.data(), fused.data(), dl.data(), targets.data(), ce);
      CHECK_MESSAGE(std::memcmp(fused_losses.data(), got.data(), got.size() * sizeof(float)) == 0,
                    name << " fused losses");
      check_close(fused, dx_zero, 1e-6, 1e-5, name + " fused");
      std::vector<float> ref_fused = x, ref_losses(static_cast<size_t>(ce.rows), kNaN);
      ref::table().cross_entropy_fused(ref_losses.data(), ref_fused.data(), dl.data(), targets.data(), ce);
      check_close(ref_losses, want, 0.0, 0.0, name + " fused (ref)");
      check_close(ref_fused, dx_zero, 0.0, 0.0, name + " fused (ref)");
    }
  }
}
TG_OPS_ARCH_TESTS("cross_entropy", "matches_ref", cross_entropy_matches_ref)

void cross_entropy_gradcheck(const KernelTable& t) {
  CrossEntropy ce;
  ce.rows = 5, ce.V = 19, ce.label_smoothing = 0.1f;
  const auto x = test::random_vec(ce.rows * ce.V, 11, -3.0f, 3.0f), w = test::random_vec(ce.rows, 12);
  const auto targets = ce_targets(ce, 13);
  auto fwd = [&](float* loss, const float* xx) {
    ref::table().cross_entropy_forward(loss, xx, targets.data(), ce);
  };
  std::vector<float> dx(x.size(), 0.0f);
  t.cross_entropy_backward(dx.data(), w.data(), x.data(), targets.data(), ce);
  check_close(dx, fd_grad(x, w, fwd), 2e-3, 1e-2,
              std::string(t.name) + " cross_entropy backward vs finite differences");
}
TG_OPS_ARCH_TESTS("cross_entropy", "backward.gradcheck", cross_entropy_gradcheck)

// Rows spread over threads: a vocabulary-sized problem.
void cross_entropy_large(const KernelTable& t) {
  CrossEntropy ce;
  ce.rows = test::quick() ? 16 : 96, ce.V = 1001, ce.label_smoothing = 0.1f;
  const auto x = test::random_vec(ce.rows * ce.V, 14, -8.0f, 8.0f);
  const auto targets = ce_targets(ce, 15);
  std::vector<float> got(static_cast<size_t>(ce.rows)), want = got;
  ref::table().cross_entropy_forward(want.data(), x.data(), targets.data(), ce);
  t.cross_entropy_forward(got.data(), x.data(), targets.data(), ce);
  check_close(got, want, 5e-5, 1e-5, std::string(t.name) + " cross_entropy V=1001");
  const auto dl = test::random_vec(ce.rows, 16);
  std::vector<float> dx_want(x.size(), 0.0f), fused = x, fused_losses(got.size());
  ref::table().cross_entropy_backward(dx_want.data(), dl.data(), x.data(), targets.data(), ce);
  t.cross_entropy_fused(fused_losses.data(), fused.data(), dl.data(), targets.data(), ce);
  check_close(fused_losses, want, 5e-5, 1e-5, std::string(t.name) + " cross_entropy_fused V=1001");
  check_close(fused, dx_want, 1e-6, 1e-5, std::string(t.name) + " cross_entropy_fused V=1001 dlogits");
}
TG_OPS_ARCH_TESTS("cross_entropy", "large_vocab", cross_entropy_large)

// The fused kernel on rows that are not all finite: -inf logits (a masked vocabulary entry) give
// 0 probability (and an infinite loss under label smoothing, as the forward kernel gives), a NaN logit
// makes its row's loss and gradient NaN; the same as the forward kernel and the reference backward.
void cross_entropy_fused_non_finite(const KernelTable& t) {
  const float inf = std::numeric_limits<float>::infinity();
  for (float eps : {0.0f, 0.1f}) {
    CrossEntropy ce;
    ce.rows = 3, ce.V = 37, ce.label_smoothing = eps;
    auto x = test::random_vec(ce.rows * ce.V, 21, -4.0f, 4.0f);
    for (int64_t j : {0, 5, 17, 36}) x[j] = -inf;  // row 0: masked entries, not the target
    x[ce.V + 9] = kNaN;                            // row 1: a NaN
    const std::vector<int32_t> targets{3, 4, 30};
    const auto dl = test::random_vec(ce.rows, 22, 0.1f, 1.0f);
    std::vector<float> want(3), got(3), dx_want(x.size(), 0.0f), fused = x;
    t.cross_entropy_forward(want.data(), x.data(), targets.data(), ce);
    ref::table().cross_entropy_backward(dx_want.data(), dl.data(), x.data(), targets.data(), ce);
    t.cross_entropy_fused(got.data(), fused.data(), dl.data(), targets.data(), ce);
    const std::string name =
        std::string(t.name) + " cross_entropy_fused non-finite eps=" + std::to_string(eps);
    CHECK_MESSAGE(std::memcmp(got.data(), want.data(), sizeof(float) * 3) == 0, name << " losses");
    CHECK_MESSAGE((eps == 0.0f ? std::isfinite(got[0]) : got[0] == inf), name << " row 0 loss " << got[0]);
    CHECK_MESSAGE(std::isnan(got[1]), name << " row 1 loss " << got[1]);
    for (int64_t r : {0, 2})
      check_close(fused.data() + r * ce.V, dx_want.data() + r * ce.V, ce.V, 1e-6, 1e-5,
                  name + " row " + std::to_string(r));
    int64_t nan = 0;
    for (int64_t j = 0; j < ce.V; ++j) nan += std::isnan(fused[ce.V + j]) ? 1 : 0;
    CHECK_MESSAGE(nan == ce.V, name << ": " << nan << " NaN gradients in the NaN row");
  }
}
TG_OPS_ARCH_TESTS("cross_entropy", "fused_non_finite", cross_entropy_fused_non_finite)

}  // namespace
