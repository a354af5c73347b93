// lm with a fault injector, for the fault tests only (tests/io/test_lm_cli.cpp); never installed.
//
//   TAPEGRAD_TEST_INJECT_NAN="STEP[:NAME]" lm_with_faults train ...
//   TAPEGRAD_TEST_INTERRUPT="STEP" lm_with_faults train ...
//
// makes the gradient of parameter NAME NaN at optimizer step STEP (NAME "loss": the loss; no NAME:
// the last parameter, transformer.ln_f.bias), or raises SIGINT during step STEP
// (apps/fault_env.hpp). Everything else is lm.
#include "apps/fault_env.hpp"
#include "lm_commands.hpp"

int main(int argc, char** argv) {
  return tg::testing::with_fault_from_env(argc, argv, "lm_with_faults", lm::main);
}
