// What the programs' subcommands share, whatever the model family:
//  - ModelArgs: every command that runs a saved model (eval, decode, sample, attention): --model,
//    --json, --strict (the unknown-token policy), --threads, --precision;
//  - RunArgs: every training command (translate train, lm train): its files, how it reports,
//    saves, stops on a NaN/Inf and spreads over MPI; the MPI world and kernel threads they imply;
//  - the recipe's shared steps: resuming a saved run, checking model options against a
//    checkpoint, the start line, and training a Task to the end (train/loop.hpp).
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <set>
#include <string>

#include "apps/cli_errors.hpp"
#include "autograd/precision.hpp"
#include "io/safetensors.hpp"
#include "nn/optim.hpp"
#include "nn/tokenizers/spm.hpp"
#include "train/distributed.hpp"
#include "train/loop.hpp"

namespace tg::cli {

class Command;  // apps/cli.hpp

struct ModelArgs {
  std::string model;
  bool json = false;
  bool strict = false;  // a token that becomes <unk> is an error, not a warning
  std::optional<int> threads;
  Precision precision = Precision::fp32;
};

// Which of the model commands' common options a command has besides --model (required; `what` is
// its help, "a checkpoint written by lm train"): --json when `json` is set (its help), --strict when
// the command reads text that may hold unknown tokens, --threads when it runs products (`threads`:
// its default in the help, empty for no --threads), --precision when its products may run in bf16.
struct ModelOptions {
  const char* json = nullptr;
  std::string threads = "all cores";
  bool precision = true;
  bool strict = true;
};
void add_model_options(Command& command, ModelArgs& a, const std::string& what, const ModelOptions& which);

// --resume asking for fewer steps than the saved run (in `last`) already took: a UsageError (status
// 2) instead of a run that trains nothing yet validates and rewrites both files again.
void check_resume_steps(int64_t reached, int64_t total, const std::string& last);

// --spm-type and --vocab-size: the SentencePiece model a training command trains with
// --tokenizer spm (nn/tokenizers/spm.hpp).
struct SpmArgs {
  std::string type = "bpe";
  int64_t vocab_size = 0;  // set by the program: its default
};
void add_spm_options(Command& command, SpmArgs& a);
nn::SpmOptions spm_options(const SpmArgs& a, nn::SpmLayout layout);

struct RunArgs {
  std::string data, valid, out;
  bool resume = false;
  bool overwrite = false;  // a new run may replace the files of an earlier one at --out
  bool json = false;
  std::string log;  // --log FILE; empty: <out>.log.jsonl
  int64_t log_every = 50;
  std::string on_nan = "stop", on_save_error = "continue";
  std::optional<int> threads;
  Precision precision = Precision::fp32;  // of the products; not saved: a run may resume in another
  std::optional<int64_t> bucket_mb;
  std::optional<double> rank_timeout;

  // The options on the command line, by name ("d-model").
  std::set<std::string> given;
  bool was_given(const std::string& name) const { return given.contains(name); }
  // Set by the parser. The training options of this run as checkpoint metadata ("train.lr" ->
  // "0.001"), and the reverse for --resume: every training option not on the command line takes
  // the value saved in `saved` (checked like the command line's; a bad value throws naming `path`).
  std::function<io::Metadata()> saved_options;
  std::function<void(const io::Metadata& saved, const std::string& path)> reuse_saved_options;
};

// The run's log file: --log, else <out>.log.jsonl.
std::string log_path(const RunArgs& a);
// Every run, new or resumed: a UsageError where a file the run writes (--out, `last`, the log, the
// loss curves) is one it reads (--data, --valid) or another it writes, whatever --overwrite says.
void check_run_paths(const RunArgs& args, const std::string& last);
// A new run (no --resume) whose --out, <out>.last.safetensors (`last`) or log already exists: a
// UsageError naming them, unless --overwrite. An earlier run's best model is not replaced by a
// command that was meant to continue it or to write somewhere else.
// `init`: the model the run starts from (--init, --init-from; empty: none), which may be --out itself.
void check_new_run_out(const RunArgs& args, const std::string& last, const std::string& init);

// The program-level conventions of a training CLI: SIGXFSZ ignored (over a file-size limit a write
// fails with EFBIG and is reported like a full disk instead of the signal killing the process), the
// house help style (cli::style) and a footer listing the exit statuses.
void style_training_program(Command& app);

// --json, --log, --log-every, --on-nan, --on-save-error, --bucket-mb, --rank-timeout, --threads,
// --precision.
void add_run_options(Command& command, RunArgs& a);

// The MPI world of a run (one rank without mpirun); --bucket-mb and --rank-timeout need an MPI
// build (else UsageError).
dist::Options world_options(const RunArgs& a);
// Kernel threads: --threads (set by the parser), else under MPI the cores shared by the ranks on
// this machine, else all cores; warns (rank 0) when the ranks oversubscribe the cores.
void set_threads(const RunArgs& a, const dist::World& world);
// The run's record (train/log.hpp): stdout (--json or not), and on rank 0 the log file (--log, else
// <out>.log.jsonl; appended to when `resume`) with the loss curves <out>.loss.svg redrawn from it
// at every validation and at the end. Both files are checked (train::prepare_output) and the log
// opened now, before training. The start event records `program` and the learning-rate schedule.
train::Log run_log(const RunArgs& a, const std::string& program, const std::string& out, bool resume,
                   const nn::LrSchedule& schedule, const dist::World& world);
// The loop's options: schedule.total steps, validation and checkpoints (best, last) every
// eval_every steps.
train::LoopOptions loop_options(const RunArgs& a, double clip, int64_t eval_every,
                                const nn::LrSchedule& schedule, const std::string& best,
                                const std::string& last);

// --resume: the run saved in `last` (read with `read`), whose training options become this run's
// unless given again; nullopt without --resume. UsageError when there is nothing to resume, and for
// a new run where an earlier one's files are at --out (check_new_run_out; `init`: the model it
// starts from, if any).
template <class Checkpoint>
std::optional<Checkpoint> saved_run(RunArgs& args, const std::string& last,
                                    Checkpoint (*read)(const std::string&), const std::string& init) {
  if (args.resume && args.overwrite)
    throw UsageError("--resume continues the run saved at --out and --overwrite starts a new one: give one");
  check_run_paths(args, last);
  if (!args.resume) {
    check_new_run_out(args, last, init);
    return std::nullopt;
  }
  if (!std::filesystem::exists(last))
    throw UsageError(fmt::format("--resume: nothing to resume, {} does not exist", last));
  Checkpoint saved = read(last);
  if (!saved.info.train || !saved.has_optimizer_state())
    throw UsageError(fmt::format("--resume: {} holds no training state", last));
  args.reuse_saved_options(saved.info.extra, last);
  check_run_paths(args, last);  // again: --valid may have come from the checkpoint
  return saved;
}

// With --resume (or --init) the model's shape comes from the checkpoint at `path`: a model option
// may be repeated (the same command line plus --resume) but must agree with it, else UsageError
// "--<option> <ours> disagrees with <path>, which has <theirs>".
struct Agreement {
  const RunArgs& args;
  const std::string& path;
  template <class A, class B>
  void operator()(const char* option, const A& ours, const B& theirs) const {
    if (args.was_given(option) && !(ours == theirs))
      throw UsageError(fmt::format("--{} {} disagrees with {}, which has {}", option, ours, path, theirs));
  }
};

// The "start" line of a training run: the model's and the data's `fields` and `text`, then the
// run's kernels, threads, MPI ranks and products, and (JSON) step, threads, ranks, precision.
void log_start(const train::Log& log, int64_t step, nlohmann::ordered_json fields, const std::string& text,
               const dist::World& world, Precision precision);

// --spm-type, --vocab-size or --spm-separate given for a tokenizer that is not SentencePiece
// (`tokenizer`: its kind, from the command line or from the checkpoint at `source`; empty: a new
// run): a UsageError instead of an option silently ignored.
void check_spm_options_apply(const RunArgs& args, const std::string& tokenizer,
                             const std::string& source = "");
// With --resume or --init of a SentencePiece model: --spm-type and --vocab-size, when given, must
// agree with it; of another tokenizer: check_spm_options_apply.
void check_spm_options(const Agreement& agree, const SpmArgs& a, const nn::Tokenizer& tokenizer);

// "1 thread", "2 threads".
std::string threads_text(int n);

}  // namespace tg::cli
