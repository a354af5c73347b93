// Checkpoints of every family, written and read once: safetensors files with the weights under
// the model's parameter names, a training checkpoint's optimizer state as "optim.<entry>" tensors,
// and in __metadata__ (string values; several hold JSON):
//
//   "format"   the family's tag (nn/family/family.hpp FamilyId::format)
//   its family's keys: "config" and the tokenizers' (nn/family/<family>_family.hpp)
//   "train"    training checkpoints: where the run stands (TrainState below)
//   any other key: free-form strings, passed through (the programs keep their training options
//              there, "train.<option>")
//
// Reading checks everything before anyone allocates or changes a model: the format (another
// family's checkpoint names its program), the train state, that the file holds exactly as many
// weights as the config's model has parameters (so a corrupt or hostile config cannot make the
// caller allocate a model far larger than the file), then names and shapes (load_weights), which
// change nothing unless everything matches. Errors are io::SafetensorsError naming the file and the
// key or tensor at fault.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "autograd/random.hpp"
#include "io/safetensors.hpp"
#include "nn/family/family.hpp"
#include "nn/module.hpp"
#include "nn/optim.hpp"

namespace tg::nn {

inline constexpr const char* kOptimPrefix = "optim.";
// The most positions a config may ask for (a positional table of 2^20 rows).
inline constexpr int64_t kMaxPositions = int64_t{1} << 20;

// Where training stands: what a resumed run needs besides the weights and the optimizer buffers.
// Metadata "train": {"step":..,"epoch":..,"batch_in_epoch":..,"optimizer":"adam",
// "schedule":{"kind":"noam","lr":..,"warmup":..,"total":..,"lr_min":..}, "data_rng":{..},
// "dropout_rng":{..}, "best_valid_loss":..}, an rng as {"s":["0x..",x4],"has_spare":false,
// "spare":"<hex float>"} and the doubles as hex floats (exact).
struct TrainState {
  int64_t step = 0;            // optimizer steps taken
  int64_t epoch = 0;           // current epoch (0-based)
  int64_t batch_in_epoch = 0;  // batches of the current epoch already trained on
  std::string optimizer = "adam";
  LrSchedule schedule;
  Generator::State data_rng{};     // the data generator at the START of the current epoch
  Generator::State dropout_rng{};  // the model's dropout stream
  double best_valid_loss = std::numeric_limits<double>::infinity();
};
std::string train_state_to_json(const TrainState& st);
TrainState train_state_from_json(const std::string& text);

// What every checkpoint holds besides its family's config and tokenizers.
struct RunRecord {
  std::optional<TrainState> train;
  io::Metadata extra;  // other metadata keys, passed through unchanged
};

// ---- writing ------------------------------------------------------------------------------------

// Writes model (+ the optimizer's state when given) with `family_md` (the family's keys) and the
// run record, atomically (io::write_file_atomic: a failed save keeps the previous file). Refuses,
// writing nothing: an extra key that a family or this format reserves (std::invalid_argument), a
// parameter holding a NaN or an Inf, memory running out (std::runtime_error).
void write_checkpoint(const std::string& path, const FamilyId& family, io::Metadata family_md,
                      std::span<const std::string_view> family_keys, const RunRecord& run,
                      const Module& model, const Optimizer* optimizer);

// ---- reading ------------------------------------------------------------------------------------

using io::parse_metadata;

// The part every family reads first: "format" must be `family`'s (another known family's names its
// program; an unknown one is refused), "train" when present, and the keys neither the family nor
// this format reserves as extras.
RunRecord read_run_record(const io::Metadata& md, const std::string& path, const FamilyId& family,
                          std::span<const std::string_view> family_keys);

bool has_optimizer_state(const io::TensorFile& file);

// What a missing key says the file might be: "not a checkpoint of <program> train? see <doc>".
std::string missing_key_hint(const FamilyId& family);

// A checkpoint read: its family's Info (a RunRecord with a `config` and the tokenizers) and the
// file's tensors.
template <class Info>
struct FamilyCheckpoint {
  Info info;
  io::TensorFile file;
  bool has_optimizer_state() const { return nn::has_optimizer_state(file); }
};

// The first steps of every family's reader: read_run_record, then the config ("config": the
// fields of Info::config, validated). The family reads its tokenizers and checks the sizes next.
template <class Info>
FamilyCheckpoint<Info> open_checkpoint(io::TensorFile file, const std::string& path, const FamilyId& family,
                                       std::span<const std::string_view> family_keys) {
  FamilyCheckpoint<Info> ck{{}, std::move(file)};
  static_cast<RunRecord&>(ck.info) = read_run_record(ck.file.metadata, path, family, family_keys);
  parse_metadata(
      ck.file.metadata, path, "config", missing_key_hint(family).c_str(),
      [&](const std::string& s) { ck.info.config = config_from_json<decltype(ck.info.config)>(s); });
  return ck;
}

// The weights (the tensors not under kOptimPrefix) must number exactly `expected` (a family's
// parameter count of the file's config), and `positions` at most kMaxPositions; else
// SafetensorsError naming the file and the config field.
void check_weight_count(const io::TensorFile& file, double expected, const std::string& path);
void check_positions(int64_t positions, const char* field, const std::string& path);

// Copies the weights into `model` after checking names and shapes (optimizer entries ignored).
void load_weights(Module& model, const io::TensorFile& file, const std::string& path);
// Restores the optimizer from the "optim." entries; throws naming the file when they are absent
// or do not match this optimizer.
void load_optimizer_state(Optimizer& optimizer, const io::TensorFile& file, const std::string& path);

}  // namespace tg::nn
