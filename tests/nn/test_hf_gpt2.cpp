// GPT-2 in the Hugging Face format (nn/family/hf_gpt2.hpp): the name map and the Conv1D layout both
// ways, config.json, bad folders (no Python); and parity with transformers (tests/nn/hf_gpt2_parity.py
// run with the Hugging Face venv, SKIPPED where it cannot import transformers): random tiny
// GPT2LMHeadModels of several shapes made and saved there, read here: the logits and the loss, a
// greedy continuation, fp16 and bf16 files, one AdamW step, and our export read back by
// from_pretrained.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "autograd/tape.hpp"
#include "io/file.hpp"
#include "io/json.hpp"
#include "io/text.hpp"
#include "nn/family/hf_gpt2.hpp"
#include "nn/gpt_sample.hpp"
#include "nn/optim.hpp"
#include "nn/tokenizers/byte_char.hpp"
#include "nn/tokenizers/gpt2_bpe.hpp"
#include "nn_test_util.hpp"
#include "tests/python.hpp"
#include "tests/skip.hpp"
#include "tests/test_files.hpp"

using namespace tg;
using namespace tg::nn;
namespace fs = std::filesystem;

namespace {

GptConfig small_gpt2(bool tied = true) {
  GptConfig c;
  c.vocab_size = 13;
  c.block_size = 10;
  c.n_layer = 2;
  c.n_head = 3;
  c.n_embd = 12;
  c.activation = "gelu_new";
  c.tie_word_embeddings = tied;
  return c;
}

std::vector<float> read_floats(const std::string& path) {
  const std::string bytes = io::read_file(path);
  std::vector<float> v(bytes.size() / sizeof(float));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(float));
  return v;
}

void write_floats(const std::string& path, const std::vector<float>& v) {
  io::write_file_atomic(path,
                        std::string_view(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float)));
}

// max |a - b| / max(1, max |b|): the logits' error relative to their scale.
double relative_diff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  double d = 0, scale = 1;
  for (size_t i = 0; i < a.size(); ++i) {
    d = std::max(d, static_cast<double>(std::abs(a[i] - b[i])));
    scale = std::max(scale, static_cast<double>(std::abs(b[i])));
  }
  return d / scale;
}

std::vector<int32_t> flat_ids(const json::Json& rows) {
  std::vector<int32_t> out;
  for (const auto& r : rows)
    for (const auto& v : r) out.push_back(v.get<int32_t>());
  return out;
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no exception)";
}

}  // namespace

// The name map: our parameters -> GPT2LMHeadModel's names and layout -> back, the same numbers; a
// GPT2Model's names (no "transformer."), the attention buffers and a tied lm_head.weight accepted.
TEST_CASE("hf_gpt2.name_map_round_trip") {
  for (const bool tied : {true, false}) {
    CAPTURE(tied);
    const GptConfig c = small_gpt2(tied);
    GPT m(c, 3);
    const NamedTensors ours = m.named_parameters();
    const NamedTensors hf = gpt_weights_to_hf_gpt2(m);
    REQUIRE(hf.size() == ours.size());
    for (size_t i = 0; i < hf.size(); ++i) {
      CHECK(hf[i].first == ours[i].first);  // the same names: only the layout differs
      if (hf[i].first.ends_with("mlp.c_fc.weight"))
        CHECK(hf[i].second.shape() == Shape{12, 48});  // [in, out]
    }
    // Through a file and back.
    io::TensorFile f;
    f.tensors = hf;
    const NamedTensors back = hf_gpt2_weights_to_gpt(f, c, "m.safetensors");
    REQUIRE(back.size() == ours.size());
    for (size_t i = 0; i < back.size(); ++i) {
      CAPTURE(ours[i].first);
      CHECK(back[i].first == ours[i].first);
      CHECK(back[i].second.to_vector() == ours[i].second.to_vector());
    }
    // GPT2Model's names, the causal-mask buffers of older transformers, a tied head listed anyway.
    io::TensorFile g;
    for (const auto& [n, t] : hf) {
      const std::string bare = n.starts_with("transformer.") ? n.substr(12) : n;
      g.tensors.emplace_back(bare, t);
      if (bare.ends_with("ln_1.weight")) {
        const std::string h = bare.substr(0, bare.size() - std::string("ln_1.weight").size());
        g.tensors.emplace_back(h + "attn.bias", Tensor::ones({1, 1, 10, 10}));
        g.tensors.emplace_back(h + "attn.masked_bias", Tensor::scalar(-1e4f));
      }
    }
    if (tied) g.tensors.emplace_back("lm_head.weight", m.transformer.wte.weight);
    const NamedTensors bare_back = hf_gpt2_weights_to_gpt(g, c, "m.safetensors");
    REQUIRE(bare_back.size() == ours.size());
    for (size_t i = 0; i < bare_back.size(); ++i)
      CHECK(bare_back[i].second.to_vector() == ours[i].second.to_vector());
  }
}

TEST_CASE("hf_gpt2.config_json") {
  // GPT2Config's defaults where a key is absent: GPT-2 124M.
  const GptConfig d = hf_gpt2_config_from_json(R"({"model_type":"gpt2"})", "config.json");
  CHECK(d.vocab_size == 50257);
  CHECK(d.block_size == 1024);
  CHECK(d.n_embd == 768);
  CHECK(d.n_layer == 12);
  CHECK(d.n_head == 12);
  CHECK(d.activation == "gelu_new");
  CHECK(d.tie_word_embeddings);
  CHECK(d.dropout == 0.0f);
  // And back: what we write reads as the same config.
  GptConfig c = small_gpt2(false);
  c.layer_norm_epsilon = 1e-4f;
  c.activation = "gelu";
  const std::string text = hf_gpt2_config_to_json(c, 5);
  CHECK(text.find("\"architectures\": [\n    \"GPT2LMHeadModel\"\n  ]") != std::string::npos);
  CHECK(text.find("\"layer_norm_epsilon\": 0.0001,") != std::string::npos);
  CHECK(text.find("\"eos_token_id\": 5,") != std::string::npos);
  const GptConfig back = hf_gpt2_config_from_json(text, "config.json");
  CHECK(gpt_config_to_json(back) == gpt_config_to_json(c));
  CHECK(hf_gpt2_config_to_json(c, -1).find("\"eos_token_id\": null,") != std::string::npos);
  for (const char* tanh : {"gelu_new", "gelu_pytorch_tanh", "gelu_fast"})
    CHECK(hf_gpt2_config_from_json(fmt::format(R"({{"activation_function":"{}"}})", tanh), "c").activation ==
          "gelu_new");

  auto refused = [](const std::string& json, const std::string& message) {
    CAPTURE(json);
    CHECK_THROWS_WITH_AS(hf_gpt2_config_from_json(json, "dir/config.json"),
                         doctest::Contains(("dir/config.json: " + message).c_str()), io::DataError);
  };
  refused(
      R"({"activation_function":"relu"})",
      "\"activation_function\": \"relu\" is not supported (gelu, gelu_new, gelu_pytorch_tanh, gelu_fast)");
  refused(R"({"model_type":"llama"})", "\"model_type\": \"llama\" is not a GPT-2 (\"gpt2\")");
  refused(R"({"n_head":"12"})", "\"n_head\":");
  refused(R"({"n_layer":1.5})", "\"n_layer\":");
  refused(R"({"n_inner":100})", "\"n_inner\": 100 is not supported (only 4 n_embd = 3072, or null)");
  refused(R"({"add_cross_attention":true})", "\"add_cross_attention\": true is not supported");
  refused(R"({"scale_attn_by_inverse_layer_idx":true})", "\"scale_attn_by_inverse_layer_idx\": true");
  refused(R"({"n_embd":100})", "GptConfig: n_embd (100) must be divisible by n_head (12)");
  refused(R"({"layer_norm_epsilon":-1})", "GptConfig: layer_norm_epsilon must be a finite number > 0");
  refused("[1]", "expected a JSON object, got array");
  refused("{", "invalid JSON");
  CHECK(hf_gpt2_config_from_json(R"({"n_inner":null,"n_ctx":1024})", "c").n_embd == 768);
}

// Folders that are not a GPT-2 this GPT can be: each error names the file and the key or tensor.
TEST_CASE("hf_gpt2.bad_folders") {
  const GptConfig c = small_gpt2();
  GPT m(c, 5);
  const std::string dir = testing::scratch("hf_bad");
  write_hf_gpt2_model(dir, m, -1);
  const std::string config = dir + "/config.json", weights = dir + "/model.safetensors";
  const std::string good_config = io::read_file(config), good_weights = io::read_file(weights);
  // It reads back as the model.
  const GptCheckpoint ck = read_hf_gpt2_model(dir);
  const auto loaded = load_gpt(ck, dir);
  for (const auto& [n, p] : m.named_parameters()) CHECK(loaded->parameter(n).to_vector() == p.to_vector());
  CHECK(io::read_safetensors(weights).metadata.at("format") == "pt");
  // Exporting where a file is in the folder's way: an error naming the path, not the library's.
  CHECK(message_of([&] {
          write_hf_gpt2_model(config, m, -1);
        }).starts_with("export " + config + ": cannot make the folder: "));

  auto restore = [&] {
    io::write_file_atomic(config, good_config);
    io::write_file_atomic(weights, good_weights);
  };
  auto fails_with = [&](const std::string& message) {
    const std::string got = message_of([&] { load_gpt(read_hf_gpt2_model(dir), dir); });
    CAPTURE(got);
    CHECK(got.find(message) != std::string::npos);
    restore();
  };
  auto set_config = [&](const std::string& key, const std::string& value) {
    json::Json j = json::parse(good_config);
    j[key] = json::parse(value);
    io::write_file_atomic(config, j.dump());
  };
  auto set_weights = [&](const std::function<void(NamedTensors&)>& edit) {
    io::TensorFile f = io::read_safetensors(weights);
    edit(f.tensors);
    io::write_safetensors(weights, f.tensors, f.metadata);
  };

  fs::remove(config);
  fails_with(dir + ": no config.json: not a Hugging Face model folder");
  fs::remove(weights);
  fails_with(dir + ": no model.safetensors");
  fs::remove(weights);
  io::write_file_atomic(dir + "/pytorch_model.bin", "x");
  fails_with(
      "it has pytorch_model.bin only: GPT2LMHeadModel.from_pretrained(DIR).save_pretrained(DIR) writes");
  fs::remove(dir + "/pytorch_model.bin");
  set_config("activation_function", "\"swish\"");
  fails_with(config + ": \"activation_function\": \"swish\" is not supported");
  set_config("model_type", "\"gpt_neo\"");
  fails_with(config + ": \"model_type\": \"gpt_neo\" is not a GPT-2");
  // Shapes against the config: a vocabulary, a width, a layer count, positions that disagree.
  set_config("vocab_size", "14");
  fails_with(weights + ": its weights (");
  set_config("n_layer", "3");
  fails_with("config and weights disagree; missing tensors: transformer.h.2.ln_1.weight, ");
  // A tensor dropped or added by hand: the count is off, and the names say which.
  set_weights([](NamedTensors& t) {
    std::erase_if(t, [](const auto& x) { return x.first == "transformer.h.1.ln_2.bias"; });
  });
  fails_with("config and weights disagree; missing tensors: transformer.h.1.ln_2.bias");
  set_weights([](NamedTensors& t) { t.emplace_back("transformer.extra", Tensor::zeros({3})); });
  fails_with("config and weights disagree; unexpected tensors: transformer.extra");
  // A weight that is not finite: refused on loading, naming it (it would only show as a NaN loss).
  set_weights([](NamedTensors& t) {
    for (auto& [n, x] : t)
      if (n == "transformer.h.0.ln_1.weight") x.data()[3] = std::numeric_limits<float>::quiet_NaN();
  });
  fails_with(dir +
             ": parameter transformer.h.0.ln_1.weight (nan at element 3 of [12]) is not finite; not loaded");
  // A hostile layer count: the message stays short (no list of the names it would need).
  set_config("n_layer", "100000");
  {
    const std::string got = message_of([&] { load_gpt(read_hf_gpt2_model(dir), dir); });
    CAPTURE(got);
    CHECK(got.find("config and weights disagree") != std::string::npos);
    CHECK(got.find("missing tensors") == std::string::npos);
    CHECK(got.size() < 1000);
    restore();
  }
  set_config("n_positions", "9");
  fails_with(weights + ": its weights");
  set_config("tie_word_embeddings", "false");
  fails_with("config and weights disagree");
  // The right count but not the right tensors: named.
  set_weights([](NamedTensors& t) {
    for (auto& [n, x] : t)
      if (n == "transformer.h.1.mlp.c_fc.weight") x = Tensor::zeros({48, 12});  // ours, not Conv1D's
  });
  fails_with(
      weights +
      " is not the GPT-2 config.json describes: wrong shapes: transformer.h.1.mlp.c_fc.weight is [48, 12], "
      "config.json says [12, 48]");
  set_weights([](NamedTensors& t) {
    for (auto& [n, x] : t)
      if (n == "transformer.ln_f.bias") n = "transformer.ln_g.bias";
  });
  fails_with("missing tensors: transformer.ln_f.bias; unexpected tensors: transformer.ln_g.bias");
  set_weights([](NamedTensors& t) {
    for (auto& [n, x] : t)
      if (n == "transformer.wpe.weight") n = "wte.weight";
  });
  fails_with(weights + ": tensors given twice (with and without \"transformer.\"): wte.weight");
  // An untied config whose file names its head wrongly.
  set_config("tie_word_embeddings", "false");
  set_weights([](NamedTensors& t) { t.emplace_back("lm_head.weigth", Tensor::zeros({13, 12})); });
  fails_with(
      "missing tensors: lm_head.weight (config.json: tie_word_embeddings false); unexpected tensors: "
      "lm_head.weigth");  // named as the file names it
  set_weights([](NamedTensors& t) {
    std::erase_if(t, [](const auto& p) { return p.first == "transformer.ln_f.bias"; });
  });
  fails_with(weights + ": its weights");
  // A safetensors file that is not one: the reader's own message, naming the file.
  io::write_file_atomic(weights, "not a safetensors file");
  fails_with(weights);
  // Still good after all that.
  CHECK_NOTHROW(load_gpt(read_hf_gpt2_model(dir), dir));

  // The tokenizer: none, then one whose ids reach past the model's vocabulary (257 against 13).
  CHECK_THROWS_WITH_AS(read_hf_gpt2(dir), doctest::Contains(dir.c_str()), io::DataError);
  std::string vocab = "{";
  for (int b = 0; b < 256; ++b)
    vocab += json::quote(gpt2_bytes_to_unicode(std::string(1, static_cast<char>(b)))) + ":" +
             std::to_string(b) + ",";
  vocab += "\"<|endoftext|>\":256}";
  const Gpt2BpeTokenizer tok = Gpt2BpeTokenizer::from_strings(vocab, "#version: 0.2\n");
  tok.write_files(dir);
  CHECK_THROWS_WITH_AS(
      read_hf_gpt2(dir),
      doctest::Contains((dir + ": the tokenizer has 257 tokens but config.json's vocab_size is 13").c_str()),
      io::DataError);
  CHECK_THROWS_WITH_AS(write_hf_gpt2(dir, m, tok),
                       doctest::Contains("the model has 13 tokens, the tokenizer 257"),
                       std::invalid_argument);
  // Byte and char models export (their tokenizers in forms transformers reads) when the vocabulary is
  // the model's; a char model's folder reads back with its characters.
  CHECK_THROWS_WITH_AS(write_hf_gpt2(dir, m, ByteTokenizer()),
                       doctest::Contains("the model has 13 tokens, the tokenizer 256"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(write_hf_gpt2(dir, m, CharTokenizer::from_texts({"abc"})),
                       doctest::Contains("the model has 13 tokens, the tokenizer 3"), std::invalid_argument);
  const std::string chars_dir = dir + "_chars";
  const CharTokenizer chars = CharTokenizer::from_texts({"\n\"ab cd\\ef g ☕é"});
  REQUIRE(chars.vocab_size() == 13);
  write_hf_gpt2(chars_dir, m, chars);
  const GptCheckpoint back = read_hf_gpt2(chars_dir);
  REQUIRE(back.info.tokenizer->kind() == "char");
  CHECK(dynamic_cast<const CharTokenizer&>(*back.info.tokenizer).symbols() == chars.symbols());
  CHECK_FALSE(fs::exists(fs::path(chars_dir) / "vocab.json"));
}

// The byte tokenizer written as GPT-2's byte-level BPE gives ByteTokenizer's ids on any bytes
// (invalid UTF-8, NUL, whitespace runs that GPT-2's pre-tokenizer splits) and decodes them back.
TEST_CASE("hf_gpt2.byte_tokenizer_as_gpt2") {
  const Gpt2BpeTokenizer bpe = byte_tokenizer_as_gpt2();
  CHECK(bpe.vocab_size() == 256);
  CHECK(bpe.specials().eos == -1);
  const ByteTokenizer bytes;
  std::string all;
  for (int b = 255; b >= 0; --b) all += static_cast<char>(b);
  for (const std::string& text :
       {std::string("she isn't  here:\n\n café ☕ 42"), std::string("\xff\xfe ab\xc3"),
        std::string(1, '\0') + "x", all, std::string()}) {
    const std::vector<int32_t> ids = bpe.encode(text);
    CHECK(ids == bytes.encode(text));
    CHECK(bpe.decode(ids) == text);
  }
}

// Parity with transformers (the HF venv): see the top of the file.
TEST_CASE("hf_gpt2.parity.transformers") {
  if (!testing::hf_python_can_import("transformers")) TG_SKIP(testing::hf_python_lacks("transformers"));
  const fs::path dir = testing::scratch("hf_parity");
  fs::create_directories(dir);
  const std::string make = fmt::format("'{}' {}/tests/nn/hf_gpt2_parity.py make {}", testing::hf_python(),
                                       TG_SOURCE_DIR, dir.string());
  REQUIRE_MESSAGE(std::system(make.c_str()) == 0, "failed: " << make);

  for (const char* name : {"tied_odd", "untied_exact", "odd_width"}) {
    CAPTURE(name);
    const std::string folder = (dir / name).string();
    const json::Json ref = json::parse(io::read_file(folder + ".json"));
    const int64_t B = static_cast<int64_t>(ref["ids"].size()), T = static_cast<int64_t>(ref["ids"][0].size());
    const std::vector<int32_t> x = flat_ids(ref["ids"]), y = flat_ids(ref["targets"]);
    const GptCheckpoint ck = read_hf_gpt2_model(folder);
    const auto m = load_gpt(ck, folder);

    // Logits and loss, in fp32 and from the fp16 and bf16 files.
    std::vector<float> logits;
    {
      NoGradGuard ng;
      logits = m->forward(x, B, T).to_vector();
      const double d = relative_diff(logits, read_floats(folder + ".logits"));
      const double loss = m->loss(x, y, B, T).item(), want = ref["loss"].get<double>();
      MESSAGE(fmt::format("{} (transformers {}, torch {}): logits {:.2e} relative, loss {:.7f} vs {:.7f}",
                          name, ref["versions"]["transformers"].get<std::string>(),
                          ref["versions"]["torch"].get<std::string>(), d, loss, want));
      CHECK(d <= 1e-5);
      CHECK(std::abs(loss - want) <= 1e-5 * want);
      for (const char* suffix : {"_f16", "_bf16"}) {
        CAPTURE(suffix);
        const auto low = load_gpt(read_hf_gpt2_model(folder + suffix), folder + suffix);
        CHECK(relative_diff(low->forward(x, B, T).to_vector(), read_floats(folder + suffix + ".logits")) <=
              1e-5);
      }
    }
    // The mapping is what makes them equal: with the other GELU the logits are off by far more.
    if (std::string(name) == "tied_odd") {
      GptCheckpoint other = read_hf_gpt2_model(folder);
      other.info.config.activation = "gelu";
      NoGradGuard ng;
      CHECK(relative_diff(load_gpt(other, folder)->forward(x, B, T).to_vector(),
                          read_floats(folder + ".logits")) > 1e-4);
    }

    // A greedy continuation (with the key/value cache) is transformers' token for token.
    std::vector<int32_t> prompt;
    for (const auto& v : ref["prompt"]) prompt.push_back(v.get<int32_t>());
    std::vector<int32_t> want;
    for (const auto& v : ref["greedy"]) want.push_back(v.get<int32_t>());
    Generator gen(1);
    CHECK(generate(*m, prompt, static_cast<int64_t>(want.size()), {.temperature = 0.0}, gen) == want);

    // One AdamW step as lm train takes it.
    m->train();
    m->zero_grad();
    const Tensor loss = m->loss(x, y, B, T);
    backward(loss);
    const NamedTensors params = m->named_parameters();
    clip_grad_norm(params, 1.0);
    AdamW opt(params, {.lr = ref["lr"].get<float>(),
                       .beta1 = 0.9f,
                       .beta2 = 0.99f,
                       .eps = 1e-8f,
                       .weight_decay = ref["weight_decay"].get<float>(),
                       .decay_matrices_only = true});
    opt.step();
    // The clipped gradients are transformers' (read through the name map: the same layout as ours).
    io::TensorFile grad_file = io::read_safetensors(folder + "_grads.safetensors");
    const NamedTensors their_grads = hf_gpt2_weights_to_gpt(std::move(grad_file), ck.info.config, folder);
    double grad_scale = 0, grad_diff = 0;
    for (size_t k = 0; k < params.size(); ++k)
      for (int64_t i = 0; i < params[k].second.numel(); ++i) {
        const double g = params[k].second.grad().data()[i], t = their_grads[k].second.data()[i];
        grad_scale = std::max(grad_scale, std::abs(t));
        grad_diff = std::max(grad_diff, std::abs(g - t));
      }
    CHECK(grad_diff <= 1e-5 * grad_scale);
    // The parameters after the step. Adam's first step is lr g / (|g| + eps) (eps 1e-8) plus the
    // decay: where |g| is far above eps it is +-lr whatever the rounding, but where |g| is near eps
    // it magnifies the gradient's rounding error (the key bias c_attn.bias[d, 2d) has no gradient at
    // all: adding b to every key adds q.b to a whole row of scores, which the softmax ignores, so
    // both sides hold rounding noise there; a GELU near zero for every row leaves a column of
    // mlp.c_proj.weight with a gradient of 1e-9). Those elements, 0 < |g| < 1e-6 on either side, are
    // checked through the gradient above; the others after the step (a gradient of exactly 0 on both
    // sides, the embeddings of tokens not in the batch, leaves only the decay: compared).
    const GptCheckpoint stepped = read_hf_gpt2_model(folder + "_stepped");
    const auto theirs = load_gpt(stepped, folder + "_stepped");
    double worst = 0;
    std::string worst_name;
    int64_t ill_conditioned = 0, compared = 0;
    for (size_t k = 0; k < params.size(); ++k) {
      const auto& [n, p] = params[k];
      const Tensor t = theirs->parameter(n);
      for (int64_t i = 0; i < p.numel(); ++i) {
        const float g = p.grad().data()[i], t_g = their_grads[k].second.data()[i];
        if ((g != 0 || t_g != 0) && std::min(std::abs(g), std::abs(t_g)) < 1e-6f) {
          ++ill_conditioned;
          continue;
        }
        ++compared;
        if (const double diff = std::abs(p.data()[i] - t.data()[i]); diff > worst)
          worst = diff, worst_name = fmt::format("{}[{}]", n, i);
      }
    }
    MESSAGE(fmt::format(
        "{}: clipped gradients within {:.2e} of transformers' (largest {:.2e}); after one AdamW "
        "step (lr {}) the largest parameter difference is {:.2e} ({}) over {} elements; {} with a "
        "gradient below 1e-6 left to the gradient check",
        name, grad_diff, grad_scale, ref["lr"].get<double>(), worst, worst_name, compared, ill_conditioned));
    CHECK(worst <= 1e-5);
    CHECK(ill_conditioned * 20 < compared);  // the exception stays one

    // Our export of the stepped model, read by from_pretrained: the same logits.
    m->eval();
    const std::string exported = (dir / (std::string(name) + "_exported")).string();
    write_hf_gpt2_model(exported, *m, 0);
    {
      NoGradGuard ng;
      write_floats(exported + ".logits", m->forward(x, B, T).to_vector());
    }
    io::write_file_atomic(exported + ".ids", ref["ids"].dump());
    const std::string check =
        fmt::format("'{}' {}/tests/nn/hf_gpt2_parity.py check-export {} {} {}", testing::hf_python(),
                    TG_SOURCE_DIR, exported, exported + ".ids", exported + ".logits");
    CHECK_MESSAGE(std::system(check.c_str()) == 0, "failed: " << check);
  }
}
