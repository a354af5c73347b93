// translate with a fault injector, for the fault tests only (tests/io/test_faults.cpp,
// tests/mpi/mpi_train.sh, tools/leak_check.sh); never installed. The shipped translate reads no
// test hook: the injector reaches the training loop through its API (train::LoopOptions::fault).
//
//   TAPEGRAD_TEST_INJECT_NAN="STEP[:NAME]" translate_with_faults train ...
//
// makes the gradient of parameter NAME NaN at optimizer step STEP (NAME "loss": the loss; no
// NAME: the last parameter, generator.bias). Everything else is translate.
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "translate_commands.hpp"

int main(int argc, char** argv) {
  tg::train::FaultInjector fault;
  if (const char* spec = std::getenv("TAPEGRAD_TEST_INJECT_NAN"); spec && *spec) {
    const std::string s = spec;
    const size_t colon = s.find(':');
    char* end = nullptr;
    const long long step = std::strtoll(s.c_str(), &end, 10);
    if (end != s.c_str() + std::min(colon, s.size()) || step < 1) {
      fmt::print(stderr, "translate_with_faults: TAPEGRAD_TEST_INJECT_NAN must be STEP[:NAME], got '{}'\n",
                 s);
      return 2;
    }
    fault = tg::train::inject_nan(step, colon == std::string::npos ? "" : s.substr(colon + 1));
  }
  return translate::main(argc, argv, fault);
}
