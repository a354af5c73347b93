// libFuzzer target: the TSV reader, tokenizers and batching (fuzz_inputs.hpp).
// Built and run by tools/fuzz.sh.
#include "fuzz_inputs.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tg::fuzz::tsv_input({reinterpret_cast<const char*>(data), size});
  return 0;
}
