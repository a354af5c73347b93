// The attention block the walkthrough computes step by step, shared by its forward and backward
// parts: the weights as separate leaves, every intermediate under its name, and matrix helpers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "apps/attention_walkthrough.hpp"
#include "autograd/tensor.hpp"
#include "nn/attention.hpp"
#include "nn/layers.hpp"

namespace tg::walkthrough {

// One attention block's parameters, copied out of the model as leaves of their own (so the tape
// gives dW_q, dW_k, dW_v separately; the model keeps them stacked in in_proj_weight [3d, d]).
// ln_w, ln_b: the layer's norm1 (a constant here: the walkthrough differentiates the attention).
struct Weights {
  Tensor W_q, W_k, W_v, W_o;  // [d, d], PyTorch layout [out, in]: y = x W^T + b
  Tensor b_q, b_k, b_v, b_o;  // [d]
  Tensor ln_w, ln_b;          // [d]
  int64_t heads = 1;
  bool norm_first = false;
  int64_t d_model() const { return W_q.size(0); }
  int64_t d_k() const { return W_q.size(0) / heads; }
};
// Copies of `mha`'s (and the norm's) weights; requires_grad on the four matrices and the biases.
Weights copy_weights(const nn::MultiHeadAttention& mha, const nn::LayerNorm& norm, bool norm_first);

// Every intermediate of multi-head attention, in the order the forward pass makes them.
struct Attention {
  Tensor Q, K, V;   // [T, d], [S, d], [S, d]
  Tensor S_raw, S;  // Q_h K_h^T and S_raw / sqrt(d_k), [H, T, S]
  Tensor P, O_h;    // softmax(S + M) [H, T, S]; P_h V_h [H, T, d_k]
  Tensor O, Y;      // the heads concatenated [T, d]; O W_o^T + b_o
};
// The self-attention block: A = X (post-norm) or LN(X) (pre-norm), attention over A, then
// Z = LN(X + Y) (post-norm) or X + Y (pre-norm), and the loss L = sum(G * Z).
struct Block {
  Tensor A;
  Attention att;
  Tensor Z, L;
};

// A stand-in for one named intermediate ("Q", "K", "V", "S", "P", "O", "Y"): the forward pass uses
// `value` instead of computing it, so L can be evaluated as a function of that intermediate.
struct Replace {
  std::string name;
  Tensor value;
};

// Multi-head attention of queries from q_in [T, d] over keys and values from kv_in [S, d], with an
// additive mask M [T, S] (0 or -inf).
Attention multi_head(const Tensor& q_in, const Tensor& kv_in, const Weights& w, const Tensor& M,
                     const Replace* replace = nullptr);
Block self_attention_block(const Tensor& X, const Weights& w, const Tensor& M, const Tensor& G,
                           const Replace* replace = nullptr);

// [T, T] additive mask: -inf where key s > query t when causal, else all 0.
Tensor additive_mask(int64_t T, bool causal);

// ---- labelled matrices
std::vector<std::string> index_labels(int64_t n);            // "0" .. "n-1"
std::vector<std::string> head_labels(int64_t d, int64_t H);  // "h0.0" .. "h{H-1}.{d_k-1}"
// A 2-D copy of t (any shape with numel = rows.size() * cols.size()).
Matrix matrix(const std::string& label, const Tensor& t, std::vector<std::string> rows,
              std::vector<std::string> cols);
// One [rows, cols] matrix per head of t [H, rows, cols], labelled "<name> head <h>".
std::vector<Matrix> per_head(const std::string& name, const Tensor& t, const std::vector<std::string>& rows,
                             const std::vector<std::string>& cols);

// per_head for attention maps: rows are queries, columns keys, and the cells that the additive
// mask M [rows, cols] sets to -inf (when given) are marked masked.
std::vector<Matrix> attention_maps(const std::string& name, const Tensor& t,
                                   const std::vector<std::string>& rows, const std::vector<std::string>& cols,
                                   const Tensor* M = nullptr);

// max |a - b| over entries where both are finite (and a count of entries where only one is).
double max_abs_diff(const Tensor& a, const Tensor& b);
double max_abs(const Tensor& t);  // over finite entries
// `what` agrees when max |diff| <= 1e-5 * max(1, max |reference|): float rounding of two summation
// orders of the same products.
Agreement agreement(const std::string& what, const Tensor& ours, const Tensor& reference);

// The backward section (attention_walkthrough_backward.cpp): the gradients of L by their formulas,
// each compared with the tape's and with central differences; the fused path's gradients.
Section backward_section(const Tensor& X, const Weights& w, const Tensor& M, const Tensor& G,
                         nn::MultiHeadAttention& mha, const std::vector<std::string>& tokens,
                         const Options& opt, std::vector<Agreement>& agreements, std::string& tape_dot,
                         std::string& fused_dot);

}  // namespace tg::walkthrough
