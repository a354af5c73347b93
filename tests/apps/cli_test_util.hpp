// Helpers for the tests that run the programs (tests/apps, and tests/io/test_interop.cpp): their
// paths, running one and reading what it printed and wrote, small data for them. The test files
// compile as unity builds (meson.build: test_opts), so what several of them need is defined here,
// once: two files' own definitions of one name would clash.
#pragma once

#include <doctest/doctest.h>
#include <sys/wait.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/json.hpp"
#include "tests/skip.hpp"
#include "tests/test_files.hpp"

namespace tg::testing::cli {

inline const std::string kTranslate = TG_TRANSLATE;
// translate with a fault injector (apps/translate_with_faults.cpp): TAPEGRAD_TEST_INJECT_NAN.
inline const std::string kTranslateWithFaults = TG_TRANSLATE_WITH_FAULTS;
// The language-model CLI (apps/lm.cpp), and with the fault injector (apps/lm_with_faults.cpp).
inline const std::string kLm = TG_LM;
inline const std::string kLmWithFaults = TG_LM_WITH_FAULTS;
// The attention walkthrough (apps/attention_walkthrough.cpp) and the log plotter (apps/plot_log.cpp).
inline const std::string kWalkthrough = TG_WALKTHROUGH;
inline const std::string kPlotLog = TG_PLOT_LOG;

// Whether this build runs under AddressSanitizer (CI's second suite): the programs under test are
// built the same way and run 10-20x slower (the interrupted copy-task case trains a smaller batch
// there), and they reserve terabytes of address space (no address-space limit: test_faults.cpp).
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif

struct Run {
  int status = -1;
  std::string out, err;
  // Files the run created or changed in the scratch directory or the working directory (where a
  // relative --out lands): a failed run must write nothing.
  std::vector<std::string> written;
};

// The regular files of the scratch and the working directory (not recursive), with their size
// and modification time: what a run wrote shows as a new or changed entry.
inline std::map<std::string, std::pair<uintmax_t, std::filesystem::file_time_type>> files_here() {
  std::map<std::string, std::pair<uintmax_t, std::filesystem::file_time_type>> files;
  for (const auto& dir : {scratch_dir(), std::filesystem::current_path()}) {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec))
      if (e.is_regular_file(ec)) files[e.path().string()] = {e.file_size(ec), e.last_write_time(ec)};
  }
  return files;
}

// Runs `<prefix><program> <args>` through sh with stdin from `input`, capturing stdout and
// stderr. `prefix` can set environment variables or limits ("ulimit -f 16; ").
inline Run run_program(const std::string& program, const std::string& args, const std::string& input,
                       const std::string& prefix) {
  const std::string in = write_bytes("cli_stdin.txt", input);
  const std::string out = scratch("cli_stdout.txt"), err = scratch("cli_stderr.txt");
  const std::string cmd = prefix + program + " " + args + " <" + in + " >" + out + " 2>" + err;
  const auto before = files_here();
  const int rc = std::system(cmd.c_str());
  Run r;
  r.status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  r.out = read_bytes(out);
  r.err = read_bytes(err);
  for (const auto& [path, stamp] : files_here()) {
    auto it = before.find(path);
    if (path != out && path != err && (it == before.end() || it->second != stamp)) r.written.push_back(path);
  }
  return r;
}

inline Run translate(const std::string& args, const std::string& input = "", const std::string& prefix = "") {
  return run_program(kTranslate, args, input, prefix);
}

// lm with `args` (prefix: environment assignments before the command).
inline Run lm(const std::string& args, const std::string& prefix = "") {
  return run_program(kLm, args, "", prefix);
}

// lm sample's streamed output (token by token, nn::TextStream) is the prompt, the text its --json
// run reports and a newline: `sample` is the command without --json (a seed or --temperature 0),
// `prompt` its --prompt. --json writes each byte of invalid UTF-8, which a random model emits, as
// U+FFFD, so both sides are compared that way.
inline void check_streamed_sample_is_the_text(const std::string& sample, const std::string& prompt) {
  using Json = nlohmann::json;
  const Run streamed = lm(sample), whole = lm(sample + " --json");
  INFO("stderr: ", streamed.err, whole.err);
  REQUIRE(streamed.status == 0);
  REQUIRE(whole.status == 0);
  const auto replaced = [](const std::string& text) {
    return Json(text).dump(-1, ' ', false, Json::error_handler_t::replace);
  };
  CHECK(replaced(streamed.out) ==
        replaced(prompt + Json::parse(whole.out)["text"].get<std::string>() + "\n"));
}

// Whether `program` is on PATH (the renderers and tools some cases use; SKIPPED without them).
inline bool have_program(const std::string& program) {
  return std::system(("command -v " + program + " >/dev/null 2>&1").c_str()) == 0;
}

// translate_with_faults, with `faults` set in TAPEGRAD_TEST_INJECT_NAN ("5:generator.bias").
inline Run translate_with_faults(const std::string& faults, const std::string& args) {
  return run_program(kTranslateWithFaults, args, "", "TAPEGRAD_TEST_INJECT_NAN=" + faults + " ");
}

// "a, b" for a failure message.
inline std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s.empty() ? "nothing" : s;
}

// Whether the translate CLI is built; when it is not, the calling test case is marked SKIPPED
// (tests/skip.hpp) and must return: `if (!have_cli()) return;` first thing in the case.
inline bool have_cli() {
  if (std::filesystem::exists(kTranslate)) return true;
  skip_test_case(kTranslate + " is not built (meson configure -Dapps=true)");
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

// A usage error: exit 2, the message, the usage line, and no file written.
#define CHECK_USAGE_ERROR(args, text)                                       \
  do {                                                                      \
    const Run r_ = translate(args);                                         \
    INFO("stderr: ", r_.err);                                               \
    CHECK(r_.status == 2);                                                  \
    CHECK(r_.err.find(text) != std::string::npos);                          \
    CHECK(r_.err.find("usage: translate") != std::string::npos);            \
    CHECK_MESSAGE(r_.written.empty(), "files written: ", join(r_.written)); \
  } while (0)

}  // namespace tg::testing::cli
