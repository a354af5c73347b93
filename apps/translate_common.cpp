#include "translate_common.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "autograd/tape.hpp"
#include "nn/loss.hpp"
#include "ops/kernels.hpp"

namespace translate {

LoadedModel load_model(const std::string& path) {
  Checkpoint ck = read_checkpoint(path);
  LoadedModel m;
  m.model = load_transformer(ck, path);
  m.info = std::move(ck.info);
  return m;
}

ParallelText read_data(const std::string& path, bool skip_bad_lines) {
  ParallelText t;
  try {
    t = read_tsv(path, skip_bad_lines);
  } catch (const BadLineError& e) {  // a single bad line: tell the user how to go on without it
    throw DataError(std::string(e.what()) + " (use --skip-bad-lines to skip such lines)");
  }
  if (t.skipped) {
    fmt::print(stderr, "warning: {}: skipped {} bad line{}:\n", path, t.skipped, t.skipped == 1 ? "" : "s");
    for (const auto& p : t.problems) fmt::print(stderr, "  {}\n", p);
    if (t.skipped > static_cast<int64_t>(t.problems.size()))
      fmt::print(stderr, "  ... and {} more\n", t.skipped - static_cast<int64_t>(t.problems.size()));
  }
  return t;
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

}  // namespace translate
