// Kernel cases the per-kernel files leave out, on every arch: GEMM with M, N or batch 0 (nothing
// may be written, whatever the other sizes), log-softmax of rows holding -inf (what
// log_softmax(x, BoolMask) feeds the kernel), and the activation backward kernels against finite
// differences (the ".gradcheck" cases also run on the scalar reference, ops_test_util.hpp).
#include <cmath>
#include <limits>

#include "tests/ops/ops_test_util.hpp"

namespace {
using namespace tg::ops;
using tg::ops::test::check_close;
using tg::ops::test::fd_grad;
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kSentinel = 12345.0f;

// ---- GEMM with an empty M, N or batch --------------------------------------------------------

struct EmptyCase {
  int64_t M, N, K, batch;
  bool trans_a, trans_b;
  float beta;
  bool bias;
};

// C is allocated with room for a full 3 x 5 matrix per batch entry (ldc 5, stride 15) and filled
// with a sentinel: an empty product must leave every element as it was, on every arch and the
// reference. A and B are exactly as large as their sizes say (under ASan a read past them shows).
void run_empty(const KernelTable& t, const EmptyCase& c) {
  Gemm g;
  g.M = c.M, g.N = c.N, g.K = c.K, g.batch = c.batch, g.trans_a = c.trans_a, g.trans_b = c.trans_b;
  g.beta = c.beta;
  g.lda = c.trans_a ? c.M : c.K, g.ldb = c.trans_b ? c.K : c.N, g.ldc = 5;
  g.stride_a = c.M * c.K, g.stride_b = c.K * c.N, g.stride_c = 15;
  const int64_t entries = std::max<int64_t>(c.batch, 1);
  const auto A = test::random_vec(entries * c.M * c.K, 1), B = test::random_vec(entries * c.K * c.N, 2);
  const auto bias = test::random_vec(std::max<int64_t>(c.N, 1), 3);
  if (c.bias) g.bias = bias.data();
  const std::string what =
      std::string(t.name) + " gemm M=" + std::to_string(c.M) + " N=" + std::to_string(c.N) +
      " K=" + std::to_string(c.K) + " batch=" + std::to_string(c.batch) + " ta=" + std::to_string(c.trans_a) +
      " tb=" + std::to_string(c.trans_b) + " beta=" + std::to_string(c.beta) + (c.bias ? " bias" : "");
  const std::vector<float> untouched(static_cast<size_t>(std::max<int64_t>(c.batch, 2) * 15), kSentinel);
  std::vector<float> C = untouched, want = untouched;
  ref::table().gemm(want.data(), A.data(), B.data(), g);
  t.gemm(C.data(), A.data(), B.data(), g);
  check_close(want, untouched, 0.0, 0.0, what + " (reference)");
  check_close(C, untouched, 0.0, 0.0, what);
}

void gemm_empty(const KernelTable& t) {
  for (int tr = 0; tr < 4; ++tr) {
    const bool ta = (tr & 1) != 0, tb = (tr & 2) != 0;
    for (float beta : {0.0f, 0.5f})
      for (bool bias : {false, true}) {
        run_empty(t, {0, 5, 7, 1, ta, tb, beta, bias});    // M = 0
        run_empty(t, {3, 0, 7, 1, ta, tb, beta, bias});    // N = 0
        run_empty(t, {0, 0, 7, 1, ta, tb, beta, bias});    // both
        run_empty(t, {0, 5, 0, 2, ta, tb, beta, bias});    // M = 0 and K = 0, batched
        run_empty(t, {3, 5, 7, 0, ta, tb, beta, bias});    // batch = 0
        run_empty(t, {3, 5, 300, 0, ta, tb, beta, bias});  // batch = 0, a long K (split-K sizes)
      }
  }
  // Sizes that would be threaded or split over K if they had a row: still nothing written.
  run_empty(t, {0, 5, 4096, 1, true, false, 0.0f, false});
  run_empty(t, {3, 0, 4096, 1, true, false, 0.0f, false});
}
TG_OPS_ARCH_TESTS("gemm", "empty_m_n_batch", gemm_empty)

// ---- log_softmax with -inf inputs ---------------------------------------------------------------

// Row r of `x` gets -inf at the positions pattern(r, k) says, over widths around the SIMD lanes.
// Expected, from the definition (in double, not from ops::ref): y_k = -inf where x_k = -inf,
// otherwise x_k - log(sum over finite j of exp(x_j)); a row of only -inf is NaN (as PyTorch: the
// kernel has no masks, BoolMask callers document it). The backward gets dy = 0 where y = -inf (as
// the log_softmax tape rule passes it), and must give 0 there and the finite rows' gradient elsewhere.
void log_softmax_neg_inf(const KernelTable& t) {
  uint32_t seed = 900;
  for (int64_t cols : {1, 3, 4, 7, 8, 15, 16, 17, 31, 33, 65}) {
    const int64_t rows = 6;
    auto x = test::random_vec(rows * cols, seed++, -5.0f, 5.0f);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t k = 0; k < cols; ++k) {
        const bool masked = (r == 0 && k == 0)                        // leading
                            || (r == 1 && k == cols - 1 && cols > 1)  // trailing (the tail lanes)
                            || (r == 2 && k % 3 == 1)                 // scattered
                            || (r == 3 && k >= cols / 2 && k > 0)     // a padded suffix
                            || r == 4;                                // every entry
        if (masked) x[r * cols + k] = -kInf;
      }
    const std::string name = std::string(t.name) + " log_softmax -inf cols=" + std::to_string(cols);
    std::vector<float> y(x.size(), 0.0f), want(x.size());
    t.log_softmax_forward(y.data(), x.data(), rows, cols);
    for (int64_t r = 0; r < rows; ++r) {
      double mx = -INFINITY;
      for (int64_t k = 0; k < cols; ++k) mx = std::max(mx, static_cast<double>(x[r * cols + k]));
      double sum = 0.0;
      for (int64_t k = 0; k < cols; ++k)
        if (x[r * cols + k] != -kInf) sum += std::exp(x[r * cols + k] - mx);
      for (int64_t k = 0; k < cols; ++k) {
        const float xi = x[r * cols + k];
        want[r * cols + k] = static_cast<float>(xi == -kInf ? -INFINITY : xi - mx - std::log(sum));
      }
    }
    // Rows without a finite input: row 4, and row 0 when its one entry is the -inf (cols = 1).
    std::vector<bool> all_inf(rows, true);
    for (int64_t i = 0; i < rows * cols; ++i)
      if (x[i] != -kInf) all_inf[i / cols] = false;
    int64_t wrong_special = 0;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t k = 0; k < cols; ++k) {
        const float got = y[r * cols + k];
        if (all_inf[r])
          wrong_special += !std::isnan(got);
        else if (x[r * cols + k] == -kInf)
          wrong_special += got != -kInf;
        else
          wrong_special += !std::isfinite(got);
      }
    CHECK_MESSAGE(wrong_special == 0,
                  name << ": " << wrong_special
                       << " entries not -inf at -inf inputs / finite elsewhere / NaN in the "
                          "all -inf row");
    // The finite entries of the rows with at least one finite input.
    std::vector<float> got_finite, want_finite;
    for (int64_t i = 0; i < rows * cols; ++i)
      if (x[i] != -kInf) got_finite.push_back(y[i]), want_finite.push_back(want[i]);
    check_close(got_finite, want_finite, 1e-5, 1e-5, name);

    // Backward over rows 1..3 (each has a finite entry), with dy = 0 where y = -inf.
    const int64_t brows = 3;
    const float* yb = y.data() + cols;
    auto dy = test::random_vec(brows * cols, seed++);
    for (int64_t i = 0; i < brows * cols; ++i)
      if (yb[i] == -kInf) dy[i] = 0.0f;
    std::vector<float> dx(brows * cols, 0.0f), dx_want(brows * cols);
    t.log_softmax_backward(dx.data(), dy.data(), yb, brows, cols);
    for (int64_t r = 0; r < brows; ++r) {
      double s = 0.0;
      for (int64_t k = 0; k < cols; ++k) s += dy[r * cols + k];
      for (int64_t k = 0; k < cols; ++k) {
        const int64_t i = r * cols + k;
        dx_want[i] = static_cast<float>(
            yb[i] == -kInf ? 0.0 : dy[i] - std::exp(static_cast<double>(want[cols + i])) * s);
      }
    }
    check_close(dx, dx_want, 2e-5, 1e-5, name + " backward");
  }
}
TG_OPS_ARCH_TESTS("log_softmax", "neg_inf_inputs", log_softmax_neg_inf)

// ---- activations against finite differences ------------------------------------------------

void gelu_gradcheck(const KernelTable& t) {
  const int64_t n = 37;
  const auto x = test::random_vec(n, 21, -3.0f, 3.0f), w = test::random_vec(n, 22);
  std::vector<float> dx(n, 0.0f);
  t.gelu_backward(dx.data(), w.data(), x.data(), n);
  const auto fwd = [&](float* y, const float* xx) { ref::table().gelu_forward(y, xx, n); };
  check_close(dx, fd_grad(x, w, fwd), 1e-3, 1e-2,
              std::string(t.name) + " gelu backward vs finite differences");
}
TG_OPS_ARCH_TESTS("activations", "gelu_backward.gradcheck", gelu_gradcheck)

void gelu_tanh_gradcheck(const KernelTable& t) {
  const int64_t n = 37;
  const auto x = test::random_vec(n, 25, -3.0f, 3.0f), w = test::random_vec(n, 26);
  std::vector<float> dx(n, 0.0f);
  t.gelu_tanh_backward(dx.data(), w.data(), x.data(), n);
  const auto fwd = [&](float* y, const float* xx) { ref::table().gelu_tanh_forward(y, xx, n); };
  check_close(dx, fd_grad(x, w, fwd), 1e-3, 1e-2,
              std::string(t.name) + " gelu_tanh backward vs finite differences");
}
TG_OPS_ARCH_TESTS("activations", "gelu_tanh_backward.gradcheck", gelu_tanh_gradcheck)

void relu_gradcheck(const KernelTable& t) {
  const int64_t n = 37;
  auto x = test::random_vec(n, 23, -3.0f, 3.0f);
  for (float& v : x) v += v < 0 ? -0.1f : 0.1f;  // away from the kink, farther than the step
  const auto w = test::random_vec(n, 24);
  std::vector<float> dx(n, 0.0f);
  t.relu_backward(dx.data(), w.data(), x.data(), n);
  const auto fwd = [&](float* y, const float* xx) { ref::table().relu_forward(y, xx, n); };
  check_close(dx, fd_grad(x, w, fwd), 1e-4, 1e-4,
              std::string(t.name) + " relu backward vs finite differences");
}
TG_OPS_ARCH_TESTS("activations", "relu_backward.gradcheck", relu_gradcheck)

}  // namespace
