// translate train: trains a Transformer on parallel text, validating every N steps and keeping
// the best checkpoint (--out) and the latest state with the optimizer (<out>.last.safetensors),
// from which --resume continues exactly where the run stopped.
//
// The recipe (run_train, at the end): take a saved run's options (--resume) -> start the MPI
// world -> describe the model (new, or from a checkpoint) -> read the data -> build the task and
// restore its state -> train (train/loop.hpp) -> the loop's exit status.
#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "apps/cli_errors.hpp"
#include "ops/kernels.hpp"
#include "translate_task.hpp"

namespace translate {

namespace dist = tg::dist;
namespace train = tg::train;
using tg::cli::UsageError;

namespace {

// With --resume or --init the model's shape, tokenizer and vocabularies come from a checkpoint:
// model options may be repeated (the same command line plus --resume) but must agree with it.
void check_model_options(const TrainArgs& args, const CheckpointInfo& info, const std::string& path) {
  const tg::cli::Agreement agree{args, path};
  const TransformerConfig& c = info.config;
  agree("d-model", args.d_model, c.d_model);
  agree("heads", args.heads, c.heads);
  agree("enc-layers", args.enc_layers, c.enc_layers);
  agree("dec-layers", args.dec_layers, c.dec_layers);
  agree("d-ff", args.d_ff, c.d_ff);
  agree("dropout", static_cast<float>(args.dropout), c.dropout);
  if (args.was_given("norm-first") && !c.norm_first)
    throw UsageError(fmt::format("--norm-first disagrees with {}, which has post-norm layers", path));
  agree("activation", args.activation, c.activation);
  agree("tokenizer", args.tokenizer, info.src->kind());
  tg::cli::check_spm_options(agree, args.spm, *info.src);
  if (const auto* src = dynamic_cast<const SpmTokenizer*>(info.src.get()))
    agree("spm-separate", args.spm_separate,
          src->model_bytes() != dynamic_cast<const SpmTokenizer&>(*info.tgt).model_bytes());
  for (const auto& [name, ours] :
       {std::pair{"min-freq", args.min_freq}, std::pair{"max-vocab", args.max_vocab}})
    if (auto it = info.extra.find(std::string("train.") + name); it != info.extra.end())
      agree(name, std::to_string(ours), it->second);
}

// A new model from the options; its vocabularies come with the data (read_pairs).
CheckpointInfo new_model(const TrainArgs& args) {
  if (args.d_model % args.heads != 0)
    throw UsageError(fmt::format("--d-model {} must be divisible by --heads {}", args.d_model, args.heads));
  CheckpointInfo info;
  TransformerConfig& c = info.config;
  c.d_model = args.d_model;
  c.heads = args.heads;
  c.enc_layers = args.enc_layers;
  c.dec_layers = args.dec_layers;
  c.d_ff = args.d_ff;
  c.dropout = static_cast<float>(args.dropout);
  c.norm_first = args.norm_first;
  c.activation = args.activation;
  return info;
}

// The model this run trains: the saved run's, the --init checkpoint's (as a new run), or new.
CheckpointInfo describe_model(const TrainArgs& args, const std::optional<Checkpoint>& saved,
                              const std::optional<Checkpoint>& init, const std::string& last) {
  if (saved) {
    check_model_options(args, saved->info, last);
    return saved->info;
  }
  if (!init) {
    tg::cli::check_spm_options_apply(args, args.tokenizer);
    return new_model(args);
  }
  CheckpointInfo info = init->info;
  info.train.reset();
  std::erase_if(info.extra, [](const auto& kv) { return kv.first.starts_with("train."); });
  check_model_options(args, info, args.init);
  return info;
}

// The tokenizers of a new model from the training text: word or char vocabularies (min-freq,
// max-vocab), or SentencePiece, one joint model for both sides or one per side (spm-separate).
void build_tokenizers(const TrainArgs& args, const ParallelText& text, CheckpointInfo& info) {
  if (args.tokenizer == "spm") {
    const SpmOptions o = tg::cli::spm_options(args.spm, SpmLayout::translate);
    const std::vector<std::string_view> src(text.src.begin(), text.src.end()),
        tgt(text.tgt.begin(), text.tgt.end());
    if (args.spm_separate) {
      info.src = std::make_shared<SpmTokenizer>(SpmTokenizer::train(src, o));
      info.tgt = std::make_shared<SpmTokenizer>(SpmTokenizer::train(tgt, o));
    } else {
      std::vector<std::string_view> both = src;
      both.insert(both.end(), tgt.begin(), tgt.end());
      info.src = info.tgt = std::make_shared<SpmTokenizer>(SpmTokenizer::train(both, o));
    }
    return;
  }
  const TokenizerKind split = parse_tokenizer(args.tokenizer);
  std::vector<std::vector<std::string>> src_tok, tgt_tok;
  for (size_t i = 0; i < text.size(); ++i) {
    src_tok.push_back(tokenize(text.src[i], split));
    tgt_tok.push_back(tokenize(text.tgt[i], split));
  }
  info.src = vocab_tokenizer(split, Vocab::build(src_tok, args.min_freq, args.max_vocab));
  info.tgt = vocab_tokenizer(split, Vocab::build(tgt_tok, args.min_freq, args.max_vocab));
  info.extra["train.min-freq"] = std::to_string(args.min_freq);
  info.extra["train.max-vocab"] = std::to_string(args.max_vocab);
}

// A new model's vocabulary sizes from its tokenizers, and a positional table with room for test
// sentences twice as long as the longest training one.
void size_new_model(const std::vector<EncodedPair>& pairs, CheckpointInfo& info) {
  int64_t longest = 0;
  for (const EncodedPair& p : pairs)
    longest = std::max({longest, static_cast<int64_t>(p.src.size()), static_cast<int64_t>(p.tgt.size())});
  info.config.src_vocab = info.src->vocab_size();
  info.config.tgt_vocab = info.tgt->vocab_size();
  info.config.max_len = std::max<int64_t>(256, 2 * (longest + 1));
}

// The training and validation pairs as ids; a new model gets its vocabularies from them first.
TranslationTask::Data read_pairs(const TrainArgs& args, CheckpointInfo& info, bool new_vocabularies) {
  const ParallelText text = read_data(args.data, args.skip_bad_lines);
  if (new_vocabularies) build_tokenizers(args, text, info);
  TranslationTask::Data d;
  // What becomes <unk> is said once per file (as eval and decode do); a new model's vocabularies
  // come from the training text, where only --min-freq and --max-vocab leave tokens out.
  UnknownTokens unknown_train, unknown_valid;
  d.train = encode_pairs(text, *info.src, *info.tgt, new_vocabularies ? nullptr : &unknown_train);
  report_unknown(unknown_train, args.data, false);
  if (new_vocabularies) size_new_model(d.train, info);
  if (const int64_t dropped = drop_too_long(d.train, info.config.max_len))
    fmt::print(stderr, "warning: {}: dropped {} longer than {} tokens\n", args.data,
               train::plural(dropped, "pair"), info.config.max_len - 1);
  if (d.train.empty()) throw DataError(fmt::format("{}: no training pairs left", args.data));
  if (!args.valid.empty()) {
    d.valid = encode_pairs(read_data(args.valid, args.skip_bad_lines), *info.src, *info.tgt, &unknown_valid);
    report_unknown(unknown_valid, args.valid, false);
    if (const int64_t dropped = drop_too_long(d.valid, info.config.max_len))
      fmt::print(stderr, "warning: {}: dropped {} that {} too long\n", args.valid,
                 train::plural(dropped, "pair"), dropped == 1 ? "is" : "are");
  }
  return d;
}

TranslationTask::Options task_options(const TrainArgs& args, int64_t total_steps) {
  return {.batch_size = args.batch_size,
          .seed = args.seed,
          .label_smoothing = args.label_smoothing,
          .shuffle = !args.no_shuffle,
          .optimizer = args.optimizer,
          .weight_decay = args.weight_decay,
          .schedule = {LrSchedule::parse(args.schedule), static_cast<float>(args.lr), args.warmup,
                       total_steps, 0.0f}};
}

void log_start(const train::Log& log, const TranslationTask& task, const dist::World& world, int64_t total,
               tg::Precision precision) {
  const CheckpointInfo& info = task.info();
  const int64_t params = task.model().num_parameters();
  const size_t train_pairs = task.data().train.size(), valid_pairs = task.data().valid.size();
  tg::cli::log_start(
      log, task.progress().step,
      {{"parameters", params},
       {"train_pairs", train_pairs},
       {"valid_pairs", valid_pairs},
       {"src_vocab", info.config.src_vocab},
       {"tgt_vocab", info.config.tgt_vocab},
       {"total_steps", total}},
      fmt::format("{}; {} training {}, {} validation; vocab {}/{}; {} ({} per epoch)",
                  train::plural(params, "parameter"), train_pairs, train_pairs == 1 ? "pair" : "pairs",
                  valid_pairs, info.config.src_vocab, info.config.tgt_vocab, train::plural(total, "step"),
                  task.batches_per_epoch()),
      world, precision);
}

}  // namespace

int run_train(TrainArgs& args, const train::FaultInjector& fault) {
  const std::string last = train::last_checkpoint_path(args.out);
  const std::optional<Checkpoint> saved = tg::cli::saved_run(args, last, &read_checkpoint, args.init);
  dist::World world(tg::cli::world_options(args));  // ranks > 0 print nothing on stdout
  tg::cli::set_threads(args, world);
  const std::optional<Checkpoint> init =
      args.init.empty() ? std::nullopt : std::optional<Checkpoint>(read_checkpoint(args.init));
  CheckpointInfo info = describe_model(args, saved, init, last);
  TranslationTask::Data data = read_pairs(args, info, !saved && !init);
  for (const auto& [key, value] : args.saved_options()) info.extra[key] = value;
  // std::string(1, '1'): assigning the literal "1" trips GCC 12's false -Wrestrict (PR 105329).
  if (args.no_shuffle) info.extra.insert_or_assign("train.no-shuffle", std::string(1, '1'));
  info.extra["train.data"] = args.data;

  const int64_t epoch_batches =
      (static_cast<int64_t>(data.train.size()) + args.batch_size - 1) / args.batch_size;
  const TranslationTask::Options task_opts =
      task_options(args, args.steps > 0 ? args.steps : args.epochs * epoch_batches);
  TranslationTask task(std::move(info), std::move(data), task_opts, world);
  if (saved) {
    task.restore_run(*saved, last);
    tg::cli::check_resume_steps(task.progress().step, task_opts.schedule.total, last);
    // A run saved before --valid was kept among its options: resumed without validation, every
    // save would put unvalidated weights in place of the best model.
    if (args.valid.empty() && std::isfinite(task.progress().best_valid_loss))
      throw UsageError(
          fmt::format("--resume: the run in {} validated (best loss {:.4f}) but names no --valid "
                      "file: give --valid again, or {} would be replaced by unvalidated weights",
                      last, task.progress().best_valid_loss, args.out));
  }
  if (init) task.load_weights_from(*init, args.init);
  if (world.is_root()) {
    train::prepare_output(args.out);
    train::prepare_output(last);
  }
  const train::Log log =
      tg::cli::run_log(args, "translate train", args.out, args.resume, task_opts.schedule, world);
  log_start(log, task, world, task_opts.schedule.total, args.precision);
  train::LoopOptions o =
      tg::cli::loop_options(args, args.clip, args.eval_every, task_opts.schedule, args.out, last);
  o.fault = fault;
  return train::run_loop(task, world, log, o, task.progress()).exit_status();
}

}  // namespace translate
