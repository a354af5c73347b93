// The test seams of translate_with_faults and lm_with_faults (never installed): faults described
// in the environment reach the training loop through its API (train::LoopOptions::fault); the
// shipped programs read no test hook.
//
//   TAPEGRAD_TEST_INJECT_NAN="STEP[:NAME]"  at optimizer step STEP (1-based) the gradient of
//                                           parameter NAME becomes NaN ("loss": the loss; no NAME:
//                                           the last parameter)
//   TAPEGRAD_TEST_INTERRUPT="STEP"          SIGINT is raised during step STEP (as Ctrl-C would be)
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <string>

#include "train/loop.hpp"

namespace tg::testing {

// main_fn(argc, argv, fault) with the faults of the environment (none when unset); a malformed
// value prints a message naming `program` and returns 2.
template <class Main>
int with_fault_from_env(int argc, char** argv, const char* program, Main main_fn) {
  auto step_of = [](const std::string& s, size_t end) {
    char* stop = nullptr;
    const long long step = std::strtoll(s.c_str(), &stop, 10);
    return stop == s.c_str() + end && step >= 1 ? step : 0;
  };
  train::FaultInjector nan, interrupt;
  if (const char* spec = std::getenv("TAPEGRAD_TEST_INJECT_NAN"); spec && *spec) {
    const std::string s = spec;
    const size_t colon = s.find(':');
    const long long step = step_of(s, std::min(colon, s.size()));
    if (step == 0) {
      fmt::print(stderr, "{}: TAPEGRAD_TEST_INJECT_NAN must be STEP[:NAME], got '{}'\n", program, s);
      return 2;
    }
    nan = train::inject_nan(step, colon == std::string::npos ? "" : s.substr(colon + 1));
  }
  if (const char* spec = std::getenv("TAPEGRAD_TEST_INTERRUPT"); spec && *spec) {
    const std::string s = spec;
    const long long step = step_of(s, s.size());
    if (step == 0) {
      fmt::print(stderr, "{}: TAPEGRAD_TEST_INTERRUPT must be STEP, got '{}'\n", program, s);
      return 2;
    }
    interrupt = [step](int64_t at, nn::Optimizer&, float&) {
      if (at == step) std::raise(SIGINT);
    };
  }
  train::FaultInjector fault;
  if (nan || interrupt)
    fault = [nan, interrupt](int64_t step, nn::Optimizer& opt, float& loss) {
      if (nan) nan(step, opt, loss);
      if (interrupt) interrupt(step, opt, loss);
    };
  return main_fn(argc, argv, fault);
}

}  // namespace tg::testing
