// Pieces shared by the translate subcommands: loading a model, evaluation metrics, logging.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "io/json.hpp"
#include "nn/checkpoint.hpp"
#include "nn/data.hpp"
#include "nn/transformer.hpp"
#include "train/guard.hpp"
#include "translate_args.hpp"

namespace translate {

using namespace tg;
using namespace tg::nn;
using namespace tg::io;
using namespace tg::train;

int run_train(const std::vector<std::string>& argv);
int run_eval(const std::vector<std::string>& argv);
int run_decode(const std::vector<std::string>& argv);
int run_attention(const std::vector<std::string>& argv);

// A model with what is needed to feed it text.
struct LoadedModel {
  std::unique_ptr<Transformer> model;
  CheckpointInfo info;
};
LoadedModel load_model(const std::string& path);

// Reads a TSV file, reporting skipped lines on stderr.
ParallelText read_data(const std::string& path, bool skip_bad_lines);

// Adds --threads, and applies it after parsing (ops::set_num_threads).
void add_threads_option(Args& args);
void apply_threads_option(const Args& args);

struct Metrics {
  double loss = 0;            // mean cross-entropy per label token (no smoothing)
  double token_accuracy = 0;  // fraction of label tokens predicted (argmax, teacher-forced)
  double exact_match = 0;     // fraction of sentences with every label token right
  int64_t tokens = 0, sentences = 0;
};
// Teacher-forced evaluation in eval mode under NoGradGuard.
//
// Exact match is read from the teacher-forced argmax: when every position's argmax equals the
// gold token (including <eos>), greedy decoding reproduces the reference exactly, and vice versa,
// because greedy then feeds back exactly the gold prefix. So this is greedy exact match at the
// cost of one forward pass.
Metrics evaluate(Transformer& model, const std::vector<EncodedPair>& pairs, int64_t batch_size);

// Drops pairs that do not fit the positional table (source + <eos> or <bos> + target longer than
// max_len); returns how many were dropped.
int64_t drop_too_long(std::vector<EncodedPair>& pairs, int64_t max_len);

// "1h02m", "3m05s", "12s"
std::string format_duration(double seconds);

// Progress and results: human-readable lines, or with --json one JSON object per line.
class Log {
 public:
  explicit Log(bool json) : json_(json) {}
  bool json() const { return json_; }
  // Prints `text` (human mode) or `obj` with an added "event" field (JSON mode), then flushes.
  void line(const std::string& event, json::Value obj, const std::string& text) const;

 private:
  bool json_;
};

double seconds_since(std::chrono::steady_clock::time_point t0);

// What translate train does when things go wrong during a run (options --on-nan and
// --on-save-error; the guarantees are listed in tests/fuzz/README.md):
//  - a non-finite loss or gradient: the update is not applied (train/guard.hpp); `stop` (default)
//    saves the last good state to <out>.last.safetensors and exits with status 3, `skip` drops
//    that batch, counts it and goes on;
//  - a checkpoint save that fails (disk full, permissions, non-finite weights): the file keeps its
//    previous content; `continue` (default) reports it and retries at the next save, `stop` ends
//    the run (status 1). A failed final save always ends with status 1.
// Test hook: TAPEGRAD_TEST_INJECT_NAN="STEP[:NAME]" makes the gradient of parameter NAME (or the
// loss, NAME = loss; default: the last parameter) NaN at optimizer step STEP.
// Before training: the directory of `path` must exist and be writable (else std::runtime_error),
// and temporaries left there by a run killed while saving `path` are removed.
void prepare_output(const std::string& path);

class TrainGuards {
 public:
  static void add_options(Args& args);
  explicit TrainGuards(const Args& args);

  // Replaces `clip_grad_norm(...); opt.step();` for update number `step` (1-based). Returns true
  // when the update was applied; false when it was skipped or the run must stop (stopped()).
  bool step(Optimizer& opt, float loss, double clip, int64_t step);
  // Runs `save` (which writes `path`); on an exception reports it and applies the policy.
  bool save(const std::function<void()>& save, const std::string& path, int64_t step, bool final);

  bool stopped() const { return nan_stop_ || save_stop_; }
  bool stopped_on_nan() const { return nan_stop_; }
  int64_t skipped_steps() const { return skipped_; }
  int64_t failed_saves() const { return failed_saves_; }
  int exit_status() const { return nan_stop_ ? 3 : (save_stop_ || final_save_failed_) ? 1 : 0; }

 private:
  OnNonFinite on_nan_ = OnNonFinite::stop;
  bool stop_on_save_error_ = false;
  bool nan_stop_ = false, save_stop_ = false, final_save_failed_ = false;
  int64_t skipped_ = 0, failed_saves_ = 0;
  std::optional<int64_t> inject_step_;
  std::string inject_name_;
};

}  // namespace translate
