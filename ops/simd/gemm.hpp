// GEMM, BLIS-style: C = alpha * op(A) * op(B) + beta * C (see Gemm in ops/kernels.hpp).
//
// The product is cut into blocks that fit the caches, B's block is copied ("packed") into the
// order the micro-kernel reads it, and an MR x NR register tile of C is computed per micro-kernel
// call:
//
//   loop 5  jc: columns of C in blocks of NC        (B block KC x NC lives in L3)
//   loop 4  pc: the K dimension in blocks of KC      -> pack B[pc, jc] into NR-column panels
//   loop 3  ic: rows of C in blocks of MC            (A block MC x KC, read in place, stays in L2)
//   loop 2  jr: one NR-column panel of B             (B micro-panel KC x NR stays in L1)
//   loop 1  ir: one MR-row panel of A                -> micro-kernel on C[ir:ir+MR, jr:jr+NR]
//
// Packing reads op(B) through ldb and the transpose flag, so a transposed operand costs nothing
// beyond the copy every operand gets anyway (a transposed panel is gathered L columns at a time
// where the ISA has gathers). A is not packed: micro_kernel_direct reads MR-row panels of op(A) in
// place through lda (a last partial panel at its own height; a transposed A with a long lda is the
// exception, packed per MC x KC block, see pack_a_block), and few-row products read B in
// place too (direct_b). Only edge column tiles (N not a multiple of NR) go through packed,
// zero-padded panels and a small temporary tile. alpha, beta and the optional bias are applied
// when a tile is stored (Epilogue).
//
// Threads: a large GEMM shares one packed B block and splits loop 3 (and, when M is too small to
// keep every thread busy, loop 2) across threads. A few-row product with a long K (a weight
// gradient) splits K instead and adds the threads' partial products (gemm_split_k). A batch of
// small matrices is split across threads one matrix at a time, each thread multiplying its own.
#pragma once

#include <algorithm>
#include <utility>

#include "ops/kernels.hpp"
#include "ops/simd/common.hpp"
#include "ops/simd/gemm_traits.hpp"

namespace tg::ops::simd {

// Packs op(A)[0:mc, 0:kc] into ceil(mc / MR) panels. Panel p holds rows p*MR .. p*MR+MR-1
// k-major: dst[p*kc*MR + k*MR + i] = op(A)[p*MR + i, k]; rows past mc are 0.
// `a` points at op(A)[0, 0] of the block.
template <class Arch>
void pack_a(float* dst, const float* a, int64_t lda, bool trans, int64_t mc, int64_t kc) {
  constexpr int MR = GemmTraits<Arch>::MR;
  if (trans) {  // op(A)[i, k] = a[k * lda + i]: stored row k is column k of op(A), read once, in order
    for (int64_t k = 0; k < kc; ++k) {
      const float* src = a + k * lda;
      for (int64_t p0 = 0; p0 < mc; p0 += MR) {
        float* d = dst + p0 * kc + k * MR;  // panel p0 / MR starts at (p0 / MR) * kc * MR
        const int64_t rows = std::min<int64_t>(MR, mc - p0);
        int64_t i = 0;
        for (; i < rows; ++i) d[i] = src[p0 + i];
        for (; i < MR; ++i) d[i] = 0.0f;
      }
    }
    return;
  }
  for (int64_t p0 = 0; p0 < mc; p0 += MR, dst += kc * MR) {
    const int64_t rows = std::min<int64_t>(MR, mc - p0);
    // op(A)[i, k] = a[i * lda + k]: read each row contiguously, write with stride MR
    for (int64_t i = 0; i < MR; ++i) {
      if (i < rows) {
        const float* src = a + (p0 + i) * lda;
        for (int64_t k = 0; k < kc; ++k) dst[k * MR + i] = src[k];
      } else {
        for (int64_t k = 0; k < kc; ++k) dst[k * MR + i] = 0.0f;
      }
    }
  }
}

// Packs op(B)[0:kc, 0:nc] into ceil(nc / NR) panels: dst[p*kc*NR + k*NR + j] = op(B)[k, p*NR + j],
// columns past nc are 0. `b` points at op(B)[0, 0] of the block. Panels [p_lo, p_hi) only, so
// threads can share the work.
template <class Arch>
void pack_b(float* dst, const float* b, int64_t ldb, bool trans, int64_t kc, int64_t nc, int64_t p_lo,
            int64_t p_hi) {
  using V = Vec<Arch>;
  constexpr int NR = GemmTraits<Arch>::NR;
  constexpr int L = V::size;
  for (int64_t p = p_lo; p < p_hi; ++p) {
    float* d = dst + p * kc * NR;
    const int64_t j0 = p * NR, cols = std::min<int64_t>(NR, nc - j0);
    if constexpr (GemmTraits<Arch>::gather_b) {
      if (trans && cols == NR && ldb <= INT32_MAX / NR) {
        // op(B)[k, j] = b[j * ldb + k]: row k of the panel is column k of NR stored rows, one
        // vector gather per L of them (half the instructions of element copies on AVX2 / AVX-512)
        using I = xsimd::batch<int32_t, Arch>;
        alignas(64) int32_t lane[L];
        for (int l = 0; l < L; ++l) lane[l] = static_cast<int32_t>(l * ldb);
        const I idx = I::load_aligned(lane);
        for (int64_t k = 0; k < kc; ++k)
          for (int v = 0; v < NR; v += L)
            V::gather(b + (j0 + v) * ldb + k, idx).store_aligned(d + k * NR + v);
        continue;
      }
    }
    if (trans) {  // op(B)[k, j] = b[j * ldb + k]
      for (int64_t j = 0; j < NR; ++j) {
        if (j < cols) {
          const float* src = b + (j0 + j) * ldb;
          for (int64_t k = 0; k < kc; ++k) d[k * NR + j] = src[k];
        } else {
          for (int64_t k = 0; k < kc; ++k) d[k * NR + j] = 0.0f;
        }
      }
    } else if (cols == NR) {  // op(B)[k, j] = b[k * ldb + j]: whole rows of the panel, vector copies
      for (int64_t k = 0; k < kc; ++k)
        for (int v = 0; v < NR; v += L) V::load_unaligned(b + k * ldb + j0 + v).store_aligned(d + k * NR + v);
    } else {
      for (int64_t k = 0; k < kc; ++k) {
        int64_t j = 0;
        for (; j < cols; ++j) d[k * NR + j] = b[k * ldb + j0 + j];
        for (; j < NR; ++j) d[k * NR + j] = 0.0f;
      }
    }
  }
}

// How a tile is stored: C := alpha * acc + beta * C (+ bias[j] on every row when bias is not
// null; beta == 0: C is only written, never read). Later K blocks of one product store with
// beta = 1 and no bias.
struct Epilogue {
  float alpha = 1.0f, beta = 0.0f;
  const float* bias = nullptr;  // at the tile's first column
};

// The micro-kernels' store of an MR x NR register tile, whole vectors.
template <class Arch, int MR>
inline void store_tile(Vec<Arch> (&acc)[MR][GemmTraits<Arch>::NV], float* c, int64_t ldc, const Epilogue& e) {
  using V = Vec<Arch>;
  constexpr int NV = GemmTraits<Arch>::NV, L = V::size;
  const float beta = e.beta, *const bias = e.bias;
  if (e.alpha != 1.0f) {
    const V va(e.alpha);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[i][v] *= va;
  }
  if (bias) {
    V bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) bv[v] = V::load_unaligned(bias + v * L);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[i][v] += bv[v];
  }
  const V vbeta(beta);
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      float* ci = c + i * ldc + v * L;
      if (beta == 0.0f)
        acc[i][v].store_unaligned(ci);
      else if (beta == 1.0f)
        (acc[i][v] + V::load_unaligned(ci)).store_unaligned(ci);
      else
        xsimd::fma(vbeta, V::load_unaligned(ci), acc[i][v]).store_unaligned(ci);
    }
  }
}

// The micro-kernel. Contract: a is one packed MR x kc panel of A (64-byte aligned, layout of
// pack_a), b a kc x NR panel of B whose rows are b_step apart (NR for a packed panel; ldb when B
// is read in place, see gemm_single), c an MR x NR tile with row stride ldc:
//   C := alpha * A_panel * B_panel + beta * C (+ bias), as Epilogue e says
// The MR x NR accumulators live in registers (MR * NR / lanes of them); per k it loads NR/lanes
// vectors of B, broadcasts MR values of A and issues MR * NR / lanes FMAs.
template <class Arch>
void micro_kernel(int64_t kc, const float* __restrict a, const float* __restrict b, int64_t b_step, float* c,
                  int64_t ldc, const Epilogue& e) {
  using V = Vec<Arch>;
  constexpr int MR = GemmTraits<Arch>::MR, NV = GemmTraits<Arch>::NV;
  constexpr int L = V::size;
  V acc[MR][NV];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[i][v] = V(0.0f);
      // C's tile is needed after the K loop: start fetching it now (one line per row and vector)
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) __builtin_prefetch(c + i * ldc + v * L, 1);
#pragma GCC unroll 4
  for (int64_t k = 0; k < kc; ++k, a += MR, b += b_step) {
    V bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) bv[v] = V::load_unaligned(b + v * L);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const V ai(a[i]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[i][v] = xsimd::fma(ai, bv[v], acc[i][v]);
    }
  }
  store_tile<Arch, MR>(acc, c, ldc, e);
}

// The micro-kernel reading A in place instead of from a packed panel. kTrans: op(A)[i, k] = a[k * lda + i] (A
// stored K x M: the MR values of one k are contiguous, as in a packed panel but lda apart from one k to the
// next); otherwise op(A)[i, k] = a[i * lda + k] (MR rows, each read along k). Skipping pack_a saves a write
// and a re-read of every element of A; the rows of one MR x kc block stay in L1 across the NR panels. MR: the
// tile's rows, GemmTraits' MR but for the last row panel of A (fewer rows, no padding).
template <class Arch, bool kTrans, int MR = GemmTraits<Arch>::MR>
void micro_kernel_direct(int64_t kc, const float* __restrict a, int64_t lda, const float* __restrict b,
                         int64_t b_step, float* c, int64_t ldc, const Epilogue& e) {
  using V = Vec<Arch>;
  constexpr int NV = GemmTraits<Arch>::NV;
  constexpr int L = V::size;
  V acc[MR][NV];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[i][v] = V(0.0f);
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) __builtin_prefetch(c + i * ldc + v * L, 1);
  const int64_t step_k = kTrans ? lda : 1, step_i = kTrans ? 1 : lda;
#pragma GCC unroll 4
  for (int64_t k = 0; k < kc; ++k, a += step_k, b += b_step) {
    V bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) bv[v] = V::load_unaligned(b + v * L);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const V ai(a[i * step_i]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[i][v] = xsimd::fma(ai, bv[v], acc[i][v]);
    }
  }
  store_tile<Arch, MR>(acc, c, ldc, e);
}

// micro_kernel_direct for the last row panel, mr (< MR) rows: one instantiation per row count.
template <class Arch, bool kTrans, int... Rows>
void micro_kernel_direct_rows(int64_t mr, std::integer_sequence<int, Rows...>, int64_t kc, const float* a,
                              int64_t lda, const float* b, int64_t b_step, float* c, int64_t ldc,
                              const Epilogue& e) {
  (void)((mr == Rows + 1
              ? (micro_kernel_direct<Arch, kTrans, Rows + 1>(kc, a, lda, b, b_step, c, ldc, e), true)
              : false) ||
         ...);
}

// An edge tile (mr < MR or nr < NR): run the full micro-kernel into a temporary tile, then merge
// the valid part into C with the same epilogue (whole vectors while a row has them).
template <class Arch>
void edge_tile(int64_t kc, const float* a, const float* b, int64_t b_step, float* c, int64_t ldc,
               const Epilogue& e, int64_t mr, int64_t nr) {
  using V = Vec<Arch>;
  constexpr int MR = GemmTraits<Arch>::MR, NR = GemmTraits<Arch>::NR, L = V::size;
  alignas(64) float tile[MR * NR];
  micro_kernel<Arch>(kc, a, b, b_step, tile, NR, Epilogue{e.alpha, 0.0f, nullptr});
  const float beta = e.beta;
  for (int64_t i = 0; i < mr; ++i) {
    float* t = tile + i * NR;
    if (e.bias)
      for (int64_t j = 0; j < nr; ++j) t[j] += e.bias[j];
    float* ci = c + i * ldc;
    int64_t j = 0;
    for (; j + L <= nr; j += L) {
      const V tv = V::load_aligned(t + j);
      (beta == 0.0f ? tv : xsimd::fma(V(beta), V::load_unaligned(ci + j), tv)).store_unaligned(ci + j);
    }
    for (; j < nr; ++j) ci[j] = beta == 0.0f ? t[j] : beta * ci[j] + t[j];
  }
}

// C = beta * C (+ bias) when K == 0 (the product is empty); beta == 0 writes zeros.
template <class Arch>
void scale_c(float* c, int64_t M, int64_t N, int64_t ldc, float beta, const float* bias) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j)
      c[i * ldc + j] = (beta == 0.0f ? 0.0f : beta * c[i * ldc + j]) + (bias ? bias[j] : 0.0f);
}

// gemm_single reads B in place (no packing) when M is at most this; see direct_b there.
inline constexpr int64_t kDirectBMaxM = 128;

// gemm_single packs a transposed A (stored K x M) when lda is at least this many floats; see
// pack_a_block there.
inline constexpr int64_t kPackTransALda = 512;

// One GEMM (one batch entry), loops 5..1. With `threaded`, the calling thread opens an OpenMP
// region and the threads share the packed B block; otherwise everything runs on the calling thread.
template <class Arch>
void gemm_single(float* C, const float* A, const float* B, const Gemm& g, bool threaded) {
  using T = GemmTraits<Arch>;
  constexpr int64_t MR = T::MR, NR = T::NR;
  if (g.M <= 0 || g.N <= 0) return;
  if (g.K <= 0) return scale_c<Arch>(C, g.M, g.N, g.ldc, g.beta, g.bias);
  const int nthreads = threaded ? omp_get_max_threads() : 1;

  // Loop 3 block size: as many blocks as MC asks for, but evened out (and a multiple of the thread
  // count) so the last block is not a sliver and threads get equal work.
  int64_t n_ic = (g.M + T::MC - 1) / T::MC;
  if (nthreads > 1 && n_ic > 1) n_ic = (n_ic + nthreads - 1) / nthreads * nthreads;
  const int64_t mc = ((g.M + n_ic - 1) / n_ic + MR - 1) / MR * MR;
  n_ic = (g.M + mc - 1) / mc;
  const int64_t kc_max = std::min<int64_t>(T::KC, g.K), nc_max = std::min<int64_t>(T::NC, g.N);
  float* bp = scratch<Arch, Slot::gemm_b>(static_cast<std::size_t>(kc_max * ((nc_max + NR - 1) / NR * NR)));

  // Loops 5..1 as run by one thread. `shared`: called by every thread of a parallel region, which
  // split the B packing and the loop 3 x loop 2 work items; otherwise no OpenMP construct at all
  // (a team of one still costs runtime calls, noticeable on a batch of small matrices).
  // The micro-kernels read A in place (MR-row panels, and a last partial panel at its own height);
  // only that partial panel is packed, and only when an edge column tile (nr < NR) needs it.
  // Few rows (attention heads: M = a sequence length): a packed B panel would be read by only a few
  // MR-row panels of A, so packing it costs about as much as the multiply. When op(B) = B (each
  // k is a contiguous row) and N is whole NR-column panels, the micro-kernels read B in place,
  // one row of NR values per k, ldb apart.
  const bool direct_b = !g.trans_b && g.N % NR == 0 && g.M <= kDirectBMaxM;
  // A transposed (stored K x M) and read in place: one MR-wide row piece per k, lda apart. With a
  // long lda (>= 2 KiB) the kc rows of a panel lie on up to kc different pages, more than the L1
  // TLB maps, and the panel is re-read for every NR panel of B (a weight gradient dW = X^T dY with
  // 1024-wide X ran at 58% of the AVX2 peak). Then the whole MC x KC block is packed once (BLIS's
  // packing of A), reading each stored row once, and every NR panel reads it contiguously.
  const bool pack_a_block = g.trans_a && g.lda >= kPackTransALda && g.N > NR;
  auto run = [&](bool shared) {
    float* ap = scratch<Arch, Slot::gemm_a>(static_cast<std::size_t>(kc_max * mc));
    for (int64_t jc = 0; jc < g.N; jc += T::NC) {  // loop 5
      const int64_t nc = std::min<int64_t>(T::NC, g.N - jc);
      const int64_t n_panels = (nc + NR - 1) / NR;
      // Work items of loop 3 x loop 2: n_ic row blocks times n_jr column chunks, enough items for
      // every thread (repacking A per column chunk costs 1/chunk-width of the multiply).
      const int64_t n_jr =
          nthreads > 1 ? std::clamp<int64_t>((4 * nthreads + n_ic - 1) / n_ic, 1, n_panels) : 1;
      const int64_t panels_per_chunk = (n_panels + n_jr - 1) / n_jr;
      for (int64_t pc = 0; pc < g.K; pc += T::KC) {  // loop 4
        const int64_t kc = std::min<int64_t>(T::KC, g.K - pc);
        const float beta = pc == 0 ? g.beta : 1.0f;  // later K blocks accumulate onto the first
        const float* bias = pc == 0 && g.bias ? g.bias + jc : nullptr;  // added with the first K block
        const float* b = g.trans_b ? B + jc * g.ldb + pc : B + pc * g.ldb + jc;
        int64_t packed_ic = -1;
        auto work_item = [&](int64_t item) {
          const int64_t ic = (item / n_jr) * mc;  // loop 3
          const int64_t mcb = std::min<int64_t>(mc, g.M - ic);
          const float* a_blk = g.trans_a ? A + pc * g.lda + ic : A + ic * g.lda + pc;
          const int64_t full_rows = mcb / MR * MR;  // rows in whole MR panels
          if (ic != packed_ic) {
            if (pack_a_block)  // the whole block
              pack_a<Arch>(ap, a_blk, g.lda, true, mcb, kc);
            else if (full_rows < mcb && g.N % NR != 0)  // the partial panel, for the corner tiles
              pack_a<Arch>(ap + full_rows * kc, g.trans_a ? a_blk + full_rows : a_blk + full_rows * g.lda,
                           g.lda, g.trans_a, mcb - full_rows, kc);
            packed_ic = ic;
          }
          const int64_t p_lo = (item % n_jr) * panels_per_chunk;
          const int64_t p_hi = std::min(n_panels, p_lo + panels_per_chunk);
          for (int64_t p = p_lo; p < p_hi; ++p) {  // loop 2
            const int64_t jr = p * NR, nr = std::min<int64_t>(NR, nc - jr);
            const float* bpanel = direct_b ? b + jr : bp + p * kc * NR;
            const int64_t b_step = direct_b ? g.ldb : NR;
            const Epilogue e{g.alpha, beta, bias ? bias + jr : nullptr};
            for (int64_t ir = 0; ir < mcb; ir += MR) {  // loop 1
              const int64_t mr = std::min<int64_t>(MR, mcb - ir);
              float* c = C + (ic + ir) * g.ldc + jc + jr;
              if (pack_a_block) {  // A from its packed panel; edge tiles through a temporary
                if (nr == NR && mr == MR)
                  micro_kernel<Arch>(kc, ap + ir * kc, bpanel, b_step, c, g.ldc, e);
                else
                  edge_tile<Arch>(kc, ap + ir * kc, bpanel, b_step, c, g.ldc, e, mr, nr);
                continue;
              }
              const float* a_in_place = g.trans_a ? a_blk + ir : a_blk + ir * g.lda;
              if (nr == NR && mr == MR) {  // a full tile, A in place
                if (g.trans_a)
                  micro_kernel_direct<Arch, true>(kc, a_in_place, g.lda, bpanel, b_step, c, g.ldc, e);
                else
                  micro_kernel_direct<Arch, false>(kc, a_in_place, g.lda, bpanel, b_step, c, g.ldc, e);
              } else if (nr == NR) {  // the last, partial row panel, in place at its own height
                constexpr auto rows = std::make_integer_sequence<int, MR - 1>{};
                if (g.trans_a)
                  micro_kernel_direct_rows<Arch, true>(mr, rows, kc, a_in_place, g.lda, bpanel, b_step, c,
                                                       g.ldc, e);
                else
                  micro_kernel_direct_rows<Arch, false>(mr, rows, kc, a_in_place, g.lda, bpanel, b_step, c,
                                                        g.ldc, e);
              } else if (mr == MR) {  // an edge column tile of a full row panel: pack that panel
                float* tmp = scratch<Arch, Slot::gemm_edge>(static_cast<std::size_t>(kc * MR));
                pack_a<Arch>(tmp, a_in_place, g.lda, g.trans_a, MR, kc);
                edge_tile<Arch>(kc, tmp, bpanel, b_step, c, g.ldc, e, mr, nr);
              } else {  // the corner: the partial row panel, packed once per row block
                edge_tile<Arch>(kc, ap + ir * kc, bpanel, b_step, c, g.ldc, e, mr, nr);
              }
            }
          }
        };
        if (shared) {
#pragma omp for schedule(static)
          for (int64_t p = 0; p < (direct_b ? 0 : n_panels); ++p)
            pack_b<Arch>(bp, b, g.ldb, g.trans_b, kc, nc, p, p + 1);
            // (implicit barrier: B is packed)
#pragma omp for schedule(dynamic, 1)
          for (int64_t item = 0; item < n_ic * n_jr; ++item) work_item(item);
          // (implicit barrier: nobody still reads bp when the next K block repacks it)
        } else {
          if (!direct_b) pack_b<Arch>(bp, b, g.ldb, g.trans_b, kc, nc, 0, n_panels);
          for (int64_t item = 0; item < n_ic * n_jr; ++item) work_item(item);
        }
      }
    }
  };
  if (nthreads > 1) {
#pragma omp parallel num_threads(nthreads)
    run(true);
  } else {
    run(false);
  }
}

// Few rows (M <= kSmallM: one decoding step's projections, attention of one new query): packing
// op(B) would cost more than the product, so each row of C is computed straight from the operands.
//  - op(B) = B^T stored N x K (a Linear weight): C[i, j] is a dot product of two contiguous
//    K-vectors; four columns at a time for independent accumulators.
//  - op(B) = B stored K x N: C[i, :] accumulates rows of B scaled by op(A)[i, k] (axpy), in a
//    scratch row, then merged into C with alpha, beta and the bias (as is each dot product).
inline constexpr int64_t kSmallM = 4;

template <class Arch>
void gemm_small_m(float* C, const float* A, const float* B, const Gemm& g) {
  using V = Vec<Arch>;
  constexpr int64_t L = V::size;
  const int64_t M = g.M, N = g.N, K = g.K;
  float* arow = scratch<Arch, Slot::gemm_a>(static_cast<std::size_t>(K + (g.trans_b ? 0 : N)));
  float* acc = arow + K;  // the accumulated row (non-transposed B only)
  for (int64_t i = 0; i < M; ++i) {
    const float* a = A + i * g.lda;
    if (g.trans_a) {  // op(A)[i, k] = A[k * lda + i]: gather the row
      for (int64_t k = 0; k < K; ++k) arow[k] = A[k * g.lda + i];
      a = arow;
    }
    float* c = C + i * g.ldc;
    auto store = [&](int64_t j, float v) {
      c[j] = g.alpha * v + (g.beta == 0.0f ? 0.0f : g.beta * c[j]) + (g.bias ? g.bias[j] : 0.0f);
    };
    if (g.trans_b) {
      int64_t j = 0;
      for (; j + 4 <= N; j += 4) {
        const float *b0 = B + j * g.ldb, *b1 = b0 + g.ldb, *b2 = b1 + g.ldb, *b3 = b2 + g.ldb;
        V s0(0.0f), s1(0.0f), s2(0.0f), s3(0.0f);
        int64_t k = 0;
        for (; k + L <= K; k += L) {
          const V av = V::load_unaligned(a + k);
          s0 = xsimd::fma(av, V::load_unaligned(b0 + k), s0);
          s1 = xsimd::fma(av, V::load_unaligned(b1 + k), s1);
          s2 = xsimd::fma(av, V::load_unaligned(b2 + k), s2);
          s3 = xsimd::fma(av, V::load_unaligned(b3 + k), s3);
        }
        float t0 = hsum<Arch>(s0), t1 = hsum<Arch>(s1), t2 = hsum<Arch>(s2), t3 = hsum<Arch>(s3);
        for (; k < K; ++k) t0 += a[k] * b0[k], t1 += a[k] * b1[k], t2 += a[k] * b2[k], t3 += a[k] * b3[k];
        store(j, t0), store(j + 1, t1), store(j + 2, t2), store(j + 3, t3);
      }
      for (; j < N; ++j) {
        const float* bj = B + j * g.ldb;
        V s(0.0f);
        int64_t k = 0;
        for (; k + L <= K; k += L) s = xsimd::fma(V::load_unaligned(a + k), V::load_unaligned(bj + k), s);
        float t = hsum<Arch>(s);
        for (; k < K; ++k) t += a[k] * bj[k];
        store(j, t);
      }
    } else {
      std::fill_n(acc, N, 0.0f);
      for (int64_t k = 0; k < K; ++k) {
        const V av(a[k]);
        const float* bk = B + k * g.ldb;
        int64_t j = 0;
        for (; j + L <= N; j += L)
          xsimd::fma(av, V::load_unaligned(bk + j), V::load_unaligned(acc + j)).store_unaligned(acc + j);
        for (; j < N; ++j) acc[j] += a[k] * bk[j];
      }
      for (int64_t j = 0; j < N; ++j) store(j, acc[j]);
    }
  }
}

// Few rows and columns but a long K (a weight gradient dW = dY^T X: M, N = layer widths, K = the
// batch's rows): one or two row blocks cannot keep every thread busy, and splitting columns makes
// threads repack A. Instead each thread takes a contiguous range of whole KC blocks of K and runs
// the one-thread GEMM on it: thread 0 into C (with beta and bias), thread t > 0 into a scratch
// product; then the threads add the scratch products into C, split by rows.
template <class Arch>
bool split_k_pays(const Gemm& g, int nthreads) {
  using T = GemmTraits<Arch>;
  return nthreads > 1 && g.M <= 2 * T::MC && g.K >= 2 * nthreads * T::KC && g.M * g.N <= (int64_t{1} << 22);
}

template <class Arch>
void gemm_split_k(float* C, const float* A, const float* B, const Gemm& g, int nthreads) {
  using T = GemmTraits<Arch>;
  const int64_t M = g.M, N = g.N, mn = M * N;
  const int64_t blocks = (g.K + T::KC - 1) / T::KC;
  float* partial = scratch<Arch, Slot::gemm_split>(static_cast<std::size_t>((nthreads - 1) * mn));
#pragma omp parallel num_threads(nthreads)
  {
    // The team may be smaller than asked (OMP_DYNAMIC, thread limits): split K by its real size.
    const int nt = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t chunk = (blocks + nt - 1) / nt * T::KC;  // K per thread, whole KC blocks
    const int64_t k0 = std::min(g.K, t * chunk), k1 = std::min(g.K, k0 + chunk);
    Gemm gt = g;
    gt.K = k1 - k0;  // K == 0: C (or the scratch) gets beta * C, i.e. zeros for the scratch
    gt.batch = 1;
    const float* a = g.trans_a ? A + k0 * g.lda : A + k0;
    const float* b = g.trans_b ? B + k0 : B + k0 * g.ldb;
    if (t == 0) {
      gemm_single<Arch>(C, a, b, gt, false);
    } else {
      gt.beta = 0.0f, gt.bias = nullptr, gt.ldc = N;
      gemm_single<Arch>(partial + (t - 1) * mn, a, b, gt, false);
    }
#pragma omp barrier
#pragma omp for schedule(static)
    for (int64_t i = 0; i < M; ++i)
      for (int s = 1; s < nt; ++s)
        for (int64_t j = 0; j < N; ++j) C[i * g.ldc + j] += partial[(s - 1) * mn + i * N + j];
  }
}

// The KernelTable entry: the batch loop. Small matrices in a batch (attention heads) go one per
// thread; large ones are threaded inside.
template <class Arch>
void gemm(float* C, const float* A, const float* B, const Gemm& g) {
  validate(g);
  const double macs = static_cast<double>(g.M) * static_cast<double>(g.N) * static_cast<double>(g.K);
  const int max_threads = omp_get_max_threads();
  const bool nested = omp_in_parallel() != 0;
  // Below ~1M multiply-adds (a few microseconds on one core) waking a second thread and the barriers
  // cost more than they save (64^3 measured 249 GFLOP/s on 1 AVX-512 thread, 120-230 on 2).
  const bool thread_inside = !nested && max_threads > 1 && macs >= 1.0e6;
  // stride_c == 0 makes every entry update the same C (a sum over the batch when beta == 1): that
  // must stay sequential.
  const bool thread_batch = !nested && max_threads > 1 && g.stride_c != 0 && g.batch >= max_threads &&
                            (g.batch >= 4 * max_threads || macs < 4.0e6);
  if (g.M <= kSmallM && g.M > 0 && g.N > 0 && g.K > 0) {
    if (thread_batch) {
#pragma omp parallel for schedule(static)
      for (int64_t b = 0; b < g.batch; ++b)
        gemm_small_m<Arch>(C + b * g.stride_c, A + b * g.stride_a, B + b * g.stride_b, g);
    } else {
      for (int64_t b = 0; b < g.batch; ++b)
        gemm_small_m<Arch>(C + b * g.stride_c, A + b * g.stride_a, B + b * g.stride_b, g);
    }
  } else if (thread_batch) {
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < g.batch; ++b)
      gemm_single<Arch>(C + b * g.stride_c, A + b * g.stride_a, B + b * g.stride_b, g, false);
  } else if (thread_inside && split_k_pays<Arch>(g, max_threads)) {
    for (int64_t b = 0; b < g.batch; ++b)
      gemm_split_k<Arch>(C + b * g.stride_c, A + b * g.stride_a, B + b * g.stride_b, g, max_threads);
  } else {
    for (int64_t b = 0; b < g.batch; ++b)
      gemm_single<Arch>(C + b * g.stride_c, A + b * g.stride_a, B + b * g.stride_b, g, thread_inside);
  }
}

}  // namespace tg::ops::simd
