#include "translate_task.hpp"

#include <fmt/format.h>

#include <cmath>
#include <span>

#include "apps/cli_errors.hpp"
#include "nn/loss.hpp"

namespace translate {

namespace dist = tg::dist;
namespace train = tg::train;

namespace {

std::unique_ptr<Optimizer> make_optimizer(const TranslationTask::Options& o, const NamedTensors& params) {
  const float lr = o.schedule.lr;
  const auto wd = static_cast<float>(o.weight_decay.value_or(o.optimizer == "adamw" ? 0.01 : 0.0));
  if (o.optimizer == "sgd")
    return std::make_unique<SGD>(params, SGDOptions{.lr = lr, .momentum = 0.9f, .weight_decay = wd});
  if (o.optimizer == "adamw")
    return std::make_unique<AdamW>(params, AdamOptions{.lr = lr, .weight_decay = wd});
  return std::make_unique<Adam>(params, AdamOptions{.lr = lr, .weight_decay = wd});
}

// Validation sharded over the ranks: each evaluates its slice, the sums are combined.
Metrics evaluate_sharded(dist::World& world, Transformer& model, const std::vector<EncodedPair>& valid,
                         int64_t batch_size) {
  if (!world.distributed()) return evaluate(model, valid, batch_size);
  const auto [lo, hi] = dist::shard(static_cast<int64_t>(valid.size()), world.rank(), world.size());
  const std::vector<EncodedPair> mine(valid.begin() + lo, valid.begin() + hi);
  Metrics m = evaluate(model, mine, batch_size);
  const auto tokens = static_cast<double>(m.tokens), sentences = static_cast<double>(m.sentences);
  double sums[5] = {m.loss * tokens, m.token_accuracy * tokens, m.exact_match * sentences, tokens, sentences};
  world.allreduce_sum(sums);
  m.tokens = std::llround(sums[3]);
  m.sentences = std::llround(sums[4]);
  m.loss = sums[3] > 0 ? sums[0] / sums[3] : 0;
  m.token_accuracy = sums[3] > 0 ? sums[1] / sums[3] : 0;
  m.exact_match = sums[4] > 0 ? sums[2] / sums[4] : 0;
  return m;
}

}  // namespace

TranslationTask::TranslationTask(CheckpointInfo info, Data data, const Options& o, dist::World& world)
    : info_(std::move(info)),
      data_(std::move(data)),
      o_(o),
      world_(world),
      model_(info_.config, static_cast<uint64_t>(o.seed)),
      optimizer_(make_optimizer(o, model_.named_parameters())),
      data_rng_(static_cast<uint64_t>(o.seed) ^ 0x5eed'da7aull) {
  state_.optimizer = o.optimizer;
  state_.schedule = o.schedule;
  model_.train();
  draw_epoch();
}

void TranslationTask::load_weights_from(const Checkpoint& ck, const std::string& path) {
  load_weights(model_, ck.file, path);
}

void TranslationTask::restore_run(const Checkpoint& saved, const std::string& path) {
  const TrainState& s = *saved.info.train;
  if (s.optimizer != o_.optimizer)
    throw tg::cli::UsageError(
        fmt::format("--resume: the run used --optimizer {}, not {}", s.optimizer, o_.optimizer));
  load_weights(model_, saved.file, path);
  load_optimizer_state(*optimizer_, saved.file, path);
  state_.step = s.step;
  state_.epoch = s.epoch;
  state_.batch_in_epoch = s.batch_in_epoch;
  state_.best_valid_loss = s.best_valid_loss;
  data_rng_.set_state(s.data_rng);
  model_.rng().set_state(s.dropout_rng);
  draw_epoch();  // the saved epoch's batches again: the generator is as it was when they were drawn
}

int64_t TranslationTask::batches_per_epoch() const {
  return (static_cast<int64_t>(data_.train.size()) + o_.batch_size - 1) / o_.batch_size;
}

// The batches of the current epoch; the generator is saved as it was before drawing them.
void TranslationTask::draw_epoch() {
  state_.data_rng = data_rng_.state();
  batches_ = make_batches(data_.train, o_.batch_size, o_.shuffle ? &data_rng_ : nullptr, false);
}

train::BatchLoss TranslationTask::forward_backward() {
  if (state_.batch_in_epoch >= static_cast<int64_t>(batches_.size())) {
    ++state_.epoch;
    state_.batch_in_epoch = 0;
    draw_epoch();
  }
  // This rank's rows of the global batch (all of it on one rank; none when the batch is smaller
  // than the number of ranks).
  const std::span<const int64_t> global = batches_[static_cast<size_t>(state_.batch_in_epoch)];
  const auto [lo, hi] = dist::shard(static_cast<int64_t>(global.size()), world_.rank(), world_.size());
  if (hi == lo) return {};
  const Batch b =
      make_batch(data_.train, global.subspan(static_cast<size_t>(lo), static_cast<size_t>(hi - lo)));
  Tensor loss =
      label_smoothed_cross_entropy(model_.forward(b), b.labels, static_cast<float>(o_.label_smoothing));
  loss.backward();
  const int64_t tokens = b.num_label_tokens();
  return {static_cast<double>(loss.item()) * static_cast<double>(tokens), tokens};
}

std::optional<train::Validation> TranslationTask::validate() {
  if (data_.valid.empty()) return std::nullopt;
  const Metrics m = evaluate_sharded(world_, model_, data_.valid, o_.batch_size);
  return train::Validation{
      m.loss, {{"token_accuracy", 100 * m.token_accuracy, "%"}, {"exact_match", 100 * m.exact_match, "%"}}};
}

void TranslationTask::save(const std::string& path, bool with_optimizer, const train::Progress& at) {
  state_.step = at.step;
  state_.best_valid_loss = at.best_valid_loss;
  state_.dropout_rng = model_.rng().state();
  info_.train = state_;
  save_checkpoint(path, model_, info_, with_optimizer ? optimizer_.get() : nullptr);
}

}  // namespace translate
