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

constexpr const char* kUsage = R"(usage: [mpirun -np N] bench_mpi [options]
  --config S|M      bench_train's configs (default M)
  --threads N       kernel threads per rank (default 1)
  --warmup N        untimed steps first (default 2)
  --steps N         timed steps, median reported (default 7)
  --bucket-mb MB    allreduce bucket size (default 4)
  --json            end with one JSON line (rank 0)
  --seed S          (default 1)
)";

struct Options {
  std::string config = "M";
  int threads = 1, warmup = 2, steps = 7;
  int64_t bucket_mb = 4;
  bool json = false;
  uint64_t seed = 1;
};

int parse_int(const std::string& opt, const std::string& v, int min) {
  return bench::parse_int("bench_mpi", opt, v, min);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument("bench_mpi: " + a + " needs a value");
      return argv[++i];
    };
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (a == "--config") {
      o.config = value();
      bench::train_config(o.config, "bench_mpi");  // validates
    } else if (a == "--threads") {
      o.threads = parse_int(a, value(), 1);
    } else if (a == "--warmup") {
      o.warmup = parse_int(a, value(), 0);
    } else if (a == "--steps") {
      o.steps = parse_int(a, value(), 1);
    } else if (a == "--bucket-mb") {
      o.bucket_mb = parse_int(a, value(), 1);
    } else if (a == "--json") {
      o.json = true;
    } else if (a == "--seed") {
      o.seed = static_cast<uint64_t>(parse_int(a, value(), 0));
    } else {
      throw std::invalid_argument("bench_mpi: unknown option '" + a + "' (see --help)");
    }
  }
  return o;
}

int run(const Options& o) {
  dist::World world({.bucket_bytes = o.bucket_mb << 20, .timeout_s = 600, .quiet_others = true});
  ops::set_num_threads(o.threads);
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
    batches.push_back(
        dist::local_shard(bench::make_batch(c.batch, c.length, c.model.tgt_vocab, data), world));
  const NamedTensors& params = optim.params();

  using clock = std::chrono::steady_clock;
  std::vector<double> step_s, comm_s, pack_s;
  int64_t global_tokens = 0, bytes = 0, calls = 0;
  double loss = NAN;
  for (int i = 0; i < o.warmup + o.steps; ++i) {
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
  try {
    return run(parse(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
}
