// The language model's text and checkpoints: reading and checking text files, the byte and char
// tokenizers, training windows and evaluation chunks, and GPT checkpoints (round trip, and what a
// bad file gets).
#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "autograd/tape.hpp"
#include "io/safetensors.hpp"
#include "nn/family/gpt_family.hpp"
#include "nn/family/transformer_family.hpp"
#include "nn/gpt_text.hpp"
#include "nn/tokenizers/byte_char.hpp"
#include "nn_test_util.hpp"

using namespace tg;
using namespace tg::nn;
namespace fs = std::filesystem;

namespace {

std::string temp_file(const std::string& name, const std::string& bytes) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("tapegrad_gpt_text_{}", ::getpid());
  fs::create_directories(dir);
  const std::string path = (dir / name).string();
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

struct RemoveGptTextDir {
  ~RemoveGptTextDir() {
    std::error_code ec;
    fs::remove_all(fs::temp_directory_path() / fmt::format("tapegrad_gpt_text_{}", ::getpid()), ec);
  }
} remove_gpt_text_dir;

GptConfig small_gpt_config(int64_t vocab) {
  GptConfig c;
  c.vocab_size = vocab;
  c.block_size = 16;
  c.n_layer = 1;
  c.n_head = 2;
  c.n_embd = 8;
  return c;
}

}  // namespace

TEST_CASE("nn.gpt_text.files_that_are_not_text_are_refused") {
  CHECK(read_text_file(temp_file("ok.txt", "héllo\nwörld\n")) == "héllo\nwörld\n");
  CHECK_THROWS_WITH_AS(read_text_file(temp_file("empty.txt", "")),
                       doctest::Contains("empty.txt: the file is empty"), io::DataError);
  CHECK_THROWS_WITH_AS(read_text_file(temp_file("bin.dat", std::string("ab\ncd\0ef", 8))),
                       doctest::Contains("bin.dat:2: a NUL byte at byte offset 5"), io::DataError);
  CHECK_THROWS_WITH_AS(read_text_file(temp_file("latin1.txt", "caf\xe9\n")),
                       doctest::Contains("latin1.txt:1: invalid UTF-8 (byte 0xE9 at byte offset 3)"),
                       io::DataError);
  CHECK_THROWS_WITH_AS(read_text_file("/nonexistent/x.txt"), doctest::Contains("/nonexistent/x.txt"),
                       io::DataError);
}

TEST_CASE("nn.gpt_text.tokenizers") {
  const std::string text = "ab a\nπ≈3";
  const ByteTokenizer bytes;
  CHECK(bytes.vocab_size() == 256);
  const std::vector<int32_t> b = bytes.encode(text, nullptr, "t");
  CHECK(b.size() == text.size());
  CHECK(b[0] == 'a');
  CHECK(bytes.decode(b) == text);
  CHECK(bytes.byte_count(b) == static_cast<int64_t>(text.size()));

  const CharTokenizer chars = CharTokenizer::from_texts({text, "z"});
  CHECK(chars.symbols() == std::vector<std::string>{"\n", " ", "3", "a", "b", "z", "π", "≈"});
  const std::vector<int32_t> c = chars.encode(text, nullptr, "t");
  CHECK(c == std::vector<int32_t>{3, 4, 1, 3, 0, 6, 7, 2});
  CHECK(chars.decode(c) == text);
  CHECK(chars.byte_count(c) == static_cast<int64_t>(text.size()));
  CHECK_THROWS_WITH_AS(
      chars.encode("ab\nqa", nullptr, "--prompt"),
      doctest::Contains("--prompt: line 2, column 1: character 'q' (U+0071) is not in the model's "
                        "vocabulary (char tokenizer: the 8 characters"),
      io::DataError);
  // One line: its column alone (lm tokenize names the line of stdin); a control character by its code.
  CHECK_THROWS_WITH_AS(chars.encode("ab\r", nullptr, "stdin:2"),
                       doctest::Contains("stdin:2: column 3: control character U+000D is not in the model's"),
                       io::DataError);
  CHECK(chars.label(1) == "\u2423");
  CHECK(chars.label(0) == "\\n");
  CHECK(chars.label(6) == "π");
  CHECK(bytes.label(0xCF) == "\\xCF");
  CHECK(bytes.label(7) == "\\x07");
  // A saved vocabulary must be one character per entry, in order, no repeats.
  CHECK_THROWS_AS(CharTokenizer::from_symbols(std::vector<std::string>{"b", "a"}), io::DataError);
  CHECK_THROWS_AS(CharTokenizer::from_symbols(std::vector<std::string>{"ab"}), io::DataError);
  CHECK_THROWS_AS(CharTokenizer::from_symbols(std::vector<std::string>{}), io::DataError);
  CHECK(make_lm_tokenizer("char", {text})->kind() == "char");
  CHECK_THROWS_AS(make_lm_tokenizer("word", {text}), std::invalid_argument);
}

TEST_CASE("nn.gpt_text.windows_and_chunks") {
  std::vector<int32_t> ids(50);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
  Generator g(1), g2(1);
  const Windows w = random_windows(ids, 64, 10, g);
  std::set<int32_t> starts;
  for (int64_t r = 0; r < 64; ++r) {
    const int32_t o = w.x[static_cast<size_t>(r * 10)];
    starts.insert(o);
    CHECK(o + 10 <= 49);
    for (int64_t t = 0; t < 10; ++t) {
      CHECK(w.x[static_cast<size_t>(r * 10 + t)] == o + t);
      CHECK(w.y[static_cast<size_t>(r * 10 + t)] == o + t + 1);
    }
  }
  CHECK(starts.size() > 20);
  CHECK(random_windows(ids, 64, 10, g2).x == w.x);
  CHECK_THROWS_AS(random_windows(ids, 1, 50, g), std::invalid_argument);

  // Every token but the first predicted once, whatever the chunk length and batch.
  CHECK(eval_chunk_count(50, 10) == 5);
  CHECK(eval_chunk_count(51, 10) == 5);
  CHECK(eval_chunk_count(52, 10) == 6);
  CHECK(eval_chunk_count(1, 10) == 0);
  GPT m(small_gpt_config(50), 3);
  double first = NAN;
  for (int64_t len : {16, 7}) {
    for (int64_t batch : {1, 3}) {
      const LossSum s =
          lm_loss_sum(m, CharTokenizer::from_symbols(std::vector<std::string>{"a"}), {}, len, batch, 0, 0);
      CHECK(s.count == 0);
      const LossSum t = lm_loss_sum(m, ByteTokenizer(), ids, len, batch, 0, eval_chunk_count(50, len));
      CHECK(t.count == 49);
      CHECK(t.bytes == 49);
      if (len == 16) {
        if (std::isnan(first)) first = t.nats;
        CHECK(t.nats == doctest::Approx(first).epsilon(1e-6));  // the batch size changes nothing
      }
    }
  }
  CHECK(m.is_training());  // restored after evaluating in eval mode
}

TEST_CASE("nn.gpt_checkpoint.round_trip_and_bad_files") {
  const auto tok =
      std::make_shared<CharTokenizer>(CharTokenizer::from_texts({std::string_view("hello world")}));
  GptConfig c = small_gpt_config(tok->vocab_size());
  GPT m(c, 5);
  GptCheckpointInfo info;
  info.config = c;
  info.tokenizer = tok;
  info.extra = {{"train.lr", "0.001"}};
  const std::string path = temp_file("m.safetensors", "");
  save_gpt_checkpoint(path, m, info);
  const GptCheckpoint ck = read_gpt_checkpoint(path);
  CHECK(ck.info.config.n_embd == 8);
  CHECK(dynamic_cast<const CharTokenizer&>(*ck.info.tokenizer).symbols() == tok->symbols());
  CHECK(ck.info.extra.at("train.lr") == "0.001");
  CHECK_FALSE(ck.has_optimizer_state());
  CHECK(ck.file.metadata.at("config") ==
        R"({"vocab_size":8,"block_size":16,"n_layer":1,"n_head":2,"n_embd":8,"dropout":0.0,"bias":true})");
  const auto loaded = load_gpt(ck, path);
  const std::vector<int32_t> x = {1, 2, 3, 4};
  NoGradGuard ng;
  m.eval();
  CHECK(loaded->forward(x, 1, 4).to_vector() == m.forward(x, 1, 4).to_vector());

  // Metadata that lies about the weights, a translate checkpoint, unknown config keys.
  io::TensorFile f = io::read_safetensors(path);
  auto refused = [&](const std::string& key, const std::string& value, const std::string& message) {
    io::TensorFile g = f;
    g.metadata[key] = value;
    CAPTURE(key);
    CHECK_THROWS_WITH_AS(parse_gpt_checkpoint(g, "x.safetensors"), doctest::Contains(message.c_str()),
                         io::SafetensorsError);
  };
  refused("config",
          R"({"vocab_size":8,"block_size":16,"n_layer":1000,"n_head":2,"n_embd":8,"dropout":0,"bias":true})",
          "describes a model of");
  refused(
      "config",
      R"({"vocab_size":8,"block_size":16,"n_layer":1,"n_head":2,"n_embd":8,"dropout":0,"bias":true,"x":1})",
      "unknown field \"x\"");
  refused("config",
          R"({"vocab_size":8,"block_size":16,"n_layer":"1","n_head":2,"n_embd":8,"dropout":0,"bias":true})",
          "field \"n_layer\"");
  refused("config", "{", "__metadata__ \"config\"");
  refused("format", kCheckpointFormat, "is a translation model, not a language model: use translate");
  refused("tokenizer", "byte", "config vocab_size 8 but the byte tokenizer has 256 tokens");
  refused("vocab", R"(["a","a"])", "__metadata__ \"vocab\"");
  io::TensorFile g = f;
  g.metadata.erase("format");
  CHECK_THROWS_WITH_AS(parse_gpt_checkpoint(g, "x.safetensors"), doctest::Contains("has no \"format\""),
                       io::SafetensorsError);
  // Right count, wrong names: load_weights names them and changes nothing.
  g = f;
  g.tensors[0].first = "lm_head.weight";
  const GptCheckpoint renamed = parse_gpt_checkpoint(g, "x.safetensors");
  CHECK_THROWS_WITH_AS(load_gpt(renamed, "x.safetensors"),
                       doctest::Contains("unexpected tensors: lm_head.weight"), io::SafetensorsError);
  // Non-finite weights are never written.
  Tensor w = m.parameter("transformer.ln_f.bias");
  w.data()[0] = NAN;
  CHECK_THROWS_WITH_AS(save_gpt_checkpoint(path, m, info), doctest::Contains("transformer.ln_f.bias"),
                       std::runtime_error);
  CHECK(read_gpt_checkpoint(path).file.tensors.size() == f.tensors.size());
}

// The fields GPT-2 added to the config are optional: written only when not at their defaults (the
// config above is nanoGPT's, unchanged), read back, and a config without them is today's model.
TEST_CASE("nn.gpt_checkpoint.optional_config_fields") {
  GptConfig c = small_gpt_config(256);
  CHECK(gpt_config_to_json(c) ==
        R"({"vocab_size":256,"block_size":16,"n_layer":1,"n_head":2,"n_embd":8,"dropout":0.0,"bias":true})");
  c.activation = "gelu_new";
  c.tie_word_embeddings = false;
  const std::string text = gpt_config_to_json(c);
  CHECK(text == R"({"vocab_size":256,"block_size":16,"n_layer":1,"n_head":2,"n_embd":8,"dropout":0.0,)"
                R"("bias":true,"activation":"gelu_new","tie_word_embeddings":false})");
  c.layer_norm_epsilon = 1e-6f;
  const GptConfig back = gpt_config_from_json(gpt_config_to_json(c));
  CHECK(back.activation == "gelu_new");
  CHECK(back.layer_norm_epsilon == 1e-6f);
  CHECK_FALSE(back.tie_word_embeddings);
  const GptConfig plain = gpt_config_from_json(
      R"({"vocab_size":256,"block_size":16,"n_layer":1,"n_head":2,"n_embd":8,"dropout":0.0,"bias":true})");
  CHECK(plain.activation == "gelu");
  CHECK(plain.layer_norm_epsilon == 1e-5f);
  CHECK(plain.tie_word_embeddings);
  CHECK_THROWS_WITH_AS(
      gpt_config_from_json(R"({"vocab_size":256,"block_size":16,"n_layer":1,"n_head":2,"n_embd":8,)"
                           R"("dropout":0.0,"bias":true,"activation":"swish"})"),
      doctest::Contains("activation must be \"gelu\" or \"gelu_new\", got \"swish\""), std::invalid_argument);
  CHECK_THROWS_WITH_AS(
      gpt_config_from_json(R"({"vocab_size":256,"block_size":16,"n_layer":1,"n_head":2,"n_embd":8,)"
                           R"("dropout":0.0,"bias":true,"tie_word_embeddings":0})"),
      doctest::Contains("field \"tie_word_embeddings\""), std::runtime_error);

  // An untied model's checkpoint: lm_head.weight is one of its tensors, and it loads back.
  GPT m(c, 7);
  GptCheckpointInfo info;
  info.config = c;
  info.tokenizer = std::make_shared<ByteTokenizer>();
  const std::string path = temp_file("untied.safetensors", "");
  save_gpt_checkpoint(path, m, info);
  const GptCheckpoint ck = read_gpt_checkpoint(path);
  CHECK(ck.file.find("lm_head.weight") != nullptr);
  CHECK(ck.info.config.layer_norm_epsilon == 1e-6f);
  const auto loaded = load_gpt(ck, path);
  const std::vector<int32_t> x = {1, 2, 3, 4};
  NoGradGuard ng;
  m.eval();
  CHECK(loaded->forward(x, 1, 4).to_vector() == m.forward(x, 1, 4).to_vector());

  // A default that is not of its member's type is the family's bug, said so.
  int64_t n = 0;
  const ConfigField bad[] = {{"n", &n, ConfigField::Value(1.5f)}};
  CHECK_THROWS_AS(fields_from_json("{}", bad), std::logic_error);
}

// Over a large vocabulary lm_loss_sum runs the head and the loss over row chunks (at most 8M logits
// at once): the same sum as the loss over the whole batch.
TEST_CASE("nn.gpt_text.loss_sum_in_row_chunks") {
  GptConfig c;
  c.vocab_size = 3000;  // 2,796 rows of logits per chunk: 3,072 rows make two
  c.block_size = 256;
  c.n_layer = 1;
  c.n_head = 2;
  c.n_embd = 8;
  GPT m(c, 4);
  Generator g(5);
  std::vector<int32_t> ids(12 * 256 + 1);
  for (auto& id : ids) id = static_cast<int32_t>(g.below(3000));
  const LossSum s = lm_loss_sum(m, ByteTokenizer(), ids, 256, 12, 0, 12);
  CHECK(s.count == 12 * 256);
  NoGradGuard ng;
  m.eval();
  const std::vector<int32_t> x(ids.begin(), ids.end() - 1), y(ids.begin() + 1, ids.end());
  const double whole = static_cast<double>(m.loss(x, y, 12, 256).item()) * 12 * 256;
  CHECK(s.nats == doctest::Approx(whole).epsilon(1e-6));
}
