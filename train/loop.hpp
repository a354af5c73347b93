// The training loop the programs share (translate train, copy_task, and any model that plugs in
// as a Task): one optimizer step per global batch, with
//  - the NaN/Inf guard (train/guard.hpp): a non-finite loss or gradient is never applied; on_nan
//    stop saves the last good state and ends the run (exit status 3), skip drops the batch;
//  - a progress line every log_every steps: mean loss per token since the last line, learning
//    rate, the global gradient norm before clipping (mean and largest since the last line),
//    tokens/s, steps/s, elapsed time and ETA (human or JSON, and the run's log file with its loss
//    curves when the Log has one: train/log.hpp);
//  - the products in the precision of o.precision (fp32 or bf16, autograd/precision.hpp);
//  - validation and checkpoints every eval_every steps and at the end: the best model on the
//    validation loss (every time, without validation) in best_path, the resumable state with the
//    optimizer in last_path. A failed save keeps the file's previous content, is reported with
//    the step, and either the run continues and the next save retries, or it stops (status 1);
//    a failed final save always ends with status 1;
//  - SIGINT/SIGTERM: the step in progress finishes, the state is saved, status 130;
//  - data parallelism over MPI (train/distributed.hpp): each rank runs its rows of the batch, the
//    gradients are averaged, and every rank stops at the same step: the step's allreduce carries
//    each rank's stop request (a signal, or a failed save that only rank 0 sees), and a NaN/Inf
//    is seen alike by all (same global gradients).
//
//   class MyTask : public train::Task { ... };   // the model's batches, loss, validation, saving
//   train::LoopOptions o;
//   o.total_steps = 1000;
//   o.schedule = {nn::LrSchedule::Kind::noam, 1e-3f, 200};
//   o.best_path = "m.safetensors", o.last_path = "m.last.safetensors";
//   const train::LoopResult r = train::run_loop(task, world, train::Log(json), o);
//   return r.exit_status();
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "autograd/precision.hpp"
#include "autograd/random.hpp"
#include "nn/optim.hpp"
#include "train/distributed.hpp"
#include "train/guard.hpp"
#include "train/log.hpp"

namespace tg::train {

// Exit statuses of a training run beyond 0 (done) and 1 (a failed save).
inline constexpr int kExitNonFinite = 3;
inline constexpr int kExitInterrupted = 130;

// Where a run stands: handed to Task::save, and back to run_loop when a run resumes.
struct Progress {
  int64_t step = 0;  // optimizer steps taken; a batch skipped on NaN/Inf counts as a step
  double best_valid_loss = std::numeric_limits<double>::infinity();
};

// The loss of this rank's rows of a batch: the sum over label tokens of the per-token loss, and
// the number of label tokens. The step's loss is the global sum over the global count.
struct BatchLoss {
  double sum = 0;
  int64_t tokens = 0;
};

// Validation: the loss picks the best checkpoint; the figures are printed after it, named by
// their JSON key: {"token_accuracy", 97.25, "%"} prints "token accuracy 97.25%" in human mode,
// {"perplexity", 3.1} prints "perplexity 3.1000".
struct Figure {
  std::string key;
  double value = 0;
  std::string unit;  // "%" or empty
};
struct Validation {
  double loss = 0;
  std::vector<Figure> figures;
};

// What the loop trains. Every rank holds a Task over the same model, optimizer and data.
class Task {
 public:
  virtual ~Task() = default;
  virtual nn::Optimizer& optimizer() = 0;
  // The model's dropout generator: under MPI each rank draws its own masks from it for a step
  // (dist::fork_step_rng), and all agree on its state afterwards.
  virtual Generator& dropout_rng() = 0;
  // Forward and backward of this rank's rows of the current global batch (a rank may have none),
  // accumulating into the optimizer's gradients. Called once per step, after zero_grad().
  virtual BatchLoss forward_backward() = 0;
  // The current batch was used (applied or skipped): move on to the next one.
  virtual void next_batch() = 0;
  // The 1-based epoch shown in progress lines; 0 when the data has no epochs.
  virtual int64_t epoch() const { return 0; }
  // Metrics on held-out data, run on every rank (shard the data and combine the sums); nullopt
  // without validation data.
  virtual std::optional<Validation> validate() { return std::nullopt; }
  // Writes a checkpoint to `path` (called on rank 0 only, and only when LoopOptions names paths):
  // the resumable state with the optimizer, or the model alone. Throws when it fails.
  virtual void save(const std::string& path, bool with_optimizer, const Progress& at);
};

// A test seam: called at every step with the step's number, the optimizer (its gradients are
// complete and averaged over the ranks) and the step's loss, before the guard checks them.
using FaultInjector = std::function<void(int64_t step, nn::Optimizer& opt, float& loss)>;
// At step `step`, makes the gradient of parameter `name` NaN (its middle element), or the loss
// when name is "loss"; an empty name means the optimizer's last parameter.
FaultInjector inject_nan(int64_t step, std::string name = "");

struct LoopOptions {
  int64_t total_steps = 0;
  nn::LrSchedule schedule;  // the learning rate of step s (1-based) is schedule.at(s)
  double clip = 1.0;        // clip the global gradient norm to this (0: off)
  int64_t log_every = 50;   // a progress line every N steps, and at the last step
  int64_t eval_every = 0;   // validate and save every N steps (0: only at the end)
  OnNonFinite on_nan = OnNonFinite::stop;
  bool stop_on_save_error = false;
  std::string best_path, last_path;  // checkpoints; empty: none written
  bool catch_signals = true;         // SIGINT/SIGTERM stop the run (else they kill it)
  // The products' precision in forward_backward() and validate() (autograd/precision.hpp); the
  // weights, gradients, optimizer state and checkpoints stay fp32 either way.
  Precision precision = Precision::fp32;
  FaultInjector fault;  // tests only
};

// Why a run ended before its last step. Under MPI every rank stops after the same step for the
// same reason: each rank's request travels in the step's allreduce (one count per reason), and a
// NaN/Inf is seen alike by all (same global gradients). A later reason wins over an earlier one
// when several come at once.
enum class StopReason {
  none,         // ran to LoopOptions::total_steps
  interrupted,  // SIGINT/SIGTERM: the state was saved (status 130)
  save_failed,  // a save failed under stop_on_save_error (status 1)
  non_finite,   // a NaN/Inf loss or gradient under OnNonFinite::stop: the last good state saved (3)
};
// "none", "interrupted", "save_failed", "non_finite" (the "stop" field of the done event).
const char* stop_reason_name(StopReason r);

struct LoopResult {
  int64_t step = 0;  // steps taken when the loop ended
  StopReason stop = StopReason::none;
  bool final_save_failed = false;
  int64_t skipped_steps = 0, failed_saves = 0;
  int64_t tokens = 0;  // label tokens trained on in this run (all ranks)
  double elapsed_s = 0;
  // 0 done; 1 a save failed (--on-save-error stop, or the final save); 3 stopped on a NaN/Inf;
  // 130 interrupted (after saving).
  int exit_status() const;
};

// Trains from `start` (a resumed run's Progress) to o.total_steps, printing progress, validation
// and a final "done" line through `log`. Returns when done, stopped or interrupted; throws what the
// task throws (except from save, which the save-failure policy handles).
LoopResult run_loop(Task& task, dist::World& world, const Log& log, const LoopOptions& o,
                    Progress start = {});

// The files a run writes beside its model `out`: `out` without its ".safetensors" (when it has
// one) + suffix. output_path("toy.safetensors", ".loss.svg") = "toy.loss.svg", and "mymodel" gives
// "mymodel.loss.svg".
std::string output_path(const std::string& out, const std::string& suffix);
// Where the resumable state of a run writing `out` goes: "model.safetensors" ->
// "model.last.safetensors", "mymodel" -> "mymodel.last.safetensors".
std::string last_checkpoint_path(const std::string& out);
// Before training, so that a run never ends unable to save: `path` must be a file the run can
// replace (its directory exists and takes a new file, which is created and removed to be sure;
// `path` is not a directory, a device or a FIFO), else std::runtime_error naming it. Temporaries
// left there by a run killed while saving `path` are removed.
void prepare_output(const std::string& path);

}  // namespace tg::train
