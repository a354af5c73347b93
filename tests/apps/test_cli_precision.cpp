// translate --precision: a bad value is a usage error naming the option; the precision is in the
// run header and every JSON progress line; checkpoints stay fp32, so a bf16 run resumes in fp32 and
// back.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "tests/apps/cli_test_util.hpp"
#include "tests/test_files.hpp"

using namespace tg;
using namespace tg::testing::cli;

TEST_CASE("cli.precision_option") {
  if (!have_cli()) return;
  const std::string d = "--data " + tiny_data() + " --out " + testing::scratch("p.safetensors");
  CHECK_USAGE_ERROR("train " + d + " --precision fp16", "--precision: must be one of fp32|bf16, got 'fp16'");
  CHECK_USAGE_ERROR("eval --model m --data d --precision half", "--precision: must be one of fp32|bf16");
  CHECK_USAGE_ERROR("decode --model m --precision", "--precision: needs a value");
  const Run help = translate("train --help");
  CHECK(help.out.find("--precision fp32|bf16") != std::string::npos);
}

// The precision each JSON line of a run reports (start, train and done lines).
std::vector<std::string> precisions(const std::string& out) {
  std::vector<std::string> v;
  for (const auto& j : json_lines(out))
    if (j.contains("precision"))
      v.push_back(j.at("event").get<std::string>() + ":" + j.at("precision").get<std::string>());
  return v;
}

TEST_CASE("cli.precision_resume_bf16_fp32_bf16") {
  if (!have_cli()) return;
  const std::string out = testing::scratch("prec.safetensors"),
                    last = testing::scratch("prec.last.safetensors");
  const std::string common = "train --data " + tiny_data() + " --out " + out + " " + kTinyModel +
                             " --log-every 2 --eval-every 2 --json --threads 1 --steps ";
  Run r = translate(common + "4 --precision bf16");
  INFO("stderr: ", r.err);
  REQUIRE(r.status == 0);
  CHECK(precisions(r.out) == std::vector<std::string>{"start:bf16", "train:bf16", "train:bf16", "done:bf16"});
  // The checkpoints hold fp32 tensors only: master weights and optimizer state are never bf16.
  for (const std::string& file : {out, last}) {
    const std::string bytes = testing::read_bytes(file);
    CHECK(bytes.find("\"F32\"") != std::string::npos);
    CHECK(bytes.find("\"BF16\"") == std::string::npos);
  }
  r = translate(common + "8 --resume --precision fp32");
  REQUIRE(r.status == 0);
  CHECK(losses(r.out).front().first == 6);
  CHECK(precisions(r.out) == std::vector<std::string>{"start:fp32", "train:fp32", "train:fp32", "done:fp32"});
  r = translate(common + "12 --resume --precision bf16");
  REQUIRE(r.status == 0);
  CHECK(losses(r.out).front().first == 10);
  CHECK(precisions(r.out) == std::vector<std::string>{"start:bf16", "train:bf16", "train:bf16", "done:bf16"});
  // Without --precision a resumed run is fp32 (the precision belongs to a run, not to the checkpoint).
  r = translate(common + "14 --resume");
  REQUIRE(r.status == 0);
  CHECK(precisions(r.out) == std::vector<std::string>{"start:fp32", "train:fp32", "done:fp32"});
  // Without a bf16 dot-product unit (the scalar kernels, in every build) the header says the
  // products stay fp32.
  r = translate("train --data " + tiny_data() + " --out " + testing::scratch("prec_scalar.safetensors") +
                    " " + kTinyModel + " --steps 1 --precision bf16",
                "", "TAPEGRAD_ARCH=scalar ");
  REQUIRE(r.status == 0);
  CHECK(r.out.find("; fp32 products (bf16 asked; no bf16 dot-product unit)") != std::string::npos);
  // eval reports its precision too.
  r = translate("eval --model " + out + " --data " + tiny_data() + " --json --precision bf16");
  REQUIRE(r.status == 0);
  CHECK(json_lines(r.out).at(0).at("precision").get<std::string>() == "bf16");
}
