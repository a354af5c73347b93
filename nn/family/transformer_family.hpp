// translate's family: the encoder-decoder Transformer (nn/transformer.hpp) and its checkpoints
// (the format every family shares: nn/family/checkpoint.hpp; the keys and the PyTorch recipe:
// nn/checkpoint.md). Its metadata keys:
//
//   "format"     "tapegrad.transformer.v1"
//   "config"     {"src_vocab":..,"tgt_vocab":..,"d_model":..,"heads":..,"enc_layers":..,"dec_layers":..,
//                 "d_ff":..,"dropout":..,"norm_first":false,"activation":"relu","max_len":..}
//   "tokenizer"  "word" | "char": the source and the target side each have their vocabulary,
//   "src_vocab", "tgt_vocab"   JSON arrays of token strings, index = id; "<pad>","<bos>","<eos>","<unk>"
//                first (nn/tokenizers/vocab_tokenizer.hpp)
//
// Tensors: the parameters under PyTorch's nn.Transformer names, and with an optimizer
// "optim.<entry>" for each entry of Optimizer::state() (e.g. "optim.exp_avg.src_embed.weight").
#pragma once

#include <memory>
#include <string>

#include "io/safetensors.hpp"
#include "nn/family/checkpoint.hpp"
#include "nn/family/family.hpp"
#include "nn/optim.hpp"
#include "nn/tokenizers/tokenizer.hpp"
#include "nn/transformer.hpp"

namespace tg::nn {

inline constexpr FamilyId kTransformerFamily{"tapegrad.transformer.v1", "translate", "a translation model",
                                             "nn/checkpoint.md"};
inline constexpr const char* kCheckpointFormat = "tapegrad.transformer.v1";

struct CheckpointInfo : RunRecord {
  TransformerConfig config;
  // The source and target tokenizers; their vocabularies give config.src_vocab and tgt_vocab.
  std::shared_ptr<const Tokenizer> src, tgt;
};

using Checkpoint = FamilyCheckpoint<CheckpointInfo>;

// Writes model (+ optimizer state when given) + info atomically. Refuses (nothing written) when a
// parameter holds a NaN or an Inf, when the tokenizers' vocabularies and the config's differ, or
// when info.extra holds a reserved key.
void save_checkpoint(const std::string& path, const Transformer& model, const CheckpointInfo& info,
                     const Optimizer* optimizer = nullptr);

// Reads and validates the file and its metadata (io::SafetensorsError naming the file and the key):
// the common checks (nn/family/checkpoint.hpp), then the config, the tokenizers and their sizes,
// and max_len at most kMaxPositions.
Checkpoint read_checkpoint(const std::string& path);
// The same checks on a file already parsed (parse_safetensors); `path` names it in messages.
Checkpoint parse_checkpoint(io::TensorFile file, const std::string& path);

// A model of the checkpoint's config with its weights (load_weights: names and shapes checked), in
// eval mode.
std::unique_ptr<Transformer> load_transformer(const Checkpoint& ck, const std::string& path);

// Number of parameters of Transformer(cfg), computed from the config alone (no allocation);
// a double so that absurd configs do not overflow.
double transformer_parameter_count(const TransformerConfig& cfg);

// Text forms used in the metadata (exposed for tests and tools).
std::string config_to_json(const TransformerConfig& cfg);
TransformerConfig config_from_json(const std::string& text);

}  // namespace tg::nn
