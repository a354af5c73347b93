// lm train's model, data and checkpoints as a train::Task (train/loop.hpp): random windows of the
// training tokens, the mean next-token cross-entropy, validation on consecutive chunks of the
// validation tokens sharded over the MPI ranks (loss, bits per byte), and checkpoints that hold the
// run's position for --resume.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "nn/family/gpt_family.hpp"
#include "nn/gpt_text.hpp"
#include "train/distributed.hpp"
#include "train/loop.hpp"

namespace lm {

class LmTask : public tg::train::Task {
 public:
  struct Data {
    std::vector<int32_t> train, valid;  // token ids; valid may be empty (no validation)
  };
  struct Options {
    int64_t batch_size = 32, seed = 1;
    double weight_decay = 0.1;
    tg::nn::LrSchedule schedule;  // saved in checkpoints
  };

  // A new model of info.config, initialised from `seed`; `info` (with its metadata) is what every
  // checkpoint of the run holds.
  LmTask(tg::nn::GptCheckpointInfo info, Data data, const Options& o, tg::dist::World& world);

  // The whole run saved in a training checkpoint: weights, optimizer, step and generators.
  void restore_run(const tg::nn::GptCheckpoint& saved, const std::string& path);
  tg::train::Progress progress() const { return {state_.step, state_.best_valid_loss}; }

  const tg::nn::GPT& model() const { return model_; }
  const tg::nn::GptCheckpointInfo& info() const { return info_; }
  const Data& data() const { return data_; }

  tg::nn::Optimizer& optimizer() override { return optimizer_; }
  tg::Generator& dropout_rng() override { return model_.rng(); }
  tg::train::BatchLoss forward_backward() override;
  void next_batch() override { batch_start_ = next_batch_start_; }
  std::optional<tg::train::Validation> validate() override;
  void save(const std::string& path, bool with_optimizer, const tg::train::Progress& at) override;

 private:
  tg::nn::GptCheckpointInfo info_;
  Data data_;
  Options o_;
  tg::dist::World& world_;
  tg::nn::GPT model_;
  tg::nn::AdamW optimizer_;
  tg::nn::TrainState state_;
  // The windows are drawn from a generator whose state is the position in the data: the state the
  // current batch is drawn from, and the one after it. A batch is consumed by next_batch(); one
  // that was not (a step refused on a NaN) is drawn again by a resumed run.
  tg::Generator::State batch_start_{}, next_batch_start_{};
};

}  // namespace lm
