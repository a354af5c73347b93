// Basic layers: Linear, Embedding, PositionalEncoding, LayerNorm, Dropout, FeedForward.
// Parameter names and shapes follow PyTorch (weight [out, in], y = x W^T + b).
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "autograd/random.hpp"
#include "autograd/tensor.hpp"
#include "nn/module.hpp"

namespace tg::nn {

// Whether a layer draws its initial values from its generator (standard), or leaves its parameters
// unset and draws nothing, for values that are loaded next (none: a checkpoint's, a Hugging Face
// folder's; GPT-2's 124M values took a third of lm sample's start to draw).
enum class LayerInit { standard, none };

// y = x W^T + b over the last axis. Init: W xavier-uniform (as nn.Transformer re-initialises
// every matrix), b ~ U(-1/sqrt(in), 1/sqrt(in)) (PyTorch's Linear default).
class Linear : public Module {
 public:
  Linear(int64_t in, int64_t out, Generator& gen, bool bias = true, LayerInit init = LayerInit::standard);
  Tensor forward(const Tensor& x) const;
  Tensor weight, bias;  // [out, in], [out] (undefined without bias)
  int64_t in_features, out_features;
};

// Token embedding scaled by sqrt(d), as in "Attention Is All You Need" (section 3.4).
// ids: shape ids_shape with values in [0, num); output ids_shape + [d].
class Embedding : public Module {
 public:
  Embedding(int64_t num, int64_t dim, Generator& gen, LayerInit init = LayerInit::standard);
  Tensor forward(std::span<const int32_t> ids, const Shape& ids_shape) const;
  Tensor weight;  // [num, dim]
  int64_t num, dim;
};

// Sinusoidal positions: pe[pos, 2i] = sin(pos / 10000^(2i/d)), pe[pos, 2i+1] = cos(same).
// A fixed buffer, not a parameter. forward(x [B, T, d], offset) = x + pe[offset : offset + T].
class PositionalEncoding {
 public:
  PositionalEncoding(int64_t dim, int64_t max_len);
  Tensor forward(const Tensor& x, int64_t offset = 0) const;
  const Tensor& table() const { return pe_; }

 private:
  Tensor pe_;  // [max_len, dim]
  int64_t dim_, max_len_;
};

// Over the last axis, eps 1e-5; weight = 1, bias = 0 initially.
class LayerNorm : public Module {
 public:
  explicit LayerNorm(int64_t dim, float eps = 1e-5f);
  Tensor forward(const Tensor& x) const;
  Tensor weight, bias;  // [dim]
  float eps;
};

// Inverted dropout, active only in training mode. Draws its masks from a generator owned by the
// model (so one seed makes a run reproducible and a checkpoint can save the stream).
class Dropout : public Module {
 public:
  Dropout(float p, Generator& gen);
  Tensor forward(const Tensor& x) const;
  // forward(relu(x)) as one op (tg::relu_dropout); relu(x) when not training or p == 0.
  Tensor forward_relu(const Tensor& x) const;
  // linear(forward_relu(x), w, bias) as one op (tg::relu_dropout_linear: under bf16 products the
  // activation is written in bf16 only).
  Tensor forward_relu_linear(const Tensor& x, const Tensor& w, const Tensor& bias) const;
  // x + forward(y) as one op (tg::dropout_add: the residual connection); x + y when not training.
  Tensor forward_add(const Tensor& x, const Tensor& y) const;
  // For ops that apply this dropout inside a fused kernel (attention_context): the probability in
  // effect (0 when not training) and the generator that seeds the mask.
  float active_p() const { return is_training() ? p : 0.0f; }
  Generator& generator() const { return *gen_; }
  float p;

 private:
  Generator* gen_;
};

enum class Activation { relu, gelu };
Activation parse_activation(const std::string& s);  // "relu" | "gelu", else throws
Tensor activate(const Tensor& x, Activation a);

// The position-wise feed-forward block: linear2(dropout(act(linear1(x)))).
// Registered with an empty name by the Transformer layers, so its parameters read
// "linear1.weight" etc. directly under the layer, as in PyTorch.
class FeedForward : public Module {
 public:
  FeedForward(int64_t d_model, int64_t d_ff, Activation act, float dropout, Generator& gen);
  Tensor forward(const Tensor& x) const;
  Linear linear1, linear2;
  Dropout dropout;
  Activation activation;
};

}  // namespace tg::nn
