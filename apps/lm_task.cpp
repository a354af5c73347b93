#include "lm_task.hpp"

#include <fmt/format.h>

#include <cmath>
#include <numbers>
#include <span>

#include "apps/cli_errors.hpp"

namespace lm {

namespace dist = tg::dist;
namespace nn = tg::nn;
namespace train = tg::train;

LmTask::LmTask(nn::GptCheckpointInfo info, Data data, const Options& o, dist::World& world)
    : info_(std::move(info)),
      data_(std::move(data)),
      o_(o),
      world_(world),
      model_(info_.config, static_cast<uint64_t>(o.seed)),
      // nanoGPT's optimizer: AdamW, betas (0.9, 0.99) as its character-level recipe, decay on the
      // parameters of 2 or more dimensions only.
      optimizer_(model_.named_parameters(), {.lr = o.schedule.lr,
                                             .beta1 = 0.9f,
                                             .beta2 = 0.99f,
                                             .eps = 1e-8f,
                                             .weight_decay = static_cast<float>(o.weight_decay),
                                             .decay_matrices_only = true}),
      batch_start_(tg::Generator(static_cast<uint64_t>(o.seed) ^ 0x5eed'da7aull).state()) {
  state_.optimizer = "adamw";
  state_.schedule = o.schedule;
  model_.train();
}

void LmTask::restore_run(const nn::GptCheckpoint& saved, const std::string& path) {
  const nn::TrainState& s = *saved.info.train;
  if (s.optimizer != "adamw")
    throw std::runtime_error(
        fmt::format("{}: the run used optimizer {}, lm train uses adamw", path, s.optimizer));
  nn::load_weights(model_, saved.file, path);
  nn::load_optimizer_state(optimizer_, saved.file, path);
  state_.step = s.step;
  state_.best_valid_loss = s.best_valid_loss;
  batch_start_ = s.data_rng;
  model_.rng().set_state(s.dropout_rng);
}

// Every rank draws the same global batch of windows and trains on its rows of it.
train::BatchLoss LmTask::forward_backward() {
  const int64_t T = info_.config.block_size;
  tg::Generator data_rng;
  data_rng.set_state(batch_start_);
  const nn::Windows w = nn::random_windows(data_.train, o_.batch_size, T, data_rng);
  next_batch_start_ = data_rng.state();
  const auto [lo, hi] = dist::shard(o_.batch_size, world_.rank(), world_.size());
  if (hi == lo) return {};
  const auto first = static_cast<size_t>(lo * T), count = static_cast<size_t>((hi - lo) * T);
  const tg::Tensor loss =
      model_.loss(std::span(w.x).subspan(first, count), std::span(w.y).subspan(first, count), hi - lo, T);
  loss.backward();
  const int64_t tokens = (hi - lo) * T;
  return {static_cast<double>(loss.item()) * static_cast<double>(tokens), tokens};
}

std::optional<train::Validation> LmTask::validate() {
  const int64_t T = info_.config.block_size;
  const int64_t chunks = nn::eval_chunk_count(static_cast<int64_t>(data_.valid.size()), T);
  if (chunks == 0) return std::nullopt;
  const auto [lo, hi] = dist::shard(chunks, world_.rank(), world_.size());
  const nn::LossSum s = nn::lm_loss_sum(model_, *info_.tokenizer, data_.valid, T, o_.batch_size, lo, hi);
  double sums[3] = {s.nats, static_cast<double>(s.count), static_cast<double>(s.bytes)};
  if (world_.distributed()) world_.allreduce_sum(sums);
  const double bits = sums[0] / std::numbers::ln2;
  train::Validation v{sums[0] / sums[1], {{"bits_per_byte", bits / sums[2], ""}}};
  if (info_.tokenizer->kind() == "char") v.figures.push_back({"bits_per_char", bits / sums[1], ""});
  return v;
}

void LmTask::save(const std::string& path, bool with_optimizer, const train::Progress& at) {
  state_.step = at.step;
  state_.best_valid_loss = at.best_valid_loss;
  state_.data_rng = batch_start_;
  state_.dropout_rng = model_.rng().state();
  info_.train = state_;
  nn::save_gpt_checkpoint(path, model_, info_, with_optimizer ? &optimizer_ : nullptr);
}

}  // namespace lm
