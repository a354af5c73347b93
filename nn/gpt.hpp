// GPT: a decoder-only Transformer language model (Radford et al. 2018, 2019), laid out like
// nanoGPT's model.py so that its state_dict maps one to one (nn/gpt.md):
//
//   transformer.wte.weight [V, d]          token embeddings, also the output head (tied)
//   transformer.wpe.weight [block, d]      learned position embeddings
//   transformer.h.{i}.ln_1.{weight, bias}
//   transformer.h.{i}.attn.c_attn.{weight [3d, d], bias [3d]}   rows Wq; Wk; Wv (a PyTorch Linear)
//   transformer.h.{i}.attn.c_proj.{weight [d, d], bias}
//   transformer.h.{i}.ln_2.{weight, bias}
//   transformer.h.{i}.mlp.c_fc.{weight [4d, d], bias}, mlp.c_proj.{weight [d, 4d], bias}
//   transformer.ln_f.{weight, bias}
//   lm_head.weight [V, d]                  only with tie_word_embeddings false: a head of its own
//
//   x_0     = drop(wte[ids] + wpe[positions])                  (no sqrt(d) scaling)
//   x       = x + drop(c_proj(attention(ln_1(x))))             causal self-attention, H heads
//   x       = x + drop(mlp.c_proj(gelu(mlp.c_fc(ln_2(x)))))   exact (erf) GELU or GPT-2's tanh form
//   logits  = ln_f(x) wte^T                                    nanoGPT's lm_head.weight is wte
//
// Pre-norm blocks, LayerNorm eps 1e-5 (layer_norm_epsilon), dropout on the embeddings, the attention
// probabilities and both residual branches. Initialisation as nanoGPT: N(0, 0.02) weights and embeddings, the
// two residual projections (attn.c_proj, mlp.c_proj) N(0, 0.02 / sqrt(2 n_layer)), zero biases.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "autograd/functions.hpp"
#include "autograd/random.hpp"
#include "autograd/tensor.hpp"
#include "nn/attention.hpp"
#include "nn/family/family.hpp"
#include "nn/layers.hpp"
#include "nn/module.hpp"

namespace tg::nn {

// The field names of nanoGPT's GPTConfig (a checkpoint's config loads as GPTConfig(**config)), then
// what GPT-2 in the Hugging Face format adds, under transformers' GPT2Config names: optional fields,
// written only when not at their defaults (nanoGPT's model), so a model that uses none of them has
// nanoGPT's config, and checkpoints written before them load unchanged.
struct GptConfig {
  int64_t vocab_size = 256, block_size = 128, n_layer = 4, n_head = 4, n_embd = 128;
  float dropout = 0.0f;
  bool bias = true;  // biases in Linear and LayerNorm (nanoGPT's option; only true is supported)
  // The MLP's activation: "gelu", exact (erf, nanoGPT's); "gelu_new", the tanh approximation (GPT-2's).
  std::string activation = "gelu";
  float layer_norm_epsilon = 1e-5f;
  // The output head is wte (true), or a matrix of its own, lm_head.weight [vocab_size, n_embd].
  bool tie_word_embeddings = true;
  // Throws std::invalid_argument naming the field (sizes > 0, n_embd % n_head == 0,
  // 0 <= dropout < 1, bias true, a known activation, layer_norm_epsilon > 0).
  void validate() const;
  // The fields in a checkpoint's "config" (nn/family/family.hpp: one list for JSON and messages).
  std::vector<ConfigField> fields();
};

// Number of parameters of GPT(cfg), from the config alone (no allocation): a double, so that an
// absurd config cannot overflow it. A tied head is counted once.
double gpt_parameter_count(const GptConfig& cfg);

// How a GPT's parameters start: nanoGPT's random initialisation, or none where they are about to be
// overwritten (a checkpoint being loaded: GPT-2 124M's 124M normal draws take seconds). With none,
// nothing is drawn (LayerInit::none): the values are unset until the loader writes every one.
enum class GptInit { random, none };

// Causal self-attention with the fused projection c_attn: qkv = x Wqkv^T + b is [B, T, 3d] and the
// attention reads Q, K, V in place as its column blocks (attend_heads in nn/attention.hpp).
class CausalSelfAttention : public Module {
 public:
  CausalSelfAttention(const GptConfig& cfg, Generator& gen, GptInit init = GptInit::random);
  // c_proj(attention(x)) over x [B, T, d], without the residual dropout (the block applies it).
  Tensor forward(const Tensor& x);
  // The same over the NEW positions x [B, t, d] after those in `cache` (which grows by t rows).
  Tensor forward_step(const Tensor& x, KVCache& cache);
  Linear c_attn, c_proj;
  Dropout attn_dropout, resid_dropout;
  int64_t n_embd, n_head;
  // When set, the last forward's probabilities [B, H, T, S] are kept (detached), for heatmaps.
  bool keep_attention = false;
  Tensor last_attention;
};

class GptMlp : public Module {
 public:
  GptMlp(const GptConfig& cfg, Generator& gen, GptInit init = GptInit::random);
  Tensor forward(const Tensor& x) const;  // c_proj(gelu(c_fc(x))), without the residual dropout
  Linear c_fc, c_proj;
  Dropout dropout;
  GeluApprox approx;  // the config's activation
};

class GptBlock : public Module {
 public:
  GptBlock(const GptConfig& cfg, Generator& gen, GptInit init = GptInit::random);
  Tensor forward(const Tensor& x);
  Tensor forward_step(const Tensor& x, KVCache& cache);
  LayerNorm ln_1;
  CausalSelfAttention attn;
  LayerNorm ln_2;
  GptMlp mlp;
};

// Incremental state for generation: one key/value cache per block and the number of positions
// they hold.
struct GptCache {
  std::vector<KVCache> layers;
  int64_t batch = 0, pos = 0;
};

class GPT : public Module {
 public:
  // Parameters initialised from `seed` (unless init is none); dropout draws from rng(), seeded from
  // `seed` too.
  explicit GPT(const GptConfig& cfg, uint64_t seed = 0, GptInit init = GptInit::random);
  const GptConfig& config() const { return cfg_; }

  // ln_f of the last block's output, [B, T, d], for ids [B, T] (T <= block_size) at positions
  // 0..T-1.
  Tensor hidden(std::span<const int32_t> ids, int64_t batch, int64_t len);
  // Logits [B * T, V]: row b * T + t predicts the token after ids[b, t].
  Tensor forward(std::span<const int32_t> ids, int64_t batch, int64_t len);
  // Mean cross-entropy of forward(ids) against targets [B, T] (the ids shifted by one).
  Tensor loss(std::span<const int32_t> ids, std::span<const int32_t> targets, int64_t batch, int64_t len);
  // hidden [..., d] -> logits [..., V] through the head.
  Tensor head(const Tensor& hidden) const;
  // The head's weight [V, d]: transformer.wte.weight when tied, else lm_head.weight.
  const Tensor& head_weight() const { return lm_head ? lm_head->weight : transformer.wte.weight; }

  // Incremental generation (use under NoGradGuard): feed `tokens` [B, t] at positions
  // cache.pos .. cache.pos + t - 1 (at most block_size in all); returns the logits [B, V] of the
  // last of them and advances cache.pos by t.
  GptCache start_cache(int64_t batch) const;
  Tensor step(GptCache& cache, std::span<const int32_t> tokens, int64_t len);

  // Attention heatmaps: when on, every block keeps its last probabilities; attention_maps()
  // names them "transformer.h.{i}.attn", each [B, H, T, T].
  void keep_attention(bool on);
  NamedTensors attention_maps() const;

  Generator& rng() { return rng_; }  // the dropout stream (a checkpoint saves its state)

 private:
  Tensor embed(std::span<const int32_t> ids, int64_t batch, int64_t len, int64_t pos0);

  GptConfig cfg_;
  Generator rng_;

 public:
  // "transformer": nanoGPT's ModuleDict(wte, wpe, drop, h, ln_f). wte and wpe are Embedding modules
  // for their "weight" parameter only: GPT adds them unscaled (Embedding::forward scales by sqrt(d)).
  struct Body : Module {
    Embedding wte, wpe;
    Dropout drop;
    std::vector<std::unique_ptr<GptBlock>> h;
    LayerNorm ln_f;
    Body(const GptConfig& cfg, Generator& gen, GptInit init);
  } transformer;
  // The untied head (nanoGPT's and transformers' lm_head: a Linear without bias), or null when tied.
  std::unique_ptr<Linear> lm_head;
};

}  // namespace tg::nn
