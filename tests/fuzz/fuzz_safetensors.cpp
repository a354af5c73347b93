// libFuzzer target: the safetensors loader and the checkpoint layer (fuzz_inputs.hpp).
// Built and run by tools/fuzz.sh.
#include "fuzz_inputs.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tg::fuzz::safetensors_input({data, size});
  return 0;
}
