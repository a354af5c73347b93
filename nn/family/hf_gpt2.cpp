#include "nn/family/hf_gpt2.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <utility>
#include <vector>

#include "io/file.hpp"
#include "io/json.hpp"
#include "io/text.hpp"
#include "nn/tokenizers/byte_char.hpp"
#include "nn/tokenizers/gpt2_bpe.hpp"

namespace tg::nn {

namespace fs = std::filesystem;
using io::DataError;
using io::SafetensorsError;

namespace {

constexpr std::string_view kPrefix = "transformer.";

// transformers' GELUs: the names that are the tanh form (mathematically; the same to float rounding)
// and the exact one.
constexpr std::array<std::string_view, 3> kTanhGelus = {"gelu_new", "gelu_pytorch_tanh", "gelu_fast"};

// The Conv1D weights of a block, stored [in, out] by transformers.
bool is_conv1d_weight(std::string_view name) {
  for (std::string_view s :
       {".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight", ".mlp.c_proj.weight"})
    if (name.ends_with(s)) return true;
  return false;
}

// A [rows, cols] matrix as [cols, rows].
Tensor transposed(const Tensor& t) {
  const int64_t rows = t.size(0), cols = t.size(1);
  Tensor out = Tensor::empty({cols, rows});
  const float* src = t.data();
  float* dst = out.data();
  constexpr int64_t kTile = 32;  // tiles, so that neither side is walked with a large stride alone
  for (int64_t r0 = 0; r0 < rows; r0 += kTile)
    for (int64_t c0 = 0; c0 < cols; c0 += kTile)
      for (int64_t r = r0; r < std::min(rows, r0 + kTile); ++r)
        for (int64_t c = c0; c < std::min(cols, c0 + kTile); ++c) dst[c * rows + r] = src[r * cols + c];
  return out;
}

// The GPT's parameters of config c, names and shapes in its order, from the config alone (nn/gpt.hpp
// builds the same list; a test compares them).
std::vector<std::pair<std::string, Shape>> gpt_parameter_shapes(const GptConfig& c) {
  const int64_t d = c.n_embd;
  std::vector<std::pair<std::string, Shape>> out = {{"transformer.wte.weight", {c.vocab_size, d}},
                                                    {"transformer.wpe.weight", {c.block_size, d}}};
  for (int64_t i = 0; i < c.n_layer; ++i) {
    const std::string h = fmt::format("transformer.h.{}.", i);
    for (const auto& [name, shape] :
         std::initializer_list<std::pair<const char*, Shape>>{{"ln_1.weight", {d}},
                                                              {"ln_1.bias", {d}},
                                                              {"attn.c_attn.weight", {3 * d, d}},
                                                              {"attn.c_attn.bias", {3 * d}},
                                                              {"attn.c_proj.weight", {d, d}},
                                                              {"attn.c_proj.bias", {d}},
                                                              {"ln_2.weight", {d}},
                                                              {"ln_2.bias", {d}},
                                                              {"mlp.c_fc.weight", {4 * d, d}},
                                                              {"mlp.c_fc.bias", {4 * d}},
                                                              {"mlp.c_proj.weight", {d, 4 * d}},
                                                              {"mlp.c_proj.bias", {d}}})
      out.emplace_back(h + name, shape);
  }
  out.emplace_back("transformer.ln_f.weight", Shape{d});
  out.emplace_back("transformer.ln_f.bias", Shape{d});
  if (!c.tie_word_embeddings) out.emplace_back("lm_head.weight", Shape{c.vocab_size, d});
  return out;
}

// At most five names, then the count (a hostile file can hold a million).
std::string name_list(const std::vector<std::string>& names) {
  std::string s;
  for (size_t i = 0; i < names.size() && i < 5; ++i) s += (i ? ", " : "") + names[i];
  return names.size() > 5 ? fmt::format("{}, ... ({} in all)", s, names.size()) : s;
}

// A shape for a message: a hostile file's tensor can have millions of dimensions.
std::string shape_text(const Shape& s) {
  return s.size() <= 8 ? shape_str(s) : fmt::format("[{} dimensions]", s.size());
}

}  // namespace

// ---- config.json --------------------------------------------------------------------------------

GptConfig hf_gpt2_config_from_json(const std::string& text, const std::string& path) {
  json::Json j;
  try {
    j = json::parse(text);
  } catch (const std::exception& e) {
    throw DataError(fmt::format("{}: {}", path, e.what()));
  }
  if (!j.is_object()) throw DataError(fmt::format("{}: expected a JSON object, got {}", path, j.type_name()));
  auto bad = [&](const char* key, const std::string& problem) {
    return DataError(fmt::format("{}: \"{}\": {}", path, key, problem));
  };
  // Each key of the wanted type, when present.
  auto find = [&](const char* key, bool (json::Json::*is)() const, const char* type) -> const json::Json* {
    const auto it = j.find(key);
    if (it == j.end()) return nullptr;
    if (!((*it).*is)()) throw bad(key, fmt::format("expected {}, got {}", type, it->type_name()));
    return &*it;
  };
  auto integer = [&](const char* key, int64_t& out) {
    const auto it = j.find(key);
    if (it == j.end()) return;
    try {
      out = json::to_int64(*it);
    } catch (const std::exception& e) {
      throw bad(key, e.what());
    }
  };
  auto boolean = [&](const char* key, bool want) {
    if (const json::Json* v = find(key, &json::Json::is_boolean, "true or false");
        v && v->get<bool>() != want)
      throw bad(key, fmt::format("{} is not supported (only {}, GPT-2's)", v->get<bool>(), want));
  };

  if (const json::Json* v = find("model_type", &json::Json::is_string, "a string");
      v && v->get_ref<const std::string&>() != "gpt2")
    throw bad("model_type", fmt::format("{} is not a GPT-2 (\"gpt2\"); lm reads GPT-2 models only",
                                        json::quote(v->get_ref<const std::string&>())));
  // GPT2Config's defaults: GPT-2 124M.
  GptConfig c;
  c.vocab_size = 50257;
  c.block_size = 1024;
  c.n_embd = 768;
  c.n_layer = 12;
  c.n_head = 12;
  c.dropout = 0.0f;
  c.activation = "gelu_new";
  c.layer_norm_epsilon = 1e-5f;
  c.tie_word_embeddings = true;
  integer("vocab_size", c.vocab_size);
  integer("n_positions", c.block_size);
  integer("n_embd", c.n_embd);
  integer("n_layer", c.n_layer);
  integer("n_head", c.n_head);
  if (const json::Json* v = find("layer_norm_epsilon", &json::Json::is_number, "a number"))
    c.layer_norm_epsilon = v->get<float>();
  if (const json::Json* v = find("activation_function", &json::Json::is_string, "a string")) {
    const std::string& a = v->get_ref<const std::string&>();
    if (a == "gelu")
      c.activation = "gelu";
    else if (std::find(kTanhGelus.begin(), kTanhGelus.end(), a) != kTanhGelus.end())
      c.activation = "gelu_new";
    else
      throw bad(
          "activation_function",
          fmt::format("{} is not supported (gelu, gelu_new, gelu_pytorch_tanh, gelu_fast)", json::quote(a)));
  }
  if (const json::Json* v = find("tie_word_embeddings", &json::Json::is_boolean, "true or false"))
    c.tie_word_embeddings = v->get<bool>();
  if (const auto it = j.find("n_inner"); it != j.end() && !it->is_null()) {
    int64_t inner = 0;
    integer("n_inner", inner);
    if (inner != 4 * c.n_embd)
      throw bad("n_inner",
                fmt::format("{} is not supported (only 4 n_embd = {}, or null)", inner, 4 * c.n_embd));
  }
  boolean("add_cross_attention", false);
  boolean("scale_attn_weights", true);
  boolean("scale_attn_by_inverse_layer_idx", false);
  try {
    c.validate();
  } catch (const std::invalid_argument& e) {
    throw DataError(fmt::format("{}: {}", path, e.what()));
  }
  return c;
}

std::string hf_gpt2_config_to_json(const GptConfig& c, int32_t eos) {
  // A float as its shortest text ("1e-05", not the double nearest to the float).
  auto number = [](float f) { return json::parse(fmt::format("{}", f)); };
  const json::Json token = eos >= 0 ? json::Json(eos) : json::Json(nullptr);
  nlohmann::ordered_json j = {{"activation_function", c.activation},
                              {"architectures", {"GPT2LMHeadModel"}},
                              {"attn_pdrop", number(c.dropout)},
                              {"bos_token_id", token},
                              {"embd_pdrop", number(c.dropout)},
                              {"eos_token_id", token},
                              {"initializer_range", 0.02},
                              {"layer_norm_epsilon", number(c.layer_norm_epsilon)},
                              {"model_type", "gpt2"},
                              {"n_embd", c.n_embd},
                              {"n_head", c.n_head},
                              {"n_inner", nullptr},
                              {"n_layer", c.n_layer},
                              {"n_positions", c.block_size},
                              {"resid_pdrop", number(c.dropout)},
                              {"tie_word_embeddings", c.tie_word_embeddings},
                              {"torch_dtype", "float32"},
                              {"vocab_size", c.vocab_size}};
  return j.dump(2) + "\n";
}

// ---- model.safetensors --------------------------------------------------------------------------

NamedTensors hf_gpt2_weights_to_gpt(io::TensorFile file, const GptConfig& c, const std::string& path) {
  // The file's tensors under the GPT's names (buffers and a tied head left out), in a map: O(n log n)
  // in the number of tensors, whatever the file holds.
  std::map<std::string, std::pair<std::string, Tensor>> by_name;  // our name -> (the file's name, tensor)
  std::vector<std::string> twice;
  for (auto& [name, t] : file.tensors) {
    const std::string_view n = name;
    const std::string_view rest = n.starts_with(kPrefix) ? n.substr(kPrefix.size()) : n;
    std::string ours;
    if (n == "lm_head.weight") {
      if (c.tie_word_embeddings) continue;  // tied: wte is the head (transformers ties it on load)
      ours = name;
    } else if (rest.starts_with("h.") &&
               (rest.ends_with(".attn.bias") || rest.ends_with(".attn.masked_bias"))) {
      continue;  // the causal mask buffers of older transformers, not weights
    } else {
      ours = std::string(kPrefix) + std::string(rest);
    }
    if (!by_name.emplace(std::move(ours), std::pair{name, std::move(t)}).second) twice.push_back(name);
  }
  file.tensors.clear();
  if (!twice.empty())
    throw SafetensorsError(fmt::format("{}: tensors given twice (with and without \"transformer.\"): {}",
                                       path, name_list(twice)));
  // The count first, before a list of names as long as a hostile config says.
  double weights = 0;
  for (const auto& [name, t] : by_name) weights += static_cast<double>(t.second.numel());
  if (weights != gpt_parameter_count(c)) {
    // The tensors missing or left over, where the config's list of names is about as long as the
    // file's (never the millions of names of a hostile n_layer): a tensor dropped or added by hand.
    std::string names;
    if (c.n_layer <= static_cast<int64_t>(by_name.size())) {
      std::vector<std::string> missing, unknown;
      std::set<std::string> expected;
      for (const auto& [name, shape] : gpt_parameter_shapes(c)) {
        if (!by_name.contains(name)) missing.push_back(name);
        expected.insert(name);
      }
      for (const auto& [name, t] : by_name)
        if (!expected.contains(name)) unknown.push_back(t.first);
      if (!missing.empty()) names += fmt::format("; missing tensors: {}", name_list(missing));
      if (!unknown.empty()) names += fmt::format("; unexpected tensors: {}", name_list(unknown));
    }
    throw SafetensorsError(fmt::format(
        "{}: its weights ({:.0f} numbers) are not the model config.json describes ({:.0f} parameters: "
        "n_layer {}, n_embd {}, vocab_size {}, n_positions {}{}); config and weights disagree{}",
        path, weights, gpt_parameter_count(c), c.n_layer, c.n_embd, c.vocab_size, c.block_size,
        c.tie_word_embeddings ? "" : ", an untied lm_head", names));
  }

  NamedTensors out;
  std::vector<std::string> missing, shapes;
  for (auto& [name, shape] : gpt_parameter_shapes(c)) {
    const auto it = by_name.find(name);
    if (it == by_name.end()) {
      missing.push_back(name == "lm_head.weight" ? "lm_head.weight (config.json: tie_word_embeddings false)"
                                                 : name);
      continue;
    }
    Tensor t = std::move(it->second.second);
    by_name.erase(it);
    const bool conv1d = is_conv1d_weight(name);
    const Shape want = conv1d ? Shape{shape[1], shape[0]} : shape;  // Conv1D: [in, out]
    if (t.shape() != want) {
      shapes.push_back(
          fmt::format("{} is {}, config.json says {}", name, shape_text(t.shape()), shape_str(want)));
      continue;
    }
    out.emplace_back(name, conv1d ? transposed(t) : std::move(t));
  }
  std::vector<std::string> unknown;
  for (const auto& [name, t] : by_name) unknown.push_back(t.first);
  if (!missing.empty() || !shapes.empty() || !unknown.empty()) {
    std::string msg = fmt::format("{} is not the GPT-2 config.json describes:", path);
    if (!missing.empty()) msg += fmt::format(" missing tensors: {};", name_list(missing));
    if (!shapes.empty()) msg += fmt::format(" wrong shapes: {};", name_list(shapes));
    if (!unknown.empty()) msg += fmt::format(" unexpected tensors: {};", name_list(unknown));
    msg.pop_back();
    throw SafetensorsError(msg);
  }
  return out;
}

NamedTensors gpt_weights_to_hf_gpt2(const GPT& model) {
  NamedTensors out;
  for (const auto& [name, p] : model.named_parameters())
    out.emplace_back(name, is_conv1d_weight(name) ? transposed(p) : p);
  return out;
}

// ---- folders ------------------------------------------------------------------------------------

bool is_hf_folder(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec);
}

GptCheckpoint read_hf_gpt2_model(const std::string& dir) {
  const fs::path d(dir);
  const std::string config = (d / "config.json").string(), weights = (d / "model.safetensors").string();
  if (!fs::exists(config))
    throw DataError(
        fmt::format("{}: no config.json: not a Hugging Face model folder (save_pretrained(DIR) "
                    "writes config.json and model.safetensors)",
                    dir));
  if (!fs::exists(weights)) {
    std::string why;
    if (fs::exists(d / "model.safetensors.index.json"))
      why = "; it has a sharded model.safetensors.index.json, which lm does not read";
    else if (fs::exists(d / "pytorch_model.bin"))
      why =
          "; it has pytorch_model.bin only: GPT2LMHeadModel.from_pretrained(DIR).save_pretrained(DIR) writes "
          "model.safetensors";
    throw DataError(fmt::format("{}: no model.safetensors{}", dir, why));
  }
  GptCheckpoint ck;
  ck.info.config = hf_gpt2_config_from_json(io::read_file(config), config);
  check_positions(ck.info.config.block_size, "n_positions", config);
  ck.file.tensors = hf_gpt2_weights_to_gpt(io::read_safetensors(weights), ck.info.config, weights);
  return ck;
}

void write_hf_gpt2_model(const std::string& dir, const GPT& model, int32_t eos) {
  const NamedTensors params = model.named_parameters();
  if (const auto bad = first_non_finite_parameter(params))
    throw std::runtime_error(
        fmt::format("export {}: parameter {} is not finite; nothing written", dir, *bad));
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir))
    throw std::runtime_error(
        fmt::format("export {}: cannot make the folder: {}", dir,
                    ec ? ec.message() : std::string("a file of that name is in the way")));
  const fs::path d(dir);
  // transformers refuses a safetensors file whose metadata "format" is not "pt" (or tf, flax, mlx).
  io::write_safetensors((d / "model.safetensors").string(), gpt_weights_to_hf_gpt2(model),
                        {{"format", "pt"}});
  io::write_file_atomic((d / "config.json").string(), hf_gpt2_config_to_json(model.config(), eos));
}

// ---- a char model's tokenizer -------------------------------------------------------------------

namespace {

// tokenizer.json for CharTokenizer's ids: a BPE whose vocabulary is the characters (in id order) and
// which has no merges, no normalizer and no pre-tokenizer, so each character of the text is one
// token; the Fuse decoder joins the tokens without spaces.
json::Json char_tokenizer_json(const CharTokenizer& tok) {
  json::Json vocab = json::Json::object();
  for (size_t i = 0; i < tok.symbols().size(); ++i) vocab[tok.symbols()[i]] = i;
  json::Json model{{"type", "BPE"},
                   {"dropout", nullptr},
                   {"unk_token", nullptr},
                   {"continuing_subword_prefix", nullptr},
                   {"end_of_word_suffix", nullptr},
                   {"fuse_unk", false},
                   {"byte_fallback", false},
                   {"ignore_merges", false}};
  model["vocab"] = std::move(vocab);
  model["merges"] = json::Json::array();
  return json::Json{{"version", "1.0"},
                    {"truncation", nullptr},
                    {"padding", nullptr},
                    {"added_tokens", json::Json::array()},
                    {"normalizer", nullptr},
                    {"pre_tokenizer", nullptr},
                    {"post_processor", nullptr},
                    {"decoder", {{"type", "Fuse"}}},
                    {"model", model}};
}

// The characters of a tokenizer.json that char_tokenizer_json wrote (or any of that form: BPE, no
// merges, no normalizer, pre-tokenizer, post-processor or added tokens, the Fuse decoder), in id
// order; none for any other tokenizer.json.
std::optional<std::vector<std::string>> char_symbols(const json::Json& j) {
  auto null_at = [&](const char* key) { return j.contains(key) && j[key].is_null(); };
  if (!j.is_object() || !null_at("normalizer") || !null_at("pre_tokenizer") || !null_at("post_processor") ||
      !j.contains("decoder") || !j["decoder"].is_object() || j["decoder"].value("type", "") != "Fuse" ||
      (j.contains("added_tokens") && !j["added_tokens"].empty()) || !j.contains("model"))
    return std::nullopt;
  const json::Json& m = j["model"];
  if (!m.is_object() || m.value("type", "") != "BPE" || !m.contains("vocab") || !m["vocab"].is_object() ||
      (m.contains("merges") && !m["merges"].empty()))
    return std::nullopt;
  std::vector<std::string> symbols(m["vocab"].size());
  for (const auto& [piece, id] : m["vocab"].items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= std::ssize(symbols) ||
        !symbols[id.get<size_t>()].empty())
      return std::nullopt;
    symbols[id.get<size_t>()] = piece;
  }
  return symbols;
}

}  // namespace

std::optional<CharTokenizer> char_tokenizer_from_json(std::string_view text, const std::string& name) {
  json::Json j;
  try {
    j = json::parse(text);
  } catch (const std::exception& e) {
    throw DataError(fmt::format("{}: {}", name, e.what()));
  }
  auto symbols = char_symbols(j);
  if (!symbols) return std::nullopt;
  try {
    return CharTokenizer::from_symbols(std::move(*symbols));
  } catch (const DataError& e) {
    throw DataError(fmt::format("{}: {}", name, e.what()));
  }
}

GptCheckpoint read_hf_gpt2(const std::string& dir) {
  GptCheckpoint ck = read_hf_gpt2_model(dir);
  std::shared_ptr<Tokenizer> tok;
  const fs::path d(dir);
  std::error_code ec;
  // Where Gpt2BpeTokenizer::from_folder would read tokenizer.json, it may be a char model's instead.
  if (!(fs::exists(d / "vocab.json", ec) && fs::exists(d / "merges.txt", ec)) &&
      fs::exists(d / "tokenizer.json", ec)) {
    const std::string path = (d / "tokenizer.json").string();
    std::string text;
    try {
      text = io::read_file(path);
    } catch (const std::runtime_error& e) {  // as Gpt2BpeTokenizer::from_tokenizer_json reports it
      throw DataError(e.what());
    }
    if (auto chars = char_tokenizer_from_json(text, path))
      tok = std::make_shared<CharTokenizer>(std::move(*chars));
    else
      tok = std::make_shared<Gpt2BpeTokenizer>(Gpt2BpeTokenizer::from_tokenizer_json_string(text, path));
  } else {
    tok = std::make_shared<Gpt2BpeTokenizer>(Gpt2BpeTokenizer::from_folder(dir));
  }
  if (tok->vocab_size() != ck.info.config.vocab_size)
    throw DataError(fmt::format("{}: the tokenizer has {} tokens but config.json's vocab_size is {}", dir,
                                tok->vocab_size(), ck.info.config.vocab_size));
  ck.info.tokenizer = std::move(tok);
  return ck;
}

Gpt2BpeTokenizer byte_tokenizer_as_gpt2() {
  json::Json vocab = json::Json::object();
  for (int b = 0; b < 256; ++b) vocab[gpt2_bytes_to_unicode(std::string(1, static_cast<char>(b)))] = b;
  return Gpt2BpeTokenizer::from_strings(vocab.dump(), "#version: 0.2\n");
}

void write_hf_gpt2(const std::string& dir, const GPT& model, const Tokenizer& tokenizer) {
  if (const auto* chars = dynamic_cast<const CharTokenizer*>(&tokenizer)) {
    if (chars->vocab_size() != model.config().vocab_size)
      throw std::invalid_argument(fmt::format("export {}: the model has {} tokens, the tokenizer {}", dir,
                                              model.config().vocab_size, chars->vocab_size()));
    write_hf_gpt2_model(dir, model, -1);
    const fs::path d(dir);
    // A GPT-2 tokenizer's files from an earlier export would be read instead of tokenizer.json.
    std::error_code ec;
    for (const char* old : {"vocab.json", "merges.txt"}) fs::remove(d / old, ec);
    io::write_file_atomic((d / "tokenizer.json").string(), char_tokenizer_json(*chars).dump() + "\n");
    io::write_file_atomic(
        (d / "tokenizer_config.json").string(),
        json::Json{{"tokenizer_class", "PreTrainedTokenizerFast"}, {"clean_up_tokenization_spaces", false}}
                .dump(2) +
            "\n");
    io::write_file_atomic((d / "special_tokens_map.json").string(), "{}\n");
    return;
  }
  const auto* tok = dynamic_cast<const Gpt2BpeTokenizer*>(&tokenizer);
  std::optional<Gpt2BpeTokenizer> bytes;  // a byte model's tokenizer, as GPT-2's byte-level BPE
  if (!tok && dynamic_cast<const ByteTokenizer*>(&tokenizer)) tok = &bytes.emplace(byte_tokenizer_as_gpt2());
  if (!tok)
    throw std::invalid_argument(
        fmt::format("export {}: the model's tokenizer is {}: transformers has no tokenizer to read it (a "
                    "model with GPT-2's tokenizer, fine-tuned from a GPT-2 folder, with the byte or with the "
                    "char tokenizer can be exported)",
                    dir, tokenizer.kind()));
  if (tok->vocab_size() != model.config().vocab_size)
    throw std::invalid_argument(fmt::format("export {}: the model has {} tokens, the tokenizer {}", dir,
                                            model.config().vocab_size, tok->vocab_size()));
  write_hf_gpt2_model(dir, model, tok->specials().eos);
  tok->write_files(dir);
}

GptCheckpoint read_lm_model(const std::string& path) {
  return is_hf_folder(path) ? read_hf_gpt2(path) : read_gpt_checkpoint(path);
}

}  // namespace tg::nn
