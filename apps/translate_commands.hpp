// The translate subcommands: their options (declared and filled from the command line by
// translate_cli.cpp) and the functions that run them.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>

#include "apps/train_run.hpp"
#include "io/safetensors.hpp"
#include "train/loop.hpp"

namespace translate {

// translate train. Model and vocabulary options shape a new model; with --resume or --init the
// shape comes from the checkpoint and those options, when given, must agree with it. The options
// of the run itself (--json, --on-nan, --threads, MPI...) are the shared RunArgs.
struct TrainArgs : tg::cli::RunArgs {
  std::string init;
  bool skip_bad_lines = false;
  // model and vocabulary
  int64_t d_model = 64, heads = 4, enc_layers = 2, dec_layers = 2, d_ff = 256;
  double dropout = 0.1;
  bool norm_first = false;
  std::string activation = "relu", tokenizer = "word";
  tg::cli::SpmArgs spm{.type = "bpe", .vocab_size = 1000};  // bpe: see README, "Subwords"
  bool spm_separate = false;
  int64_t min_freq = 1, max_vocab = 0;
  // training: kept in the checkpoint, reused by --resume unless given again
  int64_t steps = 0, epochs = 5, batch_size = 64, warmup = 200, seed = 1, eval_every = 500;
  double lr = 1e-3, label_smoothing = 0.1, clip = 1.0;
  std::optional<double> weight_decay;
  std::string optimizer = "adam", schedule = "noam";
  bool no_shuffle = false;
};

struct EvalArgs : tg::cli::ModelArgs {
  std::string data;
  int64_t batch_size = 64, beam = 1, max_len = 0;
  double length_penalty = 1.0;
  bool bleu = false, skip_bad_lines = false;
};

struct DecodeArgs : tg::cli::ModelArgs {
  int64_t batch_size = 32, beam = 1, max_len = 0;
  double length_penalty = 1.0;
};

struct AttentionArgs : tg::cli::ModelArgs {
  std::string src, tgt, out;
  int64_t max_len = 0;
};

// Each returns the exit status; a bad option value found late throws tg::cli::UsageError.
// `fault` is a test seam (translate_with_faults.cpp); the shipped program passes none.
int run_train(TrainArgs& args, const tg::train::FaultInjector& fault);
int run_eval(const EvalArgs& args);
int run_decode(const DecodeArgs& args);
int run_attention(const AttentionArgs& args);

// The whole program: parses the command line and runs the subcommand.
int main(int argc, char** argv, const tg::train::FaultInjector& fault = {});

}  // namespace translate
