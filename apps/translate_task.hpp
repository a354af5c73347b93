// translate train's model, data and checkpoints as a train::Task (train/loop.hpp): batches of
// similar-length pairs drawn an epoch at a time, the label-smoothed cross-entropy, validation on
// --valid sharded over the MPI ranks, and checkpoints that hold the run's position for --resume.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "train/distributed.hpp"
#include "train/loop.hpp"
#include "translate_common.hpp"

namespace translate {

class TranslationTask : public tg::train::Task {
 public:
  struct Data {
    std::vector<EncodedPair> train, valid;
  };
  struct Options {
    int64_t batch_size = 64, seed = 1;
    double label_smoothing = 0.1;
    bool shuffle = true;
    std::string optimizer = "adam";      // adam | adamw | sgd
    std::optional<double> weight_decay;  // default: 0.01 for adamw, else 0
    tg::nn::LrSchedule schedule;         // saved in checkpoints
  };

  // A new model of info.config, initialised from `seed`; `info` (with its metadata) is what every
  // checkpoint of the run holds.
  TranslationTask(CheckpointInfo info, Data data, const Options& o, tg::dist::World& world);

  // Weights only (--init), or the whole run: weights, optimizer, position and generators (--resume).
  void load_weights_from(const Checkpoint& ck, const std::string& path);
  void restore_run(const Checkpoint& saved, const std::string& path);
  // Where the run stands (for the loop; a new run is at step 0).
  tg::train::Progress progress() const { return {state_.step, state_.best_valid_loss}; }

  int64_t batches_per_epoch() const;
  const Transformer& model() const { return model_; }
  const CheckpointInfo& info() const { return info_; }
  const Data& data() const { return data_; }

  Optimizer& optimizer() override { return *optimizer_; }
  Generator& dropout_rng() override { return model_.rng(); }
  tg::train::BatchLoss forward_backward() override;
  void next_batch() override { ++state_.batch_in_epoch; }
  int64_t epoch() const override { return state_.epoch + 1; }
  std::optional<tg::train::Validation> validate() override;
  void save(const std::string& path, bool with_optimizer, const tg::train::Progress& at) override;

 private:
  void draw_epoch();

  CheckpointInfo info_;
  Data data_;
  Options o_;
  tg::dist::World& world_;
  Transformer model_;
  std::unique_ptr<Optimizer> optimizer_;
  TrainState state_;
  Generator data_rng_;
  std::vector<std::vector<int64_t>> batches_;  // the current epoch's, as indices into data_.train
};

}  // namespace translate
