#include "nn/attention_ops.hpp"

#include <fmt/format.h>

#include <stdexcept>

#include "autograd/tape.hpp"
#include "ops/kernels.hpp"

namespace tg::nn {

namespace {

// One head block of a [B, L, C] source: rows of length d_head, row stride C, heads d_head apart.
struct HeadView {
  int64_t B, L, C, col;
};

HeadView head_view(const Tensor& src, int64_t col, int64_t width, const char* op, const char* what) {
  if (src.dim() != 3 || col < 0 || col + width > src.size(2))
    throw std::invalid_argument(fmt::format("{}: {} {} has no column block [{}, {})", op, what,
                                            shape_str(src.shape()), col, col + width));
  return {src.size(0), src.size(1), src.size(2), col};
}

// C_h = alpha * op(A_h) op(B_h) + beta * C_h for the H heads of one batch row, as one strided
// batched GEMM: consecutive heads are `stride_*` elements apart in each operand.
void gemm_heads(float* C, const float* A, const float* B, int64_t M, int64_t N, int64_t K, bool ta, bool tb,
                float alpha, float beta, int64_t lda, int64_t ldb, int64_t ldc, int64_t stride_a,
                int64_t stride_b, int64_t stride_c, int64_t heads) {
  ops::Gemm g;
  g.M = M, g.N = N, g.K = K;
  g.trans_a = ta, g.trans_b = tb;
  g.alpha = alpha, g.beta = beta;
  g.lda = lda, g.ldb = ldb, g.ldc = ldc;
  g.batch = heads;
  g.stride_a = stride_a, g.stride_b = stride_b, g.stride_c = stride_c;
  ops::gemm(C, A, B, g);
}

}  // namespace

Tensor attention_probs(const Tensor& q_src, int64_t q_col, const Tensor& k_src, int64_t k_col, int64_t heads,
                       int64_t dh, float scale, bool causal, const KeyPadding& pad) {
  if (heads <= 0 || dh <= 0)
    throw std::invalid_argument(
        fmt::format("attention_probs: heads ({}) and d_head ({}) must be > 0", heads, dh));
  const HeadView q = head_view(q_src, q_col, heads * dh, "attention_probs", "query source");
  const HeadView k = head_view(k_src, k_col, heads * dh, "attention_probs", "key source");
  if (q.B != k.B)
    throw std::invalid_argument(fmt::format("attention_probs: query source {} and key source {} do not match",
                                            shape_str(q_src.shape()), shape_str(k_src.shape())));
  const int64_t B = q.B, T = q.L, S = k.L, H = heads;
  if (!pad.empty() && (pad.batch != B || pad.len != S))
    throw std::invalid_argument(fmt::format(
        "attention_probs: key padding mask [{}, {}] for keys [B={}, S={}]", pad.batch, pad.len, B, S));

  Tensor scores = Tensor::empty({B, H, T, S});
  for (int64_t b = 0; b < B; ++b)
    gemm_heads(scores.data() + b * H * T * S, q_src.data() + b * T * q.C + q.col,
               k_src.data() + b * S * k.C + k.col, T, S, dh, false, true, scale, 0.0f, q.C, k.C, S, dh, dh,
               T * S, H);
  Tensor probs = Tensor::empty({B, H, T, S});
  const ops::SoftmaxMask m{.causal = causal,
                           .q_len = T,
                           .key_mask = pad.empty() ? nullptr : pad.mask.data(),
                           .groups_per_key_row = H};
  ops::softmax_forward(probs.data(), scores.data(), B * H * T, S, m);

  if (Node* n = Tape::current().record("attention_probs", probs, {q_src, k_src})) {
    n->backward = [P = probs.detach(), qs = q_src.detach(), ks = k_src.detach(), q, k, B, H, T, S, dh, scale](
                      const Tensor& dP, Grads& g) {
      Tensor dS = Tensor::zeros(P.shape());
      ops::softmax_backward(dS.data(), dP.data(), P.data(), B * H * T, S);
      for (int64_t b = 0; b < B; ++b) {
        const float* dSb = dS.data() + b * H * T * S;
        if (g.needs(0))  // dQ_h (T x dh) += scale * dS_h (T x S) K_h (S x dh)
          gemm_heads(g.buffer(0) + b * T * q.C + q.col, dSb, ks.data() + b * S * k.C + k.col, T, dh, S, false,
                     false, scale, 1.0f, S, k.C, q.C, T * S, dh, dh, H);
        if (g.needs(1))  // dK_h (S x dh) += scale * dS_h^T (S x T) Q_h (T x dh)
          gemm_heads(g.buffer(1) + b * S * k.C + k.col, dSb, qs.data() + b * T * q.C + q.col, S, dh, T, true,
                     false, scale, 1.0f, S, q.C, k.C, T * S, dh, dh, H);
      }
    };
  }
  return probs;
}

Tensor attention_context(const Tensor& probs, const Tensor& v_src, int64_t v_col, int64_t dh) {
  if (probs.dim() != 4)
    throw std::invalid_argument(fmt::format("attention_context: probabilities must be [B, H, T, S], got {}",
                                            shape_str(probs.shape())));
  const int64_t B = probs.size(0), H = probs.size(1), T = probs.size(2), S = probs.size(3);
  const HeadView v = head_view(v_src, v_col, H * dh, "attention_context", "value source");
  if (dh <= 0 || v.B != B || v.L != S)
    throw std::invalid_argument(
        fmt::format("attention_context: probabilities {} do not match value source {}",
                    shape_str(probs.shape()), shape_str(v_src.shape())));
  const int64_t d = H * dh;
  Tensor out = Tensor::empty({B, T, d});
  for (int64_t b = 0; b < B; ++b)  // O_h (T x dh, row stride d) = P_h (T x S) V_h (S x dh)
    gemm_heads(out.data() + b * T * d, probs.data() + b * H * T * S, v_src.data() + b * S * v.C + v.col, T,
               dh, S, false, false, 1.0f, 0.0f, S, v.C, d, T * S, dh, dh, H);

  if (Node* n = Tape::current().record("attention_context", out, {probs, v_src})) {
    n->backward = [P = probs.detach(), vs = v_src.detach(), v, B, H, T, S, dh, d](const Tensor& dO,
                                                                                  Grads& g) {
      for (int64_t b = 0; b < B; ++b) {
        const float* dOb = dO.data() + b * T * d;
        if (g.needs(0))  // dP_h (T x S) += dO_h (T x dh) V_h^T (dh x S)
          gemm_heads(g.buffer(0) + b * H * T * S, dOb, vs.data() + b * S * v.C + v.col, T, S, dh, false, true,
                     1.0f, 1.0f, d, v.C, S, dh, dh, T * S, H);
        if (g.needs(1))  // dV_h (S x dh) += P_h^T (S x T) dO_h (T x dh)
          gemm_heads(g.buffer(1) + b * S * v.C + v.col, P.data() + b * H * T * S, dOb, S, dh, T, true, false,
                     1.0f, 1.0f, S, d, v.C, T * S, dh, dh, H);
      }
    };
  }
  return out;
}

}  // namespace tg::nn
