#include "train/distributed.hpp"

#include <fmt/format.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <thread>

#ifdef TAPEGRAD_HAVE_MPI
#define OMPI_SKIP_MPICXX 1  // the C API only
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

namespace tg::dist {

namespace {

using clock = std::chrono::steady_clock;

// The fewest floats one MPI_Allreduce carries whatever --bucket-mb says: below a few KiB a
// message costs its latency, not its bytes, so smaller buckets only add calls.
constexpr int64_t kMinBucketFloats = 1024;

int env_int(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return -1;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  return *end ? -1 : static_cast<int>(x);
}

// splitmix64 over the generator words: a well-mixed 64-bit seed from a state.
uint64_t mix(const Generator::State& s, uint64_t salt) {
  uint64_t h = 0x243f6a8885a308d3ull ^ salt;
  for (uint64_t w : s.s) {
    h += w + 0x9e3779b97f4a7c15ull;
    h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
    h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
    h ^= h >> 31;
  }
  return h;
}

#ifdef TAPEGRAD_HAVE_MPI
// The watchdog: a thread that exits the process when a collective has not returned within the
// timeout (a rank that hangs instead of dying, a lost machine mpirun has not noticed yet).
class Watchdog {
 public:
  Watchdog(double timeout_s, int rank) : timeout_s_(timeout_s), rank_(rank) {
    if (timeout_s_ > 0) thread_ = std::thread([this] { run(); });
  }
  ~Watchdog() {
    if (!thread_.joinable()) return;
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void enter(const char* what) {
    if (!thread_.joinable()) return;
    std::lock_guard lock(mu_);
    what_ = what;
    since_ = clock::now();
    inside_ = true;
    cv_.notify_all();
  }
  void leave() {
    if (!thread_.joinable()) return;
    std::lock_guard lock(mu_);
    inside_ = false;
  }

 private:
  void run() {
    std::unique_lock lock(mu_);
    while (!stop_) {
      if (!inside_) {
        cv_.wait(lock);
        continue;
      }
      const auto deadline =
          since_ + std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(timeout_s_));
      if (clock::now() >= deadline) {
        std::fprintf(stderr,
                     "rank %d: error: no progress for %.0f s in %s: another rank has stopped or hangs. "
                     "Stopping this rank (mpirun then ends the job); the last saved checkpoint is "
                     "intact.\n",
                     rank_, timeout_s_, what_);
        std::fflush(stderr);
        std::_Exit(3);
      }
      cv_.wait_until(lock, deadline);
    }
  }
  double timeout_s_;
  int rank_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false, inside_ = false;
  const char* what_ = "";
  clock::time_point since_;
};
Watchdog* g_watchdog = nullptr;

void check(int rc, const char* what, int rank) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw std::runtime_error(fmt::format("rank {}: {} failed: {} (another rank has probably stopped)", rank,
                                       what, std::string(text, len)));
}
#endif

}  // namespace

bool built_with_mpi() {
#ifdef TAPEGRAD_HAVE_MPI
  return true;
#else
  return false;
#endif
}

int launcher_world_size() {
  // Open MPI's mpirun, MPICH/Hydra's mpiexec; Slurm's srun with PMIx sets PMIX_RANK.
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"})
    if (const int n = env_int(name); n > 0) return n;
  if (env_int("PMIX_RANK") >= 0) return std::max(1, env_int("SLURM_NTASKS"));
  return 0;  // not started by a launcher
}

std::string needs_mpi_message(const std::string& what) {
  return fmt::format(
      "{} needs a build with MPI: this one was built without it (install Open MPI, e.g. "
      "tools/install_deps.sh --mpi, then meson setup --reconfigure build -Dmpi=enabled)",
      what);
}

World::World(const Options& options) : options_(options) {
  const int launched = launcher_world_size();
#ifdef TAPEGRAD_HAVE_MPI
  if (launched == 0) return;  // not started by mpirun: one rank, no MPI_Init
  int provided = 0;
  if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
    throw std::runtime_error("MPI_Init_thread failed");
  initialized_ = true;
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  MPI_Comm local;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local);
  MPI_Comm_size(local, &local_size_);
  MPI_Comm_free(&local);
  if (size_ > 1) g_watchdog = new Watchdog(options_.timeout_s, rank_);
#else
  if (launched > 1)
    throw std::runtime_error(fmt::format("started as one of {} MPI ranks: {}", launched,
                                         needs_mpi_message("data-parallel training")));
#endif
  if (size_ > 1 && rank_ > 0 && options_.quiet_others) {
    std::fflush(stdout);
    if (!std::freopen("/dev/null", "w", stdout))
      std::fprintf(stderr, "rank %d: cannot silence stdout\n", rank_);
  }
}

World::~World() {
#ifdef TAPEGRAD_HAVE_MPI
  delete g_watchdog;
  g_watchdog = nullptr;
  if (!initialized_) return;
  if (std::uncaught_exceptions() > 0 && size_ > 1) {
    // Finalize would wait for ranks that may be blocked in a collective: exit with an error
    // instead (the caller prints the exception), and mpirun stops the job.
    std::fflush(stdout);
    return;
  }
  MPI_Finalize();
#endif
}

void World::collective(const char* what, void* data, int64_t count, bool is_double) {
#ifdef TAPEGRAD_HAVE_MPI
  if (g_watchdog) g_watchdog->enter(what);
  const auto t0 = clock::now();
  const int rc = MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(count),
                               is_double ? MPI_DOUBLE : MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  if (g_watchdog) g_watchdog->leave();
  check(rc, what, rank_);
  if (!is_double) {
    stats_.seconds += std::chrono::duration<double>(clock::now() - t0).count();
    stats_.calls += 1;
    stats_.bytes += count * static_cast<int64_t>(sizeof(float));
  }
#else
  (void)what, (void)data, (void)count, (void)is_double;
#endif
}

void World::allreduce_sum(std::span<double> values) {
  if (size_ == 1 || values.empty()) return;
  collective("MPI_Allreduce (metrics)", values.data(), static_cast<int64_t>(values.size()), true);
}

void World::barrier() {
#ifdef TAPEGRAD_HAVE_MPI
  if (size_ == 1) return;
  if (g_watchdog) g_watchdog->enter("MPI_Barrier");
  const int rc = MPI_Barrier(MPI_COMM_WORLD);
  if (g_watchdog) g_watchdog->leave();
  check(rc, "MPI_Barrier", rank_);
#endif
}

int64_t World::allreduce_gradients(const NamedTensors& params, int64_t local_tokens,
                                   std::span<double> extras) {
  if (size_ == 1) return local_tokens;
  const auto t0 = clock::now();
  // Layout: every parameter's gradient times local_tokens (zeros when undefined), then one flag
  // per parameter (1 when defined here), then local_tokens and the extras, each split in two
  // floats hi + lo so their sums keep ~48 bits.
  int64_t total = 0;
  for (const auto& [name, p] : params) total += p.numel();
  const int64_t nflags = static_cast<int64_t>(params.size());
  const int64_t nextra = 2 * (1 + static_cast<int64_t>(extras.size()));
  buffer_.resize(static_cast<size_t>(total + nflags + nextra));
  float* buf = buffer_.data();
  const float w = static_cast<float>(local_tokens);
  int64_t at = 0, k = 0;
  for (const auto& [name, p] : params) {
    const int64_t n = p.numel();
    const Tensor g = p.grad();
    if (g.defined()) {
      const float* src = g.data();
      for (int64_t i = 0; i < n; ++i) buf[at + i] = w * src[i];
    } else {
      std::fill(buf + at, buf + at + n, 0.0f);
    }
    buf[total + k++] = g.defined() ? 1.0f : 0.0f;
    at += n;
  }
  auto split = [&](int64_t i, double x) {
    const auto hi = static_cast<float>(x);
    buf[total + nflags + 2 * i] = hi;
    buf[total + nflags + 2 * i + 1] = static_cast<float>(x - static_cast<double>(hi));
  };
  split(0, static_cast<double>(local_tokens));
  for (size_t i = 0; i < extras.size(); ++i) split(static_cast<int64_t>(i) + 1, extras[i]);
  stats_.pack_seconds += std::chrono::duration<double>(clock::now() - t0).count();

  // Buckets: bounded message sizes; the last one carries the flags and the extras.
  const int64_t count = static_cast<int64_t>(buffer_.size());
  const int64_t per_bucket =
      std::max<int64_t>(kMinBucketFloats, options_.bucket_bytes / static_cast<int64_t>(sizeof(float)));
  for (int64_t b = 0; b < count; b += per_bucket)
    collective("MPI_Allreduce (gradients)", buf + b, std::min(per_bucket, count - b), false);

  const auto t1 = clock::now();
  auto joined = [&](int64_t i) {
    return static_cast<double>(buf[total + nflags + 2 * i]) +
           static_cast<double>(buf[total + nflags + 2 * i + 1]);
  };
  const double global = joined(0);
  const auto global_tokens = static_cast<int64_t>(std::llround(global));
  for (size_t i = 0; i < extras.size(); ++i) extras[i] = joined(static_cast<int64_t>(i) + 1);
  const float inv = global > 0 ? static_cast<float>(1.0 / global) : 0.0f;
  at = 0, k = 0;
  for (const auto& [name, p] : params) {
    const int64_t n = p.numel();
    if (buf[total + k++] > 0.0f) {
      Tensor g = p.grad();
      if (!g.defined()) {
        g = Tensor::zeros(p.shape());
        p.impl()->autograd->grad = g.impl_ptr();
      }
      float* dst = g.data();
      for (int64_t i = 0; i < n; ++i) dst[i] = buf[at + i] * inv;
    }
    at += n;
  }
  stats_.pack_seconds += std::chrono::duration<double>(clock::now() - t1).count();
  return global_tokens;
}

std::pair<int64_t, int64_t> shard(int64_t n, int rank, int size) {
  const int64_t base = n / size, extra = n % size;
  const int64_t begin = rank * base + std::min<int64_t>(rank, extra);
  return {begin, begin + base + (rank < extra ? 1 : 0)};
}

nn::Batch slice_rows(const nn::Batch& b, int64_t begin, int64_t end) {
  nn::Batch out;
  out.batch = end - begin, out.src_len = b.src_len, out.tgt_len = b.tgt_len;
  auto rows = [&](const std::vector<int32_t>& v, int64_t len) {
    return std::vector<int32_t>(v.begin() + begin * len, v.begin() + end * len);
  };
  out.src = rows(b.src, b.src_len);
  out.tgt_in = rows(b.tgt_in, b.tgt_len);
  out.labels = rows(b.labels, b.tgt_len);
  return out;
}

nn::Batch local_shard(const nn::Batch& global, const World& world) {
  if (!world.distributed()) return global;
  const auto [lo, hi] = shard(global.batch, world.rank(), world.size());
  return slice_rows(global, lo, hi);
}

int default_threads(const World& world) {
  cpu_set_t set;
  CPU_ZERO(&set);
  int allowed = static_cast<int>(std::thread::hardware_concurrency());
  if (sched_getaffinity(0, sizeof(set), &set) == 0) allowed = CPU_COUNT(&set);
  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  return std::max(1, std::min(allowed, cores / std::max(1, world.local_size())));
}

std::string threads_warning(const World& world, int threads) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (!world.distributed() || sched_getaffinity(0, sizeof(set), &set) != 0 || threads <= CPU_COUNT(&set))
    return "";
  return fmt::format(
      "warning: rank {}: {} threads but bound to {} core(s); use mpirun --bind-to none or --map-by "
      "slot:PE={} (or fewer threads)",
      world.rank(), threads, CPU_COUNT(&set), threads);
}

Generator::State fork_step_rng(Generator& g, int rank) {
  const Generator::State shared = g.state();
  g.set_state(Generator(mix(shared, 0x7261'6e6bull + static_cast<uint64_t>(rank))).state());
  return shared;
}

void join_step_rng(Generator& g, const Generator::State& shared) {
  g.set_state(Generator(mix(shared, 0x6e65'7874ull)).state());
}

}  // namespace tg::dist
