// A third family: GPT-2 in the Hugging Face format, a folder that transformers' GPT2LMHeadModel
// and AutoTokenizer read with from_pretrained(DIR) and write with save_pretrained(DIR). It is lm's
// GPT (nn/gpt.hpp) plus a name map plus a tokenizer, and nothing else:
//
//   config.json         transformers' GPT2Config -> GptConfig (below)
//   model.safetensors   GPT2LMHeadModel's state dict -> the GPT's parameters: the same names (a
//                       GPT2Model's, without "transformer.", also read), but attn.c_attn,
//                       attn.c_proj, mlp.c_fc and mlp.c_proj are Conv1D layers stored [in, out],
//                       transposed against the GPT's Linear [out, in]; lm_head.weight absent or
//                       tied to wte (or the untied head); the attn.bias / attn.masked_bias buffers
//                       present or absent, ignored. F32, F16 or BF16 (io/safetensors reads them as
//                       fp32).
//   vocab.json + merges.txt, or tokenizer.json   GPT-2's byte-level BPE (nn/tokenizers/gpt2_bpe.hpp),
//                       or the characters of a char model that write_hf_gpt2 exported
//
// Read into a GptCheckpoint (nn/family/gpt_family.hpp), so every lm command takes a folder where it
// takes a checkpoint (read_lm_model), and a fine-tuned model is saved as an ordinary lm checkpoint
// (tapegrad.gpt.v1, holding the gpt2 tokenizer and the GPT-2 config fields); write_hf_gpt2 turns
// one back into a folder. Problems are io::DataError (config.json) or io::SafetensorsError
// (model.safetensors) naming the file and the key or tensor.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "autograd/tensor.hpp"
#include "io/safetensors.hpp"
#include "nn/family/family.hpp"
#include "nn/family/gpt_family.hpp"
#include "nn/gpt.hpp"
#include "nn/tokenizers/byte_char.hpp"
#include "nn/tokenizers/gpt2_bpe.hpp"
#include "nn/tokenizers/tokenizer.hpp"

namespace tg::nn {

// Not a checkpoint format (a folder has no "format" key): the name of the family in messages.
inline constexpr FamilyId kHfGpt2Family{"hf.gpt2", "lm", "a Hugging Face GPT-2 folder",
                                        "nn/gpt.md#gpt-2-in-the-hugging-face-format"};

// ---- config.json --------------------------------------------------------------------------------

// GPT2Config's JSON -> GptConfig: vocab_size, n_positions (-> block_size), n_embd, n_layer,
// n_head, layer_norm_epsilon, activation_function ("gelu_new", "gelu_pytorch_tanh" and "gelu_fast"
// are the tanh GELU, "gelu" the exact one), tie_word_embeddings; a key that is absent takes
// GPT2Config's default, as transformers does (a GPT-2 124M). dropout is 0: the folder's *_pdrop are
// training options, not the model (lm train --dropout sets it). Refused, naming `path` and the key:
// a model_type other than "gpt2", another activation, an n_inner other than 4 n_embd, cross
// attention, unscaled attention or attention scaled by the layer index, a value of the wrong type,
// and anything GptConfig::validate refuses.
GptConfig hf_gpt2_config_from_json(const std::string& text, const std::string& path);
// The config.json of a model: GPT2Config's keys, model_type "gpt2", architectures
// ["GPT2LMHeadModel"], its dropout as the three *_pdrop, and bos/eos_token_id `eos` (null when < 0).
std::string hf_gpt2_config_to_json(const GptConfig& c, int32_t eos);

// ---- model.safetensors --------------------------------------------------------------------------

// The tensors of `file` under the GPT's names, in its layout (Conv1D weights transposed): exactly
// the parameters of GPT(c), so load_weights takes them. SafetensorsError naming `path` and the
// tensor: a missing or unknown tensor (at most five named), a shape against the config, an untied
// config without lm_head.weight, a name given twice (with and without "transformer.").
NamedTensors hf_gpt2_weights_to_gpt(io::TensorFile file, const GptConfig& c, const std::string& path);
// The reverse: the model's parameters under GPT2LMHeadModel's names in its layout, without
// lm_head.weight when tied (as save_pretrained writes it).
NamedTensors gpt_weights_to_hf_gpt2(const GPT& model);

// ---- folders ------------------------------------------------------------------------------------

// Whether `path` names a directory (lm's --model then reads it as a Hugging Face folder).
bool is_hf_folder(const std::string& path);

// The folder's config.json and model.safetensors as a GptCheckpoint whose tensors are the GPT's
// (load_gpt takes it), without a tokenizer (info.tokenizer is null; read_hf_gpt2 adds it). A
// missing file: io::DataError naming it (and, for a folder with pytorch_model.bin only, how to
// convert it).
GptCheckpoint read_hf_gpt2_model(const std::string& dir);

// Writes config.json and model.safetensors of `model` into `dir` (made if missing; each file
// replaced atomically), eos_token_id `eos` (-1: none). The tokenizer's files are the tokenizer's.
void write_hf_gpt2_model(const std::string& dir, const GPT& model, int32_t eos);

// The whole folder: read_hf_gpt2_model and the tokenizer (vocab.json + merges.txt, else
// tokenizer.json: Gpt2BpeTokenizer::from_folder, or the CharTokenizer where tokenizer.json is the
// form write_hf_gpt2 gives a char model's), whose vocabulary must be config.json's vocab_size
// (io::DataError naming both).
GptCheckpoint read_hf_gpt2(const std::string& dir);
// tokenizer.json's text in the form write_hf_gpt2 gives a char model's tokenizer (a BPE with no
// merges, normalizer, pre-tokenizer, post-processor or added tokens, the Fuse decoder): its
// CharTokenizer; std::nullopt for any other tokenizer; io::DataError naming `name` for text that is
// not JSON or a vocabulary that is not one character per id in code-point order.
std::optional<CharTokenizer> char_tokenizer_from_json(std::string_view text, const std::string& name);
// A folder that GPT2LMHeadModel.from_pretrained(dir) and AutoTokenizer.from_pretrained(dir) load:
// write_hf_gpt2_model, with eos_token_id the tokenizer's "<|endoftext|>", and the tokenizer's files
// (Gpt2BpeTokenizer::write_files). A byte model's tokenizer is written as GPT-2's byte-level BPE with
// the 256 byte tokens and no merges (byte_tokenizer_as_gpt2): the same ids, and transformers loads
// it as a GPT2TokenizerFast. A char model's as a tokenizer.json alone: a BPE of its characters with
// no merges, no pre-tokenizer and the Fuse decoder (a PreTrainedTokenizerFast; read_hf_gpt2 reads
// it back as the CharTokenizer). std::invalid_argument, nothing written, for an spm model (no
// tokenizer transformers reads from a GPT-2 folder gives its ids) or a vocabulary that is not the
// model's.
void write_hf_gpt2(const std::string& dir, const GPT& model, const Tokenizer& tokenizer);
// ByteTokenizer's ids as a Gpt2BpeTokenizer: token b is byte b's character of GPT-2's byte-to-unicode
// table; no merges, no <|endoftext|>. Every text encodes to its bytes, as ByteTokenizer encodes it.
Gpt2BpeTokenizer byte_tokenizer_as_gpt2();

// What lm's --model and --init-from read: a directory is a Hugging Face GPT-2 folder (read_hf_gpt2),
// anything else an lm checkpoint (read_gpt_checkpoint).
GptCheckpoint read_lm_model(const std::string& path);

}  // namespace tg::nn
