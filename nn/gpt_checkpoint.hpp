// GPT checkpoints: safetensors files with the weights under nanoGPT's names (nn/gpt.hpp), with a
// training checkpoint's optimizer state as "optim.<entry>", and in __metadata__ (string values,
// several holding JSON; the format and the PyTorch recipe: nn/gpt.md):
//
//   "format"     "tapegrad.gpt.v1"
//   "config"     {"vocab_size":..,"block_size":..,"n_layer":..,"n_head":..,"n_embd":..,"dropout":..,
//                 "bias":true}   (nanoGPT's GPTConfig fields)
//   "tokenizer"  "byte" | "char"
//   "vocab"      char only: JSON array of the characters, index = id
//   "train"      training checkpoints: the run's position (nn::TrainState, as nn/checkpoint.hpp
//                writes it for translate)
//   any other key: free-form strings (lm train keeps its options there, "train.<option>")
//
// Reading checks the metadata and that the file holds exactly as many weights as the config's
// model has parameters, before anyone allocates that model; names and shapes are then checked by
// nn::load_weights, which changes nothing unless everything matches.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "io/safetensors.hpp"
#include "nn/checkpoint.hpp"
#include "nn/gpt.hpp"
#include "nn/gpt_text.hpp"
#include "nn/optim.hpp"

namespace tg::nn {

inline constexpr const char* kGptCheckpointFormat = "tapegrad.gpt.v1";

struct GptCheckpointInfo {
  GptConfig config;
  LmTokenizer tokenizer = LmTokenizer::bytes();
  std::optional<TrainState> train;
  io::Metadata extra;  // other metadata keys, passed through unchanged
};

// Writes model (+ optimizer state when given) + info atomically. Refuses (std::runtime_error,
// nothing written) when a parameter holds a NaN or an Inf, or when the tokenizer's vocabulary
// and the config's vocab_size differ.
void save_gpt_checkpoint(const std::string& path, const GPT& model, const GptCheckpointInfo& info,
                         const Optimizer* optimizer = nullptr);

struct GptCheckpoint {
  GptCheckpointInfo info;
  io::TensorFile file;
  bool has_optimizer_state() const;
};
// Reads and validates the file and its metadata (io::SafetensorsError naming the file and the key).
GptCheckpoint read_gpt_checkpoint(const std::string& path);
// The same checks on a file already parsed; `path` names it in messages.
GptCheckpoint parse_gpt_checkpoint(io::TensorFile file, const std::string& path);

// A model of the checkpoint's config with its weights (nn::load_weights: names and shapes checked,
// io::SafetensorsError naming `path` otherwise), in eval mode.
std::unique_ptr<GPT> load_gpt(const GptCheckpoint& ck, const std::string& path);

// The "config" text, and back (validated; unknown keys are an error).
std::string gpt_config_to_json(const GptConfig& cfg);
GptConfig gpt_config_from_json(const std::string& text);

}  // namespace tg::nn
