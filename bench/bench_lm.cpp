// bench_lm: training and sampling speed of the GPT language model (nn/gpt.hpp) on random tokens,
// the numbers tools/bench_lm.sh sets beside the same model in PyTorch (tools/bench_torch_lm.py:
// nanoGPT's model for small and nano, transformers' GPT2LMHeadModel for the GPT-2 124M shapes):
//   - a training step (forward, loss, backward, clipping, AdamW) in ms and tokens/s, and the
//     matmul GFLOP/s it reaches, as a fraction of the machine's measured FMA peak and, where the
//     CPU has one, of its bf16 dot-product peak (bench/machine.cpp; --no-peak skips them);
//   - sampling at batch 1 (tokens/s, the prompt one token, with the key/value cache);
//   - peak RSS (read before the peak loops, whose bandwidth test allocates 192 MiB).
//
//   ninja -C build bench/bench_lm
//   build/bench/bench_lm --config small --threads 2          # 4 layers, d 256, block 128, batch 32
//   build/bench/bench_lm --config nano --threads 2 --json    # 6 layers, d 384, block 256, batch 16
//   build/bench/bench_lm --config gpt2 --threads 2           # GPT-2 124M, block 64, batch 4
//   build/bench/bench_lm --config gpt2-1024 --threads 2      # GPT-2 124M, block 1024, batch 4
//   build/bench/bench_lm --precision bf16                    # bf16 products (autograd/precision.hpp)
//   TAPEGRAD_PROFILE=1 build/bench/bench_lm --config small   # + the per-op table (all steps)
//   tools/bench_lm.sh                                        # both, 1 and 2 threads, beside PyTorch
//
// One config and thread count per process, so that peak RSS (getrusage ru_maxrss, a high-water
// mark) belongs to that run alone.
#include <sys/resource.h>

#include <fmt/core.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "autograd/precision.hpp"
#include "autograd/profile.hpp"
#include "autograd/tape.hpp"
#include "bench/bench.hpp"
#include "bench/cli.hpp"
#include "bench/timing.hpp"
#include "nn/gpt.hpp"
#include "nn/gpt_sample.hpp"
#include "nn/gpt_text.hpp"
#include "nn/optim.hpp"

namespace {

using namespace tg;
using namespace tg::nn;

struct Config {
  std::string name;
  GptConfig model;
  int64_t batch = 32;
  int warmup = 2, steps = 7;
  int64_t sample_tokens = 200;  // at batch 1; at most block - 1 (a block's worth, with no window cut)
};

// The configs of the benchmark (tools/bench_torch_lm.py has the same table).
Config config(const std::string& name) {
  Config c;
  c.name = name;
  c.model.vocab_size = 256;
  if (name == "nano") {  // nanoGPT's Shakespeare-char model, byte-level
    c.model.n_layer = 6, c.model.n_head = 6, c.model.n_embd = 384, c.model.block_size = 256, c.batch = 16;
    c.steps = 5;
  } else if (name == "d768" || name == "d768-64") {  // the 12 x 768 model byte-level (85M parameters)
    c.model.n_layer = 12, c.model.n_head = 12, c.model.n_embd = 768;
    if (name == "d768")  // a many-core batch
      c.model.block_size = 256, c.batch = 8, c.steps = 5;
    else  // GPT-2's fine-tuning shape without its 50,257-token head (issue 29's 12 x 768 goal)
      c.model.block_size = 64, c.batch = 4, c.steps = 7, c.sample_tokens = 63;
  } else if (name == "gpt2" || name == "gpt2-1024") {
    // GPT-2 124M (transformers' GPT2Config defaults): 50,257 tokens, the tanh GELU, a tied head;
    // block 64 is `lm train --init-from`'s fine-tuning shape, 1024 the model's full context (a step
    // there takes tens of seconds on 2 cores: few of them). wpe has block_size rows here, 1,024 in
    // transformers' model (0.7M more parameters on its side at block 64).
    c.model.vocab_size = 50257, c.model.n_layer = 12, c.model.n_head = 12, c.model.n_embd = 768;
    c.model.activation = "gelu_new", c.model.layer_norm_epsilon = 1e-5f, c.model.tie_word_embeddings = true;
    c.batch = 4;
    if (name == "gpt2") {
      c.model.block_size = 64, c.steps = 7, c.sample_tokens = 63;
    } else {
      c.model.block_size = 1024, c.warmup = 1, c.steps = 3;
    }
  } else {  // "small": what suits 2 cores
    c.model.n_layer = 4, c.model.n_head = 4, c.model.n_embd = 256, c.model.block_size = 128, c.batch = 32;
  }
  return c;
}

// Matmul FLOPs of one forward pass over N = B T tokens (2 per multiply-add), d = n_embd:
//   per block: c_attn 6 N d^2, c_proj 2 N d^2, mlp 16 N d^2; Q K^T and P V 4 B T^2 d (the full
//   T x T, although a causal row needs only its prefix); the head 2 N d V.
// A training step is 3x that (the backward of each product is two of the same size).
// tools/bench_torch_lm.py uses the same formula.
double forward_matmul_flops(const GptConfig& m, int64_t B) {
  const double d = static_cast<double>(m.n_embd), T = static_cast<double>(m.block_size);
  const double N = static_cast<double>(B) * T;
  return static_cast<double>(m.n_layer) * (24 * N * d * d + 4 * static_cast<double>(B) * T * T * d) +
         2 * N * d * static_cast<double>(m.vocab_size);
}

double peak_rss_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;  // Linux reports KiB
}

struct Options {
  std::string config = "small";
  int threads = 1;
  std::optional<int> warmup, steps;
  std::optional<int64_t> sample_tokens;
  bool quick = false, json = false, peak = true;
  uint64_t seed = 1;
  Precision precision = Precision::fp32;
};

int run(const Options& o) {
  const Config c = config(o.config);
  const int warmup = o.warmup ? *o.warmup : (o.quick ? 1 : c.warmup);
  const int steps = o.steps ? *o.steps : (o.quick ? 2 : c.steps);
  const int64_t B = c.batch, T = c.model.block_size;
  GPT model(c.model, o.seed);
  model.train();
  AdamW optim(model.named_parameters(), {.lr = 1e-4f,
                                         .beta1 = 0.9f,
                                         .beta2 = 0.99f,
                                         .eps = 1e-8f,
                                         .weight_decay = 0.1f,
                                         .decay_matrices_only = true});
  fmt::print("bench_lm config {}: {} layers, d {}, {} heads, block {}, batch {}, vocab {}; {} parameters\n",
             c.name, c.model.n_layer, c.model.n_embd, c.model.n_head, T, B, c.model.vocab_size,
             model.num_parameters());
  fmt::print("  kernels: {}; threads {}; precision {} ({})\n", ops::arch_report(), ops::num_threads(),
             precision_name(o.precision), products_report(o.precision));
  const PrecisionScope precision(o.precision);  // training and sampling

  // Random windows of tokens uniform over the vocabulary, made up front, so the timed steps do only
  // model work.
  Generator data(o.seed * 1000003 + 17);
  std::vector<int32_t> text(static_cast<size_t>(1 << 16));
  for (auto& t : text) t = static_cast<int32_t>(data.below(static_cast<uint64_t>(c.model.vocab_size)));
  std::vector<Windows> batches;
  for (int i = 0; i < 4; ++i) batches.push_back(random_windows(text, B, T, data));

  size_t next = 0;
  float first_loss = NAN, last_loss = NAN;
  Bf16StepWeights weights;  // TAPEGRAD_BF16_WEIGHTS=step: rounded once per step
  auto step = [&] {
    const Windows& w = batches[next++ % batches.size()];
    const auto use = weights.step();
    optim.zero_grad();
    profile::mark("(zero_grad)");
    const Tensor loss = model.loss(w.x, w.y, B, T);
    backward(loss);
    optim.step(clip_coef(1.0, grad_norm(optim.params())));  // clipping folded into AdamW's pass
    profile::mark("(clip + optimizer step)");
    last_loss = loss.item();
    if (std::isnan(first_loss)) first_loss = last_loss;
  };
  for (int i = 0; i + 1 < warmup; ++i) step();  // measure_probed() adds one more warm-up call
  // The profile (TAPEGRAD_PROFILE=1) describes the timed steps only: the warm-up's first allocations
  // and the time since the model was made are dropped once measure_probed()'s warm-up call is done.
  int calls = 0;
  const bench::ProbedSteps probed = bench::measure_probed(
      [&] {
        if (calls++ == 1) profile::reset();
        step();
      },
      steps, o.threads, o.peak && !profile::enabled());  // a probe would land in the profile's next op
  const bench::Stats& train = probed.time;
  const double tokens = static_cast<double>(B * T), flops = 3 * forward_matmul_flops(c.model, B);
  const double train_rss = peak_rss_mib();
  weights.clear();
  fmt::print(
      "  train: {:.1f} ms/step (median of {}, range {:.1f}..{:.1f}), {:.0f} tokens/s, {:.1f} GFLOP/s; loss "
      "{:.3f} -> {:.3f}; peak RSS {:.1f} MiB\n",
      train.median * 1e3, train.reps, train.min * 1e3, train.max * 1e3, tokens / train.median,
      flops / train.median * 1e-9, first_loss, last_loss, train_rss);
  std::fflush(stdout);

  // Sampling at batch 1 from a one-token prompt, with the cache (each token runs the model on one
  // position and the head on that position alone: GPT::step); at most a block of tokens, so no
  // window cut falls inside the timing. Under bf16 the steps read bf16 copies of the weights, made
  // by each generate call (their rounding is in the timing, as it is in lm sample's).
  const int64_t n = std::min<int64_t>(o.sample_tokens ? *o.sample_tokens : c.sample_tokens, T - 1);
  Generator g(o.seed + 99);
  const std::vector<int32_t> prompt = {static_cast<int32_t>('\n')};
  const bench::Stats sample = bench::measure([&] { generate(model, prompt, n, {.temperature = 1.0}, g); },
                                             bench::TimingOptions{o.quick ? 2 : 5, 0.0, 0.0});
  const double sample_tok_s = static_cast<double>(n) / sample.median;
  const double rss = peak_rss_mib();
  fmt::print(
      "  sample batch 1: {} tokens in {:.1f} ms, {:.0f} tokens/s (key/value cache, {} weights); peak RSS "
      "{:.1f} "
      "MiB\n",
      n, sample.median * 1e3, sample_tok_s, precision_name(o.precision), rss);
  // The same with int8 copies of the weights (lm sample --int8), quantized by each generate call.
  Generator g8(o.seed + 99);
  const bench::Stats sample8 =
      bench::measure([&] { generate(model, prompt, n, {.temperature = 1.0}, g8, {}, true, true); },
                     bench::TimingOptions{o.quick ? 2 : 5, 0.0, 0.0});
  const double sample8_tok_s = static_cast<double>(n) / sample8.median;
  // And with the copies kept across generations (generate's Int8WeightCache: a model quantized once,
  // when loaded, and sampled many times): the first step that makes them timed on its own.
  Int8WeightCache copies;
  const auto t_first = std::chrono::steady_clock::now();
  GptContext(model, true, copies).feed(prompt);
  const double first_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_first).count();
  Generator g8k(o.seed + 99);
  const bench::Stats sample8k =
      bench::measure([&] { generate(model, prompt, n, {.temperature = 1.0}, g8k, {}, true, copies); },
                     bench::TimingOptions{o.quick ? 2 : 5, 0.0, 0.0});
  const double sample8k_tok_s = static_cast<double>(n) / sample8k.median;
  const double int8_mib = static_cast<double>(copies.bytes()) / (1 << 20);
  fmt::print(
      "  sample batch 1: {} tokens in {:.1f} ms, {:.0f} tokens/s (key/value cache, int8 weights: copies of "
      "{:.1f} MiB made by each run; its first step, quantizing, {:.1f} ms); with the copies kept across runs "
      "{:.1f} ms, {:.0f} tokens/s\n",
      n, sample8.median * 1e3, sample8_tok_s, int8_mib, first_ms, sample8k.median * 1e3, sample8k_tok_s);
  const double gflops = flops / train.median * 1e-9;
  bench::StepPeaks peaks;
  if (o.peak) {
    std::fflush(stdout);
    peaks = bench::measure_step_peaks(o.threads, o.quick);
    bench::print_step_peaks(peaks, gflops);
    bench::print_probed_peak(probed, flops, o.threads);
  }
  if (o.json) {
    const nlohmann::ordered_json j = {{"impl", "tapegrad"},
                                      {"mode", precision_name(o.precision)},
                                      {"products", precision_name(effective_precision(o.precision))},
                                      {"config", c.name},
                                      {"threads", o.threads},
                                      {"arch", ops::arch_name(ops::active_arch())},
                                      {"steps", train.reps},
                                      {"ms_per_step", train.median * 1e3},
                                      {"ms_min", train.min * 1e3},
                                      {"ms_max", train.max * 1e3},
                                      {"tokens_per_s", tokens / train.median},
                                      {"gflops", gflops},
                                      {"peak_gflops", peaks.fma},
                                      {"frac_peak", gflops / peaks.fma},
                                      {"probe_peak_gflops", bench::stats_of(probed.probe).median},
                                      {"frac_probe_peak", bench::frac_of_probes(probed, flops).median},
                                      {"peak_bf16_gflops", peaks.bf16},
                                      {"frac_bf16_peak", gflops / peaks.bf16},
                                      {"train_rss_mib", train_rss},
                                      {"peak_rss_mib", rss},
                                      {"sample_tokens", n},
                                      {"sample_tok_s", sample_tok_s},
                                      {"sample_weights", precision_name(o.precision)},
                                      {"sample_tok_s_int8", sample8_tok_s},
                                      {"sample_tok_s_int8_kept", sample8k_tok_s},
                                      {"int8_copies_mib", int8_mib},
                                      {"int8_first_step_ms", first_ms},
                                      {"loss_first", first_loss},
                                      {"loss_last", last_loss},
                                      {"quick", o.quick}};
    fmt::print("{}\n", j.dump());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  cli::Program app("Training-step and sampling speed of the GPT language model on random tokens.",
                   "bench_lm");
  cli::style(app, "[options]");
  Options o;
  cli::add_choice(
      app, "--config", o.config,
      "small: 4 layers, d 256, 4 heads, block 128, batch 32; nano: 6 layers, d 384, 6 heads, block "
      "256, batch 16; d768: 12 layers, d 768, 12 heads, block 256, batch 8; d768-64: the same, block 64, batch "
      "4 (all four byte-level); gpt2: "
      "GPT-2 124M (12 layers, d 768, 12 heads, vocabulary 50,257), "
      "block 64, batch 4; gpt2-1024: the same, block 1024, batch 4 (all without dropout, AdamW)",
      {"small", "nano", "d768", "d768-64", "gpt2", "gpt2-1024"});
  std::optional<int> threads;
  cli::add_threads(app, threads, "1");
  cli::add_optional_int(app, "--warmup", o.warmup, "untimed steps", 1, 1000, "N", "gpt2-1024 1, others 2");
  cli::add_optional_int(app, "--steps", o.steps, "timed steps (the median is reported)", 1, 1000, "N",
                        "small 7, nano 5, d768 5, d768-64 7, gpt2 7, gpt2-1024 3");
  cli::add_optional_int(app, "--sample-tokens", o.sample_tokens,
                        "tokens sampled at batch 1 (at most block - 1)", 1, cli::kNoMax, "N",
                        "gpt2 and d768-64 63, others 200");
  cli::add_flag(app, "--quick", o.quick, "few steps: a smoke test");
  cli::add_precision(app, o.precision);
  cli::add_flag(app, "--json", o.json, "a last line with the results as JSON (no peak measured: null)");
  bool no_peak = false;
  cli::add_flag(app, "--no-peak", no_peak,
                "skip the peak measurements (FMA and bf16 dot-product loops; no fraction of peak)");
  return cli::run(app, argc, argv, [&] {
    o.peak = !no_peak;
    if (!threads) ops::set_num_threads(1);
    o.threads = ops::num_threads();
    return run(o);
  });
}
