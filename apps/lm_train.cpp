// lm train: trains a GPT on a text file, validating every N steps and keeping the best checkpoint
// (--out) and the latest state with the optimizer (<out>.last.safetensors), from which --resume
// continues exactly where the run stopped.
//
// The recipe (run_train, at the end): take a saved run's options (--resume) -> start the MPI
// world -> describe the model (new, or the saved run's) -> read and tokenize the text -> build the
// task and restore its state -> train (train/loop.hpp) -> the loop's exit status.
#include <fmt/format.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "apps/cli_errors.hpp"
#include "lm_commands.hpp"
#include "lm_task.hpp"
#include "ops/kernels.hpp"

namespace lm {

namespace dist = tg::dist;
namespace nn = tg::nn;
namespace train = tg::train;
using tg::cli::UsageError;
using tg::io::DataError;

namespace {

// With --resume the model's shape and tokenizer come from the checkpoint: model options may be
// repeated (the same command line plus --resume) but must agree with it.
void check_model_options(const TrainArgs& args, const nn::GptCheckpointInfo& info, const std::string& path) {
  const tg::cli::Agreement agree{args, path};
  const nn::GptConfig& c = info.config;
  agree("n-layer", args.n_layer, c.n_layer);
  agree("n-head", args.n_head, c.n_head);
  agree("n-embd", args.n_embd, c.n_embd);
  agree("block-size", args.block_size, c.block_size);
  agree("dropout", static_cast<float>(args.dropout), c.dropout);
  agree("tokenizer", args.tokenizer, info.tokenizer->kind());
}

// A new model from the options; a char model's vocabulary comes with the text (read_data).
nn::GptCheckpointInfo new_model(const TrainArgs& args) {
  if (args.n_embd % args.n_head != 0)
    throw UsageError(fmt::format("--n-embd {} must be divisible by --n-head {}", args.n_embd, args.n_head));
  nn::GptCheckpointInfo info;
  nn::GptConfig& c = info.config;
  c.n_layer = args.n_layer;
  c.n_head = args.n_head;
  c.n_embd = args.n_embd;
  c.block_size = args.block_size;
  c.dropout = static_cast<float>(args.dropout);
  return info;
}

// The training and validation tokens: --valid, or the last --valid-fraction of --data. A new char
// model takes its vocabulary from both texts first.
LmTask::Data read_data(const TrainArgs& args, nn::GptCheckpointInfo& info, bool new_vocabulary) {
  const std::string text = nn::read_text_file(args.data);
  const std::string valid_text = args.valid.empty() ? std::string() : nn::read_text_file(args.valid);
  if (new_vocabulary) {
    info.tokenizer = nn::make_lm_tokenizer(args.tokenizer, {text, valid_text});
    info.config.vocab_size = info.tokenizer->vocab_size();
  }
  LmTask::Data d;
  d.train = info.tokenizer->encode(text, nullptr, args.data);
  std::string what = args.data;
  if (!args.valid.empty()) {
    d.valid = info.tokenizer->encode(valid_text, nullptr, args.valid);
  } else if (args.valid_fraction > 0) {
    const auto n = static_cast<int64_t>(d.train.size());
    const auto n_valid = static_cast<int64_t>(static_cast<double>(n) * args.valid_fraction);
    d.valid.assign(d.train.end() - n_valid, d.train.end());
    d.train.resize(static_cast<size_t>(n - n_valid));
    what = fmt::format("{} (without its last {} tokens, kept for validation by --valid-fraction)", args.data,
                       n_valid);
  }
  const int64_t T = info.config.block_size;
  if (static_cast<int64_t>(d.train.size()) < T + 1)
    throw DataError(
        fmt::format("{}: {} tokens for training, fewer than --block-size + 1 = {}; give a longer text or a "
                    "smaller --block-size",
                    what, d.train.size(), T + 1));
  if (args.valid.empty() && args.valid_fraction > 0 && d.valid.size() < 2)
    throw DataError(fmt::format("{}: --valid-fraction {} leaves {} token(s) for validation, too few",
                                args.data, args.valid_fraction, d.valid.size()));
  if (args.eval_tokens > 0 && static_cast<int64_t>(d.valid.size()) > args.eval_tokens)
    d.valid.resize(static_cast<size_t>(args.eval_tokens));
  return d;
}

LmTask::Options task_options(const TrainArgs& args) {
  if (args.min_lr > args.lr)
    throw UsageError(fmt::format("--min-lr {} is above --lr {}", args.min_lr, args.lr));
  return {.batch_size = args.batch_size,
          .seed = args.seed,
          .weight_decay = args.weight_decay,
          .schedule = {nn::LrSchedule::Kind::cosine, static_cast<float>(args.lr), args.warmup, args.steps,
                       static_cast<float>(args.min_lr)}};
}

void log_start(const train::Log& log, const LmTask& task, const dist::World& world, const TrainArgs& args) {
  const nn::GptCheckpointInfo& info = task.info();
  const int64_t params = task.model().num_parameters();
  const size_t train_tokens = task.data().train.size(), valid_tokens = task.data().valid.size();
  tg::cli::log_start(
      log, task.progress().step,
      {{"parameters", params},
       {"train_tokens", train_tokens},
       {"valid_tokens", valid_tokens},
       {"tokenizer", info.tokenizer->kind()},
       {"vocab_size", info.config.vocab_size},
       {"block_size", info.config.block_size},
       {"batch_size", args.batch_size},
       {"total_steps", args.steps}},
      fmt::format("{} parameters; {} training tokens, {} validation ({} tokenizer, vocab {}); {} "
                  "steps of {} windows x {} tokens",
                  params, train_tokens, valid_tokens, info.tokenizer->kind(), info.config.vocab_size,
                  args.steps, args.batch_size, info.config.block_size),
      world, args.precision);
}

}  // namespace

int run_train(TrainArgs& args, const train::FaultInjector& fault) {
  const std::string last = train::last_checkpoint_path(args.out);
  const std::optional<nn::GptCheckpoint> saved = tg::cli::saved_run(args, last, &nn::read_gpt_checkpoint);
  dist::World world(tg::cli::world_options(args));  // ranks > 0 print nothing on stdout
  tg::cli::set_threads(args, world);
  nn::GptCheckpointInfo info = saved ? saved->info : new_model(args);
  if (saved) check_model_options(args, info, last);
  LmTask::Data data = read_data(args, info, !saved);
  for (const auto& [key, value] : args.saved_options()) info.extra[key] = value;
  info.extra["train.data"] = args.data;

  const LmTask::Options task_opts = task_options(args);
  LmTask task(std::move(info), std::move(data), task_opts, world);
  if (saved) task.restore_run(*saved, last);
  if (world.is_root()) {
    train::prepare_output(args.out);
    train::prepare_output(last);
  }
  const train::Log log = tg::cli::run_log(args, "lm train", args.out, args.resume, task_opts.schedule, world);
  log_start(log, task, world, args);
  train::LoopOptions o =
      tg::cli::loop_options(args, args.clip, args.eval_every, task_opts.schedule, args.out, last);
  o.fault = fault;
  return train::run_loop(task, world, log, o, task.progress()).exit_status();
}

}  // namespace lm
