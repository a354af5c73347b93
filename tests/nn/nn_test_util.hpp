// Helpers shared by the nn tests: closeness checks, tiny configs, and a finite-difference gradient
// check that perturbs a module's parameters in place (autograd/gradcheck clones its inputs, which
// a module holding its own parameters cannot use).
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "autograd/functions.hpp"
#include "autograd/random.hpp"
#include "autograd/tape.hpp"
#include "nn/module.hpp"
#include "nn/transformer.hpp"

namespace tg::nn::test {

// max |a - b| and the first index where it exceeds tol (-1 when none).
struct CloseResult {
  double max_diff = 0.0;
  int64_t first_bad = -1;
};
inline CloseResult compare(const Tensor& a, const Tensor& b, double tol) {
  CloseResult r;
  if (a.numel() != b.numel()) return {INFINITY, 0};
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double d = std::abs(static_cast<double>(a.data()[i]) - b.data()[i]);
    if (!(d <= r.max_diff)) r.max_diff = d;
    if (!(d <= tol) && r.first_bad < 0) r.first_bad = i;
  }
  return r;
}

// What a PyTorch reference script of the parity tests wrote, one item per line: "torch <version>",
// "loss <value>", "grad <param> <n> <n values>".
struct TorchReference {
  std::string version;
  double loss = NAN;
  std::map<std::string, std::vector<double>> grads;
};
inline TorchReference read_torch_reference(const std::string& path) {
  TorchReference r;
  std::ifstream f(path);
  for (std::string line; std::getline(f, line);) {
    std::istringstream ls(line);
    std::string kind;
    ls >> kind;
    if (kind == "torch") ls >> r.version;
    if (kind == "loss") ls >> r.loss;
    if (kind == "grad") {
      std::string name;
      size_t n = 0;
      ls >> name >> n;
      std::vector<double> v(n);
      for (double& x : v) ls >> x;
      r.grads[name] = std::move(v);
    }
  }
  return r;
}

// max_i |ours_i - theirs_i| / max_i |theirs_i|: relative to the tensor's largest entry, as
// per-element relative errors of entries that are ~0 mean nothing. Infinite when the sizes differ.
inline double relative_to_largest(const Tensor& ours, const std::vector<double>& theirs) {
  if (static_cast<size_t>(ours.numel()) != theirs.size()) return INFINITY;
  double max_diff = 0.0, scale = 1e-12;
  for (size_t i = 0; i < theirs.size(); ++i) {
    max_diff = std::max(max_diff, std::abs(ours.data()[i] - theirs[i]));
    scale = std::max(scale, std::abs(theirs[i]));
  }
  return max_diff / scale;
}

// The parameter whose gradient differs most from the reference's (relative_to_largest) and by how
// much: infinity for a parameter the reference lacks or without a gradient, or when the reference
// has more entries than there are parameters.
inline std::pair<std::string, double> worst_gradient(const NamedTensors& params, const TorchReference& ref) {
  std::pair<std::string, double> worst{"", 0.0};
  if (ref.grads.size() != params.size()) return {"(the reference has other parameters)", INFINITY};
  for (const auto& [n, p] : params) {
    const auto it = ref.grads.find(n);
    const double rel =
        it == ref.grads.end() || !p.grad().defined() ? INFINITY : relative_to_largest(p.grad(), it->second);
    if (!(rel <= worst.second)) worst = {n, rel};
  }
  return worst;
}

inline TransformerConfig tiny_config(bool norm_first = false, const std::string& act = "relu") {
  TransformerConfig c;
  c.src_vocab = 13, c.tgt_vocab = 11;
  c.d_model = 8, c.heads = 2, c.d_ff = 16, c.enc_layers = c.dec_layers = 2;
  c.dropout = 0.0f, c.max_len = 64, c.norm_first = norm_first, c.activation = act;
  return c;
}

// A batch with right padding: row b has src length S - b % 3 and target length T - b % 2.
inline Batch padded_batch(int64_t B, int64_t S, int64_t T, int32_t src_vocab, int32_t tgt_vocab,
                          uint64_t seed) {
  Generator g(seed);
  Batch b;
  b.batch = B, b.src_len = S, b.tgt_len = T;
  for (int64_t r = 0; r < B; ++r) {
    const int64_t s_len = S - r % 3, t_len = T - r % 2;
    for (int64_t s = 0; s < S; ++s)
      b.src.push_back(s < s_len - 1 ? static_cast<int32_t>(
                                          kUnk + 1 + g.below(static_cast<uint64_t>(src_vocab - kUnk - 1)))
                      : s == s_len - 1 ? kEos
                                       : kPad);
    std::vector<int32_t> tgt;
    for (int64_t t = 0; t < t_len - 1; ++t)
      tgt.push_back(static_cast<int32_t>(kUnk + 1 + g.below(static_cast<uint64_t>(tgt_vocab - kUnk - 1))));
    for (int64_t t = 0; t < T; ++t) {
      b.tgt_in.push_back(t == 0 ? kBos : t < t_len ? tgt[static_cast<size_t>(t - 1)] : kPad);
      b.labels.push_back(t < t_len - 1 ? tgt[static_cast<size_t>(t)] : t == t_len - 1 ? kEos : kPad);
    }
  }
  return b;
}

struct ModuleGradcheck {
  bool ok = true;
  double worst_ratio = 0.0;  // largest |analytic - numeric| / tolerance
  int64_t checked = 0;
  double scale = 0.0;  // G below
  std::string report;
};

struct ModuleGradcheckOptions {
  // Defaults from a sweep on the Transformer gradcheck (tests/nn/test_transformer.cpp): with these
  // the correct model's worst element uses 40% of its tolerance, and a rule missing 0.2-0.5% of the
  // logits' gradient fails at 1.7 times it (h = 1e-2 truncates too much for rel = 3e-3).
  int64_t samples = 8;     // random elements per tensor (all when the tensor is smaller)
  double step = 3e-3;      // h of the central difference
  double rel = 3e-3;       // tolerance relative to the element's own numeric gradient
  double of_scale = 1e-3;  // tolerance relative to G, the RMS of every checked numeric gradient
  uint64_t seed = 7;
};

// Compares d L / d p from backward() with central differences (L(p + h) - L(p - h)) / 2h on up to
// opt.samples random elements of every tensor in `params`, for
//   L = sum_i w_i y_i,  y = f() of any shape,  w fixed, uniform in [-1, 1]
// evaluated without the tape and summed in double. A weighted sum keeps every output's share of the
// gradient O(1) (a mean loss divides it by the number of terms, below any fixed tolerance). An
// element passes when |analytic - numeric| <= rel |numeric| + of_scale G, where G is the RMS of all
// the numeric gradients checked: the tolerance follows the gradient's size, so a missing
// contribution of a few thousandths of it fails wherever it is. A non-finite value fails.
// (autograd/gradcheck clones its inputs; a module holding its own parameters is perturbed in place.)
inline ModuleGradcheck gradcheck_params(const NamedTensors& params, const std::function<Tensor()>& f,
                                        const ModuleGradcheckOptions& opt = {}) {
  for (auto& [n, p] : params) Tensor(p).zero_grad();
  Tape::current().clear();
  Generator gen(opt.seed);
  const Tensor y = f();
  const Tensor w = Tensor::uniform(y.shape(), -1.0f, 1.0f, gen);
  backward(sum(mul(y, w)));
  std::vector<Tensor> grads;
  for (auto& [n, p] : params)
    grads.push_back(p.grad().defined() ? p.grad().clone() : Tensor::zeros(p.shape()));
  auto value = [&] {
    NoGradGuard ng;
    const Tensor out = f();
    double s = 0.0;
    for (int64_t i = 0; i < out.numel(); ++i) s += static_cast<double>(out.data()[i]) * w.data()[i];
    return s;
  };
  struct Sample {
    size_t tensor;
    int64_t index;
    double analytic, numeric;
  };
  std::vector<Sample> checked;
  for (size_t k = 0; k < params.size(); ++k) {
    Tensor p = params[k].second;
    const int64_t m = std::min<int64_t>(opt.samples, p.numel());
    std::vector<int64_t> idx(static_cast<size_t>(p.numel()));
    std::iota(idx.begin(), idx.end(), 0);
    for (int64_t i = 0; i < m; ++i)  // partial Fisher-Yates: the first m form a random sample
      std::swap(idx[static_cast<size_t>(i)],
                idx[static_cast<size_t>(
                    i + static_cast<int64_t>(gen.below(static_cast<uint64_t>(p.numel() - i))))]);
    for (int64_t j = 0; j < m; ++j) {
      const int64_t i = idx[static_cast<size_t>(j)];
      float* x = p.data() + i;
      const float orig = *x;
      *x = orig + static_cast<float>(opt.step);
      const double step_hi = static_cast<double>(*x) - orig, lp = value();
      *x = orig - static_cast<float>(opt.step);
      const double step_lo = orig - static_cast<double>(*x), lm = value();
      *x = orig;
      checked.push_back({k, i, grads[k].data()[i], (lp - lm) / (step_hi + step_lo)});
    }
  }
  ModuleGradcheck res;
  res.checked = static_cast<int64_t>(checked.size());
  double sq = 0.0;
  for (const Sample& c : checked) sq += c.numeric * c.numeric;
  res.scale = checked.empty() ? 0.0 : std::sqrt(sq / static_cast<double>(checked.size()));
  std::string worst;
  for (const Sample& c : checked) {
    const double tol = opt.rel * std::abs(c.numeric) + opt.of_scale * res.scale;
    const bool finite = std::isfinite(c.analytic) && std::isfinite(c.numeric);
    const double ratio = finite ? std::abs(c.analytic - c.numeric) / tol : INFINITY;
    if (!(ratio <= 1.0)) res.ok = false;
    if (worst.empty() || ratio > res.worst_ratio) {
      res.worst_ratio = ratio;
      worst = fmt::format("{}[{}]: analytic {:.6g} numeric {:.6g}", params[c.tensor].first, c.index,
                          c.analytic, c.numeric);
    }
  }
  if (checked.empty() || !std::isfinite(res.scale) || res.scale == 0.0) res.ok = false;
  res.report = fmt::format("{} ({} elements checked, gradient scale G {:.3g}, worst ratio {:.3f}: {})",
                           res.ok ? "ok" : "MISMATCH", res.checked, res.scale, res.worst_ratio, worst);
  return res;
}

}  // namespace tg::nn::test
