#include "autograd/gradcheck.hpp"

#include <fmt/format.h>

#include <cmath>
#include <numeric>

#include "autograd/functions.hpp"
#include "autograd/tape.hpp"

namespace tg {

GradcheckResult gradcheck(const GradFn& f, const std::vector<Tensor>& inputs, const GradcheckOptions& opt) {
  Generator gen(opt.seed);
  // Leaves we own: the caller's tensors are not modified, except transiently by the perturbation.
  std::vector<Tensor> xs;
  for (const Tensor& t : inputs) {
    Tensor c = t.clone();
    c.requires_grad_(t.requires_grad());
    xs.push_back(c);
  }
  Tensor w;
  // L(x) in double, computed without recording.
  auto loss_value = [&]() {
    NoGradGuard ng;
    const Tensor y = f(xs);
    if (!w.defined()) w = Tensor::uniform(y.shape(), -1.0f, 1.0f, gen);
    double s = 0.0;
    for (int64_t i = 0; i < y.numel(); ++i) s += static_cast<double>(y.data()[i]) * w.data()[i];
    return s;
  };
  loss_value();  // fixes w's shape

  // Analytic gradients.
  Tape::current().clear();
  const Tensor y = f(xs);
  const Tensor L = sum(mul(y, w));
  if (L.requires_grad()) backward(L);

  GradcheckResult res;
  double worst_ratio = -1.0;
  for (size_t k = 0; k < xs.size(); ++k) {
    Tensor& x = xs[k];
    if (!x.requires_grad()) continue;
    const Tensor g = x.grad();
    std::vector<int64_t> idx(static_cast<size_t>(x.numel()));
    std::iota(idx.begin(), idx.end(), 0);
    if (opt.max_samples > 0 && x.numel() > opt.max_samples) {
      // Partial Fisher-Yates: the first max_samples entries become a uniform random sample.
      const size_t n = idx.size(), m = static_cast<size_t>(opt.max_samples);
      for (size_t i = 0; i < m; ++i) std::swap(idx[i], idx[i + gen.below(n - i)]);
      idx.resize(m);
    }
    for (int64_t i : idx) {
      float* p = x.data() + i;
      const float orig = *p;
      *p = static_cast<float>(orig + opt.eps);
      const double hi = static_cast<double>(*p) - orig;
      const double lp = loss_value();
      *p = static_cast<float>(orig - opt.eps);
      const double lo = orig - static_cast<double>(*p);
      const double lm = loss_value();
      *p = orig;
      const double numeric = (lp - lm) / (hi + lo);
      const double analytic = g.defined() ? g.data()[i] : 0.0;
      const double err = std::abs(analytic - numeric);
      const double tol = opt.atol + opt.rtol * std::abs(numeric);
      // A NaN or infinite difference (f undefined or overflowing next to x) is a failure, and the
      // worst element: NaN compares false, so `err > tol` alone would let it pass.
      const bool finite = std::isfinite(analytic) && std::isfinite(numeric);
      const double ratio = finite ? err / tol : INFINITY;
      ++res.checked;
      if (ratio > worst_ratio) {
        worst_ratio = ratio;
        res.input = k, res.index = i, res.analytic = analytic, res.numeric = numeric;
      }
      if (!finite || err > tol) res.ok = false;
    }
  }
  res.report = fmt::format("{}: worst at input {} {} element {}: analytic {:.6g} numeric {:.6g} ({} checked)",
                           res.ok ? "ok" : "MISMATCH", res.input,
                           res.checked ? shape_str(xs[res.input].shape()) : "[]", res.index, res.analytic,
                           res.numeric, res.checked);
  return res;
}

}  // namespace tg
