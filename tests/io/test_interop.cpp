// safetensors files written by Python (numpy + struct + json, the way a PyTorch user without the
// `safetensors` package would) load here, and files written here read back in Python; checkpoints
// load into torch.nn.Transformer and give the same loss there.
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "io/json.hpp"
#include "io/safetensors.hpp"
#include "nn/family/transformer_family.hpp"
#include "tests/apps/cli_test_util.hpp"
#include "tests/python.hpp"
#include "tests/skip.hpp"
#include "tests/test_files.hpp"

using namespace tg;
using namespace tg::nn;
using namespace tg::io;

namespace {

const std::string kScript = std::string(TG_IO_TEST_DIR) + "/safetensors_interop.py";

// The formula the Python script uses too: v[i] = ((i * 37) % 101) / 8 - 6 + offset (exact in float).
std::vector<float> values(int64_t n, float offset = 0.f) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    v[static_cast<size_t>(i)] = static_cast<float>((i * 37) % 101) / 8.f - 6.f + offset;
  return v;
}

}  // namespace

TEST_CASE("safetensors.interop.python_writes_we_read") {
  if (!testing::python_can_import("numpy")) TG_SKIP(testing::python_lacks("numpy", "python3-numpy"));
  const std::string path = testing::scratch("from_python.safetensors");
  REQUIRE(std::system((testing::python() + " " + kScript + " write " + path).c_str()) == 0);
  const TensorFile f = read_safetensors(path);
  CHECK(f.metadata == Metadata{{"source", "python"}, {"note", "h\xc3\xa9llo"}});
  CHECK(f.tensors.size() == 5);
  REQUIRE(f.find("encoder.weight"));
  CHECK(f.find("encoder.weight")->shape() == Shape{3, 4});
  CHECK(f.find("encoder.weight")->to_vector() == values(12));
  CHECK(f.find("encoder.bias")->to_vector() == values(4, 1.f));
  CHECK(f.find("half")->shape() == Shape{2, 3});
  CHECK(f.find("half")->to_vector() == values(6, 0.5f));
  CHECK(f.find("double")->to_vector() == values(5, 2.f));
  CHECK(f.find("scalar")->shape() == Shape{});
  CHECK(f.find("scalar")->item() == values(1, 3.f)[0]);
}

TEST_CASE("safetensors.interop.we_write_python_reads") {
  if (!testing::python_can_import("numpy")) TG_SKIP(testing::python_lacks("numpy", "python3-numpy"));
  const std::string path = testing::scratch("from_cpp.safetensors");
  write_safetensors(path,
                    {{"w", Tensor::from_data({2, 3}, values(6))},
                     {"b", Tensor::from_data({3}, values(3, 1.f))},
                     {"s", Tensor::from_data({}, values(1, 3.f))}},
                    {{"source", "c++"}, {"vocab", "[\"<pad>\",\"\xc3\xa9t\xc3\xa9\"]"}});
  CHECK(std::system((testing::python() + " " + kScript + " check " + path + " >/dev/null").c_str()) == 0);

  // And the checker really checks: a file with one wrong value fails it.
  std::vector<float> wrong = values(6);
  wrong[4] += 1.f;
  write_safetensors(path,
                    {{"w", Tensor::from_data({2, 3}, wrong)},
                     {"b", Tensor::from_data({3}, values(3, 1.f))},
                     {"s", Tensor::from_data({}, values(1, 3.f))}},
                    {{"source", "c++"}, {"vocab", "[\"<pad>\",\"\xc3\xa9t\xc3\xa9\"]"}});
  CHECK(std::system((testing::python() + " " + kScript + " check " + path + " 2>/dev/null").c_str()) != 0);
}

namespace {
std::string run_python(const std::string& args) {
  const std::string out = testing::scratch("python_out.txt");
  if (std::system((testing::python() + " " + kScript + " " + args + " >" + out).c_str()) != 0)
    return "FAILED";
  return testing::read_bytes(out);
}

// Saves a freshly initialised model (weights from `seed`) as a checkpoint in the scratch directory,
// with vocabularies of the four special tokens followed by the given words; returns its path.
std::string save_untrained(const nn::TransformerConfig& c, uint64_t seed, std::vector<std::string> src_words,
                           std::vector<std::string> tgt_words, const std::string& name) {
  const auto vocab = [](std::vector<std::string> words) {
    words.insert(words.begin(), {"<pad>", "<bos>", "<eos>", "<unk>"});
    return nn::Vocab::from_tokens(words);
  };
  nn::Transformer model(c, seed);
  nn::CheckpointInfo info;
  info.config = c;
  info.src = nn::vocab_tokenizer(nn::TokenizerKind::word, vocab(std::move(src_words)));
  info.tgt = nn::vocab_tokenizer(nn::TokenizerKind::word, vocab(std::move(tgt_words)));
  const std::string path = testing::scratch(name);
  nn::save_checkpoint(path, model, info);
  return path;
}
}  // namespace

TEST_CASE("checkpoint.interop.torch_state_dict_loads_here") {
  if (!testing::python_can_import("torch")) TG_SKIP(testing::python_lacks("torch", "python3-torch"));
  const std::string path = testing::scratch("torch_model.safetensors");
  const std::string value = run_python("torch-checkpoint " + path);
  REQUIRE(value != "FAILED");
  const nn::Checkpoint ck = nn::read_checkpoint(path);
  CHECK(ck.info.config.enc_layers == 2);
  nn::Transformer model(ck.info.config, 0);
  nn::load_weights(model, ck.file, path);  // every name and shape matches, none left over
  const Tensor w = model.parameter("transformer.decoder.layers.0.multihead_attn.in_proj_weight");
  CHECK(w.at({5, 3}) == doctest::Approx(std::stod(value)).epsilon(1e-6));
}

TEST_CASE("checkpoint.interop.ours_loads_into_torch_strict") {
  if (!testing::python_can_import("torch")) TG_SKIP(testing::python_lacks("torch", "python3-torch"));
  nn::TransformerConfig c;
  c.src_vocab = 6, c.tgt_vocab = 5;
  c.d_model = 8, c.heads = 2, c.d_ff = 12, c.enc_layers = 1, c.dec_layers = 2, c.max_len = 16;
  const std::string path = save_untrained(c, 3, {"a", "b"}, {"x"}, "ours.safetensors");
  CHECK(run_python("torch-load " + path) == "ok\n");
}

namespace {

// tools/torch_eval.py's loss and token count on `data` against `translate eval --model path` (with
// `eval_options`): float32 on both sides over a few hundred products, agreement to ~1e-6 relative.
void check_torch_eval_matches_translate_eval(const std::string& path, const std::string& data,
                                             const std::string& eval_options) {
  using namespace testing::cli;
  const Run ours = translate("eval --model " + path + " --data " + data + eval_options + " --json");
  INFO("eval stderr: ", ours.err);
  REQUIRE(ours.status == 0);
  const std::string out = testing::scratch("torch_eval_out.txt");
  const std::string cmd =
      testing::python() + " " + TG_SOURCE_DIR "/tools/torch_eval.py " + path + " " + data + " >" + out;
  REQUIRE(std::system(cmd.c_str()) == 0);
  const json::Json want = json::parse(ours.out), got = json::parse(testing::read_bytes(out));
  CHECK(got.at("tokens").get<int64_t>() == want.at("tokens").get<int64_t>());
  CHECK(got.at("loss").get<double>() == doctest::Approx(want.at("loss").get<double>()).epsilon(1e-5));
}

}  // namespace

// nn/checkpoint.md's forward pass, as tools/torch_eval.py runs it in PyTorch (one sentence at a
// time, no padding), gives `translate eval`'s loss (batches of 4, padded): the document is complete
// enough to reproduce the model elsewhere. Both layer orders and activations; unknown words too;
// a pair longer than the model's positions is left out by both (nn/checkpoint.md, step 2).
TEST_CASE("checkpoint.interop.torch_eval_matches_translate_eval") {
  if (!testing::python_can_import("torch")) TG_SKIP(testing::python_lacks("torch", "python3-torch"));
  using namespace testing::cli;
  if (!have_cli()) return;
  std::string too_long;  // 40 source tokens, max_len 32
  for (int i = 0; i < 40; ++i) too_long += "a ";
  const std::string data =
      testing::write_bytes("torch_eval.tsv", "a b b a\tx y\nb\tx x y x\na zz a b b\ty\n" + too_long +
                                                 "\tx\nb a\tx q y\n\nb b b b b b\ty y y x\n");
  for (const bool norm_first : {false, true}) {
    INFO("norm_first ", norm_first);
    nn::TransformerConfig c;
    c.src_vocab = c.tgt_vocab = 6;
    c.d_model = 16, c.heads = 4, c.d_ff = 24, c.enc_layers = c.dec_layers = 2, c.max_len = 32;
    c.norm_first = norm_first, c.activation = norm_first ? "gelu" : "relu";
    const std::string path = save_untrained(c, 5, {"a", "b"}, {"x", "y"}, "torch_eval.safetensors");

    check_torch_eval_matches_translate_eval(path, data, " --batch-size 4");
  }
}

// The same for a --tokenizer spm checkpoint: tools/torch_eval.py encodes with the SentencePiece
// models kept in the metadata (src_spm, tgt_spm) instead of vocabularies it does not have.
TEST_CASE("checkpoint.interop.torch_eval_matches_translate_eval_spm") {
  if (!testing::python_can_import("torch")) TG_SKIP(testing::python_lacks("torch", "python3-torch"));
  if (!testing::python_can_import("sentencepiece"))
    TG_SKIP(testing::python_lacks("sentencepiece", "python3-sentencepiece"));
  using namespace testing::cli;
  if (!have_cli()) return;
  const std::string path = testing::scratch("torch_eval_spm.safetensors");
  const Run trained = translate("train --data " + tiny_data() + " --out " + path + " " + kTinyModel +
                                " --tokenizer spm --vocab-size 275 --steps 2 --threads 1");
  INFO("train stderr: ", trained.err);
  REQUIRE(trained.status == 0);
  // Capitals and a character the training text never had: byte pieces on both sides.
  const std::string data = testing::write_bytes("torch_eval_spm.tsv", "a b c\tc b a\nA B\th \xc3\xa9 g\n");
  check_torch_eval_matches_translate_eval(path, data, "");
}
