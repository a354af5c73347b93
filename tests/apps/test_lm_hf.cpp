// lm on Hugging Face GPT-2 folders, end to end (tests/apps/lm_hf_folder.py with the Hugging Face
// venv; SKIPPED where it cannot import transformers): a folder made with transformers (a byte-level
// BPE trained on the test's text, a random GPT2LMHeadModel) -> lm tokenize, sample (greedy), eval
// give transformers' ids, text and loss -> lm train --init-from fine-tunes it into an lm
// checkpoint -> lm export writes a folder that from_pretrained and AutoTokenizer load, with the
// same ids and loss as the checkpoint in lm; so do byte and char models' exports. And the errors lm
// gives for folders it cannot read.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "nn/family/gpt_family.hpp"
#include "tests/apps/cli_test_util.hpp"
#include "tests/python.hpp"
#include "tests/test_files.hpp"

using namespace tg;
using namespace tg::testing::cli;
using Json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

// Text with some Unicode, digits and contractions, for the tokenizer to learn and the model to read.
std::string hf_text() {
  static const std::string path = [] {
    const char* subjects[] = {"the cat", "a dog", "my friend", "l'ami", "she"};
    const char* verbs[] = {"sees", "likes", "finds", "isn't drawing", "keeps"};
    const char* objects[] = {"the ball", "3 red hats", "some bread", "the moon", "her café"};
    uint64_t x = 99;
    auto next = [&](uint64_t n) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      return (x >> 33) % n;
    };
    std::string text;
    while (text.size() < 6000)
      text += std::string(subjects[next(5)]) + " " + verbs[next(5)] + " " + objects[next(5)] + ".\n";
    return testing::write_bytes("hf_text.txt", text);
  }();
  return path;
}

const std::string kLines = "the cat sees the moon.\n\n  two  spaces, 42 digits\nshe isn't here: café ☕\n";

Json python(const std::string& mode, const std::string& dir) {
  const std::string lines = testing::write_bytes("hf_lines.txt", kLines),
                    out = testing::scratch("hf_ref.json");
  const std::string cmd = fmt::format("'{}' {}/tests/apps/lm_hf_folder.py {} {} {} {} {}",
                                      testing::hf_python(), TG_SOURCE_DIR, mode, dir, hf_text(), lines, out);
  REQUIRE_MESSAGE(std::system(cmd.c_str()) == 0, "failed: " << cmd);
  return Json::parse(testing::read_bytes(out));
}

// What lm says for the model at `model`: the ids of kLines, the greedy text, the eval loss.
struct Said {
  std::vector<std::vector<int>> ids;
  std::string greedy;
  double loss = NAN;
  int64_t tokens = 0;
};
Said ask_lm(const std::string& model) {
  Said s;
  Run r = run_program(kLm, "tokenize --model " + model, kLines, "");
  INFO("tokenize stderr: ", r.err);
  REQUIRE(r.status == 0);
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);) {
    std::istringstream ls(line);
    std::vector<int>& row = s.ids.emplace_back();
    for (int id; ls >> id;) row.push_back(id);
  }
  r = lm("sample --model " + model + " --prompt \"the cat\" --tokens 20 --temperature 0 --json");
  INFO("sample stderr: ", r.err);
  REQUIRE(r.status == 0);
  s.greedy = Json::parse(r.out)["text"].get<std::string>();
  // Streamed token by token (byte-level pieces, characters across tokens) as the whole text decodes.
  check_streamed_sample_is_the_text(
      "sample --model " + model + " --prompt \"the cat\" --tokens 50 --temperature 0", "the cat");
  r = lm("eval --model " + model + " --data " + hf_text() + " --block-size 32 --json");
  INFO("eval stderr: ", r.err);
  REQUIRE(r.status == 0);
  const Json e = Json::parse(r.out);
  s.loss = e["loss"].get<double>();
  s.tokens = e["tokens"].get<int64_t>();
  return s;
}

void check_same(const Said& ours, const Json& theirs) {
  CHECK(ours.ids == theirs["ids"].get<std::vector<std::vector<int>>>());
  CHECK(ours.greedy == theirs["greedy"].get<std::string>());
  CHECK(ours.tokens == theirs["tokens"].get<int64_t>());
  CHECK(std::abs(ours.loss - theirs["loss"].get<double>()) <= 1e-5 * theirs["loss"].get<double>());
  MESSAGE(fmt::format(
      "tokenizer {}: {} lines' ids equal; greedy \"{}\"; eval loss ours {:.7f}, transformers {:.7f}",
      theirs["tokenizer"].get<std::string>(), ours.ids.size(), ours.greedy, ours.loss,
      theirs["loss"].get<double>()));
}

}  // namespace

TEST_CASE("cli.lm.hf.folder_fine_tune_export") {
  if (!fs::exists(kLm)) TG_SKIP(kLm + " is not built (meson configure -Dapps=true)");
  if (!testing::hf_python_can_import("transformers")) TG_SKIP(testing::hf_python_lacks("transformers"));
  // A folder transformers made: lm reads it as transformers does.
  const std::string folder = testing::scratch("hf_folder");
  fs::create_directories(folder);
  const Json made = python("make", folder);
  check_same(ask_lm(folder), made);

  // Fine-tuning: an lm checkpoint with the gpt2 tokenizer and GPT-2's config fields.
  const std::string ft = testing::scratch("hf_ft.safetensors");
  Run r = lm("train --init-from " + folder + " --data " + hf_text() + " --out " + ft +
             " --steps 4 --block-size 16 --batch-size 4 --eval-every 4 --lr 1e-3 --json");
  INFO("train stderr: ", r.err);
  REQUIRE(r.status == 0);
  const nn::GptCheckpoint ck = nn::read_gpt_checkpoint(ft);
  CHECK(ck.info.tokenizer->kind() == "gpt2");
  CHECK(ck.info.config.activation == "gelu_new");
  CHECK(ck.info.config.block_size == 64);
  CHECK(ck.info.extra.at("train.window") == "16");
  CHECK_FALSE(ck.info.extra.contains("gpt2_vocab"));  // the tokenizer's key, not an extra
  CHECK(ck.file.metadata.at("config").find("\"activation\":\"gelu_new\"") != std::string::npos);

  // Exported, it is a folder transformers reads, with the checkpoint's ids, text and loss.
  const std::string exported = testing::scratch("hf_exported");
  r = lm("export --model " + ft + " --hf " + exported);
  INFO("export stderr: ", r.err);
  REQUIRE(r.status == 0);
  const Said tuned = ask_lm(ft);
  const Json checked = python("check", exported);
  check_same(tuned, checked);
  CHECK(tuned.loss < made["loss"].get<double>());  // it learned from the text
  CHECK(checked["tokenizer"] == "GPT2TokenizerFast");
  // And lm reads its own export back as the checkpoint it came from.
  const Said again = ask_lm(exported);
  CHECK(again.ids == tuned.ids);
  CHECK(again.greedy == tuned.greedy);
  CHECK(again.loss == doctest::Approx(tuned.loss).epsilon(1e-6));
}

// Folders lm cannot read, and models it cannot export: the message names the file and the key.
TEST_CASE("cli.lm.hf_folder_errors") {
  if (!fs::exists(kLm)) TG_SKIP(kLm + " is not built (meson configure -Dapps=true)");
  const std::string empty = testing::scratch("hf_empty");
  fs::create_directories(empty);
  Run r = lm("sample --model " + empty);
  CHECK(r.status == 1);
  CHECK(r.err.find(empty + ": no config.json: not a Hugging Face model folder") != std::string::npos);
  r = lm("train --init-from " + empty + " --data " + hf_text() + " --out " +
         testing::scratch("e.safetensors"));
  CHECK(r.status == 1);
  CHECK(r.err.find(empty + ": no config.json") != std::string::npos);
  // An spm model has no tokenizer transformers reads from a GPT-2 folder.
  const std::string spm = testing::scratch("hf_spm.safetensors");
  REQUIRE(lm("train --data " + hf_text() + " --out " + spm +
             " --tokenizer spm --vocab-size 300 --n-layer 1 --n-head 2 --n-embd 8 --block-size 8 --steps 1 "
             "--eval-every 1")
              .status == 0);
  r = lm("export --model " + spm + " --hf " + testing::scratch("hf_no"));
  CHECK(r.status == 2);
  CHECK(r.err.find("the model's tokenizer is spm: transformers has no tokenizer to read it") !=
        std::string::npos);
  CHECK_FALSE(fs::exists(testing::scratch("hf_no")));
}

// Models trained from scratch with the byte tokenizer (lm train's default) and the char tokenizer
// export too: the byte one as GPT-2's byte-level BPE with the 256 byte tokens and no merges, the char
// one as a BPE of its characters with no merges. transformers gives the checkpoint's ids, greedy
// text and loss, and lm reads the folder back as the checkpoint.
TEST_CASE("cli.lm.hf.from_scratch_models_export") {
  if (!fs::exists(kLm)) TG_SKIP(kLm + " is not built (meson configure -Dapps=true)");
  if (!testing::hf_python_can_import("transformers")) TG_SKIP(testing::hf_python_lacks("transformers"));
  // The char model must know every character of kLines.
  const std::string data =
      testing::write_bytes("hf_text_and_lines.txt", testing::read_bytes(hf_text()) + kLines);
  for (const std::string kind : {"byte", "char"}) {
    CAPTURE(kind);
    const std::string model = testing::scratch("hf_" + kind + ".safetensors");
    Run r = lm("train --data " + data + " --out " + model + " --tokenizer " + kind +
               " --n-layer 2 --n-head 2 --n-embd 32 --block-size 32 --batch-size 8 --steps 30 --warmup 3 "
               "--eval-every 30 --overwrite");
    INFO("train stderr: ", r.err);
    REQUIRE(r.status == 0);
    const std::string exported = testing::scratch("hf_" + kind + "_exported");
    r = lm("export --model " + model + " --hf " + exported);
    INFO("export stderr: ", r.err);
    REQUIRE(r.status == 0);
    CHECK(fs::exists(fs::path(exported) / "tokenizer.json"));
    const Said ours = ask_lm(model);
    REQUIRE(ours.ids.size() == 4);
    const std::string last = "she isn't here: café ☕";
    CHECK(ours.ids[3].size() == (kind == "byte" ? last.size() : 22));  // one id per byte / per character
    const Json checked = python("check", exported);
    check_same(ours, checked);
    CHECK(checked["tokenizer"] == (kind == "byte" ? "GPT2TokenizerFast" : "PreTrainedTokenizerFast"));
    const Said again = ask_lm(exported);
    CHECK(again.ids == ours.ids);
    CHECK(again.greedy == ours.greedy);
    CHECK(again.loss == doctest::Approx(ours.loss).epsilon(1e-6));
  }
}
