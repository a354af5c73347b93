#include "nn/layers.hpp"

#include <fmt/format.h>

#include <cmath>
#include <stdexcept>

#include "autograd/functions.hpp"

namespace tg::nn {

Linear::Linear(int64_t in, int64_t out, Generator& gen, bool with_bias, LayerInit init)
    : in_features(in), out_features(out) {
  if (in <= 0 || out <= 0)
    throw std::invalid_argument(fmt::format("Linear: sizes must be > 0, got in={} out={}", in, out));
  weight = register_parameter("weight", Tensor::empty({out, in}));
  if (init == LayerInit::standard) xavier_uniform_(weight, gen);
  if (with_bias) {
    bias = register_parameter("bias", Tensor::empty({out}));
    const float bound = 1.0f / std::sqrt(static_cast<float>(in));
    if (init == LayerInit::standard) uniform_(bias, -bound, bound, gen);
  }
}

Tensor Linear::forward(const Tensor& x) const {
  if (x.dim() < 1 || x.size(-1) != in_features)
    throw std::invalid_argument(
        fmt::format("Linear(in_features={}, out_features={}): expected input [..., {}], got {}", in_features,
                    out_features, in_features, shape_str(x.shape())));
  return linear(x, weight, bias);
}

Embedding::Embedding(int64_t n, int64_t d, Generator& gen, LayerInit init) : num(n), dim(d) {
  if (n <= 0 || d <= 0)
    throw std::invalid_argument(fmt::format("Embedding: sizes must be > 0, got num={} dim={}", n, d));
  weight = register_parameter("weight", Tensor::empty({n, d}));
  if (init == LayerInit::standard) xavier_uniform_(weight, gen);
}

// The sqrt(d) factor keeps the embeddings on the scale of the positional encodings (|pe| <= 1)
// when the embedding entries are small, as xavier init makes them.
Tensor Embedding::forward(std::span<const int32_t> ids, const Shape& ids_shape) const {
  return mul_scalar(embedding(weight, ids, ids_shape), std::sqrt(static_cast<float>(dim)));
}

PositionalEncoding::PositionalEncoding(int64_t dim, int64_t max_len) : dim_(dim), max_len_(max_len) {
  if (dim <= 0 || max_len <= 0)
    throw std::invalid_argument(
        fmt::format("PositionalEncoding: sizes must be > 0, got dim={} max_len={}", dim, max_len));
  pe_ = Tensor::empty({max_len, dim});
  float* p = pe_.data();
  for (int64_t pos = 0; pos < max_len; ++pos) {
    for (int64_t i = 0; i < dim; i += 2) {
      // 1 / 10000^(i/d) computed in double: positions up to max_len stay exact to float rounding.
      const double angle = static_cast<double>(pos) *
                           std::exp(-std::log(10000.0) * static_cast<double>(i) / static_cast<double>(dim));
      p[pos * dim + i] = static_cast<float>(std::sin(angle));
      if (i + 1 < dim) p[pos * dim + i + 1] = static_cast<float>(std::cos(angle));
    }
  }
}

Tensor PositionalEncoding::forward(const Tensor& x, int64_t offset) const {
  if (x.dim() < 2 || x.size(-1) != dim_)
    throw std::invalid_argument(
        fmt::format("PositionalEncoding: expected [..., T, {}], got {}", dim_, shape_str(x.shape())));
  const int64_t T = x.size(-2);
  if (offset < 0 || offset + T > max_len_)
    throw std::out_of_range(fmt::format("PositionalEncoding: positions {}..{} exceed max_len {}", offset,
                                        offset + T - 1, max_len_));
  return add(x, slice(pe_, 0, offset, offset + T));
}

LayerNorm::LayerNorm(int64_t dim, float eps_) : eps(eps_) {
  weight = register_parameter("weight", Tensor::ones({dim}));
  bias = register_parameter("bias", Tensor::zeros({dim}));
}

Tensor LayerNorm::forward(const Tensor& x) const {
  if (x.dim() < 1 || x.size(-1) != weight.numel())
    throw std::invalid_argument(fmt::format("LayerNorm({}): expected input [..., {}], got {}", weight.numel(),
                                            weight.numel(), shape_str(x.shape())));
  return layernorm(x, weight, bias, eps);
}

Dropout::Dropout(float p_, Generator& gen) : p(p_), gen_(&gen) {
  if (!(p >= 0.0f && p < 1.0f))
    throw std::invalid_argument(fmt::format("Dropout: p must be in [0, 1), got {}", p));
}

Tensor Dropout::forward(const Tensor& x) const {
  if (!is_training() || p == 0.0f) return x;
  return dropout(x, p, true, *gen_);
}

Tensor Dropout::forward_add(const Tensor& x, const Tensor& y) const {
  return dropout_add(x, y, p, is_training(), *gen_);
}

Tensor Dropout::forward_relu(const Tensor& x) const {
  return relu_dropout(x, p, is_training(), *gen_);
}

Tensor Dropout::forward_relu_linear(const Tensor& x, const Tensor& w, const Tensor& bias) const {
  return relu_dropout_linear(x, p, is_training(), *gen_, w, bias);
}

Activation parse_activation(const std::string& s) {
  if (s == "relu") return Activation::relu;
  if (s == "gelu") return Activation::gelu;
  throw std::invalid_argument(fmt::format("activation: expected 'relu' or 'gelu', got '{}'", s));
}

Tensor activate(const Tensor& x, Activation a) {
  return a == Activation::relu ? relu(x) : gelu(x);
}

FeedForward::FeedForward(int64_t d_model, int64_t d_ff, Activation act, float p, Generator& gen)
    : linear1(d_model, d_ff, gen), linear2(d_ff, d_model, gen), dropout(p, gen), activation(act) {
  register_module("linear1", linear1);
  register_module("dropout", dropout);
  register_module("linear2", linear2);
}

// With ReLU and dropout in training, relu + dropout + linear2 is one op (relu_dropout_linear: one
// pass, a byte mask saved instead of the [.., d_ff] pre-activation, and under bf16 products the
// activation written in bf16 only; elsewhere relu_dropout then linear).
Tensor FeedForward::forward(const Tensor& x) const {
  const Tensor h = linear1.forward(x);
  if (activation == Activation::relu && dropout.is_training() && dropout.p > 0.0f)
    return dropout.forward_relu_linear(h, linear2.weight, linear2.bias);
  return linear2.forward(dropout.forward(activate(h, activation)));
}

}  // namespace tg::nn
