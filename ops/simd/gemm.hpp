// GEMM, BLIS-style: C = alpha * op(A) * op(B) + beta * C (see Gemm in ops/kernels.hpp). The driver:
// which path a product takes, how it is blocked and threaded. Packing is in gemm_pack.hpp, the
// micro-kernels in gemm_micro.hpp, few-row products in gemm_small.hpp, block sizes and the
// thresholds named below (GemmTraits<Arch>::...) in gemm_traits.hpp, the threading and blocking
// decisions the bf16 driver shares in gemm_plan.hpp.
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
// Where the B micro-panel would fill the L1D (GemmTraits' a_panel_in_l1_here: AVX-512 on Intel cores
// with a 32 KiB L1D), larger products pack A and swap loops 2 and 1 (plan.a_in_l1): loop 2 walks
// the packed MR-row panels of A (one MR x KC panel stays in L1), loop 1 a chunk of at most
// a_in_l1_max_panels B panels (which stays in L2). AVX2 takes that order for every product with many
// columns (GemmTraits' a_in_l1_wide_min_n).
//
// Tall products whose K spans several blocks may run loop 4 inside the work items instead (plan.
// k_inner, where GemmTraits' k_inner_max_c_bytes says so: AVX2): all of B's column block is packed
// first, and each row block runs its K blocks back to back, its tile of C staying in L2 rather than
// going through memory once per K block.
//
// A few hundred rows against a wide weight stored [N, K] (x W^T: a Linear's forward, a language
// model's head) may run as C^T = W x^T instead (trans_c_pays, where the traits say so): the weight
// becomes the A side, read in place, the small activation the packed B side, and every tile is
// stored transposed (Epilogue::trans).
//
// A is not packed: the micro-kernels read MR-row panels of op(A) in place through lda (a last
// partial panel at its own height). Exceptions: a transposed A with a long lda, an untransposed one
// with a long lda where the arch says so (AVX2), and every A in the a_in_l1 order above, is packed per
// MC x KC block (pack_a_block), and edge column tiles (N not a multiple of
// NR) go through packed, zero-padded panels and a small temporary tile. Few-row products read B in place too
// (direct_b). alpha, beta and the optional bias are applied when a tile is stored (Epilogue).
//
// Threads: a large GEMM shares one packed B block and splits loop 3 (and, when M is too small to
// keep every thread busy, loop 2) across threads. A product with a long K (a weight gradient: few
// rows, or K >= M) splits K instead and adds the threads' partial products (gemm_split_k). One row
// block of many columns (M <= MC) splits N: each thread runs the one-thread GEMM on its own columns
// (gemm_split_n). A batch of small matrices is split across threads one matrix at a time, each
// thread multiplying its own.
//
// Memory: every buffer a call uses (packed blocks, edge panels, partial products) is one workspace
// taken from the calling thread's scratch before any parallel region opens, each thread getting
// its own slice; so running out of memory throws std::bad_alloc to the caller (inside a region it
// would call std::terminate).
#pragma once

#include <algorithm>
#include <utility>

#include "ops/kernels.hpp"
#include "ops/simd/common.hpp"
#include "ops/simd/gemm_micro.hpp"
#include "ops/simd/gemm_pack.hpp"
#include "ops/simd/gemm_plan.hpp"
#include "ops/simd/gemm_small.hpp"
#include "ops/simd/gemm_traits.hpp"

namespace tg::ops::simd {

// What gemm_single decided for one product (one batch entry), and the workspace it needs.
struct SinglePlan {
  int nthreads = 1;          // threads sharing the product (1: no OpenMP construct at all)
  int64_t mc = 0, n_ic = 0;  // loop 3: row-block height (a multiple of MR) and number of blocks
  int64_t kc_max = 0, nc_max = 0;
  bool direct_b = false;      // B read in place (few rows, op(B) = B, whole NR panels)
  bool pack_a_block = false;  // A packed per MC x KC block (a long lda, see plan_single, or a_in_l1)
  bool a_in_l1 = false;       // loops 2 and 1 swapped: a packed A panel in L1, B panels from L2
  bool k_inner = false;       // loop 4 inside the work items: B's whole column block packed first
  bool trans_c = false;       // the product is C^T = op(B)^T op(A)^T, its tiles stored transposed
  int64_t n_kb = 1;           // K blocks (KC deep, the last maybe less)
  // Workspace, in floats: the packed B block (shared), then per thread the packed A block (or the
  // partial row panel of the corner tiles) and one MR-row panel for edge column tiles.
  std::size_t b_floats = 0, a_floats = 0, edge_floats = 0;
  std::size_t per_thread() const { return a_floats + edge_floats; }
  std::size_t workspace() const { return b_floats + static_cast<std::size_t>(nthreads) * per_thread(); }
};

template <class Arch>
SinglePlan plan_single(const Gemm& g, int nthreads) {
  using T = GemmTraits<Arch>;
  constexpr int64_t MR = T::MR, NR = T::NR;
  SinglePlan p;
  p.nthreads = nthreads;
  const RowBlocks rows = row_blocks<Arch>(g.M, T::MC, MR, nthreads);
  p.mc = rows.mc, p.n_ic = rows.n_ic;
  p.kc_max = std::min<int64_t>(T::KC, g.K), p.nc_max = std::min<int64_t>(T::NC, g.N);
  // Few rows (attention heads: M = a sequence length): a packed B panel would be read by only a few
  // MR-row panels of A, so packing it costs about as much as the multiply. When op(B) = B (each
  // k is a contiguous row) and N is whole NR-column panels, the micro-kernels read B in place,
  // one row of NR values per k, ldb apart.
  p.direct_b = !g.trans_b && g.N % NR == 0 && g.M <= T::direct_b_max_m;
  // A transposed (stored K x M) and read in place: one MR-wide row piece per k, lda apart. With a
  // long lda the kc rows of a panel lie on up to kc different pages and the panel is re-read for
  // every NR panel of B: then the whole MC x KC block is packed once (BLIS's packing of A), reading
  // each stored row once, and every NR panel reads it contiguously (gemm_traits.hpp has the figures).
  p.pack_a_block = g.trans_a && g.lda >= pack_trans_a_min_lda<Arch>() && g.N > NR;
  // A stored M x K with a long lda: its MR rows, read in place, lie lda apart, and at a multiple of
  // 4 KiB they fall into one L1 set beside the B micro-panel's lines (GemmTraits' pack_a_min_lda).
  if (!g.trans_a && g.lda >= T::pack_a_min_lda && g.N > NR) p.pack_a_block = true;
  // Where B's micro-panel fills the L1D, larger products keep a packed A panel there instead; where
  // the arch says so, every product with many columns as well (gemm_traits.hpp has the thresholds
  // and the figures). B read in place stays in the default order.
  const testing::GemmLoopOrder order = testing::gemm_loop_order();  // cpu unless a test forces one
  const bool by_cpu = order == testing::GemmLoopOrder::cpu;
  const bool a_in_l1 = order == testing::GemmLoopOrder::a_in_l1 ||
                       (by_cpu && T::a_panel_in_l1_here() &&
                        (p.pack_a_block || g.N >= T::a_in_l1_min_n ||
                         (g.N >= T::a_in_l1_min_n_tall && g.M >= T::a_in_l1_tall_m) ||
                         (!g.trans_a && g.lda >= T::a_in_l1_min_lda))) ||
                       (by_cpu && g.N >= T::a_in_l1_wide_min_n);
  if (a_in_l1 && g.N > NR && !p.direct_b) p.pack_a_block = p.a_in_l1 = true;
  // Tall products with a long K (a Linear's dx = dY W at thousands of tokens, or its forward
  // through a wide input): in the default order every K block streams all of C through memory again
  // (beta = 1). Where the traits say so (GemmThresholds::k_inner_max_c_bytes), the whole of B's
  // column block is packed first and each work item runs its K blocks back to back, its C tile
  // staying in L2; A is read along K then (in place, or packed per block where its lda is long; a
  // transposed A, read across K, keeps the default order).
  p.n_kb = (g.K + T::KC - 1) / T::KC;
  const int64_t nc_pad = (p.nc_max + NR - 1) / NR * NR;
  const testing::GemmKOrder k_order = testing::gemm_k_order();  // cpu unless a test forces one
  constexpr int64_t kFloat = sizeof(float);
  p.k_inner =
      !p.direct_b && p.n_kb > 1 &&
      (k_order == testing::GemmKOrder::inner ||
       (k_order == testing::GemmKOrder::cpu && !g.trans_a && !p.a_in_l1 &&
        p.n_kb >= T::k_inner_min_k_blocks && g.M >= T::k_inner_min_row_blocks * T::MC &&
        p.mc * nc_pad * kFloat <= T::k_inner_max_c_bytes && g.K * nc_pad * kFloat <= T::k_inner_max_b_bytes));
  p.b_floats = p.direct_b ? 0 : line_floats<Arch>((p.k_inner ? p.n_kb * T::KC : p.kc_max) * nc_pad);
  p.a_floats = line_floats<Arch>(p.kc_max * p.mc);
  p.edge_floats = line_floats<Arch>(p.kc_max * MR);
  return p;
}

// Loop 4's current block (gemm_plan.hpp), with op(B)[pc, jc] in place.
template <class Arch>
struct KBlock : BlockPosition<Arch> {
  const float* b = nullptr;  // op(B)[pc, jc] in place; bp is the packed block (unless direct_b)
};

// Where element (i, j) of the product being computed lies: C's row i, column j; with trans_c (the
// product is C^T, see gemm) C's row j, column i.
inline float* c_at(float* C, int64_t ldc, bool trans_c, int64_t i, int64_t j) {
  return trans_c ? C + j * ldc + i : C + i * ldc + j;
}

// Loop 1 for one row block (rows ic .. ic+mcb) and one B panel (columns jr .. jr+nr of the block):
// one micro-kernel per MR-row tile. Which kernel, per tile:
//   A packed (pack_a_block)           micro_kernel on the packed panel; edge tiles via edge_tile
//   full tile                         micro_kernel_direct, A in place
//   last partial row panel, full cols micro_kernel_direct_rows, A in place at the panel's height
//   edge column tile, full rows       that row panel packed into `edge`, then edge_tile
//   corner (partial rows and cols)    edge_tile on the partial panel packed with the block (ap)
// (with trans_c each tile is one of C^T, stored transposed by the epilogue: Epilogue::trans).
// One NR-column panel of B as loop 1 reads it: packed (rows NR apart) or in place (rows ldb apart),
// nr valid columns.
struct BPanel {
  const float* p;
  int64_t step, nr;
};

template <class Arch>
void loop1_tiles(const Gemm& g, const SinglePlan& plan, int64_t kc, const float* a_blk, const float* ap,
                 float* edge, int64_t mcb, const BPanel& bp, float* c_panel, const Epilogue& e_panel) {
  constexpr int MR = GemmTraits<Arch>::MR, NR = GemmTraits<Arch>::NR;
  const float* const bpanel = bp.p;
  const int64_t b_step = bp.step, nr = bp.nr;
  for (int64_t ir = 0; ir < mcb; ir += MR) {
    const int64_t mr = std::min<int64_t>(MR, mcb - ir);
    float* c = c_at(c_panel, g.ldc, plan.trans_c, ir, 0);
    Epilogue e = e_panel;  // C^T's bias is per row: the tile's own
    if (e.trans && e.bias) e.bias += ir;
    if (plan.pack_a_block) {  // A from its packed panel
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
        micro_kernel_direct_rows<Arch, true>(mr, rows, kc, a_in_place, g.lda, bpanel, b_step, c, g.ldc, e);
      else
        micro_kernel_direct_rows<Arch, false>(mr, rows, kc, a_in_place, g.lda, bpanel, b_step, c, g.ldc, e);
    } else if (mr == MR) {  // an edge column tile of a full row panel: pack that panel
      pack_a<Arch>(edge, a_in_place, g.lda, g.trans_a, MR, kc);
      edge_tile<Arch>(kc, edge, bpanel, b_step, c, g.ldc, e, mr, nr);
    } else {  // the corner: the partial row panel, packed once per row block
      edge_tile<Arch>(kc, ap + ir * kc, bpanel, b_step, c, g.ldc, e, mr, nr);
    }
  }
}

// The epilogue of the tiles from row i of the product and column jr of the current column block:
// bias (first K block only) at column kb.jc + jr, or with trans_c at row i (C^T's bias is per row).
template <class Arch>
Epilogue tile_epilogue(const Gemm& g, const SinglePlan& plan, const KBlock<Arch>& kb, int64_t i, int64_t jr) {
  if (plan.trans_c) return Epilogue{g.alpha, kb.beta, kb.pc == 0 && g.bias ? g.bias + i : nullptr, true};
  const float* bias = kb.bias ? kb.bias + jr : nullptr;
  return Epilogue{g.alpha, kb.beta, bias};
}

// B panels an item packs and then multiplies at a time where it packs its own (own_b below), as
// the bf16 driver's kPackBPanelsPerCall.
inline constexpr int64_t kOwnBPanels = 4;

// One work item of loops 3 x 2: row block `item / n_jr` times the item's chunk of B panels. A
// thread packs what its row block needs from A once per K block (packed_ic remembers which block
// its buffer `ap` holds). With own_b (the packed block's buffer, not null) the item packs its own
// panels, kOwnBPanels at a time, at the start of that buffer and multiplies each group while it is
// in L2 (see gemm_loops: one thread's products of one row block).
template <class Arch>
void loop3x2_item(float* C, const float* A, const Gemm& g, const SinglePlan& plan, const KBlock<Arch>& kb,
                  int64_t item, float* ap, float* edge, int64_t& packed_ic, float* own_b = nullptr) {
  constexpr int64_t MR = GemmTraits<Arch>::MR, NR = GemmTraits<Arch>::NR;
  const int64_t ic = (item / kb.n_jr) * plan.mc;  // loop 3
  const int64_t mcb = std::min<int64_t>(plan.mc, g.M - ic);
  const int64_t kc = kb.kc;
  const float* a_blk = g.trans_a ? A + kb.pc * g.lda + ic : A + ic * g.lda + kb.pc;
  const int64_t full_rows = mcb / MR * MR;  // rows in whole MR panels
  if (ic != packed_ic) {
    if (plan.pack_a_block)  // the whole block
      pack_a<Arch>(ap, a_blk, g.lda, g.trans_a, mcb, kc);
    else if (full_rows < mcb && g.N % NR != 0)  // the partial panel, for the corner tiles
      pack_a<Arch>(ap + full_rows * kc, g.trans_a ? a_blk + full_rows : a_blk + full_rows * g.lda, g.lda,
                   g.trans_a, mcb - full_rows, kc);
    packed_ic = ic;
  }
  const int64_t p_lo = (item % kb.n_jr) * kb.panels_per_chunk;
  const int64_t p_hi = std::min(kb.n_panels, p_lo + kb.panels_per_chunk);
  if (plan.a_in_l1) {
    for (int64_t ir = 0; ir < mcb; ir += MR) {  // loop 2: one packed panel of A (in L1)
      const int64_t mr = std::min<int64_t>(MR, mcb - ir);
      const float* a_panel = ap + ir * kc;
      for (int64_t p = p_lo; p < p_hi; ++p) {  // loop 1: the chunk's packed B panels (from L2)
        const int64_t jr = p * NR, nr = std::min<int64_t>(NR, kb.nc - jr);
        const Epilogue e = tile_epilogue(g, plan, kb, ic + ir, jr);
        float* c = c_at(C, g.ldc, plan.trans_c, ic + ir, kb.jc + jr);
        if (nr == NR && mr == MR)
          micro_kernel_streaming_b<Arch>(kc, a_panel, kb.bp + p * kc * NR, c, g.ldc, e);
        else
          edge_tile<Arch>(kc, a_panel, kb.bp + p * kc * NR, NR, c, g.ldc, e, mr, nr);
      }
    }
    return;
  }
  // With own_b, groups of kOwnBPanels panels, each packed at own_b (the same few lines every time);
  // otherwise the whole chunk at once, from the packed block (or B in place).
  const int64_t group = own_b ? kOwnBPanels : std::max<int64_t>(p_hi - p_lo, 1);
  for (int64_t p0 = p_lo; p0 < p_hi; p0 += group) {
    const int64_t p1 = std::min(p_hi, p0 + group);
    const float* panels = plan.direct_b ? nullptr : kb.bp + p0 * kc * NR;  // panel p0's packed data
    if (own_b) {
      const int64_t j = p0 * NR;
      pack_b<Arch>(own_b, g.trans_b ? kb.b + j * g.ldb : kb.b + j, g.ldb, g.trans_b, kc, kb.nc - j, 0,
                   p1 - p0);
      panels = own_b;
    }
    for (int64_t p = p0; p < p1; ++p) {  // loop 2
      const int64_t jr = p * NR, nr = std::min<int64_t>(NR, kb.nc - jr);
      const float* bpanel = plan.direct_b ? kb.b + jr : panels + (p - p0) * kc * NR;
      const int64_t b_step = plan.direct_b ? g.ldb : NR;
      loop1_tiles<Arch>(g, plan, kc, a_blk, ap, edge, mcb, {bpanel, b_step, nr},
                        c_at(C, g.ldc, plan.trans_c, ic, kb.jc + jr), tile_epilogue(g, plan, kb, ic, jr));
    }
  }
}

// Loops 5..1 in the k_inner order (plan.k_inner): per column block every K block of B is packed
// first (each thread a range of panels, then one barrier), and each work item (a row block and a
// chunk of B panels) runs all its K blocks back to back, so its tile of C stays in cache from one K
// block to the next instead of being streamed from memory once per K block. Each C element gets the
// same sums in the same order as in the default order. `shared` and ws as gemm_loops.
template <class Arch>
void gemm_loops_k_inner(float* C, const float* A, const float* B, const Gemm& g, const SinglePlan& plan,
                        float* ws, bool shared) {
  using T = GemmTraits<Arch>;
  constexpr int64_t NR = T::NR;
  const int t = shared ? omp_get_thread_num() : 0, nt = shared ? omp_get_num_threads() : 1;
  float* ap = ws + plan.b_floats + static_cast<std::size_t>(t) * plan.per_thread();
  float* edge = ap + plan.a_floats;
  for (int64_t jc = 0; jc < g.N; jc += T::NC) {  // loop 5
    KBlock<Arch> kb;
    kb.at_columns(g, jc, T::NC, NR, plan.nthreads, plan.n_ic);
    if (plan.a_in_l1) kb.cap_chunk(T::a_in_l1_max_panels);
    // K block pc / KC of B at ws + (pc / KC) * block_floats, its panels kc * NR apart
    const int64_t block_floats = T::KC * kb.n_panels * NR;
    for (int64_t pc = 0; pc < g.K; pc += T::KC) {  // loop 4, packing only
      const float* b = g.trans_b ? B + jc * g.ldb + pc : B + pc * g.ldb + jc;
      pack_b<Arch>(ws + pc / T::KC * block_floats, b, g.ldb, g.trans_b, std::min<int64_t>(T::KC, g.K - pc),
                   kb.nc, kb.n_panels * t / nt, kb.n_panels * (t + 1) / nt);
    }
    auto run_item = [&](int64_t item) {
      for (int64_t pc = 0; pc < g.K; pc += T::KC) {  // loop 4 inside the item
        kb.at_k(g, pc, T::KC, !plan.trans_c);
        kb.bp = ws + pc / T::KC * block_floats;
        int64_t packed_ic = -1;  // A's block differs per K block
        loop3x2_item<Arch>(C, A, g, plan, kb, item, ap, edge, packed_ic);
      }
    };
    const int64_t n_items = plan.n_ic * kb.n_jr;
    if (shared) {
#pragma omp barrier  // B is packed before anyone multiplies with it
#pragma omp for schedule(dynamic, 1)
      for (int64_t item = 0; item < n_items; ++item) run_item(item);
      // (the implicit barrier of this omp for: nobody still reads B's blocks when the next column
      // block repacks them)
    } else {
      for (int64_t item = 0; item < n_items; ++item) run_item(item);
    }
  }
}

// Loops 5..1 of one product as run by one thread. `shared`: called by every thread of a parallel
// region, which split the B packing and the loop 3 x loop 2 work items; otherwise no OpenMP
// construct at all (a team of one still costs runtime calls, noticeable on a batch of small
// matrices). ws: plan.workspace() floats.
template <class Arch>
void gemm_loops(float* C, const float* A, const float* B, const Gemm& g, const SinglePlan& plan, float* ws,
                bool shared) {
  using T = GemmTraits<Arch>;
  constexpr int64_t NR = T::NR;
  const int t = shared ? omp_get_thread_num() : 0;
  float* bp = ws;
  float* ap = ws + plan.b_floats + static_cast<std::size_t>(t) * plan.per_thread();
  float* edge = ap + plan.a_floats;
  // k_inner's B area holds plan.n_kb K blocks: a longer K than planned (a split-K part of a smaller
  // team than asked, gemm_split_k) runs the default order, whose B area (one K block) fits any K.
  if (plan.k_inner && (g.K + T::KC - 1) / T::KC <= plan.n_kb)
    return gemm_loops_k_inner<Arch>(C, A, B, g, plan, ws, shared);
  for (int64_t jc = 0; jc < g.N; jc += T::NC) {  // loop 5
    KBlock<Arch> kb;
    kb.at_columns(g, jc, T::NC, NR, plan.nthreads, plan.n_ic);
    if (plan.a_in_l1) kb.cap_chunk(T::a_in_l1_max_panels);
    kb.bp = bp;
    const int64_t n_items = plan.n_ic * kb.n_jr;
    // One thread and one row block (M <= MC: a language model's 256-token products): each packed B
    // panel is read once, so it is packed a few panels at a time and multiplied while in L2, rather
    // than the whole block (up to NC / NR panels, 4 MiB at KC 256) being packed out to L3 first and
    // read back. The same tiles in the same order: the same bits. Zen 4, alternated per call:
    // 1.0-1.10x on one thread; shared by 2 threads (items packing their own panels, no barrier)
    // 0.97-1.05x, so the shared path keeps its packing. (The a_in_l1 order reads all of an item's
    // panels per A panel.)
    float* const own_b = !shared && plan.n_ic == 1 && !plan.direct_b && !plan.a_in_l1 ? bp : nullptr;
    for (int64_t pc = 0; pc < g.K; pc += T::KC) {  // loop 4
      kb.at_k(g, pc, T::KC, !plan.trans_c);
      kb.b = g.trans_b ? B + jc * g.ldb + pc : B + pc * g.ldb + jc;
      int64_t packed_ic = -1;  // this thread's ap holds nothing of this K block yet
      if (shared) {
        if (!plan.direct_b) {                        // the same branch on every thread: plan is shared
          const int64_t nt = omp_get_num_threads();  // a contiguous range of panels each
          pack_b<Arch>(bp, kb.b, g.ldb, g.trans_b, kb.kc, kb.nc, kb.n_panels * t / nt,
                       kb.n_panels * (t + 1) / nt);
#pragma omp barrier  // B is packed before anyone multiplies with it
        }
#pragma omp for schedule(dynamic, 1)
        for (int64_t item = 0; item < n_items; ++item)
          loop3x2_item<Arch>(C, A, g, plan, kb, item, ap, edge, packed_ic);
        // (the implicit barrier of this omp for: nobody still reads bp, or a C tile of this K
        // block, when the next K block repacks B and accumulates onto C)
      } else {
        if (!plan.direct_b && !own_b) pack_b<Arch>(bp, kb.b, g.ldb, g.trans_b, kb.kc, kb.nc, 0, kb.n_panels);
        for (int64_t item = 0; item < n_items; ++item)
          loop3x2_item<Arch>(C, A, g, plan, kb, item, ap, edge, packed_ic, own_b);
      }
    }
  }
}

// One GEMM (one batch entry). With plan.nthreads > 1 the calling thread opens an OpenMP region
// and the threads share the packed B block; otherwise everything runs on the calling thread.
template <class Arch>
void gemm_single(float* C, const float* A, const float* B, const Gemm& g, const SinglePlan& plan, float* ws) {
  if (g.M <= 0 || g.N <= 0) return;
  if (g.K <= 0) return scale_c<Arch>(C, g.M, g.N, g.ldc, g.beta, g.bias, plan.trans_c);
  if (plan.nthreads > 1) {
#pragma omp parallel num_threads(plan.nthreads)
    gemm_loops<Arch>(C, A, B, g, plan, ws, true);
  } else {
    gemm_loops<Arch>(C, A, B, g, plan, ws, false);
  }
}

// Few rows and columns but a long K (a weight gradient dW = dY^T X: M, N = layer widths, K = the
// batch's rows): one or two row blocks cannot keep every thread busy, and splitting columns makes
// threads repack A. Instead each thread takes a contiguous range of whole KC blocks of K and runs
// the one-thread GEMM on it: thread 0 into C (with beta and bias), thread t > 0 into a partial
// product; then the threads add the partial products into C, split by rows. Each thread packs and
// reads only its own B panels, with no barrier per K block; the shared path packs half of every
// thread's panels on the other core, and three or four row blocks do not split evenly between two
// threads: so the split pays for more rows too where K is at least M (GemmThresholds::split_k_max_mn
// has the figures).
template <class Arch>
bool split_k_pays(const Gemm& g, int nthreads) {
  using T = GemmTraits<Arch>;
  return nthreads > 1 && (g.M <= 2 * T::MC || g.K >= g.M) && g.K >= 2 * nthreads * T::KC &&
         g.M * g.N <= T::split_k_max_mn;
}

// The K range of one thread's part: whole KC blocks (the last part may be shorter or empty).
template <class Arch>
int64_t split_k_chunk(const Gemm& g, int nthreads) {
  using T = GemmTraits<Arch>;
  const int64_t blocks = (g.K + T::KC - 1) / T::KC;
  return (blocks + nthreads - 1) / nthreads * T::KC;
}

// The one-thread plan of a split-K part (chunk rows of K at most) and the whole workspace: the
// nthreads - 1 partial products, then one plan.workspace() per thread.
template <class Arch>
SinglePlan plan_split_k(const Gemm& g, int nthreads, std::size_t& workspace) {
  // A part's plan depends on its K through kc_max = min(KC, K) and, with k_inner, the K blocks B's
  // area holds; every part but the last spans whole KC blocks. A smaller team than asked makes parts
  // longer, never shorter: kc_max still fits, and gemm_loops runs a part longer than its plan's
  // K blocks in the default order.
  Gemm part = g;
  part.K = std::min(g.K, split_k_chunk<Arch>(g, nthreads));
  const SinglePlan plan = plan_single<Arch>(part, 1);
  workspace =
      line_floats<Arch>((nthreads - 1) * g.M * g.N) + static_cast<std::size_t>(nthreads) * plan.workspace();
  return plan;
}

template <class Arch>
void gemm_split_k(float* C, const float* A, const float* B, const Gemm& g, int nthreads,
                  const SinglePlan& plan, float* ws) {
  const int64_t M = g.M, N = g.N, mn = M * N;
  float* partial = ws;
  float* part_ws = ws + line_floats<Arch>((nthreads - 1) * mn);
#pragma omp parallel num_threads(nthreads)
  {
    // The team may be smaller than asked (OMP_DYNAMIC, thread limits): split K by its real size.
    const int nt = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t chunk = split_k_chunk<Arch>(g, nt);
    const int64_t k0 = std::min(g.K, t * chunk), k1 = std::min(g.K, k0 + chunk);
    Gemm gt = g;
    gt.K = k1 - k0;  // K == 0: C (or the partial product) gets beta * C, i.e. zeros for a partial
    gt.batch = 1;
    const float* a = g.trans_a ? A + k0 * g.lda : A + k0;
    const float* b = g.trans_b ? B + k0 : B + k0 * g.ldb;
    float* my_ws = part_ws + static_cast<std::size_t>(t) * plan.workspace();
    if (t == 0) {
      gemm_single<Arch>(C, a, b, gt, plan, my_ws);
    } else {
      gt.beta = 0.0f, gt.bias = nullptr, gt.ldc = N;
      gemm_single<Arch>(partial + (t - 1) * mn, a, b, gt, plan, my_ws);
    }
#pragma omp barrier
#pragma omp for schedule(static)
    for (int64_t i = 0; i < M; ++i)
      for (int s = 1; s < nt; ++s)
        for (int64_t j = 0; j < N; ++j) C[i * g.ldc + j] += partial[(s - 1) * mn + i * N + j];
  }
}

// One row block but many columns (a Linear at a few hundred tokens: M <= MC): the threads take
// contiguous ranges of whole NR panels of C and each runs the one-thread GEMM on its columns, packing
// its own B panels and reading only them (the shared path packs half the panels on each core and
// reads all of them, with two barriers per K block). A is read by every thread. Up to N = NC: the
// pages the threads' packed B blocks touch then add up to the shared path's one KC x N block (the
// peak RSS does not grow; wider products, a language model's head, measured the same either way).
// Figures: bench/results/gemm_split_n_2026-11-27_cascadelake.txt.
template <class Arch>
bool split_n_pays(const Gemm& g, int nthreads) {
  using T = GemmTraits<Arch>;
  return nthreads > 1 && g.M <= T::MC && g.N >= 2 * nthreads * T::NR && g.N <= T::NC;
}

// per_thread: the workspace of the one-thread plan of the whole product, which bounds every part's
// (a part's plan differs from it only in N: its B block is no wider, and B is read in place only
// when the part ends on a whole panel). Each part plans for itself: the last one may end in a
// partial panel, which the others' plan (B read in place, whole panels) must not be used for.
template <class Arch>
void gemm_split_n(float* C, const float* A, const float* B, const Gemm& g, int nthreads,
                  std::size_t per_thread, float* ws) {
  constexpr int64_t NR = GemmTraits<Arch>::NR;
  const int64_t panels = (g.N + NR - 1) / NR;
#pragma omp parallel num_threads(nthreads)
  {
    // The team may be smaller than asked: split by its real size (parts only get wider, which
    // per_thread still covers).
    const int nt = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t j0 = std::min(g.N, panels * t / nt * NR), j1 = std::min(g.N, panels * (t + 1) / nt * NR);
    if (j1 > j0) {
      Gemm gt = g;
      gt.N = j1 - j0;
      gt.batch = 1;
      if (g.bias) gt.bias = g.bias + j0;
      const float* b = g.trans_b ? B + j0 * g.ldb : B + j0;
      gemm_single<Arch>(C + j0, A, b, gt, plan_single<Arch>(gt, 1),
                        ws + static_cast<std::size_t>(t) * per_thread);
    }
  }
}

// A few hundred rows times a wide weight stored [N, K] (a Linear's forward x W^T at a few hundred
// tokens, a language model's head): packing op(B) = W^T, a transposed copy of the whole weight,
// costs more per flop than the product's few row panels of A can repay. Where the traits say so
// (GemmThresholds::trans_c_max_m) the driver computes C^T = op(B)^T op(A)^T instead: the weight is
// the A side, read in place along K, and the small activation is the B side, packed once; each
// tile is stored transposed (Epilogue::trans), and C's bias is added per row of C^T.
template <class Arch>
bool trans_c_pays(const Gemm& g) {
  using T = GemmTraits<Arch>;
  const testing::GemmCTranspose forced = testing::gemm_c_transpose();  // cpu unless a test forces it
  if (forced != testing::GemmCTranspose::cpu) return forced == testing::GemmCTranspose::on;
  return !g.trans_a && g.trans_b && g.M <= T::trans_c_max_m && g.N >= T::trans_c_min_n_per_m * g.M &&
         g.ldb < T::pack_a_min_lda;
}

// g with its operands swapped: C^T = op(B)^T op(A)^T (A' = B, B' = A, each transposed against the
// other's flag), stored through the same ldc by tiles the driver writes transposed.
inline Gemm transposed_product(const Gemm& g) {
  Gemm s = g;
  s.M = g.N, s.N = g.M;
  s.trans_a = !g.trans_b, s.trans_b = !g.trans_a;
  s.lda = g.ldb, s.ldb = g.lda;
  s.stride_a = g.stride_b, s.stride_b = g.stride_a;
  return s;
}

// The KernelTable entry: the batch loop and the choice of path. Small matrices in a batch
// (attention heads) go one per thread; large ones are threaded inside.
template <class Arch>
void gemm(float* C, const float* A, const float* B, const Gemm& g) {
  using T = GemmTraits<Arch>;
  validate(g);
  if (g.batch <= 0 || g.M <= 0 || g.N <= 0) return;
  const bool few_rows =
      g.M <= T::small_m || (g.trans_b && g.M <= T::small_m_trans_b && g.K >= T::small_trans_b_min_k);
  // Few rows read each element of B once per row: memory-bound, so they are threaded inside from a
  // smaller product on (small_m_thread_min_macs) than the packed path.
  const Threading th =
      threading<Arch, T>(g, few_rows ? T::small_m_thread_min_macs : T::thread_inside_min_macs);
  const int batch_threads = th.batch_threads;  // workspace slices, one per thread
  auto entry = [&](auto&& run) {               // each batch entry in turn, or one per thread
    if (th.batch) {
#pragma omp parallel for schedule(static) num_threads(batch_threads)
      for (int64_t b = 0; b < g.batch; ++b) run(b, omp_get_thread_num());
    } else {
      for (int64_t b = 0; b < g.batch; ++b) run(b, 0);
    }
  };
  if (few_rows && g.K > 0) {  // no packing
    const std::size_t per = small_m_workspace<Arch>(g);
    float* ws = scratch<Arch, Slot::gemm>(per * static_cast<std::size_t>(few_rows_slices<Arch>(th)));
    few_rows_run<Arch>(g, th, ws, per, [&](int64_t b, float* w, int64_t j0, int64_t j1) {
      gemm_small_m<Arch>(C + b * g.stride_c, A + b * g.stride_a, B + b * g.stride_b, g, w, j0, j1);
    });
  } else if (trans_c_pays<Arch>(g)) {  // C^T = op(B)^T op(A)^T, loops 5..1 only (K = 0: scale_c)
    const Gemm s = transposed_product(g);
    SinglePlan plan = plan_single<Arch>(s, th.inside_threads);
    plan.trans_c = true;
    const std::size_t per = plan.workspace();
    float* ws = scratch<Arch, Slot::gemm>(per * static_cast<std::size_t>(batch_threads));
    entry([&](int64_t b, int t) {
      gemm_single<Arch>(C + b * g.stride_c, B + b * g.stride_b, A + b * g.stride_a, s, plan, ws + t * per);
    });
  } else if (th.inside && !th.batch && split_k_pays<Arch>(g, th.max_threads)) {
    std::size_t floats = 0;
    const SinglePlan plan = plan_split_k<Arch>(g, th.max_threads, floats);
    float* ws = scratch<Arch, Slot::gemm>(floats);
    for (int64_t b = 0; b < g.batch; ++b)
      gemm_split_k<Arch>(C + b * g.stride_c, A + b * g.stride_a, B + b * g.stride_b, g, th.max_threads, plan,
                         ws);
  } else if (th.inside && !th.batch && split_n_pays<Arch>(g, th.max_threads)) {
    const std::size_t per = plan_single<Arch>(g, 1).workspace();  // the whole product on one thread
    float* ws = scratch<Arch, Slot::gemm>(per * static_cast<std::size_t>(th.max_threads));
    for (int64_t b = 0; b < g.batch; ++b)
      gemm_split_n<Arch>(C + b * g.stride_c, A + b * g.stride_a, B + b * g.stride_b, g, th.max_threads, per,
                         ws);
  } else {
    const SinglePlan plan = plan_single<Arch>(g, th.inside_threads);
    const std::size_t per = plan.workspace();
    float* ws = scratch<Arch, Slot::gemm>(per * static_cast<std::size_t>(batch_threads));
    entry([&](int64_t b, int t) {
      gemm_single<Arch>(C + b * g.stride_c, A + b * g.stride_a, B + b * g.stride_b, g, plan, ws + t * per);
    });
  }
}

// The KernelTable's gemm_int8: a weight in int8 tiles (op(B) = B^T, batch 1), every product on the
// int8 tiles of gemm_small.hpp, threaded as the fp32 few-row products are: columns split across the
// threads (in whole tiles: multiples of 16 columns) from small_m_thread_min_macs.
template <class Arch>
void gemm_int8(float* C, const float* A, const Int8Rows& B, const Gemm& g) {
  using T = GemmTraits<Arch>;
  validate_int8(g);
  if (g.batch <= 0 || g.M <= 0 || g.N <= 0) return;
  if (g.K <= 0) return scale_c<Arch>(C, g.M, g.N, g.ldc, g.beta, g.bias);
  const Threading th = threading<Arch, T>(g, T::small_m_thread_min_macs);
  const std::size_t per = int8_workspace<Arch>(g);
  float* ws = scratch<Arch, Slot::gemm>(per * static_cast<std::size_t>(few_rows_slices<Arch>(th)));
  few_rows_run<Arch>(g, th, ws, per, [&](int64_t, float* w, int64_t j0, int64_t j1) {
    int8_products<Arch>(C, A, B, g, w, j0, j1);
  });
}

}  // namespace tg::ops::simd
