// The attention ops: attention_probs (P = softmax(scale Q K^T + masks)) and attention_context
// (O = dropout(P) V), with their backward rules, and attention: the two as one op that stores no P
// and recomputes it per batch row in backward. The comment blocks with the formulas are in
// autograd/functions.hpp; autograd/OPS.md lists them with the other ops.
//
// Every product below is one strided batched GEMM over the H heads of one batch row, written as
// its formula on HeadMats views: `heads_gemm(prec, dQ, scale, dS, K)` is dQ_h += scale * dS_h K_h for
// every head h, in the precision the op's forward ran in (autograd/precision.hpp). Each half's
// forward and backward per batch row is written once (ProbsRule, ContextRule); the three ops run
// them.
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "autograd/functions.hpp"
#include "autograd/precision.hpp"
#include "autograd/tape.hpp"
#include "ops/kernels.hpp"

namespace tg {

namespace {

// H matrices of rows x cols, row-major with row stride ld; head h starts head_stride elements
// after head 0. t() is the same storage read transposed (a GEMM flag, never a copy).
struct HeadMats {
  const float* data;
  int64_t rows, cols, ld, head_stride;
  bool trans = false;
  HeadMats t() const {
    HeadMats m = *this;
    m.trans = !trans;
    return m;
  }
  int64_t op_rows() const { return trans ? cols : rows; }
  int64_t op_cols() const { return trans ? rows : cols; }
};

// The output of a product: the same layout, writable.
struct HeadOut {
  float* data;
  int64_t rows, cols, ld, head_stride;
};

// C_h = alpha * op(A_h) op(B_h) + beta * C_h for every head h, as one strided batched GEMM in
// precision prec (the op's forward precision, read before any OpenMP region: it is per thread).
void heads_gemm(Precision prec, const HeadOut& C, float alpha, const HeadMats& A, const HeadMats& B,
                float beta, int64_t heads) {
  if (A.op_rows() != C.rows || B.op_cols() != C.cols || A.op_cols() != B.op_rows())
    throw std::logic_error(fmt::format("heads_gemm: [{} x {}] = [{} x {}] [{} x {}]", C.rows, C.cols,
                                       A.op_rows(), A.op_cols(), B.op_rows(), B.op_cols()));
  ops::Gemm g;
  g.M = C.rows, g.N = C.cols, g.K = A.op_cols();
  g.trans_a = A.trans, g.trans_b = B.trans;
  g.alpha = alpha, g.beta = beta;
  g.lda = A.ld, g.ldb = B.ld, g.ldc = C.ld;
  g.batch = heads;
  g.stride_a = A.head_stride, g.stride_b = B.head_stride, g.stride_c = C.head_stride;
  gemm(prec, C.data, A.data, B.data, g);
}

// The H heads of a column block of a [B, L, C] projection output: head h of batch row b is the
// rows x d_head matrix src[b, 0:rows, col + h*d_head : col + (h+1)*d_head] (row stride C).
struct HeadBlock {
  int64_t B, L, C, col, d_head;
  HeadMats in(const float* src, int64_t b, int64_t rows) const {
    return {src + b * L * C + col, rows, d_head, C, d_head};
  }
  HeadOut out(float* src, int64_t b, int64_t rows) const {
    return {src + b * L * C + col, rows, d_head, C, d_head};
  }
};

HeadBlock head_block(const Tensor& src, int64_t col, int64_t heads, int64_t d_head, const char* op,
                     const char* what) {
  if (src.dim() != 3 || col < 0 || col + heads * d_head > src.size(2))
    throw std::invalid_argument(fmt::format("{}: {} {} has no column block [{}, {})", op, what,
                                            shape_str(src.shape()), col, col + heads * d_head));
  return {src.size(0), src.size(1), src.size(2), col, d_head};
}

// The H score-shaped matrices [T, S] of one batch row, stored contiguously (P, dP, a scratch).
HeadMats scores_in(const float* p, int64_t T, int64_t S) {
  return {p, T, S, S, T * S};
}
HeadOut scores_out(float* p, int64_t T, int64_t S) {
  return {p, T, S, S, T * S};
}

// f(b, scratch) for every batch row b, with `scratch_floats` floats of per-thread scratch. In one
// OpenMP region when there are rows to share and enough work to pay for it (each GEMM of a row
// then runs on its thread), otherwise a plain loop on the calling thread. Not an `if` clause: an
// inactive region around the GEMMs would make their own threading a nested team.
// The scratch is allocated here, by the calling thread, before any region opens: a bad_alloc
// thrown inside an OpenMP region cannot leave it and ends the process (std::terminate). It is
// kept for the calling thread's life, so a training step allocates nothing after the first.
//
// Threads share the rows from kRowsThreadMinMacs multiply-adds in all (the rows' head products
// together): below it, one OpenMP region (about a microsecond to open and join, ops/simd/common.hpp)
// costs as much as the products themselves, 64Ki multiply-adds being a few microseconds of one
// core. A round number of that size, not a measured crossover.
constexpr int64_t kRowsThreadMinMacs = int64_t{1} << 16;

template <class F>
void for_each_batch_row(int64_t B, int64_t macs_per_row, int64_t scratch_floats, F&& f) {
  const bool threaded =
      B > 1 && ops::num_threads() > 1 && B * macs_per_row >= kRowsThreadMinMacs && !omp_in_parallel();
  const int threads = threaded ? ops::num_threads() : 1;
  thread_local std::vector<float> scratch;
  const auto need = static_cast<size_t>(scratch_floats) * static_cast<size_t>(threads);
  if (scratch.size() < need) scratch.resize(need);
  float* const base = scratch.data();
  if (threaded) {
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t b = 0; b < B; ++b) f(b, base + omp_get_thread_num() * scratch_floats);
  } else {
    for (int64_t b = 0; b < B; ++b) f(b, base);
  }
}

// Attention's first half for one batch row at a time: the validated shapes and masks of
// P = softmax(scale Q K^T + masks) and its forward and backward rules per row b. attention_probs
// runs them over a stored P; attention runs them over a P that only ever exists per row.
struct ProbsRule {
  HeadBlock q, k;
  int64_t B, H, T, S;
  float scale;
  bool causal;
  std::vector<uint8_t> key_mask;  // [B, S] or empty (a copy: the backward of attention uses it)
  Precision prec;

  int64_t per_b() const { return H * T * S; }

  // P_b = softmax(scale Q_b K_b^T, masks) for the H heads of row b; `scores` is per_b() scratch.
  // The scores go straight from the GEMM into the scratch, which stays in cache.
  void forward(float* P_b, float* scores, const float* qp, const float* kp, int64_t b) const {
    heads_gemm(prec, scores_out(scores, T, S), scale, q.in(qp, b, T), k.in(kp, b, S).t(), 0.0f,
               H);  // S_h = scale * Q_h K_h^T
    const ops::SoftmaxMask m{.causal = causal,
                             .q_len = T,
                             .key_mask = key_mask.empty() ? nullptr : key_mask.data() + b * S,
                             .groups_per_key_row = H};
    ops::softmax_forward(P_b, scores, H * T, S, m);  // P_h = softmax(S_h, masks)
  }

  // dQ_b += scale dS K, dK_b += scale dS^T Q from dP_b and P_b (either gradient may be null: not
  // needed); dS is per_b() scratch. Row b writes only its own rows of dQ and dK, which may be the
  // same buffer.
  void backward(float* dq, float* dk, float* dS_b, const float* dP_b, const float* P_b, const float* qp,
                const float* kp, int64_t b) const {
    // dS_h = P_h * (dP_h - rowsum(dP_h * P_h))   (the softmax VJP)
    ops::softmax_backward(dS_b, dP_b, P_b, H * T, S, /*overwrite=*/true);
    const HeadMats dS = scores_in(dS_b, T, S);
    if (dq) heads_gemm(prec, q.out(dq, b, T), scale, dS, k.in(kp, b, S), 1.0f, H);      // dQ += scale dS K
    if (dk) heads_gemm(prec, k.out(dk, b, S), scale, dS.t(), q.in(qp, b, T), 1.0f, H);  // dK += scale dS^T Q
  }
};

ProbsRule probs_rule(const char* op, const Tensor& q_src, const Tensor& k_src, const AttentionSpec& s) {
  const int64_t heads = s.heads, dh = s.d_head, kv_len = s.kv_len;
  if (heads <= 0 || dh <= 0)
    throw std::invalid_argument(fmt::format("{}: heads ({}) and d_head ({}) must be > 0", op, heads, dh));
  const HeadBlock q = head_block(q_src, s.q_col, heads, dh, op, "query source");
  const HeadBlock k = head_block(k_src, s.k_col, heads, dh, op, "key source");
  if (q.B != k.B)
    throw std::invalid_argument(fmt::format("{}: query source {} and key source {} do not match", op,
                                            shape_str(q_src.shape()), shape_str(k_src.shape())));
  if (kv_len > k.L)
    throw std::invalid_argument(
        fmt::format("{}: kv_len {} > rows of key source {}", op, kv_len, shape_str(k_src.shape())));
  const int64_t B = q.B, S = kv_len < 0 ? k.L : kv_len;
  const bool padded = s.pad && !s.pad->empty();
  if (padded && (s.pad->batch != B || s.pad->len != S))
    throw std::invalid_argument(fmt::format("{}: key padding mask [{}, {}] for keys [B={}, S={}]", op,
                                            s.pad->batch, s.pad->len, B, S));
  return {q,
          k,
          B,
          heads,
          q.L,
          S,
          s.scale,
          s.causal,
          padded ? s.pad->mask : std::vector<uint8_t>{},
          effective_precision(compute_precision())};
}

// Inverted dropout on P as dropout(P) draws it (functions_nn.cpp): one seed from gen, element i
// kept when ops::dropout_bits(seed, i) >= below, scaled by 1 / (1 - p). D(P) is regenerated per
// batch row from the seed instead of being stored.
struct AttentionDropout {
  bool on = false;
  uint64_t seed = 0;
  uint32_t below = 0;
  float scale = 1.0f;
  // dst = D(src) for batch row b's block of n elements of P (or of a gradient shaped like P)
  void apply(float* dst, const float* src, int64_t b, int64_t n) const {
    ops::dropout_forward(dst, nullptr, src, n, seed, below, scale, false, b * n);
  }
};

// Attention's second half for one batch row at a time: O = D(P) V, heads merged into [B, T, d].
struct ContextRule {
  HeadBlock v, o;  // o: the output [B, T, H d_head], head h its column block h d_head
  int64_t H, T, S;
  AttentionDropout drop;
  Precision prec;

  int64_t per_b() const { return H * T * S; }
  // Scratch floats a row needs: forward D(P_b); backward D(P_b) and dD.
  int64_t forward_scratch() const { return drop.on ? per_b() : 0; }
  int64_t backward_scratch() const { return drop.on ? 2 * per_b() : 0; }

  // O_b = D(P_b) V_b
  void forward(float* out, const float* P_b, const float* vp, int64_t b, float* work) const {
    if (drop.on) {
      drop.apply(work, P_b, b, per_b());
      P_b = work;
    }
    heads_gemm(prec, o.out(out, b, T), 1.0f, scores_in(P_b, T, S), v.in(vp, b, S), 0.0f,
               H);  // O_h = D(P_h) V_h
  }

  // dV_b += D(P_b)^T dO_b (dv may be null); dP_b = D(dO_b V_b^T), stored when overwrite, else added
  // (dP_b may be null).
  void backward(float* dv, float* dP_b, bool overwrite, const float* P_b, const float* dop, const float* vp,
                int64_t b, float* work) const {
    const HeadMats dOb = o.in(dop, b, T), Vb = v.in(vp, b, S);
    if (dv) {  // dV_h += D(P_h)^T dO_h
      if (drop.on) {
        drop.apply(work, P_b, b, per_b());
        P_b = work;
      }
      heads_gemm(prec, v.out(dv, b, S), 1.0f, scores_in(P_b, T, S).t(), dOb, 1.0f, H);
    }
    if (!dP_b) return;
    if (!drop.on) {  // dP_h (+)= dO_h V_h^T
      heads_gemm(prec, scores_out(dP_b, T, S), 1.0f, dOb, Vb.t(), overwrite ? 0.0f : 1.0f, H);
      return;
    }
    float* dD = work + per_b();  // dD_h = dO_h V_h^T, then dP_h (+)= D(dD_h): the same mask and scale
    heads_gemm(prec, scores_out(dD, T, S), 1.0f, dOb, Vb.t(), 0.0f, H);
    if (overwrite) {
      drop.apply(dP_b, dD, b, per_b());
    } else {
      drop.apply(work, dD, b, per_b());
      ops::axpy(dP_b, work, 1.0f, per_b());
    }
  }
};

// The shapes B, H, T, S are P's: [B, H, T, S].
struct ProbsShape {
  int64_t B, H, T, S;
};

ContextRule context_rule(const char* op, const ProbsShape& p, const Tensor& v_src, const AttentionSpec& s) {
  const int64_t B = p.B, H = p.H, T = p.T, S = p.S, dh = s.d_head, kv_len = s.kv_len;
  const float dropout_p = s.dropout_p;
  Generator* const gen = s.gen;
  if (dh <= 0) throw std::invalid_argument(fmt::format("{}: d_head ({}) must be > 0", op, dh));
  const HeadBlock v = head_block(v_src, s.v_col, H, dh, op, "value source");
  if (v.B != B || (kv_len < 0 ? v.L != S : (kv_len != S || v.L < S)))
    throw std::invalid_argument(fmt::format("{}: probabilities [{}, {}, {}, {}] do not match value source {}",
                                            op, B, H, T, S, shape_str(v_src.shape())));
  if (!(dropout_p >= 0.0f && dropout_p <= 1.0f) || (dropout_p > 0.0f && gen == nullptr))
    throw std::invalid_argument(fmt::format(
        "{}: dropout probability {} must be in [0, 1] (and > 0 needs a generator)", op, dropout_p));
  AttentionDropout drop;
  if (dropout_p > 0.0f) {
    drop.on = true;
    drop.seed = gen->next_u64();
    drop.below = ops::dropout_threshold(dropout_p);
    drop.scale = ops::dropout_scale(dropout_p);
  }
  const HeadBlock o{B, T, H * dh, 0, dh};
  return {v, o, H, T, S, drop, effective_precision(compute_precision())};
}

}  // namespace

Tensor attention_probs(const Tensor& q_src, const Tensor& k_src, const AttentionSpec& s) {
  const ProbsRule r = probs_rule("attention_probs", q_src, k_src, s);
  const int64_t dh = s.d_head;
  const int64_t per_b = r.per_b();
  Tensor probs = Tensor::empty({r.B, r.H, r.T, r.S});
  float* const pp = probs.data();
  const float *const qp = q_src.data(), *const kp = k_src.data();
  for_each_batch_row(r.B, per_b * dh, per_b,
                     [&](int64_t b, float* scores) { r.forward(pp + b * per_b, scores, qp, kp, b); });

  if (Node* n = Tape::current().record("attention_probs", probs, {q_src, k_src})) {
    n->backward = [P = probs.detach(), qs = q_src.detach(), ks = k_src.detach(), r](const Tensor& dP,
                                                                                    Grads& g) {
      float* dq = g.needs(0) ? g.buffer(0) : nullptr;  // allocated before the parallel loop
      float* dk = g.needs(1) ? g.buffer(1) : nullptr;
      const int64_t per_b = r.per_b();
      const float *const pp = P.data(), *const dpp = dP.data(), *const qp = qs.data(), *const kp = ks.data();
      for_each_batch_row(r.B, per_b * r.q.d_head, per_b, [&](int64_t b, float* dS) {
        r.backward(dq, dk, dS, dpp + b * per_b, pp + b * per_b, qp, kp, b);
      });
    };
  }
  return probs;
}

Tensor attention_context(const Tensor& probs, const Tensor& v_src, const AttentionSpec& s) {
  if (probs.dim() != 4)
    throw std::invalid_argument(fmt::format("attention_context: probabilities must be [B, H, T, S], got {}",
                                            shape_str(probs.shape())));
  const int64_t B = probs.size(0);
  const ContextRule r =
      context_rule("attention_context", {B, probs.size(1), probs.size(2), probs.size(3)}, v_src, s);
  const int64_t dh = s.d_head;
  const int64_t per_b = r.per_b();
  Tensor out = Tensor::empty({B, r.T, r.H * dh});
  float* const op = out.data();
  const float *const pp = probs.data(), *const vp = v_src.data();
  for_each_batch_row(B, per_b * dh, r.forward_scratch(),
                     [&](int64_t b, float* work) { r.forward(op, pp + b * per_b, vp, b, work); });

  if (Node* n = Tape::current().record("attention_context", out, {probs, v_src})) {
    n->backward = [P = probs.detach(), vs = v_src.detach(), r, B](const Tensor& dO, Grads& g) {
      bool overwrite = false;  // dP is written in full: a first contribution is stored (beta = 0)
      float* dp = g.needs(0) ? g.buffer(0, overwrite) : nullptr;  // allocated before the parallel loop
      float* dv = g.needs(1) ? g.buffer(1) : nullptr;
      const int64_t per_b = r.per_b();
      const float *const dop = dO.data(), *const vp = vs.data(), *const pp = P.data();
      for_each_batch_row(B, per_b * r.v.d_head, r.backward_scratch(), [&](int64_t b, float* work) {
        r.backward(dv, dp ? dp + b * per_b : nullptr, overwrite, pp + b * per_b, dop, vp, b, work);
      });
    };
  }
  return out;
}

namespace {

// Which form runs `attention`. The fused kernel (ops::attention_forward / attention_backward: per
// (row, head), a block of query rows at a time, the products on the GEMM's fp32 register tiles, P
// only in cache, threaded over the B * H (row, head) pairs) or the per-row form below (per batch row
// P materialised, its products through the GEMM driver in the op's precision: bf16 where it pays,
// threaded over the B batch rows).
//   fp32 products: the fused kernel (Cascade Lake: -17% on config M's attention, 1.1-5.4x PyTorch's
//     SDPA; bench/README.md).
//   bf16 products (a CPU where they pay: AVX512_BF16, AMX): the fused kernel too, its products in
//     bf16 where the kernel table has them (ops::AttentionBf16: the AVX512_BF16 table's vdpbf16ps
//     tiles), else in fp32 (the AMX table: its CPUs' vdpbf16ps runs at half their FMA rate). The
//     per-row form would run them in bf16, but each head's product as
//     a packed one-thread GEMM, threaded over the B rows only. Measured on the 16-core AMX Xeon,
//     the 12 x 768 model at 8 x 256, 16 threads, bf16, alternated (2026-11-27): the step 609-661 ms
//     fused against 717-786 rows, the attention op 86 against 199 ms, peak RSS 2,284 against 2,521
//     MiB; config M (16 threads) equal within noise (131-146 against 142-156 ms); GPT-2's shape on
//     2 threads 753 against 797 ms.
//   TAPEGRAD_ATTENTION=rows picks the per-row form (for measuring the two; fused and auto: the
//   fused kernel).
// With fewer than kFusedMinQueries queries (one-position decoding steps against a key/value cache)
// the per-row form always runs: its few-row GEMM reads K in place, where the fused kernel would
// first copy K transposed, as many loads as the product's multiply-adds at T = 1.
constexpr int64_t kFusedMinQueries = 8;

bool rows_forced() {
  static const bool rows = [] {
    const char* env = std::getenv("TAPEGRAD_ATTENTION");
    const std::string v = env ? env : "";
    if (v.empty() || v == "auto" || v == "fused") return false;
    if (v == "rows") return true;
    throw std::runtime_error("TAPEGRAD_ATTENTION=" + v + ": expected auto, fused or rows");
  }();
  return rows;
}

// Whether `attention` with T queries runs the fused kernel (whatever the products' precision).
bool use_fused(int64_t T) {
  const bool rows = rows_forced();  // read first: a bad value is reported by decoding steps too
  return T >= kFusedMinQueries && !rows;
}

ops::Attention fused_attention(const ProbsRule& pr, const ContextRule& cr, const Tensor& q_src,
                               const Tensor& kv_src) {
  ops::Attention a;
  a.B = pr.B, a.H = pr.H, a.T = pr.T, a.S = pr.S, a.d_head = pr.q.d_head;
  a.q = q_src.data() + pr.q.col, a.k = kv_src.data() + pr.k.col, a.v = kv_src.data() + cr.v.col;
  a.ldq = pr.q.C, a.ldk = pr.k.C, a.ldv = cr.v.C;
  a.q_batch = pr.q.L * pr.q.C, a.kv_batch = pr.k.L * pr.k.C;
  a.scale = pr.scale;
  a.causal = pr.causal;
  a.key_mask = pr.key_mask.empty() ? nullptr : pr.key_mask.data();
  if (cr.drop.on) a.seed = cr.drop.seed, a.drop_below = cr.drop.below, a.drop_scale = cr.drop.scale;
  // bf16 products where the forward ran in bf16 and the kernels have them (the backward's rule is
  // made from the same pr: it follows the forward's precision)
  if (pr.prec == Precision::bf16) a.bf16 = ops::active().attention_bf16;
  return a;
}

}  // namespace

Tensor attention(const Tensor& q_src, const Tensor& kv_src, const AttentionSpec& s) {
  const ProbsRule pr = probs_rule("attention", q_src, kv_src, s);
  const ContextRule cr = context_rule("attention", {pr.B, pr.H, pr.T, pr.S}, kv_src, s);
  const int64_t dh = s.d_head;
  const int64_t B = pr.B, per_b = pr.per_b();
  Tensor out = Tensor::empty({B, pr.T, pr.H * dh});
  float* const op = out.data();
  const float *const qp = q_src.data(), *const kvp = kv_src.data();
  if (use_fused(pr.T)) {
    // out = D(softmax(scale Q K^T, masks)) V; saves q_src, kv_src, the dropout seed (in the rule)
    ops::attention_forward(op, fused_attention(pr, cr, q_src, kv_src));
    if (Node* n = Tape::current().record("attention", out, {q_src, kv_src})) {
      n->backward = [qs = q_src.detach(), kvs = kv_src.detach(), pr, cr](const Tensor& dO, Grads& g) {
        const ops::Attention a = fused_attention(pr, cr, qs, kvs);
        // dQ, dK, dV: column blocks of their sources' gradients (dK and dV of one buffer)
        float* dq = g.needs(0) ? g.buffer(0) + pr.q.col : nullptr;
        float* dkv = g.needs(1) ? g.buffer(1) : nullptr;
        ops::attention_backward(dq, dkv ? dkv + pr.k.col : nullptr, dkv ? dkv + cr.v.col : nullptr, dO.data(),
                                a);
      };
    }
    return out;
  }
  // Per row: [scores | P_b | the context's scratch]; P_b is gone when the row is done. The work per
  // row passed is the two ops' (per_b dh): the same threading, so the same bits.
  for_each_batch_row(B, per_b * dh, 2 * per_b + cr.forward_scratch(), [&](int64_t b, float* work) {
    float* P_b = work + per_b;
    pr.forward(P_b, work, qp, kvp, b);
    cr.forward(op, P_b, kvp, b, work + 2 * per_b);
  });

  if (Node* n = Tape::current().record("attention", out, {q_src, kv_src})) {
    n->backward = [qs = q_src.detach(), kvs = kv_src.detach(), pr, cr](const Tensor& dO, Grads& g) {
      float* dq = g.needs(0) ? g.buffer(0) : nullptr;   // allocated before the parallel loop
      float* dkv = g.needs(1) ? g.buffer(1) : nullptr;  // dK and dV: column blocks of one buffer
      const int64_t per_b = pr.per_b();
      const float *const dop = dO.data(), *const qp = qs.data(), *const kvp = kvs.data();
      // Per row: [P_b | dP_b | dS_b | the context's scratch]; the scores of the recompute use dS_b.
      for_each_batch_row(
          pr.B, per_b * pr.q.d_head, 3 * per_b + cr.backward_scratch(), [&](int64_t b, float* work) {
            float *const P_b = work, *const dP_b = work + per_b, *const dS_b = work + 2 * per_b;
            pr.forward(P_b, dS_b, qp, kvp, b);  // P_b again, as the forward computed it
            // dV += D(P)^T dO;  dP = D(dO V^T)
            cr.backward(dkv, dP_b, /*overwrite=*/true, P_b, dop, kvp, b, work + 3 * per_b);
            // dQ += scale dS K;  dK += scale dS^T Q
            pr.backward(dq, dkv, dS_b, dP_b, P_b, qp, kvp, b);
          });
    };
  }
  return out;
}

}  // namespace tg
