#include "nn/module.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <stdexcept>

namespace tg::nn {

Tensor& Module::register_parameter(const std::string& name, Tensor t) {
  for (const auto& [n, p] : params_)
    if (n == name) throw std::logic_error(fmt::format("Module: parameter '{}' registered twice", name));
  t.requires_grad_(true);
  t.set_name(name);
  params_.emplace_back(name, std::move(t));
  return params_.back().second;
}

void Module::register_module(const std::string& name, Module& child) {
  children_.emplace_back(name, &child);
}

void Module::collect(const std::string& prefix, NamedTensors& out) const {
  for (const auto& [n, p] : params_) out.emplace_back(prefix + n, p);
  for (const auto& [n, c] : children_) c->collect(n.empty() ? prefix : prefix + n + ".", out);
}

NamedTensors Module::named_parameters() const {
  NamedTensors out;
  collect("", out);
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [n, p] : named_parameters()) out.push_back(p);
  return out;
}

Tensor Module::parameter(const std::string& name) const {
  for (auto& [n, p] : named_parameters())
    if (n == name) return p;
  throw std::out_of_range(fmt::format("Module: no parameter named '{}'", name));
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (auto& [name, p] : named_parameters()) n += p.numel();
  return n;
}

namespace {

// Index of the first NaN/Inf in x[0, n), or -1. Exponent bits all ones <=> NaN or Inf; the
// integer test vectorizes, and a whole tensor is scanned only when it holds one.
int64_t first_non_finite(const float* x, int64_t n) {
  uint32_t any = 0;
  for (int64_t i = 0; i < n; ++i) any |= (std::bit_cast<uint32_t>(x[i]) & 0x7F800000u) == 0x7F800000u;
  if (!any) return -1;
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(x[i])) return i;
  return -1;
}

std::string describe(const std::string& name, const Tensor& t, int64_t i) {
  const float v = t.data()[i];
  return fmt::format("{} ({} at element {} of {})", name, std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf"), i,
                     shape_str(t.shape()));
}

}  // namespace

std::optional<std::string> first_non_finite_gradient(const NamedTensors& params) {
  for (const auto& [name, p] : params) {
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    if (const int64_t i = first_non_finite(g.data(), g.numel()); i >= 0) return describe(name, g, i);
  }
  return std::nullopt;
}

std::optional<std::string> first_non_finite_parameter(const NamedTensors& params) {
  for (const auto& [name, p] : params)
    if (const int64_t i = first_non_finite(p.data(), p.numel()); i >= 0) return describe(name, p, i);
  return std::nullopt;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [n, c] : children_) c->train(on);
}

void Module::zero_grad() {
  for (auto& [n, p] : named_parameters()) p.zero_grad();
}

// Glorot & Bengio (2010): U(-a, a) with a = sqrt(6 / (fan_in + fan_out)), keeping the variance of
// activations and gradients roughly constant across layers.
void xavier_uniform_(Tensor& w, Generator& gen) {
  if (w.dim() != 2)
    throw std::invalid_argument(
        fmt::format("xavier_uniform_: expected a 2-D weight, got {}", shape_str(w.shape())));
  const double a = std::sqrt(6.0 / static_cast<double>(w.size(0) + w.size(1)));
  uniform_(w, static_cast<float>(-a), static_cast<float>(a), gen);
}

void uniform_(Tensor& t, float lo, float hi, Generator& gen) {
  float* p = t.data();
  const int64_t n = t.numel();  // (not in the loop: numel() multiplies the shape out)
  for (int64_t i = 0; i < n; ++i) p[i] = lo + (hi - lo) * gen.uniform();
}

void fill_(Tensor& t, float value) {
  std::fill_n(t.data(), t.numel(), value);
}

}  // namespace tg::nn
