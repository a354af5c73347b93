// The main of every test binary: doctest, plus what doctest 2.4 lacks, a runtime skip
// (tests/skip.hpp). A listener follows each test case; after the run this prints
//   [tapegrad] SKIPPED: <case>: <reason>        for every skipped case (doctest counts it as passed)
//   [tapegrad] FAILED: <case>: ran no checks    a case that returned without checking or skipping
//   [tapegrad] FAILED: <case>: skipped after 3 checks   (a skip must come first: split the case)
//   [tapegrad] test cases: 12 ran: 10 passed, 2 skipped, 0 failed
// and exits 77 (meson's SKIP) when every case that ran was skipped, 1 when no case ran at all (a
// filter that matches nothing) or one of the rules above failed, otherwise doctest's status.
// doctest's own summary line, printed before, counts a skipped case as passed (and its "skipped"
// column counts the cases a --test-case filter left out): the [tapegrad] line is the true count.
// TAPEGRAD_TEST_RESULTS=DIR: one JSON line per case in DIR/<binary>.<pid>.jsonl, read by
// tools/check_test_results.py.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/skip.hpp"

namespace {

struct Outcome {
  std::string name;
  std::string result;  // passed | failed | skipped
  std::string reason;  // why skipped, or why a doctest pass is a failure here
  int checks = 0;
  double seconds = 0;
};

struct State {
  bool in_case = false;
  std::string name;
  bool skipped = false;
  std::string reason;
  std::vector<Outcome> outcomes;
};

State& state() {
  static State s;
  return s;
}

class SkipListener : public doctest::IReporter {
 public:
  explicit SkipListener(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats&) override {}
  void test_case_start(const doctest::TestCaseData& tc) override {
    State& s = state();
    s.in_case = true, s.name = tc.m_name, s.skipped = false, s.reason.clear();
  }
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats& st) override {
    State& s = state();
    Outcome o;
    o.name = s.name;
    o.checks = st.numAssertsCurrentTest;
    o.seconds = st.seconds;
    if (!st.testCaseSuccess) {
      o.result = "failed";
      o.reason = s.skipped ? "failed, then skipped: " + s.reason : "";
    } else if (s.skipped && st.numAssertsCurrentTest > 0) {
      o.result = "failed";
      o.reason = "skipped after " + std::to_string(st.numAssertsCurrentTest) +
                 " checks (skip before the first check, or split the case): " + s.reason;
    } else if (s.skipped) {
      o.result = "skipped";
      o.reason = s.reason;
    } else if (st.numAssertsCurrentTest == 0) {
      o.result = "failed";
      o.reason = "ran no checks (a case that cannot run here must say so with TG_SKIP, tests/skip.hpp)";
    } else {
      o.result = "passed";
    }
    s.outcomes.push_back(std::move(o));
    s.in_case = false;
  }
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// One line per case: {"binary": ..., "case": ..., "result": ..., "reason": ..., "checks": N, "seconds": S}
void write_results(const char* dir, const std::string& binary) {
  namespace fs = std::filesystem;
  fs::create_directories(dir);
  const fs::path path =
      fs::path(dir) / (fs::path(binary).filename().string() + "." + std::to_string(::getpid()) + ".jsonl");
  std::ofstream f(path);
  for (const Outcome& o : state().outcomes)
    f << "{\"binary\": " << json_string(binary) << ", \"case\": " << json_string(o.name)
      << ", \"result\": " << json_string(o.result) << ", \"reason\": " << json_string(o.reason)
      << ", \"checks\": " << o.checks << ", \"seconds\": " << o.seconds << "}\n";
  if (!f) throw std::runtime_error("cannot write " + path.string());
}

}  // namespace

REGISTER_LISTENER("tapegrad_skips", 1, SkipListener);

void tg::testing::skip_test_case(const std::string& reason) {
  State& s = state();
  if (!s.in_case) throw std::logic_error("TG_SKIP outside a test case");
  if (!s.skipped) s.skipped = true, s.reason = reason;
}

int main(int argc, char** argv) {
  doctest::Context context;
  context.applyCommandLine(argc, argv);
  const int status = context.run();
  if (context.shouldExit()) return status;  // --help, --list-test-cases, ...

  int passed = 0, skipped = 0, failed = 0, broken = 0;
  for (const Outcome& o : state().outcomes) {
    if (o.result == "skipped") {
      ++skipped;
      std::cout << "[tapegrad] SKIPPED: " << o.name << ": " << o.reason << '\n';
    } else if (o.result == "failed") {
      ++failed;
      if (!o.reason.empty()) {
        ++broken;
        std::cout << "[tapegrad] FAILED: " << o.name << ": " << o.reason << '\n';
      }
    } else {
      ++passed;
    }
  }
  const int ran = passed + skipped + failed;
  std::cout << "[tapegrad] test cases: " << ran << " ran: " << passed << " passed, " << skipped
            << " skipped, " << failed << " failed" << std::endl;
  if (const char* dir = std::getenv("TAPEGRAD_TEST_RESULTS"); dir && *dir) {
    try {
      write_results(dir, std::filesystem::absolute(argv[0]).lexically_normal().string());
    } catch (const std::exception& e) {
      std::cerr << "[tapegrad] TAPEGRAD_TEST_RESULTS: " << e.what() << '\n';
      return 1;
    }
  }
  if (status != 0) return status;
  if (broken > 0) return 1;
  if (ran == 0) {
    std::cout << "[tapegrad] FAILED: no test case ran (does the --test-case filter match any?)" << std::endl;
    return 1;
  }
  return skipped == ran ? 77 : 0;
}
