#include "train/loop.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "io/file.hpp"

namespace tg::train {

namespace {

volatile std::sig_atomic_t g_interrupted = 0;
extern "C" void on_stop_signal(int) {
  g_interrupted = 1;
}

// SIGINT and SIGTERM set g_interrupted while the loop runs; the old handlers come back after.
class StopSignals {
 public:
  explicit StopSignals(bool catch_them) : active_(catch_them) {
    g_interrupted = 0;
    if (!active_) return;
    old_int_ = std::signal(SIGINT, on_stop_signal);
    old_term_ = std::signal(SIGTERM, on_stop_signal);
  }
  ~StopSignals() {
    if (!active_) return;
    std::signal(SIGINT, old_int_);
    std::signal(SIGTERM, old_term_);
  }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  bool active_;
  void (*old_int_)(int) = SIG_DFL;
  void (*old_term_)(int) = SIG_DFL;
};

// x rounded to 1/per_unit (10: one decimal), printed without noise digits in JSON.
double round_to(double x, double per_unit) {
  return std::round(x * per_unit) / per_unit;
}

constexpr size_t kStopReasons = static_cast<size_t>(StopReason::non_finite) + 1;

class Loop {
 public:
  Loop(Task& task, dist::World& world, const Log& log, const LoopOptions& o, Progress start)
      : task_(task), world_(world), log_(log), o_(o), at_(start), first_step_(start.step) {}

  LoopResult run() {
    const StopSignals signals(o_.catch_signals);
    while (at_.step < o_.total_steps && stop_reason() == StopReason::none) {
      if (!step()) break;
      if (at_.step % o_.log_every == 0 || at_.step == o_.total_steps) log_progress();
      if (o_.eval_every > 0 && at_.step % o_.eval_every == 0 && at_.step != o_.total_steps)
        validate_and_save(false);
    }
    return finish();
  }

 private:
  // What this rank asks for: a failed save under --on-save-error stop (rank 0 only), a signal.
  StopReason requested() const {
    if (save_stop_) return StopReason::save_failed;
    return g_interrupted ? StopReason::interrupted : StopReason::none;
  }
  // Without MPI a stop is seen where it happens; with MPI only through a step's allreduce, so that
  // every rank leaves the loop after the same step. A NaN/Inf stop is the same on every rank.
  StopReason stop_reason() const {
    if (non_finite_) return StopReason::non_finite;
    return world_.distributed() ? agreed_ : requested();
  }

  // One optimizer step; false when it was refused and the run stops (--on-nan stop).
  bool step() {
    nn::Optimizer& opt = task_.optimizer();
    opt.set_lr(o_.schedule.at(at_.step + 1));
    Generator::State shared_rng{};
    if (world_.distributed()) shared_rng = dist::fork_step_rng(task_.dropout_rng(), world_.rank());
    opt.zero_grad();
    BatchLoss l;
    {
      const PrecisionScope precision(o_.precision);
      const auto weights = step_weights_.step();  // bf16 copies, where asked
      l = task_.forward_backward();
    }
    if (world_.distributed()) {  // the global batch's gradient on every rank, its loss, the stops
      // extras: the loss sum, then per stop reason the number of ranks that ask for it.
      std::array<double, 1 + kStopReasons> extras{};
      extras[0] = l.sum;
      if (const StopReason r = requested(); r != StopReason::none) extras[1 + static_cast<size_t>(r)] = 1;
      l.tokens = world_.allreduce_gradients(opt.params(), l.tokens, extras);
      l.sum = extras[0];
      agreed_ = StopReason::none;
      for (size_t r = 1; r < kStopReasons; ++r)
        if (extras[1 + r] > 0) agreed_ = static_cast<StopReason>(r);
      dist::join_step_rng(task_.dropout_rng(), shared_rng);
    }
    auto loss = static_cast<float>(l.sum / static_cast<double>(std::max<int64_t>(l.tokens, 1)));
    if (o_.fault) o_.fault(at_.step + 1, opt, loss);
    if (!guarded(opt, loss)) {
      if (non_finite_) return false;
      l = {};  // skipped: the batch counts as a step, its tokens and loss do not
    }
    ++at_.step;
    task_.next_batch();
    window_.sum += l.sum;
    window_.tokens += l.tokens;
    r_.tokens += l.tokens;
    return true;
  }

  // clip + opt.step(), unless the loss or a gradient is not finite; then the on_nan policy.
  bool guarded(nn::Optimizer& opt, float loss) {
    const StepOutcome s = guarded_step(opt, loss, o_.clip, at_.step + 1);
    if (s.applied) {
      norms_.sum += s.grad_norm;
      norms_.max = std::max(norms_.max, s.grad_norm);
      ++norms_.steps;
      return true;
    }
    if (o_.on_nan == OnNonFinite::skip) {
      ++r_.skipped_steps;
      fmt::print(stderr, "warning: {} (--on-nan skip: batch dropped, {} skipped so far)\n", s.problem,
                 r_.skipped_steps);
    } else {
      non_finite_ = true;
      fmt::print(stderr,
                 "error: {}. Stopping (--on-nan stop); the weights are those after step {}. Try a lower "
                 "--lr, --clip, or --on-nan skip with --resume\n",
                 s.problem, at_.step);
    }
    return false;
  }

  void log_progress() {
    const double elapsed = seconds_since(t0_), dt = seconds_since(t_window_);
    const double steps_per_s = static_cast<double>(at_.step - first_step_) / elapsed;
    const double eta = static_cast<double>(o_.total_steps - at_.step) / steps_per_s;
    const double tok_s = static_cast<double>(window_.tokens) / dt;
    const double mean = window_.sum / static_cast<double>(std::max<int64_t>(window_.tokens, 1));
    const double lr = task_.optimizer().lr();
    const int64_t epoch = task_.epoch();
    nlohmann::ordered_json j = {{"step", at_.step}, {"total_steps", o_.total_steps}};
    if (epoch > 0) j["epoch"] = epoch;
    j.update({{"loss", mean}, {"lr", std::stod(fmt::format("{:.6g}", lr))}});
    if (norms_.steps > 0)  // before clipping; the mean over the applied steps since the last line
      j.update(
          {{"grad_norm", std::stod(fmt::format("{:.6g}", norms_.sum / static_cast<double>(norms_.steps)))},
           {"grad_norm_max", std::stod(fmt::format("{:.6g}", norms_.max))}});
    j.update({{"tokens_per_s", std::round(tok_s)},
              {"steps_per_s", round_to(steps_per_s, 100)},
              {"elapsed_s", round_to(elapsed, 10)},
              {"eta_s", std::round(eta)},
              {"precision", precision_name(o_.precision)}});
    log_.line(
        "train", j,
        fmt::format("step {}/{}{} | loss {:.4f} | lr {:.2e}{} | {:.0f} tok/s, {:.1f} steps/s | {} elapsed, "
                    "ETA {}",
                    at_.step, o_.total_steps, epoch > 0 ? fmt::format(" (epoch {})", epoch) : "", mean, lr,
                    norms_.steps > 0
                        ? fmt::format(" | grad norm {:.3g}", norms_.sum / static_cast<double>(norms_.steps))
                        : "",
                    tok_s, steps_per_s, format_duration(elapsed), format_duration(eta)));
    window_ = {};
    norms_ = {};
    t_window_ = std::chrono::steady_clock::now();
  }

  // Validation (when the task has it) picks whether the best checkpoint is written; the
  // resumable state is written every time. Once per step: the final call after a stop at a step
  // that was already validated and saved (Ctrl-C during validation) does nothing. The best loss so
  // far is the one of the model in the best file: when that save fails, the previous one stays (in
  // the resumable state too), so the next validation that beats what the file holds saves again.
  // A step is validated once: the final call after a save that failed at the same step (only the
  // root writes, so only the root can be there) retries the saves without validating again.
  // Validation is a collective under MPI, and the other ranks, whose saves never fail, do not come
  // back to it: the root alone in it would wait for them for good.
  void validate_and_save(bool final) {
    if (saved_at_ == at_.step) return;
    const int64_t failed = r_.failed_saves;
    if (validated_at_ != at_.step) {
      validated_at_ = at_.step;
      validate_and_save_best(final);
    } else if (best_unsaved_ && save_best(final)) {
      fmt::print(stderr, "step {}: {} saved on the final try (the best model of this step's validation)\n",
                 at_.step, o_.best_path);
    }
    save(o_.last_path, true, final);
    if (r_.failed_saves == failed) saved_at_ = at_.step;
  }

  // Validates (when the task can), logs the result and saves the best file when the model is the
  // best so far (the latest model when there is no validation); best_unsaved_ says whether that
  // save is still to be done.
  void validate_and_save_best(bool final) {
    std::optional<Validation> v;
    {
      const PrecisionScope precision(o_.precision);
      v = task_.validate();
    }
    best_unsaved_ = false;
    if (!v) {  // no validation: the best file is the latest model
      best_loss_ = at_.best_valid_loss;
      save_best(final);
      return;
    }
    const bool best = v->loss < at_.best_valid_loss;
    bool best_saved = false;
    if (best) {
      best_loss_ = v->loss;
      best_saved = save_best(final);
    }
    nlohmann::ordered_json j = {{"step", at_.step}, {"loss", v->loss}};
    std::string text = fmt::format("  valid @ step {}: loss {:.4f}", at_.step, v->loss);
    for (const Figure& f : v->figures) {
      j[f.key] = f.value;
      std::string label = f.key;
      std::replace(label.begin(), label.end(), '_', ' ');
      text += f.unit == "%" ? fmt::format(", {} {:.2f}%", label, f.value)
                            : fmt::format(", {} {:.4f}{}", label, f.value, f.unit);
    }
    j["best"] = best;
    if (best && !o_.best_path.empty()) j["saved"] = best_saved;
    j["elapsed_s"] = round_to(seconds_since(t0_), 10);
    const char* mark = !best || o_.best_path.empty() ? ""
                       : best_saved                  ? " (best, saved)"
                                                     : " (best; not saved, see the error above)";
    log_.line("valid", j, text + mark);
  }

  // Writes the best file with best_loss_ as the best loss it records; on failure the best loss so
  // far stays the one the file holds, and best_unsaved_ is set for a retry at the same step.
  bool save_best(bool final) {
    const double previous = at_.best_valid_loss;
    at_.best_valid_loss = best_loss_;  // what the best file records of itself
    // (only the root writes, so only its copy goes back: the others' best loss is never read, as
    // only the root saves and logs)
    const bool saved = save(o_.best_path, false, final);
    if (!saved) at_.best_valid_loss = previous;
    best_unsaved_ = !saved;
    return saved;
  }

  // One writer (every rank holds the same state); a failure keeps the old file and applies the
  // save-failure policy. False only when this call tried to write the file and failed, or skipped it
  // because an earlier failure stops the run.
  bool save(const std::string& path, bool with_optimizer, bool final) {
    if (path.empty() || !world_.is_root()) return true;
    if (save_stop_) return false;  // stopping: not the other file
    try {
      task_.save(path, with_optimizer, at_);
      return true;
    } catch (const std::exception& e) {
      ++r_.failed_saves;
      const char* policy = final                   ? "this was the final save"
                           : o_.stop_on_save_error ? "stopping (--on-save-error stop)"
                                                   : "training continues and the next save retries "
                                                     "(--on-save-error continue)";
      fmt::print(stderr, "error: step {}: saving {} failed: {}. {} keeps its previous content; {}\n",
                 at_.step, path, e.what(), path, policy);
      if (final) r_.final_save_failed = true;
      if (o_.stop_on_save_error) save_stop_ = true;
    }
    return false;
  }

  LoopResult finish() {
    r_.stop = stop_reason();
    // A save that failed under --on-save-error stop at the step where the ranks agreed on another
    // stop (Ctrl-C): rank 0, the one writer, saves nothing more and reports the failed save, as a
    // single process does (requested() puts it first).
    if (save_stop_ && r_.stop != StopReason::non_finite) r_.stop = StopReason::save_failed;
    if (r_.stop == StopReason::non_finite)
      save(o_.last_path, true, true);  // the last good state, to resume (--on-nan skip, a lower --lr)
    else if (r_.stop != StopReason::save_failed)
      validate_and_save(true);
    r_.step = at_.step;
    r_.elapsed_s = seconds_since(t0_);
    log_done();
    return r_;
  }

  void log_done() {
    nlohmann::ordered_json j = {{"step", r_.step},
                                {"stop", stop_reason_name(r_.stop)},
                                {"interrupted", r_.stop == StopReason::interrupted},
                                {"stopped_on_nan", r_.stop == StopReason::non_finite},
                                {"skipped_steps", r_.skipped_steps},
                                {"failed_saves", r_.failed_saves},
                                {"elapsed_s", round_to(r_.elapsed_s, 10)},
                                {"tokens", r_.tokens},
                                {"precision", precision_name(o_.precision)}};
    std::string files;
    if (!o_.best_path.empty()) j["model"] = o_.best_path, files += "; model in " + o_.best_path;
    if (!o_.last_path.empty()) j["last"] = o_.last_path, files += ", latest state in " + o_.last_path;
    // "saved" only when the state was: a run without files (copy_task) or whose final save failed
    // saved nothing.
    const bool saved = !o_.last_path.empty() && !r_.final_save_failed;
    const std::string how = r_.stop == StopReason::interrupted
                                ? (saved ? "interrupted, saved" : "interrupted")
                            : r_.stop != StopReason::none ? "stopped"
                                                          : "done";
    log_.line("done", j,
              fmt::format("{} at step {} after {}{}{}", how, r_.step, format_duration(r_.elapsed_s), files,
                          r_.skipped_steps || r_.failed_saves
                              ? fmt::format(" ({} steps skipped on NaN/Inf, {} failed saves)",
                                            r_.skipped_steps, r_.failed_saves)
                              : ""));
  }

  Task& task_;
  dist::World& world_;
  const Log& log_;
  const LoopOptions& o_;
  Progress at_;
  const int64_t first_step_;
  LoopResult r_;
  bool save_stop_ = false;                // this rank's save failed under --on-save-error stop (rank 0 only)
  bool non_finite_ = false;               // a NaN/Inf under --on-nan stop (every rank alike)
  StopReason agreed_ = StopReason::none;  // MPI: the reason some rank asked for at the last step
  int64_t saved_at_ = -1;                 // the step whose validation and saves all ran
  int64_t validated_at_ = -1;             // the step last validated (whatever its saves did)
  bool best_unsaved_ = false;             // validated_at_'s best file failed to save
  double best_loss_ = 0;                  // ... and the best loss it is to record
  // bf16 products: each weight rounded once per step (autograd/precision.hpp)
  Bf16StepWeights step_weights_;
  BatchLoss window_;  // since the last progress line
  struct {
    double sum = 0, max = 0;
    int64_t steps = 0;
  } norms_;  // the global gradient norms (before clipping) of the applied steps since the last line
  const std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point t_window_ = t0_;
};

}  // namespace

void Task::save(const std::string& path, bool, const Progress&) {
  throw std::logic_error(fmt::format("this task cannot write checkpoints ({})", path));
}

const char* stop_reason_name(StopReason r) {
  switch (r) {
    case StopReason::none:
      return "none";
    case StopReason::interrupted:
      return "interrupted";
    case StopReason::save_failed:
      return "save_failed";
    case StopReason::non_finite:
      return "non_finite";
  }
  return "?";
}

int LoopResult::exit_status() const {
  if (stop == StopReason::non_finite) return kExitNonFinite;
  if (stop == StopReason::save_failed || final_save_failed) return 1;
  return stop == StopReason::interrupted ? kExitInterrupted : 0;
}

LoopResult run_loop(Task& task, dist::World& world, const Log& log, const LoopOptions& o, Progress start) {
  if (o.log_every < 1) throw std::invalid_argument(fmt::format("run_loop: log_every {} < 1", o.log_every));
  return Loop(task, world, log, o, start).run();
}

FaultInjector inject_nan(int64_t step, std::string name) {
  return [step, name = std::move(name)](int64_t s, nn::Optimizer& opt, float& loss) {
    if (s != step) return;
    if (name == "loss") loss = std::numeric_limits<float>::quiet_NaN();
    const NamedTensors& params = opt.params();
    for (const auto& [n, p] : params)
      if (n == name || (name.empty() && &p == &params.back().second))
        if (Tensor g = p.grad(); g.defined())
          g.data()[g.numel() / 2] = std::numeric_limits<float>::quiet_NaN();
  };
}

std::string output_path(const std::string& out, const std::string& suffix) {
  const std::string ext = ".safetensors";
  const bool has_ext = out.size() > ext.size() && out.ends_with(ext);
  return (has_ext ? out.substr(0, out.size() - ext.size()) : out) + suffix;
}

std::string last_checkpoint_path(const std::string& out) {
  return output_path(out, ".last.safetensors");
}

void prepare_output(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path p(path);
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  std::error_code ec;
  if (!fs::is_directory(dir, ec) || ::access(dir.c_str(), W_OK | X_OK) != 0)
    throw std::runtime_error(
        fmt::format("cannot write {}: directory {} does not exist or is not writable", path, dir.string()));
  // A run's files must be replaced whole, by a rename (a checkpoint is complete on disk or not
  // there): a directory cannot be, and a device or a FIFO would only be written through as a stream
  // (io::write_file_atomic), so both are refused.
  if (fs::is_directory(p, ec)) throw std::runtime_error(fmt::format("cannot write {}: is a directory", path));
  if (fs::exists(p, ec) && !fs::is_regular_file(p, ec))
    throw std::runtime_error(fmt::format("cannot write {}: not a regular file", path));
  io::remove_stale_temporaries(path);
  // access() answers yes to root everywhere, and a read-only file system or /sys refuses anyway:
  // create (and remove) a file as the save will, named like its temporaries.
  std::string probe = (dir / fmt::format(".{}.tmp-XXXXXX", p.filename().string())).string();
  const int fd = ::mkstemp(probe.data());
  if (fd < 0)
    throw std::runtime_error(fmt::format("cannot write {}: cannot create a file in {}: {}", path,
                                         dir.string(), std::strerror(errno)));
  ::close(fd);
  ::unlink(probe.c_str());
}

}  // namespace tg::train
