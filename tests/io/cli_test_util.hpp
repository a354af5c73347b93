// Helpers for the tests that run the translate CLI (test_cli.cpp, test_faults.cpp).
#pragma once

#include <doctest/doctest.h>
#include <sys/wait.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "io/json.hpp"
#include "io_test_util.hpp"

namespace tg::testing::cli {

inline const std::string kTranslate = TG_TRANSLATE;

struct Run {
  int status = -1;
  std::string out, err;
};

// Runs `<prefix>translate <args>` through sh with stdin from `input`, capturing stdout and
// stderr. `prefix` can set environment variables or limits ("ulimit -f 16; ").
inline Run translate(const std::string& args, const std::string& input = "", const std::string& prefix = "") {
  const std::string in = write_bytes("cli_stdin.txt", input);
  const std::string out = scratch("cli_stdout.txt"), err = scratch("cli_stderr.txt");
  const std::string cmd = prefix + kTranslate + " " + args + " <" + in + " >" + out + " 2>" + err;
  const int rc = std::system(cmd.c_str());
  Run r;
  r.status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  r.out = read_bytes(out);
  r.err = read_bytes(err);
  return r;
}

inline bool have_cli() {
  if (std::filesystem::exists(kTranslate)) return true;
  MESSAGE("skipped: ", kTranslate, " is not built (examples disabled)");
  return false;
}

// A tiny task: reverse three letters, 240 pairs; written once.
inline std::string tiny_data() {
  static const std::string path = [] {
    std::string text;
    const char* letters = "abcdefgh";
    uint64_t x = 12345;
    for (int i = 0; i < 240; ++i) {
      std::string s[3];
      for (auto& w : s) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        w = std::string(1, letters[(x >> 33) % 8]);
      }
      text += s[0] + " " + s[1] + " " + s[2] + "\t" + s[2] + " " + s[1] + " " + s[0] + "\n";
    }
    return write_bytes("tiny.tsv", text);
  }();
  return path;
}

inline const std::string kTinyModel =
    "--d-model 16 --heads 2 --enc-layers 1 --dec-layers 1 --d-ff 32 --batch-size 16 --warmup 5";

inline std::vector<json::Json> json_lines(const std::string& out) {
  std::vector<json::Json> v;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) v.push_back(json::parse(line));
  return v;
}

// The logged training losses, by step.
inline std::vector<std::pair<int64_t, std::string>> losses(const std::string& out) {
  std::vector<std::pair<int64_t, std::string>> v;
  for (const auto& j : json_lines(out))
    if (j.at("event").get<std::string>() == "train")
      v.emplace_back(j.at("step").get<int64_t>(), j.at("loss").dump());
  return v;
}

#define CHECK_USAGE_ERROR(args, text)                            \
  do {                                                           \
    const Run r_ = translate(args);                              \
    INFO("stderr: ", r_.err);                                    \
    CHECK(r_.status == 2);                                       \
    CHECK(r_.err.find(text) != std::string::npos);               \
    CHECK(r_.err.find("usage: translate") != std::string::npos); \
  } while (0)

}  // namespace tg::testing::cli
