// Transformer checkpoints as safetensors files: the weights under their PyTorch names (so a
// state_dict maps one to one), optionally the optimizer state, and in __metadata__ everything else
// needed to use or resume the model. All metadata values are strings; several hold JSON text:
//
//   "format"     "tapegrad.transformer.v1"
//   "config"     {"src_vocab":..,"tgt_vocab":..,"d_model":..,"heads":..,"enc_layers":..,"dec_layers":..,
//                 "d_ff":..,"dropout":..,"norm_first":false,"activation":"relu","max_len":..}
//   "tokenizer"  "word" | "char"
//   "src_vocab", "tgt_vocab"   JSON arrays of token strings, index = id; "<pad>","<bos>","<eos>","<unk>"
//   first "train"      (training checkpoints) {"step":..,"epoch":..,"batch_in_epoch":..,"optimizer":"adam",
//                 "schedule":{"kind":"noam","lr":..,"warmup":..,"total":..,"lr_min":..},
//                 "data_rng":{..}, "dropout_rng":{..}, "best_valid_loss":..}
//                 where an rng is {"s":["0x..",x4],"has_spare":false,"spare":"<hex float>"}
//   any other keys: free-form strings (the CLI keeps its training options there)
//
// Tensors: model parameters ("src_embed.weight", ...), and with an optimizer "optim.<entry>" for
// each entry of Optimizer::state() (e.g. "optim.exp_avg.src_embed.weight", "optim.step").
//
// Loading checks everything before changing the model: missing, unexpected or mis-shaped tensors
// are errors naming the file and the tensors; nothing is half-loaded.
#pragma once

#include <exception>
#include <functional>
#include <limits>
#include <optional>
#include <string>

#include "autograd/random.hpp"
#include "io/safetensors.hpp"
#include "nn/data.hpp"
#include "nn/optim.hpp"
#include "nn/transformer.hpp"

namespace tg::nn {

inline constexpr const char* kCheckpointFormat = "tapegrad.transformer.v1";
inline constexpr const char* kOptimPrefix = "optim.";

// Where training stands: what a resumed run needs besides the weights and the optimizer buffers.
struct TrainState {
  int64_t step = 0;            // optimizer steps taken
  int64_t epoch = 0;           // current epoch (0-based)
  int64_t batch_in_epoch = 0;  // batches of the current epoch already trained on
  std::string optimizer = "adam";
  LrSchedule schedule;
  Generator::State data_rng{};     // the shuffling generator at the START of the current epoch
  Generator::State dropout_rng{};  // the model's dropout stream
  double best_valid_loss = std::numeric_limits<double>::infinity();
};

struct CheckpointInfo {
  TransformerConfig config;
  TokenizerKind tokenizer = TokenizerKind::word;
  Vocab src_vocab, tgt_vocab;
  std::optional<TrainState> train;
  io::Metadata extra;  // other metadata keys, passed through unchanged
};

// Writes model (+ optimizer state when given) + info atomically (write_file_atomic). Refuses
// (std::runtime_error, nothing written) when a parameter holds a NaN or an Inf.
void save_checkpoint(const std::string& path, const Transformer& model, const CheckpointInfo& info,
                     const Optimizer* optimizer = nullptr);

struct Checkpoint {
  CheckpointInfo info;
  io::TensorFile file;
  bool has_optimizer_state() const;
};
// Reads and validates the file and its metadata (SafetensorsError naming the file and the key).
// The config must also agree with the tensors: the file must hold exactly as many weights as the
// config's model has parameters (so a corrupt or hostile config cannot make the caller allocate a
// model far larger than the file), and max_len is at most kMaxPositions.
Checkpoint read_checkpoint(const std::string& path);
// The same checks on a file already parsed (parse_safetensors); `path` names it in messages.
Checkpoint parse_checkpoint(io::TensorFile file, const std::string& path);
inline constexpr int64_t kMaxPositions = int64_t{1} << 20;

// Number of parameters of Transformer(cfg), computed from the config alone (no allocation);
// a double so that absurd configs do not overflow.
double transformer_parameter_count(const TransformerConfig& cfg);

// Copies the weights into `model` after checking names and shapes (optimizer entries ignored).
void load_weights(Module& model, const io::TensorFile& file, const std::string& path);
// Restores the optimizer from the "optim." entries; throws naming the file when they are absent
// or do not match this optimizer.
void load_optimizer_state(Optimizer& optimizer, const io::TensorFile& file, const std::string& path);

// Text forms used in the metadata (exposed for tests and tools).
std::string config_to_json(const TransformerConfig& cfg);
TransformerConfig config_from_json(const std::string& text);
std::string train_state_to_json(const TrainState& st);
TrainState train_state_from_json(const std::string& text);

// Reads metadata `key` of checkpoint `path` and hands its value to `fn`. A missing key and any
// exception from `fn` become one SafetensorsError naming the file and the key; `missing_hint` says,
// after a missing key, what the file might be instead. (The translate and lm checkpoint readers.)
void parse_metadata(const io::Metadata& md, const std::string& path, const char* key,
                    const char* missing_hint, const std::function<void(const std::string&)>& fn);

}  // namespace tg::nn
