// The rough edges a newcomer hit following the README (issue 30), each as the user met it: output
// names, an --out that cannot be written, messages, the toy-data script, the README's commands.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "tests/apps/cli_test_util.hpp"
#include "tests/test_files.hpp"

using namespace tg;
using namespace tg::testing::cli;

namespace {

bool exists(const std::string& path) {
  return std::filesystem::exists(path);
}

}  // namespace

TEST_CASE("ux.cli.out_without_extension_writes_out_last_safetensors") {
  if (!have_cli()) return;
  const std::string out = testing::scratch("mymodel");
  const Run r = translate("train --data " + tiny_data() + " --out " + out + " --steps 2 " + kTinyModel);
  INFO("stderr: ", r.err);
  REQUIRE(r.status == 0);
  CHECK(exists(out));
  CHECK(exists(out + ".last.safetensors"));  // the README's <out>.last.safetensors
  CHECK(!exists(out + ".last"));
  CHECK(r.out.find(out + ".last.safetensors") != std::string::npos);
}
