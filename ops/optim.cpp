// Kernels over a model's parameters as a whole (ops/kernels.hpp: adam_update over many tensors).
// Compiled without arch flags: each thread's pieces go through the active table's kernels, which
// run on their calling thread inside the region (ops/simd/common.hpp: parallel_for).
#include <omp.h>

#include <algorithm>
#include <exception>
#include <vector>

#include "ops/kernels.hpp"

namespace tg::ops {

namespace {
// Below this many elements in all, one thread does the whole step: opening the region (about a
// microsecond) and splitting cost more than the pass (the elementwise kernels' per-thread minimum,
// ops/simd/elementwise.hpp, is 2^15 elements for a read-only pass, 2^13 for Adam's).
constexpr int64_t kAdamMinElemsPerThread = int64_t{1} << 13;
// Piece borders at multiples of 16 floats from each tensor's start: whole vectors on every arch.
constexpr int64_t kChunkAlign = 16;
}  // namespace

void adam_update(std::span<const AdamTensor> tensors, const AdamParams& p) {
  int64_t total = 0;
  for (const AdamTensor& t : tensors) total += t.n;
  const KernelTable& k = active();
  auto run = [&](int64_t lo, int64_t hi) {  // the elements [lo, hi) of the tensors laid end to end
    int64_t start = 0;
    for (const AdamTensor& t : tensors) {
      if (start + t.n <= lo) {  // wholly before this thread's elements
        start += t.n;
        continue;
      }
      // This thread's piece of the tensor, its borders moved down to multiples of kChunkAlign from
      // the tensor's start (both neighbours move a border alike, so the pieces still tile it): the
      // vector body and the scalar tail then cover the same elements as one call per tensor does,
      // and every thread count gives the same bits.
      const int64_t a = std::clamp<int64_t>(lo - start, 0, t.n), b = std::clamp<int64_t>(hi - start, 0, t.n);
      const int64_t la = a / kChunkAlign * kChunkAlign, lb = b == t.n ? t.n : b / kChunkAlign * kChunkAlign;
      if (la < lb) {
        AdamParams q = p;
        q.weight_decay = t.weight_decay;
        k.adam_update(t.param + la, t.m + la, t.v + la, t.grad + la, lb - la, q);
      }
      start += t.n;
      if (start >= hi) break;
    }
  };
  const int threads = omp_get_max_threads();
  if (threads < 2 || omp_in_parallel() || total < 2 * kAdamMinElemsPerThread) return run(0, total);
  std::exception_ptr error;
#pragma omp parallel num_threads(threads)
  {
    const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t chunk = ((total + nt - 1) / nt + kChunkAlign - 1) / kChunkAlign * kChunkAlign;
    const int64_t lo = std::min(total, t * chunk), hi = std::min(total, lo + chunk);
    try {
      if (lo < hi) run(lo, hi);
    } catch (...) {
#pragma omp critical(tg_ops_adam_error)
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace tg::ops
