#include "nn/family/gpt_family.hpp"

#include <fmt/format.h>

#include <array>

#include "nn/tokenizers/byte_char.hpp"

namespace tg::nn {

using io::SafetensorsError;

namespace {

constexpr std::array<std::string_view, 3> kKeys = {"config", "tokenizer", "vocab"};

}  // namespace

std::string gpt_config_to_json(const GptConfig& c) {
  return config_to_json<GptConfig>(c);
}

GptConfig gpt_config_from_json(const std::string& text) {
  return config_from_json<GptConfig>(text);
}

std::shared_ptr<const Tokenizer> make_lm_tokenizer(const std::string& kind,
                                                   const std::vector<std::string_view>& texts) {
  if (kind == "byte") return std::make_shared<ByteTokenizer>();
  if (kind == "char") return std::make_shared<CharTokenizer>(CharTokenizer::from_texts(texts));
  throw std::invalid_argument(fmt::format("tokenizer: expected 'byte' or 'char', got '{}'", kind));
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
    else
      throw std::invalid_argument(fmt::format("tokenizer: expected 'byte' or 'char', got '{}'", s));
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
  auto model = std::make_unique<GPT>(ck.info.config);
  load_weights(*model, ck.file, path);
  model->eval();
  return model;
}

}  // namespace tg::nn
