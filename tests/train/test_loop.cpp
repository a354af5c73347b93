// The training loop (train/loop.hpp) through its API, on a model that is not a Transformer: a
// linear classifier plugged in as a Task. Faults come through the loop's seam (inject_nan), failed
// saves from the task's save().
#include <doctest/doctest.h>

#include <unistd.h>

#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "autograd/tape.hpp"
#include "nn/layers.hpp"
#include "nn/loss.hpp"
#include "nn/optim.hpp"
#include "tests/test_util.hpp"
#include "train/loop.hpp"

using namespace tg;
using namespace tg::nn;

namespace {

// 4 features -> 5 classes; labels 1..4 (0 is <pad>, ignored by the loss) from a fixed rule.
class LinearTask : public train::Task {
 public:
  struct Save {
    std::string path;
    bool with_optimizer;
    train::Progress at;
    std::vector<std::vector<float>> params;
  };

  explicit LinearTask(uint64_t seed)
      : gen_(seed), model_(4, 5, gen_), opt_(model_.named_parameters(), {.lr = 0.05f}) {
    for (int b = 0; b < 3; ++b) {
      const Tensor x = Tensor::uniform({8, 4}, -1, 1, gen_);
      std::vector<int32_t> y;
      for (int64_t r = 0; r < 8; ++r) {
        int32_t best = 0;
        for (int32_t j = 1; j < 4; ++j)
          if (x.at({r, j}) > x.at({r, best})) best = j;
        y.push_back(best + 1);
      }
      batches_.emplace_back(x, y);
    }
  }

  Optimizer& optimizer() override { return opt_; }
  Generator& dropout_rng() override { return gen_; }
  train::BatchLoss forward_backward() override {
    const auto& [x, y] = batches_[cursor_ % batches_.size()];
    const Tensor loss = label_smoothed_cross_entropy(model_.forward(x), y);
    backward(loss);
    return {static_cast<double>(loss.item()) * 8.0, 8};
  }
  void next_batch() override { ++cursor_; }
  std::optional<train::Validation> validate() override {
    if (interrupt_in_validation) std::raise(SIGINT);  // as Ctrl-C during validation
    if (valid_losses.empty()) return std::nullopt;
    const double l = valid_losses[std::min(validations++, valid_losses.size() - 1)];
    return train::Validation{l, {{"accuracy", 50.0, "%"}, {"perplexity", std::exp(l), ""}}};
  }
  void save(const std::string& path, bool with_optimizer, const train::Progress& at) override {
    if (++save_calls == failing_save_number) throw std::runtime_error("disk full");
    if (failing_saves > 0) {
      --failing_saves;
      throw std::runtime_error("disk full");
    }
    std::vector<std::vector<float>> p;
    for (const auto& [name, t] : model_.named_parameters()) p.push_back(t.to_vector());
    saves.push_back({path, with_optimizer, at, p});
  }

  std::vector<Save> saves;
  std::vector<double> valid_losses;  // what validate() returns, in turn (none: no validation)
  size_t validations = 0;
  int failing_saves = 0;        // the next N saves throw
  int save_calls = 0;           // save() calls so far
  int failing_save_number = 0;  // the save() call with this number (from 1) throws
  bool interrupt_in_validation = false;

 private:
  Generator gen_;
  Linear model_;
  SGD opt_;
  std::vector<std::pair<Tensor, std::vector<int32_t>>> batches_;
  size_t cursor_ = 0;
};

train::LoopOptions options(int64_t steps) {
  train::LoopOptions o;
  o.total_steps = steps;
  o.schedule = {.kind = LrSchedule::Kind::constant, .lr = 0.05f};
  o.log_every = 1000;
  o.eval_every = 2;
  o.best_path = "best";
  o.last_path = "last";
  o.catch_signals = false;
  return o;
}

train::LoopResult run(LinearTask& task, const train::LoopOptions& o, train::Progress start = {},
                      bool json = false) {
  dist::World world({.quiet_others = false});
  return train::run_loop(task, world, train::Log(json), o, start);
}

// What `f` prints on stdout (the loop's lines), captured through a file.
template <class F>
std::string stdout_of(F f) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("tapegrad_loop_" + std::to_string(::getpid()))).string();
  std::fflush(stdout);
  const int saved = ::dup(1);
  REQUIRE(std::freopen(path.c_str(), "w", stdout));
  f();
  std::fflush(stdout);
  ::dup2(saved, 1);
  ::close(saved);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  std::filesystem::remove(path);
  return text.str();
}

}  // namespace

TEST_CASE("train.loop.trains_a_task_that_is_not_a_transformer") {
  LinearTask task(1);
  train::LoopOptions o = options(30);
  const train::LoopResult r = run(task, o);
  CHECK(r.exit_status() == 0);
  CHECK(r.step == 30);
  CHECK(r.tokens == 30 * 8);
  CHECK(task.optimizer().step_count() == 30);
  // Without validation both files are written at every evaluation: steps 2, 4, ..., 30.
  REQUIRE(task.saves.size() == 30);
  CHECK(task.saves.back().path == "last");
  CHECK(task.saves.back().with_optimizer);
  CHECK(task.saves.back().at.step == 30);
}

TEST_CASE("train.loop.nan_stop_keeps_the_last_good_state") {
  LinearTask clean(1), poisoned(1);
  train::LoopOptions o = options(3);
  REQUIRE(run(clean, o).exit_status() == 0);
  o.total_steps = 6;
  o.fault = train::inject_nan(4);  // the last parameter's gradient at step 4
  const train::LoopResult r = run(poisoned, o);
  CHECK(r.exit_status() == train::kExitNonFinite);
  CHECK(r.stop == train::StopReason::non_finite);
  CHECK(r.step == 3);
  CHECK(poisoned.optimizer().step_count() == 3);
  // The state saved on stopping is the state after step 3, as a clean 3-step run leaves it.
  REQUIRE(!poisoned.saves.empty());
  CHECK(poisoned.saves.back().path == "last");
  CHECK(poisoned.saves.back().at.step == 3);
  CHECK(poisoned.saves.back().params == clean.saves.back().params);

  LinearTask loss_nan(1);
  o.fault = train::inject_nan(2, "loss");
  CHECK(run(loss_nan, o).step == 1);
}

TEST_CASE("train.loop.nan_skip_drops_the_batch_and_goes_on") {
  LinearTask task(1);
  train::LoopOptions o = options(6);
  o.on_nan = train::OnNonFinite::skip;
  o.fault = train::inject_nan(4, "weight");
  const train::LoopResult r = run(task, o);
  CHECK(r.exit_status() == 0);
  CHECK(r.step == 6);
  CHECK(r.skipped_steps == 1);
  CHECK(r.tokens == 5 * 8);                   // the skipped batch does not count
  CHECK(task.optimizer().step_count() == 5);  // nor was it applied
  CHECK(task.saves.back().at.step == 6);
  for (const auto& p : task.saves.back().params)
    for (float v : p) CHECK(std::isfinite(v));
}

TEST_CASE("train.loop.failed_saves") {
  SUBCASE("continue: the next save retries") {
    LinearTask task(1);
    task.failing_saves = 2;  // both files at step 2
    const train::LoopResult r = run(task, options(6));
    CHECK(r.exit_status() == 0);
    CHECK(r.failed_saves == 2);
    CHECK(r.step == 6);
    CHECK(task.saves.front().at.step == 4);
  }
  SUBCASE("stop: the run ends at the failed save, status 1") {
    LinearTask task(1);
    task.failing_saves = 1;
    train::LoopOptions o = options(6);
    o.stop_on_save_error = true;
    const train::LoopResult r = run(task, o);
    CHECK(r.exit_status() == 1);
    CHECK(r.stop == train::StopReason::save_failed);
    CHECK(r.step == 2);
    CHECK(r.failed_saves == 1);
    CHECK(task.saves.empty());  // the other file is not tried, nor a final save
  }
  SUBCASE("a failed final save: status 1") {
    LinearTask task(1);
    train::LoopOptions o = options(6);
    o.eval_every = 0;  // only the final save
    task.failing_saves = 1;
    const train::LoopResult r = run(task, o);
    CHECK(r.exit_status() == 1);
    CHECK(r.final_save_failed);
    CHECK(r.step == 6);
  }
}

TEST_CASE("train.loop.validation_picks_the_best_and_resume_continues") {
  LinearTask task(1);
  task.valid_losses = {3.0, 2.0, 2.5, 1.0};
  train::LoopOptions o = options(4);
  o.eval_every = 1;
  const train::LoopResult r = run(task, o);
  CHECK(r.exit_status() == 0);
  std::vector<int64_t> best, last;
  for (const auto& s : task.saves) (s.path == "best" ? best : last).push_back(s.at.step);
  CHECK(best == std::vector<int64_t>{1, 2, 4});  // validation losses 3, 2 and 1 improved
  CHECK(last == std::vector<int64_t>{1, 2, 3, 4});
  CHECK(task.saves.back().at.best_valid_loss == 1.0);

  // A resumed run starts at the saved step and keeps the best loss so far.
  LinearTask resumed(1);
  resumed.valid_losses = {1.5};
  const train::LoopResult r2 = run(resumed, options(6), {.step = 4, .best_valid_loss = 1.0});
  CHECK(r2.step == 6);
  CHECK(resumed.optimizer().step_count() == 2);
  for (const auto& s : resumed.saves) CHECK(s.path == "last");  // 1.5 is not better than 1.0
}

// A best model whose save failed is not the best on file: the next validation that beats the file's
// loss (not the failed one's) saves again, every file records the loss of the model in the best
// file, and the line says the best was not saved.
TEST_CASE("train.loop.failed_best_save_is_retried_by_the_next_better_validation") {
  LinearTask task(1);
  task.valid_losses = {3.0, 2.0, 2.5, 2.2};  // steps 1..4
  task.failing_save_number = 3;              // best@1, last@1, then best@2 fails
  train::LoopOptions o = options(4);
  o.eval_every = 1;
  train::LoopResult r;
  const std::string out = stdout_of([&] { r = run(task, o); });
  INFO("stdout: ", out);
  CHECK(r.exit_status() == 0);
  CHECK(r.failed_saves == 1);
  std::vector<int64_t> best;
  for (const auto& s : task.saves) {
    if (s.path == "best") best.push_back(s.at.step);
    if (s.at.step == 2) CHECK(s.at.best_valid_loss == 3.0);  // the last file at step 2
  }
  CHECK(best == std::vector<int64_t>{1, 3, 4});  // 2.5 beats the 3.0 on file
  CHECK(task.saves.back().at.best_valid_loss == 2.2);
  const auto line = [&](const std::string& start) {
    const size_t at = out.find(start);
    return at == std::string::npos ? std::string() : out.substr(at, out.find('\n', at) - at);
  };
  CHECK(line("  valid @ step 2:").ends_with("(best; not saved, see the error above)"));
  CHECK(line("  valid @ step 3:").ends_with("(best, saved)"));
}

namespace {

// A 6-step run (eval every 2) of `task` with Ctrl-C arriving while it validates at step 2: it
// stops there, having validated and logged the validation once. Returns what it printed.
train::LoopResult interrupted_in_first_validation(LinearTask& task, std::string& out) {
  task.valid_losses = {2.0};
  task.interrupt_in_validation = true;
  train::LoopOptions o = options(6);
  o.catch_signals = true;
  train::LoopResult r;
  out = stdout_of([&] { r = run(task, o, {}, true); });
  INFO("stdout: ", out);
  CHECK(r.exit_status() == train::kExitInterrupted);
  CHECK(r.step == 2);
  CHECK(testing::count_of(out, "\"event\":\"valid\"") == 1);
  CHECK(task.validations == 1);
  return r;
}

}  // namespace

TEST_CASE("train.loop.interrupt_during_validation_logs_it_once") {
  LinearTask task(1);
  std::string out;
  interrupted_in_first_validation(task, out);
  // Both files were written at step 2, once each.
  CHECK(task.saves.size() == 2);
}

// A save that fails at the step where the run stops is retried by the final save without
// validating again: under MPI validation is a collective, and only the root (the one writer) can
// have a failed save, so a second validation there waited for the other ranks for good
// (tests/mpi/mpi_train.sh 3c runs that case on 2 ranks).
TEST_CASE("train.loop.a_save_failed_at_the_stop_step_is_retried_without_validating_again") {
  LinearTask task(1);
  task.failing_save_number = 1;  // the best file's save at step 2 fails
  std::string out;
  const train::LoopResult r = interrupted_in_first_validation(task, out);
  CHECK(r.failed_saves == 1);
  // last@2 after the failure, then the final call: best@2 again (it records its loss), last@2.
  REQUIRE(task.saves.size() == 3);
  CHECK(task.saves[0].path == "last");
  CHECK(task.saves[1].path == "best");
  CHECK(task.saves[1].at.best_valid_loss == 2.0);
  CHECK(task.saves[2].path == "last");
  CHECK(task.saves[2].at.best_valid_loss == 2.0);
  CHECK(task.saves[0].at.best_valid_loss != 2.0);  // written while the best file held no model
}

TEST_CASE("train.loop.interrupted_run_without_files_does_not_say_saved") {
  LinearTask task(1);
  task.interrupt_in_validation = true;
  train::LoopOptions o = options(6);
  o.catch_signals = true;
  o.best_path.clear();
  o.last_path.clear();
  train::LoopResult r;
  const std::string out = stdout_of([&] { r = run(task, o); });
  INFO("stdout: ", out);
  CHECK(r.exit_status() == train::kExitInterrupted);
  CHECK(out.find("interrupted at step 2") != std::string::npos);
  CHECK(out.find("saved") == std::string::npos);
}

TEST_CASE("train.loop.output_paths") {
  CHECK(train::last_checkpoint_path("toy.safetensors") == "toy.last.safetensors");
  CHECK(train::last_checkpoint_path("dir/mymodel") == "dir/mymodel.last.safetensors");
  CHECK(train::output_path("toy.safetensors", ".loss.svg") == "toy.loss.svg");
  CHECK(train::output_path("mymodel", ".loss.svg") == "mymodel.loss.svg");
  CHECK(train::output_path(".safetensors", ".loss.svg") == ".safetensors.loss.svg");
}
