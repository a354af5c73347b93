// The two differentiable ops at the core of multi-head attention, reading the heads straight out
// of the projection outputs (no split/merge-heads copies).
//
// Heads are column blocks: in a [B, L, C] projection output, head h of the block that starts at
// column `col` is the [L, d_head] matrix src[b, :, col + h*d_head : col + (h+1)*d_head] (row
// stride C). So the fused self-attention projection qkv = x Wqkv^T + b ([B, T, 3d]) is read with
// q_col = 0, k_col = d, v_col = 2d, and no slice or permute is ever materialised. Each op runs
// one strided batched GEMM per batch row (batch = heads).
#pragma once

#include <cstdint>

#include "autograd/tensor.hpp"
#include "nn/attention.hpp"

namespace tg::nn {

// forward: S = scale * Q K^T  per (b, h)                       [B, H, T, S_len]
//          P = softmax(S) over keys, with masked keys at exactly 0:
//              causal: query t sees keys s <= t + (S_len - T);  pad[b, s] != 0 hides key s
// saves:   P, q_src, k_src
// grads:   dS = P * (dP - sum_s(dP * P))           (softmax VJP, row-wise)
//          dQ = scale * dS K;   dK = scale * dS^T Q   (written into their column blocks)
// kv_len >= 0: only the first kv_len rows of each batch entry of k_src are keys (a cache with
// spare capacity); -1: all of them.
Tensor attention_probs(const Tensor& q_src, int64_t q_col, const Tensor& k_src, int64_t k_col, int64_t heads,
                       int64_t d_head, float scale, bool causal, const KeyPadding& pad, int64_t kv_len = -1);

// forward: O[b, t, h*d_head + j] = sum_s D(P)[b, h, t, s] V_h[b, s, j]   (heads merged: [B, T, H*d_head])
//          D = inverted dropout with probability p (D(P) = P when p == 0): element i of P is kept,
//          times 1/(1-p), when ops::dropout_bits(seed, i) >= p * 2^24, seed = one draw from gen.
//          That is exactly dropout(P, p, true, gen) followed by the product, but D(P) only ever
//          exists per batch row, in a per-thread scratch.
// saves:   P (the tensor attention_probs saved anyway), v_src, the seed: no [B, H, T, S] mask or D(P)
// grads:   dD = dO_h V_h^T;  dP = D(dD) (the same mask and scale);  dV_h = D(P_h)^T dO_h,
//          with D(P_h) regenerated from P and the seed
// kv_len >= 0: the first kv_len rows of each batch entry of v_src are the values (= S).
Tensor attention_context(const Tensor& probs, const Tensor& v_src, int64_t v_col, int64_t d_head,
                         int64_t kv_len = -1, float dropout_p = 0.0f, Generator* gen = nullptr);

}  // namespace tg::nn
