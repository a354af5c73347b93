// libFuzzer target: GPT-2's tokenizer files (vocab.json, merges.txt, tokenizer.json) and encoding
// with whatever loads (fuzz_inputs.hpp). Built and run by tools/fuzz.sh.
#include "fuzz_inputs.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tg::fuzz::gpt2_bpe_input({reinterpret_cast<const char*>(data), size});
  return 0;
}
