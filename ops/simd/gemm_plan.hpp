// What the fp32 (gemm.hpp) and bf16 (gemm_bf16.hpp) GEMM drivers decide alike: how a product is
// threaded, workspace sizes in whole cache lines, how loop 3 cuts the rows into blocks, and where
// loops 5 and 4 stand. The loop numbers are gemm.hpp's. Every helper is a template on the arch or
// kernel tag, for the reason common.hpp gives.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "ops/kernels.hpp"

namespace tg::ops::simd {

// How a tile is stored: C := alpha * acc + beta * C (+ bias[j] on every row when bias is not
// null; beta == 0: C is only written, never read). Later K blocks of one product store with
// beta = 1 and no bias. trans: the tile is one of C^T (the driver computes C^T = op(B)^T op(A)^T,
// gemm.hpp's trans_c), so its element (i, j) goes to c[j * ldc + i] and bias[i] is added to its
// row i (a column of C).
struct Epilogue {
  float alpha = 1.0f, beta = 0.0f;
  const float* bias = nullptr;  // at the tile's first column (trans: at its first row)
  bool trans = false;
};

// How a batch of products is threaded.
struct Threading {
  int max_threads = 1;
  bool batch = false;      // one batch entry per thread
  bool inside = false;     // each product is large enough to be threaded inside
  int batch_threads = 1;   // threads over the batch (workspace slices, one per thread)
  int inside_threads = 1;  // threads sharing one product (inside, when the batch is not threaded)
};

// Decided with the thresholds of T (GemmThresholds, or an arch's GemmTraits; gemm_traits.hpp has
// the measurements); inside_min_macs: where threading inside one product starts (the few-row path
// passes its own). A call from inside a parallel region stays on its thread.
template <class Tag, class T>
Threading threading(const Gemm& g, double inside_min_macs = T::thread_inside_min_macs) {
  const double macs = static_cast<double>(g.M) * static_cast<double>(g.N) * static_cast<double>(g.K);
  Threading th;
  th.max_threads = omp_get_max_threads();
  const bool can = omp_in_parallel() == 0 && th.max_threads > 1;
  th.inside = can && macs >= inside_min_macs;
  // stride_c == 0 makes every entry update the same C (a sum over the batch when beta == 1): that
  // must stay sequential.
  th.batch = can && g.stride_c != 0 && g.batch >= th.max_threads &&
             (g.batch >= T::thread_batch_min_per_thread * th.max_threads || macs < T::thread_batch_max_macs);
  th.batch_threads = th.batch ? th.max_threads : 1;
  th.inside_threads = th.inside && !th.batch ? th.max_threads : 1;
  return th;
}

// Floats rounded up to whole 64-byte lines, so workspace slices stay aligned.
inline constexpr std::size_t kLineFloats = 16;
template <class Tag>
std::size_t line_floats(int64_t n) {
  return (static_cast<std::size_t>(n) + kLineFloats - 1) / kLineFloats * kLineFloats;
}

// Loop 3's row blocks: as many as MC asks for, but evened out (and a multiple of the thread count)
// so the last block is not a sliver and threads get equal work. mc is a multiple of MR.
struct RowBlocks {
  int64_t mc = 0, n_ic = 0;  // row-block height and number of blocks
};
template <class Tag>
RowBlocks row_blocks(int64_t M, int64_t MC, int64_t MR, int nthreads) {
  int64_t n_ic = (M + MC - 1) / MC;
  if (nthreads > 1 && n_ic > 1) n_ic = (n_ic + nthreads - 1) / nthreads * nthreads;
  const int64_t mc = ((M + n_ic - 1) / n_ic + MR - 1) / MR * MR;
  return {mc, (M + mc - 1) / mc};
}

// Loop 4's current block, the same for every thread: columns jc .. jc+nc of C (loop 5), rows
// pc .. pc+kc of op(B), and how loops 3 x 2 are cut into work items.
template <class Tag>
struct BlockPosition {
  int64_t jc = 0, nc = 0, n_panels = 0;    // n_panels NR-column panels (the last may be partial)
  int64_t n_jr = 1, panels_per_chunk = 0;  // loop 2's panels in n_jr chunks per row block
  int64_t pc = 0, kc = 0;
  float beta = 0.0f;            // the first K block applies g.beta, later ones accumulate (1)
  const float* bias = nullptr;  // at column jc; added with the first K block only
  const float* bp = nullptr;    // the packed B block

  // Loop 5: the column block at jc (at most NC wide). Work items of loop 3 x loop 2: n_ic row
  // blocks times n_jr column chunks, about kItemsPerThread items for every thread (repacking A per
  // column chunk costs 1/chunk-width of the multiply: more items balance the threads better, fewer
  // repack less).
  static constexpr int64_t kItemsPerThread = 4;
  void at_columns(const Gemm& g, int64_t jc_, int64_t NC, int64_t NR, int nthreads, int64_t n_ic) {
    jc = jc_;
    nc = std::min<int64_t>(NC, g.N - jc);
    n_panels = (nc + NR - 1) / NR;
    n_jr =
        nthreads > 1 ? std::clamp<int64_t>((kItemsPerThread * nthreads + n_ic - 1) / n_ic, 1, n_panels) : 1;
    panels_per_chunk = (n_panels + n_jr - 1) / n_jr;
  }
  // At most max_panels B panels per work item (where loop 1 streams them from L2, see
  // GemmThresholds::a_in_l1_max_panels): more, narrower column chunks.
  void cap_chunk(int64_t max_panels) {
    if (panels_per_chunk <= max_panels) return;
    n_jr = (n_panels + max_panels - 1) / max_panels;
    panels_per_chunk = (n_panels + n_jr - 1) / n_jr;
  }
  // Loop 4: the K block at pc (at most KC deep). bias_per_column = false: g.bias runs along the rows
  // (the fp32 driver's C^T, whose tiles take it by row position), so `bias` stays null rather than
  // pointing jc floats into a bias that may be shorter than g.N.
  void at_k(const Gemm& g, int64_t pc_, int64_t KC, bool bias_per_column = true) {
    pc = pc_;
    kc = std::min<int64_t>(KC, g.K - pc);
    beta = pc == 0 ? g.beta : 1.0f;
    bias = bias_per_column && pc == 0 && g.bias ? g.bias + jc : nullptr;
  }
};

}  // namespace tg::ops::simd
