// Differentiable functions. Each is defined in autograd/functions_*.cpp with a comment block first:
// the forward formula, what it saves for backward, and the gradient (vector-Jacobian product) of
// each input. The one-line index of all of them is autograd/OPS.md.
//
// Every function checks its arguments and throws std::invalid_argument / std::out_of_range with a
// message that names the op and the shapes involved, e.g.
// "matmul: inner dimensions differ: [2, 3] @ [4, 5]".
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "autograd/random.hpp"
#include "autograd/tensor.hpp"

namespace tg {

// ---- elementwise, with NumPy broadcasting --------------------------------------------------
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor neg(const Tensor& a);
// scalar ops: a + s, a * s, s - a (rsub), s / a (rdiv), a^p
Tensor add_scalar(const Tensor& a, float s);
Tensor mul_scalar(const Tensor& a, float s);
Tensor rsub_scalar(float s, const Tensor& a);
Tensor rdiv_scalar(float s, const Tensor& a);
Tensor pow_scalar(const Tensor& a, float p);

Tensor exp(const Tensor& a);
Tensor log(const Tensor& a);
Tensor sqrt(const Tensor& a);
Tensor tanh(const Tensor& a);
Tensor relu(const Tensor& a);
// GELU as torch.nn.functional.gelu(a, approximate=...): none, the exact erf form; tanh, GPT-2's
// 0.5 a (1 + tanh(sqrt(2 / pi) (a + 0.044715 a^3))) (transformers' "gelu_new").
enum class GeluApprox { none, tanh };
Tensor gelu(const Tensor& a, GeluApprox approx = GeluApprox::none);

// The broadcast shape of a and b; throws "<op>: shapes [..] and [..] cannot be broadcast".
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);
// Sums g down to `shape` (the inverse of broadcasting). Differentiable.
Tensor sum_to(const Tensor& g, const Shape& shape);
// Materialises a broadcast of a to `shape`. Differentiable (its gradient is sum_to).
Tensor broadcast_to(const Tensor& a, const Shape& shape);

// ---- reductions ------------------------------------------------------------------------------
Tensor sum(const Tensor& a);  // all elements -> shape []
Tensor sum(const Tensor& a, int64_t axis, bool keepdim = false);
Tensor mean(const Tensor& a);
Tensor mean(const Tensor& a, int64_t axis, bool keepdim = false);

// ---- shape -----------------------------------------------------------------------------------
Tensor reshape(const Tensor& a, const Shape& shape);  // a view; one dimension may be -1
Tensor transpose(const Tensor& a, int64_t d0, int64_t d1);
Tensor permute(const Tensor& a, const std::vector<int64_t>& dims);
Tensor slice(const Tensor& a, int64_t axis, int64_t start, int64_t end);  // [start, end)
Tensor concat(const std::vector<Tensor>& ts, int64_t axis);

// ---- linear algebra --------------------------------------------------------------------------
// op(a) @ op(b), op = transpose of the last two axes when trans_* is set. Both operands at least
// 2-D; leading (batch) dimensions broadcast, e.g. [B, H, T, d] @ [B, H, d, S] or [B, T, d] @ [d, n].
Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false);
// x @ w^T + b, the Linear layer in one op (w is [out, in], bias [out] or undefined).
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& bias);
// linear(gelu(h, approx), w, bias) as one op that does not keep gelu(h) for backward (recomputes it).
Tensor gelu_linear(const Tensor& h, const Tensor& w, const Tensor& bias,
                   GeluApprox approx = GeluApprox::none);
// linear(relu_dropout(h, p, training, gen), w, bias) as one op where the products run in bf16 in
// training: D(relu(h)) is written in bf16 only (the copy linear would round it into), no fp32 tensor
// of it; the same bits and the same draw from gen. Elsewhere the two ops.
Tensor relu_dropout_linear(const Tensor& h, float p, bool training, Generator& gen, const Tensor& w,
                           const Tensor& bias);

// ---- softmax family (last axis) --------------------------------------------------------------
// A boolean mask broadcastable to the input: nonzero = masked out (gets probability exactly 0).
struct BoolMask {
  Shape shape;
  std::vector<uint8_t> data;
};
Tensor softmax(const Tensor& x);
// Additive mask (e.g. 0 / -inf), broadcastable to x, not differentiated.
Tensor softmax(const Tensor& x, const Tensor& additive_mask);
Tensor softmax(const Tensor& x, const BoolMask& mask);
Tensor log_softmax(const Tensor& x);
Tensor log_softmax(const Tensor& x, const Tensor& additive_mask);
Tensor log_softmax(const Tensor& x, const BoolMask& mask);

// ---- normalisation, embedding, regularisation, loss -------------------------------------------
// Over the last axis; weight/bias of shape [C] (either may be undefined).
Tensor layernorm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps = 1e-5f);
// weight [V, d], ids of shape ids_shape (values in [0, V)) -> ids_shape + [d].
Tensor embedding(const Tensor& weight, std::span<const int32_t> ids, const Shape& ids_shape);
// Inverted dropout: zeroes each element with probability p and scales the rest by 1/(1-p).
// Identity when !training or p == 0.
Tensor dropout(const Tensor& x, float p, bool training, Generator& gen);
// dropout(relu(x), p, training, gen) in one op: one pass, and only a byte mask is saved (not x).
Tensor relu_dropout(const Tensor& x, float p, bool training, Generator& gen);
// x + dropout(y, p, training, gen) in one op (a residual connection): one pass, the same mask as
// dropout draws, and nothing saved but its seed. x and y of the same shape.
Tensor dropout_add(const Tensor& x, const Tensor& y, float p, bool training, Generator& gen);
// Mean cross-entropy of logits [N, V] against targets [N], PyTorch CrossEntropyLoss semantics
// (ignore_index rows excluded from the mean, label smoothing). Returns a scalar.
Tensor cross_entropy(const Tensor& logits, std::span<const int32_t> targets, int32_t ignore_index = -100,
                     float label_smoothing = 0.0f);

// ---- the output layer and its loss (functions_output.cpp) ---------------------------------------
struct CrossEntropyOptions {
  int32_t ignore_index = -100;
  float label_smoothing = 0.0f;
  int64_t chunk_rows = 0;  // rows of logits that exist at once; 0: about 8M logits' worth, >= 256 rows
};
// forward: L = cross_entropy(x w^T + bias, targets) as above, x [N, d], w [V, d], bias [V] or none,
//          computed over chunks of rows: only one chunk's [rows, V] logits (and their gradient) ever
//          exist, never the [N, V] of linear() then cross_entropy() (a 50,257-word vocabulary at
//          4,096 rows: 823 MB each). The same result to rounding (the sums over rows of dw and dbias
//          are made chunk by chunk).
// saves:   dx, dw, dbias for dL = 1, made in forward while each chunk's logits exist (no logits are
//          kept or recomputed), only when a tape records and an input requires a gradient
// grads:   per chunk c: G_c = (softmax(logits_c) - q_c) / n (0 on ignored rows);  dx_c = G_c w;
//          dw = sum_c G_c^T x_c;  dbias = sum_c colsum(G_c); each times dL, handed to an input
//          that has no gradient yet as its gradient when backward does not retain the graph
//          (Grads::take: no second [V, d] buffer, no copy), else copied or added
// In the precision of the products (autograd/precision.hpp), as linear().
Tensor linear_cross_entropy(const Tensor& x, const Tensor& w, const Tensor& bias,
                            std::span<const int32_t> targets, const CrossEntropyOptions& o = {});

// ---- attention (functions_attention.cpp) -------------------------------------------------------
// The two differentiable ops at the core of multi-head attention, reading the heads straight out
// of the projection outputs (no split/merge-heads copies).
//
// Heads are column blocks: in a [B, L, C] projection output, head h of the block that starts at
// column `col` is the [L, d_head] matrix src[b, :, col + h*d_head : col + (h+1)*d_head] (row
// stride C). So the fused self-attention projection qkv = x Wqkv^T + b ([B, T, 3d]) is read with
// q_col = 0, k_col = d, v_col = 2d, and no slice or permute is ever materialised. Each op runs
// one strided batched GEMM per batch row (batch = heads).

// Key padding mask: [batch, len] bytes, nonzero = padding (ignored as a key).
struct KeyPadding {
  std::vector<uint8_t> mask;
  int64_t batch = 0, len = 0;
  bool empty() const { return mask.empty(); }
};

// How an attention op reads its heads and what it applies: every parameter but the tensors, named
// at the call site, e.g. for the fused projection qkv [B, T, 3d] of causal self-attention
//   attention(qkv, qkv, {.heads = H, .d_head = d / H, .q_col = 0, .k_col = d, .v_col = 2 * d,
//                        .scale = 1 / sqrt(d / H), .causal = true, .dropout_p = 0.1f, .gen = &gen})
// Each op reads the fields its formula has and ignores the others: attention_probs no v_col or
// dropout, attention_context (whose heads come from P) only v_col, d_head, kv_len and the dropout.
struct AttentionSpec {
  int64_t heads = 1, d_head = 0;
  int64_t q_col = 0, k_col = 0, v_col = 0;  // the column blocks of Q (in q_src), K and V (in kv_src)
  float scale = 1.0f;                       // S = scale * Q K^T
  bool causal = false;                      // query t sees keys s <= t + (S_len - T)
  const KeyPadding* pad = nullptr;          // [B, S_len] key padding, or none
  // >= 0: only the first kv_len rows of each batch entry of the key/value source are keys and
  // values (a cache with spare capacity); -1: all of them.
  int64_t kv_len = -1;
  float dropout_p = 0.0f;    // inverted dropout on P (0: none)
  Generator* gen = nullptr;  // its seed's source; needed when dropout_p > 0
};

// forward: S = scale * Q K^T  per (b, h)                       [B, H, T, S_len]
//          P = softmax(S) over keys, with masked keys at exactly 0:
//              causal: query t sees keys s <= t + (S_len - T);  pad[b, s] != 0 hides key s
// saves:   P, q_src, k_src
// grads:   dS = P * (dP - sum_s(dP * P))           (softmax VJP, row-wise)
//          dQ = scale * dS K;   dK = scale * dS^T Q   (written into their column blocks)
// Reads heads, d_head, q_col, k_col, scale, causal, pad, kv_len of s.
Tensor attention_probs(const Tensor& q_src, const Tensor& k_src, const AttentionSpec& s);

// forward: O[b, t, h*d_head + j] = sum_s D(P)[b, h, t, s] V_h[b, s, j]   (heads merged: [B, T, H*d_head])
//          D = inverted dropout with probability p (D(P) = P when p == 0), drawn as dropout() draws
//          it from one seed of gen; D(P) only ever exists per batch row, in a per-thread scratch.
// saves:   P (the tensor attention_probs saved anyway), v_src, the seed: no [B, H, T, S] mask or D(P)
// grads:   dD = dO_h V_h^T;  dP = D(dD) (the same mask and scale);  dV_h = D(P_h)^T dO_h,
//          with D(P_h) regenerated from P and the seed
// Reads v_col, d_head, kv_len (the first kv_len rows of each batch entry of v_src are the values,
// = S), dropout_p and gen of s; the heads are P's.
Tensor attention_context(const Tensor& probs, const Tensor& v_src, const AttentionSpec& s);

// forward: O = attention_context(attention_probs(q_src, kv_src), kv_src) with kv_src holding the
//          keys (columns k_col) and the values (v_col); the same numbers, bit for bit (below)
// saves:   q_src, kv_src, the dropout seed; not P: each batch row's P exists only in a per-thread
//          scratch, in forward and again in backward (recomputed: one more scale Q K^T and softmax
//          per row), so no [B, H, T, S] tensor is kept for backward or allocated at all
// grads:   per batch row, with P recomputed: dV_h = D(P_h)^T dO_h;  dP = D(dO_h V_h^T);
//          dS = P * (dP - rowsum(dP * P));  dQ = scale dS K;  dK = scale dS^T Q
// With at least 8 queries this runs the fused kernel (ops::attention_forward / attention_backward:
// per batch row and head, a block of query rows at a time, P only in cache), whose products are
// fp32 also under bf16 (faster there than per-row bf16 products: functions_attention.cpp has the
// figures); for decoding steps (fewer queries), or with TAPEGRAD_ATTENTION=rows, the per-row form
// above, its products in the op's precision. The fused kernel's output and dQ have the bits of the
// two ops in fp32 wherever a product's K is at most the GEMM's KC (256): each product is one run of
// FMAs per register tile in the GEMM's order; dK and dV are summed per block of query rows, equal up
// to that grouping; the per-row form's are the two ops' in its precision
// (nn.attention.one_op_matches_two_ops).
// MultiHeadAttention and GPT use this one (nn/attention.hpp: attend_heads); the two-op form when
// the probabilities are wanted (attention maps, the walkthrough).
Tensor attention(const Tensor& q_src, const Tensor& kv_src, const AttentionSpec& s);

// ---- operators -------------------------------------------------------------------------------
// Sugar over the functions above; no gradient rules of their own. (One per line: a table.)
// clang-format off
inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator-(const Tensor& a) { return neg(a); }
inline Tensor operator+(const Tensor& a, float s) { return add_scalar(a, s); }
inline Tensor operator+(float s, const Tensor& a) { return add_scalar(a, s); }
inline Tensor operator-(const Tensor& a, float s) { return add_scalar(a, -s); }
inline Tensor operator-(float s, const Tensor& a) { return rsub_scalar(s, a); }
inline Tensor operator*(const Tensor& a, float s) { return mul_scalar(a, s); }
inline Tensor operator*(float s, const Tensor& a) { return mul_scalar(a, s); }
inline Tensor operator/(const Tensor& a, float s) { return mul_scalar(a, 1.0f / s); }
inline Tensor operator/(float s, const Tensor& a) { return rdiv_scalar(s, a); }
// clang-format on

}  // namespace tg
