// Every fuzzer seed and every input that once made a fuzzer fail (tests/fuzz/corpus/<target>/,
// tests/fuzz/regressions/<target>/) run through the same code as the libFuzzer targets, so the
// regular and the ASan test suites keep them fixed without clang or libFuzzer.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "../fuzz/fuzz_inputs.hpp"
#include "io_test_util.hpp"

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
    // Every seed is a valid safetensors file; the two checkpoint seeds also load as models.
    CHECK_NOTHROW(tg::io::parse_safetensors(
        {reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size()}, p.string()));
    checkpoints +=
        tg::fuzz::safetensors_input({reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size()});
  }
  CHECK(checkpoints == 2);
}

TEST_CASE("fuzz.regressions.safetensors") {
  for (const auto& p : inputs("regressions", "safetensors")) {
    INFO(p.string());
    const std::string bytes = tg::testing::read_bytes(p.string());
    // Each of these once crashed or tripped a sanitizer; now they are clean errors.
    CHECK_FALSE(
        tg::fuzz::safetensors_input({reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size()}));
  }
}

TEST_CASE("fuzz.corpus_and_regressions.tsv") {
  const auto seeds = inputs("corpus", "tsv");
  REQUIRE(seeds.size() >= 3);
  for (const auto& kind : {"corpus", "regressions"})
    for (const auto& p : inputs(kind, "tsv")) {
      INFO(p.string());
      tg::fuzz::tsv_input(tg::testing::read_bytes(p.string()));
    }
  CHECK(tg::fuzz::tsv_input(tg::testing::read_bytes((fs::path(TG_FUZZ_DIR) / "corpus/tsv/basic").string())) ==
        2);
}
