#include "nn/gpt_checkpoint.hpp"

#include <fmt/format.h>

#include <set>
#include <type_traits>

#include "io/json.hpp"

namespace tg::nn {

using io::Metadata;
using io::SafetensorsError;
using json::Json;

namespace {

const char* const kReserved[] = {"format", "config", "tokenizer", "vocab", "train"};

bool reserved(const std::string& key) {
  for (const char* r : kReserved)
    if (key == r) return true;
  return false;
}

}  // namespace

std::string gpt_config_to_json(const GptConfig& c) {
  return nlohmann::ordered_json{{"vocab_size", c.vocab_size},
                                {"block_size", c.block_size},
                                {"n_layer", c.n_layer},
                                {"n_head", c.n_head},
                                {"n_embd", c.n_embd},
                                {"dropout", c.dropout},
                                {"bias", c.bias}}
      .dump();
}

GptConfig gpt_config_from_json(const std::string& text) {
  // Strict JSON (io/json.hpp: duplicate keys refused), integers exact (json::to_int64).
  const Json j = json::parse(text);
  if (!j.is_object()) throw std::runtime_error("not a JSON object");
  const std::set<std::string> known = {"vocab_size", "block_size", "n_layer", "n_head",
                                       "n_embd",     "dropout",    "bias"};
  for (const auto& [key, value] : j.items())
    if (!known.contains(key)) throw std::runtime_error(fmt::format("unknown field \"{}\"", key));
  auto get = [&](const char* key, auto& field) {
    if (!j.contains(key)) throw std::runtime_error(fmt::format("missing field \"{}\"", key));
    try {
      if constexpr (std::is_same_v<std::decay_t<decltype(field)>, int64_t>)
        field = json::to_int64(j.at(key));
      else
        j.at(key).get_to(field);
    } catch (const std::exception& e) {
      throw std::runtime_error(fmt::format("field \"{}\": {}", key, e.what()));
    }
  };
  GptConfig c;
  get("vocab_size", c.vocab_size);
  get("block_size", c.block_size);
  get("n_layer", c.n_layer);
  get("n_head", c.n_head);
  get("n_embd", c.n_embd);
  get("dropout", c.dropout);
  get("bias", c.bias);
  c.validate();
  return c;
}

void save_gpt_checkpoint(const std::string& path, const GPT& model, const GptCheckpointInfo& info,
                         const Optimizer* optimizer) {
  Metadata md = info.extra;
  for (const auto& [key, value] : md)
    if (reserved(key))
      throw std::invalid_argument(fmt::format("save_gpt_checkpoint: metadata key \"{}\" is reserved", key));
  if (model.config().vocab_size != info.tokenizer.vocab_size())
    throw std::invalid_argument(
        fmt::format("save_gpt_checkpoint {}: the model has {} tokens, the tokenizer {}", path,
                    model.config().vocab_size, info.tokenizer.vocab_size()));
  md["format"] = kGptCheckpointFormat;
  md["config"] = gpt_config_to_json(model.config());
  md["tokenizer"] = info.tokenizer.name();
  if (info.tokenizer.kind() == LmTokenizerKind::character)
    md["vocab"] = Json(info.tokenizer.symbols()).dump();
  if (info.train) md["train"] = train_state_to_json(*info.train);

  NamedTensors tensors = model.named_parameters();
  // Never replace a good checkpoint with a corrupt one.
  if (const auto bad = first_non_finite_parameter(tensors))
    throw std::runtime_error(fmt::format("save {}: parameter {} is not finite; not written", path, *bad));
  if (optimizer)
    for (auto& [name, t] : optimizer->state()) tensors.emplace_back(kOptimPrefix + name, t);
  io::write_safetensors(path, tensors, md);
}

bool GptCheckpoint::has_optimizer_state() const {
  for (const auto& [name, t] : file.tensors)
    if (name.starts_with(kOptimPrefix)) return true;
  return false;
}

GptCheckpoint read_gpt_checkpoint(const std::string& path) {
  return parse_gpt_checkpoint(io::read_safetensors(path), path);
}

GptCheckpoint parse_gpt_checkpoint(io::TensorFile file, const std::string& path) {
  GptCheckpoint ck;
  ck.file = std::move(file);
  const Metadata& md = ck.file.metadata;
  auto parse = [&](const char* key, const std::function<void(const std::string&)>& fn) {
    parse_metadata(md, path, key, "not a checkpoint of lm train? see nn/gpt.md", fn);
  };
  parse("format", [&](const std::string& s) {
    if (s == kCheckpointFormat)
      throw std::runtime_error(fmt::format("\"{}\" is a translate checkpoint, not a language model", s));
    if (s != kGptCheckpointFormat) throw std::runtime_error(fmt::format("unknown format \"{}\"", s));
  });
  GptCheckpointInfo& info = ck.info;
  parse("config", [&](const std::string& s) { info.config = gpt_config_from_json(s); });
  parse("tokenizer", [&](const std::string& s) {
    if (parse_lm_tokenizer(s) == LmTokenizerKind::byte) return;
    parse("vocab", [&](const std::string& v) {
      info.tokenizer = LmTokenizer::from_symbols(json::parse(v).get<std::vector<std::string>>());
    });
  });
  if (md.contains("train"))
    parse("train", [&](const std::string& s) { info.train = train_state_from_json(s); });
  const GptConfig& c = info.config;
  if (c.vocab_size != info.tokenizer.vocab_size())
    throw SafetensorsError(
        fmt::format("checkpoint {}: config vocab_size {} but the {} tokenizer has {} tokens", path,
                    c.vocab_size, info.tokenizer.name(), info.tokenizer.vocab_size()));
  if (c.block_size > kMaxPositions)
    throw SafetensorsError(fmt::format("checkpoint {}: config block_size {} is over the limit of {}", path,
                                       c.block_size, kMaxPositions));
  // Weights vs config: counted before anyone allocates a model from this config.
  double weights = 0;
  for (const auto& [name, t] : ck.file.tensors)
    if (!name.starts_with(kOptimPrefix)) weights += static_cast<double>(t.numel());
  if (const double expected = gpt_parameter_count(c); expected != weights)
    throw SafetensorsError(
        fmt::format("checkpoint {}: its config describes a model of {:.0f} parameters but its tensors hold "
                    "{:.0f} weights (config and weights disagree)",
                    path, expected, weights));
  for (const auto& [k, v] : md)
    if (!reserved(k)) info.extra[k] = v;
  return ck;
}

std::unique_ptr<GPT> load_gpt(const GptCheckpoint& ck, const std::string& path) {
  auto model = std::make_unique<GPT>(ck.info.config);
  load_weights(*model, ck.file, path);
  model->eval();
  return model;
}

}  // namespace tg::nn
