// Helpers shared by the nn tests: closeness checks, tiny configs, and a finite-difference gradient
// check that perturbs a module's parameters in place (autograd/gradcheck clones its inputs, which
// a module holding its own parameters cannot use).
#pragma once

#include <fmt/format.h>

#include <cmath>
#include <functional>
#include <numeric>
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

inline TransformerConfig tiny_config(bool norm_first = false, const std::string& act = "relu") {
  TransformerConfig c;
  c.src_vocab = 13;
  c.tgt_vocab = 11;
  c.d_model = 8;
  c.heads = 2;
  c.enc_layers = 2;
  c.dec_layers = 2;
  c.d_ff = 16;
  c.dropout = 0.0f;
  c.norm_first = norm_first;
  c.activation = act;
  c.max_len = 64;
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
  std::string report;
};

// Compares d loss / d p from backward() with central differences (loss evaluated without the tape,
// in float32, read as double) on up to `samples` random elements of every tensor in `params`.
inline ModuleGradcheck gradcheck_params(const NamedTensors& params, const std::function<Tensor()>& loss,
                                        int64_t samples, double eps = 1e-2, double atol = 2e-3,
                                        double rtol = 2e-2, uint64_t seed = 7) {
  for (auto& [n, p] : params) Tensor(p).zero_grad();
  Tape::current().clear();
  backward(loss());
  std::vector<Tensor> grads;
  for (auto& [n, p] : params)
    grads.push_back(p.grad().defined() ? p.grad().clone() : Tensor::zeros(p.shape()));
  auto value = [&] {
    NoGradGuard ng;
    return static_cast<double>(loss().item());
  };
  Generator gen(seed);
  ModuleGradcheck res;
  std::string worst;
  for (size_t k = 0; k < params.size(); ++k) {
    Tensor p = params[k].second;
    std::vector<int64_t> idx(static_cast<size_t>(p.numel()));
    std::iota(idx.begin(), idx.end(), 0);
    for (int64_t i = 0; i < std::min<int64_t>(samples, p.numel()); ++i)
      std::swap(idx[static_cast<size_t>(i)],
                idx[static_cast<size_t>(
                    i + static_cast<int64_t>(gen.below(static_cast<uint64_t>(p.numel() - i))))]);
    idx.resize(static_cast<size_t>(std::min<int64_t>(samples, p.numel())));
    for (int64_t i : idx) {
      float* x = p.data() + i;
      const float orig = *x;
      *x = orig + static_cast<float>(eps);
      const double step_hi = static_cast<double>(*x) - orig, lp = value();
      *x = orig - static_cast<float>(eps);
      const double step_lo = orig - static_cast<double>(*x), lm = value();
      *x = orig;
      const double numeric = (lp - lm) / (step_hi + step_lo), analytic = grads[k].data()[i];
      const double ratio = std::abs(analytic - numeric) / (atol + rtol * std::abs(numeric));
      ++res.checked;
      if (ratio > res.worst_ratio || !std::isfinite(ratio)) {
        res.worst_ratio = ratio;
        worst = fmt::format("{}[{}]: analytic {:.6g} numeric {:.6g}", params[k].first, i, analytic, numeric);
      }
      if (!(ratio <= 1.0)) res.ok = false;
    }
  }
  res.report = fmt::format("{} ({} elements checked, worst ratio {:.3f}: {})", res.ok ? "ok" : "MISMATCH",
                           res.checked, res.worst_ratio, worst);
  return res;
}

}  // namespace tg::nn::test
