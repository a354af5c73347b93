// The lm subcommands: their options (declared and filled from the command line by lm_cli.cpp) and
// the functions that run them.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "apps/train_run.hpp"
#include "train/loop.hpp"

namespace lm {

// lm train. Model options shape a new model; with --resume the shape comes from the checkpoint and
// those options, when given, must agree with it. The options of the run itself (--json, --on-nan,
// --threads, MPI...) are the shared RunArgs.
struct TrainArgs : tg::cli::RunArgs {
  std::string data, valid, out;
  bool resume = false;
  // model
  std::string tokenizer = "byte";
  int64_t n_layer = 4, n_head = 4, n_embd = 128, block_size = 128;
  double dropout = 0.0;
  // training: kept in the checkpoint, reused by --resume unless given again
  int64_t steps = 600, batch_size = 32, warmup = 60, seed = 1, eval_every = 200, eval_tokens = 1 << 17;
  double lr = 2e-3, min_lr = 2e-4, weight_decay = 0.1, clip = 1.0, valid_fraction = 0.1;

  // The options on the command line, by name ("n-layer").
  std::set<std::string> given;
  bool was_given(const std::string& name) const { return given.contains(name); }
  // Set by the parser: this run's training options as checkpoint metadata ("train.lr" -> "0.002"),
  // and for --resume the reverse (options not on the command line take the saved values).
  std::function<std::map<std::string, std::string>()> saved_options;
  std::function<void(const std::map<std::string, std::string>& saved, const std::string& path)>
      reuse_saved_options;
};

struct EvalArgs {
  std::string model, data;
  int64_t block_size = 0, batch_size = 16;
  bool json = false;
  std::optional<int> threads;
  tg::Precision precision = tg::Precision::fp32;
};

struct SampleArgs {
  std::string model, prompt;
  int64_t tokens = 500, top_k = 0, seed = 1;
  double temperature = 0.8, top_p = 1.0;
  bool json = false;
  std::optional<int> threads;
  tg::Precision precision = tg::Precision::fp32;
};

struct AttentionArgs {
  std::string model, prompt, out;
  std::optional<int> threads;
};

// Each returns the exit status; a bad option value found late throws tg::cli::UsageError.
// `fault` is a test seam (lm_with_faults.cpp); the shipped program passes none.
int run_train(TrainArgs& args, const tg::train::FaultInjector& fault);
int run_eval(const EvalArgs& args);
int run_sample(const SampleArgs& args);
int run_attention(const AttentionArgs& args);

// The whole program: parses the command line and runs the subcommand.
int main(int argc, char** argv, const tg::train::FaultInjector& fault = {});

}  // namespace lm
