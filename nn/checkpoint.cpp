#include "nn/checkpoint.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <map>
#include <set>

#include "io/json.hpp"

namespace tg::nn {

using io::Metadata;
using io::SafetensorsError;
using io::TensorFile;

namespace {

using json::Value;

const Value& field(const Value& obj, const char* key) {
  const Value* v = obj.find(key);
  if (!v) throw std::runtime_error(fmt::format("missing field \"{}\"", key));
  return *v;
}

// Doubles are kept exact as hex floats ("0x1.8p+1"), which strtod reads back bit for bit.
std::string exact(double d) {
  return fmt::format("{:a}", d);
}
double from_exact(const Value& v) {
  const std::string& s = v.as_string();
  char* end = nullptr;
  const double d = std::strtod(s.c_str(), &end);
  if (s.empty() || *end) throw std::runtime_error(fmt::format("\"{}\" is not a number", s));
  return d;
}

Value rng_to_json(const Generator::State& st) {
  Value words = Value::array();
  for (uint64_t w : st.s) words.push(Value::string(fmt::format("{:#018x}", w)));
  return Value::object(
      {{"s", words}, {"has_spare", Value::boolean(st.has_spare)}, {"spare", Value::string(exact(st.spare))}});
}

Generator::State rng_from_json(const Value& v) {
  Generator::State st{};
  const auto& words = field(v, "s").as_array();
  if (words.size() != 4) throw std::runtime_error("rng state needs 4 words");
  for (size_t i = 0; i < 4; ++i) {
    const std::string& w = words[i].as_string();
    char* end = nullptr;
    errno = 0;
    st.s[i] = std::strtoull(w.c_str(), &end, 16);
    if (w.empty() || *end || errno) throw std::runtime_error(fmt::format("bad rng word \"{}\"", w));
  }
  st.has_spare = field(v, "has_spare").as_bool();
  st.spare = from_exact(field(v, "spare"));
  return st;
}

std::string vocab_to_json(const Vocab& v) {
  Value a = Value::array();
  for (const auto& t : v.tokens()) a.push(Value::string(t));
  return a.dump();
}

Vocab vocab_from_json(const std::string& text) {
  std::vector<std::string> tokens;
  const Value list = json::parse(text);
  for (const Value& t : list.as_array()) tokens.push_back(t.as_string());
  return Vocab::from_tokens(std::move(tokens));
}

const char* const kReserved[] = {"format", "config", "tokenizer", "src_vocab", "tgt_vocab", "train"};

}  // namespace

std::string config_to_json(const TransformerConfig& c) {
  return Value::object({{"src_vocab", Value::integer(c.src_vocab)},
                        {"tgt_vocab", Value::integer(c.tgt_vocab)},
                        {"d_model", Value::integer(c.d_model)},
                        {"heads", Value::integer(c.heads)},
                        {"enc_layers", Value::integer(c.enc_layers)},
                        {"dec_layers", Value::integer(c.dec_layers)},
                        {"d_ff", Value::integer(c.d_ff)},
                        {"dropout", Value::number(c.dropout)},
                        {"norm_first", Value::boolean(c.norm_first)},
                        {"activation", Value::string(c.activation)},
                        {"max_len", Value::integer(c.max_len)}})
      .dump();
}

TransformerConfig config_from_json(const std::string& text) {
  const Value v = json::parse(text);
  TransformerConfig c;
  c.src_vocab = field(v, "src_vocab").as_int64();
  c.tgt_vocab = field(v, "tgt_vocab").as_int64();
  c.d_model = field(v, "d_model").as_int64();
  c.heads = field(v, "heads").as_int64();
  c.enc_layers = field(v, "enc_layers").as_int64();
  c.dec_layers = field(v, "dec_layers").as_int64();
  c.d_ff = field(v, "d_ff").as_int64();
  c.dropout = static_cast<float>(field(v, "dropout").as_double());
  c.norm_first = field(v, "norm_first").as_bool();
  c.activation = field(v, "activation").as_string();
  c.max_len = field(v, "max_len").as_int64();
  c.validate();
  return c;
}

std::string train_state_to_json(const TrainState& st) {
  const LrSchedule& s = st.schedule;
  const char* kind = s.kind == LrSchedule::Kind::noam     ? "noam"
                     : s.kind == LrSchedule::Kind::cosine ? "cosine"
                                                          : "constant";
  return Value::object({{"step", Value::integer(st.step)},
                        {"epoch", Value::integer(st.epoch)},
                        {"batch_in_epoch", Value::integer(st.batch_in_epoch)},
                        {"optimizer", Value::string(st.optimizer)},
                        {"schedule", Value::object({{"kind", Value::string(kind)},
                                                    {"lr", Value::string(exact(s.lr))},
                                                    {"warmup", Value::integer(s.warmup)},
                                                    {"total", Value::integer(s.total)},
                                                    {"lr_min", Value::string(exact(s.lr_min))}})},
                        {"data_rng", rng_to_json(st.data_rng)},
                        {"dropout_rng", rng_to_json(st.dropout_rng)},
                        {"best_valid_loss", Value::string(exact(st.best_valid_loss))}})
      .dump();
}

TrainState train_state_from_json(const std::string& text) {
  const Value v = json::parse(text);
  TrainState st;
  st.step = field(v, "step").as_int64();
  st.epoch = field(v, "epoch").as_int64();
  st.batch_in_epoch = field(v, "batch_in_epoch").as_int64();
  if (st.step < 0 || st.epoch < 0 || st.batch_in_epoch < 0)
    throw std::runtime_error("negative step or epoch");
  st.optimizer = field(v, "optimizer").as_string();
  const Value& s = field(v, "schedule");
  st.schedule.kind = LrSchedule::parse(field(s, "kind").as_string());
  st.schedule.lr = static_cast<float>(from_exact(field(s, "lr")));
  st.schedule.warmup = field(s, "warmup").as_int64();
  st.schedule.total = field(s, "total").as_int64();
  st.schedule.lr_min = static_cast<float>(from_exact(field(s, "lr_min")));
  st.data_rng = rng_from_json(field(v, "data_rng"));
  st.dropout_rng = rng_from_json(field(v, "dropout_rng"));
  st.best_valid_loss = from_exact(field(v, "best_valid_loss"));
  return st;
}

void save_checkpoint(const std::string& path, const Transformer& model, const CheckpointInfo& info,
                     const Optimizer* optimizer) {
  Metadata md = info.extra;
  for (const char* k : kReserved)
    if (md.contains(k))
      throw std::invalid_argument(fmt::format("save_checkpoint: metadata key \"{}\" is reserved", k));
  const TransformerConfig& c = model.config();
  if (c.src_vocab != info.src_vocab.size() || c.tgt_vocab != info.tgt_vocab.size())
    throw std::invalid_argument(
        fmt::format("save_checkpoint {}: model vocabularies {}/{} but the vocabularies hold {}/{}", path,
                    c.src_vocab, c.tgt_vocab, info.src_vocab.size(), info.tgt_vocab.size()));
  md["format"] = kCheckpointFormat;
  md["config"] = config_to_json(model.config());
  md["tokenizer"] = tokenizer_name(info.tokenizer);
  md["src_vocab"] = vocab_to_json(info.src_vocab);
  md["tgt_vocab"] = vocab_to_json(info.tgt_vocab);
  if (info.train) md["train"] = train_state_to_json(*info.train);

  NamedTensors tensors = model.named_parameters();
  // Never replace a good checkpoint with a corrupt one.
  if (const auto bad = first_non_finite_parameter(tensors))
    throw std::runtime_error(
        fmt::format("save_checkpoint {}: parameter {} is not finite; not written", path, *bad));
  if (optimizer)
    for (auto& [name, t] : optimizer->state()) tensors.emplace_back(kOptimPrefix + name, t);
  io::write_safetensors(path, tensors, md);
}

bool Checkpoint::has_optimizer_state() const {
  for (const auto& [name, t] : file.tensors)
    if (name.starts_with(kOptimPrefix)) return true;
  return false;
}

double transformer_parameter_count(const TransformerConfig& c) {
  const double d = static_cast<double>(c.d_model), ff = static_cast<double>(c.d_ff);
  const double attention = 3 * d * d + 3 * d + d * d + d;  // in_proj, out_proj
  const double feed_forward = ff * d + ff + d * ff + d;    // linear1, linear2
  const double norm = 2 * d;
  const double enc_layer = attention + feed_forward + 2 * norm;
  const double dec_layer = 2 * attention + feed_forward + 3 * norm;
  const double vs = static_cast<double>(c.src_vocab), vt = static_cast<double>(c.tgt_vocab);
  return vs * d + vt * d + static_cast<double>(c.enc_layers) * enc_layer +
         static_cast<double>(c.dec_layers) * dec_layer + 2 * norm + vt * d + vt;
}

Checkpoint read_checkpoint(const std::string& path) {
  return parse_checkpoint(io::read_safetensors(path), path);
}

Checkpoint parse_checkpoint(TensorFile file, const std::string& path) {
  Checkpoint ck;
  ck.file = std::move(file);
  const Metadata& md = ck.file.metadata;
  auto get = [&](const char* key) -> const std::string& {
    auto it = md.find(key);
    if (it == md.end())
      throw SafetensorsError(
          fmt::format("checkpoint {}: __metadata__ has no \"{}\" (not a tapegrad checkpoint? "
                      "see nn/checkpoint.hpp for the keys)",
                      path, key));
    return it->second;
  };
  auto parse = [&](const char* key, auto&& fn) {
    try {
      fn(get(key));
    } catch (const SafetensorsError&) {
      throw;
    } catch (const std::exception& e) {
      throw SafetensorsError(fmt::format("checkpoint {}: __metadata__ \"{}\": {}", path, key, e.what()));
    }
  };
  parse("format", [&](const std::string& s) {
    if (s != kCheckpointFormat) throw std::runtime_error(fmt::format("unknown format \"{}\"", s));
  });
  parse("config", [&](const std::string& s) { ck.info.config = config_from_json(s); });
  parse("tokenizer", [&](const std::string& s) { ck.info.tokenizer = parse_tokenizer(s); });
  parse("src_vocab", [&](const std::string& s) { ck.info.src_vocab = vocab_from_json(s); });
  parse("tgt_vocab", [&](const std::string& s) { ck.info.tgt_vocab = vocab_from_json(s); });
  if (md.contains("train"))
    parse("train", [&](const std::string& s) { ck.info.train = train_state_from_json(s); });
  const auto& c = ck.info.config;
  if (c.src_vocab != ck.info.src_vocab.size() || c.tgt_vocab != ck.info.tgt_vocab.size())
    throw SafetensorsError(
        fmt::format("checkpoint {}: config says vocabularies {}/{} but src_vocab/tgt_vocab hold {}/{}", path,
                    c.src_vocab, c.tgt_vocab, ck.info.src_vocab.size(), ck.info.tgt_vocab.size()));
  if (c.max_len > kMaxPositions)
    throw SafetensorsError(fmt::format("checkpoint {}: config max_len {} is over the limit of {}", path,
                                       c.max_len, kMaxPositions));
  // Weights vs config: counted before anyone allocates a model from this config.
  double weights = 0;
  for (const auto& [name, t] : ck.file.tensors)
    if (!name.starts_with(kOptimPrefix)) weights += static_cast<double>(t.numel());
  if (const double expected = transformer_parameter_count(c); expected != weights)
    throw SafetensorsError(
        fmt::format("checkpoint {}: its config describes a model of {:.0f} parameters but its tensors hold "
                    "{:.0f} weights (config and weights disagree)",
                    path, expected, weights));
  for (const auto& [k, v] : md) {
    bool reserved = false;
    for (const char* r : kReserved) reserved |= k == r;
    if (!reserved) ck.info.extra[k] = v;
  }
  return ck;
}

void load_weights(Module& model, const TensorFile& file, const std::string& path) {
  std::map<std::string, const Tensor*> in_file;
  for (const auto& [name, t] : file.tensors)
    if (!name.starts_with(kOptimPrefix)) in_file.emplace(name, &t);

  auto list = [](const std::vector<std::string>& names) {
    std::string s;
    for (size_t i = 0; i < names.size() && i < 5; ++i) s += (i ? ", " : "") + names[i];
    return names.size() > 5 ? fmt::format("{}, ... ({} in all)", s, names.size()) : s;
  };
  const NamedTensors params = model.named_parameters();
  std::vector<std::string> missing, shapes;
  for (const auto& [name, p] : params) {
    auto it = in_file.find(name);
    if (it == in_file.end()) {
      missing.push_back(name);
      continue;
    }
    if (it->second->shape() != p.shape())
      shapes.push_back(fmt::format("{} is {} in the file, the model has {}", name,
                                   shape_str(it->second->shape()), shape_str(p.shape())));
    in_file.erase(it);
  }
  std::vector<std::string> extra;
  for (const auto& [name, t] : in_file) extra.push_back(name);
  if (!missing.empty() || !shapes.empty() || !extra.empty()) {
    std::string msg = fmt::format("checkpoint {} does not match the model:", path);
    if (!missing.empty()) msg += fmt::format(" missing parameters: {};", list(missing));
    if (!shapes.empty()) msg += fmt::format(" wrong shapes: {};", list(shapes));
    if (!extra.empty()) msg += fmt::format(" unexpected tensors: {};", list(extra));
    msg.pop_back();
    throw SafetensorsError(msg);
  }
  for (const auto& [name, p] : params) {
    Tensor dst = p;
    const Tensor* src = file.find(name);
    std::copy(src->data(), src->data() + src->numel(), dst.data());
  }
}

void load_optimizer_state(Optimizer& optimizer, const TensorFile& file, const std::string& path) {
  NamedTensors state;
  for (const auto& [name, t] : file.tensors)
    if (name.starts_with(kOptimPrefix))
      state.emplace_back(name.substr(std::string_view(kOptimPrefix).size()), t);
  if (state.empty())
    throw SafetensorsError(
        fmt::format("checkpoint {} has no optimizer state (\"{}*\" tensors)", path, kOptimPrefix));
  try {
    optimizer.load_state(state);
  } catch (const std::invalid_argument& e) {
    throw SafetensorsError(fmt::format("checkpoint {}: {}", path, e.what()));
  }
}

}  // namespace tg::nn
