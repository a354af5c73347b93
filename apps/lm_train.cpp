// lm train: trains a GPT on a text file, validating every N steps and keeping the best checkpoint
// (--out) and the latest state with the optimizer (<out>.last.safetensors), from which --resume
// continues exactly where the run stopped.
//
// The recipe (run_train, at the end): take a saved run's options (--resume) -> start the MPI
// world -> describe the model (new, the saved run's, or --init-from's) -> read and tokenize the
// text -> build the task and restore its state (or --init-from's weights) -> train
// (train/loop.hpp) -> the loop's exit status.
//
// Fine-tuning (--init-from MODEL: an lm checkpoint or a Hugging Face GPT-2 folder): the model keeps
// its config and tokenizer (its positions too: the checkpoints can be exported back) and trains
// on windows of --block-size tokens, at most its positions (default: 128, or its positions if
// fewer). The window is kept in the checkpoints as "train.window" where it differs from the
// positions, and "train.init-from" names the model the run started from.
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "apps/cli_errors.hpp"
#include "lm_commands.hpp"
#include "lm_task.hpp"
#include "nn/family/hf_gpt2.hpp"
#include "ops/kernels.hpp"

namespace lm {

namespace dist = tg::dist;
namespace nn = tg::nn;
namespace train = tg::train;
using tg::cli::UsageError;
using tg::io::DataError;

namespace {

constexpr const char* kWindowKey = "train.window";
constexpr const char* kInitFromKey = "train.init-from";

// The training windows of a saved run: "train.window", else the model's positions.
int64_t saved_window(const nn::GptCheckpointInfo& info, const std::string& path) {
  const auto it = info.extra.find(kWindowKey);
  if (it == info.extra.end()) return info.config.block_size;
  int64_t w = 0;
  const auto [end, ec] = std::from_chars(it->second.data(), it->second.data() + it->second.size(), w);
  if (ec != std::errc() || end != it->second.data() + it->second.size() || w < 1 ||
      w > info.config.block_size)
    throw DataError(fmt::format("{}: metadata \"{}\" is \"{}\", not a window of 1..{} tokens", path,
                                kWindowKey, it->second, info.config.block_size));
  return w;
}

// With --resume (or --init-from) the model's shape and tokenizer come from the checkpoint: model
// options may be repeated (the same command line plus --resume) but must agree with it. --block-size
// is the training window, and --dropout may change when fine-tuning.
void check_model_options(const TrainArgs& args, const nn::GptCheckpointInfo& info, const std::string& path,
                         int64_t window, bool dropout) {
  const tg::cli::Agreement agree{args, path};
  const nn::GptConfig& c = info.config;
  agree("n-layer", args.n_layer, c.n_layer);
  agree("n-head", args.n_head, c.n_head);
  agree("n-embd", args.n_embd, c.n_embd);
  agree("block-size", args.block_size, window);
  if (dropout) agree("dropout", static_cast<float>(args.dropout), c.dropout);
  agree("tokenizer", args.tokenizer, info.tokenizer->kind());
  tg::cli::check_spm_options(agree, args.spm, *info.tokenizer);
}

// --init-from: the model's config and tokenizer, --dropout, and the window (above).
nn::GptCheckpointInfo from_model(const TrainArgs& args, const nn::GptCheckpoint& source, int64_t& window) {
  const int64_t positions = source.info.config.block_size;
  window = args.was_given("block-size") ? args.block_size : std::min(args.block_size, positions);
  if (window > positions)
    throw UsageError(
        fmt::format("--block-size {} is above the {} positions of {}", window, positions, args.init_from));
  nn::GptCheckpointInfo info;
  info.config = source.info.config;
  info.config.dropout = static_cast<float>(args.dropout);
  info.tokenizer = source.info.tokenizer;
  check_model_options(args, info, args.init_from, window, false);
  if (window != positions) info.extra[kWindowKey] = std::to_string(window);
  info.extra[kInitFromKey] = args.init_from;
  return info;
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

// The tokenizer of a new model: char takes the characters of both texts (so that validation has
// none it cannot read); a SentencePiece model learns from the training text only, never from the
// part --valid-fraction keeps for validation (its byte pieces read any text).
std::shared_ptr<const nn::Tokenizer> new_tokenizer(const TrainArgs& args, std::string_view text,
                                                   std::string_view valid_text) {
  if (args.tokenizer != "spm") return nn::make_lm_tokenizer(args.tokenizer, {text, valid_text});
  if (args.valid.empty() && args.valid_fraction > 0)
    text = text.substr(0, static_cast<size_t>(static_cast<double>(text.size()) * (1 - args.valid_fraction)));
  return nn::make_lm_tokenizer("spm", {text}, tg::cli::spm_options(args.spm, nn::SpmLayout::lm));
}

// The training and validation tokens: --valid, or the last --valid-fraction of --data.
LmTask::Data read_data(const TrainArgs& args, nn::GptCheckpointInfo& info, int64_t T, bool new_vocabulary) {
  const std::string text = nn::read_text_file(args.data);
  const std::string valid_text = args.valid.empty() ? std::string() : nn::read_text_file(args.valid);
  if (new_vocabulary) {
    info.tokenizer = new_tokenizer(args, text, valid_text);
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
    if (n_valid > 0)
      what = fmt::format("{} (without its last {}, kept for validation by --valid-fraction)", args.data,
                         train::plural(n_valid, "token"));
  }
  if (static_cast<int64_t>(d.train.size()) < T + 1)
    throw DataError(
        fmt::format("{}: {} for training, fewer than --block-size + 1 = {}; give a longer text or a "
                    "smaller --block-size",
                    what, train::plural(static_cast<int64_t>(d.train.size()), "token"), T + 1));
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

void log_start(const train::Log& log, const LmTask& task, const dist::World& world, const TrainArgs& args,
               int64_t window) {
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
       {"block_size", window},
       {"batch_size", args.batch_size},
       {"total_steps", args.steps}},
      fmt::format("{} parameters; {} training tokens, {} validation ({} tokenizer, vocab {}); {} of {} x "
                  "{} tokens",
                  params, train_tokens, valid_tokens, info.tokenizer->kind(), info.config.vocab_size,
                  train::plural(args.steps, "step"), train::plural(args.batch_size, "window"), window),
      world, args.precision);
}

}  // namespace

int run_train(TrainArgs& args, const train::FaultInjector& fault) {
  const std::string last = train::last_checkpoint_path(args.out);
  std::optional<nn::GptCheckpoint> saved =
      tg::cli::saved_run(args, last, &nn::read_gpt_checkpoint, args.init_from);
  dist::World world(tg::cli::world_options(args));  // ranks > 0 print nothing on stdout
  tg::cli::set_threads(args, world);
  std::optional<nn::GptCheckpoint> source;  // --init-from's model (a new run only)
  nn::GptCheckpointInfo info;
  int64_t window = args.block_size;
  if (saved) {
    info = saved->info;
    window = saved_window(info, last);
    check_model_options(args, info, last, window, true);
    const auto from = info.extra.find(kInitFromKey);
    const std::string started = from == info.extra.end() ? "" : from->second;
    if (!args.init_from.empty() && started != args.init_from)
      throw UsageError(fmt::format("--init-from {} disagrees with {}, which started from {}", args.init_from,
                                   last, started.empty() ? "a new model" : started));
  } else if (!args.init_from.empty()) {
    source = nn::read_lm_model(args.init_from);
    info = from_model(args, *source, window);
  } else {
    tg::cli::check_spm_options_apply(args, args.tokenizer);
    info = new_model(args);
  }
  LmTask::Data data = read_data(args, info, window, !saved && !source);
  for (const auto& [key, value] : args.saved_options()) info.extra[key] = value;
  info.extra["train.data"] = args.data;

  LmTask::Options task_opts = task_options(args);
  task_opts.window = window;
  if (source) task_opts.init = nn::GptInit::none;  // its weights replace them
  LmTask task(std::move(info), std::move(data), task_opts, world);
  if (saved) {
    task.restore_run(*saved, last);
    tg::cli::check_resume_steps(task.progress().step, args.steps, last);
  }
  if (source) task.init_weights(*source, args.init_from);
  saved.reset();  // the weights are in the model now: no second copy for the whole run
  source.reset();
  if (world.is_root()) {
    train::prepare_output(args.out);
    train::prepare_output(last);
  }
  const train::Log log = tg::cli::run_log(args, "lm train", args.out, args.resume, task_opts.schedule, world);
  log_start(log, task, world, args, window);
  train::LoopOptions o =
      tg::cli::loop_options(args, args.clip, args.eval_every, task_opts.schedule, args.out, last);
  o.fault = fault;
  return train::run_loop(task, world, log, o, task.progress()).exit_status();
}

}  // namespace lm
