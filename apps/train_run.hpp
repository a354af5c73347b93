// What the training commands (translate train, lm train) share around their model: the options of
// a run (how it reports, saves, stops on a NaN/Inf and spreads over MPI), the MPI world and kernel
// threads they imply, and the training loop's options (train/loop.hpp) built from them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "autograd/precision.hpp"
#include "nn/optim.hpp"
#include "train/distributed.hpp"
#include "train/loop.hpp"

namespace tg::cli {

class Command;  // apps/cli.hpp

struct RunArgs {
  bool json = false;
  std::string log;  // --log FILE; empty: <out>.log.jsonl
  int64_t log_every = 50;
  std::string on_nan = "stop", on_save_error = "continue";
  std::optional<int> threads;
  Precision precision = Precision::fp32;  // of the products; not saved: a run may resume in another
  std::optional<int64_t> bucket_mb;
  std::optional<double> rank_timeout;
};

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

}  // namespace tg::cli
