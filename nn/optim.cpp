#include "nn/optim.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <numbers>
#include <stdexcept>

#include "ops/kernels.hpp"

namespace tg::nn {

Optimizer::Optimizer(NamedTensors params, float lr) : params_(std::move(params)), lr_(lr) {
  for (auto& [name, p] : params_)
    if (!p.defined())
      throw std::invalid_argument(fmt::format("Optimizer: parameter '{}' is undefined", name));
}

void Optimizer::zero_grad() {
  for (auto& [name, p] : params_) p.zero_grad();
}

std::vector<Tensor>& Optimizer::add_buffers(const std::string& prefix) {
  auto& [name, bufs] = buffers_.emplace_back(prefix, std::vector<Tensor>{});
  for (auto& [pname, p] : params_) bufs.push_back(Tensor::zeros(p.shape()));
  return bufs;
}

NamedTensors Optimizer::state() const {
  NamedTensors out;
  out.emplace_back("step", Tensor::from_data({1}, {static_cast<float>(step_)}));
  for (const auto& [prefix, bufs] : buffers_)
    for (size_t i = 0; i < bufs.size(); ++i)
      out.emplace_back(prefix + "." + params_[i].first, bufs[i].clone());
  return out;
}

void Optimizer::load_state(const NamedTensors& state) {
  std::map<std::string, const Tensor*> given;
  for (const auto& [name, t] : state)
    if (!given.emplace(name, &t).second)
      throw std::invalid_argument(fmt::format("Optimizer::load_state: duplicate entry '{}'", name));
  auto take = [&](const std::string& name, const Shape& shape) -> const Tensor& {
    auto it = given.find(name);
    if (it == given.end())
      throw std::invalid_argument(fmt::format("Optimizer::load_state: missing entry '{}'", name));
    if (it->second->shape() != shape)
      throw std::invalid_argument(fmt::format("Optimizer::load_state: entry '{}' has shape {}, expected {}",
                                              name, shape_str(it->second->shape()), shape_str(shape)));
    const Tensor& t = *it->second;
    given.erase(it);
    return t;
  };
  // Validate everything before changing anything: a bad file must not leave a half-loaded state.
  const float step = take("step", {1}).data()[0];
  // The upper bound keeps the conversion to int64 defined (a corrupt file once hit that).
  if (!(step >= 0.0f && step < 0x1p62f) || step != std::floor(step))
    throw std::invalid_argument(
        fmt::format("Optimizer::load_state: 'step' must be a whole number in [0, 2^62), got {}", step));
  std::vector<std::pair<Tensor, const Tensor*>> copies;
  for (auto& [prefix, bufs] : buffers_)
    for (size_t i = 0; i < bufs.size(); ++i)
      copies.emplace_back(bufs[i], &take(prefix + "." + params_[i].first, bufs[i].shape()));
  if (!given.empty())
    throw std::invalid_argument(
        fmt::format("Optimizer::load_state: unexpected entry '{}' (a different optimizer or model?)",
                    given.begin()->first));
  for (auto& [dst, src] : copies)
    std::memcpy(dst.data(), src->data(), sizeof(float) * static_cast<size_t>(dst.numel()));
  step_ = static_cast<int64_t>(step);
}

// ---- SGD ---------------------------------------------------------------------------------------

SGD::SGD(NamedTensors params, const SGDOptions& opt) : Optimizer(std::move(params), opt.lr), options(opt) {
  if (opt.momentum < 0.0f || opt.weight_decay < 0.0f)
    throw std::invalid_argument(
        fmt::format("SGD: momentum ({}) and weight_decay ({}) must be >= 0", opt.momentum, opt.weight_decay));
  if (opt.momentum != 0.0f) momentum_ = &add_buffers("momentum_buffer");
}

void SGD::step(float grad_scale) {
  ++step_;
  std::vector<float> d;
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = params_[i].second;
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    const int64_t n = p.numel();
    d.assign(g.data(), g.data() + n);  // d = g * grad_scale + wd * p
    if (grad_scale != 1.0f) ops::scale(d.data(), grad_scale, n);
    if (options.weight_decay != 0.0f) ops::axpy(d.data(), p.data(), options.weight_decay, n);
    if (momentum_) {
      float* buf = (*momentum_)[i].data();
      if (step_ == 1) {  // PyTorch starts the buffer at the first gradient, not at zero
        std::copy(d.begin(), d.end(), buf);
      } else {
        ops::scale(buf, options.momentum, n);
        ops::axpy(buf, d.data(), 1.0f, n);
      }
      if (options.nesterov)
        ops::axpy(d.data(), buf, options.momentum, n);
      else
        std::copy(buf, buf + n, d.begin());
    }
    ops::axpy(p.data(), d.data(), -lr_, n);
  }
}

// ---- Adam / AdamW --------------------------------------------------------------------------------

Adam::Adam(NamedTensors params, const AdamOptions& opt) : Optimizer(std::move(params), opt.lr), options(opt) {
  if (!(opt.beta1 >= 0.0f && opt.beta1 < 1.0f && opt.beta2 >= 0.0f && opt.beta2 < 1.0f))
    throw std::invalid_argument(
        fmt::format("Adam: betas must be in [0, 1), got ({}, {})", opt.beta1, opt.beta2));
  if (opt.eps <= 0.0f || opt.weight_decay < 0.0f)
    throw std::invalid_argument(
        fmt::format("Adam: eps ({}) must be > 0 and weight_decay ({}) >= 0", opt.eps, opt.weight_decay));
  exp_avg_ = &add_buffers("exp_avg");
  exp_avg_sq_ = &add_buffers("exp_avg_sq");
}

void Adam::step(float grad_scale) {
  ++step_;
  ops::AdamParams ap{.lr = lr_,
                     .beta1 = options.beta1,
                     .beta2 = options.beta2,
                     .eps = options.eps,
                     .weight_decay = options.weight_decay,
                     .decoupled = decoupled_,
                     .step = step_,
                     .grad_scale = grad_scale};
  // Every parameter in one streaming pass, split between the threads across tensor boundaries.
  std::vector<ops::AdamTensor> ts;
  std::vector<Tensor> grads;  // keeps each gradient alive during the pass
  ts.reserve(params_.size());
  grads.reserve(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = params_[i].second;
    Tensor g = p.grad();
    if (!g.defined()) continue;
    ts.push_back({.param = p.data(),
                  .m = (*exp_avg_)[i].data(),
                  .v = (*exp_avg_sq_)[i].data(),
                  .grad = g.data(),
                  .n = p.numel(),
                  .weight_decay = options.decay_matrices_only && p.dim() < 2 ? 0.0f : options.weight_decay});
    grads.push_back(std::move(g));
  }
  ops::adam_update(ts, ap);
}

AdamW::AdamW(NamedTensors params, AdamOptions opt) : Adam(std::move(params), opt) {
  decoupled_ = true;
}

// ---- schedules -------------------------------------------------------------------------------------

float LrSchedule::at(int64_t step) const {
  const double s = static_cast<double>(std::max<int64_t>(step, 1)), w = static_cast<double>(warmup);
  switch (kind) {
    case Kind::constant:
      return lr;
    case Kind::noam:
      if (warmup <= 0) return static_cast<float>(lr / std::sqrt(s));  // pure inverse square root
      return static_cast<float>(lr * std::min(s / w, std::sqrt(w / s)));
    case Kind::cosine: {
      if (warmup > 0 && s < w) return static_cast<float>(lr * s / w);
      const double span = static_cast<double>(std::max<int64_t>(total - warmup, 1));
      const double p = std::clamp((s - w) / span, 0.0, 1.0);
      return static_cast<float>(lr_min + (lr - lr_min) * 0.5 * (1.0 + std::cos(std::numbers::pi * p)));
    }
  }
  return lr;
}

LrSchedule::Kind LrSchedule::parse(const std::string& s) {
  if (s == "constant") return Kind::constant;
  if (s == "noam") return Kind::noam;
  if (s == "cosine") return Kind::cosine;
  throw std::invalid_argument(fmt::format("lr schedule: expected constant, noam or cosine, got '{}'", s));
}

// ---- gradient clipping -------------------------------------------------------------------------------

double grad_norm(const NamedTensors& params) {
  double ss = 0.0;
  for (const auto& [name, p] : params) {
    const Tensor g = p.grad();
    if (g.defined()) ss += ops::sum_squares(g.data(), g.numel());
  }
  return std::sqrt(ss);
}

// As torch.nn.utils.clip_grad_norm_: g *= max_norm / (norm + 1e-6) when that factor is < 1.
float clip_coef(double max_norm, double norm) {
  const double coef = max_norm / (norm + 1e-6);
  return coef >= 1.0 ? 1.0f : static_cast<float>(coef);
}

void clip_grad_norm(const NamedTensors& params, double max_norm, double norm) {
  const float coef = clip_coef(max_norm, norm);
  if (coef == 1.0f) return;
  for (const auto& [name, p] : params) {
    Tensor g = p.grad();
    if (g.defined()) ops::scale(g.data(), coef, g.numel());
  }
}

double clip_grad_norm(const NamedTensors& params, double max_norm) {
  const double norm = grad_norm(params);
  clip_grad_norm(params, max_norm, norm);
  return norm;
}

}  // namespace tg::nn
