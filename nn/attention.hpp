// Multi-head attention (Vaswani et al. 2017, section 3.2), PyTorch nn.MultiheadAttention layout:
// a fused input projection in_proj_weight [3d, d] (rows Wq; Wk; Wv), in_proj_bias [3d], and an
// output projection out_proj.{weight, bias}.
//
//   Q = x Wq^T + bq,  K = m Wk^T + bk,  V = m Wv^T + bv    split into H heads of d_head = d / H
//   A = softmax(Q K^T / sqrt(d_head) + masks)              [B, H, T, S]
//   y = concat_heads(dropout(A) V) Wo^T + bo
//
// Masks: causal (query t sees keys <= t) and key padding ([B, S] bytes, nonzero = padded key).
// A masked key gets probability exactly 0.
#pragma once

#include <cstdint>
#include <vector>

#include "autograd/functions.hpp"
#include "autograd/random.hpp"
#include "autograd/tensor.hpp"
#include "nn/layers.hpp"
#include "nn/module.hpp"

namespace tg::nn {

// Incremental decoding state of one attention block: the projected keys and values of the
// positions seen so far (self-attention, grows by one row per step) or of the encoder memory
// (cross-attention, computed once). `kv` is a projection output [B, L, C] whose columns
// [k_col, k_col + d) hold the keys and [v_col, v_col + d) the values (see attention_probs in
// autograd/functions.hpp). `len` < 0: all L rows of kv are valid; otherwise only rows [0, len) of each batch
// entry are (the self-attention cache grows in place: L is its capacity, doubled when full, so a decoding
// step copies only its new rows instead of the whole cache).
struct KVCache {
  Tensor kv;
  int64_t k_col = 0, v_col = 0;
  int64_t len = -1;
  bool empty() const { return !kv.defined(); }
  int64_t length() const { return kv.defined() ? (len < 0 ? kv.size(1) : len) : 0; }
};

// Appends the new rows of a projection output qkv [B, n, C] to `cache` (whole rows, so the
// attention reads the key and value columns k_col, v_col in place). While a tape records and qkv
// requires a gradient, a differentiable concat (gradients reach earlier positions); otherwise in
// place, with the capacity doubled when full, so a decoding step copies only its new rows.
void append_to_cache(KVCache& cache, const Tensor& qkv, int64_t k_col, int64_t v_col);

// The attention core, without projections: context [B, T, H d_head] = concat_heads(D(A) V) with
// A = softmax(Q K^T / sqrt(d_head) + masks), Q, K, V read in place as column blocks of q_src and
// kv_src as `spec` says (heads, d_head, columns, causal, pad, kv_len: AttentionSpec in
// autograd/functions.hpp), D = `drop`'s dropout (active only in training). spec's scale and
// dropout are set here: 1 / sqrt(d_head) and drop's. One tape op, attention, that keeps no A for
// backward; when `keep` is given, the two ops attention_probs and attention_context instead, with A
// stored in *keep (detached), for attention heatmaps.
Tensor attend_heads(const Tensor& q_src, const Tensor& kv_src, AttentionSpec spec, const Dropout& drop,
                    Tensor* keep = nullptr);

class MultiHeadAttention : public Module {
 public:
  MultiHeadAttention(int64_t d_model, int64_t heads, float dropout, Generator& gen);

  // Self-attention over x [B, T, d] (causal: query t sees keys 0..t).
  Tensor self_attention(const Tensor& x, bool causal, const KeyPadding& pad = {});
  // Cross-attention of x [B, T, d] over memory [B, S, d].
  Tensor cross_attention(const Tensor& x, const Tensor& memory, const KeyPadding& memory_pad = {});

  // Incremental decoding. x holds the NEW positions only [B, t, d]; their keys/values are
  // appended to `cache` and the queries attend to the whole cache (earlier positions are all
  // visible; new positions see each other causally).
  Tensor self_attention_step(const Tensor& x, KVCache& cache);
  // Fills `cache` with the memory's keys/values (once per source batch).
  void precompute_memory(const Tensor& memory, KVCache& cache) const;
  // Cross-attention of x [B, t, d] over a precomputed memory cache.
  Tensor cross_attention_cached(const Tensor& x, const KVCache& cache, const KeyPadding& memory_pad = {});

  Tensor in_proj_weight, in_proj_bias;  // [3d, d], [3d]
  Linear out_proj;
  int64_t d_model, heads, d_head;

  // When set, the last forward's attention probabilities [B, H, T, S] are kept (detached) in
  // last_attention, for attention heatmaps.
  bool keep_attention = false;
  Tensor last_attention;

 private:
  // out_proj(concat_heads(dropout(A) V)) with A = softmax(Q K^T / sqrt(d_head), masks); Q, K and V
  // are column blocks of the projection outputs q_src and kv_src (spec: the columns, causal, pad,
  // kv_len; this layer's heads and d_head are filled in).
  Tensor attend(const Tensor& q_src, const Tensor& kv_src, AttentionSpec spec);
  Dropout dropout_;
};

}  // namespace tg::nn
