// LayerNorm forward/backward on every arch vs ops::ref (with and without weight/bias, each
// gradient optional), and the backward vs central finite differences of the reference forward.
#include <limits>

#include "tests/ops/ops_test_util.hpp"

namespace {
using namespace tg::ops;
using tg::ops::test::check_close;
constexpr float kEps = 1e-5f;

void layernorm_matches_ref(const KernelTable& t) {
  const auto& s = test::awkward_sizes();
  const size_t n = s.size();
  uint32_t seed = 1;
  for (size_t i = 0; i < n; ++i) {
    const int64_t rows = s[(i + 6) % n], cols = s[i];
    for (bool affine : {true, false}) {
      const std::string name = std::string(t.name) + " layernorm " + std::to_string(rows) + "x" +
                               std::to_string(cols) + (affine ? "" : " no weight/bias");
      // an offset mean, as activations have: the variance must not cancel
      const auto x = test::random_vec(rows * cols, seed++, 2.0f, 5.0f);
      const auto w = test::random_vec(cols, seed++, 0.5f, 1.5f), b = test::random_vec(cols, seed++);
      const float* wp = affine ? w.data() : nullptr;
      const float* bp = affine ? b.data() : nullptr;
      std::vector<float> y(x.size()), mean(rows), rstd(rows), y_ref(x.size()), mean_ref(rows), rstd_ref(rows);
      ref::table().layernorm_forward(y_ref.data(), mean_ref.data(), rstd_ref.data(), x.data(), wp, bp, rows,
                                     cols, kEps);
      t.layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), wp, bp, rows, cols, kEps);
      check_close(y, y_ref, 5e-5, 1e-4, name);
      check_close(mean, mean_ref, 1e-5, 1e-5, name + " mean");
      check_close(rstd, rstd_ref, 1e-5, 1e-3, name + " rstd");

      // backward from the reference's saved statistics; gradients accumulate into prior values
      const auto dy = test::random_vec(rows * cols, seed++);
      auto dx = test::random_vec(rows * cols, seed++), dw = test::random_vec(cols, seed++),
           db = test::random_vec(cols, seed++);
      auto dx_ref = dx, dw_ref = dw, db_ref = db;
      ref::table().layernorm_backward(dx_ref.data(), affine ? dw_ref.data() : nullptr,
                                      affine ? db_ref.data() : nullptr, dy.data(),
                                      {x.data(), wp, mean_ref.data(), rstd_ref.data()}, rows, cols, false);
      t.layernorm_backward(dx.data(), affine ? dw.data() : nullptr, affine ? db.data() : nullptr, dy.data(),
                           {x.data(), wp, mean_ref.data(), rstd_ref.data()}, rows, cols, false);
      const double tol = 1e-5 * (1.0 + static_cast<double>(rows) / 8);
      check_close(dx, dx_ref, 1e-4, 1e-4, name + " dinp");
      // overwrite: dinp is stored, its prior value (NaN here) never read
      std::vector<float> dx_over(x.size(), std::nanf("")), dx_over_ref = dx_over;
      ref::table().layernorm_backward(dx_over_ref.data(), nullptr, nullptr, dy.data(),
                                      {x.data(), wp, mean_ref.data(), rstd_ref.data()}, rows, cols, true);
      t.layernorm_backward(dx_over.data(), nullptr, nullptr, dy.data(),
                           {x.data(), wp, mean_ref.data(), rstd_ref.data()}, rows, cols, true);
      check_close(dx_over, dx_over_ref, 1e-4, 1e-4, name + " dinp overwrite");
      check_close(dw, dw_ref, tol, 1e-4, name + " dweight");
      check_close(db, db_ref, tol, 1e-4, name + " dbias");
    }
  }
}
TG_OPS_ARCH_TESTS("layernorm", "matches_ref", layernorm_matches_ref)

// Only the gradients asked for are written: null dinp with dweight/dbias, and dinp alone.
void layernorm_optional_grads(const KernelTable& t) {
  const int64_t rows = 300, cols = 33;  // enough rows for the threaded path
  const auto x = test::random_vec(rows * cols, 40), w = test::random_vec(cols, 41),
             dy = test::random_vec(rows * cols, 42);
  std::vector<float> y(x.size()), mean(rows), rstd(rows);
  ref::table().layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), nullptr, rows, cols,
                                 kEps);
  std::vector<float> dw(cols, 0.0f), dw_ref = dw, dx(x.size(), 0.0f), dx_ref = dx;
  t.layernorm_backward(nullptr, dw.data(), nullptr, dy.data(), {x.data(), w.data(), mean.data(), rstd.data()},
                       rows, cols, false);
  ref::table().layernorm_backward(nullptr, dw_ref.data(), nullptr, dy.data(),
                                  {x.data(), w.data(), mean.data(), rstd.data()}, rows, cols, false);
  check_close(dw, dw_ref, 1e-4, 1e-4, std::string(t.name) + " layernorm dweight only");
  t.layernorm_backward(dx.data(), nullptr, nullptr, dy.data(), {x.data(), w.data(), mean.data(), rstd.data()},
                       rows, cols, false);
  ref::table().layernorm_backward(dx_ref.data(), nullptr, nullptr, dy.data(),
                                  {x.data(), w.data(), mean.data(), rstd.data()}, rows, cols, false);
  check_close(dx, dx_ref, 1e-4, 1e-4, std::string(t.name) + " layernorm dinp only");
}
TG_OPS_ARCH_TESTS("layernorm", "optional_grads", layernorm_optional_grads)

// dinp, dweight and dbias vs central differences of L = sum(g * layernorm(x; w, b)), evaluated
// with the reference forward (step h = 1e-2: truncation O(h^2), rounding O(1e-7 / h)).
void layernorm_gradcheck(const KernelTable& t) {
  const int64_t rows = 3, cols = 9;
  auto x = test::random_vec(rows * cols, 50, -2.0f, 2.0f), w = test::random_vec(cols, 51, 0.5f, 1.5f),
       b = test::random_vec(cols, 52);
  const auto g = test::random_vec(rows * cols, 53);
  auto loss = [&] {
    std::vector<float> y(x.size()), mean(rows), rstd(rows);
    ref::table().layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), rows,
                                   cols, kEps);
    double s = 0.0;
    for (size_t i = 0; i < y.size(); ++i) s += static_cast<double>(g[i]) * y[i];
    return s;
  };
  auto fd = [&](std::vector<float>& v) {
    std::vector<float> grad(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      const float v0 = v[i];
      v[i] = v0 + 1e-2f;
      const double lp = loss();
      v[i] = v0 - 1e-2f;
      const double lm = loss();
      v[i] = v0;
      grad[i] =
          static_cast<float>((lp - lm) / (static_cast<double>(v0 + 1e-2f) - static_cast<double>(v0 - 1e-2f)));
    }
    return grad;
  };
  std::vector<float> y(x.size()), mean(rows), rstd(rows), dx(x.size(), 0.0f), dw(cols, 0.0f), db(cols, 0.0f);
  t.layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), rows, cols, kEps);
  t.layernorm_backward(dx.data(), dw.data(), db.data(), g.data(),
                       {x.data(), w.data(), mean.data(), rstd.data()}, rows, cols, false);
  const std::string name = std::string(t.name) + " layernorm backward vs finite differences";
  check_close(dx, fd(x), 3e-3, 1e-2, name + " dinp");
  check_close(dw, fd(w), 3e-3, 1e-2, name + " dweight");
  check_close(db, fd(b), 3e-3, 1e-2, name + " dbias");
}
TG_OPS_ARCH_TESTS("layernorm", "backward.gradcheck", layernorm_gradcheck)

}  // namespace
