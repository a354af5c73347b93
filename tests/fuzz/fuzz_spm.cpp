// libFuzzer target: SentencePiece model bytes through SpmTokenizer::from_model, encode and decode
// (fuzz_inputs.hpp). Built and run by tools/fuzz.sh.
#include "fuzz_inputs.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tg::fuzz::spm_input({reinterpret_cast<const char*>(data), size});
  return 0;
}
