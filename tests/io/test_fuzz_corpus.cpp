// Every fuzzer seed and every input that once made a fuzzer fail (tests/fuzz/corpus/<target>/,
// tests/fuzz/regressions/<target>/) run through the same code as the libFuzzer targets, so the
// regular and the ASan test suites keep them fixed without clang or libFuzzer.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "../fuzz/fuzz_inputs.hpp"
#include "tests/test_files.hpp"

namespace {

namespace fs = std::filesystem;

std::vector<fs::path> inputs(const std::string& kind, const std::string& target) {
  std::vector<fs::path> files;
  const fs::path dir = fs::path(TG_FUZZ_DIR) / kind / target;
  if (fs::is_directory(dir))
    for (const auto& e : fs::directory_iterator(dir))
      if (e.is_regular_file() && e.path().filename() != "README.md") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

TEST_CASE("fuzz.corpus.safetensors_seeds_load") {
  const auto seeds = inputs("corpus", "safetensors");
  REQUIRE(seeds.size() >= 4);
  int checkpoints = 0;
  for (const auto& p : seeds) {
    INFO(p.string());
    const std::string bytes = tg::testing::read_bytes(p.string());
    // Every seed is a valid safetensors file; the four checkpoint seeds also load as models (a
    // translate checkpoint with word vocabularies, weights only and with the optimizer's state; one
    // with a joint SentencePiece model; an lm training checkpoint with its own).
    CHECK_NOTHROW(tg::io::parse_safetensors(
        {reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size()}, p.string()));
    checkpoints +=
        tg::fuzz::safetensors_input({reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size()});
  }
  CHECK(checkpoints == 4);
}

TEST_CASE("fuzz.regressions.safetensors") {
  const auto regressions = inputs("regressions", "safetensors");
  REQUIRE(regressions.size() >= 3);  // an empty or moved directory must not pass
  for (const auto& p : regressions) {
    INFO(p.string());
    const std::string bytes = tg::testing::read_bytes(p.string());
    // Each of these once crashed or tripped a sanitizer; now they are clean errors.
    CHECK_FALSE(
        tg::fuzz::safetensors_input({reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size()}));
  }
}

TEST_CASE("fuzz.corpus_and_regressions.tsv") {
  // Pairs read from each seed without skipping bad lines (0: rejected) and with skipping, counted
  // by hand from the files: BOM, CRLF and blank lines are not pairs; bad_lines has one good line
  // among a missing tab, empty sides, three fields, invalid UTF-8 and an encoded surrogate.
  const std::map<std::string, std::pair<size_t, size_t>> pairs = {
      {"basic", {2, 2}}, {"bom_crlf_blank", {3, 3}}, {"utf8", {2, 2}}, {"bad_lines", {0, 1}}};
  const auto seeds = inputs("corpus", "tsv");
  REQUIRE(seeds.size() == pairs.size());
  for (const auto& p : seeds) {
    INFO(p.string());
    const std::string text = tg::testing::read_bytes(p.string());
    REQUIRE(pairs.count(p.filename().string()) == 1);
    const auto [strict, skipping] = pairs.at(p.filename().string());
    CHECK(tg::fuzz::tsv_input(text) == strict);
    CHECK(tg::io::parse_tsv(text, p.string(), true).size() == skipping);
  }
  for (const auto& p : inputs("regressions", "tsv")) {  // none yet: each must not crash or trap
    INFO(p.string());
    tg::fuzz::tsv_input(tg::testing::read_bytes(p.string()));
  }
}

TEST_CASE("fuzz.corpus_and_regressions.spm") {
  // The seeds are two small models (nn/tokenizers/spm.hpp: unigram, lm layout; BPE, translate
  // layout; vocabulary 400, trained on the first 12 KB of the licence texts); both load.
  const auto seeds = inputs("corpus", "spm");
  REQUIRE(seeds.size() == 2);
  for (const auto& p : seeds) {
    INFO(p.string());
    CHECK(tg::fuzz::spm_input(tg::testing::read_bytes(p.string())));
  }
  for (const auto& p : inputs("regressions", "spm")) {  // each must not crash or trap
    INFO(p.string());
    tg::fuzz::spm_input(tg::testing::read_bytes(p.string()));
  }
  // A model whose UNKNOWN piece (2, "<ukn>") is not its trainer spec's unk_piece ("<unk>", a normal
  // piece), so the library's unk id is -1: it loaded, its unknown text encoded as id -1, which decode
  // refused (an exception the fuzz target did not expect). Refused.
  const std::string unk = tg::testing::read_bytes(
      (fs::path(TG_FUZZ_DIR) / "regressions" / "spm" / "model_unk_id_not_its_unknown_piece").string());
  CHECK_THROWS_WITH_AS(tg::nn::SpmTokenizer::from_model(unk, "fuzz.model"),
                       doctest::Contains("fuzz.model: not a usable SentencePiece model: its piece of type "
                                         "UNKNOWN is id 2, but the library's unk id (its trainer spec's "
                                         "unk_piece) is -1"),
                       tg::io::DataError);
}

TEST_CASE("fuzz.corpus_and_regressions.gpt2_bpe") {
  // What each seed loads as (fuzz_inputs.hpp): 1 vocab.json + merges.txt, 2 tokenizer.json, 4 an
  // exported char model's tokenizer.json, 0 refused; every one that loads is checked (round trip,
  // files and metadata read back).
  const std::map<std::string, int> loads = {
      {"trained_files", 1},       {"trained_tokenizer_json", 2},
      {"tiny_files", 1},          {"tiny_tokenizer_json", 2},
      {"bad_merges", 0},          {"bad_vocab_ids", 0},
      {"char_tokenizer_json", 4}, {"char_tokenizer_json_out_of_order", 0}};
  const auto seeds = inputs("corpus", "gpt2_bpe");
  REQUIRE(seeds.size() == loads.size());
  for (const auto& p : seeds) {
    INFO(p.string());
    REQUIRE(loads.count(p.filename().string()) == 1);
    CHECK(tg::fuzz::gpt2_bpe_input(tg::testing::read_bytes(p.string())) == loads.at(p.filename().string()));
  }
  for (const auto& p : inputs("regressions", "gpt2_bpe")) {  // each must not crash or trap
    INFO(p.string());
    tg::fuzz::gpt2_bpe_input(tg::testing::read_bytes(p.string()));
  }
}
