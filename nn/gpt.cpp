#include "nn/gpt.hpp"

#include <fmt/format.h>

#include <cmath>
#include <stdexcept>

#include "autograd/functions.hpp"

namespace tg::nn {

void GptConfig::validate() const {
  constexpr const char* kName = "GptConfig";
  for (const auto& [field, value] :
       {std::pair{"vocab_size", vocab_size}, std::pair{"block_size", block_size},
        std::pair{"n_layer", n_layer}, std::pair{"n_head", n_head}, std::pair{"n_embd", n_embd}})
    require_positive(kName, field, value);
  require_divisible(kName, "n_embd", n_embd, "n_head", n_head);
  require_probability(kName, "dropout", dropout);
  if (!bias) throw std::invalid_argument("GptConfig: bias false (no biases) is not supported");
  if (activation != "gelu" && activation != "gelu_new")
    throw std::invalid_argument(
        fmt::format("GptConfig: activation must be \"gelu\" or \"gelu_new\", got \"{}\"", activation));
  if (!(layer_norm_epsilon > 0.0f && std::isfinite(layer_norm_epsilon)))
    throw std::invalid_argument(
        fmt::format("GptConfig: layer_norm_epsilon must be a finite number > 0, got {}", layer_norm_epsilon));
}

std::vector<ConfigField> GptConfig::fields() {
  static const GptConfig d;  // the defaults of the optional fields
  return {{"vocab_size", &vocab_size},
          {"block_size", &block_size},
          {"n_layer", &n_layer},
          {"n_head", &n_head},
          {"n_embd", &n_embd},
          {"dropout", &dropout},
          {"bias", &bias},
          {"activation", &activation, d.activation},
          {"layer_norm_epsilon", &layer_norm_epsilon, d.layer_norm_epsilon},
          {"tie_word_embeddings", &tie_word_embeddings, d.tie_word_embeddings}};
}

double gpt_parameter_count(const GptConfig& c) {
  const double d = static_cast<double>(c.n_embd);
  const double block = 2 * d                           // ln_1
                       + 3 * d * d + 3 * d             // attn.c_attn
                       + d * d + d                     // attn.c_proj
                       + 2 * d                         // ln_2
                       + 4 * d * d + 4 * d             // mlp.c_fc
                       + 4 * d * d + d;                // mlp.c_proj
  const double heads = c.tie_word_embeddings ? 1 : 2;  // wte, and lm_head when untied
  return heads * static_cast<double>(c.vocab_size) * d + static_cast<double>(c.block_size) * d +
         static_cast<double>(c.n_layer) * block + 2 * d;
}

namespace {

// w ~ N(0, std^2) in place.
void normal_(Tensor& w, float stddev, Generator& gen) {
  float* p = w.data();
  const int64_t n = w.numel();
  for (int64_t i = 0; i < n; ++i) p[i] = static_cast<float>(gen.normal()) * stddev;
}

// nanoGPT's _init_weights: N(0, 0.02) weights, zero biases; `stddev` for the residual projections.
void init_linear(Linear& l, float stddev, Generator& gen) {
  normal_(l.weight, stddev, gen);
  fill_(l.bias, 0.0f);
}

constexpr float kInitStd = 0.02f;

float residual_std(const GptConfig& cfg) {
  return kInitStd / std::sqrt(2.0f * static_cast<float>(cfg.n_layer));
}

void check_input(const Tensor& x, int64_t d, const char* what) {
  if (x.dim() != 3 || x.size(2) != d)
    throw std::invalid_argument(
        fmt::format("CausalSelfAttention: {} must be [B, T, {}], got {}", what, d, shape_str(x.shape())));
}

// A model whose values are loaded next draws none (and its generator stays where dropout finds it).
LayerInit layer_init(GptInit init) {
  return init == GptInit::none ? LayerInit::none : LayerInit::standard;
}

const GptConfig& validated(const GptConfig& cfg) {
  cfg.validate();
  return cfg;
}

}  // namespace

CausalSelfAttention::CausalSelfAttention(const GptConfig& cfg, Generator& gen, GptInit init)
    : c_attn(cfg.n_embd, 3 * cfg.n_embd, gen, true, layer_init(init)),
      c_proj(cfg.n_embd, cfg.n_embd, gen, true, layer_init(init)),
      attn_dropout(cfg.dropout, gen),
      resid_dropout(cfg.dropout, gen),
      n_embd(cfg.n_embd),
      n_head(cfg.n_head) {
  if (init == GptInit::random) {
    init_linear(c_attn, kInitStd, gen);
    init_linear(c_proj, residual_std(cfg), gen);
  }
  register_module("c_attn", c_attn);
  register_module("c_proj", c_proj);
  register_module("attn_dropout", attn_dropout);
  register_module("resid_dropout", resid_dropout);
}

Tensor CausalSelfAttention::forward(const Tensor& x) {
  check_input(x, n_embd, "input");
  const Tensor qkv = c_attn.forward(x);
  const AttentionSpec spec{.heads = n_head,
                           .d_head = n_embd / n_head,
                           .q_col = 0,
                           .k_col = n_embd,
                           .v_col = 2 * n_embd,
                           .causal = true};
  return c_proj.forward(
      attend_heads(qkv, qkv, spec, attn_dropout, keep_attention ? &last_attention : nullptr));
}

// The cache keeps whole [q | k | v] rows; the new queries attend to every cached position and
// causally to each other.
Tensor CausalSelfAttention::forward_step(const Tensor& x, KVCache& cache) {
  check_input(x, n_embd, "step input");
  const Tensor qkv = c_attn.forward(x);
  append_to_cache(cache, qkv, n_embd, 2 * n_embd);
  const AttentionSpec spec{.heads = n_head,
                           .d_head = n_embd / n_head,
                           .k_col = cache.k_col,
                           .v_col = cache.v_col,
                           .causal = x.size(1) > 1,  // new positions see each other causally
                           .kv_len = cache.len};
  return c_proj.forward(
      attend_heads(qkv, cache.kv, spec, attn_dropout, keep_attention ? &last_attention : nullptr));
}

GptMlp::GptMlp(const GptConfig& cfg, Generator& gen, GptInit init)
    : c_fc(cfg.n_embd, 4 * cfg.n_embd, gen, true, layer_init(init)),
      c_proj(4 * cfg.n_embd, cfg.n_embd, gen, true, layer_init(init)),
      dropout(cfg.dropout, gen),
      approx(cfg.activation == "gelu_new" ? GeluApprox::tanh : GeluApprox::none) {
  if (init == GptInit::random) {
    init_linear(c_fc, kInitStd, gen);
    init_linear(c_proj, residual_std(cfg), gen);
  }
  register_module("c_fc", c_fc);
  register_module("c_proj", c_proj);
  register_module("dropout", dropout);
}

// c_proj(gelu(c_fc(x))), with the activation inside c_proj's op: the tape keeps c_fc's output only.
Tensor GptMlp::forward(const Tensor& x) const {
  return gelu_linear(c_fc.forward(x), c_proj.weight, c_proj.bias, approx);
}

GptBlock::GptBlock(const GptConfig& cfg, Generator& gen, GptInit init)
    : ln_1(cfg.n_embd, cfg.layer_norm_epsilon),
      attn(cfg, gen, init),
      ln_2(cfg.n_embd, cfg.layer_norm_epsilon),
      mlp(cfg, gen, init) {
  register_module("ln_1", ln_1);
  register_module("attn", attn);
  register_module("ln_2", ln_2);
  register_module("mlp", mlp);
}

// x + drop(f(ln(x))) twice; dropout_add is the residual sum and its dropout in one op.
Tensor GptBlock::forward(const Tensor& x) {
  const Tensor h = attn.resid_dropout.forward_add(x, attn.forward(ln_1.forward(x)));
  return mlp.dropout.forward_add(h, mlp.forward(ln_2.forward(h)));
}

Tensor GptBlock::forward_step(const Tensor& x, KVCache& cache) {
  const Tensor h = attn.resid_dropout.forward_add(x, attn.forward_step(ln_1.forward(x), cache));
  return mlp.dropout.forward_add(h, mlp.forward(ln_2.forward(h)));
}

GPT::Body::Body(const GptConfig& cfg, Generator& gen, GptInit init)
    : wte(cfg.vocab_size, cfg.n_embd, gen, layer_init(init)),
      wpe(cfg.block_size, cfg.n_embd, gen, layer_init(init)),
      drop(cfg.dropout, gen),
      ln_f(cfg.n_embd, cfg.layer_norm_epsilon) {
  if (init == GptInit::random) {
    normal_(wte.weight, kInitStd, gen);
    normal_(wpe.weight, kInitStd, gen);
  }
  register_module("wte", wte);
  register_module("wpe", wpe);
  register_module("drop", drop);
  for (int64_t i = 0; i < cfg.n_layer; ++i) {
    h.push_back(std::make_unique<GptBlock>(cfg, gen, init));
    register_module(fmt::format("h.{}", i), *h.back());
  }
  register_module("ln_f", ln_f);
}

GPT::GPT(const GptConfig& cfg, uint64_t seed, GptInit init)
    : cfg_(validated(cfg)), rng_(seed), transformer(cfg, rng_, init) {
  register_module("transformer", transformer);
  if (!cfg.tie_word_embeddings) {  // drawn last: a tied model's initial weights do not change
    lm_head = std::make_unique<Linear>(cfg.n_embd, cfg.vocab_size, rng_, false, layer_init(init));
    if (init == GptInit::random) normal_(lm_head->weight, kInitStd, rng_);
    register_module("lm_head", *lm_head);
  }
}

// drop(wte[ids] + wpe[pos0 .. pos0 + len)); [len, d] positions broadcast over the batch.
Tensor GPT::embed(std::span<const int32_t> ids, int64_t batch, int64_t len, int64_t pos0) {
  if (batch <= 0 || len <= 0 || static_cast<int64_t>(ids.size()) != batch * len)
    throw std::invalid_argument(fmt::format("GPT: {} ids for batch {} x length {}", ids.size(), batch, len));
  if (pos0 < 0 || pos0 + len > cfg_.block_size)
    throw std::out_of_range(
        fmt::format("GPT: positions {}..{} exceed the block size {}", pos0, pos0 + len - 1, cfg_.block_size));
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= cfg_.vocab_size)
      throw std::out_of_range(fmt::format("GPT: token id {} at position {} is outside the vocabulary [0, {})",
                                          ids[i], i, cfg_.vocab_size));
  const Tensor tok = embedding(transformer.wte.weight, ids, {batch, len});
  const Tensor pos = slice(transformer.wpe.weight, 0, pos0, pos0 + len);
  return transformer.drop.forward(add(tok, pos));
}

Tensor GPT::hidden(std::span<const int32_t> ids, int64_t batch, int64_t len) {
  Tensor x = embed(ids, batch, len, 0);
  for (auto& block : transformer.h) x = block->forward(x);
  return transformer.ln_f.forward(x);
}

Tensor GPT::head(const Tensor& hidden) const {
  return linear(hidden, head_weight(), Tensor());
}

Tensor GPT::forward(std::span<const int32_t> ids, int64_t batch, int64_t len) {
  return head(reshape(hidden(ids, batch, len), {batch * len, cfg_.n_embd}));
}

Tensor GPT::loss(std::span<const int32_t> ids, std::span<const int32_t> targets, int64_t batch, int64_t len) {
  if (targets.size() != ids.size())
    throw std::invalid_argument(fmt::format("GPT::loss: {} targets for {} ids", targets.size(), ids.size()));
  return linear_cross_entropy(reshape(hidden(ids, batch, len), {batch * len, cfg_.n_embd}), head_weight(),
                              Tensor(),
                              targets);  // the head and the loss in row chunks: no [N, V] logits kept
}

GptCache GPT::start_cache(int64_t batch) const {
  if (batch <= 0) throw std::invalid_argument(fmt::format("GPT::start_cache: batch {} must be > 0", batch));
  GptCache c;
  c.layers.resize(transformer.h.size());
  c.batch = batch;
  return c;
}

Tensor GPT::step(GptCache& cache, std::span<const int32_t> tokens, int64_t len) {
  if (cache.layers.size() != transformer.h.size())
    throw std::invalid_argument("GPT::step: the cache was not made by start_cache of this model");
  Tensor x = embed(tokens, cache.batch, len, cache.pos);
  for (size_t i = 0; i < transformer.h.size(); ++i) x = transformer.h[i]->forward_step(x, cache.layers[i]);
  cache.pos += len;
  // Only the last position's logits are needed: the head runs on one row per sequence.
  const Tensor last = len == 1 ? x : slice(x, 1, len - 1, len);
  return head(transformer.ln_f.forward(reshape(last, {cache.batch, cfg_.n_embd})));
}

void GPT::keep_attention(bool on) {
  for (auto& b : transformer.h) b->attn.keep_attention = on;
}

NamedTensors GPT::attention_maps() const {
  NamedTensors out;
  for (size_t i = 0; i < transformer.h.size(); ++i)
    out.emplace_back(fmt::format("transformer.h.{}.attn", i), transformer.h[i]->attn.last_attention);
  return out;
}

}  // namespace tg::nn
