// lm's family: the decoder-only GPT (nn/gpt.hpp) and its checkpoints (the format every family
// shares: nn/family/checkpoint.hpp; the PyTorch recipe both ways: nn/gpt.md). Its metadata keys:
//
//   "format"     "tapegrad.gpt.v1"
//   "config"     {"vocab_size":..,"block_size":..,"n_layer":..,"n_head":..,"n_embd":..,"dropout":..,
//                 "bias":true}   (nanoGPT's GPTConfig fields)
//   "tokenizer"  "byte" | "char"
//   "vocab"      char only: JSON array of the characters, index = id (nn/tokenizers/byte_char.hpp)
//
// Tensors: the parameters under nanoGPT's names, and a training checkpoint's optimizer state as
// "optim.<entry>".
#pragma once

#include <memory>
#include <string>

#include "io/safetensors.hpp"
#include "nn/family/checkpoint.hpp"
#include "nn/family/family.hpp"
#include "nn/gpt.hpp"
#include "nn/optim.hpp"
#include "nn/tokenizers/tokenizer.hpp"

namespace tg::nn {

inline constexpr FamilyId kGptFamily{"tapegrad.gpt.v1", "lm", "a language model", "nn/gpt.md"};
inline constexpr const char* kGptCheckpointFormat = "tapegrad.gpt.v1";

struct GptCheckpointInfo : RunRecord {
  GptConfig config;
  std::shared_ptr<const Tokenizer> tokenizer;  // its vocabulary is config.vocab_size
};

using GptCheckpoint = FamilyCheckpoint<GptCheckpointInfo>;

// Writes model (+ optimizer state when given) + info atomically. Refuses (nothing written) when a
// parameter holds a NaN or an Inf, when the tokenizer's vocabulary and the config's vocab_size
// differ, or when info.extra holds a reserved key.
void save_gpt_checkpoint(const std::string& path, const GPT& model, const GptCheckpointInfo& info,
                         const Optimizer* optimizer = nullptr);

// Reads and validates the file and its metadata (io::SafetensorsError naming the file and the key).
GptCheckpoint read_gpt_checkpoint(const std::string& path);
// The same checks on a file already parsed; `path` names it in messages.
GptCheckpoint parse_gpt_checkpoint(io::TensorFile file, const std::string& path);

// A model of the checkpoint's config with its weights (load_weights: names and shapes checked), in
// eval mode.
std::unique_ptr<GPT> load_gpt(const GptCheckpoint& ck, const std::string& path);

// A new tokenizer of `kind` ("byte", or "char" from the characters of `texts`).
std::shared_ptr<const Tokenizer> make_lm_tokenizer(const std::string& kind,
                                                   const std::vector<std::string_view>& texts);

// The "config" text, and back (validated; unknown keys are an error).
std::string gpt_config_to_json(const GptConfig& cfg);
GptConfig gpt_config_from_json(const std::string& text);

}  // namespace tg::nn
