#include "nn/attention_ops.hpp"

#include <fmt/format.h>

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

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

// f(b) for every batch row b: in one OpenMP region when there are rows to share and enough work to
// pay for it (each GEMM of a row then runs on its thread), otherwise a plain loop on the calling
// thread. Not an `if` clause: an inactive region around the GEMMs would make their own threading a
// nested team (new threads per call).
template <class F>
void for_each_batch_row(int64_t B, int64_t macs_per_row, F&& f) {
  if (B > 1 && ops::num_threads() > 1 && B * macs_per_row >= 65536 && !omp_in_parallel()) {
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < B; ++b) f(b);
  } else {
    for (int64_t b = 0; b < B; ++b) f(b);
  }
}

// Per-thread scratch for one batch row's scores / score gradients, kept for the thread's life.
float* scratch(int64_t n) {
  thread_local std::vector<float> buf;
  if (static_cast<int64_t>(buf.size()) < n) buf.resize(static_cast<size_t>(n));
  return buf.data();
}

}  // namespace

Tensor attention_probs(const Tensor& q_src, int64_t q_col, const Tensor& k_src, int64_t k_col, int64_t heads,
                       int64_t dh, float scale, bool causal, const KeyPadding& pad, int64_t kv_len) {
  if (heads <= 0 || dh <= 0)
    throw std::invalid_argument(
        fmt::format("attention_probs: heads ({}) and d_head ({}) must be > 0", heads, dh));
  const HeadView q = head_view(q_src, q_col, heads * dh, "attention_probs", "query source");
  const HeadView k = head_view(k_src, k_col, heads * dh, "attention_probs", "key source");
  if (q.B != k.B)
    throw std::invalid_argument(fmt::format("attention_probs: query source {} and key source {} do not match",
                                            shape_str(q_src.shape()), shape_str(k_src.shape())));
  if (kv_len > k.L)
    throw std::invalid_argument(
        fmt::format("attention_probs: kv_len {} > rows of key source {}", kv_len, shape_str(k_src.shape())));
  // S keys per batch entry; batch entries of the key source are kbs = k.L * k.C elements apart.
  const int64_t B = q.B, T = q.L, S = kv_len < 0 ? k.L : kv_len, H = heads, kbs = k.L * k.C;
  if (!pad.empty() && (pad.batch != B || pad.len != S))
    throw std::invalid_argument(fmt::format(
        "attention_probs: key padding mask [{}, {}] for keys [B={}, S={}]", pad.batch, pad.len, B, S));

  // Per batch row b (parallel over b): the H score matrices go straight from the GEMM into a
  // per-thread scratch that stays in cache, and the masked softmax writes P from there; no
  // [B, H, T, S] scores tensor.
  Tensor probs = Tensor::empty({B, H, T, S});
  const uint8_t* key_mask = pad.empty() ? nullptr : pad.mask.data();
  const int64_t per_b = H * T * S;
  float* const pp = probs.data();
  const float *const qp = q_src.data(), *const kp = k_src.data();
  for_each_batch_row(B, per_b * dh, [&](int64_t b) {
    float* scores = scratch(per_b);
    gemm_heads(scores, qp + b * T * q.C + q.col, kp + b * kbs + k.col, T, S, dh, false, true, scale, 0.0f,
               q.C, k.C, S, dh, dh, T * S, H);
    const ops::SoftmaxMask m{.causal = causal,
                             .q_len = T,
                             .key_mask = key_mask ? key_mask + b * S : nullptr,
                             .groups_per_key_row = H};
    ops::softmax_forward(pp + b * per_b, scores, H * T, S, m);
  });

  if (Node* n = Tape::current().record("attention_probs", probs, {q_src, k_src})) {
    n->backward = [P = probs.detach(), qs = q_src.detach(), ks = k_src.detach(), q, k, B, H, T, S, dh, scale,
                   kbs](const Tensor& dP, Grads& g) {
      // Per batch row b (parallel over b; each b writes only its own rows of dQ and dK, which may
      // be the same buffer): dS of the H heads in a per-thread scratch, then the two GEMMs.
      float* dq = g.needs(0) ? g.buffer(0) : nullptr;  // allocated before the parallel loop
      float* dk = g.needs(1) ? g.buffer(1) : nullptr;
      const int64_t per_b = H * T * S;
      const float *const pp = P.data(), *const dpp = dP.data(), *const qp = qs.data(), *const kp = ks.data();
      for_each_batch_row(B, per_b * dh, [&](int64_t b) {
        float* dSb = scratch(per_b);
        ops::softmax_backward(dSb, dpp + b * per_b, pp + b * per_b, H * T, S, /*overwrite=*/true);
        if (dq)  // dQ_h (T x dh) += scale * dS_h (T x S) K_h (S x dh)
          gemm_heads(dq + b * T * q.C + q.col, dSb, kp + b * kbs + k.col, T, dh, S, false, false, scale, 1.0f,
                     S, k.C, q.C, T * S, dh, dh, H);
        if (dk)  // dK_h (S x dh) += scale * dS_h^T (S x T) Q_h (T x dh)
          gemm_heads(dk + b * kbs + k.col, dSb, qp + b * T * q.C + q.col, S, dh, T, true, false, scale, 1.0f,
                     S, q.C, k.C, T * S, dh, dh, H);
      });
    };
  }
  return probs;
}

Tensor attention_context(const Tensor& probs, const Tensor& v_src, int64_t v_col, int64_t dh, int64_t kv_len,
                         float dropout_p, Generator* gen) {
  if (probs.dim() != 4)
    throw std::invalid_argument(fmt::format("attention_context: probabilities must be [B, H, T, S], got {}",
                                            shape_str(probs.shape())));
  const int64_t B = probs.size(0), H = probs.size(1), T = probs.size(2), S = probs.size(3);
  const HeadView v = head_view(v_src, v_col, H * dh, "attention_context", "value source");
  if (dh <= 0 || v.B != B || (kv_len < 0 ? v.L != S : (kv_len != S || v.L < S)))
    throw std::invalid_argument(
        fmt::format("attention_context: probabilities {} do not match value source {}",
                    shape_str(probs.shape()), shape_str(v_src.shape())));
  if (!(dropout_p >= 0.0f && dropout_p <= 1.0f) || (dropout_p > 0.0f && gen == nullptr))
    throw std::invalid_argument(
        fmt::format("attention_context: dropout probability {} must be in [0, 1] (and > 0 needs a generator)",
                    dropout_p));
  const int64_t d = H * dh, vstride = v.L * v.C;  // batch entries of the value source
  const int64_t per_b = H * T * S;                // elements of P per batch row

  // Dropout as dropout(P) draws it (autograd/functions_nn.cpp): one seed from gen, element i of P
  // kept when its hash is >= drop_below, scaled by 1 / (1 - p).
  struct Drop {
    bool on = false;
    uint64_t seed = 0;
    uint32_t below = 0;
    float scale = 1.0f;
    // dst = D(src) for batch row b's block of P (or of a gradient shaped like P)
    void apply(float* dst, const float* src, int64_t b, int64_t n) const {
      ops::dropout_forward(dst, nullptr, src, n, seed, below, scale, false, b * n);
    }
  } drop;
  if (dropout_p > 0.0f) {
    drop.on = true;
    drop.seed = gen->next_u64();
    drop.below = static_cast<uint32_t>(std::ceil(static_cast<double>(dropout_p) * 16777216.0));
    drop.scale = dropout_p < 1.0f ? 1.0f / (1.0f - dropout_p) : 0.0f;
  }

  Tensor out = Tensor::empty({B, T, d});
  float* const op = out.data();
  const float *const pp = probs.data(), *const vp = v_src.data();
  for_each_batch_row(B, per_b * dh, [&](int64_t b) {  // O_h (T x dh, row stride d) = D(P_h) V_h
    const float* pb = pp + b * per_b;
    if (drop.on) {
      float* dropped = scratch(per_b);
      drop.apply(dropped, pb, b, per_b);
      pb = dropped;
    }
    gemm_heads(op + b * T * d, pb, vp + b * vstride + v.col, T, dh, S, false, false, 1.0f, 0.0f, S, v.C, d,
               T * S, dh, dh, H);
  });

  if (Node* n = Tape::current().record("attention_context", out, {probs, v_src})) {
    n->backward = [P = probs.detach(), vs = v_src.detach(), v, B, H, T, S, dh, d, vstride, per_b, drop](
                      const Tensor& dO, Grads& g) {
      bool overwrite = false;  // dP is written in full: a first contribution is stored (beta = 0)
      float* dp = g.needs(0) ? g.buffer(0, overwrite) : nullptr;  // allocated before the parallel loop
      float* dv = g.needs(1) ? g.buffer(1) : nullptr;
      const float *const dop = dO.data(), *const vp = vs.data(), *const pp = P.data();
      for_each_batch_row(B, per_b * dh, [&](int64_t b) {
        const float* dOb = dop + b * T * d;
        float* work = drop.on ? scratch(2 * per_b) : nullptr;  // D(P_b), then D(dD_b)
        if (dv) {  // dV_h (S x dh) += D(P_h)^T (S x T) dO_h (T x dh)
          const float* pb = pp + b * per_b;
          if (drop.on) {
            drop.apply(work, pb, b, per_b);
            pb = work;
          }
          gemm_heads(dv + b * vstride + v.col, pb, dOb, S, dh, T, true, false, 1.0f, 1.0f, S, d, v.C, T * S,
                     dh, dh, H);
        }
        if (dp) {  // dD_h (T x S) = dO_h (T x dh) V_h^T (dh x S);  dP_h += D(dD_h)
          float* dpb = dp + b * per_b;
          if (!drop.on) {
            gemm_heads(dpb, dOb, vp + b * vstride + v.col, T, S, dh, false, true, 1.0f,
                       overwrite ? 0.0f : 1.0f, d, v.C, S, dh, dh, T * S, H);
          } else {
            float* dD = work + per_b;
            gemm_heads(dD, dOb, vp + b * vstride + v.col, T, S, dh, false, true, 1.0f, 0.0f, d, v.C, S, dh,
                       dh, T * S, H);
            if (overwrite) {
              drop.apply(dpb, dD, b, per_b);
            } else {
              drop.apply(work, dD, b, per_b);
              ops::axpy(dpb, work, 1.0f, per_b);
            }
          }
        }
      });
    };
  }
  return out;
}

}  // namespace tg::nn
