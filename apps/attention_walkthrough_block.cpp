// Multi-head attention from the public ops, one formula per line: the heart of the walkthrough.
// nn::MultiHeadAttention computes the same with one fused projection and the two attention tape ops
// (attention_probs, attention_context); the walkthrough checks that both give the same numbers.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "apps/attention_walkthrough_block.hpp"
#include "autograd/functions.hpp"

namespace tg::walkthrough {

Weights copy_weights(const nn::MultiHeadAttention& mha, const nn::LayerNorm& norm, bool norm_first) {
  const int64_t d = mha.d_model;
  // in_proj_weight [3d, d] stacks W_q; W_k; W_v (PyTorch's layout), in_proj_bias [3d] likewise.
  auto rows = [&](const Tensor& t, int64_t k, const char* name) {
    return slice(t, 0, k * d, (k + 1) * d).clone().requires_grad_().set_name(name);
  };
  Weights w;
  w.W_q = rows(mha.in_proj_weight, 0, "W_q");
  w.W_k = rows(mha.in_proj_weight, 1, "W_k");
  w.W_v = rows(mha.in_proj_weight, 2, "W_v");
  w.b_q = rows(mha.in_proj_bias, 0, "b_q");
  w.b_k = rows(mha.in_proj_bias, 1, "b_k");
  w.b_v = rows(mha.in_proj_bias, 2, "b_v");
  w.W_o = mha.out_proj.weight.clone().requires_grad_().set_name("W_o");
  w.b_o = mha.out_proj.bias.clone().requires_grad_().set_name("b_o");
  w.ln_w = norm.weight.clone().set_name("gamma");
  w.ln_b = norm.bias.clone().set_name("beta");
  w.heads = mha.heads;
  w.norm_first = norm_first;
  return w;
}

Attention multi_head(const Tensor& q_in, const Tensor& kv_in, const Weights& w, const Tensor& M,
                     const Replace* replace) {
  // The FD checks evaluate L as a function of one intermediate: it comes from `replace` instead.
  auto named = [&](const char* name, const Tensor& t) {
    return replace && replace->name == name ? replace->value : t;
  };
  const int64_t T = q_in.size(0), d = w.d_model(), H = w.heads, dk = w.d_k();
  // [L, d] -> [H, L, d_k]: head h is the column block h d_k .. (h+1) d_k - 1.
  auto split_heads = [&](const Tensor& t) { return permute(reshape(t, {t.size(0), H, dk}), {1, 0, 2}); };
  Attention a;
  // Each token's query, key and value: Q = X W_q^T + b_q  [T, d], K and V [S, d].
  a.Q = named("Q", linear(q_in, w.W_q, w.b_q));
  a.K = named("K", linear(kv_in, w.W_k, w.b_k));
  a.V = named("V", linear(kv_in, w.W_v, w.b_v));
  // How well query t matches key s, per head: S_raw = Q_h K_h^T  [H, T, S].
  a.S_raw = matmul(split_heads(a.Q), split_heads(a.K), false, true);
  // Scaled: S = S_raw / sqrt(d_k), so the scores' variance does not grow with d_k.
  a.S = named("S", a.S_raw * (1.0f / std::sqrt(static_cast<float>(dk))));
  // Attention weights over the keys, masked keys at exactly 0: P = softmax(S + M) row by row.
  a.P = named("P", softmax(a.S, M));
  // Each query's weighted average of the values: O_h = P_h V_h  [H, T, d_k].
  a.O_h = matmul(a.P, split_heads(a.V));
  // The heads side by side again: O = [O_0 | O_1 | ...]  [T, d].
  a.O = named("O", reshape(permute(a.O_h, {1, 0, 2}), {T, d}));
  // The output projection mixes the heads: Y = O W_o^T + b_o  [T, d].
  a.Y = named("Y", linear(a.O, w.W_o, w.b_o));
  return a;
}

Block self_attention_block(const Tensor& X, const Weights& w, const Tensor& M, const Tensor& G,
                           const Replace* replace) {
  Block b;
  // Pre-norm layers normalise the input first; post-norm layers attend over X itself.
  b.A = w.norm_first ? layernorm(X, w.ln_w, w.ln_b) : X;
  b.att = multi_head(b.A, b.A, w, M, replace);
  // The residual connection and layer norm: Z = LN(X + Y) (post-norm) or X + Y (pre-norm).
  b.Z = w.norm_first ? X + b.att.Y : layernorm(X + b.att.Y, w.ln_w, w.ln_b);
  // A small loss: as if the layers above sent back dL/dZ = G.
  b.L = sum(b.Z * G);
  return b;
}

Tensor additive_mask(int64_t T, bool causal) {
  Tensor M = Tensor::zeros({T, T});
  if (causal)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t s = t + 1; s < T; ++s) M.data()[t * T + s] = -std::numeric_limits<float>::infinity();
  return M;
}

std::vector<std::string> index_labels(int64_t n) {
  std::vector<std::string> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(std::to_string(i));
  return v;
}

std::vector<std::string> head_labels(int64_t d, int64_t H) {
  std::vector<std::string> v;
  for (int64_t j = 0; j < d; ++j) v.push_back(fmt::format("h{}.{}", j / (d / H), j % (d / H)));
  return v;
}

Matrix matrix(const std::string& label, const Tensor& t, std::vector<std::string> rows,
              std::vector<std::string> cols) {
  const auto R = static_cast<int64_t>(rows.size()), C = static_cast<int64_t>(cols.size());
  if (t.numel() != R * C)
    throw std::logic_error(
        fmt::format("walkthrough: {} has shape {}, not {} x {}", label, shape_str(t.shape()), R, C));
  Tensor v = Tensor::from_data({R, C}, std::span<const float>(t.data(), static_cast<size_t>(t.numel())));
  Matrix m;
  m.label = label;
  m.value = v;
  m.rows = std::move(rows);
  m.cols = std::move(cols);
  return m;
}

std::vector<Matrix> per_head(const std::string& name, const Tensor& t, const std::vector<std::string>& rows,
                             const std::vector<std::string>& cols) {
  std::vector<Matrix> out;
  const int64_t H = t.size(0);
  for (int64_t h = 0; h < H; ++h)
    out.push_back(matrix(fmt::format("{} head {}", name, h), slice(t, 0, h, h + 1), rows, cols));
  return out;
}

std::vector<Matrix> attention_maps(const std::string& name, const Tensor& t,
                                   const std::vector<std::string>& rows, const std::vector<std::string>& cols,
                                   const Tensor* M) {
  std::vector<Matrix> maps = per_head(name, t, rows, cols);
  for (Matrix& m : maps) {
    m.row_title = "query";
    m.col_title = "key";
    if (M)
      for (int64_t i = 0; i < M->numel(); ++i) m.masked.push_back(std::isinf(M->data()[i]) ? 1 : 0);
  }
  return maps;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  if (a.numel() != b.numel())
    throw std::logic_error(
        fmt::format("walkthrough: comparing {} with {}", shape_str(a.shape()), shape_str(b.shape())));
  double m = 0.0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const float x = a.data()[i], y = b.data()[i];
    if (std::isfinite(x) && std::isfinite(y))
      m = std::max(m, std::abs(static_cast<double>(x) - y));
    else if (x != y)  // -inf against a number: as far apart as can be
      m = std::numeric_limits<double>::infinity();
  }
  return m;
}

double max_abs(const Tensor& t) {
  double m = 0.0;
  for (int64_t i = 0; i < t.numel(); ++i)
    if (std::isfinite(t.data()[i])) m = std::max(m, std::abs(static_cast<double>(t.data()[i])));
  return m;
}

Agreement agreement(const std::string& what, const Tensor& ours, const Tensor& reference) {
  Agreement a{what, max_abs_diff(ours, reference), 1e-5 * std::max(1.0, max_abs(reference)), true};
  a.ok = a.max_diff <= a.tolerance;
  return a;
}

}  // namespace tg::walkthrough
