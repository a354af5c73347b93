#include "translate_common.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>

#include "autograd/tape.hpp"
#include "io/file.hpp"
#include "nn/loss.hpp"
#include "ops/kernels.hpp"

namespace translate {

LoadedModel load_model(const std::string& path) {
  Checkpoint ck = read_checkpoint(path);
  LoadedModel m;
  m.model = std::make_unique<Transformer>(ck.info.config, 0);
  m.info = std::move(ck.info);
  load_weights(*m.model, ck.file, path);
  m.model->eval();
  return m;
}

ParallelText read_data(const std::string& path, bool skip_bad_lines) {
  ParallelText t;
  try {
    t = read_tsv(path, skip_bad_lines);
  } catch (const DataError& e) {
    const std::string msg = e.what();
    // A single bad line: tell the user how to go on without it.
    if (!skip_bad_lines && msg.find("no sentence pairs") == std::string::npos)
      throw DataError(msg + " (use --skip-bad-lines to skip such lines)");
    throw;
  }
  if (t.skipped) {
    fmt::print(stderr, "warning: {}: skipped {} bad line{}:\n", path, t.skipped, t.skipped == 1 ? "" : "s");
    for (const auto& p : t.problems) fmt::print(stderr, "  {}\n", p);
    if (t.skipped > static_cast<int64_t>(t.problems.size()))
      fmt::print(stderr, "  ... and {} more\n", t.skipped - static_cast<int64_t>(t.problems.size()));
  }
  return t;
}

void add_threads_option(Args& args) {
  args.option("threads", "N", "kernel threads, 1..1024 (default: all cores)");
}

void apply_threads_option(const Args& args) {
  if (args.given("threads")) ops::set_num_threads(static_cast<int>(args.integer("threads", 1, 1024)));
}

Metrics evaluate(Transformer& model, const std::vector<EncodedPair>& pairs, int64_t batch_size) {
  NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  Metrics m;
  double loss_sum = 0;
  int64_t correct = 0, exact = 0;
  for (const auto& idx : make_batches(pairs, batch_size, nullptr, true)) {
    const Batch b = make_batch(pairs, idx);
    const Tensor logits = model.forward(b);
    const int64_t n = b.num_label_tokens();
    loss_sum += static_cast<double>(label_smoothed_cross_entropy(logits, b.labels, 0.0f).item()) *
                static_cast<double>(n);
    const int64_t V = logits.size(1);
    const float* L = logits.data();
    for (int64_t r = 0; r < b.batch; ++r) {
      bool all = true;
      for (int64_t t = 0; t < b.tgt_len; ++t) {
        const int32_t label = b.labels[static_cast<size_t>(r * b.tgt_len + t)];
        if (label == kPad) continue;
        const float* row = L + (r * b.tgt_len + t) * V;
        const bool ok = std::max_element(row, row + V) - row == label;
        correct += ok;
        all = all && ok;
      }
      exact += all;
    }
    m.tokens += n;
    m.sentences += b.batch;
  }
  model.train(was_training);
  if (m.tokens) {
    m.loss = loss_sum / static_cast<double>(m.tokens);
    m.token_accuracy = static_cast<double>(correct) / static_cast<double>(m.tokens);
  }
  if (m.sentences) m.exact_match = static_cast<double>(exact) / static_cast<double>(m.sentences);
  return m;
}

int64_t drop_too_long(std::vector<EncodedPair>& pairs, int64_t max_len) {
  const auto n = pairs.size();
  std::erase_if(pairs, [&](const EncodedPair& p) {
    return static_cast<int64_t>(p.src.size()) + 1 > max_len ||
           static_cast<int64_t>(p.tgt.size()) + 1 > max_len;
  });
  return static_cast<int64_t>(n - pairs.size());
}

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const auto t = static_cast<int64_t>(std::llround(s));
  if (t >= 3600) return fmt::format("{}h{:02}m", t / 3600, t % 3600 / 60);
  if (t >= 60) return fmt::format("{}m{:02}s", t / 60, t % 60);
  return fmt::format("{}s", t);
}

void Log::line(const std::string& event, json::Value obj, const std::string& text) const {
  if (json_) {
    json::Value out = json::Value::object({{"event", json::Value::string(event)}});
    for (auto& [k, v] : obj.as_object()) out.set(k, v);
    fmt::print("{}\n", out.dump());
  } else {
    fmt::print("{}\n", text);
  }
  std::fflush(stdout);
}

void prepare_output(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path p(path);
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  std::error_code ec;
  if (!fs::is_directory(dir, ec) || ::access(dir.c_str(), W_OK | X_OK) != 0)
    throw std::runtime_error(
        fmt::format("cannot write {}: directory {} does not exist or is not writable", path, dir.string()));
  remove_stale_temporaries(path);
}

void TrainGuards::add_options(Args& args) {
  args.option("on-nan", "stop|skip",
              "a NaN/Inf loss or gradient is never applied: stop (save, exit 3) or skip it", "stop")
      .option("on-save-error", "continue|stop",
              "a failed save keeps the old file: continue (retry later) or stop", "continue");
}

TrainGuards::TrainGuards(const Args& args)
    : on_nan_(parse_on_non_finite(args.choice("on-nan", {"stop", "skip"}))),
      stop_on_save_error_(args.choice("on-save-error", {"continue", "stop"}) == "stop") {
  if (const char* hook = std::getenv("TAPEGRAD_TEST_INJECT_NAN"); hook && *hook) {
    const std::string h = hook;
    const size_t colon = h.find(':');
    inject_step_ = std::strtoll(h.substr(0, colon).c_str(), nullptr, 10);
    if (colon != std::string::npos) inject_name_ = h.substr(colon + 1);
  }
}

bool TrainGuards::step(Optimizer& opt, float loss, double clip, int64_t step) {
  if (inject_step_ == step) {  // test hook: poison one gradient (or the loss) of this step
    const NamedTensors& params = opt.params();
    if (inject_name_ == "loss") loss = std::numeric_limits<float>::quiet_NaN();
    for (const auto& [name, p] : params)
      if (name == inject_name_ || (inject_name_.empty() && &p == &params.back().second))
        if (Tensor g = p.grad(); g.defined())
          g.data()[g.numel() / 2] = std::numeric_limits<float>::quiet_NaN();
  }
  const StepOutcome r = guarded_step(opt, loss, clip, step);
  if (r.applied) return true;
  if (on_nan_ == OnNonFinite::skip) {
    ++skipped_;
    fmt::print(stderr, "warning: {} (--on-nan skip: batch dropped, {} skipped so far)\n", r.problem,
               skipped_);
  } else {
    nan_stop_ = true;
    fmt::print(stderr,
               "error: {}. Stopping (--on-nan stop); the weights are those after step {}. Try a lower --lr, "
               "--clip, or --on-nan skip with --resume\n",
               r.problem, step - 1);
  }
  return false;
}

bool TrainGuards::save(const std::function<void()>& save, const std::string& path, int64_t step, bool final) {
  if (save_stop_) return false;  // already stopping: do not try the other file
  try {
    save();
    return true;
  } catch (const std::exception& e) {
    ++failed_saves_;
    const char* policy = final                 ? "this was the final save"
                         : stop_on_save_error_ ? "stopping (--on-save-error stop)"
                                               : "training continues and the next save retries "
                                                 "(--on-save-error continue)";
    fmt::print(stderr, "error: step {}: saving {} failed: {}. {} keeps its previous content; {}\n", step,
               path, e.what(), path, policy);
    if (final) final_save_failed_ = true;
    if (stop_on_save_error_) save_stop_ = true;
    return false;
  }
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace translate
