// Fused scaled dot-product attention (ops::Attention in kernels.hpp): per (batch row, head), a
// block of query rows at a time, the scores, softmax, dropout and the product with V run on data
// that stays in cache, and P is never written to memory. Backward computes P again the same way.
//
// The products run on the GEMM's register tiles (micro_kernel_direct, gemm_micro.hpp), called
// directly: these matrices are small (T, S of a few hundred, d_head 32-128), all of a head's
// operands fit in L2, and the GEMM driver's blocking, packing and threading per product would cost
// more than they save (the unfused attention ran its 64 x 64 x 32 products through it at under 20%
// of the FMA peak). The layouts the tiles need are made once per head:
//   Kt  [d][Sp]  K transposed (scores = Q Kt: NR-wide rows of keys per k)     Sp = S up to NR
//   Vt  [d][Sp]  V transposed (backward: dD = dO Vt)
//   V, K, Q, dO as B operands: copied into NR-column panels (pack_b), zero-padded to Dp = d up to NR;
//   when d is not a multiple of NR their products go through a padded tile and only the d real
//   columns are stored.
// Per block of tb query rows [t0, t0 + rows), the keys the block's last row can see are
// [0, kmax) (causal: fewer), and only those are computed and multiplied:
//   forward   Sc = scale Q Kt        [rows][kmax]    tile products, A = Q rows in place
//             P  = softmax rows (masks), D(P) = dropout   in place, softmax_row
//             O  = D(P) V            [rows][d]       A = P read along k
//   backward  the same P (and D(P) beside it), then
//             dV += D(P)^T dO        [kmax][d]       A = D(P) read transposed
//             dP  = D(dO Vt)         [rows][kmax]
//             dS  = P * (dP - rowsum(dP * P))        in place, softmax_backward_row
//             dQ += scale dS K       [rows][d]
//             dK += scale dS^T Q     [kmax][d]
// Each fp32 product's K dimension is one run of FMAs per register tile (no K blocking): for K <= KC the
// same order as the GEMM's, so the output and dQ of the fused op and of attention_probs +
// attention_context agree bit for bit on such sizes; dK and dV are added once per block of query
// rows, where the GEMM sums over all queries at once, so they agree up to that grouping
// (nn.attention.one_op_matches_two_ops).
//
// With Attention::bf16 set (a table with a bf16 unit: ops::AttentionBf16) the six products run on
// that unit's tiles instead, their operands rounded to bf16: B packed by bf16->pack into its own
// panels, op(A) rounded by bf16->product as it multiplies (Products below), which blocks K by the
// bf16 GEMM's KC and M by its MC as the GEMM does (so the same agreement with the two ops in bf16);
// the blocks of query rows, softmax, masks and dropout are the same.
//
// Threads share the B * H (row, head) pairs; each pair writes only its own column blocks of O,
// dQ, dK and dV, so the three gradients may be one buffer. While a pair runs, the next pair's
// rows are prefetched into L2, a slice per query block (prefetch_pair). Workspace per thread is
// taken from scratch before the region opens (common.hpp).
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "ops/kernels.hpp"
#include "ops/simd/common.hpp"
#include "ops/simd/elementwise.hpp"
#include "ops/simd/gemm_micro.hpp"
#include "ops/simd/gemm_pack.hpp"
#include "ops/simd/gemm_traits.hpp"
#include "ops/simd/softmax.hpp"

namespace tg::ops::simd {

// Query rows per block, in register tiles (MR rows): 2 in forward, 4 in backward. A causal block
// computes the keys its last row sees, so short blocks skip most of the masked half; the block's
// score rows ([rows][Sp] floats, four of them in backward) stay in L1 / L2. Cascade Lake, 1 thread,
// GFLOP/s of fwd / fwd+bwd at 1, 2, 4 tiles per block (2026-11-27, bench_kernels --filter
// attention): B4 H12 T64 d64 causal 26 / 21, 26 / 25, 24 / 23; B4 H12 T1024 d64 causal 58 / 47,
// 59 / 51, 56 / 51; config M's heads (B64 H8 T64 d32) 34 / 34, 34 / 35, 34 / 36. Backward adds
// dV and dK over a block's rows (K = the block's rows): longer blocks give those two products a
// longer K and add into dV and dK fewer times. Zen 3, 1 thread, backward ms with 2 / 4 tiles,
// medians of 5 alternated rounds in each of two runs on a busy host (2026-11-28,
// bench/results/attention_row_tiles_2026-11-28_zen3.txt): B4 H12 T1024 d64 causal 365 / 319 and
// 382 / 344, B32 H4 T128 d64 causal 17.9 / 17.2 and 19.6 / 16.9; config M's heads (B64 H8 T64
// d32) within the noise (full 18.4 / 16.7 then 18.8 / 20.1, causal 14.6 / 15.1 then 14.8 / 15.5).
// Forward with 4 tiles was 0-13% slower in the first run, so forward keeps 2.
inline constexpr int64_t kAttentionRowTiles = 2, kAttentionRowTilesBackward = 4;
// Threads share the (row, head) pairs from this many multiply-adds in all (forward's two products);
// below it one OpenMP region costs about as much as the products (the same round figure as the
// unfused attention's kRowsThreadMinMacs in autograd/functions_attention.cpp).
inline constexpr double kAttentionThreadMinMacs = 65536;

template <class Arch>
int64_t round_up_to(int64_t n, int64_t m) {
  return (n + m - 1) / m * m;
}

// A K x N operand packed by pack_b (gemm_pack.hpp) into NR-column panels: panel j / NR at
// p + (j / NR) * k_rows * NR, its rows NR apart; columns past N are zero. A transposed source (K,
// V read as K^T, V^T) is transposed in registers, an untransposed one copied with vector loads.
// With bf16 products the panels are bf16->pack's (bf16 pairs, half the floats).
struct Panels {
  float* p = nullptr;
  int64_t k_rows = 0;
};
// How the products run: fp32 tiles (bf16 null) or bf16->product, which rounds op(A) into atmp.
struct Products {
  const AttentionBf16* bf16 = nullptr;
  float* atmp = nullptr;
};
// The products a: bf16 where it asks for them and their panels are as wide as this arch's tiles.
template <class Arch>
Products products(const Attention& a, float* atmp) {
  if (a.bf16 && a.bf16->nr == GemmTraits<Arch>::NR) return {a.bf16, atmp};
  return {};
}
template <class Arch>
Panels pack_panels(float* dst, const float* src, int64_t ld, bool trans, int64_t k_rows, int64_t n,
                   const Products& pr) {
  constexpr int64_t NR = GemmTraits<Arch>::NR;
  if (pr.bf16)
    pr.bf16->pack(dst, src, ld, trans, k_rows, n);
  else
    pack_b<Arch>(dst, src, ld, trans, k_rows, n, 0, (n + NR - 1) / NR);
  return {dst, k_rows};
}

// C[M x N] = e(alpha * op(A) B) for N a multiple of NR, K <= b.k_rows: op(A) read in place
// (kTrans: A stored K x M, lda apart per k; else M rows lda apart), B packed panels. Whole
// MR-row tiles, then the last rows at their own height.
template <class Arch, bool kTrans>
void tile_product(int64_t M, int64_t N, int64_t K, const float* a, int64_t lda, const Panels& b, float* c,
                  int64_t ldc, const Epilogue& e, const Products& pr) {
  constexpr int64_t MR = GemmTraits<Arch>::MR, NR = GemmTraits<Arch>::NR;
  if (pr.bf16)
    return pr.bf16->product(M, N, K, a, lda, kTrans, b.p, b.k_rows, c, ldc, e.alpha, e.beta, pr.atmp);
  const int64_t m_full = M / MR * MR;
  for (int64_t j = 0; j < N; j += NR) {
    const float* bp = b.p + j * b.k_rows;  // panel j / NR
    for (int64_t i = 0; i < m_full; i += MR)
      micro_kernel_direct<Arch, kTrans, static_cast<int>(MR)>(K, a + (kTrans ? i : i * lda), lda, bp, NR,
                                                              c + i * ldc + j, ldc, e);
    if (m_full < M)
      micro_kernel_direct_rows<Arch, kTrans>(
          M - m_full, std::make_integer_sequence<int, static_cast<int>(MR) - 1>{}, K,
          a + (kTrans ? m_full : m_full * lda), lda, bp, NR, c + m_full * ldc + j, ldc, e);
  }
}

// The same into C[M x n] for any n: when n is not a multiple of NR the tiles go to tmp ([M][n up to
// NR]) and the n real columns are stored with e's beta (0 or 1), as store_tile would.
template <class Arch, bool kTrans>
void tile_product_cols(int64_t M, int64_t n, int64_t K, const float* a, int64_t lda, const Panels& b,
                       float* c, int64_t ldc, const Epilogue& e, float* tmp, const Products& pr) {
  constexpr int64_t NR = GemmTraits<Arch>::NR;
  if (n % NR == 0) return tile_product<Arch, kTrans>(M, n, K, a, lda, b, c, ldc, e, pr);
  const int64_t np = round_up_to<Arch>(n, NR);
  tile_product<Arch, kTrans>(M, np, K, a, lda, b, tmp, np, Epilogue{e.alpha, 0.0f, nullptr}, pr);
  for (int64_t i = 0; i < M; ++i) {
    const float* t = tmp + i * np;
    float* ci = c + i * ldc;
    if (e.beta == 0.0f)
      std::copy(t, t + n, ci);
    else
      for (int64_t j = 0; j < n; ++j) ci[j] = t[j] + ci[j];
  }
}

// The sizes one (row, head) pair works with, and its workspace layout (floats, whole cache lines).
template <class Arch>
struct AttentionPlan {
  int64_t Sp = 0, Dp = 0, tb = 0;  // S and d rounded up to NR; query rows per block
  bool padded = false;             // d is not a multiple of NR: products via the padded tile tmp
  bool drop = false;
  // workspace offsets
  int64_t kt = 0, vt = 0, kp = 0, vp = 0, qp = 0, dop = 0, p = 0, dp = 0, dsp = 0, keep = 0, tile = 0,
          row = 0, atmp = 0;
  int64_t total = 0;

  AttentionPlan(const Attention& a, bool backward) {
    constexpr int64_t MR = GemmTraits<Arch>::MR, NR = GemmTraits<Arch>::NR;
    Sp = round_up_to<Arch>(std::max<int64_t>(a.S, 1), NR);
    Dp = round_up_to<Arch>(a.d_head, NR);
    padded = a.d_head % NR != 0;
    drop = a.drop_below > 0;
    tb = std::min(MR * (backward ? kAttentionRowTilesBackward : kAttentionRowTiles),
                  round_up_to<Arch>(std::max<int64_t>(a.T, 1), MR));
    int64_t at = 0;
    auto take = [&](int64_t n) {
      const int64_t off = at;
      at += static_cast<int64_t>(line_floats<Arch>(n));
      return off;
    };
    const int64_t d = a.d_head, S = a.S;
    kt = take(d * Sp);
    if (backward) {
      vt = take(d * Sp);
      kp = take(S * Dp);
      qp = take(tb * Dp);
      dop = take(tb * Dp);
    } else {
      vp = take(S * Dp);
    }
    p = take(tb * Sp);
    if (backward) {
      dp = take(tb * Sp);
      if (drop) {
        dsp = take(tb * Sp);
        keep = take(tb * Sp);
      }
    }
    tile = padded ? take(std::max(tb, Sp) * Dp) : take(0);
    row = take(Sp);
    // bf16 products: op(A) rounded per product, at most max(tb, Sp) rows by max(Sp, Dp, tb) values
    // of k (the transposed products have the block's rows as k)
    atmp = take(a.bf16 ? a.bf16->tmp_floats(std::max(tb, Sp), std::max({Sp, Dp, tb})) : 0);
    total = at;
  }
};

// y = D(x) on [0, n), x being elements first .. first + n - 1 of the dropout numbering: dropout_forward's
// rule and bits, on the calling thread, the last partial vector as a vector too (a row of P is
// short: a scalar tail and parallel_for's checks were a large share of it). keep (may be null)
// gets 1 where an element is kept and 0 where dropped, for dropout_keep_row: backward applies the
// same mask twice (to P and to dO V^T) and the hash is the costly part.
template <class Arch>
void dropout_row(float* y, const float* x, int64_t n, const Attention& a, int64_t first, float* keep) {
  using V = Vec<Arch>;
  using U = xsimd::batch<uint32_t, Arch>;
  using I = xsimd::batch<int32_t, Arch>;
  constexpr int64_t L = V::size;
  alignas(64) uint32_t lane[L];
  for (int64_t j = 0; j < L; ++j) lane[j] = static_cast<uint32_t>(j);
  U idx = U(static_cast<uint32_t>(first)) + U::load_aligned(lane);  // wraps mod 2^32, as dropout_bits
  const V threshold(static_cast<float>(a.drop_below)), scale(a.drop_scale), zero(0.0f), one(1.0f);
  auto apply = [&](const V& v, float* k) {
    const auto kept =
        xsimd::to_float(xsimd::bitwise_cast<I>(dropout_bits_vec<Arch>(a.seed, idx))) >= threshold;
    if (keep) xsimd::select(kept, one, zero).store_unaligned(k);
    return xsimd::select(kept, v * scale, zero);
  };
  int64_t i = 0;
  for (; i + L <= n; i += L, idx += U(static_cast<uint32_t>(L)))
    apply(V::load_unaligned(x + i), keep + (keep ? i : 0)).store_unaligned(y + i);
  if (i < n) {
    alignas(64) float kbuf[L];
    store_partial<Arch>(y + i, apply(load_partial<Arch>(x + i, n - i, 0.0f), kbuf), n - i);
    if (keep) std::copy(kbuf, kbuf + (n - i), keep + i);
  }
}

// y = D(x) on [0, n) with the mask dropout_row stored in keep: the same values as dropout_row.
template <class Arch>
void dropout_keep_row(float* y, const float* x, const float* keep, int64_t n, float scale) {
  using V = Vec<Arch>;
  constexpr int64_t L = V::size;
  int64_t i = 0;
  for (; i + L <= n; i += L)
    xsimd::select(V::load_unaligned(keep + i) != V(0.0f), V::load_unaligned(x + i) * V(scale), V(0.0f))
        .store_unaligned(y + i);
  if (i < n)
    store_partial<Arch>(y + i,
                        xsimd::select(load_partial<Arch>(keep + i, n - i, 0.0f) != V(0.0f),
                                      load_partial<Arch>(x + i, n - i, 0.0f) * V(scale), V(0.0f)),
                        n - i);
}

// The next pair's rows are prefetched while a pair's rows (forward Q, K, V: (T + 2S) d floats;
// backward also dO and the three gradients: (3T + 4S) d) take at most this many bytes, so both
// pairs' rows stay in L2 together. Zen 3, wall time, prefetch off and on alternated per call in one
// process (2026-11-28, before the limit): config M's heads (64 x 64, d 32: 24 / 56 KiB) fwd
// 1.03-1.08x and bwd 1.01-1.09x on 1 thread, 1.04-1.06x and 1.01-1.03x on 2; GPT-2's block 64 (48 /
// 112 KiB) 0.99-1.05x; lm small's 128 x 128 heads (96 / 224 KiB) 0.99-1.02x, its backward now left
// out; GPT-2's block 1024 (768 KiB / 1.75 MiB) 0.94-1.00x, left out.
inline constexpr int64_t kAttentionPrefetchMaxBytes = int64_t{128} << 10;

// Prefetch rows [r0, r1) of `width` floats, `ld` apart, into L2 (write: for a store).
// Always inlined, as prefetch_pair: GCC 12's IPA pure-const pass counts a function whose only
// statements are prefetches as free of effects and drops the call (no prefetch was left).
[[gnu::always_inline]] inline void prefetch_rows(const float* p, int64_t ld, int64_t width, int64_t r0,
                                                 int64_t r1, bool write) {
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t j = 0; j < width + 15; j += 16) {  // j = width - 1 last: a row's last line
      const float* at = p + r * ld + std::min(j, width - 1);
      if (write)
        __builtin_prefetch(at, 1, 2);
      else
        __builtin_prefetch(at, 0, 2);
    }
}

// The rows of (row, head) pair `next`, prefetched while the pair before it runs: its Q, K, V and, in
// backward (g not null), dO and the gradients it adds into. Part `part` of `parts` (one part per
// query block, so the misses overlap that block's products); past the last pair or above
// kAttentionPrefetchMaxBytes, nothing. A pair's operands are strided rows of the model's
// activations (config M: 64 rows of 32 floats, 2 KiB apart), and packing K^T and V stalled on
// each row's miss: in `perf`, a fifth of config M's causal forward was the two packings, most of
// it on their loads.
struct AttentionGrads {
  const float* dout;
  float *dq, *dk, *dv;
};
[[gnu::always_inline]] inline void prefetch_pair(const Attention& a, const AttentionGrads* g, int64_t next,
                                                 int64_t part, int64_t parts) {
  const int64_t d = a.d_head;
  const int64_t bytes = (a.T * (g ? 3 : 1) + a.S * (g ? 4 : 2)) * d * int64_t{sizeof(float)};
  if (next >= a.B * a.H || bytes > kAttentionPrefetchMaxBytes) return;
  const int64_t b = next / a.H, h = next % a.H;
  const int64_t t0 = a.T * part / parts, t1 = a.T * (part + 1) / parts;
  const int64_t s0 = a.S * part / parts, s1 = a.S * (part + 1) / parts;
  const int64_t q_at = b * a.q_batch + h * d, kv_at = b * a.kv_batch + h * d;
  prefetch_rows(a.q + q_at, a.ldq, d, t0, t1, false);
  prefetch_rows(a.k + kv_at, a.ldk, d, s0, s1, false);
  prefetch_rows(a.v + kv_at, a.ldv, d, s0, s1, false);
  if (!g) return;
  prefetch_rows(g->dout + b * a.T * a.H * d + h * d, a.H * d, d, t0, t1, false);
  if (g->dq) prefetch_rows(g->dq + q_at, a.ldq, d, t0, t1, true);
  if (g->dk) prefetch_rows(g->dk + kv_at, a.ldk, d, s0, s1, true);
  if (g->dv) prefetch_rows(g->dv + kv_at, a.ldv, d, s0, s1, true);
}

// The keys the block of rows [t0, t0 + rows) can see: [0, kmax) (the last row's causal prefix).
inline int64_t attention_kmax(const Attention& a, int64_t t0, int64_t rows) {
  return a.causal ? std::clamp<int64_t>(t0 + rows + (a.S - a.T), 0, a.S) : a.S;
}

// P for the block of rows [t0, t0 + rows) of pair (b, h) into P ([rows][Sp], valid on [0, kmax)),
// and D(P) into DP when dropout is on (DP may be P: in place), its mask into keep when not null.
template <class Arch>
void attention_block_probs(float* P, float* DP, float* keep, const Attention& a,
                           const AttentionPlan<Arch>& plan, const float* Q, const Panels& Kt, float* row_tmp,
                           int64_t b, int64_t h, int64_t t0, int64_t rows, int64_t kmax, const Products& pr) {
  constexpr int64_t NR = GemmTraits<Arch>::NR;
  const int64_t T = a.T, S = a.S, Sp = plan.Sp;
  // Sc = scale Q Kt over the keys the block sees (whole NR panels; columns past kmax unused)
  tile_product<Arch, false>(rows, round_up_to<Arch>(kmax, NR), a.d_head, Q + t0 * a.ldq, a.ldq, Kt, P, Sp,
                            Epilogue{a.scale, 0.0f, nullptr}, pr);
  const uint8_t* pad = a.key_mask ? a.key_mask + b * S : nullptr;
  for (int64_t r = 0; r < rows; ++r) {  // P = softmax(Sc) per row, masked keys 0
    const int64_t t = t0 + r;
    const int64_t visible = a.causal ? std::clamp<int64_t>(t + 1 + (S - T), 0, S) : S;
    softmax_row<Arch>(P + r * Sp, P + r * Sp, visible, kmax, pad, row_tmp);
    if (plan.drop)  // D(P): element (b, h, t, s) of a [B, H, T, S] tensor
      dropout_row<Arch>(DP + r * Sp, P + r * Sp, kmax, a, ((b * a.H + h) * T + t) * S,
                        keep ? keep + r * Sp : nullptr);
  }
}

// f(pair, workspace) for every (row, head) pair, pair = b * H + h, threaded when the work pays.
template <class Arch, class F>
void for_each_head(const Attention& a, int64_t per_thread, F&& f) {
  const int64_t pairs = a.B * a.H;
  const double macs = 2.0 * static_cast<double>(pairs) * static_cast<double>(a.T) * static_cast<double>(a.S) *
                      static_cast<double>(a.d_head);
  const int max_threads = omp_get_max_threads();
  const int threads = pairs > 1 && max_threads > 1 && !omp_in_parallel() && macs >= kAttentionThreadMinMacs
                          ? static_cast<int>(std::min<int64_t>(max_threads, pairs))
                          : 1;
  float* const ws = scratch<Arch, Slot::attention>(static_cast<std::size_t>(threads * per_thread));
  if (threads > 1) {
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t i = 0; i < pairs; ++i) f(i, ws + omp_get_thread_num() * per_thread);
  } else {
    for (int64_t i = 0; i < pairs; ++i) f(i, ws);
  }
}

template <class Arch>
void attention_forward(float* out, const Attention& a) {
  if (a.B <= 0 || a.H <= 0 || a.T <= 0 || a.d_head <= 0) return;
  const int64_t T = a.T, S = a.S, d = a.d_head, ldo = a.H * d;
  const AttentionPlan<Arch> plan(a, false);
  for_each_head<Arch>(a, plan.total, [&](int64_t pair, float* w) {
    const int64_t b = pair / a.H, h = pair % a.H;
    const float* Q = a.q + b * a.q_batch + h * d;
    const float* K = a.k + b * a.kv_batch + h * d;
    const float* V = a.v + b * a.kv_batch + h * d;
    float* O = out + b * T * ldo + h * d;
    float* const P = w + plan.p;
    const Products pr = products<Arch>(a, w + plan.atmp);
    const Panels Kt = pack_panels<Arch>(w + plan.kt, K, a.ldk, true, d, S, pr);   // K^T: d x S
    const Panels Vp = pack_panels<Arch>(w + plan.vp, V, a.ldv, false, S, d, pr);  // V: S x d
    const int64_t blocks = (T + plan.tb - 1) / plan.tb;
    for (int64_t t0 = 0; t0 < T; t0 += plan.tb) {
      const int64_t rows = std::min(plan.tb, T - t0), kmax = attention_kmax(a, t0, rows);
      prefetch_pair(a, nullptr, pair + 1, t0 / plan.tb, blocks);
      if (kmax == 0) {  // no key visible: P = 0, O = 0
        for (int64_t r = 0; r < rows; ++r) std::fill(O + (t0 + r) * ldo, O + (t0 + r) * ldo + d, 0.0f);
        continue;
      }
      attention_block_probs<Arch>(P, P, nullptr, a, plan, Q, Kt, w + plan.row, b, h, t0, rows, kmax, pr);
      // O = D(P) V
      tile_product_cols<Arch, false>(rows, d, kmax, P, plan.Sp, Vp, O + t0 * ldo, ldo,
                                     Epilogue{1.0f, 0.0f, nullptr}, w + plan.tile, pr);
    }
  });
}

template <class Arch>
void attention_backward(float* dq, float* dk, float* dv, const float* dout, const Attention& a) {
  if (a.B <= 0 || a.H <= 0 || a.T <= 0 || a.S <= 0 || a.d_head <= 0 || (!dq && !dk && !dv)) return;
  const int64_t T = a.T, S = a.S, d = a.d_head, ldo = a.H * d;
  const AttentionPlan<Arch> plan(a, true);
  const AttentionGrads grads{dout, dq, dk, dv};
  for_each_head<Arch>(a, plan.total, [&](int64_t pair, float* w) {
    const int64_t b = pair / a.H, h = pair % a.H, Sp = plan.Sp;
    const float* Q = a.q + b * a.q_batch + h * d;
    const float* K = a.k + b * a.kv_batch + h * d;
    const float* V = a.v + b * a.kv_batch + h * d;
    const float* dO = dout + b * T * ldo + h * d;
    float *const P = w + plan.p, *const dP = w + plan.dp;
    float* const DP = plan.drop ? w + plan.dsp : P;           // D(P) (P itself without dropout)
    float* const keep = plan.drop ? w + plan.keep : nullptr;  // D's mask, as 1 and 0
    float* const tmp = w + plan.tile;
    const Products pr = products<Arch>(a, w + plan.atmp);
    const Panels Kt = pack_panels<Arch>(w + plan.kt, K, a.ldk, true, d, S, pr);  // K^T: d x S
    const Panels Vt = dq || dk ? pack_panels<Arch>(w + plan.vt, V, a.ldv, true, d, S, pr) : Panels{};
    const Panels Kp = dq ? pack_panels<Arch>(w + plan.kp, K, a.ldk, false, S, d, pr) : Panels{};
    float* const dQ = dq ? dq + b * a.q_batch + h * d : nullptr;
    float* const dK = dk ? dk + b * a.kv_batch + h * d : nullptr;
    float* const dV = dv ? dv + b * a.kv_batch + h * d : nullptr;
    const Epilogue add{1.0f, 1.0f, nullptr}, add_scaled{a.scale, 1.0f, nullptr};
    const int64_t blocks = (T + plan.tb - 1) / plan.tb;
    for (int64_t t0 = 0; t0 < T; t0 += plan.tb) {
      const int64_t rows = std::min(plan.tb, T - t0), kmax = attention_kmax(a, t0, rows);
      prefetch_pair(a, &grads, pair + 1, t0 / plan.tb, blocks);
      if (kmax == 0) continue;  // P = 0 on these rows: no gradient flows through them
      attention_block_probs<Arch>(P, DP, keep, a, plan, Q, Kt, w + plan.row, b, h, t0, rows, kmax, pr);
      // dV += D(P)^T dO
      if (dV) {
        const Panels dOp = pack_panels<Arch>(w + plan.dop, dO + t0 * ldo, ldo, false, rows, d, pr);
        tile_product_cols<Arch, true>(kmax, d, rows, DP, Sp, dOp, dV, a.ldv, add, tmp, pr);
      }
      if (!dQ && !dK) continue;
      // dP = D(dO Vt), then dS = P * (dP - rowsum(dP * P)) in place
      tile_product<Arch, false>(rows, round_up_to<Arch>(kmax, GemmTraits<Arch>::NR), d, dO + t0 * ldo, ldo,
                                Vt, dP, Sp, Epilogue{1.0f, 0.0f, nullptr}, pr);
      for (int64_t r = 0; r < rows; ++r) {
        float* const g = dP + r * Sp;
        if (plan.drop) dropout_keep_row<Arch>(g, g, keep + r * Sp, kmax, a.drop_scale);
        softmax_backward_row<Arch>(g, g, P + r * Sp, kmax, /*overwrite=*/true);
      }
      // dQ += scale dS K
      if (dQ)
        tile_product_cols<Arch, false>(rows, d, kmax, dP, Sp, Kp, dQ + t0 * a.ldq, a.ldq, add_scaled, tmp,
                                       pr);
      // dK += scale dS^T Q
      if (dK) {
        const Panels Qp = pack_panels<Arch>(w + plan.qp, Q + t0 * a.ldq, a.ldq, false, rows, d, pr);
        tile_product_cols<Arch, true>(kmax, d, rows, dP, Sp, Qp, dK, a.ldk, add_scaled, tmp, pr);
      }
    }
  });
}

}  // namespace tg::ops::simd
