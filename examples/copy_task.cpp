// The copy task of "The Annotated Transformer": learn to output the input sequence.
//
// A readable tour of the API: build a Transformer from a config, plug it into the training loop
// (train/loop.hpp) as a Task whose batches are fresh random sequences (source = tokens + <eos>,
// decoder input = <bos> + tokens, labels = tokens + <eos>) and whose loss is the cross-entropy;
// the loop runs forward / backward / clip / optimizer step with a learning-rate schedule. Then
// decode held-out sequences greedily and report the exact-match accuracy.
//
//   build/examples/copy_task                      300 steps, then 1000 held-out sequences decoded
//   build/examples/copy_task --log copy.jsonl     also the run's log, and its loss curves in copy.loss.svg
//   mpirun -np 2 build/examples/copy_task         data-parallel: each rank takes its shard of every batch
// (--help: --steps, --seed, --threads, --batch-size, --eval, --precision, --json)
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>

#include "apps/cli.hpp"
#include "autograd/tape.hpp"
#include "nn/decode.hpp"
#include "nn/loss.hpp"
#include "nn/optim.hpp"
#include "nn/transformer.hpp"
#include "train/copy_task.hpp"
#include "train/curves.hpp"
#include "train/distributed.hpp"
#include "train/loop.hpp"

using namespace tg;
using namespace tg::nn;

namespace {

constexpr int64_t kVocab = 11;   // <pad> <bos> <eos> <unk> and the symbols 4..10
constexpr int64_t kLength = 10;  // symbols per sequence

struct Options {
  int64_t steps = 300, batch = 64, eval = 1000, seed = 1;
  bool json = false;
  std::string log;  // the run's log file; its loss curves go beside it (<log without .jsonl>.loss.svg)
  std::optional<int> threads;
  Precision precision = Precision::fp32;
};

// Fresh random sequences every step, the same on every rank (same seed); each rank trains on its
// rows of them.
class CopyTask : public train::Task {
 public:
  CopyTask(Transformer& model, Optimizer& optimizer, const dist::World& world, int64_t batch, uint64_t seed)
      : model_(model), optimizer_(optimizer), world_(world), batch_(batch), data_(seed * 1000003 + 17) {}

  Optimizer& optimizer() override { return optimizer_; }
  Generator& dropout_rng() override { return model_.rng(); }
  void next_batch() override {}
  train::BatchLoss forward_backward() override {
    const Batch b = dist::local_shard(train::copy_batch(batch_, kLength, kVocab, data_), world_);
    if (b.batch == 0) return {};
    const Tensor loss = label_smoothed_cross_entropy(model_.forward(b), b.labels);
    backward(loss);
    return {static_cast<double>(loss.item()) * static_cast<double>(b.num_label_tokens()),
            b.num_label_tokens()};
  }

 private:
  Transformer& model_;
  Optimizer& optimizer_;
  const dist::World& world_;
  int64_t batch_;
  Generator data_;
};

std::string show(std::span<const int32_t> ids) {
  return fmt::format("{}", fmt::join(ids, " "));
}

// Greedy decoding of `n` held-out sequences (a stream the training data never draws from), this
// rank's share of them; prints a few (unless `quiet`) and returns the number copied exactly, over all
// ranks.
int64_t exact_matches(Transformer& model, dist::World& world, int64_t n, uint64_t seed, bool quiet) {
  Generator held_out(seed * 7919 + 5);
  const Batch test = train::copy_batch(n, kLength, kVocab, held_out);
  const auto [first, last] = dist::shard(n, world.rank(), world.size());
  const auto row = [&](int64_t r) {
    return std::span(test.src).subspan(static_cast<size_t>(r * test.src_len), kLength);
  };
  int64_t exact = 0;
  for (int64_t r0 = first; r0 < last; r0 += 250) {  // 250 sequences per decode
    const int64_t rows = std::min<int64_t>(250, last - r0);
    const auto src = std::span(test.src).subspan(static_cast<size_t>(r0 * test.src_len),
                                                 static_cast<size_t>(rows * test.src_len));
    const Hypotheses out = greedy_decode(model, src, rows, test.src_len, kLength + 5);
    for (int64_t r = 0; r < rows; ++r) {
      const auto want = row(r0 + r);
      const auto& got = out[static_cast<size_t>(r)];
      exact += std::equal(want.begin(), want.end(), got.begin(), got.end());
      if (r0 + r - first < 3 && !quiet) fmt::print("  src {}  ->  {}\n", show(want), show(got));
    }
  }
  double sum = static_cast<double>(exact);
  world.allreduce_sum({&sum, 1});
  return std::llround(sum);
}

// stdout, and with --log (rank 0) the log file and its loss curves, both checked before training.
train::Log run_log(const Options& opt, const LrSchedule& schedule, const dist::World& world) {
  train::Log log(opt.json);
  if (!opt.log.empty() && world.is_root()) {
    const std::string curves = std::filesystem::path(opt.log).replace_extension(".loss.svg").string();
    train::prepare_output(opt.log);
    train::prepare_output(curves);
    log = train::Log(opt.json, opt.log, false, curves);
  }
  log.add_to_start({{"program", "copy_task"},
                    {"schedule", nlohmann::ordered_json::parse(train::schedule_json(schedule))}});
  return log;
}

int run(const Options& opt) {
  dist::World world;  // MPI ranks under mpirun, else one; ranks > 0 print nothing on stdout
  // The model is small: extra threads buy little and spin-wait badly on a busy machine, so one
  // thread unless asked otherwise (--threads, or OMP_NUM_THREADS in the environment).
  if (!opt.threads && std::getenv("OMP_NUM_THREADS") == nullptr) ops::set_num_threads(1);

  TransformerConfig cfg;
  cfg.src_vocab = cfg.tgt_vocab = kVocab;
  cfg.d_model = 64;
  cfg.heads = 4;
  cfg.enc_layers = cfg.dec_layers = 2;
  cfg.d_ff = 128;
  cfg.dropout = 0.0f;  // the task has no noise to regularise against
  cfg.max_len = 64;
  Transformer model(cfg, static_cast<uint64_t>(opt.seed));
  Adam optim(model.named_parameters(), {.lr = 0.0f, .beta1 = 0.9f, .beta2 = 0.98f, .eps = 1e-9f});
  CopyTask task(model, optim, world, opt.batch, static_cast<uint64_t>(opt.seed));
  train::LoopOptions lo;
  lo.total_steps = opt.steps;
  // Warmup, then a cosine decay to zero: the small final steps settle the last few mistakes.
  lo.schedule = {.kind = LrSchedule::Kind::cosine, .lr = 3e-3f, .warmup = 50, .total = opt.steps};
  lo.clip = 1.0;
  lo.log_every = std::max<int64_t>(1, opt.steps / 15);
  lo.precision = opt.precision;
  const train::Log log = run_log(opt, lo.schedule, world);
  log.line("start",
           {{"parameters", model.num_parameters()},
            {"vocab", kVocab},
            {"length", kLength},
            {"total_steps", opt.steps},
            {"threads", ops::num_threads()},
            {"ranks", world.size()},
            {"precision", precision_name(opt.precision)}},
           fmt::format("copy task: vocab {}, length {}; {} parameters; kernels {}, {}{}; {}", kVocab, kLength,
                       model.num_parameters(), ops::arch_name(ops::active_arch()),
                       train::plural(ops::num_threads(), "thread"),
                       world.distributed() ? fmt::format(" per rank, {} MPI ranks", world.size()) : "",
                       products_report(opt.precision)));
  model.train();
  const train::LoopResult r = train::run_loop(task, world, log, lo);
  if (r.exit_status() != 0) return r.exit_status();  // stopped on a NaN/Inf (3) or interrupted (130)

  const PrecisionScope precision(opt.precision);
  const int64_t exact = exact_matches(model, world, opt.eval, static_cast<uint64_t>(opt.seed), opt.json);
  const double percent = 100.0 * static_cast<double>(exact) / static_cast<double>(opt.eval);
  log.line("eval", {{"exact_match", exact}, {"sequences", opt.eval}, {"exact_match_percent", percent}},
           fmt::format("exact match: {}/{} = {:.1f}% (greedy decoding, held-out)", exact, opt.eval, percent));
  return exact == opt.eval ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  cli::Program app(
      fmt::format("Trains a small Transformer to copy random sequences (vocab {}, length {}), then "
                  "reports the\nexact-match accuracy of greedy decoding on held-out sequences.",
                  kVocab, kLength),
      "copy_task");
  cli::style(app, "[options]");
  app.footer(
      "Under mpirun -np N (an MPI build) the N ranks share every batch (data parallelism); the\n"
      "results are those of one process up to rounding. Exit status: 0 when every held-out\n"
      "sequence is copied exactly, 1 otherwise or on a runtime error, 2 for a bad command line,\n"
      "3 when training stopped on a NaN/Inf loss or gradient, 130 when interrupted.");
  Options o;
  cli::add_int(app, "--steps", o.steps, "training steps", 1);
  cli::add_int(app, "--batch-size", o.batch, "sequences per step", 1);
  cli::add_int(app, "--eval", o.eval, "held-out sequences to decode", 1);
  cli::add_int(app, "--seed", o.seed, "seed for the model, the data and dropout", 0);
  cli::add_threads(app, o.threads, "OMP_NUM_THREADS if set, else 1");
  cli::add_flag(app, "--json", o.json, "one JSON object per output line");
  cli::add_text(app, "--log", o.log,
                "the run's log, one JSON object per line; its loss curves are drawn beside it (copy.jsonl: "
                "copy.loss.svg)");
  cli::add_precision(app, o.precision);
  return cli::run(app, argc, argv, [&] { return run(o); });
}
