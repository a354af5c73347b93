// bench_train: end-to-end speed of the encoder-decoder Transformer on the copy task (random tokens):
// training step (ms/step, target tokens/s, achieved FLOP/s vs the machine's measured FMA peak and,
// where the CPU has one, its bf16 dot-product peak), greedy
// decoding (tokens/s at batch 64 and 1) and peak RSS; and, with --time-to-accuracy, how many steps and
// seconds training takes to copy 99% of held-out sequences exactly.
//
//   ninja -C build-bench bench/bench_train
//   build-bench/bench/bench_train --config S --threads 1            # ~15 s
//   build-bench/bench/bench_train --config M --threads 2 --json     # ~1 min; last line is JSON
//   build-bench/bench/bench_train --time-to-accuracy --threads 2    # up to ~30 min (3000 steps cap)
//   build-bench/bench/bench_train --config S --profile             # + per-op time/bytes table
//   build-bench/bench/bench_train --config M --threads 2 --precision bf16   # bf16 products
//   (autograd/precision.hpp) tools/bench_train.sh [--quick]      # both configs, 1 and 2 threads, beside
//   PyTorch, as a table
//
// One config and thread count per process, so that peak RSS (getrusage ru_maxrss, a high-water
// mark) belongs to that run alone. It is read after training and decoding, before the peak
// loops, whose bandwidth test allocates 192 MiB of its own.
//
// Configs S and M and the copy-task sequences (shared with bench_mpi): bench/train_configs.hpp.
#include <sys/resource.h>

#include <fmt/core.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "autograd/precision.hpp"
#include "autograd/profile.hpp"
#include "autograd/tape.hpp"
#include "bench/bench.hpp"
#include "bench/cli.hpp"
#include "bench/train_configs.hpp"
#include "nn/decode.hpp"
#include "nn/loss.hpp"
#include "nn/optim.hpp"
#include "nn/transformer.hpp"

namespace {

using namespace tg;
using namespace tg::nn;
using tg::bench::Stats;
using tg::bench::TimingOptions;

struct Options {
  std::string config = "S";
  int threads = 1;
  std::optional<int> warmup, steps;  // default: the config's
  bool quick = false, json = false, peak = true, time_to_accuracy = false, profile = false, decode = true;
  int64_t max_steps = 3000;
  uint64_t seed = 1;
  Precision precision = Precision::fp32;
};

// A shared config (bench/train_configs.hpp) with this program's default warm-up and timed steps.
struct BenchConfig : bench::TrainConfig {
  int warmup = 3, steps = 15;
};

BenchConfig bench_config(const std::string& name) {
  BenchConfig c;
  static_cast<bench::TrainConfig&>(c) = bench::train_config(name, "bench_train");
  if (name == "M") c.warmup = 2, c.steps = 7;
  return c;
}

// Matmul FLOPs of one forward pass (2 per multiply-add) over B sequences of source length S and
// target length T, with Ns = B*S and Nt = B*T tokens, d = d_model, f = d_ff, V = tgt_vocab:
//   encoder layer:  Q,K,V and output projections 8*Ns*d^2 + scores Q K^T and P V 4*B*S^2*d
//                   + feed-forward 4*Ns*d*f
//   decoder layer:  self-attention 8*Nt*d^2 + 4*B*T^2*d (the full T x T, although a causal row
//                   needs only its prefix), cross-attention Q and output projections 4*Nt*d^2
//                   + K,V of the memory 4*Ns*d^2 + scores and P V 4*B*T*S*d, feed-forward 4*Nt*d*f
//   generator:      2*Nt*d*V
// A training step is 3x that: for every forward matmul Y = X W the backward does two of the same
// size (dX = dY W^T and dW = X^T dY). Embedding gathers, softmax, layernorm, the loss and Adam are
// not counted: the fraction of peak is that of the matmul work, the usual convention.
// tools/bench_torch_train.py uses the same formula.
double forward_matmul_flops(const TransformerConfig& m, int64_t B, int64_t S, int64_t T) {
  const double d = static_cast<double>(m.d_model), f = static_cast<double>(m.d_ff);
  const double b = static_cast<double>(B), s = static_cast<double>(S), t = static_cast<double>(T);
  const double Ns = b * s, Nt = b * t;
  const double enc = 8 * Ns * d * d + 4 * b * s * s * d + 4 * Ns * d * f;
  const double dec = 8 * Nt * d * d + 4 * b * t * t * d + 4 * Nt * d * d + 4 * Ns * d * d +
                     4 * b * t * s * d + 4 * Nt * d * f;
  return static_cast<double>(m.enc_layers) * enc + static_cast<double>(m.dec_layers) * dec +
         2 * Nt * d * static_cast<double>(m.tgt_vocab);
}

// forward, loss, backward, Adam: one training step. Returns the loss. `weights`: bf16 copies of the
// weights made once per step where TAPEGRAD_BF16_WEIGHTS=step asks (autograd/precision.hpp), as
// train::Loop does.
float train_step(Transformer& model, Adam& optim, const Batch& b, float label_smoothing,
                 Bf16StepWeights& weights) {
  const auto use = weights.step();
  optim.zero_grad();
  profile::mark("(zero_grad)");
  const Tensor loss = label_smoothed_cross_entropy(model.forward(b), b.labels, label_smoothing);
  backward(loss);
  optim.step();
  profile::mark("(optimizer step)");
  const float value = loss.item();
  if (!std::isfinite(value)) throw std::runtime_error(fmt::format("bench_train: the loss is {}", value));
  return value;
}

// Greedy decoding forced to run `new_tokens` steps on every row: <eos> is not special here.
// nn::greedy_decode drops rows that emit <eos>, which would make its speed depend on what the model
// has learnt; this is its loop (the same public incremental API: encode once, then one decode_step
// per token over the K/V caches) without the early exit, so tokens/s = batch * new_tokens / time.
// The time includes encoding the source.
void decode_forced(Transformer& model, const Batch& b, int64_t new_tokens) {
  const bool was_training = model.is_training();
  model.eval();
  {
    NoGradGuard no_grad;
    const int64_t V = model.config().tgt_vocab;
    DecoderState st = model.start_decoding(model.encode(b.src, b.batch, b.src_len),
                                           padding_mask(b.src, b.batch, b.src_len));
    std::vector<int32_t> tokens(static_cast<size_t>(b.batch), kBos);
    for (int64_t step = 0; step < new_tokens; ++step) {
      const Tensor logits = model.decode_step(st, tokens);
      for (int64_t r = 0; r < b.batch; ++r) {
        const float* row = logits.data() + r * V;
        tokens[static_cast<size_t>(r)] = static_cast<int32_t>(std::max_element(row, row + V) - row);
      }
    }
  }
  model.train(was_training);
}

double peak_rss_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;  // Linux reports KiB
}

// One JSON object on one line, the format tools/bench_train.sh reads; keys in the order written.
// JSON has no NaN: nlohmann writes a non-finite number (no peak measured with --no-peak) as null.
using JsonLine = nlohmann::ordered_json;

int run_speed(const Options& o) {
  BenchConfig c = bench_config(o.config);
  const int warmup = o.warmup ? *o.warmup : (o.quick ? 1 : c.warmup);
  const int steps = o.steps ? *o.steps : (o.quick ? 3 : c.steps);
  const int decode_reps = o.quick ? 2 : 5;
  constexpr int64_t kNewTokens = 32;

  Transformer model(c.model, o.seed);
  model.train();
  Adam optim(model.named_parameters(), {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.98f, .eps = 1e-9f});
  fmt::print(
      "bench_train config {}: d {} heads {} ff {} layers {}+{} vocab {} batch {} length {}; {} parameters\n",
      c.name, c.model.d_model, c.model.heads, c.model.d_ff, c.model.enc_layers, c.model.dec_layers,
      c.model.tgt_vocab, c.batch, c.length, model.num_parameters());
  fmt::print("  kernels: {}; threads {}; precision {} (products in {})\n", ops::arch_report(),
             ops::num_threads(), precision_name(o.precision),
             precision_name(effective_precision(o.precision)));

  // A few batches made up front, so the timed steps do only model work.
  Generator data(o.seed * 1000003 + 17);
  std::vector<Batch> batches;
  for (int i = 0; i < 4; ++i) batches.push_back(bench::copy_batch(c, c.batch, data));
  const double tokens_per_step = static_cast<double>(batches[0].num_label_tokens());
  const double flops_per_step = 3 * forward_matmul_flops(c.model, c.batch, c.length, c.length);

  // The first steps fill the tensor pool and Adam's state; measure() adds one more warm-up call.
  size_t next = 0;
  float first_loss = NAN, last_loss = NAN;
  Bf16StepWeights weights;
  auto step = [&] {
    last_loss = train_step(model, optim, batches[next++ % batches.size()], c.label_smoothing, weights);
    if (std::isnan(first_loss)) first_loss = last_loss;
  };
  for (int i = 0; i + 1 < warmup; ++i) step();
  const bench::ProbedSteps probed = bench::measure_probed(step, steps, o.threads, o.peak);
  const Stats& train = probed.time;
  const double gflops = flops_per_step / train.median * 1e-9;
  const double train_rss = peak_rss_mib();
  fmt::print(
      "  train: {:.1f} ms/step (median of {}, range {:.1f}..{:.1f}), {:.0f} target tokens/s, "
      "{:.1f} GFLOP/s; loss {:.3f} -> {:.3f}; peak RSS {:.1f} MiB\n",
      train.median * 1e3, train.reps, train.min * 1e3, train.max * 1e3, tokens_per_step / train.median,
      gflops, first_loss, last_loss, train_rss);
  std::fflush(stdout);
  if (o.profile) {
    profile::enable();
    profile::reset();
    for (int i = 0; i < steps; ++i) step();
    profile::enable(false);
    fmt::print("{}", profile::report());
    std::fflush(stdout);
  }

  // Decoding speed with the weights as the timed steps left them (the speed does not depend on them).
  double decode_tok_s[2] = {NAN, NAN};
  const int64_t decode_batches[2] = {c.batch, 1};
  for (int i = 0; i < (o.decode ? 2 : 0); ++i) {
    Generator g(o.seed + 99);
    const Batch src = bench::copy_batch(c, decode_batches[i], g);
    const Stats s =
        bench::measure([&] { decode_forced(model, src, kNewTokens); }, TimingOptions{decode_reps, 0.0, 0.0});
    decode_tok_s[i] = static_cast<double>(decode_batches[i] * kNewTokens) / s.median;
    fmt::print("  greedy decode batch {}: {} new tokens each (<eos> ignored), {:.1f} ms, {:.0f} tokens/s\n",
               decode_batches[i], kNewTokens, s.median * 1e3, decode_tok_s[i]);
  }
  const double rss = peak_rss_mib();
  fmt::print("  peak RSS (training + decoding) {:.1f} MiB\n", rss);

  const std::string arch = ops::arch_name(ops::active_arch());
  bench::StepPeaks peaks;
  if (o.peak) {
    peaks = bench::measure_step_peaks(o.threads, o.quick);
    bench::print_step_peaks(peaks, gflops);
    bench::print_probed_peak(probed, flops_per_step, o.threads);
  }
  const Stats frac_probe = bench::frac_of_probes(probed, flops_per_step);

  if (o.json)
    fmt::print("{}\n", JsonLine{{"impl", "tapegrad"},
                                {"config", c.name},
                                {"threads", o.threads},
                                {"setting", fmt::format("{} thr {}", o.threads, precision_name(o.precision))},
                                {"precision", precision_name(o.precision)},
                                {"products", precision_name(effective_precision(o.precision))},
                                {"arch", arch},
                                {"steps", train.reps},
                                {"ms_per_step", train.median * 1e3},
                                {"ms_min", train.min * 1e3},
                                {"ms_max", train.max * 1e3},
                                {"tokens_per_s", tokens_per_step / train.median},
                                {"flops_per_step", flops_per_step},
                                {"gflops", gflops},
                                {"peak_gflops", peaks.fma},
                                {"frac_peak", gflops / peaks.fma},
                                {"probe_peak_gflops", bench::stats_of(probed.probe).median},
                                {"frac_probe_peak", frac_probe.median},
                                {"peak_bf16_gflops", peaks.bf16},
                                {"frac_bf16_peak", gflops / peaks.bf16},
                                {"train_rss_mib", train_rss},
                                {"peak_rss_mib", rss},
                                {"decode_new_tokens", kNewTokens},
                                {"decode_batch", c.batch},
                                {"decode_batch_tok_s", decode_tok_s[0]},
                                {"decode_b1_tok_s", decode_tok_s[1]},
                                {"loss_first", first_loss},
                                {"loss_last", last_loss},
                                {"quick", o.quick}}
                           .dump());
  return 0;
}

// Time to 99%: fresh random batches every step, greedy exact match on held-out sequences every
// kEvalEvery steps. "train s" excludes the evaluations; "wall s" includes them.
int run_time_to_accuracy(const Options& o) {
  constexpr int64_t kEvalEvery = 25, kHeldOut = 256;
  constexpr double kTarget = 0.99;
  BenchConfig c = bench_config("S");
  Transformer model(c.model, o.seed);
  model.train();
  Adam optim(model.named_parameters(), {.lr = 0.0f, .beta1 = 0.9f, .beta2 = 0.98f, .eps = 1e-9f});
  const LrSchedule schedule{.kind = LrSchedule::Kind::noam, .lr = 4e-3f, .warmup = 100};
  Generator data(o.seed * 1000003 + 17), held(o.seed * 7919 + 5);  // disjoint streams
  const Batch test = bench::copy_batch(c, kHeldOut, held);
  fmt::print(
      "time to {:.0f}%: config S, batch {}, Adam noam lr {} warmup {}, label smoothing {}; threads {}; "
      "precision {}\n",
      kTarget * 100, c.batch, schedule.lr, schedule.warmup, c.label_smoothing, ops::num_threads(),
      precision_name(o.precision));

  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  double train_s = 0.0, accuracy = 0.0;
  int64_t step = 0;
  float loss = NAN;
  Bf16StepWeights weights;
  while (step < o.max_steps && accuracy < kTarget) {
    const Batch b = bench::copy_batch(c, c.batch, data);
    const auto t0 = clock::now();
    optim.set_lr(schedule.at(++step));
    loss = train_step(model, optim, b, c.label_smoothing, weights);
    train_s += bench::seconds_since(t0);
    if (step % kEvalEvery != 0) continue;
    const Hypotheses hyp = greedy_decode(model, test.src, kHeldOut, test.src_len, c.length + 8);
    int64_t exact = 0;
    for (int64_t r = 0; r < kHeldOut; ++r) {
      const auto want = std::span(test.src).subspan(static_cast<size_t>(r * test.src_len),
                                                    static_cast<size_t>(test.src_len - 1));
      const auto& got = hyp[static_cast<size_t>(r)];
      exact += std::equal(want.begin(), want.end(), got.begin(), got.end());
    }
    accuracy = static_cast<double>(exact) / kHeldOut;
    fmt::print("  step {:5d}  loss {:.4f}  exact match {:5.1f}%  train {:.1f} s  wall {:.1f} s\n", step, loss,
               accuracy * 100, train_s, bench::seconds_since(start));
    std::fflush(stdout);
  }
  const bool reached = accuracy >= kTarget;
  const double wall_s = bench::seconds_since(start);
  fmt::print("{} {:.0f}% after {} steps: {:.1f} s training, {:.1f} s with evaluations\n",
             reached ? "reached" : "did NOT reach", kTarget * 100, step, train_s, wall_s);
  if (o.json)
    fmt::print("{}\n", JsonLine{{"impl", "tapegrad"},
                                {"mode", "time_to_accuracy"},
                                {"config", "S"},
                                {"precision", precision_name(o.precision)},
                                {"threads", o.threads},
                                {"reached", reached},
                                {"steps", step},
                                {"train_s", train_s},
                                {"wall_s", wall_s},
                                {"accuracy", accuracy},
                                {"loss", loss}}
                           .dump());
  return reached ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  cli::Program app(
      "Training-step and decoding speed of the encoder-decoder Transformer on the copy task, or with\n"
      "--time-to-accuracy the steps and seconds to 99% exact match. Exit status 1 when the target\n"
      "was not reached or on a runtime error, 2 for a bad command line.",
      "bench_train");
  cli::style(app, "[options]");
  Options o;
  std::optional<int> threads;
  bench::add_config_option(app, o.config);
  cli::add_threads(app, threads, "1");
  cli::add_optional_int(app, "--warmup", o.warmup, "untimed steps first", 1, cli::kNoMax, "N",
                        "3 for S, 2 for M");
  cli::add_optional_int(app, "--steps", o.steps, "timed steps; the median is reported", 1, cli::kNoMax, "N",
                        "15 for S, 7 for M");
  cli::add_flag(app, "--quick", o.quick,
                "1 warm-up step, 3 timed steps, fewer decode repetitions (a smoke test)");
  cli::add_flag(app, "--json", o.json, "end with one JSON line of the results");
  bool no_decode = false;
  cli::add_flag(app, "--no-decode", no_decode,
                "skip the decoding measurements (a profiler then sees the training steps alone)");
  bool no_peak = false;
  cli::add_flag(app, "--no-peak", no_peak,
                "skip the peak measurements (FMA and bf16 dot-product loops; no fraction of peak)");
  cli::add_flag(app, "--profile", o.profile,
                "after the timed steps, run them again with the per-op profile on and print its table (time "
                "and bytes per op type, forward and backward; autograd/profile.hpp)");
  cli::add_flag(
      app, "--time-to-accuracy", o.time_to_accuracy,
      "train config S on fresh batches (Adam, warmup 100 to lr 4e-3 then 1/sqrt(step)) until greedy "
      "exact match on 256 held-out sequences >= 99%, evaluated every 25 steps; reports steps and "
      "seconds");
  cli::add_int(app, "--max-steps", o.max_steps, "give up after N steps (exit status 1)", 1);
  cli::add_int(app, "--seed", o.seed, "model, data and dropout seed", 0);
  cli::add_precision(app, o.precision);
  return cli::run(app, argc, argv, [&] {
    o.threads = threads.value_or(1);
    o.peak = !no_peak;
    o.decode = !no_decode;
    ops::set_num_threads(o.threads);
    const PrecisionScope precision(o.precision);
    return o.time_to_accuracy ? run_time_to_accuracy(o) : run_speed(o);
  });
}
