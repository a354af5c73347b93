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
  // model
  std::string init_from;  // fine-tuning: the model to start from (its shape and tokenizer)
  std::string tokenizer = "byte";
  tg::cli::SpmArgs spm{.vocab_size = 2000};  // BPE, as translate (README, "Subwords")
  int64_t n_layer = 4, n_head = 4, n_embd = 128, block_size = 128;
  double dropout = 0.0;
  // training: kept in the checkpoint, reused by --resume unless given again
  int64_t steps = 600, batch_size = 32, warmup = 60, seed = 1, eval_every = 200, eval_tokens = 1 << 17;
  double lr = 2e-3, min_lr = 2e-4, weight_decay = 0.1, clip = 1.0, valid_fraction = 0.1;
};

struct EvalArgs : tg::cli::ModelArgs {
  std::string data;
  int64_t block_size = 0, batch_size = 16;
  bool int8 = false;  // the products read int8 copies of the weights, as lm sample --int8's steps do
};

struct SampleArgs : tg::cli::ModelArgs {
  std::string prompt;
  int64_t tokens = 500, top_k = 0, seed = 1;
  double temperature = 0.8, top_p = 1.0;
  bool int8 = false;  // the one-position steps read int8 copies of the weights
};

struct AttentionArgs : tg::cli::ModelArgs {
  std::string prompt, out;
};

struct TokenizeArgs : tg::cli::ModelArgs {};

struct ExportArgs : tg::cli::ModelArgs {
  std::string hf;  // the folder to write
};

// Each returns the exit status; a bad option value found late throws tg::cli::UsageError.
// `fault` is a test seam (lm_with_faults.cpp); the shipped program passes none.
int run_train(TrainArgs& args, const tg::train::FaultInjector& fault);
int run_eval(const EvalArgs& args);
int run_sample(const SampleArgs& args);
int run_attention(const AttentionArgs& args);
int run_tokenize(const TokenizeArgs& args);
int run_export(const ExportArgs& args);

// The whole program: parses the command line and runs the subcommand.
int main(int argc, char** argv, const tg::train::FaultInjector& fault = {});

}  // namespace lm
