// lm eval (loss and bits per byte of a text) and lm sample (text generation, streamed).
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <numbers>

#include "apps/cli_errors.hpp"
#include "io/terminal.hpp"
#include "lm_commands.hpp"
#include "nn/family/hf_gpt2.hpp"
#include "nn/gpt_sample.hpp"
#include "nn/gpt_text.hpp"
#include "ops/kernels.hpp"
#include "train/log.hpp"

namespace lm {

namespace nn = tg::nn;
using tg::cli::UsageError;
using tg::io::DataError;

namespace {

// From this many parameters (128 MB of fp32 weights, past any last-level cache share of the CPUs
// measured) lm sample uses every kernel thread by default.
constexpr int64_t kSharedSamplingParams = 32'000'000;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// JSON text of bytes that may not be UTF-8 (a byte model can generate any byte): invalid
// sequences become U+FFFD.
std::string dump(const nlohmann::ordered_json& j) {
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace

int run_eval(const EvalArgs& args) {
  if (args.int8 && args.precision == tg::Precision::bf16)
    throw UsageError("--int8 and --precision bf16 both choose the weights the products read: give one");
  const tg::PrecisionScope precision(args.precision);
  const nn::GptCheckpoint ck = nn::read_lm_model(args.model);
  const std::unique_ptr<nn::GPT> model = nn::load_gpt(ck, args.model);
  const nn::Tokenizer& tok = *ck.info.tokenizer;
  const int64_t block = ck.info.config.block_size, T = args.block_size > 0 ? args.block_size : block;
  if (T > block)
    throw UsageError(fmt::format("--block-size {} is above the block size of {} ({})", T, args.model, block));
  nn::UnknownTokens unknown;
  const std::vector<int32_t> ids = tok.encode(nn::read_text_file(args.data), &unknown, args.data);
  nn::report_unknown(unknown, args.data, args.strict);
  if (ids.size() < 2)
    throw DataError(fmt::format("{}: {} token: nothing to predict (a {} model needs at least 2)", args.data,
                                ids.size(), tok.kind()));
  const auto t0 = std::chrono::steady_clock::now();
  tg::Int8WeightCache int8(tg::Int8WeightCache::Products::all);
  const tg::Int8WeightScope int8_scope(args.int8 ? &int8 : nullptr);
  const nn::LossSum s = nn::lm_loss_sum(*model, tok, ids, T, args.batch_size, 0,
                                        nn::eval_chunk_count(static_cast<int64_t>(ids.size()), T));
  const double loss = s.nats / static_cast<double>(s.count), bits = s.nats / std::numbers::ln2;
  const double bpb = bits / static_cast<double>(s.bytes), bpc = bits / static_cast<double>(s.count);
  const bool chars = tok.kind() == "char";
  if (args.json) {
    nlohmann::ordered_json j = {{"data", args.data},    {"tokens", s.count},
                                {"bytes", s.bytes},     {"block_size", T},
                                {"loss", loss},         {"perplexity", std::exp(loss)},
                                {"bits_per_byte", bpb}, {"int8_weights", args.int8}};
    if (chars) j["bits_per_char"] = bpc;
    j["seconds"] = seconds_since(t0);
    fmt::print("{}\n", dump(j));
  } else {
    fmt::print("{}: {} tokens predicted ({} bytes), chunks of {} tokens{}\n", args.data, s.count, s.bytes, T,
               args.int8 ? ", int8 weights" : "");
    fmt::print("loss {:.4f} nats/token, perplexity {:.3f}, {:.4f} bits per byte{}\n", loss, std::exp(loss),
               bpb, chars ? fmt::format(", {:.4f} bits per character", bpc) : "");
  }
  return 0;
}

int run_sample(const SampleArgs& args) {
  if (args.int8 && args.precision == tg::Precision::bf16)
    throw UsageError("--int8 and --precision bf16 both choose the weights a decoding step reads: give one");
  const tg::PrecisionScope precision(args.precision);
  const nn::GptCheckpoint ck = nn::read_lm_model(args.model);
  const std::unique_ptr<nn::GPT> model = nn::load_gpt(ck, args.model);
  // One token at a time is too little work to share for a small model: 1 thread unless asked
  // (measured: issue 30). A large one reads its weights from memory for every token, and each core
  // adds bandwidth: GPT-2 124M 19-20 -> 33-36 tokens/s in fp32, 30-34 -> 50-54 with bf16 weights,
  // 1 -> 2 threads (Xeon Cascade Lake, bench/results/sample_gpt2_bf16_2026-11-26_cascadelake.txt).
  if (!args.threads && std::getenv("OMP_NUM_THREADS") == nullptr)
    tg::ops::set_num_threads(model->num_parameters() >= kSharedSamplingParams ? 0 : 1);
  const nn::Tokenizer& tok = *ck.info.tokenizer;
  // nanoGPT's default start: a newline.
  const std::string prompt = args.prompt.empty() ? "\n" : args.prompt;
  std::vector<int32_t> ids;
  nn::UnknownTokens unknown;
  try {
    ids = tok.encode(prompt, &unknown,
                     args.prompt.empty() ? "the default prompt (a newline; give --prompt)" : "--prompt");
    nn::report_unknown(unknown, "--prompt", args.strict);
  } catch (const DataError& e) {
    throw UsageError(e.what());
  }
  const nn::SampleOptions o{.temperature = args.temperature, .top_k = args.top_k, .top_p = args.top_p};
  tg::Generator gen(static_cast<uint64_t>(args.seed));
  tg::io::TerminalText screen(::isatty(1));  // on a terminal control bytes show as \x1b
  if (!args.json) {
    fmt::print("{}", screen.feed(prompt));
    std::fflush(stdout);
  }
  const auto t0 = std::chrono::steady_clock::now();
  // Streamed as text, each token's share of the decoded text as it comes (nn::TextStream).
  nn::TextStream stream(tok);
  const std::vector<int32_t> out = nn::generate(
      *model, ids, args.tokens, o, gen,
      [&](int32_t t) {
        if (args.json) return;
        fmt::print("{}", screen.feed(stream.next(t)));
        std::fflush(stdout);
      },
      true, args.int8);
  const double seconds = seconds_since(t0);
  const std::string text = tok.decode(out);
  const double per_s = static_cast<double>(out.size()) / seconds;
  if (args.json) {
    fmt::print("{}\n", dump({{"prompt", prompt},
                             {"text", text},
                             {"tokens", out.size()},
                             {"threads", tg::ops::num_threads()},
                             {"weights", args.int8 ? "int8" : tg::precision_name(args.precision)},
                             {"seconds", seconds},
                             {"tokens_per_s", per_s}}));
  } else {
    fmt::print("{}\n", screen.finish());
    std::fflush(stdout);
    fmt::print(stderr, "({} in {:.2f} s, {:.0f} tokens/s, prompt of {} included{})\n",
               tg::train::plural(static_cast<int64_t>(out.size()), "token"), seconds, per_s,
               tg::train::plural(static_cast<int64_t>(ids.size()), "token"),
               args.int8 ? "; int8 weights" : "");
  }
  return 0;
}

}  // namespace lm
