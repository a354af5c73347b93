// translate with a fault injector, for the fault tests only (tests/io/test_faults.cpp,
// tests/mpi/mpi_train.sh, tools/leak_check.sh); never installed.
//
//   TAPEGRAD_TEST_INJECT_NAN="STEP[:NAME]" translate_with_faults train ...
//
// makes the gradient of parameter NAME NaN at optimizer step STEP (NAME "loss": the loss; no
// NAME: the last parameter, generator.bias). Everything else is translate (apps/fault_env.hpp).
#include "apps/fault_env.hpp"
#include "translate_commands.hpp"

int main(int argc, char** argv) {
  return tg::testing::with_fault_from_env(argc, argv, "translate_with_faults", translate::main);
}
