// The copy task of "The Annotated Transformer": learn to output the input sequence.
//
// A readable tour of the API: build a Transformer from a config, make batches (source = tokens +
// <eos>, decoder input = <bos> + tokens, labels = tokens + <eos>), run forward / loss / backward /
// clip / optimizer step with a learning-rate schedule, then decode held-out sequences greedily
// and report the exact-match accuracy.
//
//   build/examples/copy_task [--steps N] [--seed S] [--threads T] [--batch-size B] [--eval N]
//   mpirun -np 2 build/examples/copy_task     data-parallel: each rank takes its shard of every batch
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <cstdlib>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

#include "autograd/tape.hpp"
#include "nn/decode.hpp"
#include "nn/loss.hpp"
#include "nn/optim.hpp"
#include "nn/transformer.hpp"
#include "ops/kernels.hpp"
#include "train/distributed.hpp"
#include "train/guard.hpp"

using namespace tg;
using namespace tg::nn;
using namespace tg::train;

namespace {

constexpr int64_t kVocab = 11;   // <pad> <bos> <eos> <unk> and the symbols 4..10
constexpr int64_t kLength = 10;  // symbols per sequence
constexpr int32_t kFirstSymbol = kUnk + 1;

struct Options {
  int64_t steps = 300, batch = 64, eval = 1000, threads = 0;
  uint64_t seed = 1;
};

void usage() {
  fmt::print(
      "usage: copy_task [options]\n"
      "Trains a small Transformer to copy random sequences (vocab {}, length {}), then reports the\n"
      "exact-match accuracy of greedy decoding on held-out sequences.\n\n"
      "  --steps N       training steps (default 300)\n"
      "  --batch-size B  sequences per step (default 64)\n"
      "  --eval N        held-out sequences to decode (default 1000)\n"
      "  --seed S        seed for the model, the data and dropout (default 1)\n"
      "  --threads T     kernel threads (default: OMP_NUM_THREADS if set, else 1)\n"
      "  --help          this message\n"
      "Under mpirun -np N (an MPI build) the N ranks share every batch (data parallelism); the\n"
      "results are those of one process up to rounding.\n"
      "Exit status 0 when every held-out sequence is copied exactly, 1 otherwise, 2 on errors.\n",
      kVocab, kLength);
}

int64_t parse_int(const std::string& flag, const char* value, int64_t min) {
  char* end = nullptr;
  const long long v = std::strtoll(value, &end, 10);
  if (end == value || *end != '\0' || v < min)
    throw std::invalid_argument(fmt::format("{}: expected an integer >= {}, got '{}'", flag, min, value));
  return v;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      usage();
      std::exit(0);
    }
    if (i + 1 >= argc) throw std::invalid_argument(fmt::format("{}: missing value (see --help)", a));
    const char* v = argv[++i];
    if (a == "--steps")
      o.steps = parse_int(a, v, 1);
    else if (a == "--batch-size")
      o.batch = parse_int(a, v, 1);
    else if (a == "--eval")
      o.eval = parse_int(a, v, 1);
    else if (a == "--seed")
      o.seed = static_cast<uint64_t>(parse_int(a, v, 0));
    else if (a == "--threads")
      o.threads = parse_int(a, v, 1);
    else
      throw std::invalid_argument(fmt::format("unknown option '{}' (see --help)", a));
  }
  return o;
}

// `n` random sequences as a batch: src = x + <eos>, tgt_in = <bos> + x, labels = x + <eos>.
Batch make_batch(int64_t n, Generator& gen) {
  Batch b;
  b.batch = n, b.src_len = kLength + 1, b.tgt_len = kLength + 1;
  for (int64_t r = 0; r < n; ++r) {
    b.tgt_in.push_back(kBos);
    for (int64_t t = 0; t < kLength; ++t) {
      const auto s = static_cast<int32_t>(kFirstSymbol + gen.below(kVocab - kFirstSymbol));
      b.src.push_back(s);
      b.labels.push_back(s);
      b.tgt_in.push_back(s);
    }
    b.src.push_back(kEos);
    b.labels.push_back(kEos);
  }
  return b;
}

std::string show(std::span<const int32_t> ids) {
  return fmt::format("{}", fmt::join(ids, " "));
}

}  // namespace

int main(int argc, char** argv) try {
  const Options opt = parse(argc, argv);
  dist::World world;  // MPI ranks under mpirun, else one; ranks > 0 print nothing on stdout
  // The model is small: extra threads buy little and spin-wait badly on a busy machine, so one
  // thread unless asked otherwise (--threads, or OMP_NUM_THREADS in the environment).
  if (opt.threads > 0)
    ops::set_num_threads(static_cast<int>(opt.threads));
  else if (std::getenv("OMP_NUM_THREADS") == nullptr)
    ops::set_num_threads(1);

  TransformerConfig cfg;
  cfg.src_vocab = cfg.tgt_vocab = kVocab;
  cfg.d_model = 64;
  cfg.heads = 4;
  cfg.enc_layers = cfg.dec_layers = 2;
  cfg.d_ff = 128;
  cfg.dropout = 0.0f;  // the task has no noise to regularise against
  cfg.max_len = 64;
  Transformer model(cfg, opt.seed);
  Adam optim(model.named_parameters(), {.lr = 0.0f, .beta1 = 0.9f, .beta2 = 0.98f, .eps = 1e-9f});
  // Warmup, then a cosine decay to zero: the small final steps settle the last few mistakes.
  const LrSchedule schedule{.kind = LrSchedule::Kind::cosine, .lr = 3e-3f, .warmup = 50, .total = opt.steps};
  fmt::print("copy task: vocab {}, length {}; {} parameters; kernels {}, {} threads{}\n", kVocab, kLength,
             model.num_parameters(), ops::arch_name(ops::active_arch()), ops::num_threads(),
             world.distributed() ? fmt::format(" per rank, {} MPI ranks", world.size()) : "");

  Generator data(opt.seed * 1000003 + 17);
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  double loss_sum = 0.0;
  int64_t tokens = 0, window = 0;
  const int64_t every = std::max<int64_t>(1, opt.steps / 15);
  model.train();
  for (int64_t step = 1; step <= opt.steps; ++step) {
    const Batch global = make_batch(opt.batch, data);  // every rank draws the same batch
    const Batch b = dist::local_shard(global, world);
    optim.set_lr(schedule.at(step));
    optim.zero_grad();
    double step_loss = 0;  // loss x tokens; the global batch's after the allreduce
    if (b.batch > 0) {
      const Tensor loss = label_smoothed_cross_entropy(model.forward(b), b.labels);
      backward(loss);
      step_loss = static_cast<double>(loss.item()) * static_cast<double>(b.num_label_tokens());
    }
    // Gradient of the global batch's token-mean loss on every rank (no-op on one rank).
    const int64_t step_tokens =
        world.allreduce_gradients(optim.params(), b.num_label_tokens(), {&step_loss, 1});
    const double mean_loss = step_loss / static_cast<double>(step_tokens);
    // clip_grad_norm + optim.step(), except that a NaN/Inf loss or gradient is never applied
    // (train/guard.hpp): here it ends the run with a message naming the step and the parameter. Every
    // rank holds the same global gradients, so all of them decide alike.
    if (const StepOutcome r = guarded_step(optim, static_cast<float>(mean_loss), 1.0, step); !r.applied)
      throw std::runtime_error(r.problem);
    loss_sum += mean_loss;
    tokens += step_tokens;
    ++window;
    if (step % every == 0 || step == opt.steps) {
      const double secs = std::chrono::duration<double>(clock::now() - start).count();
      const double eta = secs / static_cast<double>(step) * static_cast<double>(opt.steps - step);
      fmt::print("step {:5d}/{}  loss {:.4f}  {:7.0f} tok/s  lr {:.2e}  elapsed {:.1f}s  ETA {:.1f}s\n", step,
                 opt.steps, loss_sum / static_cast<double>(window), static_cast<double>(tokens) / secs,
                 optim.lr(), secs, eta);
      loss_sum = 0.0;
      window = 0;
    }
  }

  // Held-out sequences come from a different stream than the training data.
  Generator held_out(opt.seed * 7919 + 5);
  const Batch test = make_batch(opt.eval, held_out);
  const int64_t chunk = 250;
  int64_t exact = 0;
  Hypotheses all;
  const auto [first, last] = dist::shard(opt.eval, world.rank(), world.size());  // this rank decodes these
  for (int64_t r0 = first; r0 < last; r0 += chunk) {
    const int64_t n = std::min(chunk, last - r0);
    const auto src = std::span(test.src).subspan(static_cast<size_t>(r0 * test.src_len),
                                                 static_cast<size_t>(n * test.src_len));
    for (auto& h : greedy_decode(model, src, n, test.src_len, kLength + 5)) all.push_back(std::move(h));
  }
  for (int64_t r = first; r < last; ++r) {
    const auto want = std::span(test.src).subspan(static_cast<size_t>(r * test.src_len), kLength);
    exact += std::equal(want.begin(), want.end(), all[static_cast<size_t>(r - first)].begin(),
                        all[static_cast<size_t>(r - first)].end());
  }
  double exact_sum = static_cast<double>(exact);
  world.allreduce_sum({&exact_sum, 1});
  exact = std::llround(exact_sum);
  for (int64_t r = 0; r < std::min<int64_t>(3, last - first); ++r)
    fmt::print("  src {}  ->  {}\n",
               show(std::span(test.src).subspan(static_cast<size_t>(r * test.src_len), kLength)),
               show(all[static_cast<size_t>(r)]));
  fmt::print("exact match: {}/{} = {:.1f}% (greedy decoding, held-out)\n", exact, opt.eval,
             100.0 * static_cast<double>(exact) / static_cast<double>(opt.eval));
  return exact == opt.eval ? 0 : 1;
} catch (const std::exception& e) {
  fmt::print(stderr, "copy_task: error: {}\n", e.what());
  return 2;
}
