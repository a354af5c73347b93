#include "apps/train_run.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/cli.hpp"
#include "ops/kernels.hpp"
#include "train/curves.hpp"

namespace tg::cli {

void style_training_program(cli::Command& app) {
  std::signal(SIGXFSZ, SIG_IGN);
  style(app, "<command> [options]");
  app.footer(
      "Exit status: 0 success, 1 runtime error (bad data, unreadable checkpoint, a checkpoint that\n"
      "could not be written), 2 bad command line, 3 training stopped on a NaN/Inf loss or gradient\n"
      "(--on-nan stop, after saving the last good state), 130 training interrupted by Ctrl-C or\n"
      "SIGTERM (after saving).");
}

void add_model_options(Command& c, ModelArgs& a, const std::string& what, const ModelOptions& which) {
  add_text(c, "--model", a.model, what).required();
  if (which.json) add_flag(c, "--json", a.json, which.json);
  if (which.strict)
    add_flag(
        c, "--strict", a.strict,
        "a token of the input that is not in the model's vocabulary is an error, not <unk> with a warning "
        "(a vocabulary without <unk>, as lm's character models, refuses it either way; byte-level ones "
        "cover every byte)");
  if (!which.threads.empty()) add_threads(c, a.threads, which.threads);
  if (which.precision) add_precision(c, a.precision);
}

void check_resume_steps(int64_t reached, int64_t total, const std::string& last) {
  if (reached > total)
    throw UsageError(
        fmt::format("--resume: the run in {} is already at step {}, past the {} steps asked; ask for more to "
                    "train further",
                    last, reached, total));
}

std::string log_path(const RunArgs& a) {
  return a.log.empty() ? train::output_path(a.out, ".log.jsonl") : a.log;
}

namespace {
// Whether two paths name one file: the same file where both exist, else the same absolute path
// with the symlinks of its existing part resolved.
bool same_file(const std::string& a, const std::string& b) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(a, ec) && fs::exists(b, ec)) return fs::equivalent(a, b, ec);
  const fs::path ca = fs::weakly_canonical(fs::absolute(a, ec), ec);
  const fs::path cb = fs::weakly_canonical(fs::absolute(b, ec), ec);
  return !ca.empty() && ca == cb;
}
}  // namespace

void check_run_paths(const RunArgs& args, const std::string& last) {
  const std::vector<std::pair<std::string, std::string>> outputs = {
      {"--out", args.out},
      {"the run's last checkpoint (<out>.last.safetensors)", last},
      {args.log.empty() ? "the run's log (<out>.log.jsonl)" : "--log", log_path(args)},
      {"the loss curves (<out>.loss.svg)", train::output_path(args.out, ".loss.svg")}};
  const std::vector<std::pair<std::string, std::string>> inputs = {{"--data", args.data},
                                                                   {"--valid", args.valid}};
  for (const auto& [out_name, out] : outputs)
    for (const auto& [in_name, in] : inputs)
      if (!in.empty() && same_file(out, in))
        throw UsageError(fmt::format("{} {} is the {} file {}: the run would write over it; give another {}",
                                     out_name, out, in_name, in,
                                     out_name.starts_with("--") ? out_name : "--out"));
  for (size_t i = 0; i < outputs.size(); ++i)
    for (size_t j = i + 1; j < outputs.size(); ++j)
      if (same_file(outputs[i].second, outputs[j].second))
        throw UsageError(fmt::format("{} {} is also {}: the run writes both; give another {}",
                                     outputs[j].first, outputs[j].second, outputs[i].first,
                                     outputs[j].first.starts_with("--") ? outputs[j].first : "--out"));
}

void check_new_run_out(const RunArgs& args, const std::string& last, const std::string& init) {
  if (args.overwrite) return;
  std::error_code ec;
  if (!init.empty() && std::filesystem::equivalent(init, args.out, ec))
    throw UsageError(
        fmt::format("--out {} is the model given to start from: --overwrite replaces it with "
                    "the new run's, or give another --out",
                    args.out));
  std::vector<std::string> found;
  for (const std::string& path : {args.out, last, log_path(args)}) {
    if (std::filesystem::is_regular_file(path, ec)) found.push_back(path);  // else prepare_output says why
  }
  if (found.empty()) return;
  if (found.size() == 1 && found.front() == log_path(args))  // a run that stopped before its first save
    throw UsageError(
        fmt::format("{} already exists (the log of a run that saved no model: nothing to --resume): "
                    "--overwrite starts a new run that replaces it, or give another {}",
                    found.front(), args.log.empty() ? "--out" : "--log"));
  std::string list = found.back();  // "a", "a and b", "a, b and c"
  if (found.size() > 1)
    list = fmt::format("{} and {}", fmt::join(found.begin(), found.end() - 1, ", "), found.back());
  throw UsageError(fmt::format(
      "{} already {}: --resume continues that run, --overwrite starts a new run that replaces {}, or "
      "give another --out",
      list, found.size() == 1 ? "exists" : "exist", found.size() == 1 ? "it" : "them"));
}

void add_spm_options(Command& c, SpmArgs& a) {
  add_choice(c, "--spm-type", a.type, "with --tokenizer spm: the SentencePiece model trained on the data",
             {"bpe", "unigram"});
  add_int(c, "--vocab-size", a.vocab_size,
          "with --tokenizer spm: pieces in the model, specials and the 256 byte pieces included", 1, 1 << 20);
}

nn::SpmOptions spm_options(const SpmArgs& a, nn::SpmLayout layout) {
  return {.type = a.type == "bpe" ? nn::SpmType::bpe : nn::SpmType::unigram,
          .vocab_size = a.vocab_size,
          .layout = layout,
          .threads = 0};
}

void add_run_options(cli::Command& c, RunArgs& a) {
  add_int(c, "--log-every", a.log_every, "print progress every N steps", 1);
  add_flag(c, "--json", a.json, "one JSON object per output line");
  add_flag(c, "--overwrite", a.overwrite,
           "start a new run even where --out, <out>.last.safetensors or the log exist (replaced at the run's "
           "first save; its log starts over)");
  add_text(c, "--log", a.log,
           "the run's log, one JSON object per line (each progress line, validation, start and end; "
           "--resume appends); the loss curves are drawn from it into <out>.loss.svg",
           "FILE")
      .default_str("<out>.log.jsonl");
  add_choice(c, "--on-nan", a.on_nan,
             "a NaN/Inf loss or gradient is never applied: stop (save, exit 3) or skip it", {"stop", "skip"});
  add_choice(c, "--on-save-error", a.on_save_error,
             "a failed save keeps the old file: continue (retry later) or stop", {"continue", "stop"});
  add_optional_int(c, "--bucket-mb", a.bucket_mb,
                   "MPI: gradient allreduce bucket size in MiB (needs an MPI build)", 1, 1 << 12, "MB", "4");
  add_optional_real(
      c, "--rank-timeout", a.rank_timeout,
      "MPI: a rank waiting S seconds in a collective stops the job (0: never; needs an MPI build)", 0, 1e7,
      "S", "600");
  add_threads(c, a.threads);
  add_precision(c, a.precision);
}

dist::Options world_options(const RunArgs& a) {
  for (const auto& [name, given] : {std::pair{"--bucket-mb", a.bucket_mb.has_value()},
                                    std::pair{"--rank-timeout", a.rank_timeout.has_value()}})
    if (given && !dist::built_with_mpi()) throw UsageError(dist::needs_mpi_message(name));
  dist::Options o;
  if (a.bucket_mb) o.bucket_bytes = *a.bucket_mb << 20;
  if (a.rank_timeout) o.timeout_s = *a.rank_timeout;
  return o;
}

void set_threads(const RunArgs& a, const dist::World& world) {
  if (world.distributed() && !a.threads && std::getenv("OMP_NUM_THREADS") == nullptr)
    ops::set_num_threads(dist::default_threads(world));
  if (const std::string w = dist::threads_warning(world, ops::num_threads()); !w.empty() && world.is_root())
    fmt::print(stderr, "{}\n", w);
}

train::Log run_log(const RunArgs& a, const std::string& program, const std::string& out, bool resume,
                   const nn::LrSchedule& schedule, const dist::World& world) {
  train::Log log(a.json);
  // A warmup as long as the run leaves the learning rate rising to the end: allowed (a short trial
  // run), but rarely meant, and nothing else would say so.
  if (world.is_root() && schedule.kind != nn::LrSchedule::Kind::constant && schedule.total > 0 &&
      schedule.warmup >= schedule.total)
    fmt::print(stderr,
               "warning: --warmup {} is not below the run's {} steps: the learning rate rises for the whole "
               "run, to {:.3g} at its last step (--lr {:.3g}), and never decays\n",
               schedule.warmup, schedule.total, schedule.at(schedule.total), schedule.lr);
  if (world.is_root()) {
    const std::string file = a.log.empty() ? train::output_path(out, ".log.jsonl") : a.log;
    const std::string curves = train::output_path(out, ".loss.svg");
    train::prepare_output(file);
    train::prepare_output(curves);
    log = train::Log(a.json, file, resume, curves);
  }
  log.add_to_start(
      {{"program", program}, {"schedule", nlohmann::ordered_json::parse(train::schedule_json(schedule))}});
  return log;
}

train::LoopOptions loop_options(const RunArgs& a, double clip, int64_t eval_every,
                                const nn::LrSchedule& schedule, const std::string& best,
                                const std::string& last) {
  train::LoopOptions o;
  o.total_steps = schedule.total;
  o.schedule = schedule;
  o.clip = clip;
  o.log_every = a.log_every;
  o.eval_every = eval_every;
  o.on_nan = train::parse_on_non_finite(a.on_nan);
  o.stop_on_save_error = a.on_save_error == "stop";
  o.best_path = best;
  o.last_path = last;
  o.precision = a.precision;
  return o;
}

void check_spm_options_apply(const RunArgs& args, const std::string& tokenizer, const std::string& source) {
  if (tokenizer == "spm") return;
  for (const char* option : {"spm-type", "vocab-size", "spm-separate"})
    if (args.was_given(option))
      throw UsageError(fmt::format("--{} applies only with --tokenizer spm; {} the {} tokenizer", option,
                                   source.empty() ? "this run has" : source + " has", tokenizer));
}

void check_spm_options(const Agreement& agree, const SpmArgs& a, const nn::Tokenizer& tokenizer) {
  const auto* spm = dynamic_cast<const nn::SpmTokenizer*>(&tokenizer);
  if (!spm) return check_spm_options_apply(agree.args, tokenizer.kind(), agree.path);
  agree("spm-type", a.type, std::string(spm->type() == nn::SpmType::bpe ? "bpe" : "unigram"));
  agree("vocab-size", a.vocab_size, spm->vocab_size());
}

std::string threads_text(int n) {
  return fmt::format("{} thread{}", n, n == 1 ? "" : "s");
}

void log_start(const train::Log& log, int64_t step, nlohmann::ordered_json fields, const std::string& text,
               const dist::World& world, Precision precision) {
  fields["step"] = step;
  fields["threads"] = ops::num_threads();
  fields["ranks"] = world.size();
  fields["precision"] = precision_name(precision);
  log.line("start", fields,
           fmt::format("{} {}; kernels {}, {}{}; {}",
                       step > 0 ? fmt::format("resuming at step {}:", step) : "training:", text,
                       ops::arch_name(ops::active_arch()), threads_text(ops::num_threads()),
                       world.distributed() ? fmt::format(" per rank, {} MPI ranks", world.size()) : "",
                       products_report(precision)));
}

}  // namespace tg::cli
