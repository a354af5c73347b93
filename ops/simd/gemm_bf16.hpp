// bf16 GEMM driver: C (fp32) = alpha * op(A) op(B) + beta * C (+ bias), op(A) and op(B) each fp32
// (rounded to bf16 as it is packed) or bf16 storage (see KernelTable::gemm_bf16).
//
// The loops are the fp32 GEMM's (ops/simd/gemm.hpp, BLIS loops 5..1), simpler: both operands are
// packed, since each must be converted anyway (fp32 rounded to bf16, or bf16 rearranged for the
// instruction). One exception, on the widen kernel only (K::few_rows_path): ops::bf16_few_rows, a
// few rows against a transposed bf16 B, read in place by gemm_small.hpp's dot tiles. The kernel K
// decides the packed layouts and the micro-kernel; this driver is generic over it:
//   WidenKernel<Arch>  (gemm_bf16_widen.hpp)  every arch: bf16 widened to fp32, fp32 micro-kernel
//   Avx512DotKernel    (gemm_bf16_avx512.hpp) vdpbf16ps, K packed in pairs
//   NeonDotKernel      (gemm_bf16_neon.hpp)   BFMMLA, K packed in fours
//   AmxKernel<Tiles>   (gemm_bf16_amx.hpp)    AMX TDPBF16PS, 1 KiB tiles in steps of 32 k
// A dot-product kernel lives in its own TU compiled with the bf16 flags, in an anonymous
// namespace: every instantiation of this driver with it has internal linkage, so no function
// compiled with those flags can stand in for another arch's copy at link time.
//
// K provides:
//   few_rows_path                       whether this driver takes the few-row path (then K::Arch, the
//                                       xsimd arch of its TU); false for the dot kernels, whose
//                                       tables send those products to the widen table instead
//   MR, NR, MC, KC, NC                  block sizes as in GemmTraits; KC a multiple of K's k group
//   split_2d                            when a threaded product is cut into a grid of one-thread
//                                       products (bf16_split_2d) instead of sharing packed B panels:
//                                       Split2d::always, never, or few_row_blocks (where the shared
//                                       path would have every thread pack the same A block)
//   grid_tile_cost, grid_pack_cost      grid_2d's cost per k of one MR x NR tile multiplied and of one
//                                       element packed (only with split_2d other than never)
//   begin_thread()                      called by each thread before its first tile of a product (AMX
//                                       loads its tile configuration there; others do nothing)
//   a_block_floats(mc, kc)              4-byte units of a packed mc x kc block of op(A)
//   ABlock pack_a(dst, a, lda, trans, mc, kc)
//                                       packs op(A)[0:mc, 0:kc] (`a` is at op(A)[0, 0]) into dst, or
//                                       not, when the kernel can read it in place; ABlock says
//                                       where tile() finds the block
//   b_panel_floats(kc)                  4-byte units of one packed kc x NR panel of op(B)
//   pack_b(dst, b, ldb, trans, kc, nc, p_lo, p_hi)
//                                       packs panels [p_lo, p_hi) of op(B)[0:kc, 0:nc], panel p at
//                                       dst + p * b_panel_floats(kc); columns past nc are 0
//   tile(ablock, ir, kc, bpanel, c, ldc, alpha, beta, bias, mr, nr)
//                                       C[0:mr, 0:nr] := alpha * (rows ir.. of the A block) (the
//                                       panel) + beta * C (+ bias[j]); beta == 0: C not read
#pragma once

#include <algorithm>
#include <cstddef>

#include "ops/kernels.hpp"
#include "ops/simd/common.hpp"
#include "ops/simd/gemm_micro.hpp"
#include "ops/simd/gemm_plan.hpp"
#include "ops/simd/gemm_small.hpp"
#include "ops/simd/gemm_traits.hpp"

namespace tg::ops::simd {

// An operand moved by `elems` elements of its own type.
template <class K>
Operand operand_at(const Operand& x, int64_t elems) {
  const std::size_t size = x.dtype == DType::bf16 ? 2 : 4;
  return {static_cast<const char*>(x.data) + elems * static_cast<int64_t>(size), x.dtype};
}

// f(p) with p the operand's elements as stored: const uint16_t* (bf16 bits) or const float*, for a
// packing routine written once for both (a kernel's lambda keeps the instantiation in its TU).
template <class F>
void with_storage(const Operand& x, F&& f) {
  if (x.dtype == DType::bf16)
    f(static_cast<const uint16_t*>(x.data));
  else
    f(static_cast<const float*>(x.data));
}

// What the driver decided for one product, and its workspace (4-byte units): the packed B block,
// then one packed A block per thread.
template <class K>
struct Bf16Plan {
  int nthreads = 1;
  int64_t mc = 0, n_ic = 0;  // loop 3: row-block height (a multiple of MR) and number of blocks
  std::size_t b_floats = 0, a_floats = 0;
  std::size_t workspace() const { return b_floats + static_cast<std::size_t>(nthreads) * a_floats; }
};

template <class K>
Bf16Plan<K> plan_bf16(const Gemm& g, int nthreads) {
  Bf16Plan<K> p;
  p.nthreads = nthreads;
  // as plan_single: MC-sized row blocks, evened out, a multiple of the thread count
  const RowBlocks rows = row_blocks<K>(g.M, K::MC, K::MR, nthreads);
  p.mc = rows.mc, p.n_ic = rows.n_ic;
  const int64_t kc_max = std::min<int64_t>(K::KC, g.K), nc_max = std::min<int64_t>(K::NC, g.N);
  p.b_floats = line_floats<K>((nc_max + K::NR - 1) / K::NR * K::b_panel_floats(kc_max));
  p.a_floats = line_floats<K>(K::a_block_floats(p.mc, kc_max));
  return p;
}

// Loop 4's current block (gemm_plan.hpp), with the size of one packed B panel.
template <class K>
struct Bf16Block : BlockPosition<K> {
  int64_t panel_floats = 0;
};

// The A block a thread holds for the current K block: its row block, where tile() reads it.
template <class K>
struct Bf16AState {
  int64_t ic = -1;  // none yet
  typename K::ABlock block{};
};

// Panels [p_lo, p_hi) of the current K block times the row block at ic: pack the row block's A
// (unless this thread holds it already), then loop 2 over the panels (panel p_lo packed at bp_lo,
// the next ones after it) and loop 1 over the block's MR-row tiles.
template <class K>
void bf16_panels(float* C, const Operand& A, const Gemm& g, const Bf16Plan<K>& plan, const Bf16Block<K>& kb,
                 int64_t ic, int64_t p_lo, int64_t p_hi, const float* bp_lo, float* ap, Bf16AState<K>& a) {
  const int64_t mcb = std::min<int64_t>(plan.mc, g.M - ic);
  if (ic != a.ic) {
    a.block = K::pack_a(ap, operand_at<K>(A, g.trans_a ? kb.pc * g.lda + ic : ic * g.lda + kb.pc), g.lda,
                        g.trans_a, mcb, kb.kc);
    a.ic = ic;
  }
  for (int64_t p = p_lo; p < p_hi; ++p) {  // loop 2
    const int64_t jr = p * K::NR, nr = std::min<int64_t>(K::NR, kb.nc - jr);
    const float* bpanel = bp_lo + (p - p_lo) * kb.panel_floats;
    const float* bias = kb.bias ? kb.bias + jr : nullptr;
    for (int64_t ir = 0; ir < mcb; ir += K::MR)  // loop 1
      K::tile(a.block, ir, kb.kc, bpanel, C + (ic + ir) * g.ldc + kb.jc + jr, g.ldc,
              std::min<int64_t>(K::MR, mcb - ir), nr, Epilogue{g.alpha, kb.beta, bias});
  }
}

// One work item of loops 3 x 2 on the packed B block: its row block, its chunk of panels.
template <class K>
void bf16_item(float* C, const Operand& A, const Gemm& g, const Bf16Plan<K>& plan, const Bf16Block<K>& kb,
               int64_t item, float* ap, Bf16AState<K>& a) {
  const int64_t ic = (item / kb.n_jr) * plan.mc;  // loop 3
  const int64_t p_lo = (item % kb.n_jr) * kb.panels_per_chunk;
  const int64_t p_hi = std::min(kb.n_panels, p_lo + kb.panels_per_chunk);
  bf16_panels<K>(C, A, g, plan, kb, ic, p_lo, p_hi, kb.bp + p_lo * kb.panel_floats, ap, a);
}

// Panels of B packed per call, at most: on the shared path, and on the one-row-block path below
// (where they are multiplied at once, while in L2).
constexpr int64_t kPackBPanelsPerCall = 4;

// Loops 5..1 as run by one thread; `shared` as in gemm_loops (gemm.hpp).
template <class K>
void bf16_loops(float* C, const Operand& A, const Operand& B, const Gemm& g, const Bf16Plan<K>& plan,
                float* ws, bool shared) {
  const int t = shared ? omp_get_thread_num() : 0;
  K::begin_thread();  // per thread and product: whatever state the kernel's instructions need
  float* bp = ws;
  float* ap = ws + plan.b_floats + static_cast<std::size_t>(t) * plan.a_floats;
  for (int64_t jc = 0; jc < g.N; jc += K::NC) {  // loop 5
    Bf16Block<K> kb;
    kb.at_columns(g, jc, K::NC, K::NR, plan.nthreads, plan.n_ic);
    kb.bp = bp;
    const int64_t n_items = plan.n_ic * kb.n_jr;
    for (int64_t pc = 0; pc < g.K; pc += K::KC) {  // loop 4
      kb.at_k(g, pc, K::KC);
      kb.panel_floats = K::b_panel_floats(kb.kc);
      const Operand b = operand_at<K>(B, g.trans_b ? jc * g.ldb + pc : pc * g.ldb + jc);
      Bf16AState<K> a_state;  // this thread holds no A block of this K block yet
      if (shared) {
        // a few panels per call where there are enough per thread (a kernel may read a stored row
        // across all the panels of a call: Avx512DotKernel's non-transposed B)
        const int64_t chunk = std::clamp<int64_t>(kb.n_panels / plan.nthreads, 1, kPackBPanelsPerCall);
#pragma omp for schedule(static) nowait
        for (int64_t p = 0; p < kb.n_panels; p += chunk)
          K::pack_b(bp, b, g.ldb, g.trans_b, kb.kc, kb.nc, p, std::min(p + chunk, kb.n_panels));
#pragma omp barrier  // B is packed before anyone multiplies with it
#pragma omp for schedule(dynamic, 1)
        for (int64_t item = 0; item < n_items; ++item) bf16_item<K>(C, A, g, plan, kb, item, ap, a_state);
        // (implicit barrier: nobody reads bp or a C tile of this K block when the next one starts)
      } else if (plan.n_ic == 1) {
        // One row block (M <= MC: a language model's 256-token products): each B panel is multiplied
        // once, so kPackBPanelsPerCall panels at a time are packed and multiplied while they are in
        // L2, rather than the whole block (up to NC / NR panels, 4 MiB at KC 512) packed out to L3
        // and read back. The same tiles in the same order: the same bits.
        for (int64_t p = 0; p < kb.n_panels; p += kPackBPanelsPerCall) {
          const int64_t p_hi = std::min(p + kPackBPanelsPerCall, kb.n_panels), j = p * K::NR;
          K::pack_b(bp, operand_at<K>(b, g.trans_b ? j * g.ldb : j), g.ldb, g.trans_b, kb.kc, kb.nc - j, 0,
                    p_hi - p);
          bf16_panels<K>(C, A, g, plan, kb, 0, p, p_hi, bp, ap, a_state);
        }
      } else {
        K::pack_b(bp, b, g.ldb, g.trans_b, kb.kc, kb.nc, 0, kb.n_panels);
        for (int64_t item = 0; item < n_items; ++item) bf16_item<K>(C, A, g, plan, kb, item, ap, a_state);
      }
    }
  }
}

// A 2-D split of one product across threads. The shared path packs each B panel on one core and
// has every thread read all of them, with two barriers per K block; here C is cut into tm x tn parts
// of whole MR rows and NR columns and each thread runs the one-thread GEMM on its part, packing only
// its own rows of A and columns of B and reading them from its own cache. A is packed once per
// column part and B once per row part: the grid is the one whose slowest part costs least, counting
// per k K::grid_tile_cost per MR x NR tile multiplied and K::grid_pack_cost per element packed.
// Which kernels split so (K::split_2d):
//   AMX always: one tile instruction does 16 x 16 x 32 multiply-adds, so packing (and rounding)
//     costs about as much as multiplying (tile 2 units: 64 cycles of TDPBF16PS per 32 k; packing 1/2).
//   vdpbf16ps where the rows are few (Split2d::few_row_blocks): fewer row blocks than
//     BlockPosition::kItemsPerThread per thread, where the shared path cuts each row block's
//     columns into items and every thread packs (converts) the same A block for each K block: the
//     weight gradients dW = dY^T x, 256-1,024 rows with K = the tokens. Zen 4, 2 threads, A/B
//     alternated per call: config M's six such shapes 0.74-0.99x the shared path's time (M256 N256
//     K4096 tn 0.74x); the 4,096-row products, 16 row blocks, 0.95-1.09x, so they keep sharing
//     (their threads balance dynamically on a host that takes cycles from one core). The rule is
//     the shared path's own (at_columns cuts row blocks into column items from fewer than
//     kItemsPerThread per thread), so it depends on the thread count: at 8 threads and more the
//     4,096-row products are cut into a grid too. Measured on 2 threads only.
enum class Split2d { never, always, few_row_blocks };
struct Grid2d {
  int tm = 1, tn = 1;
};
template <class K>
Grid2d grid_2d(const Gemm& g, int nthreads) {
  const int64_t row_tiles = (g.M + K::MR - 1) / K::MR, col_tiles = (g.N + K::NR - 1) / K::NR;
  auto cost = [](int64_t rt, int64_t ct) {
    return K::grid_tile_cost * static_cast<double>(rt * ct) +
           K::grid_pack_cost * static_cast<double>(rt * K::MR + ct * K::NR);
  };
  Grid2d best;
  double best_cost = cost(row_tiles, col_tiles);  // one thread
  for (int tm = 1; tm <= nthreads && tm <= row_tiles; ++tm) {
    const int tn = static_cast<int>(std::min<int64_t>(nthreads / tm, col_tiles));
    const double c = cost((row_tiles + tm - 1) / tm, (col_tiles + tn - 1) / tn);
    if (c < best_cost) best_cost = c, best = {tm, tn};
  }
  return best;
}

// Whether a product threaded over nthreads is cut into a grid (see above).
template <class K>
bool use_split_2d(const Gemm& g, int nthreads) {
  if constexpr (K::split_2d == Split2d::never) {
    return false;
  } else if constexpr (K::split_2d == Split2d::always) {
    return true;
  } else {
    const RowBlocks rows = row_blocks<K>(g.M, K::MC, K::MR, nthreads);
    return rows.n_ic < BlockPosition<K>::kItemsPerThread * nthreads;
  }
}

// Part t of grid: rows [i0, i0 + gt.M) and columns [j0, j0 + gt.N) of C, as a product of its own
// (operands moved to its first row and column); false when the part is empty.
template <class K>
bool grid_part(const Gemm& g, Grid2d grid, int t, Gemm& gt, int64_t& i0, int64_t& j0) {
  const int64_t row_tiles = (g.M + K::MR - 1) / K::MR, col_tiles = (g.N + K::NR - 1) / K::NR;
  const int pm = t / grid.tn, pn = t % grid.tn;
  i0 = std::min(g.M, row_tiles * pm / grid.tm * K::MR);
  j0 = std::min(g.N, col_tiles * pn / grid.tn * K::NR);
  const int64_t i1 = std::min(g.M, row_tiles * (pm + 1) / grid.tm * K::MR);
  const int64_t j1 = std::min(g.N, col_tiles * (pn + 1) / grid.tn * K::NR);
  if (i1 <= i0 || j1 <= j0) return false;
  gt = g;
  gt.M = i1 - i0, gt.N = j1 - j0, gt.batch = 1;
  if (g.bias) gt.bias = g.bias + j0;
  return true;
}

// One product (batch entry) split by grid; each part plans for itself (the last row and column
// parts may be partial), the workspace slice per thread is the largest part's.
template <class K>
void bf16_split_2d(float* C, const Operand& A, const Operand& B, const Gemm& g, Grid2d grid) {
  const int parts = grid.tm * grid.tn;
  std::size_t per = 0;
  for (int t = 0; t < parts; ++t) {
    Gemm gt;
    int64_t i0 = 0, j0 = 0;
    if (grid_part<K>(g, grid, t, gt, i0, j0)) per = std::max(per, plan_bf16<K>(gt, 1).workspace());
  }
  float* ws = scratch<K, Slot::gemm_bf16>(per * static_cast<std::size_t>(parts));
#pragma omp parallel for schedule(static, 1) num_threads(parts)
  for (int t = 0; t < parts; ++t) {
    Gemm gt;
    int64_t i0 = 0, j0 = 0;
    if (!grid_part<K>(g, grid, t, gt, i0, j0)) continue;
    const Operand a = operand_at<K>(A, g.trans_a ? i0 : i0 * g.lda);
    const Operand b = operand_at<K>(B, g.trans_b ? j0 * g.ldb : j0);
    bf16_loops<K>(C + i0 * g.ldc + j0, a, b, gt, plan_bf16<K>(gt, 1), ws + static_cast<std::size_t>(t) * per,
                  false);
  }
}

// The KernelTable entry for kernel K: the batch loop and the threading, decided as in gemm()
// (gemm.hpp) with the same thresholds. The workspace is taken before any parallel region.
template <class K>
void gemm_bf16_driver(float* C, const Operand& A, const Operand& B, const Gemm& g) {
  using T = GemmThresholds;
  validate(g);
  if (g.batch <= 0 || g.M <= 0 || g.N <= 0) return;
  if (g.K <= 0) {
    for (int64_t b = 0; b < g.batch; ++b)
      scale_c<K>(C + b * g.stride_c, g.M, g.N, g.ldc, g.beta, g.bias);  // K: this TU's copy
    return;
  }
  if constexpr (K::few_rows_path) {
    if (bf16_few_rows<K>(g, B.dtype)) {  // a decoding step against bf16 weights: B streamed, not packed
      using Arch = typename K::Arch;
      const Threading th = threading<K, GemmTraits<Arch>>(g, GemmTraits<Arch>::small_m_thread_min_macs);
      const std::size_t per = small_m_workspace<Arch>(g);
      float* ws = scratch<K, Slot::gemm_bf16>(per * static_cast<std::size_t>(few_rows_slices<K>(th)));
      const auto* b16 = static_cast<const uint16_t*>(B.data);
      few_rows_run<K>(g, th, ws, per, [&](int64_t b, float* w, int64_t j0, int64_t j1) {
        gemm_bf16_small_m<Arch>(C + b * g.stride_c, operand_at<K>(A, b * g.stride_a), b16 + b * g.stride_b, g,
                                w, j0, j1);
      });
      return;
    }
  }
  const Threading th = threading<K, T>(g);
  if constexpr (K::split_2d != Split2d::never) {
    if (!th.batch && th.inside_threads > 1 && use_split_2d<K>(g, th.inside_threads)) {
      const Grid2d grid = grid_2d<K>(g, th.inside_threads);
      if (grid.tm * grid.tn > 1) {
        for (int64_t b = 0; b < g.batch; ++b)
          bf16_split_2d<K>(C + b * g.stride_c, operand_at<K>(A, b * g.stride_a),
                           operand_at<K>(B, b * g.stride_b), g, grid);
        return;
      }
    }
  }
  const Bf16Plan<K> plan = plan_bf16<K>(g, th.inside_threads);
  const std::size_t per = plan.workspace();
  float* ws = scratch<K, Slot::gemm_bf16>(per * static_cast<std::size_t>(th.batch_threads));
  auto one = [&](int64_t b, float* w) {
    bf16_loops<K>(C + b * g.stride_c, operand_at<K>(A, b * g.stride_a), operand_at<K>(B, b * g.stride_b), g,
                  plan, w, false);
  };
  if (th.batch) {
#pragma omp parallel for schedule(static) num_threads(th.max_threads)
    for (int64_t b = 0; b < g.batch; ++b) one(b, ws + static_cast<std::size_t>(omp_get_thread_num()) * per);
  } else if (plan.nthreads > 1) {
    for (int64_t b = 0; b < g.batch; ++b) {
      const Operand a = operand_at<K>(A, b * g.stride_a), bb = operand_at<K>(B, b * g.stride_b);
      float* c = C + b * g.stride_c;
#pragma omp parallel num_threads(plan.nthreads)
      bf16_loops<K>(c, a, bb, g, plan, ws, true);
    }
  } else {
    for (int64_t b = 0; b < g.batch; ++b) one(b, ws);
  }
}

}  // namespace tg::ops::simd
