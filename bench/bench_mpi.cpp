// bench_mpi: data-parallel training speed under mpirun: tokens/s of the global batch, and per step
// the time spent in the gradient allreduce and the bytes reduced, for projecting to more machines.
//
//   build/bench/bench_mpi --config M                                    # one rank
//   mpirun -np 2 --bind-to core build/bench/bench_mpi --config M --json   # two ranks x 1 thread
//   tools/bench_mpi.sh                        # 1 and 2 ranks, repeated, median table + projection
//
// The model, batch and data are bench_train's configs S and M (bench/train_configs.hpp: M is d 256,
// 8 heads, ff 1024, 3+3 layers, vocab 1000, batch 64, length 64, dropout 0.1, Adam, label smoothing
// 0.1). The global batch is the same for any number of ranks; each rank trains on its shard
// (train/distributed.hpp) and the step is forward, backward, allreduce, clip, Adam.
//
// Reported (rank 0; the allreduce makes every step as slow as the slowest rank):
//   ms/step and tokens/s     median over the timed steps; tokens = non-pad labels of the global batch
//   allreduce ms/step        time inside MPI_Allreduce during the step, including waiting for the
//                            slower rank (load imbalance shows up here)
//   pure allreduce ms        the same buffer allreduced right after a barrier, nothing else
//                            running: the transfer cost alone
//   pack ms/step             scaling and copying gradients into and out of the buckets
//   bytes/step               the payload each rank reduces (fp32 gradients + a few flags)
#include <fmt/core.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "autograd/tape.hpp"
#include "bench/cli.hpp"
#include "bench/timing.hpp"
#include "bench/train_configs.hpp"
#include "nn/loss.hpp"
#include "nn/optim.hpp"
#include "nn/transformer.hpp"
#include "ops/kernels.hpp"
#include "train/distributed.hpp"

namespace {

using namespace tg;
using namespace tg::nn;

struct Options {
  std::string config = "M";
  int64_t warmup = 2, steps = 7, bucket_mb = 4;
  std::optional<int> threads;
  bool json = false;
  uint64_t seed = 1;
};

int run(const Options& o) {
  dist::World world({.bucket_bytes = o.bucket_mb << 20, .timeout_s = 600, .quiet_others = true});
  ops::set_num_threads(o.threads.value_or(1));
  const bench::TrainConfig c = bench::train_config(o.config, "bench_mpi");
  Transformer model(c.model, o.seed);
  model.train();
  Adam optim(model.named_parameters(), {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.98f, .eps = 1e-9f});
  fmt::print(
      "bench_mpi config {}: {} parameters, global batch {} x length {}; {} rank(s) x {} thread(s); {}\n",
      o.config, model.num_parameters(), c.batch, c.length, world.size(), ops::num_threads(),
      ops::arch_name(ops::active_arch()));

  Generator data(o.seed * 1000003 + 17);
  std::vector<Batch> batches;
  for (int i = 0; i < 4; ++i)
    batches.push_back(dist::local_shard(bench::copy_batch(c, c.batch, data), world));
  const NamedTensors& params = optim.params();

  using clock = std::chrono::steady_clock;
  std::vector<double> step_s, comm_s, pack_s;
  int64_t global_tokens = 0, bytes = 0, calls = 0;
  double loss = NAN;
  for (int64_t i = 0; i < o.warmup + o.steps; ++i) {
    const Batch& b = batches[static_cast<size_t>(i) % batches.size()];
    world.reset_stats();
    const auto t0 = clock::now();
    const Generator::State shared = dist::fork_step_rng(model.rng(), world.rank());
    optim.zero_grad();
    const Tensor l = label_smoothed_cross_entropy(model.forward(b), b.labels, c.label_smoothing);
    backward(l);
    double sum = static_cast<double>(l.item()) * static_cast<double>(b.num_label_tokens());
    global_tokens = world.allreduce_gradients(params, b.num_label_tokens(), {&sum, 1});
    dist::join_step_rng(model.rng(), shared);
    clip_grad_norm(params, 1.0);
    optim.step();
    const double dt = bench::seconds_since(t0);
    loss = sum / static_cast<double>(global_tokens);
    if (i < o.warmup) continue;
    step_s.push_back(dt);
    comm_s.push_back(world.stats().seconds);
    pack_s.push_back(world.stats().pack_seconds);
    bytes = world.stats().bytes;
    calls = world.stats().calls;
  }
  // The transfer alone: the same buffer, all ranks lined up first.
  std::vector<double> pure_s;
  for (int i = 0; i < 5 && world.distributed(); ++i) {
    world.barrier();
    world.reset_stats();
    world.allreduce_gradients(params, 1);
    pure_s.push_back(world.stats().seconds);
  }
  const bench::Stats step = bench::stats_of(step_s), comm = bench::stats_of(comm_s),
                     pack = bench::stats_of(pack_s), pure = bench::stats_of(pure_s);
  const double tok_s = static_cast<double>(global_tokens) / step.median;
  fmt::print(
      "  step {:.1f} ms (median of {}, range {:.1f}..{:.1f}), {:.0f} tokens/s; loss {:.4f}\n"
      "  allreduce per step: {:.2f} ms in MPI ({} calls, {:.2f} MB), pack {:.2f} ms; the transfer alone "
      "{:.2f} ms\n",
      step.median * 1e3, step.reps, step.min * 1e3, step.max * 1e3, tok_s, loss,
      world.distributed() ? comm.median * 1e3 : 0.0, calls, static_cast<double>(bytes) / 1e6,
      world.distributed() ? pack.median * 1e3 : 0.0, world.distributed() ? pure.median * 1e3 : 0.0);
  if (o.json)
    fmt::print("{}\n",
               nlohmann::ordered_json{{"config", o.config},
                                      {"ranks", world.size()},
                                      {"threads", ops::num_threads()},
                                      {"parameters", model.num_parameters()},
                                      {"global_batch", c.batch},
                                      {"tokens_per_step", global_tokens},
                                      {"ms_per_step", step.median * 1e3},
                                      {"tokens_per_s", tok_s},
                                      {"allreduce_ms", world.distributed() ? comm.median * 1e3 : 0.0},
                                      {"pack_ms", world.distributed() ? pack.median * 1e3 : 0.0},
                                      {"pure_allreduce_ms", world.distributed() ? pure.median * 1e3 : 0.0},
                                      {"bytes_per_step", bytes},
                                      {"allreduce_calls", calls},
                                      {"loss", loss}}
                   .dump());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  cli::Program app(
      "Data-parallel training speed under mpirun: tokens/s of the global batch, and per step the time in\n"
      "the gradient allreduce and the bytes reduced. Exit status 1 on a runtime error, 2 for a bad\n"
      "command line.",
      "bench_mpi");
  cli::style(app, "[options]   (under mpirun -np N)");
  Options o;
  bench::add_config_option(app, o.config);
  cli::add_threads(app, o.threads, "1");
  cli::add_int(app, "--warmup", o.warmup, "untimed steps first", 0);
  cli::add_int(app, "--steps", o.steps, "timed steps, median reported", 1);
  cli::add_int(app, "--bucket-mb", o.bucket_mb, "allreduce bucket size in MiB", 1, 1 << 12, "MB");
  cli::add_flag(app, "--json", o.json, "end with one JSON line (rank 0)");
  cli::add_int(app, "--seed", o.seed, "model, data and dropout seed", 0);
  return cli::run(app, argc, argv, [&] { return run(o); });
}
