#include "nn/family/checkpoint.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <map>
#include <new>
#include <type_traits>
#include <vector>

#include "io/json.hpp"

// The metadata's JSON through nlohmann's typed conversions: to_json/from_json for each struct
// (found by argument-dependent lookup, so they live in the structs' namespaces), reading every
// field through get_field(), which keeps integers exact (json::to_int64: no fractions, exponents or
// values out of range) and names the field at fault, nested ones by their path ("schedule.lr").
namespace tg::nn {
namespace {

using json::Json;

// A field's problem; what() is `missing field "<path>"` or `field "<path>": <problem>`.
struct FieldError : std::runtime_error {
  FieldError(std::string path_, std::string problem_)
      : std::runtime_error(problem_.empty() ? fmt::format("missing field \"{}\"", path_)
                                            : fmt::format("field \"{}\": {}", path_, problem_)),
        path(std::move(path_)),
        problem(std::move(problem_)) {}
  std::string path, problem;
};

// nlohmann's message without its "[json.exception.type_error.302] " prefix.
std::string library_message(const std::exception& e) {
  const std::string_view what = e.what();
  const size_t end = what.find("] ");
  return std::string(what.starts_with("[json.exception.") && end != what.npos ? what.substr(end + 2) : what);
}

void require_object(const Json& j) {
  if (!j.is_object()) throw std::runtime_error(fmt::format("expected an object, got {}", j.type_name()));
}

template <class T>
void get_field(const Json& j, const char* name, T& out) {
  const auto it = j.find(name);
  if (it == j.end()) throw FieldError(name, "");
  try {
    if constexpr (std::is_same_v<T, int64_t>) {
      out = json::to_int64(*it);
    } else if constexpr (std::is_floating_point_v<T>) {
      if (!it->is_number())
        throw std::runtime_error(fmt::format("expected a number, got {}", it->type_name()));
      out = it->get<T>();
    } else {
      it->get_to(out);  // bool, std::string (nlohmann refuses other types) or a struct's from_json
    }
  } catch (const FieldError& e) {
    throw FieldError(fmt::format("{}.{}", name, e.path), e.problem);
  } catch (const std::exception& e) {
    throw FieldError(name, library_message(e));
  }
}

// A double kept exact as a hex-float string ("0x1.5555555555555p-2"), which strtod reads back bit
// for bit; the train state's doubles are written this way.
struct HexFloat {
  double value = 0;
};
void to_json(Json& j, const HexFloat& h) {
  j = fmt::format("{:a}", h.value);
}
void from_json(const Json& j, HexFloat& h) {
  if (!j.is_string())
    throw std::runtime_error(fmt::format("expected a hex-float string, got {}", j.type_name()));
  const std::string& s = j.get_ref<const std::string&>();
  char* end = nullptr;
  h.value = std::strtod(s.c_str(), &end);
  if (s.empty() || *end) throw std::runtime_error(fmt::format("{} is not a number", json::quote(s)));
}
double hex_float(const Json& j, const char* name) {
  HexFloat h;
  get_field(j, name, h);
  return h.value;
}

// A 64-bit generator word as "0x" and 16 hex digits.
struct HexWord {
  uint64_t value = 0;
};
void to_json(Json& j, const HexWord& w) {
  j = fmt::format("{:#018x}", w.value);
}
void from_json(const Json& j, HexWord& w) {
  if (!j.is_string())
    throw std::runtime_error(fmt::format("expected a \"0x...\" string, got {}", j.type_name()));
  const std::string& s = j.get_ref<const std::string&>();
  const char* end = s.data() + s.size();
  const auto [p, ec] = s.starts_with("0x") ? std::from_chars(s.data() + 2, end, w.value, 16)
                                           : std::from_chars_result{s.data(), std::errc::invalid_argument};
  if (ec != std::errc() || p != end || s.size() == 2)
    throw std::runtime_error(fmt::format("bad rng word {}", json::quote(s)));
}

const char* schedule_name(LrSchedule::Kind k) {
  return k == LrSchedule::Kind::noam ? "noam" : k == LrSchedule::Kind::cosine ? "cosine" : "constant";
}

// A shape for a message: a hostile file's tensor can have millions of dimensions.
std::string shape_summary(const Shape& s) {
  if (s.size() <= 8) return shape_str(s);
  std::string head = shape_str(Shape(s.begin(), s.begin() + 8));
  head.pop_back();  // its ']'
  return fmt::format("{}, ... ({} dimensions)]", head, s.size());
}

}  // namespace
}  // namespace tg::nn

// The generator's state, in the namespace of Generator for argument-dependent lookup.
namespace tg {
void to_json(json::Json& j, const Generator::State& st) {
  json::Json words = json::Json::array();
  for (const uint64_t w : st.s) words.push_back(nn::HexWord{w});
  j = {{"s", std::move(words)}, {"has_spare", st.has_spare}, {"spare", nn::HexFloat{st.spare}}};
}
void from_json(const json::Json& j, Generator::State& st) {
  nn::require_object(j);
  std::vector<nn::HexWord> words;
  nn::get_field(j, "s", words);
  if (words.size() != 4) throw nn::FieldError("s", "rng state needs 4 words");
  for (size_t i = 0; i < 4; ++i) st.s[i] = words[i].value;
  nn::get_field(j, "has_spare", st.has_spare);
  st.spare = nn::hex_float(j, "spare");
}
}  // namespace tg

namespace tg::nn {

void to_json(Json& j, const LrSchedule& s) {
  j = {{"kind", schedule_name(s.kind)},
       {"lr", HexFloat{s.lr}},
       {"warmup", s.warmup},
       {"total", s.total},
       {"lr_min", HexFloat{s.lr_min}}};
}
void from_json(const Json& j, LrSchedule& s) {
  require_object(j);
  std::string kind;
  get_field(j, "kind", kind);
  s.kind = LrSchedule::parse(kind);
  s.lr = static_cast<float>(hex_float(j, "lr"));
  get_field(j, "warmup", s.warmup);
  get_field(j, "total", s.total);
  s.lr_min = static_cast<float>(hex_float(j, "lr_min"));
}

void to_json(Json& j, const TrainState& st) {
  j = {{"step", st.step},
       {"epoch", st.epoch},
       {"batch_in_epoch", st.batch_in_epoch},
       {"optimizer", st.optimizer},
       {"schedule", st.schedule},
       {"data_rng", st.data_rng},
       {"dropout_rng", st.dropout_rng},
       {"best_valid_loss", HexFloat{st.best_valid_loss}}};
}
void from_json(const Json& j, TrainState& st) {
  require_object(j);
  get_field(j, "step", st.step);
  get_field(j, "epoch", st.epoch);
  get_field(j, "batch_in_epoch", st.batch_in_epoch);
  if (st.step < 0 || st.epoch < 0 || st.batch_in_epoch < 0)
    throw std::runtime_error("negative step or epoch");
  get_field(j, "optimizer", st.optimizer);
  get_field(j, "schedule", st.schedule);
  get_field(j, "data_rng", st.data_rng);
  get_field(j, "dropout_rng", st.dropout_rng);
  st.best_valid_loss = hex_float(j, "best_valid_loss");
}

using io::Metadata;
using io::SafetensorsError;
using io::TensorFile;

std::string train_state_to_json(const TrainState& st) {
  return Json(st).dump();
}

TrainState train_state_from_json(const std::string& text) {
  return json::parse(text).get<TrainState>();
}

namespace {

// Keys of this format, beside the family's.
constexpr std::string_view kFormatKeys[] = {"format", "train"};

bool reserved(std::string_view key, std::span<const std::string_view> family_keys) {
  for (std::string_view k : kFormatKeys)
    if (key == k) return true;
  for (std::string_view k : family_keys)
    if (key == k) return true;
  return false;
}

}  // namespace

void write_checkpoint(const std::string& path, const FamilyId& family, Metadata family_md,
                      std::span<const std::string_view> family_keys, const RunRecord& run,
                      const Module& model, const Optimizer* optimizer) {
  Metadata md = std::move(family_md);
  for (const auto& [key, value] : run.extra) {
    if (reserved(key, family_keys))
      throw std::invalid_argument(fmt::format("save {}: metadata key \"{}\" is reserved", path, key));
    md[key] = value;
  }
  md["format"] = std::string(family.format);
  if (run.train) md["train"] = train_state_to_json(*run.train);

  NamedTensors tensors = model.named_parameters();
  // Never replace a good checkpoint with a corrupt one.
  if (const auto bad = first_non_finite_parameter(tensors))
    throw std::runtime_error(fmt::format("save {}: parameter {} is not finite; not written", path, *bad));
  if (optimizer)
    for (auto& [name, t] : optimizer->state()) tensors.emplace_back(kOptimPrefix + name, t);
  try {
    io::write_safetensors(path, tensors, md);
  } catch (const std::bad_alloc&) {
    throw std::runtime_error(
        fmt::format("save {}: out of memory; not written (the previous file is unchanged)", path));
  }
}

bool has_optimizer_state(const TensorFile& file) {
  for (const auto& [name, t] : file.tensors)
    if (name.starts_with(kOptimPrefix)) return true;
  return false;
}

std::string missing_key_hint(const FamilyId& family) {
  return fmt::format("not a checkpoint of {} train? see {}", family.program, family.doc);
}

RunRecord read_run_record(const Metadata& md, const std::string& path, const FamilyId& family,
                          std::span<const std::string_view> family_keys) {
  const std::string hint = missing_key_hint(family);
  parse_metadata(md, path, "format", hint.c_str(), [&](const std::string& s) {
    if (s == family.format) return;
    if (const FamilyId* other = find_family(s))
      throw std::runtime_error(fmt::format("\"{}\" is {}, not {}: use {} (its subcommands read it)", s,
                                           other->what, family.what, other->program));
    throw std::runtime_error(fmt::format("unknown format \"{}\"", s));
  });
  RunRecord run;
  if (md.contains("train"))
    parse_metadata(md, path, "train", hint.c_str(),
                   [&](const std::string& s) { run.train = train_state_from_json(s); });
  for (const auto& [k, v] : md)
    if (!reserved(k, family_keys)) run.extra[k] = v;
  return run;
}

void check_weight_count(const TensorFile& file, double expected, const std::string& path) {
  // Counted before anyone allocates a model from the config.
  double weights = 0;
  for (const auto& [name, t] : file.tensors)
    if (!name.starts_with(kOptimPrefix)) weights += static_cast<double>(t.numel());
  if (expected != weights)
    throw SafetensorsError(
        fmt::format("checkpoint {}: its config describes a model of {:.0f} parameters but its tensors hold "
                    "{:.0f} weights (config and weights disagree)",
                    path, expected, weights));
}

void check_positions(int64_t positions, const char* field, const std::string& path) {
  if (positions > kMaxPositions)
    throw SafetensorsError(fmt::format("checkpoint {}: config {} {} is over the limit of {}", path, field,
                                       positions, kMaxPositions));
}

void load_weights(Module& model, const TensorFile& file, const std::string& path) {
  // Names to tensors in a map: matching is O(n log n) in the number of tensors, whatever the file holds.
  std::map<std::string_view, const Tensor*> in_file;
  for (const auto& [name, t] : file.tensors)
    if (!name.starts_with(kOptimPrefix)) in_file.emplace(name, &t);

  // At most five names in a message, then the count (a hostile file can hold a million).
  auto list = [](const std::vector<std::string>& names, size_t total) {
    std::string s;
    for (size_t i = 0; i < names.size() && i < 5; ++i) s += (i ? ", " : "") + names[i];
    return total > 5 ? fmt::format("{}, ... ({} in all)", s, total) : s;
  };
  const NamedTensors params = model.named_parameters();
  std::vector<std::string> missing, shapes;
  std::vector<const Tensor*> sources;
  for (const auto& [name, p] : params) {
    auto it = in_file.find(name);
    if (it == in_file.end()) {
      missing.push_back(name);
      continue;
    }
    if (it->second->shape() != p.shape())
      shapes.push_back(fmt::format("{} is {} in the file, the model has {}", name,
                                   shape_summary(it->second->shape()), shape_str(p.shape())));
    sources.push_back(it->second);
    in_file.erase(it);
  }
  std::vector<std::string> extra;
  for (auto it = in_file.begin(); it != in_file.end() && extra.size() < 5; ++it)
    extra.emplace_back(it->first);
  if (!missing.empty() || !shapes.empty() || !extra.empty()) {
    std::string msg = fmt::format("checkpoint {} does not match the model:", path);
    if (!missing.empty()) msg += fmt::format(" missing parameters: {};", list(missing, missing.size()));
    if (!shapes.empty()) msg += fmt::format(" wrong shapes: {};", list(shapes, shapes.size()));
    if (!extra.empty()) msg += fmt::format(" unexpected tensors: {};", list(extra, in_file.size()));
    msg.pop_back();
    throw SafetensorsError(msg);
  }
  // A NaN or Inf in a weight (a file damaged, or written by a tool that checks less than
  // write_checkpoint) would only show up later as a NaN loss or text of one token repeated.
  NamedTensors loaded;
  for (size_t i = 0; i < params.size(); ++i) loaded.emplace_back(params[i].first, *sources[i]);
  if (const auto bad = first_non_finite_parameter(loaded))
    throw SafetensorsError(fmt::format("checkpoint {}: parameter {} is not finite; not loaded", path, *bad));
  for (size_t i = 0; i < params.size(); ++i) {
    Tensor dst = params[i].second;
    std::copy(sources[i]->data(), sources[i]->data() + sources[i]->numel(), dst.data());
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
