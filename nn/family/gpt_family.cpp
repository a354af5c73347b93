#include "nn/family/gpt_family.hpp"

#include <fmt/format.h>

#include <array>

#include "nn/tokenizers/byte_char.hpp"
#include "nn/tokenizers/gpt2_bpe.hpp"
#include "nn/tokenizers/spm.hpp"

namespace tg::nn {

using io::SafetensorsError;

namespace {

// The config, the tokenizer's kind, and what each tokenizer saves (char: "vocab"; spm: "spm";
// gpt2: Gpt2BpeTokenizer::save).
constexpr std::array<std::string_view, 8> kKeys = {
    "config", "tokenizer", "vocab", "spm", "gpt2_vocab", "gpt2_merges", "gpt2_added_tokens", "gpt2_options"};

}  // namespace

std::string gpt_config_to_json(const GptConfig& c) {
  return config_to_json<GptConfig>(c);
}

GptConfig gpt_config_from_json(const std::string& text) {
  return config_from_json<GptConfig>(text);
}

std::shared_ptr<const Tokenizer> make_lm_tokenizer(const std::string& kind,
                                                   const std::vector<std::string_view>& texts,
                                                   const SpmOptions& spm) {
  if (kind == "byte") return std::make_shared<ByteTokenizer>();
  if (kind == "char") return std::make_shared<CharTokenizer>(CharTokenizer::from_texts(texts));
  if (kind == "spm") {
    SpmOptions o = spm;
    o.layout = SpmLayout::lm;
    return std::make_shared<SpmTokenizer>(SpmTokenizer::train(texts, o));
  }
  throw std::invalid_argument(fmt::format("tokenizer: expected 'byte', 'char' or 'spm', got '{}'", kind));
}

void save_gpt_checkpoint(const std::string& path, const GPT& model, const GptCheckpointInfo& info,
                         const Optimizer* optimizer) {
  if (!info.tokenizer || model.config().vocab_size != info.tokenizer->vocab_size())
    throw std::invalid_argument(fmt::format("save {}: the model has {} tokens, the tokenizer {}", path,
                                            model.config().vocab_size,
                                            info.tokenizer ? info.tokenizer->vocab_size() : 0));
  io::Metadata md;
  md["config"] = gpt_config_to_json(model.config());
  md["tokenizer"] = info.tokenizer->kind();
  info.tokenizer->save(md, "");
  write_checkpoint(path, kGptFamily, std::move(md), kKeys, info, model, optimizer);
}

GptCheckpoint read_gpt_checkpoint(const std::string& path) {
  return parse_gpt_checkpoint(io::read_safetensors(path), path);
}

GptCheckpoint parse_gpt_checkpoint(io::TensorFile file, const std::string& path) {
  GptCheckpoint ck = open_checkpoint<GptCheckpointInfo>(std::move(file), path, kGptFamily, kKeys);
  const io::Metadata& md = ck.file.metadata;
  GptCheckpointInfo& info = ck.info;
  parse_metadata(md, path, "tokenizer", missing_key_hint(kGptFamily).c_str(), [&](const std::string& s) {
    if (s == "byte")
      info.tokenizer = std::make_shared<ByteTokenizer>();
    else if (s == "char")
      info.tokenizer = std::make_shared<CharTokenizer>(CharTokenizer::load(md, "", path));
    else if (s == "spm")
      info.tokenizer = std::make_shared<SpmTokenizer>(SpmTokenizer::load(md, "", path));
    else if (s == "gpt2")
      info.tokenizer = std::make_shared<Gpt2BpeTokenizer>(Gpt2BpeTokenizer::load(md, "", path));
    else
      throw std::invalid_argument(
          fmt::format("tokenizer: expected 'byte', 'char', 'spm' or 'gpt2', got '{}'", s));
  });
  const GptConfig& c = info.config;
  if (c.vocab_size != info.tokenizer->vocab_size())
    throw SafetensorsError(
        fmt::format("checkpoint {}: config vocab_size {} but the {} tokenizer has {} tokens", path,
                    c.vocab_size, info.tokenizer->kind(), info.tokenizer->vocab_size()));
  check_positions(c.block_size, "block_size", path);
  check_weight_count(ck.file, gpt_parameter_count(c), path);
  return ck;
}

std::unique_ptr<GPT> load_gpt(const GptCheckpoint& ck, const std::string& path) {
  auto model = std::make_unique<GPT>(ck.info.config, 0, GptInit::none);  // the file's weights follow
  load_weights(*model, ck.file, path);
  model->eval();
  return model;
}

}  // namespace tg::nn
