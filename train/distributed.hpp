// Data-parallel training over MPI: the few collective operations a training loop needs.
//
// Every rank holds the whole model and the same optimizer state, and draws the same global batch
// (same seed); rank r takes rows shard(B, r, N) of it, runs forward and backward on them, and
//   allreduce_gradients() sums  n_r * grad_r  (n_r = the shard's non-pad label tokens, the weight of
//   its mean loss) over the ranks and divides by the global token count.
// So every rank ends the step with the gradient of the global batch's token-mean loss, the same on
// every rank, and applies the same update: N ranks compute what 1 rank computes up to the order of
// floating-point sums. Clipping after the allreduce uses the global norm.
//
// Without MPI (meson -Dmpi=disabled, TAPEGRAD_HAVE_MPI undefined) or when the process was not
// started by an MPI launcher, the World has one rank and every operation is a no-op. A build
// without MPI started by mpirun with several ranks refuses to run (each process would otherwise
// train alone and all would write the same files).
//
// MPI is initialised only when an MPI launcher started the process (its environment says so:
// OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_RANK), so single-process runs of an MPI build do not pay
// for MPI_Init and print nothing of MPI's.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "autograd/random.hpp"
#include "nn/module.hpp"
#include "nn/transformer.hpp"

namespace tg::dist {

// True when this build was compiled with MPI (TAPEGRAD_HAVE_MPI).
bool built_with_mpi();
// Ranks in the job according to the launcher's environment (0 when not started by a launcher).
int launcher_world_size();

// Communication counters (allreduce_gradients only), for benchmarks and progress lines.
struct CommStats {
  int64_t calls = 0;          // MPI_Allreduce calls (buckets)
  int64_t bytes = 0;          // payload bytes reduced (per rank)
  double seconds = 0.0;       // wall time inside MPI_Allreduce
  double pack_seconds = 0.0;  // packing, scaling and unpacking the buckets
};

struct Options {
  int64_t bucket_bytes = 4 << 20;  // gradient bucket size for MPI_Allreduce
  // A rank waiting longer than this inside a collective prints which one and exits non-zero
  // (mpirun then stops the whole job). 0: wait forever.
  double timeout_s = 600.0;
  bool quiet_others = true;  // ranks > 0 write stdout to /dev/null (stderr is kept)
};

// One per process, for the length of the training run (RAII: MPI_Init_thread / MPI_Finalize).
// When the destructor runs because an exception is propagating, MPI_Finalize is skipped (the other
// ranks may be waiting in a collective and Finalize would hang): the process then exits with an
// error status and mpirun stops the job.
class World {
 public:
  explicit World(const Options& options = {});
  ~World();
  World(const World&) = delete;
  World& operator=(const World&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  bool is_root() const { return rank_ == 0; }
  bool distributed() const { return size_ > 1; }
  // Ranks on this machine (MPI_COMM_TYPE_SHARED), 1 without MPI.
  int local_size() const { return local_size_; }
  const Options& options() const { return options_; }

  // Gradient averaging for one step. `local_tokens` is this rank's non-pad label count (the weight
  // of its token-mean loss). Afterwards every parameter's gradient is
  //   sum_r local_tokens_r * grad_r / sum_r local_tokens_r
  // on every rank; a parameter no rank has a gradient for stays without one, one that some ranks
  // lack gets zeros from them. `extras` are summed over the ranks too, in the same buckets, without
  // scaling (use them for the loss sum or a stop flag: no extra message). Returns the global token
  // count. One rank: returns local_tokens and changes nothing.
  int64_t allreduce_gradients(const NamedTensors& params, int64_t local_tokens,
                              std::span<double> extras = {});

  // Sums in place over the ranks (no-op on one rank).
  void allreduce_sum(std::span<double> values);
  void barrier();

  const CommStats& stats() const { return stats_; }
  void reset_stats() { stats_ = {}; }

 private:
  void collective(const char* what, void* data, int64_t count, bool is_double);
  Options options_;
  int rank_ = 0, size_ = 1, local_size_ = 1;
  bool initialized_ = false;
  std::vector<float> buffer_;
  CommStats stats_;
};

// Rows [begin, end) of a global batch of n rows taken by `rank` of `size`: contiguous, sizes
// differing by at most one, in rank order (so the shards put back together are the batch).
std::pair<int64_t, int64_t> shard(int64_t n, int rank, int size);

// Rows [begin, end) of a padded batch as a batch of their own (same src_len/tgt_len).
nn::Batch slice_rows(const nn::Batch& b, int64_t begin, int64_t end);
// This rank's shard of a global batch (the batch itself on one rank).
nn::Batch local_shard(const nn::Batch& global, const World& world);

// Kernel threads per rank when the user did not choose (no --threads, no OMP_NUM_THREADS): the
// cores this process may run on (its affinity mask), shared by the ranks on this machine, at least 1.
int default_threads(const World& world);

// A warning (empty when none) when `threads` kernel threads exceed the cores this rank may run on:
// mpirun binds each rank to one core by default for up to 2 ranks, so threads would share it.
std::string threads_warning(const World& world, int threads);

// Dropout streams under data parallelism: each rank needs its own masks, yet a checkpoint holds one
// generator state. fork_step_rng() turns the shared state into this rank's stream for one step and
// returns the shared state; join_step_rng() sets the next shared state, derived from it alone (not
// from how many numbers the rank drew), so all ranks agree and a resumed run continues exactly.
Generator::State fork_step_rng(Generator& g, int rank);
void join_step_rng(Generator& g, const Generator::State& shared);

// The text for options a build without MPI cannot honour.
std::string needs_mpi_message(const std::string& what);

}  // namespace tg::dist
