#include "nn/attention.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "autograd/functions.hpp"
#include "autograd/tape.hpp"

namespace tg::nn {

namespace {

void check_input(const Tensor& x, int64_t d, const char* what) {
  if (x.dim() != 3 || x.size(2) != d)
    throw std::invalid_argument(
        fmt::format("MultiHeadAttention: {} must be [B, L, {}], got {}", what, d, shape_str(x.shape())));
}

}  // namespace

MultiHeadAttention::MultiHeadAttention(int64_t d, int64_t h, float dropout, Generator& gen)
    : out_proj(d, d, gen), d_model(d), heads(h), d_head(h > 0 ? d / h : 0), dropout_(dropout, gen) {
  if (d <= 0 || h <= 0 || d % h != 0)
    throw std::invalid_argument(
        fmt::format("MultiHeadAttention: d_model ({}) must be a positive multiple of heads ({})", d, h));
  // PyTorch's MultiheadAttention._reset_parameters: xavier over the whole fused [3d, d] matrix,
  // zero biases.
  in_proj_weight = register_parameter("in_proj_weight", Tensor::empty({3 * d, d}));
  xavier_uniform_(in_proj_weight, gen);
  in_proj_bias = register_parameter("in_proj_bias", Tensor::zeros({3 * d}));
  fill_(out_proj.bias, 0.0f);
  register_module("out_proj", out_proj);
  register_module("dropout", dropout_);
}

Tensor attend_heads(const Tensor& q_src, const Tensor& kv_src, AttentionSpec spec, const Dropout& drop,
                    Tensor* keep) {
  spec.scale = 1.0f / std::sqrt(static_cast<float>(spec.d_head));
  // dropout(P) is applied inside the ops, per batch row: the dropped P is never stored.
  spec.dropout_p = drop.active_p();
  spec.gen = &drop.generator();
  if (!keep) return attention(q_src, kv_src, spec);  // P exists per batch row only, recomputed in backward
  const Tensor probs = attention_probs(q_src, kv_src, spec);
  *keep = probs.detach();
  return attention_context(probs, kv_src, spec);
}

Tensor MultiHeadAttention::attend(const Tensor& q_src, const Tensor& kv_src, AttentionSpec spec) {
  const int64_t keys = spec.kv_len >= 0 ? spec.kv_len : kv_src.size(1);
  if (spec.pad && !spec.pad->empty() && (spec.pad->batch != kv_src.size(0) || spec.pad->len != keys))
    throw std::invalid_argument(
        fmt::format("MultiHeadAttention: key padding mask [{}, {}] does not match keys [{}, {}]",
                    spec.pad->batch, spec.pad->len, kv_src.size(0), keys));
  spec.heads = heads;
  spec.d_head = d_head;
  return out_proj.forward(
      attend_heads(q_src, kv_src, spec, dropout_, keep_attention ? &last_attention : nullptr));
}

// The fused projection [B, T, 3d] holds Q, K, V side by side; attention reads them in place.
Tensor MultiHeadAttention::self_attention(const Tensor& x, bool causal, const KeyPadding& pad) {
  check_input(x, d_model, "self-attention input");
  const Tensor qkv = linear(x, in_proj_weight, in_proj_bias);
  return attend(qkv, qkv,
                {.q_col = 0, .k_col = d_model, .v_col = 2 * d_model, .causal = causal, .pad = &pad});
}

Tensor MultiHeadAttention::cross_attention(const Tensor& x, const Tensor& memory,
                                           const KeyPadding& memory_pad) {
  KVCache kv;
  precompute_memory(memory, kv);
  return cross_attention_cached(x, kv, memory_pad);
}

// Rows d..3d of the fused weight are [Wk; Wv]: one GEMM projects the memory to [B, S, 2d].
void MultiHeadAttention::precompute_memory(const Tensor& memory, KVCache& cache) const {
  check_input(memory, d_model, "memory");
  const int64_t d = d_model;
  cache.kv = linear(memory, slice(in_proj_weight, 0, d, 3 * d), slice(in_proj_bias, 0, d, 3 * d));
  cache.k_col = 0;
  cache.v_col = d;
  cache.len = -1;
}

Tensor MultiHeadAttention::cross_attention_cached(const Tensor& x, const KVCache& cache,
                                                  const KeyPadding& memory_pad) {
  check_input(x, d_model, "cross-attention query");
  if (cache.empty())
    throw std::logic_error("MultiHeadAttention: memory cache is empty (call precompute_memory)");
  if (cache.kv.size(0) != x.size(0))
    throw std::invalid_argument(fmt::format(
        "MultiHeadAttention: cross-attention query {} and memory of batch {} differ in batch size",
        shape_str(x.shape()), cache.kv.size(0)));
  const Tensor q = linear(x, slice(in_proj_weight, 0, 0, d_model), slice(in_proj_bias, 0, 0, d_model));
  return attend(q, cache.kv,
                {.k_col = cache.k_col, .v_col = cache.v_col, .pad = &memory_pad, .kv_len = cache.len});
}

// The rows a decoding cache starts with: a short sentence or prompt fits without growing, and
// doubling from 16 reaches any length in a few copies (1000 positions: 6), while a batch of 64 x
// [q | k | v] rows of width 3 x 512 costs 6 MiB at this capacity.
constexpr int64_t kCacheStartRows = 16;

void append_to_cache(KVCache& cache, const Tensor& qkv, int64_t k_col, int64_t v_col) {
  if (!cache.empty() && cache.kv.size(0) != qkv.size(0))
    throw std::invalid_argument(
        fmt::format("KV cache: cache batch {} != input batch {}", cache.kv.size(0), qkv.size(0)));
  cache.k_col = k_col;
  cache.v_col = v_col;
  if (grad_enabled() && qkv.requires_grad()) {
    // Recording a tape: a differentiable concat, so gradients reach earlier positions.
    cache.kv =
        cache.empty()
            ? qkv
            : concat({cache.kv.size(1) == cache.length() ? cache.kv : slice(cache.kv, 1, 0, cache.length()),
                      qkv},
                     1);
    cache.len = -1;
    return;
  }
  // Decoding: rows are appended in place; the capacity doubles when full.
  const int64_t B = qkv.size(0), n = qkv.size(1), C = qkv.size(2), len = cache.length(), need = len + n;
  if (cache.empty() || cache.kv.size(1) < need) {
    const int64_t cap = std::max<int64_t>(need, cache.empty() ? kCacheStartRows : 2 * cache.kv.size(1));
    Tensor buf = Tensor::empty({B, cap, C});
    for (int64_t b = 0; b < B && len > 0; ++b)
      std::memcpy(buf.data() + b * cap * C, cache.kv.data() + b * cache.kv.size(1) * C,
                  sizeof(float) * static_cast<size_t>(len * C));
    cache.kv = buf;
  }
  const int64_t cap = cache.kv.size(1);
  for (int64_t b = 0; b < B; ++b)
    std::memcpy(cache.kv.data() + (b * cap + len) * C, qkv.data() + b * n * C,
                sizeof(float) * static_cast<size_t>(n * C));
  cache.len = need;
}

// The cache keeps whole [q | k | v] projection rows: appending them is one concat, and the
// attention reads the k and v columns in place.
Tensor MultiHeadAttention::self_attention_step(const Tensor& x, KVCache& cache) {
  check_input(x, d_model, "self-attention step input");
  const Tensor qkv = linear(x, in_proj_weight, in_proj_bias);
  append_to_cache(cache, qkv, d_model, 2 * d_model);
  // Earlier positions are all visible; several new positions see each other causally.
  return attend(qkv, cache.kv,
                {.k_col = cache.k_col, .v_col = cache.v_col, .causal = x.size(1) > 1, .kv_len = cache.len});
}

}  // namespace tg::nn
